#!/usr/bin/env python
"""Executor overhead: the example workflow through the Spark executor against the same
kernels called directly on numpy, at 1x and 4x the LSST image size (2001 x 513).

    python benchmarks/bench_executor.py [--quick] [--out FILE.json]

Both sides compute the same arrays (the test suite checks they are bit-identical). The
Spark side runs on a warm local[*] session with the `blackbox-opt` strategy (no lineage
stored) and includes writing every array to zarr and recording the catalog; the numpy side
holds everything in memory. Figures are medians of repeated runs, measured side by side.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, parser, timed  # noqa: E402

import numpy as np  # noqa: E402

from subzero.chunking import Chunking  # noqa: E402
from subzero.engine.runner import run_workflow  # noqa: E402
from subzero.engine.spark import get_spark  # noqa: E402
from workflows import example  # noqa: E402

LSST = (2001, 513)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    repeat = 3 if args.quick else 5
    spark = get_spark()
    tmp = Path(tempfile.mkdtemp(prefix="sz-bench-exec-"))
    rows = []
    try:
        # warm-up: start Python workers, JIT nothing, fill caches
        run_workflow(example.build(shape=(200, 100)), tmp / "warm", spark=spark)
        for factor, shape in ((1, LSST), (4, (LSST[0] * 2, LSST[1] * 2))):
            image = example.generate_image(shape, 0)
            thr = np.full((1, 1), 200.0)
            np_med, np_times, _ = timed(lambda: example.reference(image, thr), repeat)
            k = iter(range(1000))
            sp_med, sp_times, res = timed(
                lambda: run_workflow(example.build(shape=shape), tmp / f"h{next(k)}",
                                     strategy="blackbox-opt", chunking=Chunking(), spark=spark),
                repeat)
            rows.append({
                "scale": factor, "shape": list(shape), "cells": int(np.prod(shape)),
                "numpy_s": np_med, "spark_s": sp_med, "ratio": sp_med / np_med,
                "numpy_times": np_times, "spark_times": sp_times,
                "operators": [{"name": o["name"], "runtime_s": o["runtime_s"]}
                              for o in res.operators],
                "spark_master": spark.sparkContext.master,
            })
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit({"benchmark": "executor", "repeat": repeat, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
