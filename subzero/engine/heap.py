"""Keeping freed memory in the process while a driver-side computation allocates and frees
many arrays of a few megabytes (a replay: chunks decoded, kernels' temporaries, masks).

glibc serves large allocations from fresh ``mmap`` pages and hands freed heap memory back
to the kernel above a trim threshold; every fresh page costs a fault and a zeroing, so a
replay that allocates a few hundred megabytes in 4-8 MB pieces spends a good part of its
time in the kernel. :func:`keep_freed_memory` raises both thresholds for the duration, and
afterwards sets them to what glibc's own adaptation reaches after large frees (a 32 MB mmap
threshold, trim at twice that): the heap then shrinks to 64 MB free on the next free.

A 10 x 10 box of the real LSST ``exp1`` replayed to ``clust``: 0.17-0.19 s without, 0.15-0.16
s with (``benchmarks/bench_replay.py``). Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from contextlib import contextmanager
from typing import Any, Iterator

#: glibc's mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: allocations up to this size come from the heap while the block runs (glibc's dynamic
#: threshold never exceeds it either)
MMAP_THRESHOLD = 32 << 20
#: free heap memory kept while the block runs
TRIM_THRESHOLD = 1 << 30

_libc: Any = None


def _glibc() -> Any:
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc = libc if hasattr(libc, "mallopt") else False
        except OSError:
            _libc = False
    return _libc


@contextmanager
def keep_freed_memory() -> Iterator[None]:
    """Within the block, freed memory stays in the heap for the next allocation."""
    libc = _glibc()
    if not libc:
        yield
        return
    libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    try:
        yield
    finally:  # glibc's own steady state: the heap shrinks to this on the next free
        libc.mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD)
