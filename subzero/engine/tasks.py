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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from encoders.sink import write_shard
from subzero.cells import Box
from subzero.chunking import chunk_key
from subzero.engine import arrays, layout
from subzero.errors import SubZeroError, WorkflowError
from subzero.lineage import PairBatch
from subzero.modes import Mode, Strategy
from subzero.operator import Operator
from subzero.runtime import ChunkContext, TaskContext

#: ``reduce(chunk, full_pairs, payload_pairs)``: what a re-executing task returns instead
#: of its pairs (so large pair sets never travel to the driver)
Reduce = Callable[[ChunkContext, PairBatch | None, PairBatch | None], Any]


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


def _attempt() -> int:
    try:
        # pyspark only inside a worker (optional here: tasks also run on the driver)
        from pyspark import TaskContext as SparkTaskContext

        tc = SparkTaskContext.get()
        return int(tc.attemptNumber()) if tc is not None else 0
    except Exception:  # noqa: BLE001 - not inside a Spark task
        return 0


def _store(job: TaskJob, full: PairBatch | None, pay: PairBatch | None) -> list[dict]:
    """Write the task's pairs as one shard per stored strategy; their statistics."""
    op, ch = job.op, job.chunk
    shards = []
    for s in job.strategies:
        ts = time.perf_counter()
        spec = layout.shard_spec(Path(job.home), job.run, op.name, s, ch.index, ch.out_box,
                                 ch.out_shape, ch.in_shapes, _attempt())
        stats = write_shard(spec, full if s.mode is Mode.FULL else pay)
        stats.setdefault("encode_s", time.perf_counter() - ts)
        stats["strategy"] = s.name
        stats["chunk"] = chunk_key(ch.index)
        stats["store_s"] = time.perf_counter() - ts
        shards.append(stats)
    return shards


def run_task(job: TaskJob) -> dict[str, Any]:
    """Run one task (inside a Spark worker, or on the driver). Never raises: errors come
    back as data so the driver can report them in one line."""
    t0 = time.perf_counter()
    res: dict[str, Any] = {"chunk": job.chunk.index, "shards": []}
    try:
        op, ch = job.op, job.chunk
        blocks = [arrays.read_box(Path(p), b) for p, b in zip(job.in_paths, ch.in_boxes)]
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
            arrays.write_block(Path(job.out_path), ch.out_box, out)
        t_write = time.perf_counter()
        full, pay = ctx.full_pairs(), ctx.payload_pairs()
        res["shards"] = _store(job, full, pay)
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


def raise_task_error(op: str, results: Sequence[dict[str, Any]]) -> None:
    """Raise the first task error of ``results`` in one line (a user error as itself)."""
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
