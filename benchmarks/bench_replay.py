#!/usr/bin/env python
"""What-if replay against a full re-run: a 10 x 10 box of `exp1` masked (set to 0) on the
real LSST exposures, replayed through to `clust`, against running the whole astronomy
workflow again on the changed exposure; one box inside a chunk, one across the border of
the exposure's two chunks (``worst_ratio`` is the larger ratio).

    python benchmarks/bench_replay.py [--quick] [--out benchmarks/results/replay.json]

Both sides run in one process on a warm Spark session (`local[*,4]`), with the `subzero`
strategy, and write everything a run writes (arrays, lineage, catalog rows). The full
re-run reads the changed exposure from a `.npy` file (the other from its FITS file); the
replay reads the parent run. The replayed arrays are checked equal to the re-run's, bit for
bit. Each repeat times one full re-run then one replay (interleaved, after a garbage
collection each, so that both sides see the same drifting load of a shared machine);
figures are medians of repeats; the target is replay <= 1/10 of the re-run's time.
Needs the real exposures ($SUBZERO_DATA or ../shared/data); generated ones with --quick
when they are missing.
"""

from __future__ import annotations

import gc
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, parser, timed  # noqa: E402

import numpy as np  # noqa: E402

import workflows  # noqa: E402
from subzero import Box  # noqa: E402
from subzero.api import Home  # noqa: E402
from subzero.replay import differs  # noqa: E402
from subzero.engine.runner import run_workflow  # noqa: E402
from subzero.engine.spark import get_spark  # noqa: E402
from workflows.astronomy import real_inputs  # noqa: E402

#: 10 x 10 boxes of exp1: inside a chunk, and across the border of the two chunks
BOXES = {"middle of a chunk": Box((500, 250), (510, 260)),
         "chunk border": Box((996, 250), (1006, 260))}
TARGET = 0.1


def _case(parent: Any, where: str, box: Box, build: dict, real: Any, spark: Any, tmp: Path,
          repeat: int) -> dict[str, Any]:
    """One box: full re-runs on the changed exposure against replays of the parent."""
    exp1 = parent.array("exp1").copy()
    exp1[box.slices] = 0
    name = f"exp1-{where.replace(' ', '-')}.npy"
    np.save(tmp / name, exp1)
    changed = {"exp1": str(tmp / name)}
    if real:
        changed["exp2"] = real["exp2"]
    fulls: list[tuple[Path, str]] = []

    def full() -> None:
        home = tmp / f"full-{where.replace(' ', '-')}{len(fulls)}"
        res = run_workflow(workflows.build("astronomy", **build), home, inputs=changed,
                           strategy="subzero", spark=spark)
        fulls.append((home, res.run))

    def replay() -> Any:
        return parent.replay("exp1", box, value=0, to="clust", quiet=True)

    full()  # warm: Python workers, caches
    replay()
    full_times, rep_times, new = [], [], None
    for _ in range(repeat):  # interleaved, so that both see the machine's drifting load
        gc.collect()
        full_times.append(timed(full, 1)[0])
        gc.collect()
        t, _, new = timed(replay, 1)
        rep_times.append(t)
    full_med, rep_med = statistics.median(full_times), statistics.median(rep_times)
    ref = Home(fulls[-1][0]).get(fulls[-1][1])
    same = {n: not bool(differs(ref.array(n), new.array(n)).any()) for n in ref.arrays}
    res = new.replayed
    clust = res.array_result("clust")
    return {
        "where": where, "box": str(box), "full_rerun_s": full_med,
        "full_rerun_times": full_times, "replay_s": rep_med, "replay_times": rep_times,
        "ratio": rep_med / full_med, "identical_to_full_rerun": all(same.values()),
        "arrays_differing": sorted(n for n, ok in same.items() if not ok),
        "recomputed_cells": res.recomputed_cells, "full_cells": res.full_cells,
        "recomputed_fraction": res.recomputed_cells / res.full_cells,
        "clust_changed": clust.changed if clust else 0,
        "operators": [a.to_json() | {"cells": None} for a in res.arrays],
    }


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    repeat = 3 if args.quick else 7
    real = real_inputs()
    if real is None and not args.quick:
        sys.exit("bench_replay: the real LSST exposures are missing ($SUBZERO_DATA or "
                 "../shared/data); --quick runs on generated ones")
    spark = get_spark()
    tmp = Path(tempfile.mkdtemp(prefix="sz-bench-replay-"))
    try:
        build = dict(data="real") if real else dict(data="generated")
        wf = workflows.build("astronomy", **build)
        home = Home(tmp / "home")
        parent_res = run_workflow(wf, home.path, inputs=real, strategy="subzero", spark=spark)
        parent = home.get(parent_res.run)
        cases = []
        for where, box in BOXES.items():
            cases.append(_case(parent, where, box, build, real, spark, tmp, repeat))
        worst = max(c["ratio"] for c in cases)
        doc = {
            "benchmark": "replay", "data": "real" if real else "generated",
            "shape": list(parent.shape("exp1")), "value": 0, "to": "clust", "repeat": repeat,
            "cases": cases, "worst_ratio": worst, "target": TARGET, "met": worst <= TARGET,
            "identical_to_full_rerun": all(c["identical_to_full_rerun"] for c in cases),
            "spark_master": spark.sparkContext.master,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit(doc, args.out)


if __name__ == "__main__":
    main()
