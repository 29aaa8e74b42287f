"""Re-running one operator of a finished run in tracing mode, on chosen parts of its output.

The query executor uses it for black-box lineage, the optimizer's statistics pass to
measure lineage a run did not store. Nothing is written: arrays are never overwritten.
"""

from __future__ import annotations

from typing import Any, Sequence

from subzero.cells import Box
from subzero.chunking import task_grid
from subzero.engine import layout
from subzero.engine.runs import LoadedRun
from subzero.engine.spark import active_session, get_spark
from subzero.engine.tasks import Reduce, make_jobs, raise_task_error, run_jobs
from subzero.errors import StoreError
from subzero.modes import Mode


def reexecute(
    run: LoadedRun,
    op_name: str,
    chunks: Sequence[tuple[int, ...]] | None = None,
    boxes: Sequence[Box] | None = None,
    modes: frozenset[Mode] = frozenset({Mode.FULL}),
    reduce: Reduce | None = None,
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
        spark = spark or active_session()
        where = "spark" if spark is not None and len(jobs) > 1 else "driver"
    if where == "spark" and spark is None:
        spark = get_spark(None, layout.logs_dir(run.home))
    results = run_jobs(jobs, spark if where == "spark" else None, f"{run.id}: re-run {op_name}")
    raise_task_error(op_name, results)
    return results
