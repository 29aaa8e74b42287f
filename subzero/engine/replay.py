"""What-if replay: a finished run again with some cells of one array changed, recomputing
only what the change reaches, written as a new run derived from the original.

:func:`replay_run` changes chosen cells of one array of a complete run (an input or an
intermediate), then walks the operators downstream in run order. For each one whose inputs
changed it asks ``reach(op, i, changed)`` which output cells the changed cells of
input ``i`` reach (the caller answers with the run's own lineage, :mod:`subzero.query`),
recomputes only the tiles holding those cells with the run's tasks
(:func:`subzero.engine.tasks.run_task`, capturing lineage with the operator's strategies),
and compares the recomputed cells with the original: only the cells whose value really
changed go on to the next operator. (An intermediate recomputed whole, by an operator that
is not global, whose values are noisy is not compared unless asked: its cells all go on,
see :meth:`_Derived.compares`.) Sound lineage makes the result equal, bit for bit, to
a full run on the changed data: a cell outside the forward lineage of every changed cell
cannot change.

The derived run is copy on write, in its own directory::

    runs/<new>/manifest.json            the parent's (and its params/ files)
    runs/<new>/arrays/<a>.zarr          unchanged arrays: a symbolic link to the parent's
                                        changed arrays: a copy, recomputed tiles rewritten
    runs/<new>/lineage/<op>/<s>/<c>/    the shards of recomputed chunks only

Its catalog rows (``runs.parent``, ``runs.derivation``) reference the parent's shards for
every chunk it did not recompute. Nothing of the parent's is ever written. The derived run
is ``running`` while it is built and ``failed`` if the replay stops (an error here, or a
killed process: the next catalog open reaps it).

Tiles: an operator that stores lineage (its shards are per output chunk) or is global is
recomputed by whole task chunks; any other by the bounding box of the reached cells in each
chunk they touch (a 10 x 10 box stays a 10 x 10 recompute).
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import sqlite3
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from encoders.store import read_meta, remove_unpublished
from subzero.cells import Box, to_coords
from subzero.chunking import chunk_key, task_grid
from subzero.engine import arrays, layout
from subzero.engine.catalog import Catalog, shard_row
from subzero.engine.heap import keep_freed_memory
from subzero.engine.runs import LoadedRun
from subzero.engine.tasks import (make_jobs, raise_task_error, run_jobs, run_task,
                                  store_shards)
from subzero.engine.diskfull import is_disk_full, no_space
from subzero.errors import CodeError, ReplayError, StoreError
from subzero.frontier import Frontier, is_dense
from subzero.modes import Strategy, capture_modes

#: ``reach(op, i, changed)``: the output cells of ``op`` that the cells ``changed`` of input
#: ``i`` reach (forward lineage, one step), both :class:`~subzero.frontier.Frontier`: a few
#: cells stay a few indices, and cost in proportion to them rather than to the array
Reach = Callable[[str, int, Frontier], Frontier]

#: an operator whose recomputed cells exceed this runs its tiles as a Spark job (when a
#: session is given); smaller ones run here, where they do not pay a Spark job's fixed
#: start-up cost (see benchmarks/bench_replay.py)
SPARK_CELLS = 1 << 22
#: a changed array lists its changed cells when it has at most this many
LIST_CELLS = 20
#: at most this many bytes of the parent's decoded chunks held by one replay (beyond it,
#: chunks are decoded again each time they are read)
CACHE_BYTES = 1 << 30
#: threads writing recomputed blocks (and reading the parent's) while operators compute
WRITERS = 2
#: a rewritten chunk is stored raw (Blosc level 0) when the parent's shrank by less than
#: this factor (the run's own rule, :data:`arrays.RAW_BELOW`); otherwise compressed at
#: level 1 (see :meth:`_Derived.level`)
RAW_BELOW = arrays.RAW_BELOW
#: how much lower the replay's I/O threads run than the thread computing (their nice), so
#: that reading and writing chunks never takes a core from the kernels (tuned by
#: benchmarks/bench_replay.py)
IO_NICE = 5
#: threads computing the tiles of one operator at once, when they have this many cells:
#: the :data:`WRITERS` already keep other cores busy, so on a small machine more compute
#: threads only contend with them (tuned by benchmarks/bench_replay.py)
COMPUTE = 1
THREAD_CELLS = 1 << 16


def _cells(shape: Sequence[int]) -> int:
    return int(np.prod(tuple(shape), dtype=np.int64))


@dataclass
class ArrayReplay:
    """What the replay did to one array."""

    name: str
    shape: tuple[int, ...]
    reached: int  # cells the forward lineage of the changes reached
    changed: int | None  # cells whose value differs from the parent's (None: not compared)
    tiles: int  # tiles recomputed
    tiles_total: int  # task chunks of a full run
    recomputed: int  # cells recomputed
    elapsed_s: float
    cells: list[list[int]] | None = None  # the changed cells, when few

    def to_json(self) -> dict[str, Any]:
        return {"array": self.name, "shape": list(self.shape), "reached": self.reached,
                "changed": self.changed, "compared": self.changed is not None,
                "tiles": self.tiles, "tiles_total": self.tiles_total,
                "recomputed_cells": self.recomputed, "elapsed_s": self.elapsed_s,
                "cells": self.cells}


@dataclass
class ReplayResult:
    """A finished replay: the derived run and what changed (the CLI's ``--json``)."""

    run: str
    parent: str
    workflow: str
    array: str
    cells: int  # cells set
    value: str  # what they were set to
    arrays: list[ArrayReplay] = field(default_factory=list)  # the set array, then recomputed
    outputs: list[str] = field(default_factory=list)
    not_replayed: list[str] = field(default_factory=list)  # reached but beyond ``to``
    recomputed_cells: int = 0
    full_cells: int = 0  # cells every operator of a full run computes
    runtime_s: float = 0.0
    parent_runtime_s: float | None = None

    def array_result(self, name: str) -> ArrayReplay | None:
        return next((a for a in self.arrays if a.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "parent": self.parent, "workflow": self.workflow,
                "array": self.array, "cells": self.cells, "value": self.value,
                "outputs": self.outputs, "arrays": [a.to_json() for a in self.arrays],
                "not_replayed": self.not_replayed, "recomputed_cells": self.recomputed_cells,
                "full_cells": self.full_cells,
                "recomputed_fraction": self.recomputed_cells / max(1, self.full_cells),
                "runtime_s": self.runtime_s, "parent_runtime_s": self.parent_runtime_s}


# -- the new values -------------------------------------------------------------------------
def replay_values(array: str, dtype: Any, n: int, value: Any = None,
                  values: np.ndarray | None = None, nan: bool = False) -> np.ndarray:
    """The ``n`` values the chosen cells of ``array`` (of ``dtype``) get: one ``value``
    (a number, or text as given on the command line), ``values`` (one per cell, in C order
    of the cells), or NaN; checked against the array's dtype.

    >>> replay_values("exp1", "uint16", 2, value="7").tolist()
    [7, 7]
    >>> replay_values("exp1", "uint16", 1, value="1.5")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    subzero.errors.ReplayError: --set '1.5': array exp1 holds uint16; expected an integer ...
    """
    dtype = np.dtype(dtype)
    if sum((value is not None, values is not None, bool(nan))) != 1:
        raise ReplayError("give exactly one of a value (--set), values (--values) or --nan")
    if nan:
        if dtype.kind not in "fc":
            raise ReplayError(f"--nan: array {array} holds {dtype}; NaN needs a float array")
        return np.full(n, np.nan, dtype=dtype)
    if value is not None:
        return np.full(n, _scalar(array, dtype, value), dtype=dtype)
    vals = np.asarray(values)
    if vals.size != n:
        raise ReplayError(f"--values holds {vals.size} values of shape {vals.shape}; "
                          f"expected one per chosen cell of {array} ({n})")
    vals = vals.reshape(-1)
    if dtype.kind in "UOT":
        if vals.dtype.kind not in "UOT":
            raise ReplayError(f"--values of dtype {vals.dtype}: array {array} holds text; "
                              "expected strings")
        return vals.astype(str)
    fits = {"b": "b", "i": "biu", "u": "biu", "f": "biuf", "c": "biufc"}.get(dtype.kind, "")
    if vals.dtype.kind not in fits:
        raise ReplayError(f"--values of dtype {vals.dtype} cannot go into array {array} of "
                          f"dtype {dtype} (expected {dtype} or another "
                          f"{'integer' if dtype.kind in 'iu' else dtype.kind} type)")
    if dtype.kind in "iu" and vals.size:
        info = np.iinfo(dtype)
        lo, hi = vals.min(), vals.max()
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise ReplayError(f"--values holds {bad}, outside the range of array {array} "
                              f"({dtype}: {info.min} to {info.max})")
    return vals.astype(dtype)


def _scalar(array: str, dtype: np.dtype, value: Any) -> Any:
    text = str(value).strip()
    if dtype.kind in "UOT":
        return str(value)
    if dtype.kind == "b":
        if text.lower() in ("1", "true"):
            return True
        if text.lower() in ("0", "false"):
            return False
        raise ReplayError(f"--set {text!r}: array {array} holds bool; expected true or false")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        try:
            v = int(text, 10)
        except ValueError:
            v = None
        if v is None or not info.min <= v <= info.max:
            raise ReplayError(f"--set {text!r}: array {array} holds {dtype}; expected an "
                              f"integer from {info.min} to {info.max}")
        return v
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ReplayError(f"--set {text!r}: array {array} holds {dtype}; expected a number") \
            from None
    with np.errstate(over="ignore"):
        cast = dtype.type(v)
    if np.isinf(cast) and text.lower().lstrip("+-") not in ("inf", "infinity"):  # 1e400
        raise ReplayError(f"--set {text!r}: too large for array {array} ({dtype}); expected "
                          f"a number of magnitude at most {np.finfo(dtype).max:g}")
    return cast


# -- comparing ------------------------------------------------------------------------------
def differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cells whose values differ bit for bit (NaN equals the same NaN; -0.0 is not 0.0).

    >>> differs(np.array([1.0, np.nan, 0.0]), np.array([1.0, np.nan, -0.0])).tolist()
    [False, False, True]
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "biufc" and a.dtype == b.dtype and a.dtype.itemsize in (1, 2, 4, 8):
        view = np.dtype(f"u{a.dtype.itemsize}")
        return np.ascontiguousarray(a).view(view) != np.ascontiguousarray(b).view(view)
    return np.asarray(a != b, dtype=bool)


def _bbox(mask: np.ndarray, within: Box) -> Box | None:
    """The bounding box of ``mask``'s cells inside ``within`` (global coordinates)."""
    sub = mask[within.slices]
    if not sub.any():
        return None
    lo, hi = [], []
    for ax in range(sub.ndim):
        other = tuple(k for k in range(sub.ndim) if k != ax)
        idx = np.flatnonzero(sub.any(axis=other) if other else sub)
        lo.append(within.lo[ax] + int(idx[0]))
        hi.append(within.lo[ax] + int(idx[-1]) + 1)
    return Box(tuple(lo), tuple(hi))


def _changes(shape: Sequence[int], parts: Sequence[tuple[Box, np.ndarray]]) -> Frontier:
    """The changed cells of an array, from the comparison ``diff`` of each recomputed
    ``box`` (disjoint): their indices when few, else a mask.

    >>> f = _changes((4, 5), [(Box((1, 1), (3, 3)), np.array([[0, 1], [0, 0]], bool))])
    >>> f.n, f.lin.tolist()
    (1, [7])
    """
    shape = tuple(shape)
    counts = [int(np.count_nonzero(diff)) for _, diff in parts]
    n, size = sum(counts), _cells(shape)
    if n == size:
        return Frontier.everything(shape)
    if not is_dense(n, size):
        lins = [np.ravel_multi_index(tuple(c + lo for c, lo in zip(np.nonzero(diff), box.lo)),
                                     shape) for (box, diff), k in zip(parts, counts) if k]
        lin = np.sort(np.concatenate(lins)) if lins else np.empty(0, dtype=np.int64)
        return Frontier(shape, lin=lin.astype(np.uint64))
    mask = np.zeros(shape, dtype=bool)
    for box, diff in parts:
        mask[box.slices] = diff
    return Frontier(shape, mask=mask, n=n)


# -- the derived run ------------------------------------------------------------------------
#: a chunk's grid index; cached chunks are keyed by (array, chunk index)
Key = tuple[int, ...]
#: the order :class:`_IOPool` runs its work in: reads before writes, and the reads of an
#: earlier step before a later one's
READ, WRITE = 0, 1


class _IOPool:
    """Threads reading and writing chunks for a replay, which run the reads first: a read
    is ranked ``(READ, step)`` by the step that will need it, every write after every
    read (the derived run needs its writes only once it is complete), each kind in the
    order submitted. A plain pool runs work as it comes, so a global operator that needs
    a chunk decoded waited behind the calibration steps' writes. The threads run
    :data:`IO_NICE` below the process, so that the thread computing the operators, which
    every step waits for, keeps a core of its own when all are busy."""

    def __init__(self, workers: int) -> None:
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._threads = [threading.Thread(target=self._work, daemon=True,
                                          name=f"subzero-replay-io_{i}")
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    def submit(self, rank: tuple[int, int], fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        fut.rank = rank  # type: ignore[attr-defined]
        self._queue.put((rank, next(self._seq), fut, fn, args))
        return fut

    def _work(self) -> None:
        try:  # below the thread computing (Linux: a thread is a task with its own nice)
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid,
                           min(19, os.getpriority(os.PRIO_PROCESS, tid) + IO_NICE))
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
        """Run the queued work in the calling thread too, until none is left waiting (the
        computing thread, once it has nothing else to do)."""
        while self._run_one():
            pass

    def _run_one(self, upto: tuple[int, int] | None = None) -> bool:
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
            self._queue.put(item)
            return False
        self._run(*item[2:])
        return True

    def result(self, fut: Future) -> Any:
        """``fut``'s result; while it is not done, the calling thread runs queued work
        ranked no later than ``fut`` (the computing thread waiting for a chunk lends the
        I/O threads a hand, but takes no read a later step needs: decoding a whole chunk
        for later would keep the step it waits for waiting longer)."""
        upto = getattr(fut, "rank", None)
        while not fut.done() and self._run_one(upto):
            pass
        return fut.result()

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item[2] is not None:
                    item[2].cancel()
        for _ in self._threads:  # after everything queued
            self._queue.put(((WRITE + 1, 0), next(self._seq), None, None, None))
        if wait:
            for t in self._threads:
                t.join()


def _chunks_hit(cells: Frontier, chunks: Sequence[int]) -> set[Key] | None:
    """The chunks (grid indices) holding some of ``cells`` when they are few (None
    otherwise: ask each chunk)."""
    if not cells.sparse:
        return None
    return set(map(tuple, np.unique(to_coords(cells.lin, cells.shape)
                                    // np.asarray(chunks, dtype=np.int64), axis=0).tolist()))


def _symlink(target: Path, path: Path) -> None:
    """``path`` a symbolic link to directory ``target``, relative (a home moves whole)."""
    os.symlink(os.path.relpath(target, path.parent), path, target_is_directory=True)


def _link_chunk(src: Path, dst: Path) -> None:
    """Chunk file ``dst`` the same file as ``src`` (its folder made if need be)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    _link(str(src), str(dst))


def _link(src: str, dst: str) -> None:
    """``dst`` the same file as ``src`` (a hard link; a copy where links are refused)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _copy_chunks(src: Path, dst: Path, keys: Sequence[Key], meta: bytes | None = None
                 ) -> None:
    """Array ``dst``, chunk by chunk, from array ``src``: its metadata (``meta``: its
    bytes, when known), and its chunk files ``keys`` as hard links (the others are written
    by the replay)."""
    dst.mkdir(exist_ok=True)  # a rewritten chunk's write may have made it already
    if meta is None:
        shutil.copyfile(src / "zarr.json", dst / "zarr.json")
    else:  # a copy of its own: zarr rewrites an array's metadata in place
        with open(dst / "zarr.json", "wb") as f:
            f.write(meta)
    src_c, dst_c, made = str(src / "c"), str(dst / "c"), set()
    for k in keys:
        rel = [str(i) for i in k]
        folder = os.path.join(dst_c, *rel[:-1])
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        _link(os.path.join(src_c, *rel), os.path.join(folder, rel[-1]))


def _values(entry: Any, span: tuple[int, int] | None = None) -> np.ndarray:
    """A held chunk's cells (``span``: the items needed; None: all)."""
    return entry.get(span) if isinstance(entry, arrays.PartChunk) else entry


def _read_part(files: arrays.ChunkFiles, key: Key, span: tuple[int, int]
               ) -> arrays.PartChunk:
    part = files.part(key)
    part.get(span)
    return part


@dataclass
class _Derived:
    """The derived run while it is built, and the chunks the replay holds in memory.

    Arrays whose chunks :class:`arrays.ChunkFiles` can read and write directly (numeric,
    Blosc) are handled chunk by chunk: the parent's chunks are decoded once (in the
    background where they can be foreseen) and kept while a later operator may read them;
    a recomputed array starts as hard links to the parent's chunk files and each chunk it
    rewrites is written whole, in the background, to a new file renamed over the link (the
    parent's file is never opened for writing). Other arrays (text) go through zarr.
    """

    parent: LoadedRun
    rid: str
    home: Path
    cat: Catalog
    #: the arrays whose changed cells are reported (always compared with the parent's)
    outputs: frozenset[str] = frozenset()
    #: compare every recomputed array with the parent's (see :meth:`compares`)
    compare_all: bool = False
    recomputed: dict[str, set[str]] = field(default_factory=dict)  # op -> chunk keys
    shard_rows: list[dict[str, Any]] = field(default_factory=list)
    #: shards being written in the background: (operator, the task's shard statistics)
    shard_writes: list[tuple[str, Future]] = field(default_factory=list)
    present: set[str] = field(default_factory=set)  # arrays the derived run holds
    paths: dict[str, Path] = field(default_factory=dict)  # see path
    written: set[str] = field(default_factory=set)  # arrays it holds its own copy of
    #: the derived run's chunk files of the arrays it rewrites chunk by chunk
    fast: dict[str, arrays.ChunkFiles] = field(default_factory=dict)
    own: dict[str, set[Key]] = field(default_factory=dict)  # chunks rewritten, per array
    dirty: dict[str, set[Key]] = field(default_factory=dict)  # rewritten, not yet written
    #: per rewritten chunk patched from the parent's, the items (C order within the chunk)
    #: that may differ from the parent's file: where its Blosc blocks are compressed again
    spans: dict[tuple[str, Key], tuple[int, int]] = field(default_factory=dict)
    #: decoded chunks: the parent's (or the future decoding one), and the rewritten ones;
    #: each an array, or a :class:`arrays.PartChunk` decoding blocks as they are read
    old_chunks: dict[tuple[str, Key], Any] = field(default_factory=dict)
    new_chunks: dict[tuple[str, Key], Any] = field(default_factory=dict)
    held: int = 0  # bytes of the chunks held in ``old_chunks`` and ``new_chunks``
    chunk_writes: dict[tuple[str, Key], Future] = field(default_factory=dict)
    #: zarr block writes still in flight, per array (arrays zarr writes)
    writes: dict[str, list[Future]] = field(default_factory=dict)
    pool: _IOPool = field(default_factory=lambda: _IOPool(WRITERS))
    #: threads computing the tiles of one large operator at once (numpy releases the GIL)
    compute: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=COMPUTE, thread_name_prefix="subzero-replay-tile"))

    def path(self, name: str) -> Path:
        got = self.paths.get(name)
        if got is None:
            got = self.paths[name] = layout.array_path(self.home, self.rid, name)
        return got

    def parent_path(self, name: str) -> Path:
        return layout.array_path(self.home, self.parent.id, name)

    def parent_dir(self, name: str) -> Path:
        """The directory holding the parent's array ``name`` (its links resolved)."""
        memo = self.parent.memo
        got = memo.get(("dir", name))
        if got is None:
            path = self.parent_path(name)  # a derived parent's unchanged arrays are links
            got = memo["dir", name] = path.resolve() if path.is_symlink() else path
        return got

    def link(self, name: str) -> None:
        """Reference the parent's array (unchanged): a relative symbolic link, made by an
        I/O thread (:meth:`wait` waits for it too)."""
        self.writes.setdefault(name, []).append(
            self.pool.submit((WRITE, 0), _symlink, self.parent_dir(name), self.path(name)))
        self.present.add(name)

    def ensure(self, name: str) -> None:
        """Array ``name`` in the derived run: the parent's, linked, unless already there."""
        if name not in self.present:
            self.link(name)

    # -- the parent's chunks ----------------------------------------------------------------
    def parent_files(self, name: str) -> arrays.ChunkFiles | None:
        """The parent's chunk files of ``name`` (None: read through zarr), worked out once
        per loaded parent (its arrays never change)."""
        memo = self.parent.memo
        if ("files", name) not in memo:
            memo["files", name] = arrays.ChunkFiles.open(self.parent_dir(name))
        return memo["files", name]

    def parent_shards(self, name: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The parent's shard rows of operator ``name`` by (strategy, chunk), read once per
        loaded parent (a complete run's shards never change)."""
        memo = self.parent.memo
        got = memo.get(("shards", name))
        if got is None:
            got = memo["shards", name] = {(r["strategy"], r["chunk"]): r for r in
                                          self.cat.shards(self.parent.id, op=name)}
        return got

    def _nbytes(self, files: arrays.ChunkFiles, key: Key) -> int:
        return files.box(key).size * files.dtype.itemsize

    def prefetch(self, name: str, keys: Sequence[Key], step: int = -1, box: Box | None = None
                 ) -> None:
        """Start decoding the parent's chunks ``keys`` of ``name`` in the background, for
        the operator ``step`` of the run order (-1: now): whole, or (``box``) the blocks
        holding ``box``'s cells (the rest when they are read)."""
        files = self.parent_files(name)
        if files is None:
            return
        for k in keys:
            n = self._nbytes(files, k)
            if (name, k) not in self.old_chunks and self.held + n <= CACHE_BYTES:
                self.held += n
                if box is None:
                    self.old_chunks[(name, k)] = self.pool.submit((READ, step), files.read, k)
                else:
                    cb = files.box(k)
                    self.old_chunks[(name, k)] = self.pool.submit(
                        (READ, step), _read_part, files, k,
                        arrays.item_span(cb.intersect(box), cb, files.chunks))

    def prefetch_all(self, start: str, box: Box | None, needed: set[str]) -> None:
        """Start decoding, in run order, the parent's chunks the replay will likely read:
        of each replayed operator's output (to compare with) and of the arrays it reads
        that the replay does not change. Which chunks follows :func:`_foreseen`: those
        under ``box`` (the changed cells of ``start``) for an operator the change reaches
        there, every chunk for one it reaches whole (through a global operator), none for
        one it may not reach at all (they are read when, and if, it does). Near the box,
        only the Blosc blocks holding it are decoded, unless an operator reached whole
        reads the array (then all of them, here rather than when it is read)."""
        wf = self.parent.workflow
        seen = {start}
        steps = {name: i for i, name in enumerate(wf.order)}
        foreseen = _foreseen(wf, start, needed)
        read_whole = {src for name, whole in foreseen.items() if whole
                      for src in wf.nodes[name].inputs}
        for name, whole in foreseen.items():
            for src in (*wf.nodes[name].inputs, name):
                if src in seen or (src in needed and src != name):
                    continue
                if src == name and not self.compares(name, whole):
                    continue
                seen.add(src)
                files = self.parent_files(src)
                if files is None:
                    continue
                if whole:
                    self.prefetch(src, files.keys(), steps[name])
                elif box is not None and files.shape == wf.array_shape(start):
                    self.prefetch(src, files.keys(box), steps[name],
                                  None if src in read_whole else box)

    def compares(self, name: str, whole: bool) -> bool:
        """Whether the replay compares its recomputed values of ``name`` with the parent's
        (``whole``: every cell recomputed). It does unless ``name`` is recomputed whole by
        an operator that is not global, is not an output, and whose parent's chunks are
        noisy (stored raw, see :meth:`level`): an array recomputed whole because an input
        changed whole (everything after a changed mean) changes nearly everywhere, so the
        comparison would narrow nothing downstream, while decoding the parent's noisy
        chunks and comparing them cost a third of such a replay's time. Its cells are then
        counted as changed (a superset: what it reaches is recomputed, and equals a full
        run all the same) and its count is not reported. A global operator's output is
        compared (unchanged, it stops the replay), an output is (the answer), and so is a
        mask or any array that compresses well (cheap to decode; unchanged chunks are then
        linked to the parent's, not written)."""
        if self.compare_all or not whole or name in self.outputs:
            return True
        if self.parent.workflow.ops[name].parallelism.kind == "global":
            return True
        files = self.parent_files(name)
        return files is None or any(self.level(name, k) for k in files.keys())

    def old_entry(self, name: str, key: Key, span: tuple[int, int] | None = None) -> Any:
        """The parent's chunk ``key`` of ``name`` as held (an array or a
        :class:`arrays.PartChunk`), with at least the items ``span`` decoded (None: all;
        a chunk first read for a span is decoded block by block)."""
        got = self.old_chunks.get((name, key))
        if isinstance(got, Future):
            if got.cancel():  # not started (the I/O threads are busy): decode it here
                del self.old_chunks[(name, key)]
                files = self.parent_files(name)
                assert files is not None
                self.held -= self._nbytes(files, key)
                got = None
            else:
                got = self.old_chunks[(name, key)] = self.pool.result(got)
        if got is None:
            files = self.parent_files(name)
            assert files is not None
            got = files.read(key) if span is None else files.part(key)
            if self.held + got.nbytes <= CACHE_BYTES:
                self.held += got.nbytes
                self.old_chunks[(name, key)] = got
        _values(got, span)
        return got

    def old_chunk(self, name: str, key: Key, span: tuple[int, int] | None = None
                  ) -> np.ndarray:
        """The parent's chunk ``key`` of ``name`` (``span``: the items needed)."""
        return _values(self.old_entry(name, key, span), span)

    def old_box(self, name: str, box: Box) -> np.ndarray:
        """The parent's values of ``name`` in ``box``."""
        files = self.parent_files(name)
        if files is None:
            return arrays.read_box(self.parent_path(name), box)
        return files.assemble(box, lambda k, sp: self.old_chunk(name, k, sp))

    # -- the derived run's values -----------------------------------------------------------
    def new_chunk(self, name: str, key: Key, span: tuple[int, int] | None = None
                  ) -> np.ndarray:
        got = self.new_chunks.get((name, key))
        if got is not None:
            return _values(got, span)
        if key not in self.own.get(name, ()):
            return self.old_chunk(name, key, span)  # not rewritten: the parent's file
        write = self.chunk_writes.get((name, key))
        if write is not None:
            self.pool.result(write)
        return self.fast[name].read(key)

    def new_box(self, name: str, box: Box) -> np.ndarray:
        """The derived run's values of ``name`` in ``box`` (as recomputed so far)."""
        if name not in self.written:
            return self.old_box(name, box)
        files = self.fast.get(name)
        if files is None:
            self.wait(name)
            return arrays.read_box(self.path(name), box)
        return files.assemble(box, lambda k, sp: self.new_chunk(name, k, sp))

    def copy(self, name: str, whole: bool, rewrite: set[Key] | None) -> None:
        """The derived run's own copy of array ``name`` to rewrite tiles of. Chunk by chunk
        (``rewrite``: the chunks that will be rewritten): the parent's metadata, and hard
        links to the parent's other chunk files. Otherwise through zarr: a new empty array
        when ``whole`` will be rewritten, else every chunk file copied (zarr rewrites a
        chunk file in place, so it must never be a link)."""
        info = self.parent.arrays[name]
        dst = self.path(name)
        files = self.parent_files(name) if rewrite is not None else None
        if files is not None:  # made by an I/O thread (done before the run completes)
            keep = [] if whole else [k for k in files.keys() if k not in rewrite]
            self.writes.setdefault(name, []).append(
                self.pool.submit((WRITE, 0), _copy_chunks, files.path, dst, keep, files.meta))
            self.fast[name] = arrays.ChunkFiles(dst, files.shape, files.chunks, files.dtype,
                                                files.fill, files.codec, files.crc)
            self.own[name] = set()
        elif whole:
            op = self.parent.workflow.ops[name]
            arrays.create_array(dst, op.out_shape, op.out_dtype, info["chunks"])
        else:
            shutil.copytree(self.parent_path(name).resolve(), dst, symlinks=False)
        self.present.add(name)
        self.written.add(name)

    def store(self, name: str, box: Box, block: np.ndarray, compare: bool = True
              ) -> np.ndarray | None:
        """Record the recomputed cells ``box`` of ``name`` (written by :meth:`flush`, or
        now in the background through zarr). Chunk by chunk, returns which cells of
        ``box`` differ from the parent's (compared as each chunk is patched; None through
        zarr: the caller compares). Without ``compare``, a block that is a whole chunk is
        kept without reading the parent's (its cells in the result: True)."""
        files = self.fast.get(name)
        if files is None:
            self.writes.setdefault(name, []).append(
                self.pool.submit((WRITE, 0), arrays.write_block, self.path(name), box, block))
            return None
        keys = files.keys(box)
        # a block that is one chunk: its comparison is the answer (no copy into a mask)
        changed = None if len(keys) == 1 else np.zeros(box.shape, dtype=bool)
        for k in keys:
            cb = files.box(k)
            inter = cb.intersect(box)
            here, there = inter.relative_to(cb), inter.relative_to(box)
            new = np.asarray(block[there], dtype=files.dtype)
            span = arrays.item_span(inter, cb, files.chunks)
            entry = self.new_chunks.get((name, k))
            if entry is None and not compare and cb == box:
                entry = np.ascontiguousarray(block, dtype=files.dtype)
                self.held += entry.nbytes
                self.new_chunks[(name, k)] = entry
                chunk, diff = entry, np.broadcast_to(np.True_, box.shape)
            elif entry is None:
                old = self.old_entry(name, k, span)
                diff = differs(_values(old, span)[here], new)
                if cb == box:  # the block is the whole chunk (no other tile touches it)
                    entry = np.ascontiguousarray(block, dtype=files.dtype)
                else:  # the parent's chunk, patched: its decoded copy if this replay owns it
                    entry = self._take(name, k, old)
                    self.spans[(name, k)] = span
                self.held += entry.nbytes
                self.new_chunks[(name, k)] = entry
                chunk = _values(entry, span)
            else:  # cells no other tile patched still hold the parent's values
                chunk = _values(entry, span)
                diff = differs(chunk[here], new)
                if (name, k) in self.spans:
                    a, z = span
                    lo, hi = self.spans[(name, k)]
                    self.spans[(name, k)] = (min(a, lo), max(z, hi))
            if cb != box:
                if not chunk.flags.writeable:  # a whole block kept as it came (a view)
                    chunk = self.new_chunks[(name, k)] = chunk.copy()
                chunk[here] = new
            self.own[name].add(k)
            self.dirty.setdefault(name, set()).add(k)
            if changed is None:
                changed = diff.reshape(box.shape)
            else:
                changed[there] = diff
        return changed

    def _take(self, name: str, key: Key, old: Any) -> Any:
        """The parent's chunk ``key`` of ``name`` (``old``, as :meth:`old_entry` holds it)
        to patch in place: the decoded copy itself, taken out of the cache (nothing reads
        the parent's values of a chunk once it is rewritten), or a copy where it is not
        this replay's to change. A chunk decoded block by block stays so: its other blocks
        still hold the parent's values, decoded when read."""
        cached = self.old_chunks.get((name, key))
        part = isinstance(old, arrays.PartChunk)
        if cached is old and (part or old.flags.writeable):
            del self.old_chunks[(name, key)]
            self.held -= old.nbytes
            return old
        if cached is None and (part or old.flags.writeable):
            return old  # decoded for this call alone (the cache was full)
        values = _values(old)
        return np.array(values, dtype=values.dtype)

    def flush(self, name: str, changed: Frontier | None = None) -> None:
        """Write the chunks of ``name`` rewritten since the last flush (in the background);
        a chunk none of whose cells ``changed`` is the parent's file, linked."""
        files = self.fast.get(name)
        dirty = sorted(self.dirty.pop(name, ()))
        hit = None if changed is None or files is None else _chunks_hit(changed, files.chunks)
        for k in dirty:
            assert files is not None
            if changed is not None and not (k in hit if hit is not None
                                            else changed.meets(files.box(k))):
                parent = self.parent_files(name)
                assert parent is not None
                self.writes.setdefault(name, []).append(self.pool.submit(
                    (WRITE, 0), _link_chunk, parent.file(k), files.file(k)))
                self.own[name].discard(k)
                self.held -= self.new_chunks.pop((name, k)).nbytes
                self.spans.pop((name, k), None)
                continue
            span = self.spans.pop((name, k), None)
            parent = self.parent_files(name) if span is not None else None
            entry = self.new_chunks[(name, k)]
            part = isinstance(entry, arrays.PartChunk)
            self.chunk_writes[(name, k)] = self.pool.submit(
                (WRITE, 0), files.write, k, entry.array if part else entry,
                self.level(name, k), parent.file(k) if parent is not None else None, span,
                entry.get if part else None)

    def level(self, name: str, key: Key) -> int:
        """The Blosc level chunk ``key`` of ``name`` is rewritten at: 1, or 0 (stored raw)
        where the parent's chunk shrank by less than :data:`RAW_BELOW` (noisy floats:
        compressing costs more time than the bytes it saves)."""
        parent = self.parent_files(name)
        if parent is None:
            return 1
        memo = self.parent.memo  # the parent's files never change
        size = memo.get(("size", name, key))
        if size is None:
            try:
                size = memo["size", name, key] = parent.file(key).stat().st_size
            except OSError:
                return 1
        return 0 if self._nbytes(parent, key) < RAW_BELOW * size else 1

    def release(self, names: set[str]) -> None:
        """Forget the chunks of ``names`` (no later operator reads them)."""
        for cache in (self.old_chunks, self.new_chunks):
            for nk in [nk for nk in cache if nk[0] in names]:
                v = cache.pop(nk)
                if isinstance(v, Future):
                    v = v.result()
                self.held -= v.nbytes

    def wait(self, name: str | None = None) -> None:
        """Until the writes of array ``name`` (None: every array) are done; raises the
        first that failed."""
        for key in [name] if name is not None else list(self.writes):
            for fut in self.writes.pop(key, []):
                fut.result()
        for nk in [nk for nk in self.chunk_writes if name is None or nk[0] == name]:
            self.chunk_writes.pop(nk).result()


def _set_cells(d: _Derived, name: str, mask: np.ndarray, values: np.ndarray) -> Frontier:
    """Write ``values`` into the cells ``mask`` of the derived run's copy of ``name``;
    returns the cells whose value changed."""
    box = _bbox(mask, Box.full(mask.shape))
    files = d.parent_files(name)
    d.copy(name, whole=False,
           rewrite=None if files is None else set(files.keys(box) if box else []))
    if box is None:
        return _changes(mask.shape, [])
    old = d.old_box(name, box)
    new = np.array(old)
    new[mask[box.slices]] = values
    diff = d.store(name, box, new)  # may patch the chunk ``old`` is a view of
    changed = _changes(mask.shape, [(box, differs(old, new) if diff is None else diff)])
    d.flush(name, changed)
    return changed


def _tiles(op: Any, chunks: Sequence[int], reach: Frontier | None, by_chunk: bool
           ) -> list[tuple[tuple[int, ...], Box]]:
    """The output tiles to recompute for the reached cells ``reach`` (None: every cell):
    the task chunks holding some (``by_chunk``), else in each the bounding box of those."""
    grid = list(task_grid(op, chunks))
    if reach is None:
        return grid
    out = []
    if reach.sparse:  # a few cells: their coordinates, not the mask
        coords = to_coords(reach.lin, reach.shape)
        for idx, box in grid:
            here = coords[((coords >= box.lo) & (coords < box.hi)).all(axis=1)]
            if len(here):
                out.append((idx, box if by_chunk else
                            Box(tuple(here.min(axis=0).tolist()),
                                tuple((here.max(axis=0) + 1).tolist()))))
        return out
    mask = reach.mask
    for idx, box in grid:
        if by_chunk:
            if mask[box.slices].any():
                out.append((idx, box))
        else:
            b = _bbox(mask, box)
            if b is not None:
                out.append((idx, b))
    return out


def _recompute(d: _Derived, name: str, reach: Frontier | None, spark: Any, where: str
               ) -> tuple[ArrayReplay, Frontier]:
    """Recompute the tiles of operator ``name`` holding the cells ``reach`` (None: every
    cell) into the derived run (lineage captured with the operator's strategies); the cells
    that changed."""
    t0 = time.perf_counter()
    run, wf = d.parent, d.parent.workflow
    op, node = wf.ops[name], wf.nodes[name]
    strategies: list[Strategy] = run.strategies(name)
    stored = [s for s in strategies if s.stored]
    chunks = run.chunks(name)
    grid = task_grid(op, chunks)
    tiles = _tiles(op, chunks, reach, by_chunk=bool(stored) or op.parallelism.kind == "global")
    cells = int(sum(b.size for _, b in tiles))
    for src in node.inputs:
        d.ensure(src)
    whole = cells == _cells(op.out_shape)
    compare = d.compares(name, whole)
    use_spark = where == "spark" or (where == "auto" and spark is not None
                                     and cells > SPARK_CELLS and len(tiles) > 1)
    files = None if use_spark else d.parent_files(name)
    rewrite = None if files is None else {k for _, b in tiles for k in files.keys(b)}
    d.copy(name, whole=whole, rewrite=rewrite)
    if rewrite and compare:  # the parent's chunks: to compare with (and to patch)
        d.prefetch(name, sorted(rewrite))
    jobs = make_jobs(d.home, d.rid, op, [d.path(s) for s in node.inputs],
                     d.path(name) if use_spark else None, tiles, stored,
                     capture_modes(strategies))
    parts: list[tuple[Box, np.ndarray]] = []  # each recomputed box, and which cells differ
    if use_spark:
        d.wait()
        results = run_jobs(jobs, spark, f"{d.rid}: replay {name}")
        raise_task_error(name, results)
        # read back one block at a time: a large operator's blocks are never all held
        blocks: Any = ((j.chunk.out_box, arrays.read_box(d.path(name), j.chunk.out_box))
                       for j in jobs) if compare else ()
    else:
        results, blocks = _run_here(d, op, node.inputs, jobs, cells, compare), []
        for res in results:
            box, block, diff = res.pop("block")
            if not compare:
                continue
            if diff is None:
                blocks.append((box, block))
            else:  # compared as it was stored
                parts.append((box, diff))
    for box, new in blocks:
        old = d.old_box(name, box)
        parts.append((box, differs(old, np.asarray(new, dtype=old.dtype)
                                   if old.dtype.kind not in "UOT" else new)))
    # not compared: recomputed whole, every cell counted as changed (see _Derived.compares)
    changed = _changes(op.out_shape, parts) if compare else Frontier.everything(op.out_shape)
    d.flush(name, changed)
    if use_spark:  # a retried task may have left a shard it did not publish
        for s in stored:
            remove_unpublished(layout.strategy_dir(d.home, d.rid, name, s.name))
    for res in results:
        if isinstance(res["shards"], Future):
            d.shard_writes.append((name, res["shards"]))
        else:
            d.shard_rows.extend(shard_row(name, s, d.home) for s in res["shards"]
                                if s.get("path"))
    d.recomputed[name] = {chunk_key(idx) for idx, _ in tiles} if stored else set()
    # the tiles hold every reached cell
    return ArrayReplay(name, tuple(op.out_shape), cells if reach is None else reach.n,
                       changed.n if compare else None, len(tiles), len(grid), cells,
                       time.perf_counter() - t0, _few(changed) if compare else None), changed


def _run_here(d: _Derived, op: Any, inputs: Sequence[str], jobs: Sequence[Any], cells: int,
              compare: bool = True) -> list[dict[str, Any]]:
    """Run the tiles in this process (several at once on threads when they are large),
    every input block from :meth:`_Derived.new_box`; each result carries its output
    ``block`` (box, values as a run stores them, and which differ from the parent's or
    None), also stored in the derived run (``compare``: see :meth:`_Derived.store`)."""

    parents = d.parent_shards(op.name) if any(j.strategies for j in jobs) else {}
    digests = d.parent.memo.setdefault(("digests", op.name), {})

    def one(j: Any) -> dict[str, Any]:
        mine = {src: (j.chunk.in_boxes[i], d.new_box(src, j.chunk.in_boxes[i]))
                for i, src in enumerate(inputs)}
        # the pairs come back, and their shards are written in the background
        res = run_task(replace(j, memory=tuple(inputs), strategies=(),
                               collect=bool(j.strategies)), mine)
        if "error" not in res:
            res["block"] = mine[op.name]
            if j.strategies:
                res["shards"] = d.pool.submit((WRITE, 0), _store_shared, d.home, j,
                                              res.pop("full"), res.pop("payload"), parents,
                                              digests)
        return res

    many = COMPUTE > 1 and len(jobs) > 1 and cells >= THREAD_CELLS
    done = list(d.compute.map(one, jobs)) if many else [one(j) for j in jobs]
    for res in done:
        raise_task_error(op.name, [res])
        box, block = res["block"]
        block = np.asarray(block)
        if block.dtype != op.out_dtype and op.out_dtype.kind not in "UOT":
            block = block.astype(op.out_dtype)  # as a run stores it
        res["block"] = (box, block, d.store(op.name, box, block, compare))
    return done


def _digest(home: Path, row: dict[str, Any], memo: dict[str, str | None]) -> str | None:
    """The pairs digest a parent's shard (its catalog ``row``) recorded (None: none, or
    unreadable), kept in ``memo`` by path."""
    path = row["path"]
    if path not in memo:
        try:
            memo[path] = read_meta(home / path).get("stats", {}).get("digest")
        except (StoreError, OSError, ValueError):
            memo[path] = None
    return memo[path]


def _store_shared(home: Path, job: Any, full: Any, pay: Any,
                  parents: dict[tuple[str, str], dict[str, Any]],
                  digests: dict[str, str | None]) -> list[dict[str, Any]]:
    """Store a recomputed task's pairs (:func:`store_shards`), except for a strategy whose
    pairs came out as the parent's shard of that chunk holds (equal digests, see
    :func:`encoders.layouts.pairs.pairs_digest`): that one is the parent's shard, shared
    like those of the chunks not recomputed (its row, pointing at the parent's files).
    ``digests``: the parent's shards' digests read so far, by path."""
    key = chunk_key(job.chunk.index)
    rows = {s.name: parents.get((s.name, key)) for s in job.strategies}
    same_as = {name: d for name, row in rows.items()
               if row is not None and (d := _digest(home, row, digests)) is not None}
    out = []
    for stats in store_shards(job, full, pay, same_as):
        row = rows.get(stats["strategy"])
        if stats.get("same") and row is not None:
            stats = {**row, "path": str(home / row["path"])}
        out.append(stats)
    return out


def _few(cells: Frontier) -> list[list[int]] | None:
    """The coordinates of ``cells`` when there are few."""
    return to_coords(cells.lin, cells.shape).tolist() if 0 < cells.n <= LIST_CELLS else None


def _needed(wf: Any, start: str, to: Sequence[str] | None) -> set[str]:
    """The operators to replay: downstream of ``start`` and, when ``to`` is given, upstream
    of (or one of) those arrays."""
    down: set[str] = set()
    for name in wf.order:
        if any(s == start or s in down for s in wf.nodes[name].inputs):
            down.add(name)
    if not to:
        return down
    up: set[str] = set()
    todo = [t for t in to if t in wf.nodes]
    while todo:
        n = todo.pop()
        if n not in up:
            up.add(n)
            todo.extend(s for s in wf.nodes[n].inputs if s in wf.nodes)
    return down & up


def _foreseen(wf: Any, start: str, needed: set[str]) -> dict[str, bool]:
    """The replayed operators a change of some cells of ``start`` can be foreseen to
    reach, in run order, each with whether it reaches them whole (True) or only near the
    changed cells (False). Foreseen from the workflow alone, before any lineage is read:
    an operator of ``start``'s shape reading a reached array of that shape is reached near
    the cells; a global one reading a reached array, one reading an array reached whole,
    and one broadcasting a reached array (fewer cells than its output) is reached whole;
    any other (a subarray, a reduction's cell) may not be reached at all, and neither is
    what reads only it: a 1 x 1 overscan cut far from the changed cells does not make
    everything after its mean a whole read."""
    shape = tuple(wf.array_shape(start))
    state: dict[str, bool] = {start: False}  # reached array -> reached whole
    out: dict[str, bool] = {}
    for name in wf.order:
        if name not in needed:
            continue
        op = wf.ops[name]
        got = [s for s in wf.nodes[name].inputs if s in state]
        if not got:
            continue
        size = _cells(op.out_shape)
        if (op.parallelism.kind == "global" or any(state[s] for s in got)
                or any(_cells(wf.array_shape(s)) < size for s in got)):
            state[name] = out[name] = True
        elif tuple(op.out_shape) == shape and any(
                tuple(wf.array_shape(s)) == shape for s in got):
            state[name] = out[name] = False
    return out


def _last_reads(wf: Any, start: str, needed: set[str]) -> dict[str, int]:
    """For each array a replay may hold chunks of, the step (index in ``wf.order``) of the
    last operator that reads or makes it."""
    last: dict[str, int] = {start: -1}
    for step, name in enumerate(wf.order):
        if name in needed or name == start:
            for a in (*wf.nodes[name].inputs, name):
                last[a] = step
    return last


def _sinks(wf: Any) -> list[str]:
    used = {s for node in wf.nodes.values() for s in node.inputs}
    return [n for n in wf.order if n not in used]


def check_status(info: dict[str, Any]) -> None:
    """Only a complete run (its catalog row ``info``) can be replayed."""
    status = info.get("status")
    if status != "complete":
        err = f" ({info['error']})" if info.get("error") else ""
        raise ReplayError(f"run {info['id']} is {status}{err}; only a complete run can be "
                          "replayed")


def check_replay(run: LoadedRun, array: str, to: Sequence[str] | None) -> None:
    """A run that can be replayed from ``array`` to ``to``: complete, holding them."""
    check_status(run.info)
    for name in [array, *(to or [])]:
        if name not in run.arrays:
            raise StoreError(f"run {run.id} has no array {name!r} (arrays: "
                             f"{', '.join(run.arrays)})")
    wf = run.workflow
    down = _needed(wf, array, None)
    for t in to or []:
        if t not in down:
            raise ReplayError(f"--to {t}: array {t} is not downstream of {array} in run "
                              f"{run.id} (downstream: {', '.join(sorted(down)) or 'none'})")
    needed = _needed(wf, array, to)
    for name in [n for n in wf.order if n in needed]:  # a derived run made with --to may
        for a in (*wf.nodes[name].inputs, name):       # lack some: the first one, in order
            if a not in run.arrays:
                raise ReplayError(f"run {run.id} has no array {a!r}, which replaying {array} "
                                  f"needs (left out of it by --to?); replay run "
                                  f"{run.info.get('parent') or 'its parent'} instead, or "
                                  "limit this replay with --to")


def replay_run(parent: LoadedRun, array: str, mask: np.ndarray, values: np.ndarray,
               reach: Reach, to: Sequence[str] | None = None, value_text: str = "",
               spark: Any = None, where: str = "auto",
               notify: Callable[[str], None] | None = None,
               catalog: Catalog | None = None, compare_all: bool = False) -> ReplayResult:
    """Replay ``parent`` with the cells ``mask`` of ``array`` set to ``values`` (one per
    cell, C order); returns the derived run's :class:`ReplayResult` (see the module
    docstring). ``to`` limits the replay to the operators those arrays need (the others
    the change reaches are left out of the derived run). ``where``: ``"auto"`` (Spark for
    operators with more than :data:`SPARK_CELLS` cells to recompute, when ``spark`` is
    given), ``"driver"`` or ``"spark"``. ``catalog``: the home's catalog, when the caller
    has it open (left open). ``compare_all``: count the changed cells of every array, also
    of intermediates recomputed whole (see :meth:`_Derived.compares`).
    """
    if where not in ("auto", "driver", "spark"):
        raise ReplayError(f"where={where!r}: expected 'auto', 'driver' or 'spark'")
    check_replay(parent, array, to)
    wf = parent.workflow
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != tuple(parent.arrays[array]["shape"]):
        raise ReplayError(f"the cells' mask has shape {mask.shape}; array {array} has shape "
                          f"{tuple(parent.arrays[array]['shape'])}")
    n = int(np.count_nonzero(mask))
    if n == 0:
        raise ReplayError(f"no cells of {array} chosen; expected at least one")
    needed = _needed(wf, array, to)
    blocked = [n for n in wf.order if n in needed and n in parent.unavailable]
    if blocked:  # before the derived run exists: its code would run
        raise CodeError(f"replay recomputes operator {blocked[0]!r}, whose code cannot run "
                        f"here: {parent.unavailable[blocked[0]]}")
    outputs = list(dict.fromkeys(to)) if to else [a for a in _sinks(wf) if a in needed]
    derivation = {"kind": "replay", "array": array, "cells": n, "value": value_text,
                  "to": list(to or [])}
    home = parent.home
    cat = catalog or Catalog(layout.catalog_path(home))
    t_start = time.perf_counter()
    rid = cat.create_derived_run(parent.id, derivation)
    d = _Derived(parent, rid, home, cat, outputs=frozenset(outputs), compare_all=compare_all)
    res = ReplayResult(rid, parent.id, wf.name, array, n, value_text, outputs=outputs,
                       parent_runtime_s=parent.info.get("runtime_s"))
    try:
        with keep_freed_memory():
            _replay(d, res, array, mask, values, reach, needed, spark, where, notify)
        _finish(d, res, t_start)
        return res
    except BaseException as e:
        d.compute.shutdown(wait=True, cancel_futures=True)
        d.pool.shutdown(wait=True, cancel_futures=True)  # nothing written after the mark
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        full = is_disk_full(e)
        if full:  # what the replay wrote is freed first, so that the catalog can say so
            shutil.rmtree(layout.run_dir(home, rid), ignore_errors=True)
            msg = str(no_space(f"replay run {rid}", home))
        try:
            cat.finish_run(rid, "failed", error=f"replay: {msg}",
                           runtime_s=time.perf_counter() - t_start)
        except sqlite3.Error:
            if not full:
                raise  # a full disk: the next command that opens the catalog marks it
        if full:
            raise no_space(f"replay run {rid}", home) from None
        raise
    finally:
        d.compute.shutdown(wait=True)
        d.pool.shutdown(wait=True)
        if catalog is None:
            cat.close()


def _replay(d: _Derived, res: ReplayResult, array: str, mask: np.ndarray, values: np.ndarray,
            reach: Reach, needed: set[str], spark: Any, where: str,
            notify: Callable[[str], None] | None) -> None:
    """The replay's steps (:func:`replay_run`): set the cells, then recompute downstream."""
    home, rid, parent, wf = d.home, d.rid, d.parent, d.parent.workflow
    n = len(values)
    # the I/O threads start decoding what the steps will read while the run is set up
    d.prefetch_all(array, _bbox(mask, Box.full(mask.shape)), needed)
    layout.arrays_dir(home, rid).mkdir(parents=True, exist_ok=False)
    # the same files (a run's manifest is written once, when the run is made)
    _link(str(layout.manifest_path(home, parent.id)), str(layout.manifest_path(home, rid)))
    params = layout.params_dir(home, parent.id)
    if params.is_dir():
        for f in params.iterdir():
            _link_chunk(f, layout.params_dir(home, rid) / f.name)
    t0 = time.perf_counter()
    changed = {array: _set_cells(d, array, mask, values)}  # the cells that changed, per array
    res.arrays.append(ArrayReplay(array, mask.shape, n, changed[array].n, 0, 0, 0,
                                  time.perf_counter() - t0, _few(changed[array])))
    last = _last_reads(wf, array, needed)
    for step, name in enumerate(wf.order):
        d.release({a for a, i in last.items() if i == step - 1})
        if name == array:
            continue
        node = wf.nodes[name]
        hit = [(i, s) for i, s in enumerate(node.inputs) if s in changed and changed[s].n]
        if not hit:
            continue
        if name not in needed:
            res.not_replayed.append(name)
            continue
        got: Frontier | None = None  # every cell: a superset; the diff narrows it
        if not any(changed[s].full for _, s in hit):
            for i, s in hit:
                one = reach(name, i, changed[s])
                got = one if got is None else got.union(one)
            assert got is not None
            if not got.n:
                continue
        one, changed[name] = _recompute(d, name, got, spark, where)
        res.arrays.append(one)
        if notify is not None:
            notify(f"replayed {name}: {one.tiles}/{one.tiles_total} tiles, "
                   f"{one.changed} cells changed")


def _finish(d: _Derived, res: ReplayResult, t_start: float) -> None:
    """Link every array the replay did not write, record the derived run's rows, and once
    every chunk is written mark it complete."""
    wf = d.parent.workflow
    gone = set(res.not_replayed)
    for name in wf.order:  # what is computed from a left-out array goes too (else stale)
        if name not in gone and any(s in gone for s in wf.nodes[name].inputs):
            gone.add(name)
            res.not_replayed.append(name)
    for name in [*wf.inputs, *wf.order]:
        if name in d.parent.arrays and name not in d.present and name not in gone:
            d.link(name)
    ops = [n for n in wf.order if n not in gone]
    d.cat.inherit_rows(d.parent.id, d.rid, arrays=sorted(d.present), operators=ops,
                       skip_shards={(op, c) for op, cs in d.recomputed.items() for c in cs})
    d.pool.help()  # nothing left to compute: write alongside the I/O threads
    for name, write in d.shard_writes:
        d.shard_rows.extend(shard_row(name, s, d.home) for s in write.result()
                            if s.get("path"))
    d.cat.add_shards(d.rid, d.shard_rows)
    d.wait()  # the last chunks were written while the rows above were recorded
    written = {name: arrays.stored_bytes(d.path(name)) for name in d.written}
    d.cat.set_array_bytes(d.rid, written)
    full = sum(int(np.prod(wf.ops[n].out_shape, dtype=np.int64)) for n in wf.order)
    res.full_cells = full
    res.recomputed_cells = sum(a.recomputed for a in res.arrays)
    res.runtime_s = time.perf_counter() - t_start
    lineage = sum((r["data_bytes"] or 0) + (r["index_bytes"] or 0)
                  for r in d.cat.shards(d.rid))
    d.cat.finish_run(d.rid, "complete", runtime_s=res.runtime_s,
                     input_bytes=d.parent.info.get("input_bytes"), lineage_bytes=lineage,
                     array_bytes=sum(written.values()))
