"""What runs on a Spark worker: one task computes one output chunk of one operator.

A task reads its input blocks (plus the halo of a stencil) from zarr, runs the operator's
pure kernel, writes its output chunk, hands the lineage it captured to one sink per stored
strategy, and returns timings and lineage statistics (plain data) to the driver. Nothing
but small closures (the bound operator and the chunk context) is shipped to tasks; arrays
never pass through the driver. The same tasks re-execute an operator in tracing mode for
queries (:mod:`subzero.engine.reexec`), then without writing anything.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from encoders.sink import write_shard
from subzero.cells import Box
from subzero.chunking import chunk_key
from subzero.engine import arrays, datastore, layout
from subzero.engine.direct import wait_written
from subzero.engine.heap import freeze_worker_objects
from subzero.errors import DamagedError, SubZeroError, WorkflowError
from subzero.lineage import BoxedPairs, PairBatch
from subzero.modes import Mode, Strategy
from subzero.operator import Operator
from subzero.pools import thread_pool
from subzero.runtime import ChunkContext, TaskContext

#: ``reduce(chunk, full_pairs, payload_pairs)``: what a re-executing task returns instead
#: of its pairs (so large pair sets never travel to the driver)
Reduce = Callable[[ChunkContext, PairBatch | BoxedPairs | None, PairBatch | None], Any]


@dataclass(frozen=True)
class TaskJob:
    """Everything one task needs: a small closure, no array data."""

    home: str
    run: str
    op: Operator  # bound
    chunk: ChunkContext
    in_paths: tuple[str, ...]
    out_path: str | None  # None: do not write the output (re-execution)
    strategies: tuple[Strategy, ...]  # stored strategies to hand pairs to
    modes: frozenset[Mode]
    collect: bool = False  # return the captured pairs (re-execution)
    reduce: Reduce | None = None
    #: per input, the earlier step of a fused task whose output block it reads from memory
    #: (None: read from ``in_paths``)
    memory: tuple[str | None, ...] = ()
    #: write the output's chunk files past the page cache (no later stage reads them:
    #: :class:`subzero.engine.direct.DirectWrites`)
    direct: bool = False
    #: global operators to compute a partial of this step's output block for
    #: (:meth:`subzero.operator.Operator.partial`), returned in the result's ``partials``
    partials: tuple[Operator, ...] = ()
    #: the combined partials of the operator's input (:meth:`Operator.combine`): the task
    #: reads no input and makes its chunk with :meth:`Operator.run_combined`
    combined: Any = None


@dataclass(frozen=True)
class InputJob:
    """One chunk of a workflow input to produce in a task: ``source(box)`` generates it or
    reads it from the input's file."""

    name: str
    index: tuple[int, ...]
    box: Box
    source: Callable[[Box], np.ndarray]
    dtype: np.dtype
    out_path: str
    partials: tuple[Operator, ...] = ()  # as :attr:`TaskJob.partials`


@dataclass(frozen=True)
class GroupJob:
    """One chunk of a fused stage: its steps (inputs and operators) in order."""

    index: tuple[int, ...]
    steps: tuple[TaskJob | InputJob, ...]


def _attempt() -> int:
    if "pyspark" not in sys.modules:  # a Spark worker has imported it: this is the driver
        return 0
    try:
        from pyspark import TaskContext as SparkTaskContext

        tc = SparkTaskContext.get()
        return int(tc.attemptNumber()) if tc is not None else 0
    except Exception:  # noqa: BLE001 - not inside a Spark task
        return 0


def _stored_dtype(block: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``block`` in the array's numeric dtype (text keeps its own representation)."""
    if block.dtype != dtype and dtype.kind not in "UOT":
        return block.astype(dtype)
    return block


def _failed(res: dict[str, Any], e: Exception) -> None:
    """Record a task's error in its result (a user error as itself, with no traceback; a
    damaged file as such, so that the driver can tell it from other errors)."""
    if isinstance(e, DamagedError):
        res["error"], res["error_kind"] = str(e), "damaged"
    elif isinstance(e, SubZeroError):
        res["error"], res["error_kind"] = str(e), "user"
    else:
        res["error"], res["error_kind"] = f"{type(e).__name__}: {e}", "internal"
        res["traceback"] = traceback.format_exc()


def _writer() -> ThreadPoolExecutor:
    """This process's one chunk-writing thread: a task that stores lineage writes its
    output chunk there meanwhile. Compressing and writing a chunk release the GIL, so the
    writing overlaps the storing of lineage, and a global operator's single task (``clust``)
    uses a second core."""
    return thread_pool("subzero-write", 1)


def _storer() -> ThreadPoolExecutor:
    """This process's one lineage-storing thread: a step of a fused task hands its pairs
    there and the next step runs meanwhile (encoding is numpy's, LMDB's writes C's)."""
    return thread_pool("subzero-store", 1)


def _timed_write(path: Path, box: Box, block: np.ndarray,
                 direct: list[Any] | None = None) -> float:
    t = time.perf_counter()
    arrays.write_block(path, box, block, direct)
    return time.perf_counter() - t


def store_shards(job: TaskJob, full: PairBatch | BoxedPairs | None, pay: PairBatch | None,
                 same_as: dict[str, str] | None = None) -> list[dict]:
    """Write the task's pairs as one shard per stored strategy; their statistics.
    ``same_as``: per strategy, another shard's pairs digest: a strategy whose pairs have it
    writes nothing (its statistics are ``{"same": True, ...}``, without a path)."""
    op, ch = job.op, job.chunk
    shards = []
    for s in job.strategies:
        ts = time.perf_counter()
        spec = layout.shard_spec(Path(job.home), job.run, op.name, s, ch.index, ch.out_box,
                                 ch.out_shape, ch.in_shapes, _attempt())
        pairs, same = full if s.mode is Mode.FULL else pay, (same_as or {}).get(s.name)
        if datastore.mounted(spec.path) is None:
            stats = write_shard(spec, pairs, same)
        else:  # built in local scratch, uploaded under a key of this attempt's own
            stats = datastore.publish_shard(
                spec.path, spec.attempt,
                lambda local, spec=spec, pairs=pairs, same=same: write_shard(
                    replace(spec, path=str(local)), pairs, same))
        stats.setdefault("encode_s", time.perf_counter() - ts)
        stats["strategy"] = s.name
        stats["chunk"] = chunk_key(ch.index)
        stats["store_s"] = time.perf_counter() - ts
        shards.append(stats)
    return shards


Memory = dict[str, tuple[Box, np.ndarray]]
Producers = dict[str, "TaskJob | InputJob"]


def _slabs(outer: Box, inner: Box) -> list[Box]:
    """``outer`` minus ``inner`` as disjoint boxes (one slab below and one above ``inner``
    per axis; ``inner`` clipped to ``outer`` first).

    >>> [str(b) for b in _slabs(Box((0, 0), (6, 4)), Box((2, 0), (4, 4)))]
    ['0:2,0:4', '4:6,0:4']
    """
    lo, hi = list(outer.lo), list(outer.hi)
    ilo = [max(a, b) for a, b in zip(inner.lo, outer.lo)]
    ihi = [min(a, b) for a, b in zip(inner.hi, outer.hi)]
    if any(a >= b for a, b in zip(ilo, ihi)):
        return [outer]
    out = []
    for d in range(len(lo)):
        if lo[d] < ilo[d]:
            out.append(Box(tuple(lo[:d] + [lo[d]] + lo[d + 1:]),
                           tuple(hi[:d] + [ilo[d]] + hi[d + 1:])))
        if ihi[d] < hi[d]:
            out.append(Box(tuple(lo[:d] + [ihi[d]] + lo[d + 1:]),
                           tuple(hi[:d] + [hi[d]] + hi[d + 1:])))
        lo[d], hi[d] = ilo[d], ihi[d]
    return out


def _rel(box: Box, within: Box) -> tuple[slice, ...]:
    return tuple(slice(a - o, b - o) for a, b, o in zip(box.lo, box.hi, within.lo))


def _block(name: str, box: Box, memory: Memory, producers: Producers) -> np.ndarray | None:
    """Cells ``box`` of array ``name`` made in this fused task: what an earlier step holds
    in memory, and the rest (a stencil's halo beyond the chunk) computed again from the
    steps before, without capturing lineage or writing; None if no step makes ``name``."""
    have = memory.get(name)
    if have is not None and all(a >= lo and b <= hi for a, b, lo, hi in
                                zip(box.lo, box.hi, have[0].lo, have[0].hi)):
        return have[1][_rel(box, have[0])]
    step = producers.get(name)
    if step is None:
        return None
    rest = _slabs(box, have[0]) if have is not None else [box]
    parts = [(b, _compute(step, b, memory, producers)) for b in rest]
    out = np.empty(box.shape, dtype=parts[0][1].dtype if parts else have[1].dtype)
    if have is not None:
        both = Box(tuple(max(a, b) for a, b in zip(box.lo, have[0].lo)),
                   tuple(min(a, b) for a, b in zip(box.hi, have[0].hi)))
        if all(a < b for a, b in zip(both.lo, both.hi)):
            out[_rel(both, box)] = have[1][_rel(both, have[0])]
    for b, part in parts:
        out[_rel(b, box)] = part
    return out


def _compute(step: "TaskJob | InputJob", box: Box, memory: Memory, producers: Producers
             ) -> np.ndarray:
    """Step ``step``'s cells ``box``, black box (no lineage, nothing written)."""
    if isinstance(step, InputJob):
        return _stored_dtype(np.asarray(step.source(box)), step.dtype)
    op = step.op
    in_boxes = tuple(op.input_box(box, i) for i in range(len(op.in_shapes)))
    ch = ChunkContext(step.chunk.index, box, in_boxes, op.out_shape, op.in_shapes)
    ctx = TaskContext(ch, frozenset({Mode.BLACKBOX}), op.name)
    if step.combined is not None:
        return _stored_dtype(np.asarray(op.run_combined(ctx, step.combined)), op.out_dtype)
    blocks = _inputs(step, in_boxes, memory, producers)
    return _stored_dtype(np.asarray(op.run(ctx, *blocks)), op.out_dtype)


def _partials(ops: Sequence[Operator], box: Box, block: np.ndarray) -> dict[str, Any]:
    """Each global operator's partial of the block ``box`` of its input, by name, with
    the box (the result's ``partials``)."""
    return {op.name: (box, op.partial(block, box)) for op in ops}


def _inputs(job: TaskJob, boxes: Sequence[Box], memory: Memory, producers: Producers
            ) -> list[np.ndarray]:
    """Input blocks ``boxes``: from the fused task where an earlier step makes them, else
    from zarr."""
    blocks = []
    for i, (p, b) in enumerate(zip(job.in_paths, boxes)):
        src = job.memory[i] if i < len(job.memory) else None
        got = _block(src, b, memory, producers) if src is not None else None
        blocks.append(got if got is not None else arrays.read_box(Path(p), b))
    return blocks


def run_task(job: TaskJob, memory: Memory | None = None, producers: Producers | None = None,
             stores: list[tuple[dict[str, Any], Future]] | None = None,
             written: list[Any] | None = None) -> dict[str, Any]:
    """Run one task (inside a Spark worker, or on the driver). Never raises: errors come
    back as data so the driver can report them in one line.

    ``memory`` holds the output blocks of the earlier steps of a fused task
    (:func:`run_group`), ``producers`` those steps (to compute a halo beyond the chunk);
    this step's output block is added to ``memory``. With ``stores`` (a fused task's), the
    step's shards are stored on the storing thread while the task goes on: ``(result,
    future)`` is appended, and :func:`settle_stores` completes the result. With
    ``written`` (a fused task's), the futures of the chunk files written past the page
    cache (``job.direct``) are appended for the task to wait for; without, this step waits
    for them before it returns.
    """
    t0 = time.perf_counter()
    res: dict[str, Any] = {"chunk": job.chunk.index, "shards": []}
    own: list[Any] = []
    direct = (own if written is None else written) if job.direct else None
    try:
        op, ch = job.op, job.chunk
        blocks = [] if job.combined is not None else _inputs(
            job, ch.in_boxes, memory if memory is not None else {}, producers or {})
        t_read = time.perf_counter()
        supported = op.supported_modes()
        supports_full = Mode.FULL in supported
        run_modes = job.modes
        if Mode.FULL in job.modes and not supports_full:
            run_modes = (job.modes - {Mode.FULL}) or frozenset({Mode.BLACKBOX})
        ctx = TaskContext(ch, run_modes, op.name)
        out = (op.run(ctx, *blocks) if job.combined is None
               else op.run_combined(ctx, job.combined))
        if Mode.FULL in job.modes and not supports_full:
            if Mode.MAP in supported:  # exact mapping functions: their pairs
                op.trace_mapped(ctx)
            else:  # the paper's default for operators that expose nothing
                op.trace_all_to_all(ctx)
        t_run = time.perf_counter()
        out = np.asarray(out)
        if out.shape != ch.out_box.shape:
            raise WorkflowError(
                f"operator {op.name!r} returned a block of shape {out.shape} for chunk "
                f"{chunk_key(ch.index)}; expected {ch.out_box.shape}"
            )
        writing = None
        if job.out_path is not None or job.partials:
            out = _stored_dtype(out, op.out_dtype)
        if job.partials:  # of the values as written: what a global task would read
            res["partials"] = _partials(job.partials, ch.out_box, out)
        if job.out_path is not None:
            if job.strategies:  # the chunk is written while the lineage is stored
                writing = _writer().submit(_timed_write, Path(job.out_path), ch.out_box, out,
                                           direct)
            else:
                arrays.write_block(Path(job.out_path), ch.out_box, out, direct)
        if memory is not None:
            memory[op.name] = (ch.out_box, out)
        t_write = time.perf_counter()
        try:
            # kept as recorded (boxes unexpanded, see TaskContext.full_lineage) unless the
            # driver collects the pairs; a reduction expands what it reads
            full = ctx.full_pairs() if job.collect else ctx.full_lineage()
            pay = ctx.payload_pairs()
            if stores is not None and job.strategies and job.reduce is None:
                stores.append((res, _storer().submit(store_shards, job, full, pay)))
            else:
                res["shards"] = store_shards(job, full, pay)
            t_store = time.perf_counter()  # the store's own time, not the write's
        finally:
            write_s = writing.result() if writing is not None else t_write - t_run
        if job.reduce is not None:
            res["result"] = job.reduce(ch, full, pay)
        elif job.collect:
            res["full"], res["payload"] = full, pay
        res.update(
            read_s=t_read - t0, run_s=t_run - t_read, capture_s=ctx.capture_s,
            write_s=write_s, store_s=t_store - t_write,
            pairs=(len(full) if full else 0) + (len(pay) if pay else 0),
            out_cells=(full.out_cells if full else 0) + (pay.out_cells if pay else 0),
            in_cells=full.in_cells if full else 0,
        )
    except Exception as e:  # noqa: BLE001 - reported by the driver in one line
        _failed(res, e)
    try:
        wait_written(own)  # its own: a fused task's wait for the task's end
    except Exception as e:  # noqa: BLE001 - reported by the driver in one line
        if "error" not in res:
            _failed(res, e)
    res["task_s"] = time.perf_counter() - t0
    return res


def run_input(job: InputJob, memory: Memory) -> dict[str, Any]:
    """Produce one chunk of a workflow input (generated, or read from its file) and write
    it to the input's zarr array. Never raises, like :func:`run_task`."""
    t0 = time.perf_counter()
    res: dict[str, Any] = {"chunk": job.index, "shards": []}
    try:
        block = np.asarray(job.source(job.box))
        if block.shape != job.box.shape:
            raise WorkflowError(
                f"input {job.name!r}: its generator returned a block of shape {block.shape} "
                f"for {job.box}; expected {job.box.shape}")
        block = _stored_dtype(block, job.dtype)
        if job.partials:
            res["partials"] = _partials(job.partials, job.box, block)
        t_read = time.perf_counter()
        arrays.write_block(Path(job.out_path), job.box, block)
        memory[job.name] = (job.box, block)
        res.update(read_s=t_read - t0, write_s=time.perf_counter() - t_read)
    except Exception as e:  # noqa: BLE001 - reported by the driver in one line
        _failed(res, e)
    res["task_s"] = time.perf_counter() - t0
    return res


def run_group(job: GroupJob) -> list[dict[str, Any]]:
    """Run one chunk of a fused stage: every step in order, each step's output block kept
    in memory for the steps after it (and a stencil's halo beyond the chunk computed again
    from them). One result per step; a failed step ends the task (its result carries the
    error)."""
    memory: Memory = {}
    producers: Producers = {}
    stores: list[tuple[dict[str, Any], Future]] = []
    written: list[tuple[dict[str, Any], list[Any]]] = []  # per step: its direct writes
    out = []
    ok = False
    try:
        for step in job.steps:
            if isinstance(step, InputJob):
                res = run_input(step, memory)
                producers[step.name] = step
            else:
                mine: list[Any] = []
                res = run_task(step, memory, producers, stores, mine)
                written.append((res, mine))
                producers[step.op.name] = step
            out.append(res)
            if "error" in res:
                break
        ok = "error" not in out[-1] if out else True
    finally:
        for res, mine in written:  # every chunk in place before the task returns
            try:
                wait_written(mine)
            except Exception as e:  # noqa: BLE001 - reported by the driver in one line
                if "error" not in res:
                    _failed(res, e)  # the step whose chunk it was
                ok = False
        if ok and _deferring:  # the driver settles them (settle_deferred)
            for res, fut in stores:
                res[_PENDING] = fut
        else:
            settle_stores(stores)
    return out


#: in a run in the driver's own process (:func:`deferring_stores`), a fused task ends
#: without waiting for its lineage stores: its results carry them, and the driver settles
#: them once the stages that depend on it have started (:func:`settle_deferred`)
_deferring = False
_PENDING = "pending_store"


@contextmanager
def deferring_stores() -> Iterator[None]:
    """Within the block, this process's fused tasks leave their lineage stores to the
    driver (a run in the driver's own process, not under a lineage budget): the storing
    thread works on while the next stages run, as the task threads would otherwise wait
    for it (a stage's last step stores after its chunk is written, ``cr`` and ``clust``
    above all)."""
    global _deferring
    _deferring = True
    try:
        yield
    finally:
        _deferring = False


def drain_stores() -> None:
    """Wait until every store handed to this process's storing thread so far has ended
    (its one thread takes them in turn): a failed run in the driver's own process leaves
    none writing after it."""
    _storer().submit(lambda: None).result()


def settle_deferred(results: Sequence[Sequence[dict[str, Any]]]) -> None:
    """Wait for the stores the tasks of ``results`` (one list per chunk) left pending, and
    complete their results as :func:`settle_stores` does."""
    settle_stores([(res, res.pop(_PENDING)) for chunk in results for res in chunk
                   if _PENDING in res])


def settle_stores(stores: list[tuple[dict[str, Any], Future]]) -> None:
    """Wait for the shards a fused task stores on the storing thread, and complete each
    step's result: its shards, its store time (added to the step's time too), or the
    store's error."""
    for res, fut in stores:
        try:
            shards = fut.result()
        except Exception as e:  # noqa: BLE001 - reported by the driver in one line
            if "error" not in res:
                _failed(res, e)
            continue
        res["shards"] = shards
        spent = sum(s.get("store_s", 0.0) for s in shards)
        res["store_s"] = res.get("store_s", 0.0) + spent
        res["task_s"] = res.get("task_s", 0.0) + spent


def raise_task_error(op: str, results: Sequence[dict[str, Any]]) -> None:
    """Raise the first task error of ``results`` in one line (a user error as itself)."""
    for r in results:
        if "error" in r:
            named = f"operator {op!r}"
            said = r["error"] if r["error"].startswith(named) else f"{named}: {r['error']}"
            if r["error_kind"] == "damaged":  # a query may answer another way
                raise DamagedError(said)
            if r["error_kind"] == "user":
                raise SubZeroError(said)
            if os.environ.get("SUBZERO_DEBUG"):
                print(r.get("traceback", ""), file=sys.stderr)
            raise RuntimeError(
                f"operator {op!r} failed in chunk {chunk_key(r['chunk'])}: {r['error']}"
            )


def run_jobs(jobs: Sequence[TaskJob], spark: Any | None, label: str = "") -> list[dict]:
    """Run tasks as one Spark stage (``spark`` given) or on the driver (``spark=None``)."""
    return _run(run_task, jobs, spark, label)


def run_groups(jobs: Sequence[GroupJob], spark: Any | None, label: str = "",
               threads: int = 1) -> list[list[dict]]:
    """Run the chunks of a fused stage as one Spark stage (or on the driver, on this
    process's ``threads`` task threads: see :func:`_run`)."""
    return _run(run_group, jobs, spark, label, threads)


def _run(fn: Callable[[Any], Any], jobs: Sequence[Any], spark: Any | None, label: str,
         threads: int = 1) -> list[Any]:
    """``fn`` of every job: as one Spark stage, or in this process. There, with ``threads``
    above 1, the jobs run on this process's one pool of that many task threads, which every
    stage running at the time shares (as a stage's tasks share an executor's cores): a
    stage alone, such as the one after a global operator, keeps every core busy."""
    if spark is None or not jobs:
        if threads > 1 and len(jobs) > 1:
            return list(thread_pool(f"subzero-task-{threads}", threads).map(fn, jobs))
        return [fn(j) for j in jobs]
    sc = spark.sparkContext
    sc.setJobDescription(label)
    return sc.parallelize(list(jobs), len(jobs)).map(
        partial(_on_worker, fn, datastore.table())).collect()


def _on_worker(fn: Callable[[Any], Any], mounts: dict[str, str], job: Any) -> Any:
    """``fn(job)`` in a Spark worker, the objects alive at the task's start frozen first
    (:func:`subzero.engine.heap.freeze_worker_objects`), and the object-store homes the
    driver mounted mounted here too (:func:`subzero.engine.datastore.install`)."""
    if mounts:
        datastore.install(mounts)
    freeze_worker_objects()
    return fn(job)


def make_jobs(home: Path, rid: str, op: Operator, in_paths: Sequence[Path],
              out_path: Path | None, boxes: Sequence[tuple[tuple[int, ...], Box]],
              strategies: Sequence[Strategy], modes: frozenset[Mode], collect: bool = False,
              reduce: Reduce | None = None) -> list[TaskJob]:
    """One job per ``(index, output box)``."""
    jobs = []
    for idx, box in boxes:
        in_boxes = tuple(op.input_box(box, i) for i in range(len(op.in_shapes)))
        ch = ChunkContext(idx, box, in_boxes, op.out_shape, op.in_shapes)
        jobs.append(TaskJob(str(home), rid, op, ch, tuple(str(p) for p in in_paths),
                            None if out_path is None else str(out_path),
                            tuple(s for s in strategies if s.stored), modes, collect, reduce))
    return jobs
