#!/usr/bin/env python
"""Query latency per access method and frontier size (the query issue's benchmark).

    python benchmarks/bench_query.py [--quick] [--out FILE.json]

A chain workflow on a 2001 x 513 image: 12 mapping operators (elementwise, 3x3 stencils,
a broadcast 1x1 input). Runs it once with mapping lineage (`blackbox-opt`), once black box,
and once storing Full lineage for the one-step operator (`smooth1`) in each Full encoding.
Measures, side by side in one process, medians over repeats:

- one step backward through `smooth1` (a 3x3 stencil) for frontiers of 1 cell, 1000 cells,
  1% and 50% of the array, with each method: map, stored (each encoding), reexec;
- the whole 12-step mapping path backward, for the same frontier sizes (map and reexec);
- re-execution cost against the number of tiles the frontier touches (clustered frontiers of
  growing size): it should grow with the tiles touched, not with the array.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, parser, timed  # noqa: E402

import numpy as np  # noqa: E402

from operators import Affine, Binary, Convolve, MedianFilter, Unary  # noqa: E402
from subzero.cells import Box
from subzero.frontier import frontier  # noqa: E402
from subzero.engine.runs import load_run
from subzero.engine.runner import run_workflow  # noqa: E402
from subzero.query import QueryExecutor  # noqa: E402
from subzero.engine.spark import get_spark  # noqa: E402
from subzero.workflow import Workflow  # noqa: E402

SHAPE = (2001, 513)


def chain_workflow() -> Workflow:
    rng = np.random.default_rng(0)
    img = rng.normal(1600, 40, SHAPE)
    k = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]]) / 16.0
    wf = Workflow("chain")
    wf.input("image", SHAPE, "float64", source=lambda: img)
    wf.input("offset", (1, 1), "float64", source=lambda: np.full((1, 1), 3.0))
    prev = "image"
    ops = [("lin", Affine(2.0, 1.0)), ("smooth1", Convolve(k)), ("abs", Unary("absolute")),
           ("shift", None), ("smooth2", Convolve(k)), ("sq", Unary("sqrt")),
           ("med", MedianFilter(1)), ("scale", Affine(0.5)), ("smooth3", Convolve(k)),
           ("log", Unary("log1p")), ("smooth4", Convolve(k)), ("final", Affine(1.0, -1.0))]
    for name, op in ops:
        if op is None:
            wf.add(name, Binary("add"), prev, "offset")
        else:
            wf.add(name, op, prev)
        prev = name
    return wf


def frontiers(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = SHAPE[0] * SHAPE[1]
    out = {}
    for label, k in (("1", 1), ("1000", 1000), ("1%", n // 100), ("50%", n // 2)):
        out[label] = frontier(SHAPE, rng.choice(n, size=k, replace=False).astype(np.uint64))
    return out


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    repeat = 3 if args.quick else 7
    spark = get_spark()
    tmp = Path(tempfile.mkdtemp(prefix="sz-bench-query-"))
    rng = np.random.default_rng(1)
    rows, path_rows, tile_rows = [], [], []
    try:
        runs = {}
        runs["map"] = run_workflow(chain_workflow(), tmp, strategy="blackbox-opt", spark=spark).run
        runs["blackbox"] = run_workflow(chain_workflow(), tmp, strategy="blackbox",
                                        spark=spark).run
        stored = ["full-one-bwd", "full-many-bwd", "full-one-fwd"]
        if args.quick:
            stored = ["full-one-bwd"]
        for s in stored:
            runs[s] = run_workflow(chain_workflow(), tmp, plan={"smooth1": [s]}, spark=spark).run
        qx = {k: QueryExecutor(load_run(tmp, rid), log=False) for k, rid in runs.items()}
        fr = frontiers(rng)
        path = [(n, 0) for n in reversed(chain_workflow().validate().order)]
        # one step
        for label, f in fr.items():
            for method, key in [("map", "map"), ("reexec", "blackbox")] + [
                    ("stored", s) for s in stored]:
                if method == "reexec" and label == "50%" and args.quick:
                    continue
                q = qx[key]
                med, times, res = timed(lambda: q.step("smooth1", 0, "backward", f, method), repeat)
                rows.append({"step": "smooth1", "method": method, "strategy": key,
                             "frontier": label, "cells": int(f.sum()), "median_s": med,
                             "times": times, "used": res[1].method, "out_cells": int(res[0].sum())})
        # the 12-step path
        for label, f in fr.items():
            for method, key in (("map", "map"), ("reexec", "blackbox")):
                if method == "reexec" and label in ("1%", "50%") and args.quick:
                    continue
                q = qx[key]
                med, times, res = timed(lambda: q.backward(f, "final", path=path), repeat)
                path_rows.append({"steps": len(path), "method": method, "frontier": label,
                                  "cells": int(f.sum()), "median_s": med, "times": times,
                                  "out_cells": res.count})
        # re-execution against tiles touched (clustered frontiers)
        q = qx["blackbox"]
        op = q.run.op("smooth1")
        for side in (1, 64, 128, 256, 512, 1024, 2000):
            box = Box((0, 0), (min(side, SHAPE[0]), min(side, SHAPE[1])))
            f = frontier(SHAPE, box)
            tiles, cells = q.tiles(op, 0, True, f)
            med, times, _ = timed(lambda: q.step("smooth1", 0, "backward", f, "reexec"), repeat)
            tile_rows.append({"box": str(box), "frontier_cells": int(f.sum()), "tiles": len(tiles),
                              "rerun_cells": cells, "median_s": med,
                              "s_per_rerun_cell": med / max(1, cells)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    one_step_full = [r for r in rows if r["method"] == "map" and r["frontier"] == "50%"]
    path_map = [r for r in path_rows if r["method"] == "map"]
    emit({
        "benchmark": "query", "shape": list(SHAPE), "repeat": repeat, "one_step": rows,
        "path": path_rows, "reexec_tiles": tile_rows,
        "targets": {
            "map_step_max_s": max(r["median_s"] for r in one_step_full),
            "map_step_target_s": 0.010,
            "map_path_max_s": max(r["median_s"] for r in path_map),
            "map_path_target_s": 0.050,
        },
    }, args.out)


if __name__ == "__main__":
    main()
