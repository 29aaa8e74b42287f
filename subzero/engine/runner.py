"""The driver's side of a run: plan, inputs, one Spark stage per operator, catalog rows.

:func:`run_workflow` executes a workflow in topological order, one stage per operator and
one task per output chunk (:mod:`subzero.engine.tasks`), in small steps:

1. validate the workflow, resolve its strategies, read the inputs, start Spark and open
   the run's catalog row; :func:`_store_inputs` writes every input as a zarr array;
2. :func:`_save_workflow`: the bound workflow, for re-execution;
3. per operator, :func:`_run_stage` (the tasks), :func:`_enforce_budget` (drop shards that
   would exceed ``max_disk``) and :func:`_record_stage` (shards, statistics, timings);
4. :func:`_finish`: the run's totals; a failure marks the run ``failed`` instead.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from subzero.chunking import Chunking, task_grid
from subzero.engine import arrays, layout
from subzero.engine.catalog import Catalog
from subzero.engine.inputs import load_inputs
from subzero.engine.spark import get_spark, resolve_master
from subzero.engine.tasks import make_jobs, raise_task_error, run_jobs
from subzero.modes import BLACKBOX, Strategy, capture_modes
from subzero.workflow import Workflow


@dataclass
class RunResult:
    """What :func:`run_workflow` returns (also the CLI's ``--json``)."""

    run: str
    workflow: str
    strategy: str | None
    runtime_s: float
    input_bytes: int
    lineage_bytes: int
    operators: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run, "workflow": self.workflow, "strategy": self.strategy,
            "runtime_s": self.runtime_s, "input_bytes": self.input_bytes,
            "lineage_bytes": self.lineage_bytes, "operators": self.operators,
        }


@dataclass
class _Run:
    """A run in progress: where it lives and what it has written so far."""

    wf: Workflow
    home: Path
    rid: str
    cat: Catalog
    chunking: Chunking
    spark: Any
    max_disk: int | None
    paths: dict[str, Path] = field(default_factory=dict)
    input_bytes: int = 0
    lineage_bytes: int = 0
    operators: list[dict[str, Any]] = field(default_factory=list)


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


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm  # optional: a progress bar only on a terminal
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, delay=1.0, file=sys.stderr, unit="op", leave=False,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} operators [{elapsed}]")


def _save_workflow(r: _Run) -> None:
    # pyspark's cloudpickle: bound operators may hold lambdas and local classes
    from pyspark import cloudpickle

    with open(layout.workflow_path(r.home, r.rid), "wb") as f:
        f.write(cloudpickle.dumps(r.wf))


def _store_inputs(r: _Run, data: Mapping[str, np.ndarray]) -> None:
    """Write every input as a zarr array and record it."""
    for name, arr in data.items():
        path = r.paths[name] = layout.array_path(r.home, r.rid, name)
        ch = r.chunking.chunk_shape(arr.shape)
        arrays.write_array(path, arr, ch)
        nbytes = arrays.logical_bytes(arr.shape, arr.dtype)
        if not r.wf.inputs[name].auxiliary:
            r.input_bytes += nbytes
        r.cat.add_array(r.rid, name, arr.shape, str(arr.dtype), ch, None, nbytes,
                        arrays.stored_bytes(path))


def _shard_row(name: str, s: dict[str, Any], home: Path) -> dict[str, Any]:
    return {"op": name, "strategy": s["strategy"], "chunk": s["chunk"],
            "path": os.path.relpath(s["path"], home),
            "data_bytes": s.get("data_bytes", 0), "index_bytes": s.get("index_bytes", 0),
            "pairs": s.get("pairs", 0), "out_cells": s.get("out_cells", 0),
            "in_cells": s.get("in_cells", 0), "fanin": s.get("fanin"),
            "fanout": s.get("fanout"), "encode_s": s.get("encode_s"),
            "attempt": s.get("attempt", 0)}


def _run_stage(r: _Run, pos: int, name: str, strategies: list[Strategy]) -> _Stage:
    """Record the operator, create its array and run its tasks as one Spark stage."""
    op, node = r.wf.ops[name], r.wf.nodes[name]
    r.cat.add_operator(
        r.rid, pos, name, f"{type(op).__module__}.{type(op).__qualname__}", op.kind,
        op.params(), list(node.inputs), sorted(m.value for m in op.supported_modes()),
        [s.name for s in strategies], str(op.parallelism),
    )
    out_chunks = r.chunking.chunk_shape(op.out_shape)
    r.paths[name] = layout.array_path(r.home, r.rid, name)
    arrays.create_array(r.paths[name], op.out_shape, op.out_dtype, out_chunks)
    jobs = make_jobs(r.home, r.rid, op, [r.paths[s] for s in node.inputs], r.paths[name],
                     task_grid(op, out_chunks), strategies, capture_modes(strategies))
    t0 = time.perf_counter()
    results = run_jobs(jobs, r.spark, f"{r.rid}: {name}")
    wall = time.perf_counter() - t0
    raise_task_error(name, results)
    shards = [s for res in results for s in res["shards"]]
    rows = [_shard_row(name, s, r.home) for s in shards if s.get("path")]
    return _Stage(name, list(strategies), results, wall, shards, rows)


def _enforce_budget(r: _Run, st: _Stage) -> None:
    """Delete the stage's shards when they would take the run over ``max_disk``: the
    operator keeps only its non-stored strategies (map, else black box) for this run."""
    if r.max_disk is None or not st.rows or r.lineage_bytes + st.lineage_bytes <= r.max_disk:
        return
    dropped = [s.name for s in st.strategies if s.stored]
    for sname in dropped:
        shutil.rmtree(layout.strategy_dir(r.home, r.rid, st.name, sname), ignore_errors=True)
    st.strategies = [s for s in st.strategies if not s.stored] or [BLACKBOX]
    r.cat.set_operator_strategies(r.rid, st.name, [s.name for s in st.strategies])
    st.note = (f"over the disk budget: {st.lineage_bytes} more bytes would exceed "
               f"{r.max_disk}; stored nothing ({', '.join(dropped)} dropped)")
    st.rows = []


def _record_stage(r: _Run, st: _Stage) -> None:
    """The stage's shards, statistics, timings and output array in the catalog."""
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
    r.cat.set_op_stats(
        r.rid, name, status="complete", runtime_s=st.wall_s, runtime_nolineage_s=base,
        task_s=task_s, compute_s=st.total("run_s") - st.total("capture_s"),
        io_s=st.total("read_s") + st.total("write_s"), capture_s=st.total("capture_s"),
        store_s=st.total("store_s"), tasks=len(st.results), pairs=int(st.total("pairs")),
        out_cells=int(st.total("out_cells")), in_cells=int(st.total("in_cells")),
        lineage_bytes=lin_bytes, note=st.note,
    )
    nbytes = arrays.logical_bytes(op.out_shape, op.out_dtype)
    r.cat.add_array(r.rid, name, op.out_shape, str(op.out_dtype),
                    r.chunking.chunk_shape(op.out_shape), name, nbytes,
                    arrays.stored_bytes(r.paths[name]))
    r.operators.append({
        "name": name, "runtime_s": st.wall_s, "lineage_s": st.wall_s - base,
        "lineage_bytes": lin_bytes, "strategies": [s.name for s in st.strategies],
        **({"note": st.note} if st.note else {}),
    })


def _finish(r: _Run, runtime: float) -> None:
    if r.max_disk is not None:
        r.cat.set_statistics(r.rid, "*", "*", {"max_disk": float(r.max_disk)})
    r.cat.finish_run(r.rid, "complete", runtime_s=runtime, input_bytes=r.input_bytes,
                     lineage_bytes=r.lineage_bytes,
                     array_bytes=sum(arrays.stored_bytes(p) for p in r.paths.values()))


def run_workflow(
    wf: Workflow,
    home: str | os.PathLike | None = None,
    inputs: Mapping[str, str] | None = None,
    strategy: str | None = "subzero",
    plan: Mapping[str, Sequence[str]] | None = None,
    chunking: Chunking | None = None,
    master: str | None = None,
    spark: Any = None,
    progress: bool = False,
    on_plan: Callable[[dict[str, list[Strategy]]], None] | None = None,
    max_disk: int | None = None,
    label: str | None = None,
) -> RunResult:
    """Execute ``wf`` on Spark and record everything in the home's catalog.

    ``strategy`` names a workflow-level strategy (``subzero``, ``blackbox``...); ``plan``
    (``{op: [strategy names]}``) overrides it. Returns a :class:`RunResult`; the run's status
    in the catalog is ``complete`` only once every operator has finished.

    ``max_disk`` (bytes) is a lineage budget the run enforces on real bytes: after each
    operator's stage, if its shards would take the run's lineage over the budget, they are
    deleted before the next stage starts and the operator keeps only its non-stored
    strategies (map where it had it, else black box) for this run; the catalog says so and
    queries re-execute it. The stored total at rest never exceeds the budget (while one
    stage runs, its shards may briefly take up to one operator's lineage more).
    ``label`` names the run's strategy in the catalog (default: the strategy, or "plan").
    """
    wf.validate()
    resolved = wf.plan(plan if plan is not None else strategy)
    if on_plan:
        on_plan(resolved)
    chunking = chunking or Chunking()
    home = layout.resolve_home(home)
    data = load_inputs(wf, inputs)
    if spark is None:
        spark = get_spark(master, layout.logs_dir(home))
    if chunking.is_default:
        chunking = chunking.with_tasks(spark.sparkContext.defaultParallelism)
    cat = Catalog(layout.catalog_path(home))
    label = label or ("plan" if plan is not None else strategy)
    rid = cat.create_run(
        wf.name, params=wf.params, strategy=label,
        plan={n: [s.name for s in ss] for n, ss in resolved.items()},
        master=resolve_master(master), chunking=chunking.to_json(),
    )
    r = _Run(wf, home, rid, cat, chunking, spark, max_disk)
    t_start = time.perf_counter()
    bar = _progress(len(wf.order), progress)
    try:
        layout.arrays_dir(home, rid).mkdir(parents=True, exist_ok=False)
        _save_workflow(r)
        _store_inputs(r, data)
        for pos, name in enumerate(wf.order):
            stage = _run_stage(r, pos, name, resolved[name])
            _enforce_budget(r, stage)
            _record_stage(r, stage)
            if bar is not None:
                bar.set_description(name)
                bar.update(1)
        runtime = time.perf_counter() - t_start
        _finish(r, runtime)
        return RunResult(rid, wf.name, label, runtime, r.input_bytes, r.lineage_bytes,
                         r.operators)
    except BaseException as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        cat.finish_run(rid, "failed", error=msg, runtime_s=time.perf_counter() - t_start)
        raise
    finally:
        if bar is not None:
            bar.close()
        cat.close()
