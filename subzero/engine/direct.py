"""Direct writes: chunk files written past the page cache (``O_DIRECT``), on writer threads.

Writing a file into the page cache costs CPU for every page (fresh pages, zeroed, copied
into), all the more where the host takes freed memory back (a virtual machine); written
with ``O_DIRECT`` it costs the device's time and almost no CPU. Read back, such a file
comes from the device rather than from memory, so a run writes this way only the arrays no
later stage of it reads (its tasks say ``direct``). ``benchmarks/bench_scale.py`` shows
the effect.

:func:`write_direct` hands a chunk file's pieces to this process's :class:`DirectWrites`
and returns the write's future; the task that wrote the chunk waits for its futures
before it returns (:func:`wait_written`), so its chunks are in place when its stage is
recorded.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Sequence

from subzero import settings
from subzero.pools import thread_pool

__all__ = ["DirectWrites", "write_direct", "wait_written", "DIRECT_ALIGN",
           "DIRECT_PENDING_BYTES", "DIRECT_BUFFERS", "DIRECT_MIN_BYTES", "DIRECT_WRITERS"]

#: the file system's block size that ``O_DIRECT`` writes are aligned and sized to
DIRECT_ALIGN = 4096
#: chunk files written past the page cache but not yet renamed into place, at most (a
#: writer waits for the oldest beyond it: the copies' memory stays bounded); room for a
#: few of the largest chunks keeps the device busy while tasks encode the next ones
DIRECT_PENDING_BYTES = settings.define(
    "DIRECT_PENDING_BYTES", 256 << 20, settings.size,
    "Bytes of chunk files waiting to be written past the page cache, at most; a writer "
    "waits beyond it, so that the copies' memory stays bounded.",
    benchmark="benchmarks/bench_scale.py", module=__name__)
#: aligned buffers a process keeps for its next direct writes (the largest ones): reused
#: memory rather than fresh pages the host zeroes
DIRECT_BUFFERS = settings.define(
    "DIRECT_BUFFERS", 4, int,
    "Aligned buffers a process keeps for its next direct writes (the largest ones).",
    benchmark="benchmarks/bench_scale.py", module=__name__)
#: a chunk file smaller than this goes to the page cache even when ``direct`` is asked: its
#: write's latency, which its task waits for, outweighs the page cache's cost; larger
#: chunks (those of the larger scales) gain from writing direct. Where the balance lies
#: depends on the device
DIRECT_MIN_BYTES = settings.define(
    "DIRECT_MIN_BYTES", 16 << 20, settings.size,
    "Chunk files smaller than this go to the page cache even in arrays written past it: "
    "the device's latency, which the task waits for, outweighs the page cache's cost.",
    benchmark="benchmarks/bench_scale.py", module=__name__)
#: threads writing chunk files past the page cache: a device takes a few writes at once
DIRECT_WRITERS = settings.define(
    "DIRECT_WRITERS", 2, int,
    "Threads of a process writing chunk files past the page cache.",
    benchmark="benchmarks/bench_scale.py", module=__name__)


class DirectWrites:
    """Chunk files written past the page cache (``O_DIRECT``), on writer threads.

    :meth:`submit` copies the chunk's bytes into an aligned buffer (from a pool: memory
    reused, not fresh), hands the write to a writer thread (which writes it, cuts the file
    to its length and renames it into place) and returns its future. At most
    :data:`DIRECT_PENDING_BYTES` of copies wait at a time, and a process keeps
    :data:`DIRECT_BUFFERS` buffers for the next ones. A file system that refuses
    ``O_DIRECT`` (tmpfs) gets an ordinary write, and is not asked again.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = 0  # bytes of copies not yet written
        self._free: list[mmap.mmap] = []
        self._refused: set[int] = set()  # st_dev of file systems without O_DIRECT

    def submit(self, tmp: Path, dest: Path, parts: Sequence[Any]) -> Future:
        """Write ``parts`` one after the other to ``tmp``, then rename it to ``dest``.

        Parameters
        ----------
        tmp
            The temporary file, in ``dest``'s folder (removed if the write fails).
        dest
            The chunk file.
        parts
            Buffers; copied before this returns, so the caller may release them.

        Returns
        -------
        concurrent.futures.Future
            The write's, done once ``dest`` is in place (or the write failed).
        """
        views = [memoryview(p).cast("B") for p in parts]
        n = sum(len(v) for v in views)
        size = max(DIRECT_ALIGN, -(-n // DIRECT_ALIGN) * DIRECT_ALIGN)
        with self._cond:
            while self._held and self._held + size > DIRECT_PENDING_BYTES:
                self._cond.wait()
            self._held += size
            buf = next((b for b in self._free if len(b) >= size), None)
            if buf is not None:
                self._free.remove(buf)
        if buf is None:
            buf = mmap.mmap(-1, max(size, 1 << 20))  # page-aligned, as O_DIRECT wants
        at = 0
        for v in views:
            buf[at:at + len(v)] = v
            at += len(v)
        del views
        buf[n:size] = bytes(size - n)  # the padding the cut removes
        return thread_pool("subzero-direct", DIRECT_WRITERS).submit(
            self._write, tmp, dest, buf, n, size)

    def _write(self, tmp: Path, dest: Path, buf: mmap.mmap, n: int, size: int) -> None:
        try:
            dev = os.stat(tmp.parent).st_dev
            fd = None
            if dev not in self._refused:
                try:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT,
                                 0o644)
                except OSError:  # EINVAL: this file system has no O_DIRECT
                    self._refused.add(dev)
            try:
                if fd is not None:
                    try:
                        _write_all(fd, memoryview(buf)[:size], tmp)
                        os.ftruncate(fd, n)
                    except OSError as e:
                        if e.errno != errno.EINVAL:
                            raise
                        self._refused.add(dev)  # opened, but refuses the write itself
                        closing, fd = fd, None
                        os.close(closing)
                    finally:
                        if fd is not None:
                            os.close(fd)
                if fd is None:
                    with open(tmp, "wb") as out:
                        out.write(memoryview(buf)[:n])
            except BaseException:
                tmp.unlink(missing_ok=True)  # a failed write leaves no stray file
                raise
            os.replace(tmp, dest)
        finally:
            with self._cond:
                self._free.append(buf)
                if len(self._free) > DIRECT_BUFFERS:  # keep the largest few
                    self._free.remove(min(self._free, key=len))
                self._held -= size
                self._cond.notify_all()


def _write_all(fd: int, data: memoryview, path: Path) -> None:
    """Write all of ``data`` to ``fd``: ``os.write`` may write less than it was given (a
    full disk, a call beyond 2 GB), and a chunk cut short must not be renamed into place."""
    at = 0
    while at < len(data):
        k = os.write(fd, data[at:])
        if k <= 0:
            raise OSError(errno.EIO, f"writing {path} stopped after {at} of {len(data)} bytes")
        at += k


_direct_writes = DirectWrites()


def write_direct(tmp: Path, dest: Path, parts: Sequence[Any]) -> Future | None:
    """Write a chunk file past the page cache, if it is large enough to gain from it.

    Parameters
    ----------
    tmp, dest, parts
        As in :meth:`DirectWrites.submit`.

    Returns
    -------
    concurrent.futures.Future or None
        The write's future; None, having written nothing, for a file smaller than
        :data:`DIRECT_MIN_BYTES` (the caller writes it through the page cache).
    """
    if sum(memoryview(p).nbytes for p in parts) < DIRECT_MIN_BYTES:
        return None
    return _direct_writes.submit(tmp, dest, parts)


def wait_written(futures: list[Any]) -> None:
    """Wait for the chunk writes ``futures`` and empty the list.

    Parameters
    ----------
    futures
        Futures of :func:`write_direct` (or :meth:`DirectWrites.submit`).

    Raises
    ------
    Exception
        The first write's error, once all have ended.

    Examples
    --------
    >>> done = []
    >>> wait_written(done); done
    []
    """
    first = None
    for fut in futures:
        e = fut.exception()
        if e is not None and first is None:
            first = e
    futures.clear()
    if first is not None:
        raise first
