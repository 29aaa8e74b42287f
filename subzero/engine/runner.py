"""The driver's side of a run: plan, inputs, fused Spark stages, catalog rows.

:func:`execute` runs what a :class:`~subzero.engine.runspec.RunSpec` asks for (the
workflow validated and its strategies resolved when the spec was built) as fused stages
(:mod:`subzero.engine.stages`), each one Spark job with one task per output chunk
(:mod:`subzero.engine.tasks`), in small steps:

1. check the inputs and note where each comes from (:func:`_say_inputs`), plan the
   stages, choose where they execute (:func:`_place`: a small run on a local master runs
   its tasks in this process, without Spark jobs), start Spark if they need it and open
   the run's catalog row;
   :func:`_store_inputs` writes the inputs the driver reads whole (small ones); the
   others are produced chunk by chunk by the first stages' tasks;
2. :func:`~subzero.engine.migrate.write_manifest`: the workflow as data (the manifest);
3. :func:`_execute`: stages whose dependencies are done are submitted from a small thread
   pool, so independent stages (two exposures, many CCDs) run at the same time on Spark's
   FAIR scheduler; per stage, :func:`_submit` records its operators and creates their
   arrays, and when it completes, per operator in run order, :func:`_enforce_budget` (drop
   shards that would exceed ``max_disk``) and :func:`_record_stage` (shards, statistics,
   timings). Catalog writes all happen on this thread;
4. :func:`_finish`: the run's totals; a failure marks the run ``failed`` instead.

A spec is built and checked once where the request enters (the command line,
:mod:`subzero.api`); :func:`run_workflow` builds one from keywords and executes it.

No step collects an array or lineage pairs to the driver: tasks return timings and
statistics only. ``notify`` (a callable taking one line) hears what the run is doing:
where the inputs come from, Spark starting, a strategy that stores nothing, an operator
whose lineage costs more than its computation (:func:`lineage_warning`, once per operator;
the result's ``warnings`` keep them). ``on_progress(name, done, total)`` hears each
operator as it is recorded (and ``("", 0, total)`` as the stages start); the runner draws
nothing itself: :class:`subzero.display.RunDisplay` turns both into lines or a bar.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import os
import re
import sqlite3
import resource
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

import numpy as np

from encoders.store import remove_unpublished
from subzero.cells import Box, size_of
from subzero.chunking import Chunking, chunk_grid, task_grid
from subzero.engine import arrays, datastore, layout
from subzero.engine.capacity import check_fits
from subzero.engine.catalog import Catalog, shard_row
from subzero.engine.homeconfig import open_catalog
from subzero.engine.codec import preload
from subzero.engine.diskfull import is_disk_full, no_space
from subzero.engine.heap import keep_run_memory
from subzero.engine.inputs import input_origins, origin_text, plan_inputs
from subzero.engine.migrate import write_manifest
from subzero.engine.placement import Placement, place
from subzero.engine.runspec import RunSpec
from subzero.engine.spark import (active_session, check_master, get_spark, local_cores,
                                  resolve_master, ship_user_code)
from subzero.engine.stages import Stage, plan_stages
from subzero.engine.tasks import (
    GroupJob,
    InputJob,
    TaskJob,
    deferring_stores,
    drain_stores,
    make_jobs,
    raise_task_error,
    run_groups,
    settle_deferred,
)
from subzero import manifest
from subzero.modes import BLACKBOX, Mode, Strategy, capture_modes
from subzero.operator import Operator
from subzero.pools import thread_pool
from subzero.sizes import human_bytes
from subzero.workflow import Workflow

#: hears each operator as its stage is recorded: ``(operator, done, total)``; ``("", 0,
#: total)`` as the stages start
OnProgress = Callable[[str, int, int], None]

#: stages that write at most this many cells (a 1 x 1 overscan, a scalar mean) run on the
#: driver: a Spark job costs tens of milliseconds before any work starts
DRIVER_STAGE_CELLS = 1024


@dataclass
class RunResult:
    """What :func:`execute` returns (also the CLI's ``--json``)."""

    run: str
    workflow: str
    strategy: str | None
    runtime_s: float
    input_bytes: int
    lineage_bytes: int
    operators: list[dict[str, Any]] = field(default_factory=list)
    #: the fused stages the run took, and how many ran at once at most (side by side in
    #: one Spark job, or in jobs of their own)
    stages: int = 0
    concurrency: int = 1
    #: the driver process's peak resident memory (bytes) when the run ended
    driver_peak_rss: int = 0
    #: where each input came from (:func:`subzero.engine.inputs.input_origins`)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: where the run executed (Spark jobs or the driver) and why
    #: (:mod:`subzero.engine.placement`)
    placement: Placement | None = None
    #: one line per operator whose lineage cost more than its computation
    #: (:func:`lineage_warning`), as ``notify`` heard them, in the order they came
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = {
            "run": self.run, "workflow": self.workflow, "strategy": self.strategy,
            "runtime_s": self.runtime_s, "input_bytes": self.input_bytes,
            "lineage_bytes": self.lineage_bytes, "stages": self.stages,
            "concurrency": self.concurrency, "driver_peak_rss": self.driver_peak_rss,
            "operators": self.operators, "inputs": self.inputs,
            "placement": self.placement.to_json() if self.placement else None,
        }
        if self.warnings:  # like an operator's note: only when there is one
            out["warnings"] = list(self.warnings)
        return out


@dataclass
class _Run:
    """A run in progress: its spec, its catalog row, and what it has written so far."""

    spec: RunSpec
    rid: str
    cat: Catalog
    #: the spec's chunking, sized to the cores when it is the default
    chunking: Chunking
    spark: Any
    paths: dict[str, Path] = field(default_factory=dict)
    origins: dict[str, dict[str, Any]] = field(default_factory=dict)
    input_bytes: int = 0
    lineage_bytes: int = 0
    #: bytes the lineage kept so far takes on disk (:func:`disk_bytes`; ``max_disk`` bounds it)
    lineage_disk: int = 0
    operators: list[dict[str, Any]] = field(default_factory=list)
    #: the task threads of stages that run in this process (its cores)
    threads: int = 1
    #: per stage not yet submitted: its arrays being created (:func:`_make_arrays`)
    made: dict[int, Future] = field(default_factory=dict)
    #: bytes each array recorded so far takes on disk
    stored: dict[str, int] = field(default_factory=dict)
    #: the operators whose arrays no later stage reads: written past the page cache
    #: (:func:`direct_arrays`)
    direct: frozenset[str] = frozenset()
    #: global operators computed from partials of their input's chunks
    #: (:func:`combined_ops`), the partials received so far for each, and, per array, the
    #: combined operators that read it (its tasks compute their partials)
    combined: frozenset[str] = frozenset()
    parts: dict[str, list[tuple[Box, Any]]] = field(default_factory=dict)
    partial_of: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: each operator's code as the manifest records it (class, digest, distribution)
    code: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: hears the run's lines (:func:`execute`'s ``notify``), and the warnings said so far
    notify: Callable[[str], None] | None = None
    warnings: list[str] = field(default_factory=list)
    #: hears each operator recorded, and how many are so far
    on_progress: OnProgress | None = None
    done: int = 0

    @property
    def wf(self) -> Workflow:
        return self.spec.workflow

    @property
    def home(self) -> Path:
        return self.spec.home

    @property
    def plan(self) -> Mapping[str, tuple[Strategy, ...]]:
        return self.spec.plan

    @property
    def max_disk(self) -> int | None:
        return self.spec.max_disk


@dataclass
class _Stage:
    """One operator's finished stage, before it is recorded."""

    name: str
    strategies: list[Strategy]
    results: list[dict[str, Any]]
    wall_s: float
    shards: list[dict[str, Any]]  # every shard's statistics, as the sinks reported them
    rows: list[dict[str, Any]]  # the catalog rows of the shards kept
    note: str | None = None

    @property
    def lineage_bytes(self) -> int:
        return int(sum(r["data_bytes"] + r["index_bytes"] for r in self.rows))

    def total(self, key: str) -> float:
        return float(sum(r.get(key, 0.0) for r in self.results))


#: input origins a run lists one per line; more are summed up in one line
SAY_INPUTS = 6


def _manifest(wf: Workflow, origins: Mapping[str, dict[str, Any]]
              ) -> tuple[dict[str, Any], dict[str, bytes], bytes]:
    """The run's manifest (:mod:`subzero.manifest`), its array files and its bytes."""
    doc, blobs = manifest.workflow_manifest(wf, wf.source, origins)
    return doc, blobs, manifest.dumps(doc)


def _store_inputs(r: _Run, data: Mapping[str, np.ndarray]) -> None:
    """Write the inputs the driver read whole as zarr arrays and record them."""
    for name, arr in data.items():
        path = r.paths[name] = layout.array_path(r.home, r.rid, name)
        arrays.write_array(path, arr, r.chunking.chunk_shape(arr.shape))
        _record_input(r, name)


def _record_input(r: _Run, name: str) -> None:
    spec = r.wf.inputs[name]
    nbytes = arrays.logical_bytes(spec.shape, spec.dtype)
    if not spec.auxiliary:
        r.input_bytes += nbytes
    r.stored[name] = arrays.stored_bytes(r.paths[name])
    r.cat.add_array(r.rid, name, spec.shape, str(spec.dtype),
                    r.chunking.chunk_shape(spec.shape), None, nbytes, r.stored[name],
                    origin=r.origins.get(name))


def _say_inputs(origins: Mapping[str, dict[str, Any]], notify: Callable[[str], None]) -> None:
    """Where the inputs come from: one line per input (up to :data:`SAY_INPUTS`), the
    workflow's constants in one line."""
    data = [n for n, o in origins.items() if not o.get("auxiliary")]
    for name in data[:SAY_INPUTS]:
        notify(f"input {name}: {origin_text(origins[name])}")
    if len(data) > SAY_INPUTS:
        files = sum(1 for n in data[SAY_INPUTS:] if origins[n].get("kind") == "file")
        notify(f"... and {len(data) - SAY_INPUTS} more inputs ({files} from files; "
               "'subzero show RUN' lists them)")
    aux = [n for n in origins if n not in data]
    if aux:
        notify(f"constant inputs of the workflow: {', '.join(aux)}")


def _say_stores_nothing(wf: Workflow, strategy: str | None,
                        resolved: Mapping[str, Sequence[Strategy]],
                        notify: Callable[[str], None]) -> None:
    """A stored-lineage strategy that stores nothing for this workflow (its operators have
    no mode the strategy stores: e.g. ``full-one`` where every operator maps) says so."""
    if strategy is None or not strategy.startswith(("full-", "pay-", "comp-")):
        return
    if any(s.stored for ss in resolved.values() for s in ss):
        return
    used = sorted({s.name for ss in resolved.values() for s in ss})
    notify(f"strategy {strategy} stores no lineage for workflow {wf.name!r}: none of its "
           f"operators has the lineage mode it stores, so each uses {', '.join(used)} "
           "(queries are answered the same as with blackbox-opt)")


def _op_jobs(r: _Run, name: str, fused: set[str]) -> list[TaskJob]:
    """Record operator ``name``, create its array and make its tasks (one per chunk).
    ``fused`` holds the steps computed earlier in the same task, read from memory."""
    op, node = r.wf.ops[name], r.wf.nodes[name]
    strategies = r.plan[name]
    r.cat.add_operator(
        r.rid, r.wf.order.index(name), name, f"{type(op).__module__}.{type(op).__qualname__}",
        op.kind, op.params(), list(node.inputs), sorted(m.value for m in op.supported_modes()),
        [s.name for s in strategies], str(op.parallelism), code=r.code.get(name),
    )
    out_chunks = r.chunking.chunk_shape(op.out_shape)
    combined = name in r.combined
    boxes = chunk_grid(op.out_shape, out_chunks) if combined else task_grid(op, out_chunks)
    jobs = make_jobs(r.home, r.rid, op, [r.paths[s] for s in node.inputs], r.paths[name],
                     boxes, strategies, capture_modes(strategies))
    memory = tuple(s if s in fused else None for s in node.inputs)
    extra: dict[str, Any] = {}
    if combined:  # its input's stage has ended: every chunk's partial is in
        extra["combined"] = op.combine(r.parts.pop(name))
        memory = ()
    if name in r.partial_of:
        extra["partials"] = tuple(r.wf.ops[c] for c in r.partial_of[name])
    if name in r.direct:
        extra["direct"] = True
    if any(memory):
        extra["memory"] = memory
    return [replace(j, **extra) for j in jobs] if extra else jobs


def combined_ops(wf: Workflow, chunking: Chunking, plan: Mapping[str, Sequence[Strategy]],
                 chunked: Collection[str]) -> frozenset[str]:
    """The global operators a run computes from partials of their input's chunks
    (:meth:`subzero.operator.Operator.combines`: a global mean, sum, min, max...): the tasks
    that make the input's chunks reduce each to a partial, the driver combines them, and
    the operator's tasks write its chunks from the result, reading nothing, the next steps
    fused after them. At 64x, ``bgmean`` was one task decoding its whole 525 MB input.
    Only where the input is made by tasks (an operator's output, or an input produced
    chunk by chunk), and where the operator stores no lineage (its shards would be one per
    output chunk, where queries read a global operator's one)."""
    out = set()
    for name in wf.order:
        op, node = wf.ops[name], wf.nodes[name]
        if op.parallelism.kind != "global" or len(node.inputs) != 1:
            continue
        src = node.inputs[0]
        if (src in wf.inputs and src not in chunked) or any(s.stored for s in plan[name]):
            continue
        if op.combines(chunking.chunk_shape(op.in_shapes[0])):
            out.add(name)
    return frozenset(out)


def _partial_of(wf: Workflow, combined: Collection[str]) -> dict[str, tuple[str, ...]]:
    """Per array, the combined operators that read it."""
    out: dict[str, tuple[str, ...]] = {}
    for name in wf.order:
        if name in combined:
            src = wf.nodes[name].inputs[0]
            out[src] = (*out.get(src, ()), name)
    return out


def _take_partials(r: _Run, results: Sequence[Sequence[dict[str, Any]]]) -> None:
    """Move the partials a stage's tasks computed out of their results, to ``r.parts``."""
    for chunk in results:
        for res in chunk:
            for name, part in res.pop("partials", {}).items():
                r.parts.setdefault(name, []).append(part)


def direct_arrays(wf: Workflow, stages: Sequence[Stage]) -> frozenset[str]:
    """The operators whose output no stage after their own reads (a step of the same fused
    stage reads it from memory): their chunk files are written past the page cache
    (:class:`subzero.engine.direct.DirectWrites`), which costs a run almost no CPU where
    writing into the page cache costs CPU for every fresh page, and a later reader the
    device's time. The arrays later stages read stay in the page cache."""
    stage_of = {n: st.id for st in stages for n in st.names}
    reread = {src for st in stages for n in st.names if n in wf.nodes
              for src in wf.nodes[n].inputs if stage_of.get(src) != st.id}
    return frozenset(n for n in wf.order if n not in reread)


def _input_jobs(r: _Run, name: str, source: Callable[[Box], np.ndarray]) -> list[InputJob]:
    spec = r.wf.inputs[name]
    chunks = r.chunking.chunk_shape(spec.shape)
    path = r.paths[name]
    partials = tuple(r.wf.ops[c] for c in r.partial_of.get(name, ()))
    return [InputJob(name, idx, box, source, spec.dtype, str(path), partials)
            for idx, box in chunk_grid(spec.shape, chunks)]


def _submit(r: _Run, st: Stage, sources: Mapping[str, Callable[[Box], np.ndarray]]
            ) -> list[GroupJob]:
    """The stage's tasks: per chunk, its steps in order (inputs first), once the stage's
    arrays exist (:func:`_make_arrays`)."""
    made = r.made.pop(st.id, None)
    if made is not None:
        made.result()
    steps: list[list[Any]] = []
    fused: set[str] = set()
    for name in st.names:
        jobs = (_input_jobs(r, name, sources[name]) if name in sources
                else _op_jobs(r, name, fused))
        steps.append(jobs)
        fused.add(name)
    return [GroupJob(_index(chunk[0]), tuple(chunk)) for chunk in zip(*steps)]


def _make_arrays(r: _Run, stages: Sequence[Stage], rank: Mapping[int, int]
                 ) -> dict[int, Future]:
    """Create every stage's arrays on a thread of their own, stages in the order they will
    likely run: while the first stages compute, not between two stages (creating an array
    is mostly waiting for the file system). One future per stage; its paths are in
    ``r.paths`` already."""
    todo = []
    for st in sorted(stages, key=lambda st: (-rank[st.id], st.id)):
        arrs = []
        for name in st.names:
            path = r.paths[name] = layout.array_path(r.home, r.rid, name)
            if name in r.wf.ops:
                op = r.wf.ops[name]
                shape, dtype = op.out_shape, op.out_dtype
            else:
                shape, dtype = r.wf.inputs[name].shape, r.wf.inputs[name].dtype
            arrs.append((path, shape, dtype, r.chunking.chunk_shape(shape)))
        todo.append((st.id, arrs))
    pool = thread_pool("subzero-create", 1)
    return {sid: pool.submit(_create_arrays, arrs) for sid, arrs in todo}


def _create_arrays(arrs: Sequence[tuple[Path, Any, Any, Any]]) -> None:
    for path, shape, dtype, chunks in arrs:
        arrays.create_array(path, shape, dtype, chunks)


def _index(job: TaskJob | InputJob) -> tuple[int, ...]:
    return job.index if isinstance(job, InputJob) else job.chunk.index


def _run_stage_jobs(spark: Any, jobs: list[GroupJob], label: str, threads: int = 1
                    ) -> tuple[list[list[dict[str, Any]]], float]:
    t0 = time.perf_counter()
    results = run_groups(jobs, spark, label, threads)
    return results, time.perf_counter() - t0


def _stage_cells(wf: Workflow, st: Stage, combined: Collection[str] = ()) -> int:
    """Cells a stage's tasks write and read (a combined operator reads none)."""
    total = 0
    for n in st.names:
        if n in wf.inputs:
            total += size_of(wf.inputs[n].shape)
            continue
        op = wf.ops[n]
        full = Box.full(op.out_shape)
        boxes = [full] if n in combined else [
            full, *(op.input_box(full, i) for i in range(len(op.in_shapes)))]
        total += sum(size_of(b.shape) for b in boxes)
    return total


def _stage_label(st: Stage) -> str:
    names = st.names if len(st.names) <= 3 else [st.names[0], "...", st.names[-1]]
    return " > ".join(names)


def _op_stage(r: _Run, name: str, results: list[dict[str, Any]], wall: float) -> _Stage:
    raise_task_error(name, results)
    shards = [s for res in results for s in res["shards"]]
    rows = [shard_row(name, s, r.home) for s in shards if s.get("path")]
    return _Stage(name, list(r.plan[name]), results, wall, shards, rows)


def _complete(r: _Run, st: Stage, results: list[list[dict[str, Any]]], wall: float
              ) -> None:
    """Record a finished stage, step by step in run order. Each operator's runtime is the
    stage's wall time shared out by the operator's part of the tasks' time."""
    per_step: list[list[dict[str, Any]]] = [[] for _ in st.names]
    for chunk in results:
        for k, res in enumerate(chunk):
            per_step[k].append(res)
    for k, name in enumerate(st.names):  # the first error, in step order
        if any("error" in res for res in per_step[k]):
            raise_task_error(name, per_step[k])
    task_s = [sum(res.get("task_s", 0.0) for res in rs) for rs in per_step]
    total = sum(task_s) or 1.0
    if r.spark is not None:  # in this process, a failed write removes its own files
        _remove_attempts(r, st.names)
    for k, name in enumerate(st.names):
        with r.cat.tx():  # one commit per operator
            if name in r.wf.inputs:
                _record_input(r, name)
                continue
            stage = _op_stage(r, name, per_step[k], wall * task_s[k] / total)
            _enforce_budget(r, stage)
            warning = _record_stage(r, stage)
        if warning is not None and r.notify is not None:
            r.notify(warning)
        r.done += 1
        if r.on_progress is not None:
            r.on_progress(name, r.done, len(r.wf.order))


def _remove_attempts(r: _Run, names: Sequence[str]) -> None:
    """What attempts of tasks on lost workers left half-written: chunk files and shards."""
    for name in names:
        if name in r.paths:
            arrays.remove_leftovers(r.paths[name])
        for s in r.plan.get(name, ()):
            if s.stored:
                remove_unpublished(layout.strategy_dir(r.home, r.rid, name, s.name))


def _ranks(r: _Run, stages: list[Stage]) -> dict[int, int]:
    """Each stage's cells plus the most cells on any chain of stages after it: stages on
    the longest chain go first."""
    after: dict[int, list[int]] = {st.id: [] for st in stages}
    for st in stages:
        for d in st.deps:
            after[d].append(st.id)
    cells = {st.id: _stage_cells(r.wf, st, r.combined) for st in stages}
    rank: dict[int, int] = {}

    def visit(sid: int) -> int:
        if sid not in rank:
            rank[sid] = cells[sid] + max((visit(k) for k in after[sid]), default=0)
        return rank[sid]

    for st in stages:
        visit(st.id)
    return rank


def _batches(ready: list[Stage]) -> list[list[Stage]]:
    """Ready stages that share a chunk grid go as one Spark job, whose task for a chunk
    runs every stage's steps for that chunk (one job's fixed cost instead of several)."""
    out: list[list[Stage]] = []
    by_shape: dict[tuple[int, ...], list[Stage]] = {}
    for st in ready:
        if st.global_:
            out.append([st])
        elif st.shape in by_shape:
            by_shape[st.shape].append(st)
        else:
            by_shape[st.shape] = [st]
            out.append(by_shape[st.shape])
    return out


def _submit_batch(r: _Run, batch: list[Stage],
                  sources: Mapping[str, Callable[[Box], np.ndarray]]) -> list[GroupJob]:
    with r.cat.tx():  # the operators' rows in one commit
        per_stage = [_submit(r, st, sources) for st in batch]
    return [GroupJob(chunk[0].index, tuple(step for job in chunk for step in job.steps))
            for chunk in zip(*per_stage)]


def _split(r: _Run, batch: list[Stage], results: list[list[dict[str, Any]]]
           ) -> list[list[list[dict[str, Any]]]]:
    """A batch's results per stage; the first task error (in step order) is raised."""
    names = [n for st in batch for n in st.names]
    for chunk in results:
        for name, res in zip(names, chunk):
            if "error" in res:
                raise_task_error(name, [res])
    out, k = [], 0
    for st in batch:
        out.append([chunk[k:k + len(st.names)] for chunk in results])
        k += len(st.names)
    return out


def _execute(r: _Run, stages: list[Stage], sources: Mapping[str, Callable[[Box], np.ndarray]],
             workers: int) -> int:
    """Run every stage once its dependencies are done, up to ``workers`` Spark jobs at a
    time, stages on the longest chain first; record each as it completes. Returns how many
    stages ran at once at most (stages batched into one job count each)."""
    pending = {st.id: st for st in stages}
    done: set[int] = set()
    running: dict[Future, list[Stage]] = {}
    most = 0
    rank = _ranks(r, stages)
    r.made = _make_arrays(r, stages, rank)
    # a stage's dependents start before it is recorded (the catalog rows, the bytes on
    # disk: milliseconds a stage, between two stages of a chain otherwise), except under
    # a lineage budget, which must drop a stage's shards before the next stage stores any
    early = r.max_disk is None
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="subzero-stage") as pool:

        def submit_ready() -> None:
            ready = sorted((st for st in pending.values() if st.deps <= done),
                           key=lambda st: (-rank[st.id], st.id))
            # in the driver, stages run one group each: a batch's task holds every
            # stage's blocks of its chunk at once (16 CCDs: 16 stages'), and it saves
            # only a Spark job's fixed cost
            batches = _batches(ready) if r.spark is not None else [[st] for st in ready]
            for batch in batches[:max(0, workers - len(running))]:
                for st in batch:
                    del pending[st.id]
                jobs = _submit_batch(r, batch, sources)
                cells = sum(_stage_cells(r.wf, st, r.combined) for st in batch)
                spark = None if cells <= DRIVER_STAGE_CELLS else r.spark
                label = "; ".join(_stage_label(st) for st in batch)
                running[pool.submit(_run_stage_jobs, spark, jobs, f"{r.rid}: {label}",
                                    threads=r.threads)] = batch

        try:
            while pending or running:
                submit_ready()
                most = max(most, sum(map(len, running.values())))
                if not running:
                    raise RuntimeError(f"stages {sorted(pending)} wait on each other")
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                ended = []
                for fut in sorted(finished, key=lambda f: running[f][0].id):
                    batch = running.pop(fut)
                    results, wall = fut.result()
                    _take_partials(r, results)
                    ended.append((batch, _split(r, batch, results), wall))
                    if early:
                        done.update(st.id for st in batch)
                if early and pending:
                    submit_ready()
                    most = max(most, sum(map(len, running.values())))
                for batch, parts, wall in ended:
                    for mine in parts:  # their dependents run meanwhile
                        settle_deferred(mine)
                    busy = [sum(res.get("task_s", 0.0) for chunk in mine for res in chunk)
                            for mine in parts]
                    for st, mine, b in zip(batch, parts, busy):
                        _complete(r, st, mine, wall * (b / (sum(busy) or 1.0)))
                        done.add(st.id)
        except BaseException:
            for fut in running:  # let the stages in flight end before the run is marked
                fut.cancel()
            wait(list(running))
            raise
        finally:  # no array is created, and no lineage stored, after the run ends
            for fut in r.made.values():
                fut.cancel()
            wait(list(r.made.values()))
            drain_stores()
    return most


def _place(wf: Workflow, stages: list[Stage], where: str, master: str, cores: int,
           warm: bool, combined: Collection[str] = ()) -> Placement:
    """Where the run executes (:func:`subzero.engine.placement.place`): its stages' cells,
    and the Spark jobs it would take (:func:`spark_jobs`)."""
    cells = [_stage_cells(wf, st, combined) for st in stages]
    return place(where, cells, spark_jobs(stages, cells), cores,
                 local=local_cores(master) is not None, warm=warm)


def spark_jobs(stages: Sequence[Stage], cells: Sequence[int]) -> int:
    """The Spark jobs :func:`_execute` would submit for ``stages`` (of ``cells`` each):
    one per global stage, and one per set of other stages at the same depth of the stage
    graph with the same chunk grid (stages that become ready together batch into one job:
    the CCDs of a visit share their jobs); stages of at most :data:`DRIVER_STAGE_CELLS`
    cells run on the driver and take none. The astronomy workflow: 6 jobs for 15 stages,
    21 for 16 CCDs' 180 (its background means combined from their input's chunks:
    :func:`combined_ops`; each a global stage of its own, 8 for 17 and 53 for 212)."""
    by_id = {st.id: st for st in stages}
    depth: dict[int, int] = {}

    def level(sid: int) -> int:
        if sid not in depth:
            depth[sid] = 1 + max((level(d) for d in by_id[sid].deps if d in by_id), default=0)
        return depth[sid]

    keys: set[tuple[Any, ...]] = set()
    for st, c in zip(stages, cells):
        if c > DRIVER_STAGE_CELLS:
            keys.add(("global", st.id) if st.global_ else (level(st.id), st.shape))
    return len(keys)


def disk_bytes(path: Path) -> int:
    """What the files and folders under ``path`` take on disk: per entry the larger of its
    size and its allocated blocks, so the figure bounds both ``du -sb`` (apparent sizes,
    folders included) and ``du -s`` (blocks)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, f) for f in files)]:
            try:
                st = os.lstat(name)
            except OSError:
                continue  # removed meanwhile
            total += max(st.st_size, getattr(st, "st_blocks", 0) * 512)
    return total


def _enforce_budget(r: _Run, st: _Stage) -> None:
    """Delete the stage's shards when they would take the run over ``max_disk``, counted
    in bytes on disk (:func:`disk_bytes`: every file of the shards, their metadata and
    folders, the run's ``lineage`` folder once): the operator keeps only its non-stored
    strategies (map, else black box) for this run."""
    if r.max_disk is None or not st.rows:
        return
    op_dir = layout.strategy_dir(r.home, r.rid, st.name, "x").parent
    root = op_dir.parent
    remote = datastore.mounted(op_dir) is not None
    first = r.lineage_disk == 0  # the lineage folder itself counts once, with the first shards
    if remote:  # objects: their bytes, as the tasks uploaded them
        need = sum(int(row.get("data_bytes") or 0) + int(row.get("index_bytes") or 0)
                   for row in st.rows)
    else:
        need = disk_bytes(op_dir) + (os.lstat(root).st_size if first and root.is_dir() else 0)
    if r.lineage_disk + need <= r.max_disk:
        r.lineage_disk += need
        return
    dropped = [s.name for s in st.strategies if s.stored]
    if remote:
        datastore.remove_tree(op_dir)
    shutil.rmtree(op_dir, ignore_errors=True)
    try:  # the lineage folder goes too when nothing else is in it (later steps' shards may be)
        root.rmdir()
    except OSError:
        pass
    st.strategies = [s for s in st.strategies if not s.stored] or [BLACKBOX]
    r.cat.set_operator_strategies(r.rid, st.name, [s.name for s in st.strategies])
    st.note = (f"over the disk budget: its shards take {need} more bytes on disk, which "
               f"would exceed {r.max_disk}; stored nothing ({', '.join(dropped)} dropped)")
    st.rows = []


#: an operator's lineage (capturing and storing it) may take up to this share of the
#: operator's time before the run warns about it
WARN_LINEAGE_SHARE = 0.5
#: an operator that took less time than this (seconds) gets no warning about its lineage's
#: time: on small arrays the fixed costs of storing dominate
WARN_MIN_RUNTIME_S = 0.2
#: lineage smaller than this (bytes) gets no warning about its size, whatever its
#: operator's inputs take
WARN_MIN_LINEAGE_BYTES = 1_000_000


def lineage_warning(op: Operator, strategies: Sequence[Strategy], runtime_s: float,
                    lineage_s: float, lineage_bytes: int, input_bytes: int) -> str | None:
    """What a run says about an operator whose stored lineage costs more than the operator
    itself, or None: its figures and the cheaper way (:func:`cheaper_lineage`).

    The run warns when capturing and storing the lineage took more than
    :data:`WARN_LINEAGE_SHARE` of the operator's time (an operator that took at least
    :data:`WARN_MIN_RUNTIME_S`), or when the lineage it stored is larger than its inputs
    (and at least :data:`WARN_MIN_LINEAGE_BYTES`). Operators that stored nothing get no
    warning.

    Parameters
    ----------
    op : the bound operator.
    strategies : its strategies in the run (after a disk budget dropped any).
    runtime_s, lineage_s : its time in the run, and the part of it its lineage took
        (capture in ``ctx.lwrite*``, encoding and writing shards).
    lineage_bytes : the bytes of the shards it kept.
    input_bytes : the logical bytes of its inputs.

    Returns
    -------
    The warning without the operator's name (the run's line starts with it), or None.

    Examples
    --------
    >>> from subzero.modes import FULL_ONE_BWD
    >>> class Clean(Operator):
    ...     def supported_modes(self):
    ...         return frozenset({Mode.FULL, Mode.BLACKBOX})
    ...     def run(self, ctx, x):
    ...         return x
    >>> op = Clean().bind("clean", [(1000, 1000)], ["float32"])
    >>> print(lineage_warning(op, [FULL_ONE_BWD], 4.0, 3.1, 32_000_000, 4_000_000))
    capturing and storing its lineage took 3.1 s of 4.0 s (78%) and 32.0 MB, 8.0x its
    inputs' 4.0 MB; declare it as payloads (COMP/PAY with map_p) or a mapping function
    (MAP with map_b/map_f) in its code (see operators.udf), or cap the run's lineage
    with --max-disk (queries re-execute what does not fit)
    >>> lineage_warning(op, [FULL_ONE_BWD], 0.1, 0.09, 500_000, 4_000_000) is None
    True
    """
    if lineage_bytes <= 0 or not any(s.stored for s in strategies):
        return None
    slow = runtime_s >= WARN_MIN_RUNTIME_S and lineage_s > WARN_LINEAGE_SHARE * runtime_s
    big = lineage_bytes >= WARN_MIN_LINEAGE_BYTES and lineage_bytes > input_bytes
    if not (slow or big):
        return None
    share = 100.0 * lineage_s / runtime_s if runtime_s > 0 else 0.0
    if input_bytes > 0:
        ratio = lineage_bytes / input_bytes
        times = f"{ratio:.1f}x" if ratio >= 0.1 else f"{ratio:.2g}x"
        size = f"{times} its inputs' {human_bytes(input_bytes)}"
    else:
        size = "its inputs take 0 B"
    return (f"capturing and storing its lineage took {_seconds(lineage_s)} of "
            f"{_seconds(runtime_s)} ({share:.0f}%) and {human_bytes(lineage_bytes)}, {size}; "
            f"{cheaper_lineage(op, strategies)}")


def _seconds(t: float) -> str:
    """``t`` seconds: one decimal from a second up, two significant digits below.

    >>> _seconds(3.14159), _seconds(0.0123), _seconds(125.0)
    ('3.1 s', '0.012 s', '125.0 s')
    """
    return f"{t:.1f} s" if t >= 1 else f"{t:.2g} s" if t >= 0.001 else f"{t:.1g} s"


def cheaper_lineage(op: Operator, strategies: Sequence[Strategy]) -> str:
    """The cheaper way to keep ``op``'s lineage than the stored ``strategies``, from the
    modes it supports: its mapping functions (``MAP``, nothing stored), else payloads
    (``COMP``, then ``PAY``) where it stored full pairs, else declaring them in its code,
    or a disk budget.

    >>> from subzero.modes import PAY_ONE_BWD
    >>> class Stars(Operator):
    ...     def supported_modes(self):
    ...         return frozenset({Mode.PAY, Mode.FULL, Mode.BLACKBOX})
    ...     def run(self, ctx, x):
    ...         return x
    >>> print(cheaper_lineage(Stars(), [PAY_ONE_BWD]))
    it stores the cheapest lineage it declares: run it as blackbox (queries re-execute
    it), or cap the run's lineage with --max-disk (queries re-execute what does not fit)
    """
    modes = op.supported_modes()
    stored = {s.mode for s in strategies if s.stored}
    budget = "cap the run's lineage with --max-disk (queries re-execute what does not fit)"
    if Mode.MAP in modes:
        return ('its mapping functions store nothing: run it as map (--strategy subzero '
                'or blackbox-opt, or ["map"] for it in a plan)')
    if Mode.COMP in modes and Mode.COMP not in stored:
        return ('store composite lineage instead (COMP: payloads only where its default '
                'mapping is not its lineage; --strategy subzero, or ["comp-one-bwd"] for it '
                f'in a plan), or {budget}')
    if Mode.PAY in modes and Mode.FULL in stored and Mode.PAY not in stored:
        return ('store its payloads instead of full pairs (PAY: --strategy subzero, or '
                f'["pay-one-bwd"] for it in a plan), or {budget}')
    if stored & {Mode.PAY, Mode.COMP}:
        return ("it stores the cheapest lineage it declares: run it as blackbox (queries "
                f"re-execute it), or {budget}")
    return ("declare it as payloads (COMP/PAY with map_p) or a mapping function (MAP with "
            f"map_b/map_f) in its code (see operators.udf), or {budget}")


def _record_stage(r: _Run, st: _Stage) -> str | None:
    """The stage's shards, statistics, timings and output array in the catalog; the
    operator's lineage warning (:func:`lineage_warning`), if any, which its catalog note
    and the run's warnings keep."""
    name, op = st.name, r.wf.ops[st.name]
    r.cat.add_shards(r.rid, st.rows)
    for sname in {row["strategy"] for row in st.rows}:
        # what the query-time cost model needs beyond the shard rows
        mine = [s for s in st.shards if s["strategy"] == sname]
        r.cat.set_statistics(r.rid, name, sname, {
            "records": sum(s.get("records", s.get("pairs", 0)) or 0 for s in mine),
            "payload_bytes": sum(s.get("payload_bytes", 0) or 0 for s in mine)})
    lin_bytes = st.lineage_bytes
    r.lineage_bytes += lin_bytes
    task_s = st.total("task_s")
    lineage_task_s = st.total("capture_s") + st.total("store_s")
    frac = (lineage_task_s / task_s) if task_s > 0 else 0.0
    base = st.wall_s * (1.0 - frac)
    in_bytes = sum(arrays.logical_bytes(s, d) for s, d in zip(op.in_shapes, op.in_dtypes))
    warning = lineage_warning(op, st.strategies, st.wall_s, st.wall_s - base, lin_bytes,
                              in_bytes)
    if warning is not None:  # shown by 'subzero show' with the disk budget's note
        st.note = "; ".join(filter(None, [st.note, warning]))
    r.cat.set_op_stats(
        r.rid, name, status="complete", runtime_s=st.wall_s, runtime_nolineage_s=base,
        task_s=task_s, compute_s=st.total("run_s") - st.total("capture_s"),
        io_s=st.total("read_s") + st.total("write_s"), capture_s=st.total("capture_s"),
        store_s=st.total("store_s"), tasks=len(st.results), pairs=int(st.total("pairs")),
        out_cells=int(st.total("out_cells")), in_cells=int(st.total("in_cells")),
        lineage_bytes=lin_bytes, note=st.note,
    )
    nbytes = arrays.logical_bytes(op.out_shape, op.out_dtype)
    r.stored[name] = arrays.stored_bytes(r.paths[name])
    r.cat.add_array(r.rid, name, op.out_shape, str(op.out_dtype),
                    r.chunking.chunk_shape(op.out_shape), name, nbytes, r.stored[name])
    r.operators.append({
        "name": name, "runtime_s": st.wall_s, "lineage_s": st.wall_s - base,
        "lineage_bytes": lin_bytes, "strategies": [s.name for s in st.strategies],
        **({"note": st.note} if st.note else {}),
    })
    if warning is None:
        return None
    line = f"operator {name!r} ({type(op).__name__}): {warning}"
    r.warnings.append(line)
    return line


def _finish(r: _Run, runtime: float) -> None:
    if r.spark is not None:  # late writes of attempts on lost workers
        for name, strategies in r.plan.items():
            for s in strategies:
                if s.stored:
                    remove_unpublished(layout.strategy_dir(r.home, r.rid, name, s.name))
    # an object-store home: the shard objects of attempts that lost (retried tasks,
    # speculative copies, lost workers) go; the catalog names each chunk's winner
    datastore.sweep_attempts(r.home, r.rid, [row["path"] for row in r.cat.shards(r.rid)])
    if r.max_disk is not None:
        r.cat.set_statistics(r.rid, "*", "*", {"max_disk": float(r.max_disk),
                                               "lineage_disk_bytes": float(r.lineage_disk)})
    r.cat.finish_run(r.rid, "complete", runtime_s=runtime, input_bytes=r.input_bytes,
                     lineage_bytes=r.lineage_bytes,
                     array_bytes=sum(  # in this process nothing writes after a stage
                         r.stored[n] if r.spark is None and n in r.stored
                         else arrays.stored_bytes(p) for n, p in r.paths.items()))


def run_workflow(
    wf: Workflow,
    home: str | os.PathLike | None = None,
    inputs: Mapping[str, str] | None = None,
    strategy: str | None = "subzero",
    plan: Mapping[str, Sequence[str | Strategy]] | None = None,
    chunking: Chunking | None = None,
    master: str | None = None,
    spark: Any = None,
    max_disk: int | None = None,
    label: str | None = None,
    fuse: bool = True,
    workers: int | None = None,
    notify: Callable[[str], None] | None = None,
    where: str = "auto",
    on_progress: OnProgress | None = None,
) -> RunResult:
    """Execute ``wf`` and record everything in the home's catalog: :meth:`RunSpec.build`
    from the keywords, then :func:`execute` (see both for what they mean)."""
    spec = RunSpec.build(wf, home, inputs=inputs, strategy=strategy, plan=plan,
                         chunking=chunking, master=master, max_disk=max_disk, label=label,
                         fuse=fuse, workers=workers, where=where)
    return execute(spec, spark=spark, notify=notify, on_progress=on_progress)


def _spark_conf(spec: RunSpec, master: str,
                notify: Callable[[str], None] | None) -> dict[str, str]:
    """What a session started for this run sets beyond SubZero's own settings: the packed
    environment (``spec.ship_env``), and for an object-store home the AWS variables its
    executors reach the store with (executors share nothing else with the driver)."""
    conf: dict[str, str] = {}
    if spec.ship_env:
        from subzero.engine import shipenv

        archive = shipenv.packed_environment(
            shipenv.default_cache_dir(),
            notify=None if notify is None else lambda line: notify(line))
        conf.update(shipenv.ship_conf(archive, master=master))
    if datastore.remote_url(spec.home) is not None:
        conf.update(datastore.executor_env())
    return conf


def execute(spec: RunSpec, spark: Any = None, notify: Callable[[str], None] | None = None,
            on_progress: OnProgress | None = None) -> RunResult:
    """Execute the run ``spec`` asks for on Spark (or in this process) and record
    everything in its home's catalog.

    Returns a :class:`RunResult`; the run's status in the catalog is ``complete`` only once
    every operator has finished.

    ``spec.max_disk`` (bytes) is a lineage budget the run enforces on bytes on disk (the
    shard files, their metadata and folders: :func:`disk_bytes`, what ``du`` counts): after
    each operator's stage, if its shards would take the run's lineage over the budget, they
    are deleted before the next stage starts and the operator keeps only its non-stored
    strategies (map where it had it, else black box) for this run; the catalog says so and
    queries re-execute it. The stored total at rest never exceeds the budget (while one
    stage runs, its shards may briefly take up to one operator's lineage more).

    ``spec.fuse=False`` runs one Spark job per step (no fused stages); ``spec.workers``
    caps the stages that run at once (default: the session's parallelism, at least 2; 1
    under a ``max_disk`` budget, so the budget drops the same operators' shards in every
    run).

    ``notify(line)`` hears what the run does (see the module docstring). An operator whose
    stored lineage costs more than the operator (:func:`lineage_warning`) is said once, as
    its stage is recorded; the result's ``warnings`` and the operator's catalog note keep
    the line, with or without ``notify``. ``on_progress(name, done, total)`` hears each
    operator recorded.

    ``spec.where`` is ``"auto"``, ``"spark"`` or ``"driver"``: under ``auto`` a small run
    on a local master executes in this process, without Spark jobs (nor a session, if none
    runs yet), when that is modelled quicker (:mod:`subzero.engine.placement`); a ``spark``
    session handed over is used. The result's ``placement`` says where the run executed
    and why.
    """
    wf, home, resolved, where, master = (spec.workflow, spec.home, spec.plan, spec.where,
                                         spec.master)
    chunking = spec.chunking
    layout.check_writable_home(home)  # a home that is a file or read-only: before Spark starts
    check_fits(wf, home, spec.inputs, notify=notify)
    sources, data = plan_inputs(wf, spec.inputs)
    origins = input_origins(wf, spec.inputs)
    doc, blobs, manifest_bytes = _manifest(wf, origins)
    if spark is not None and where == "auto":
        where = "spark"  # a caller that hands over a session runs on it
    want = check_master(resolve_master(master))
    conf = _spark_conf(spec, want, notify)
    if spark is None and active_session() is not None:  # the process's one session (says
        spark = get_spark(master, layout.logs_dir(home))  # so if it runs another master)
    warm = spark is not None
    if spark is not None:  # where the jobs would go: the session's master, not the asked one
        want = str(spark.sparkContext.master)
    cores = local_cores(want) if spark is None else int(spark.sparkContext.defaultParallelism)
    if spark is None and cores is None and where != "driver":  # a cluster's own parallelism
        spark = get_spark(master, layout.logs_dir(home), notify=notify, conf=conf)
        cores = int(spark.sparkContext.defaultParallelism)
    cores = cores or local_cores("local[*]") or 1
    if notify is not None:
        _say_inputs(origins, notify)
        _say_stores_nothing(wf, spec.strategy, resolved, notify)
    if chunking.is_default:
        chunking = chunking.with_tasks(default_tasks(wf, cores))
    workers = spec.workers
    if workers is None:
        workers = 1 if spec.max_disk is not None else max(2, cores)
    combined = combined_ops(wf, chunking, resolved, set(sources))
    stages = plan_stages(wf, set(sources), chunking.chunk_shape, fuse=spec.fuse,
                         combined=combined)
    placed = _place(wf, stages, where, want, cores, warm, combined)
    preload()  # the run writes arrays: the codecs' import is setup, not run time
    if placed.where == "driver":
        spark = None
        _import_kernels(wf)
        if notify is not None:
            notify(f"running in this process, not as Spark jobs ({placed.why}"
                   + ("" if where == "driver" else "; --where spark to use Spark") + ")")
    elif spark is None:
        spark = get_spark(master, layout.logs_dir(home), notify=notify, conf=conf)
    cat = open_catalog(home, create=True)
    with _no_space("the catalog", home):
        rid = cat.create_run(
            wf.name, params=wf.params, strategy=spec.label,
            plan={n: [s.name for s in ss] for n, ss in resolved.items()},
            master=want, chunking=chunking.to_json(), placement=placed.to_json(),
            manifest=hashlib.sha256(manifest_bytes).hexdigest(),
        )
    r = _Run(spec, rid, cat, chunking, spark, origins=origins, threads=cores,
             direct=direct_arrays(wf, stages), combined=combined,
             partial_of=_partial_of(wf, combined), code=manifest.operator_code(doc),
             notify=notify, on_progress=on_progress)
    if spark is not None:
        ship_user_code(spark, manifest.module_records(doc).values())
    t_start = time.perf_counter()
    if on_progress is not None:
        on_progress("", 0, len(wf.order))
    try:
        layout.arrays_dir(home, rid).mkdir(parents=True, exist_ok=False)
        write_manifest(home, rid, blobs, manifest_bytes)
        _store_inputs(r, data)
        with (keep_run_memory() if spark is None else nullcontext(),
              deferring_stores() if spark is None and spec.max_disk is None
              else nullcontext()):
            most = _execute(r, stages, sources, workers)
        runtime = time.perf_counter() - t_start
        _finish(r, runtime)
        r.operators.sort(key=lambda o: wf.order.index(o["name"]))
        return RunResult(rid, wf.name, spec.label, runtime, r.input_bytes, r.lineage_bytes,
                         r.operators, len(stages), most, _peak_rss(), origins, placed,
                         list(r.warnings))
    except BaseException as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        full = is_disk_full(e)
        if full:  # what the run wrote is freed first, so that the catalog can say so
            shutil.rmtree(layout.run_dir(home, rid), ignore_errors=True)
            msg = str(no_space(_what_failed(msg, rid), home))
        try:
            cat.finish_run(rid, "failed", error=msg, runtime_s=time.perf_counter() - t_start)
        except sqlite3.Error:
            if not full:
                raise
            # the catalog cannot be written either: the next command that opens it marks
            # the run failed (its process is gone)
        if full:
            raise no_space(_what_failed(str(e), rid), home) from None
        raise
    finally:
        cat.close()


def _what_failed(msg: str, rid: str) -> str:
    """What a run was writing when ``msg`` stopped it: the operator and chunk a task
    names, else the run.

    >>> _what_failed("operator 'cr1' failed in chunk 0.1: OSError: [Errno 28] ...", "r2")
    "operator 'cr1' (chunk 0.1) of run r2"
    """
    m = re.search(r"operator '([^']+)' failed in chunk (\S+):", msg)
    return f"operator {m[1]!r} (chunk {m[2]}) of run {rid}" if m else f"run {rid}"


@contextmanager
def _no_space(what: str, home: Path) -> Iterator[None]:
    """A write of ``what`` that the file system refuses is :class:`NoSpaceError`."""
    try:
        yield
    except (OSError, sqlite3.Error) as e:
        if is_disk_full(e):
            raise no_space(what, home) from None
        raise


def default_tasks(wf: Workflow, cores: int) -> int:
    """Chunks per array under the default chunking: enough that the workflow's largest
    independent part (:meth:`~subzero.workflow.Workflow.parts`) keeps its share of the
    cores busy. A visit's CCDs are parts: with as many CCDs as cores or more, one chunk
    per array (up to the chunking's cell limit) halves the tasks, chunk files and shards
    of two, and so their fixed costs (see ``benchmarks/bench_scale.py --ccds``), where one
    part alone gets a chunk per core.

    >>> wf = Workflow("w"); _ = wf.input("x", (4,)); _ = wf.input("y", (4,))
    >>> from operators.elementwise import Unary
    >>> _ = wf.add("a", Unary("negative"), "x"); _ = wf.add("b", Unary("negative"), "y")
    >>> default_tasks(wf, 2), default_tasks(wf, 4)
    (1, 2)
    """
    cells = [sum(size_of(wf.ops[n].out_shape) for n in part) for part in wf.parts()]
    return max(1, math.ceil(cores * cells[0] / max(1, sum(cells))))


def _import_kernels(wf: Workflow) -> None:
    """Import the modules the workflow's kernels import on first use
    (:attr:`Operator.imports`), before a run in this process starts its clock: the setup a
    Spark run does when it starts its session. A module that fails to import is left to
    the kernel, which fails its operator's step with the reason."""
    for name in sorted({m for op in wf.ops.values() for m in op.imports}):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the kernel's own import reports it
            pass


def _peak_rss() -> int:
    """This process's peak resident memory in bytes: ``VmHWM`` of ``/proc/self/status``
    (reset when the process image starts; ``ru_maxrss`` is not: a child started by a
    large process inherits its parent's peak), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)
