"""A replay's steps: set the cells, then recompute downstream what they reach, in run
order, into a derived run (see :mod:`subzero.replay`)."""

from __future__ import annotations

import shutil
import sqlite3
import time
from concurrent.futures import Future, wait
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from encoders.store import remove_unpublished
from subzero import settings
from subzero.cells import Box
from subzero.chunking import chunk_key, task_grid
from subzero.engine import datastore, layout
from subzero.engine.arrays import read_box, stored_bytes
from subzero.engine.catalog import Catalog, shard_row
from subzero.engine.homeconfig import open_catalog
from subzero.engine.cowstore import WRITERS, CowStore, differs
from subzero.engine.diskfull import is_disk_full, no_space
from subzero.engine.heap import keep_freed_memory
from subzero.engine.runs import LoadedRun
from subzero.engine.tasks import make_jobs, raise_task_error, run_jobs, run_task
from subzero.errors import CodeError, ReplayError
from subzero.frontier import Frontier
from subzero.modes import Strategy, capture_modes
from subzero.pools import thread_pool
from subzero.query.executor import QueryExecutor
from subzero.replay.plan import (cells_of, check_replay, foreseen, last_reads, needed,
                                 sinks)
from subzero.replay.result import ArrayReplay, ReplayResult
from subzero.replay.shards import store_shared
from subzero.replay.tiles import bbox, changes, few, tiles

__all__ = ["replay_run", "SPARK_CELLS", "COMPUTE", "THREAD_CELLS"]

#: an operator whose recomputed cells exceed this runs its tiles as a Spark job (when a
#: session is given); smaller ones run here, where they do not pay a Spark job's fixed
#: start-up cost
SPARK_CELLS = settings.define(
    "REPLAY_SPARK_CELLS", 1 << 22, int,
    "An operator with more cells than this to recompute runs its tiles as a Spark job "
    "(when a session is running); smaller ones run in the replaying process, where they "
    "pay no Spark job's start-up cost.",
    benchmark="benchmarks/bench_replay.py", module=__name__)


def _compute_threads() -> int:
    """the cores the I/O threads leave, at least 1, at most 8"""
    return min(8, max(1, settings.cores() - WRITERS))


#: threads computing the tiles of one operator at once (numpy releases the GIL): the
#: cores the I/O threads (:data:`subzero.engine.cowstore.WRITERS`) leave, since on a small
#: machine more compute threads only contend with them
COMPUTE = settings.define(
    "REPLAY_COMPUTE", _compute_threads, int,
    "Threads computing the tiles of one operator of a replay at once; the cores its I/O "
    "threads leave, as more only contend with them.",
    benchmark="benchmarks/bench_replay.py", module=__name__)
#: an operator's tiles go on the :data:`COMPUTE` threads when they have this many cells;
#: fewer compute in less time than handing them to threads takes
THREAD_CELLS = settings.define(
    "REPLAY_THREAD_CELLS", 1 << 16, int,
    "Cells an operator of a replay recomputes at least for its tiles to run on several "
    "threads; fewer run in turn.",
    benchmark="benchmarks/bench_replay.py", module=__name__)
#: the name (and thread name prefix) of the pool computing tiles
TILE_THREADS = "subzero-replay-tile"


@dataclass
class _Replay:
    """One replay while it runs: the derived run's arrays (``store``), the parent's
    lineage it asks, and the lineage rows it records."""

    store: CowStore
    cat: Catalog
    #: the arrays whose changed cells are reported (always compared with the parent's)
    outputs: frozenset[str] = frozenset()
    #: compare every recomputed array with the parent's (see :meth:`compares`)
    compare_all: bool = False
    #: answers the parent's forward lineage (made on first use)
    qx: QueryExecutor | None = None
    recomputed: dict[str, set[str]] = field(default_factory=dict)  # op -> chunk keys
    shard_rows: list[dict[str, Any]] = field(default_factory=list)
    #: shards being written in the background: (operator, the task's shard statistics)
    shard_writes: list[tuple[str, Future]] = field(default_factory=list)

    @property
    def rid(self) -> str:
        return self.store.rid

    @property
    def parent(self) -> LoadedRun:
        return self.store.parent

    def reach(self, op: str, i: int, changed: Frontier) -> Frontier:
        """The output cells of ``op`` that the cells ``changed`` of its input ``i`` reach
        (forward lineage of the parent, one step): a few cells stay a few indices, and
        cost in proportion to them rather than to the array."""
        if self.qx is None:
            self.qx = QueryExecutor(self.parent, catalog=self.cat, log=False)
        return self.qx.reach(op, i, "forward", changed)

    def parent_shards(self, name: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The parent's shard rows of operator ``name`` by (strategy, chunk), read once per
        loaded parent (a complete run's shards never change)."""
        memo = self.parent.memo
        got = memo.get(("shards", name))
        if got is None:
            got = memo["shards", name] = {(r["strategy"], r["chunk"]): r for r in
                                          self.cat.shards(self.parent.id, op=name)}
        return got

    def compares(self, name: str, whole: bool) -> bool:
        """Whether the replay compares its recomputed values of ``name`` with the parent's
        (``whole``: every cell recomputed). It does unless ``name`` is recomputed whole by
        an operator that is not global, is not an output, and whose parent's chunks are
        noisy (stored raw, :meth:`CowStore.noisy`): an array recomputed whole because an
        input changed whole (everything after a changed mean) changes nearly everywhere,
        so the comparison would narrow nothing downstream, while decoding the parent's
        noisy chunks and comparing them is a large share of such a replay's time. Its
        cells are then counted as changed (a superset: what it reaches is recomputed, and
        equals a full run all the same) and its count is not reported. A global
        operator's output is compared (unchanged, it stops the replay), an output is (the
        answer), and so is a mask or any array that compresses well (cheap to decode;
        unchanged chunks are then linked to the parent's, not written)."""
        if self.compare_all or not whole or name in self.outputs:
            return True
        if self.parent.workflow.ops[name].parallelism.kind == "global":
            return True
        return not self.store.noisy(name)

    def prefetch_all(self, start: str, box: Box | None, ops: set[str]) -> None:
        """Start decoding, in run order, the parent's chunks the replay will likely read:
        of each replayed operator's output (to compare with) and of the arrays it reads
        that the replay does not change. Which chunks follows
        :func:`~subzero.replay.plan.foreseen`: those under ``box`` (the changed cells of
        ``start``) for an operator the change reaches there, every chunk for one it
        reaches whole (through a global operator), none for one it may not reach at all
        (they are read when, and if, it does). Near the box, only the Blosc blocks
        holding it are decoded, unless an operator reached whole reads the array (then all
        of them, here rather than when it is read)."""
        d, wf = self.store, self.parent.workflow
        seen = {start}
        steps = {name: i for i, name in enumerate(wf.order)}
        ahead = foreseen(wf, start, ops)
        read_whole = {src for name, whole in ahead.items() if whole
                      for src in wf.nodes[name].inputs}
        for name, whole in ahead.items():
            for src in (*wf.nodes[name].inputs, name):
                if src in seen or (src in ops and src != name):
                    continue
                if src == name and not self.compares(name, whole):
                    continue
                seen.add(src)
                files = d.parent_files(src)
                if files is None:
                    continue
                if whole:
                    d.prefetch(src, files.keys(), steps[name])
                elif box is not None and files.shape == wf.array_shape(start):
                    d.prefetch(src, files.keys(box), steps[name],
                               None if src in read_whole else box)


def replay_run(parent: LoadedRun, array: str, mask: np.ndarray, values: np.ndarray,
               to: Sequence[str] | None = None, value_text: str = "",
               spark: Any = None, where: str = "auto",
               notify: Callable[[str], None] | None = None,
               catalog: Catalog | None = None, compare_all: bool = False,
               executor: QueryExecutor | None = None) -> ReplayResult:
    """Replay ``parent`` with the cells ``mask`` of ``array`` set to ``values``.

    The derived run is ``running`` while it is built and ``failed`` if the replay stops
    (an error here, or a killed process: the next catalog open reaps it); nothing of the
    parent's is ever written.

    Parameters
    ----------
    parent
        A complete run.
    array
        The array whose cells change (an input or an intermediate).
    mask
        The cells that change, a bool array of ``array``'s shape.
    values
        Their new values, one per cell in C order (:func:`~subzero.replay.replay_values`).
    to
        Replay only the operators these arrays need (the others the change reaches are
        left out of the derived run).
    value_text
        What the cells were set to, as the result says it.
    spark
        A Spark session for large operators (None: every operator runs here).
    where
        ``"auto"`` (Spark for operators with more than :data:`SPARK_CELLS` cells to
        recompute, when ``spark`` is given), ``"driver"`` or ``"spark"``.
    notify
        Hears a line per operator replayed.
    catalog
        The home's catalog, when the caller has it open (left open).
    compare_all
        Count the changed cells of every array, also of the noisy intermediates
        recomputed whole that are otherwise passed on uncompared (see the package
        docstring).
    executor
        Answers the parent's forward lineage (default: a new one on ``catalog``, which
        does not log its queries).

    Returns
    -------
    ReplayResult
        The derived run and what changed.

    Raises
    ------
    ReplayError
        A run, cells or ``where`` it cannot replay.
    CodeError
        An operator to recompute whose code cannot run here.
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
    ops = needed(wf, array, to)
    blocked = [n for n in wf.order if n in ops and n in parent.unavailable]
    if blocked:  # before the derived run exists: its code would run
        raise CodeError(f"replay recomputes operator {blocked[0]!r}, whose code cannot run "
                        f"here: {parent.unavailable[blocked[0]]}")
    outputs = list(dict.fromkeys(to)) if to else [a for a in sinks(wf) if a in ops]
    derivation = {"kind": "replay", "array": array, "cells": n, "value": value_text,
                  "to": list(to or [])}
    home = parent.home
    if datastore.mounted(home) is not None:
        raise ReplayError(f"what-if replay writes its run beside the parent's files, which "
                          f"needs a local home, not {datastore.mounted(home).url}")
    cat = catalog or open_catalog(home)
    t_start = time.perf_counter()
    rid = cat.create_derived_run(parent.id, derivation)
    r = _Replay(CowStore(parent, rid, home), cat, outputs=frozenset(outputs),
                compare_all=compare_all, qx=executor)
    res = ReplayResult(rid, parent.id, wf.name, array, n, value_text, outputs=outputs,
                       parent_runtime_s=parent.info.get("runtime_s"))
    try:
        with keep_freed_memory():
            _replay(r, res, array, mask, values, ops, spark, where, notify)
        _finish(r, res, t_start)
        return res
    except BaseException as e:
        r.store.shutdown(cancel=True)  # nothing written after the mark
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
        r.store.shutdown()
        if r.qx is not None and executor is None:
            r.qx.close()
        if catalog is None:
            cat.close()


def _replay(r: _Replay, res: ReplayResult, array: str, mask: np.ndarray, values: np.ndarray,
            ops: set[str], spark: Any, where: str,
            notify: Callable[[str], None] | None) -> None:
    """The replay's steps (:func:`replay_run`): set the cells, then recompute downstream."""
    d, wf = r.store, r.parent.workflow
    n = len(values)
    # the I/O threads start decoding what the steps will read while the run is set up
    r.prefetch_all(array, bbox(mask, Box.full(mask.shape)), ops)
    d.create()
    t0 = time.perf_counter()
    changed = {array: _set_cells(d, array, mask, values)}  # the cells that changed, per array
    res.arrays.append(ArrayReplay(array, mask.shape, n, changed[array].n, 0, 0, 0,
                                  time.perf_counter() - t0, few(changed[array])))
    last = last_reads(wf, array, ops)
    for step, name in enumerate(wf.order):
        d.release({a for a, i in last.items() if i == step - 1})
        if name == array:
            continue
        node = wf.nodes[name]
        hit = [(i, s) for i, s in enumerate(node.inputs) if s in changed and changed[s].n]
        if not hit:
            continue
        if name not in ops:
            res.not_replayed.append(name)
            continue
        got: Frontier | None = None  # every cell: a superset; the diff narrows it
        if not any(changed[s].full for _, s in hit):
            for i, s in hit:
                one = r.reach(name, i, changed[s])
                got = one if got is None else got.union(one)
            assert got is not None
            if not got.n:
                continue
        one, changed[name] = _recompute(r, name, got, spark, where)
        res.arrays.append(one)
        if notify is not None:
            notify(f"replayed {name}: {one.tiles}/{one.tiles_total} tiles, "
                   f"{one.changed} cells changed")


def _finish(r: _Replay, res: ReplayResult, t_start: float) -> None:
    """Link every array the replay did not write, record the derived run's rows, and once
    every chunk is written mark it complete."""
    d, wf = r.store, r.parent.workflow
    gone = set(res.not_replayed)
    for name in wf.order:  # what is computed from a left-out array goes too (else stale)
        if name not in gone and any(s in gone for s in wf.nodes[name].inputs):
            gone.add(name)
            res.not_replayed.append(name)
    for name in [*wf.inputs, *wf.order]:
        if name in r.parent.arrays and name not in d.present and name not in gone:
            d.link(name)
    ops = [n for n in wf.order if n not in gone]
    r.cat.inherit_rows(r.parent.id, r.rid, arrays=sorted(d.present), operators=ops,
                       skip_shards={(op, c) for op, cs in r.recomputed.items() for c in cs})
    d.finish()  # nothing left to compute: write alongside the I/O threads
    for name, write in r.shard_writes:
        r.shard_rows.extend(shard_row(name, s, d.home) for s in write.result()
                            if s.get("path"))
    r.cat.add_shards(r.rid, r.shard_rows)
    d.wait()  # the last chunks were written while the rows above were recorded
    written = {name: stored_bytes(d.path(name)) for name in d.written}
    r.cat.set_array_bytes(r.rid, written)
    res.full_cells = sum(cells_of(wf.ops[n].out_shape) for n in wf.order)
    res.recomputed_cells = sum(a.recomputed for a in res.arrays)
    res.runtime_s = time.perf_counter() - t_start
    lineage = sum((row["data_bytes"] or 0) + (row["index_bytes"] or 0)
                  for row in r.cat.shards(r.rid))
    r.cat.finish_run(r.rid, "complete", runtime_s=res.runtime_s,
                     input_bytes=r.parent.info.get("input_bytes"), lineage_bytes=lineage,
                     array_bytes=sum(written.values()))


def _set_cells(d: CowStore, name: str, mask: np.ndarray, values: np.ndarray) -> Frontier:
    """Write ``values`` into the cells ``mask`` of the derived run's copy of ``name``;
    returns the cells whose value changed."""
    box = bbox(mask, Box.full(mask.shape))
    files = d.parent_files(name)
    d.copy(name, whole=False,
           rewrite=None if files is None else set(files.keys(box) if box else []))
    if box is None:
        return changes(mask.shape, [])
    old = d.old_box(name, box)
    new = np.array(old)
    new[mask[box.slices]] = values
    diff = d.store(name, box, new)  # may patch the chunk ``old`` is a view of
    changed = changes(mask.shape, [(box, differs(old, new) if diff is None else diff)])
    d.flush(name, changed)
    return changed


def _recompute(r: _Replay, name: str, reach: Frontier | None, spark: Any, where: str
               ) -> tuple[ArrayReplay, Frontier]:
    """Recompute the tiles of operator ``name`` holding the cells ``reach`` (None: every
    cell) into the derived run (lineage captured with the operator's strategies); the cells
    that changed."""
    t0 = time.perf_counter()
    d, run = r.store, r.parent
    wf = run.workflow
    op, node = wf.ops[name], wf.nodes[name]
    strategies: list[Strategy] = run.strategies(name)
    stored = [s for s in strategies if s.stored]
    chunks = run.chunks(name)
    grid = task_grid(op, chunks)
    todo = tiles(op, chunks, reach, by_chunk=bool(stored) or op.parallelism.kind == "global")
    cells = int(sum(b.size for _, b in todo))
    for src in node.inputs:
        d.ensure(src)
    whole = cells == cells_of(op.out_shape)
    compare = r.compares(name, whole)
    use_spark = where == "spark" or (where == "auto" and spark is not None
                                     and cells > SPARK_CELLS and len(todo) > 1)
    files = None if use_spark else d.parent_files(name)
    rewrite = None if files is None else {k for _, b in todo for k in files.keys(b)}
    d.copy(name, whole=whole, rewrite=rewrite)
    if rewrite and compare:  # the parent's chunks: to compare with (and to patch)
        d.prefetch(name, sorted(rewrite))
    jobs = make_jobs(d.home, d.rid, op, [d.path(s) for s in node.inputs],
                     d.path(name) if use_spark else None, todo, stored,
                     capture_modes(strategies))
    parts: list[tuple[Box, np.ndarray]] = []  # each recomputed box, and which cells differ
    if use_spark:
        d.wait()
        results = run_jobs(jobs, spark, f"{d.rid}: replay {name}")
        raise_task_error(name, results)
        # read back one block at a time: a large operator's blocks are never all held
        blocks: Any = ((j.chunk.out_box, read_box(d.path(name), j.chunk.out_box))
                       for j in jobs) if compare else ()
    else:
        results, blocks = _run_here(r, op, node.inputs, jobs, cells, compare), []
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
    # not compared: recomputed whole, every cell counted as changed (see _Replay.compares)
    changed = changes(op.out_shape, parts) if compare else Frontier.everything(op.out_shape)
    d.flush(name, changed)
    if use_spark:  # a retried task may have left a shard it did not publish
        for s in stored:
            remove_unpublished(layout.strategy_dir(d.home, d.rid, name, s.name))
    for res in results:
        if isinstance(res["shards"], Future):
            r.shard_writes.append((name, res["shards"]))
        else:
            r.shard_rows.extend(shard_row(name, s, d.home) for s in res["shards"]
                                if s.get("path"))
    r.recomputed[name] = {chunk_key(idx) for idx, _ in todo} if stored else set()
    # the tiles hold every reached cell
    return ArrayReplay(name, tuple(op.out_shape), cells if reach is None else reach.n,
                       changed.n if compare else None, len(todo), len(grid), cells,
                       time.perf_counter() - t0, few(changed) if compare else None), changed


def _run_here(r: _Replay, op: Any, inputs: Sequence[str], jobs: Sequence[Any], cells: int,
              compare: bool = True) -> list[dict[str, Any]]:
    """Run the tiles in this process (several at once on threads when they are large),
    every input block from :meth:`CowStore.new_box`; each result carries its output
    ``block`` (box, values as a run stores them, and which differ from the parent's or
    None), also stored in the derived run (``compare``: see :meth:`CowStore.store`)."""
    d = r.store
    parents = r.parent_shards(op.name) if any(j.strategies for j in jobs) else {}
    digests = r.parent.memo.setdefault(("digests", op.name), {})

    def one(j: Any) -> dict[str, Any]:
        mine = {src: (j.chunk.in_boxes[i], d.new_box(src, j.chunk.in_boxes[i]))
                for i, src in enumerate(inputs)}
        # the pairs come back, and their shards are written in the background
        res = run_task(replace(j, memory=tuple(inputs), strategies=(),
                               collect=bool(j.strategies)), mine)
        if "error" not in res:
            res["block"] = mine[op.name]
            if j.strategies:
                res["shards"] = d.background(store_shared, d.home, j, res.pop("full"),
                                             res.pop("payload"), parents, digests)
        return res

    if COMPUTE > 1 and len(jobs) > 1 and cells >= THREAD_CELLS:
        pool = thread_pool(TILE_THREADS, COMPUTE)
        futures = [pool.submit(one, j) for j in jobs]
        wait(futures)  # every tile ends before an error is raised
        done = [f.result() for f in futures]
    else:
        done = [one(j) for j in jobs]
    for res in done:
        raise_task_error(op.name, [res])
        box, block = res["block"]
        block = np.asarray(block)
        if block.dtype != op.out_dtype and op.out_dtype.kind not in "UOT":
            block = block.astype(op.out_dtype)  # as a run stores it
        res["block"] = (box, block, d.store(op.name, box, block, compare))
    return done
