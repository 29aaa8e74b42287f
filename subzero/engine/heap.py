"""Keeping freed memory in the process while a driver-side computation allocates and frees
many arrays of a few megabytes (a replay: chunks decoded, kernels' temporaries, masks).

glibc serves large allocations from fresh ``mmap`` pages and hands freed heap memory back
to the kernel above a trim threshold; every fresh page costs a fault and a zeroing, so a
replay that allocates a few hundred megabytes in 4-8 MB pieces spends a good part of its
time in the kernel. :func:`keep_freed_memory` raises both thresholds for the duration, and
afterwards sets them to what glibc's own adaptation reaches after large frees (a 32 MB mmap
threshold, trim at twice that): the heap then shrinks to 64 MB free on the next free.

``benchmarks/bench_replay.py`` shows the effect on a replay of the real LSST ``exp1``.
Elsewhere than glibc this does nothing.

Spark's Python workers keep freed memory for good (:func:`keep_worker_memory`, called by
their daemon, :mod:`subzero.engine.daemon`, before it forks them): they run task after task
whose chunks are as large as glibc's largest mmap threshold or larger (a 64x chunk of
float64 is 33 MB, a global operator's array 525 MB), each mapped anew and faulted in
without it. The price: a worker's resident memory stays near its peak between tasks,
which Spark's own memory settings do not count. ``SUBZERO_WORKER_MALLOC=default`` leaves glibc's own settings.

A run that executes in the driver's own process (:mod:`subzero.engine.placement`) does
what a worker does for as long as it runs (:func:`keep_run_memory`): its tasks are a
worker's, on the driver's threads. Those threads share the main malloc arena
(:func:`one_arena`): in arenas of their own, each thread faults in and zeroes fresh
pages that another arena has just freed, and a run spends much of its CPU in the kernel.
In Spark's workers it makes no difference, so they keep glibc's default (see
``benchmarks/bench_scale.py``).

A worker also freezes the objects alive when a task starts (:func:`freeze_worker_objects`):
otherwise the garbage collector walks over them again and again, a visible share of each
worker's CPU at large scales (``benchmarks/bench_scale.py``). Freezing once, after the
first task's imports, is not enough: the full collection pyspark's daemon runs after every
task would still walk what later tasks import (``scipy`` for the cosmic rays and the
labels).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
from contextlib import contextmanager
from typing import Any, Iterator

#: glibc's mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
#: allocations up to this size come from the heap while the block runs (glibc's dynamic
#: threshold never exceeds it either)
MMAP_THRESHOLD = 32 << 20
#: free heap memory kept while the block runs
TRIM_THRESHOLD = 1 << 30

#: a worker's: blocks up to this size come from its heap, where freed ones stay, so that
#: a global operator's whole array (a label image) reuses kept memory instead of fresh
#: pages that must be zeroed first (tuned by benchmarks/bench_scale.py)
WORKER_MMAP_THRESHOLD = 1 << 30
WORKER_TRIM_THRESHOLD = 1 << 30

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


def set_thresholds(mmap_threshold: int, trim_threshold: int) -> bool:
    """glibc's mmap and trim thresholds (``mallopt``); False elsewhere than glibc."""
    libc = _glibc()
    if not libc:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold))
                and libc.mallopt(M_TRIM_THRESHOLD, int(trim_threshold)))


#: True in Spark's Python workers (set by their daemon, through :func:`keep_worker_memory`,
#: before it forks them)
_in_worker = False


def freeze_worker_objects() -> None:
    """In a Spark worker, at the start of every task: the objects alive then (modules,
    classes, functions: hundreds of thousands, and what earlier tasks imported and cached)
    move out of the garbage collector's reach (``gc.freeze``), so the full collection
    pyspark's daemon runs after every task, and those a task's many small objects set off,
    walk only what the task itself made. pyspark collected the previous task's garbage just
    before (its full collection), so what is frozen is alive. Nothing elsewhere."""
    if _in_worker:
        gc.freeze()


def keep_worker_memory() -> bool:
    """For the rest of the process (and the processes it forks), large blocks come from
    the heap and freed ones stay there; False elsewhere than glibc, or when
    ``SUBZERO_WORKER_MALLOC`` is ``default``. Marks the process as a worker's (see
    :func:`freeze_worker_objects`)."""
    global _in_worker
    _in_worker = True
    if _glibc_left_alone():
        return False
    return set_thresholds(WORKER_MMAP_THRESHOLD, WORKER_TRIM_THRESHOLD)


def _glibc_left_alone() -> bool:
    """``SUBZERO_WORKER_MALLOC=default``: workers and runs keep glibc's own settings."""
    return os.environ.get("SUBZERO_WORKER_MALLOC", "") == "default"


@contextmanager
def keep_freed_memory(mmap_threshold: int = MMAP_THRESHOLD) -> Iterator[None]:
    """Within the block, freed memory stays in the heap for the next allocation, and
    blocks up to ``mmap_threshold`` bytes come from the heap."""
    libc = _glibc()
    if not libc:
        yield
        return
    set_thresholds(mmap_threshold, TRIM_THRESHOLD)
    try:
        yield
    finally:  # glibc's own steady state: the heap shrinks to this on the next free
        set_thresholds(MMAP_THRESHOLD, 2 * MMAP_THRESHOLD)


def one_arena() -> bool:
    """For the rest of the process, threads that have no malloc arena yet share the main
    one (``M_ARENA_MAX`` 1); False elsewhere than glibc.

    A thread's own arena grows in heaps of at most 64 MB, so the chunks a run's task
    threads allocate (33 MB of float64 at 16x, whole arrays for a global operator) are
    mapped afresh and zeroed by the kernel each time, whatever the thresholds say; the
    main arena's heap keeps them. glibc keeps the limit it first sees: this cannot be
    undone, and threads that already have an arena keep it."""
    libc = _glibc()
    return bool(libc and libc.mallopt(M_ARENA_MAX, 1))


@contextmanager
def keep_run_memory() -> Iterator[None]:
    """For a run in the driver's own process: a worker's settings while it runs
    (:func:`keep_worker_memory`), glibc's steady state after; nothing when
    ``SUBZERO_WORKER_MALLOC`` is ``default``."""
    if _glibc_left_alone():
        yield
        return
    one_arena()
    with keep_freed_memory(WORKER_MMAP_THRESHOLD):
        yield
