"""The workflow executor on PySpark, and the re-execution primitive.

A run executes one Spark stage per operator, in topological order, with one task per output
chunk. A task reads its input blocks (plus the halo of a stencil) from zarr, runs the
operator's pure kernel, writes its output chunk, hands the lineage it captured to one sink
per stored strategy, and returns timings and lineage statistics (plain data) to the driver,
which records them in the catalog. Nothing but small closures (the bound operator and the
chunk context) is shipped to tasks; arrays never pass through the driver.

:func:`reexecute` re-runs one operator of a finished run in tracing mode (``modes={FULL}``)
on chosen output chunks only, without writing anything, and returns the lineage pairs (or
the result of a reduction applied to them inside the task). The query executor uses it for
black-box lineage.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from subzero import store
from subzero.catalog import Catalog
from subzero.cells import Box
from subzero.chunking import Chunking, chunk_grid, chunk_key
from subzero.errors import StoreError, SubZeroError, WorkflowError
from subzero.modes import BLACKBOX, Mode, Strategy, capture_modes
from subzero.runtime import ChunkContext, PairBatch, ShardSpec, TaskContext, make_sink
from subzero.workflow import Workflow

WORKFLOW_FILE = "workflow.pkl"


# ---------------------------------------------------------------------------------------
# tasks
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskJob:
    """Everything one task needs: a small closure, no array data."""

    home: str
    run: str
    op: Any  # bound operators.base.Operator
    chunk: ChunkContext
    in_paths: tuple[str, ...]
    out_path: str | None  # None: do not write the output (re-execution)
    strategies: tuple[Strategy, ...]  # stored strategies to hand pairs to
    modes: frozenset[Mode]
    collect: bool = False  # return the captured pairs (re-execution)
    reduce: Callable[[ChunkContext, PairBatch | None, PairBatch | None], Any] | None = None


def _attempt() -> int:
    try:
        from pyspark import TaskContext as SparkTaskContext

        tc = SparkTaskContext.get()
        return int(tc.attemptNumber()) if tc is not None else 0
    except Exception:  # noqa: BLE001 - not inside a Spark task
        return 0


def run_task(job: TaskJob) -> dict[str, Any]:
    """Run one task (inside a Spark worker, or on the driver). Never raises: errors come
    back as data so the driver can report them in one line."""
    t0 = time.perf_counter()
    res: dict[str, Any] = {"chunk": job.chunk.index, "shards": []}
    try:
        op, ch = job.op, job.chunk
        blocks = [store.read_box(Path(p), b) for p, b in zip(job.in_paths, ch.in_boxes)]
        t_read = time.perf_counter()
        supports_full = Mode.FULL in op.supported_modes()
        run_modes = job.modes
        if Mode.FULL in job.modes and not supports_full:
            run_modes = (job.modes - {Mode.FULL}) or frozenset({Mode.BLACKBOX})
        ctx = TaskContext(ch, run_modes, op.name)
        out = op.run(ctx, *blocks)
        if Mode.FULL in job.modes and not supports_full:
            op.trace_all_to_all(ctx)  # the paper's default for operators that expose nothing
        t_run = time.perf_counter()
        out = np.asarray(out)
        if out.shape != ch.out_box.shape:
            raise WorkflowError(
                f"operator {op.name!r} returned a block of shape {out.shape} for chunk "
                f"{chunk_key(ch.index)}; expected {ch.out_box.shape}"
            )
        if job.out_path is not None:
            if out.dtype != op.out_dtype and op.out_dtype.kind not in "UOT":
                out = out.astype(op.out_dtype)
            store.write_block(Path(job.out_path), ch.out_box, out)
        t_write = time.perf_counter()
        full, pay = ctx.full_pairs(), ctx.payload_pairs()
        for s in job.strategies:
            batch = full if s.mode is Mode.FULL else pay
            ts = time.perf_counter()
            sink = make_sink(ShardSpec(job.home, job.run, op.name, s, ch.index, ch.out_box,
                                       ch.out_shape, ch.in_shapes, _attempt()))
            try:
                if batch is not None and len(batch):
                    sink.write(batch)
                stats = sink.close()
            except BaseException:
                sink.abort()
                raise
            stats.setdefault("encode_s", time.perf_counter() - ts)
            stats["strategy"] = s.name
            stats["chunk"] = chunk_key(ch.index)
            stats["store_s"] = time.perf_counter() - ts
            res["shards"].append(stats)
        t_store = time.perf_counter()
        if job.reduce is not None:
            res["result"] = job.reduce(ch, full, pay)
        elif job.collect:
            res["full"], res["payload"] = full, pay
        res.update(
            read_s=t_read - t0, run_s=t_run - t_read, capture_s=ctx.capture_s,
            write_s=t_write - t_run, store_s=t_store - t_write,
            pairs=(len(full) if full else 0) + (len(pay) if pay else 0),
            out_cells=(full.out_cells if full else 0) + (pay.out_cells if pay else 0),
            in_cells=full.in_cells if full else 0,
        )
    except SubZeroError as e:
        res["error"] = str(e)
        res["error_kind"] = "user"
    except Exception as e:  # noqa: BLE001 - reported by the driver
        res["error"] = f"{type(e).__name__}: {e}"
        res["error_kind"] = "internal"
        res["traceback"] = traceback.format_exc()
    res["task_s"] = time.perf_counter() - t0
    return res


def _raise_task_error(op: str, results: Sequence[dict[str, Any]]) -> None:
    for r in results:
        if "error" in r:
            if r["error_kind"] == "user":
                raise SubZeroError(f"operator {op!r}: {r['error']}")
            if os.environ.get("SUBZERO_DEBUG"):
                print(r.get("traceback", ""), file=sys.stderr)
            raise RuntimeError(
                f"operator {op!r} failed in chunk {chunk_key(r['chunk'])}: {r['error']}"
            )


def run_jobs(jobs: Sequence[TaskJob], spark: Any | None, label: str = "") -> list[dict]:
    """Run tasks as one Spark stage (``spark`` given) or on the driver (``spark=None``)."""
    if spark is None or not jobs:
        return [run_task(j) for j in jobs]
    sc = spark.sparkContext
    sc.setJobDescription(label)
    return sc.parallelize(list(jobs), len(jobs)).map(run_task).collect()


# ---------------------------------------------------------------------------------------
# planning tasks
# ---------------------------------------------------------------------------------------


def task_grid(op: Any, out_chunks: Sequence[int]) -> list[tuple[tuple[int, ...], Box]]:
    """The output boxes of an operator's tasks: one per stored chunk, or one for the whole
    array when the operator is global (that task writes every chunk)."""
    if op.parallelism.kind == "global":
        return [((0,) * len(op.out_shape), Box.full(op.out_shape))]
    return chunk_grid(op.out_shape, out_chunks)


def make_jobs(home: Path, rid: str, op: Any, in_paths: Sequence[Path], out_path: Path | None,
              boxes: Sequence[tuple[tuple[int, ...], Box]], strategies: Sequence[Strategy],
              modes: frozenset[Mode], collect: bool = False,
              reduce: Callable | None = None) -> list[TaskJob]:
    """One job per ``(index, output box)``."""
    jobs = []
    for idx, box in boxes:
        in_boxes = tuple(op.input_box(box, i) for i in range(len(op.in_shapes)))
        ch = ChunkContext(idx, box, in_boxes, op.out_shape, op.in_shapes)
        jobs.append(TaskJob(str(home), rid, op, ch, tuple(str(p) for p in in_paths),
                            None if out_path is None else str(out_path),
                            tuple(s for s in strategies if s.stored), modes, collect, reduce))
    return jobs


# ---------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------


def load_file(path: str) -> np.ndarray:
    """Read an input array from ``.npy`` or ``.fits`` (first image HDU)."""
    p = Path(path)
    if not p.exists():
        raise StoreError(f"input file {path} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        return np.load(p, allow_pickle=False)
    if suffix in (".fits", ".fit", ".fts"):
        from astropy.io import fits

        with fits.open(p, memmap=False) as hdul:
            for hdu in hdul:
                if hdu.data is not None and getattr(hdu, "is_image", True):
                    return np.asarray(hdu.data)
        raise StoreError(f"FITS file {path} holds no image")
    raise StoreError(f"cannot read {path}: expected a .npy or .fits file")


def load_inputs(wf: Workflow, paths: Mapping[str, str] | None) -> dict[str, np.ndarray]:
    """Each input's data: from ``paths`` (``--input NAME=PATH``) or its default source."""
    paths = dict(paths or {})
    for name in paths:
        if name not in wf.inputs:
            raise WorkflowError(
                f"--input {name}: workflow {wf.name!r} has no input {name!r} "
                f"(inputs: {', '.join(wf.inputs)})"
            )
    data = {}
    for name, spec in wf.inputs.items():
        if name in paths:
            arr = (spec.loader or load_file)(paths[name])
            origin = paths[name]
        elif spec.source is not None:
            arr = spec.source()
            origin = "its generator"
        else:
            raise WorkflowError(f"input {name!r} needs data: pass --input {name}=PATH")
        arr = np.asarray(arr)
        if arr.shape != spec.shape:
            raise WorkflowError(
                f"input {name!r} from {origin} has shape {arr.shape}; workflow "
                f"{wf.name!r} expects {spec.shape}"
            )
        if arr.dtype != spec.dtype:
            if spec.dtype.kind in "UOT" or arr.dtype.kind in "UOT":
                if not (spec.dtype.kind in "UOT" and arr.dtype.kind in "UOT"):
                    raise WorkflowError(
                        f"input {name!r} from {origin} has dtype {arr.dtype}; expected {spec.dtype}"
                    )
            elif not np.can_cast(arr.dtype, spec.dtype, "same_kind") and not (
                arr.dtype.kind in "ui" and spec.dtype.kind == "f"
            ):
                raise WorkflowError(
                    f"input {name!r} from {origin} has dtype {arr.dtype}; expected {spec.dtype}"
                )
            else:
                arr = arr.astype(spec.dtype)
        data[name] = arr
    return data


# ---------------------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------------------


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


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, delay=1.0, file=sys.stderr, unit="op", leave=False,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} operators [{elapsed}]")


def _sum(results: Sequence[dict], key: str) -> float:
    return float(sum(r.get(key, 0.0) for r in results))


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
    from subzero.spark import get_spark, resolve_master

    wf.validate()
    resolved = wf.plan(plan if plan is not None else strategy)
    if on_plan:
        on_plan(resolved)
    chunking = chunking or Chunking()
    home = store.resolve_home(home)
    data = load_inputs(wf, inputs)
    if spark is None:
        spark = get_spark(master, home / "logs")
    if chunking.is_default:
        chunking = chunking.with_tasks(spark.sparkContext.defaultParallelism)
    cat = Catalog(home / "catalog.sqlite")
    label = label or ("plan" if plan is not None else strategy)
    rid = cat.create_run(
        wf.name, params=wf.params, strategy=label,
        plan={n: [s.name for s in ss] for n, ss in resolved.items()},
        master=resolve_master(master), chunking=chunking.to_json(),
    )
    t_start = time.perf_counter()
    bar = _progress(len(wf.order), progress)
    try:
        rdir = store.run_dir(home, rid)
        (rdir / "arrays").mkdir(parents=True, exist_ok=False)
        from pyspark import cloudpickle

        with open(rdir / WORKFLOW_FILE, "wb") as f:
            f.write(cloudpickle.dumps(wf))
        paths: dict[str, Path] = {}
        input_bytes = 0
        for name, arr in data.items():
            paths[name] = store.array_path(home, rid, name)
            ch = chunking.chunk_shape(arr.shape)
            store.write_array(paths[name], arr, ch)
            nbytes = store.logical_bytes(arr.shape, arr.dtype)
            if not wf.inputs[name].auxiliary:
                input_bytes += nbytes
            cat.add_array(rid, name, arr.shape, str(arr.dtype), ch, None, nbytes,
                          store.stored_bytes(paths[name]))
        ops_json: list[dict[str, Any]] = []
        total_lineage = 0
        for pos, name in enumerate(wf.order):
            op, node = wf.ops[name], wf.nodes[name]
            strategies = resolved[name]
            cat.add_operator(
                rid, pos, name, f"{type(op).__module__}.{type(op).__qualname__}", op.kind,
                op.params(), list(node.inputs), sorted(m.value for m in op.supported_modes()),
                [s.name for s in strategies], str(op.parallelism),
            )
            modes = capture_modes(strategies)
            out_chunks = chunking.chunk_shape(op.out_shape)
            paths[name] = store.array_path(home, rid, name)
            store.create_array(paths[name], op.out_shape, op.out_dtype, out_chunks)
            jobs = make_jobs(home, rid, op, [paths[s] for s in node.inputs], paths[name],
                             task_grid(op, out_chunks), strategies, modes)
            t0 = time.perf_counter()
            results = run_jobs(jobs, spark, f"{rid}: {name}")
            wall = time.perf_counter() - t0
            _raise_task_error(name, results)
            shards = [s for r in results for s in r["shards"]]
            shard_rows = [
                {"op": name, "strategy": s["strategy"], "chunk": s["chunk"],
                 "path": os.path.relpath(s["path"], home),
                 "data_bytes": s.get("data_bytes", 0), "index_bytes": s.get("index_bytes", 0),
                 "pairs": s.get("pairs", 0), "out_cells": s.get("out_cells", 0),
                 "in_cells": s.get("in_cells", 0), "fanin": s.get("fanin"),
                 "fanout": s.get("fanout"), "encode_s": s.get("encode_s"),
                 "attempt": s.get("attempt", 0)}
                for s in shards if s.get("path")
            ]
            lin_bytes = int(sum(r["data_bytes"] + r["index_bytes"] for r in shard_rows))
            note = None
            if max_disk is not None and shard_rows and total_lineage + lin_bytes > max_disk:
                dropped = [s.name for s in strategies if s.stored]
                for sname in dropped:
                    shutil.rmtree(store.lineage_dir(home, rid) / name / sname, ignore_errors=True)
                strategies = [s for s in strategies if not s.stored] or [BLACKBOX]
                cat.set_operator_strategies(rid, name, [s.name for s in strategies])
                note = (f"over the disk budget: {lin_bytes} more bytes would exceed "
                        f"{max_disk}; stored nothing ({', '.join(dropped)} dropped)")
                shard_rows, lin_bytes = [], 0
            cat.add_shards(rid, shard_rows)
            kept = {r["strategy"] for r in shard_rows}
            for sname in kept:  # what the query-time cost model needs beyond the shard rows
                mine = [s for s in shards if s["strategy"] == sname]
                cat.set_statistics(rid, name, sname, {
                    "records": sum(s.get("records", s.get("pairs", 0)) or 0 for s in mine),
                    "payload_bytes": sum(s.get("payload_bytes", 0) or 0 for s in mine)})
            total_lineage += lin_bytes
            task_s = _sum(results, "task_s")
            lineage_task_s = _sum(results, "capture_s") + _sum(results, "store_s")
            frac = (lineage_task_s / task_s) if task_s > 0 else 0.0
            base = wall * (1.0 - frac)
            cat.set_op_stats(
                rid, name, status="complete", runtime_s=wall, runtime_nolineage_s=base,
                task_s=task_s, compute_s=_sum(results, "run_s") - _sum(results, "capture_s"),
                io_s=_sum(results, "read_s") + _sum(results, "write_s"),
                capture_s=_sum(results, "capture_s"), store_s=_sum(results, "store_s"),
                tasks=len(results), pairs=int(_sum(results, "pairs")),
                out_cells=int(_sum(results, "out_cells")), in_cells=int(_sum(results, "in_cells")),
                lineage_bytes=lin_bytes, note=note,
            )
            nbytes = store.logical_bytes(op.out_shape, op.out_dtype)
            cat.add_array(rid, name, op.out_shape, str(op.out_dtype), out_chunks, name, nbytes,
                          store.stored_bytes(paths[name]))
            ops_json.append({
                "name": name, "runtime_s": wall, "lineage_s": wall - base,
                "lineage_bytes": lin_bytes, "strategies": [s.name for s in strategies],
                **({"note": note} if note else {}),
            })
            if bar is not None:
                bar.set_description(name)
                bar.update(1)
        runtime = time.perf_counter() - t_start
        if max_disk is not None:
            cat.set_statistics(rid, "*", "*", {"max_disk": float(max_disk)})
        cat.finish_run(rid, "complete", runtime_s=runtime, input_bytes=input_bytes,
                       lineage_bytes=total_lineage,
                       array_bytes=sum(store.stored_bytes(p) for p in paths.values()))
        return RunResult(rid, wf.name, label, runtime, input_bytes, total_lineage, ops_json)
    except BaseException as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        cat.finish_run(rid, "failed", error=msg, runtime_s=time.perf_counter() - t_start)
        raise
    finally:
        if bar is not None:
            bar.close()
        cat.close()


# ---------------------------------------------------------------------------------------
# finished runs and re-execution
# ---------------------------------------------------------------------------------------


@dataclass
class LoadedRun:
    """A finished run as the query side sees it: catalog rows plus the bound workflow."""

    home: Path
    id: str
    info: dict[str, Any]
    workflow: Workflow
    arrays: dict[str, dict[str, Any]]
    operators: dict[str, dict[str, Any]]

    def array_path(self, name: str) -> Path:
        if name not in self.arrays:
            raise StoreError(
                f"run {self.id} has no array {name!r} (arrays: {', '.join(self.arrays)})"
            )
        return store.array_path(self.home, self.id, name)

    def op(self, name: str) -> Any:
        if name not in self.workflow.ops:
            raise WorkflowError(
                f"run {self.id} has no operator {name!r} "
                f"(operators: {', '.join(self.workflow.order)})"
            )
        return self.workflow.ops[name]

    def strategies(self, name: str) -> list[Strategy]:
        return [Strategy.parse(s) for s in self.operators[name]["strategies"]]

    def chunks(self, name: str) -> tuple[int, ...]:
        return tuple(self.arrays[name]["chunks"])


def load_run(home: str | os.PathLike | None, rid: str, catalog: Catalog | None = None,
             require_complete: bool = True) -> LoadedRun:
    home = store.resolve_home(home)
    cat = catalog or Catalog(home / "catalog.sqlite")
    try:
        info = cat.run(rid)
        rid = info["id"]
        if require_complete and info["status"] != "complete":
            raise StoreError(
                f"run {rid} is {info['status']}"
                + (f" ({info['error']})" if info.get("error") else "")
                + "; only complete runs can be queried"
            )
        path = store.run_dir(home, rid) / WORKFLOW_FILE
        try:
            with open(path, "rb") as f:
                wf = pickle.load(f)
        except FileNotFoundError:
            raise StoreError(f"run {rid} has lost its workflow file {path}") from None
        wf.validate()
        return LoadedRun(home, rid, info, wf, cat.arrays(rid), cat.operators(rid))
    finally:
        if catalog is None:
            cat.close()


def reexecute(
    run: LoadedRun,
    op_name: str,
    chunks: Sequence[tuple[int, ...]] | None = None,
    boxes: Sequence[Box] | None = None,
    modes: frozenset[Mode] = frozenset({Mode.FULL}),
    reduce: Callable[[ChunkContext, PairBatch | None, PairBatch | None], Any] | None = None,
    where: str = "auto",
    spark: Any = None,
) -> list[dict[str, Any]]:
    """Re-run ``op_name`` of a finished run in tracing mode on chosen parts of its output.

    The parts are the run's task chunks (``chunks``: grid indices; default all), or any
    output ``boxes`` (a query re-executes just the tiles its frontier touches; a global
    operator always re-runs whole). Nothing is written (arrays are never overwritten).
    Returns one dict per part with ``chunk`` and either ``full``/``payload`` (the captured
    :class:`PairBatch` es) or, when ``reduce(chunk_ctx, full, payload)`` is given, its
    ``result`` computed inside the task (so large pair sets never travel to the driver).

    ``where`` is ``"driver"`` (in this process), ``"spark"`` (one task per part), or
    ``"auto"``: Spark when a session is running and more than one part is asked for.
    """
    op = run.op(op_name)
    node = run.workflow.nodes[op_name]
    grid = task_grid(op, run.chunks(op_name))
    if boxes is not None and op.parallelism.kind != "global":
        parts = [((k,), b) for k, b in enumerate(boxes)]
    elif chunks is not None:
        want = {tuple(int(v) for v in c) for c in chunks}
        known = {idx for idx, _ in grid}
        bad = want - known
        if bad:
            raise StoreError(
                f"operator {op_name!r} has no chunk {sorted(bad)[0]} (grid of {len(grid)} chunks)"
            )
        parts = [(idx, b) for idx, b in grid if idx in want]
    else:
        parts = grid
    jobs = make_jobs(run.home, run.id, op, [run.array_path(s) for s in node.inputs], None,
                     parts, (), frozenset(modes), collect=reduce is None, reduce=reduce)
    if where == "auto":
        from subzero.spark import active_session

        spark = spark or active_session()
        where = "spark" if spark is not None and len(jobs) > 1 else "driver"
    if where == "spark" and spark is None:
        from subzero.spark import get_spark

        spark = get_spark(None, run.home / "logs")
    results = run_jobs(jobs, spark if where == "spark" else None, f"{run.id}: re-run {op_name}")
    _raise_task_error(op_name, results)
    return results
