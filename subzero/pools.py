"""The process's thread pools: named, made on first use, made anew after a fork.

A Spark worker forks its Python workers, and threads do not survive a fork, so a pool is
kept with the process id that made it and made again in a child (:func:`thread_pool`).
:func:`each` runs a function over the chunks of a large block on the chunk threads (Blosc
and numpy's copies release the GIL, so the chunks decode and encode side by side), and in
turn for a small block, where handing the work to threads costs more than it saves.
:class:`PriorityPool` is a pool of its own that runs work by rank rather than as it comes
(a replay's chunk reads before its writes, :mod:`subzero.engine.cowstore`).

>>> pool = thread_pool("subzero-example", 2)
>>> pool.submit(sum, [1, 2, 3]).result()
6
>>> thread_pool("subzero-example", 2) is pool
True
>>> out = []
>>> each(out.append, [1, 2, 3], 0)  # a small block: in turn
>>> out
[1, 2, 3]
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence

from subzero import settings

__all__ = ["thread_pool", "each", "PriorityPool", "CHUNK_THREADS", "PARALLEL_BYTES",
           "CHUNK_WORKERS"]


def _chunk_workers() -> int:
    """the cores, at most 4"""
    return min(4, settings.cores())


#: a block of at least this many bytes has its chunks decoded or encoded on several threads
#: (:func:`each`): below it, handing chunks to threads costs more than decoding them in
#: turn; a global operator's single task reads and writes whole arrays, far above it
PARALLEL_BYTES = settings.define(
    "PARALLEL_BYTES", 8 << 20, settings.size,
    "Blocks of at least this many bytes have their chunks decoded and encoded on several "
    "threads; smaller ones in turn, where threads would cost more than they save.",
    benchmark="benchmarks/bench_scale.py", module=__name__)
#: the chunk threads of a process: a few, as Spark already runs a task per core and a
#: large block's chunks are a memory-bound copy and decode beyond that
CHUNK_WORKERS = settings.define(
    "CHUNK_WORKERS", _chunk_workers, int,
    "Threads that decode and encode the chunks of one large block side by side; a few, "
    "since Spark already runs a task per core.",
    benchmark="benchmarks/bench_scale.py", module=__name__)
#: the name (and thread name prefix) of the chunk threads' pool
CHUNK_THREADS = "subzero-chunks"

_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_pools_lock = threading.Lock()


def thread_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """This process's thread pool ``name``, made on first use and anew in a forked process.

    Parameters
    ----------
    name
        The pool's name, also its threads' name prefix (``subzero-write``).
    workers
        Its threads, when it is made (a pool that exists keeps its own).

    Returns
    -------
    concurrent.futures.ThreadPoolExecutor
        The pool. A function running on a pool never waits on the same pool (it could
        wait forever for a thread that is itself).

    Examples
    --------
    >>> thread_pool("subzero-doc", 1).submit(len, "abc").result()
    3
    """
    with _pools_lock:
        got = _pools.get(name)
        if got is None or got[0] != os.getpid():
            got = _pools[name] = (os.getpid(), ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix=name))
        return got[1]


def each(fn: Callable[[Any], None], keys: Sequence[Any], nbytes: int) -> None:
    """Call ``fn(key)`` for every key, on the chunk threads when that pays.

    On the chunk threads (:data:`CHUNK_THREADS`, :data:`CHUNK_WORKERS` of them) when there
    are several keys and ``nbytes`` is at least :data:`PARALLEL_BYTES`; else in turn, and
    in turn too when called from a chunk thread (a pool thread waiting on its own pool
    could wait forever).

    Parameters
    ----------
    fn
        Called once per key; its result is ignored.
    keys
        The keys (chunk indices).
    nbytes
        The bytes of the whole block the keys cut.

    Raises
    ------
    Exception
        The first error a call raised, once every call has ended.

    Examples
    --------
    >>> seen = set()
    >>> each(seen.add, range(4), 1 << 30)
    >>> sorted(seen)
    [0, 1, 2, 3]
    """
    if (len(keys) < 2 or nbytes < PARALLEL_BYTES
            or threading.current_thread().name.startswith(CHUNK_THREADS)):
        for k in keys:
            fn(k)
        return
    pool = thread_pool(CHUNK_THREADS, CHUNK_WORKERS)
    futures = [pool.submit(fn, k) for k in keys]
    errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e


class PriorityPool:
    """Threads running work in the order of its rank, not in the order it comes.

    Each piece of work is submitted with a rank, a tuple: a lower rank runs first, equal
    ranks in the order submitted. A thread that waits for a result (:meth:`result`) runs
    queued work ranked no later than the one it waits for itself, and a thread with
    nothing else to do can run everything queued (:meth:`help`). The threads may run at a
    lower priority than the thread that made them (``nice``), so that a thread every
    step waits for keeps a core of its own when all are busy.

    Parameters
    ----------
    workers
        The threads.
    name
        Their name prefix (``subzero-replay-io``).
    nice
        How much lower the threads run than the process (Linux: a thread is a task with
        its own nice value; elsewhere ignored); 0 leaves them as they are.

    Examples
    --------
    >>> pool = PriorityPool(1, "subzero-doc-ranked")
    >>> late = pool.submit((1, 0), str.upper, "b")
    >>> early = pool.submit((0, 0), str.upper, "a")
    >>> pool.result(late), early.result()
    ('B', 'A')
    >>> pool.shutdown()
    """

    #: the rank of the marker that stops a thread: after any work
    _STOP = (float("inf"),)

    def __init__(self, workers: int, name: str, nice: int = 0) -> None:
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._nice = int(nice)
        self._threads = [threading.Thread(target=self._work, daemon=True, name=f"{name}_{i}")
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    def submit(self, rank: tuple[Any, ...], fn: Callable[..., Any], *args: Any) -> Future:
        """Queue ``fn(*args)`` at ``rank``.

        Parameters
        ----------
        rank
            Its place: lower first, equal ranks in the order submitted.
        fn, args
            The work.

        Returns
        -------
        concurrent.futures.Future
            Its result, once run.
        """
        fut: Future = Future()
        fut.rank = rank  # type: ignore[attr-defined]
        self._queue.put((rank, next(self._seq), fut, fn, args))
        return fut

    def _work(self) -> None:
        if self._nice:
            try:
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid,
                               min(19, os.getpriority(os.PRIO_PROCESS, tid) + self._nice))
            except (AttributeError, OSError):
                pass
        while True:
            _, _, fut, fn, args = self._queue.get()
            if fut is None:
                return
            self._run(fut, fn, args)

    @staticmethod
    def _run(fut: Future, fn: Callable[..., Any], args: tuple) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - the waiting caller raises it
            fut.set_exception(e)

    def help(self) -> None:
        """Run the queued work in the calling thread too, until none is left waiting."""
        while self._run_one():
            pass

    def _run_one(self, upto: tuple[Any, ...] | None = None) -> bool:
        """Run the next queued piece of work in the calling thread (False: none; or, with
        ``upto``, none ranked at or before it)."""
        q = self._queue
        with q.mutex:
            if not q.queue or (upto is not None and q.queue[0][0] > upto):
                return False
        try:
            item = q.get_nowait()
        except queue.Empty:
            return False
        if upto is not None and item[0] > upto:  # another thread took the one seen
            q.put(item)
            return False
        if item[2] is None:  # shut down: leave the marker to a worker
            q.put(item)
            return False
        self._run(*item[2:])
        return True

    def result(self, fut: Future) -> Any:
        """``fut``'s result, running queued work in the calling thread while it waits.

        Only work ranked no later than ``fut`` is run here: work queued for later would
        keep the caller from the result it waits for.

        Parameters
        ----------
        fut
            A future :meth:`submit` returned.

        Returns
        -------
        Any
            Its result.

        Raises
        ------
        Exception
            What the work raised.
        """
        upto = getattr(fut, "rank", None)
        while not fut.done() and self._run_one(upto):
            pass
        return fut.result()

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Stop the threads once the queued work is done.

        Parameters
        ----------
        wait
            Return only once every thread has stopped.
        cancel_futures
            Cancel the work not started instead of running it.
        """
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item[2] is not None:
                    item[2].cancel()
        for _ in self._threads:  # after everything queued
            self._queue.put((self._STOP, next(self._seq), None, None, None))
        if wait:
            for t in self._threads:
                t.join()
