"""Telling a full disk from a bug: a write refused for want of space, a quota or a writable
file system, wherever in a run it happened (in a Spark task, whose error reaches the driver
as text; in SQLite, which says "database or disk is full")."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from subzero.errors import NoSpaceError

#: what the file system says when it refuses a write for want of room or permission to write
CODES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
_TEXTS = ("No space left on device", "Disk quota exceeded", "Read-only file system",
          "database or disk is full", *(f"[Errno {c}]" for c in CODES))


def is_disk_full(e: BaseException | None) -> bool:
    """Whether ``e`` (or what caused it) is a write the file system refused: by its errno
    where it kept one, else by its text (a task's error crosses Spark as text).

    >>> is_disk_full(OSError(28, "No space left on device"))
    True
    >>> is_disk_full(RuntimeError("operator 'a' failed in chunk 0.0: OSError: [Errno 28] x"))
    True
    >>> is_disk_full(ValueError("bad"))
    False
    """
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno in CODES:
            return True
        if isinstance(e, (OSError, RuntimeError, sqlite3.Error)) and any(
                t in str(e) for t in _TEXTS):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def no_space(what: str, home: Path | str) -> NoSpaceError:
    """The one-line error for a refused write of ``what`` under ``home``."""
    return NoSpaceError(f"no space left on device while writing {what} under {home} (free "
                        "space there, e.g. 'subzero gc --failed', or choose another --home)")
