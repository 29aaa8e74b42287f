"""What every command shares: the one-line error, tables, JSON, and the text forms of
cells, paths and ``NAME=VALUE`` options."""

from __future__ import annotations

import argparse
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from subzero.cells import Box, parse_cells
from subzero.errors import SubZeroError
from subzero.jsonio import json_default, strict_dumps

EXIT_USAGE = 2


class CliError(SubZeroError):
    """A bad command-line value."""


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one-line :class:`CliError` s.

    A value that starts with a minus and a digit (``--cells -1,2``, ``--box -3:4,0:2``,
    ``--max-disk -5``), or is ``-inf``, ``-infinity`` or ``-nan`` (``replay --set -inf``),
    is a value, never an option (no option of ours looks like a number), so the command
    takes it or names the bad value instead of saying "expected one argument".

    A parser whose :attr:`intermixed` is True takes its positionals between options too
    (``query r1 --method map backward``): plain argparse fills an optional positional
    from the first run of positionals only, and calls what follows unrecognized.
    """

    #: parse positionals given after options too (no subcommands below this parser)
    intermixed: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-(\.?\d|(inf|infinity|nan)$)",
                                                   re.IGNORECASE)
        self._intermixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if not self.intermixed or self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True  # argparse's intermixed parse calls back into this method
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise CliError(f"{self.prog}: {message}")


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def parse_assignments(items: Sequence[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for it in items or []:
        if "=" not in it or not it.split("=", 1)[0].strip():
            raise CliError(f"{what} {it!r}: expected NAME=VALUE")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def emit_json(obj: Any) -> None:
    """Print ``obj`` as ``--json`` output: strict JSON, a NaN or infinity as null."""
    print(json_text(obj))


def json_text(obj: Any) -> str:
    """``obj`` as indented strict JSON (numpy values as numbers, a NaN or infinity as null,
    anything else as its text), as ``--json`` prints it and output files hold it.

    >>> print(json_text({"cost": float("nan")}))
    {
      "cost": null
    }
    """
    return strict_dumps(obj, default=_json_default, indent=2)


def _json_default(o: Any) -> Any:
    try:
        return json_default(o)
    except TypeError:
        return str(o)


#: what each kind of output file may be called (``check_output``)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".pdf", ".svg", ".tif", ".tiff", ".webp")


def check_output(path: str, flag: str, suffixes: Sequence[str] | None = None) -> Path:
    """An output file the command can write, checked BEFORE any work: its folder exists
    and is writable, no folder is in the way, an existing file is writable, and its name
    ends in one of ``suffixes``. One-line :class:`CliError` naming ``flag`` otherwise.

    >>> check_output("/tmp/x.json", "--out", (".json",)).name
    'x.json'
    """
    if not str(path).strip():
        raise CliError(f"{flag} {path!r}: expected a file name")
    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        raise CliError(f"{flag} {path}: unsupported file type {p.suffix or '(none)'!r}; "
                       f"expected a name ending in {', '.join(suffixes)}")
    if p.is_dir():
        raise CliError(f"{flag} {path} is a folder; expected a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise CliError(f"{flag} {path}: folder {parent} does not exist")
    if not parent.is_dir():
        raise CliError(f"{flag} {path}: {parent} is a file, not a folder")
    if p.exists() and not _writable(p):
        raise CliError(f"{flag} {path}: the file is read-only; expected a writable file")
    if not p.exists() and not _writable(parent):
        raise CliError(f"{flag} {path}: folder {parent} is read-only; expected a writable "
                       "folder")
    return p


def _writable(p: Path) -> bool:
    """Whether ``p`` (a file or folder) can be written, tried for real (root passes
    ``os.access`` on read-only files; an immutable or read-only mount fails only on write)."""
    if not os.access(p, os.W_OK):
        return False
    try:
        if p.is_dir():
            probe = p / f".subzero-write-test.{os.getpid()}"
            probe.touch()
            probe.unlink()
        else:
            with open(p, "ab"):
                pass
    except OSError:
        return False
    return True


def write_failed(flag: str, path: str | os.PathLike, e: OSError) -> CliError:
    """The one-line error of an output that failed while being written."""
    return CliError(f"{flag} {path}: could not write it ({e.strerror or e})")


@contextmanager
def output_file(path: str | os.PathLike, flag: str) -> Iterator[Path]:
    """A temporary file beside ``path`` (same suffix, so writers pick the same format) to
    write the output to; renamed over ``path`` once the block ends, so a command killed
    while writing leaves ``path`` as it was. A failed write is one line naming ``flag``.

    >>> import tempfile; d = tempfile.mkdtemp()
    >>> with output_file(f"{d}/x.txt", "--out") as tmp:
    ...     _ = tmp.write_text("done")
    >>> open(f"{d}/x.txt").read(), sorted(os.listdir(d))
    ('done', ['x.txt'])
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp{target.suffix}")
    try:
        yield tmp
        os.replace(tmp, target)
    except OSError as e:
        raise write_failed(flag, path, e) from None
    finally:
        tmp.unlink(missing_ok=True)


def load_npy(path: str, flag: str, expected: str) -> np.ndarray:
    """The array in the ``.npy`` file ``path`` given as ``flag``; a folder, a missing or
    empty file, or one that is not a ``.npy`` array is one line naming it."""
    p = Path(path)
    if p.is_dir():
        raise CliError(f"{flag} {p} is a folder; expected a .npy file of {expected}")
    if not p.exists():
        raise CliError(f"{flag} {p}: no such file")
    if p.stat().st_size == 0:
        raise CliError(f"{flag} {p} is empty; expected a .npy file of {expected}")
    try:
        return np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CliError(f"{flag} {p}: not a .npy array ({msg})") from None


def cells_from_args(args: argparse.Namespace, shape: Sequence[int]) -> Any:
    """Cells given as exactly one of ``--cells``, ``--box`` or ``--cells-file``."""
    given = [x for x in (args.cells, args.cells_file, args.box) if x]
    if len(given) != 1:
        raise CliError("give exactly one of --cells, --cells-file or --box")
    if args.cells:
        return parse_cells(args.cells, shape)
    if args.box:
        return Box.parse(args.box, shape)
    return load_npy(args.cells_file, "--cells-file", "cells or a bool mask")


def add_changed_code_flag(parser: argparse.ArgumentParser) -> None:
    """``--allow-changed-code``: use operators whose code changed since the run (every
    answer that used such code says so)."""
    parser.add_argument(
        "--allow-changed-code", action="store_true",
        help="run operators whose code changed since the run anyway (answers that used it "
        "are marked); without it, a step that needs such an operator's code is refused")
