"""``subzero calibrate``: measure the cost model's constants on this machine.

Two parts, written to ``subzero/query/calibration.json`` (:mod:`optimizer.calibration`):

- **encoders**: synthetic lineage at several fan-in / fan-out points (one-to-one, 3x3 and
  7x7 stencils, block-to-block, block-to-cell, sparse, payloads of several widths) is
  written as real shards through the encoders' sink (:func:`encoders.sink.write_shard`,
  a run's own path) into a scratch directory; the bytes they report and the time they
  take are fitted per strategy with non-negative least squares on the features of the
  size model (:mod:`encoders.sizes`).
- **query**: the fields of :class:`subzero.query.costs.QueryCosts`, timed directly:
  mapping functions on frontiers of two sizes, shard open and lookups by query size and
  fan-in, scans of mismatched shards, payload groups, and re-execution on the driver (and
  as Spark tasks when Spark is available).

Everything is written under a temporary directory that is removed afterwards.

>>> cal = calibrate(quick=True, spark=False)       # doctest: +SKIP
>>> cal.meta["fit"]["full-one-bwd"]["data_bytes"] < 0.5   # doctest: +SKIP
True
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from encoders import sink
from encoders.lookup import open_shard
from encoders.sizes import features
from operators import Affine, Convolve
from operators.base import box_neighbours
from optimizer.calibration import (ENCODED, FEATURES, TARGETS, Calibration, CalibrationError,
                                   load_calibration)
from optimizer.stats import ModeStats
from subzero.cells import Box, Ragged, dilate, to_coords
from subzero.chunking import chunk_grid
from subzero.engine import arrays, layout
from subzero.engine.spark import get_spark
from subzero.engine.tasks import make_jobs, run_jobs
from subzero.lineage import PairBatch, as_pairs
from subzero.modes import FULL_MANY_BWD, FULL_ONE_BWD, PAY_ONE_BWD, Mode, Strategy
from subzero.query.costs import QueryCosts
from subzero.query.stored import group_by_payload

Progress = Callable[[str], None] | None


# ---------------------------------------------------------------------------------------
# synthetic lineage
# ---------------------------------------------------------------------------------------


def _grid(shape: tuple[int, int]) -> np.ndarray:
    return np.arange(shape[0] * shape[1], dtype=np.uint64)


def _stencil(shape: tuple[int, int], r: int, keep: float = 1.0, seed: int = 0) -> PairBatch:
    lin = _grid(shape)
    if keep < 1.0:
        rng = np.random.default_rng(seed)
        lin = np.sort(rng.choice(lin, max(1, int(len(lin) * keep)), replace=False))
    coords = np.stack(np.unravel_index(lin.astype(np.int64), shape), axis=1)
    ins = box_neighbours(coords, (r, r), shape) if r else Ragged.from_singletons(lin)
    return PairBatch(Ragged.from_singletons(lin), ins=(ins,))


def _scattered(shape: tuple[int, int], fanin: int, seed: int = 0) -> PairBatch:
    """Each output cell reads ``fanin`` random input cells: no two cell sets alike."""
    n = shape[0] * shape[1]
    ins = np.sort(np.random.default_rng(seed).integers(0, n, size=(n, fanin)), axis=1)
    return PairBatch(Ragged.from_singletons(_grid(shape)),
                     ins=(Ragged(ins.reshape(-1).astype(np.uint64),
                                 np.arange(0, n * fanin + 1, fanin, dtype=np.int64)),))


def _blocks(shape: tuple[int, int], b: int, to_cell: bool = False) -> PairBatch:
    """Region pairs of ``b x b`` output blocks; each reads the same block of the input
    (or, ``to_cell``, only the block's first cell)."""
    h, w = shape
    outs, ins = [], []
    for r0 in range(0, h, b):
        for c0 in range(0, w, b):
            box = Box((r0, c0), (min(h, r0 + b), min(w, c0 + b)))
            lin = box.linear(shape)
            outs.append(lin)
            ins.append(lin[:1] if to_cell else lin)
    return PairBatch(Ragged.from_rows(outs), ins=(Ragged.from_rows(ins),))


def _payloads(shape: tuple[int, int], width: int, keep: float = 1.0, block: int = 1,
              seed: int = 0) -> PairBatch:
    rng = np.random.default_rng(seed)
    if block > 1:
        full = _blocks(shape, block)
        out = full.out
    else:
        lin = _grid(shape)
        if keep < 1.0:
            lin = np.sort(rng.choice(lin, max(1, int(len(lin) * keep)), replace=False))
        out = Ragged.from_singletons(lin)
    n = len(out)
    pay = rng.integers(0, 4, size=(n, width), dtype=np.uint8)  # few distinct payloads
    return PairBatch(out, payload=Ragged.from_dense(pay))


def synthetic_cases(quick: bool = False) -> list[tuple[str, tuple[int, int], PairBatch]]:
    """``(label, shape, pairs)`` covering the fan-in/fan-out space (full and payload)."""
    sizes = [(24, 24), (96, 96)] if quick else [(16, 16), (96, 96), (256, 256)]
    out = []
    for shape in sizes:
        tag = f"{shape[0]}x{shape[1]}"
        out += [
            (f"one-to-one {tag}", shape, _stencil(shape, 0)),
            (f"stencil3 {tag}", shape, _stencil(shape, 1)),
            (f"stencil7 {tag}", shape, _stencil(shape, 3)),
            (f"sparse stencil5 {tag}", shape, _stencil(shape, 2, keep=0.1)),
            (f"blocks4 {tag}", shape, _blocks(shape, 4)),
            (f"blocks16 {tag}", shape, _blocks(shape, 16)),
            (f"block8-to-cell {tag}", shape, _blocks(shape, 8, to_cell=True)),
            (f"payload1 {tag}", shape, _payloads(shape, 1)),
            (f"payload8 sparse {tag}", shape, _payloads(shape, 8, keep=0.1)),
            (f"payload16 blocks4 {tag}", shape, _payloads(shape, 16, block=4)),
            (f"payload32 {tag}", shape, _payloads(shape, 32, keep=0.5)),
        ]
    return out


def mode_stats(pairs: PairBatch) -> ModeStats:
    """The features' raw counts of one batch (as the statistics pass computes them)."""
    if pairs.is_payload:
        plen = pairs.payload.lengths.astype(np.float64)
        return ModeStats(pairs=len(pairs), out_cells=pairs.out_cells,
                         out_distinct=len(np.unique(pairs.out.values)),
                         payload_bytes=float(plen.sum()),
                         payload_cell_bytes=float((plen * pairs.out.lengths).sum()))
    return ModeStats(pairs=len(pairs), out_cells=pairs.out_cells, in_cells=pairs.in_cells,
                     out_distinct=len(np.unique(pairs.out.values)),
                     in_distinct=sum(len(np.unique(r.values)) for r in pairs.ins),
                     in_by_input=tuple(float(len(r.values)) for r in pairs.ins))


# ---------------------------------------------------------------------------------------
# writing shards
# ---------------------------------------------------------------------------------------


def write_shard(home: Path, strategy: Strategy, shape: tuple[int, int], pairs: PairBatch,
                chunk: int = 0) -> dict[str, Any]:
    """Write one shard as a run's task does; returns the sink's statistics + ``store_s``."""
    spec = layout.shard_spec(home, "r0", "calib", strategy, (chunk, 0), Box.full(shape), shape,
                             (shape,))
    t0 = time.perf_counter()
    stats = sink.write_shard(spec, pairs)
    stats["store_s"] = time.perf_counter() - t0
    return stats


def _nnls_fit(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on *relative* errors (every point counts alike)."""
    from scipy.optimize import nnls  # scipy only when fitting

    w = 1.0 / np.maximum(np.abs(y), 1e-12)
    Xw, yw = X * w[:, None], y * w
    scale = np.maximum(np.abs(Xw).max(axis=0), 1e-300)
    coef, _ = nnls(Xw / scale, yw)
    return coef / scale


def fit_encoders(rows: list[dict[str, Any]]) -> tuple[dict, dict]:
    """Coefficients per strategy and target, and the worst relative error of each fit."""
    enc: dict[str, dict[str, dict[str, float]]] = {}
    fit: dict[str, dict[str, float]] = {}
    for name in sorted({r["strategy"] for r in rows}):
        mine = [r for r in rows if r["strategy"] == name]
        X = np.array([[r["features"][f] for f in FEATURES] for r in mine], dtype=np.float64)
        enc[name], fit[name] = {}, {}
        for t in TARGETS:
            y = np.array([r[t] for r in mine], dtype=np.float64)
            if not np.any(y > 0):
                enc[name][t] = {}
                fit[name][t] = 0.0
                continue
            coef = _nnls_fit(X, y)
            enc[name][t] = {f: float(c) for f, c in zip(FEATURES, coef) if c > 0}
            pred = X @ coef
            fit[name][t] = float(np.max(np.abs(pred - y) / np.maximum(y, 1e-12)))
    return enc, fit


def fit_file_per_logical(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per strategy, the slope of file bytes (data + index) over logical bytes: what one
    more logical byte costs on disk once a shard is past its first pages."""
    out = {}
    for name in sorted({r["strategy"] for r in rows}):
        mine = [r for r in rows if r["strategy"] == name and r.get("logical_bytes", 0) > 0]
        if len(mine) < 2:
            continue
        X = np.array([[1.0, r["logical_bytes"]] for r in mine])
        y = np.array([r["data_bytes"] + r["index_bytes"] for r in mine])
        slope = float(_nnls_fit(X, y)[1])
        if slope > 0:
            out[name] = slope
    return out


def measure_encoders(scratch: Path, quick: bool = False, progress: Progress = None
                     ) -> list[dict[str, Any]]:
    """Write every synthetic case through every calibrated sink it applies to."""
    rows = []
    for k, (label, shape, pairs) in enumerate(synthetic_cases(quick)):
        ms = mode_stats(pairs)
        for name in ENCODED:
            s = Strategy.parse(name)
            if (s.mode is Mode.FULL) == pairs.is_payload:
                continue
            stats = write_shard(scratch, s, shape, pairs, chunk=k)
            rows.append({"strategy": name, "case": label, "features": features(ms, s, 1),
                         "data_bytes": float(stats.get("data_bytes", 0)),
                         "index_bytes": float(stats.get("index_bytes", 0)),
                         "logical_bytes": float(stats.get("logical_bytes", 0)),
                         "store_s": float(stats["store_s"]), "path": stats.get("path")})
        if progress:
            progress(f"  encoders: {label}")
    return rows


# ---------------------------------------------------------------------------------------
# query-time constants
# ---------------------------------------------------------------------------------------


def _median_time(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _bound(op: Any, shape: tuple[int, ...], n_inputs: int = 1) -> Any:
    return op.bind("calib", [shape] * n_inputs, [np.dtype("float64")] * n_inputs)


def measure_map(repeat: int) -> tuple[float, float]:
    """``map_fixed, map_per_cell`` from an elementwise and a stencil mapping function."""
    pts = []
    for shape in ((32, 32), (1024, 1024)):
        f = np.zeros(shape, dtype=bool)
        f[:: 7, :: 5] = True
        for op in (_bound(Affine(2.0, 1.0), shape), _bound(Convolve(np.ones((3, 3))), shape)):
            t = _median_time(lambda op=op, f=f: (op.map_b(f, 0), op.map_f(f, 0)), repeat) / 2
            pts.append((2 * f.size, t))
    X = np.array([[1.0, c] for c, _ in pts])
    y = np.array([t for _, t in pts])
    fixed, per = np.linalg.lstsq(X, y, rcond=None)[0]
    return max(float(fixed), 1e-6), max(float(per), 1e-12)


def measure_lookups(scratch: Path, repeat: int, progress: Progress = None) -> dict[str, float]:
    """Shard open, matched lookups by query size and fan-in, mismatched scans, payloads."""
    shape = (256, 256)
    rng = np.random.default_rng(1)
    shards = {}
    for label, pairs in (("one", _stencil(shape, 0)), ("fan49", _stencil(shape, 3)),
                         ("scattered8", _scattered(shape, 8))):
        shards[label] = write_shard(scratch / "lookups", FULL_ONE_BWD, shape,
                                    pairs, chunk=len(shards))["path"]
    pay_path = write_shard(scratch / "lookups", PAY_ONE_BWD, shape,
                           _payloads(shape, 1), chunk=9)["path"]
    many_path = write_shard(scratch / "lookups", FULL_MANY_BWD, shape,
                            _stencil(shape, 0), chunk=10)["path"]

    def lookup(path: str, q: np.ndarray) -> None:
        r = open_shard(path)
        try:
            r.backward(q, 0, None)
        finally:
            r.close()

    one_cell = np.array([12345], dtype=np.uint64)
    shard_fixed = _median_time(lambda: lookup(shards["one"], one_cell), repeat)  # + open
    reader = open_shard(shards["one"])
    try:  # the same lookup on a reader already open (queries keep theirs open)
        shard_cached = _median_time(lambda: reader.backward(one_cell, 0, None), repeat)
    finally:
        reader.close()
    n = 4000
    q = np.sort(rng.choice(shape[0] * shape[1], n, replace=False)).astype(np.uint64)
    t_one = _median_time(lambda: lookup(shards["one"], q), repeat)
    t_fan = _median_time(lambda: lookup(shards["fan49"], q), repeat)
    decode = max((t_fan - t_one) / (n * 48), 1e-10)
    lookup_per_cell = max((t_one - shard_fixed) / n - decode, 1e-9)

    def scan(label: str) -> float:
        def once() -> None:
            r = open_shard(shards[label])
            try:
                r.forward(q, 0, None)
            finally:
                r.close()
        return _median_time(once, repeat)

    # a mismatched scan: per pair (identity pairs share one relative set), then per cell
    # of distinct sets (8 scattered input cells per output cell, none shared)
    n_pairs = shape[0] * shape[1]
    scan_per_pair = max((scan("one") - shard_fixed) / n_pairs, 1e-10)
    scan_per_cell = max((scan("scattered8") - shard_fixed - n_pairs * scan_per_pair)
                        / (n_pairs * 9), 1e-10)
    # a FullMany/PayMany lookup probes an R-tree first: what that adds to the same lookup
    small = q[:100]
    t_many = _median_time(lambda: lookup(many_path, small), repeat)
    t_one_small = _median_time(lambda: lookup(shards["one"], small), repeat)
    rtree_fixed = max(t_many - t_one_small, 1e-5)

    def payload_groups() -> int:
        r = open_shard(pay_path)
        try:
            pairs = r.payload_pairs(q, None)
        finally:
            r.close()
        groups = group_by_payload(pairs)
        for payload, outs in groups:  # a typical map_p: cells -> mask -> small dilation
            m = np.zeros(shape, dtype=bool)
            m[tuple(to_coords(outs, shape).T)] = True
            dilate(m, int(payload[0]) if payload else 0)
        return len(groups)

    groups = payload_groups()
    t_pay = _median_time(payload_groups, repeat)
    payload_per_group = max((t_pay - shard_fixed - n * lookup_per_cell) / max(1, groups), 1e-7)
    if progress:
        progress("  query: lookups")
    return {"shard_fixed": min(shard_cached, shard_fixed),
            "shard_open": max(shard_fixed - shard_cached, 0.0),
            "lookup_per_cell": lookup_per_cell,
            "decode_per_cell": decode, "scan_per_pair": scan_per_pair,
            "scan_per_cell": scan_per_cell,
            "payload_per_group": payload_per_group, "rtree_fixed": rtree_fixed}


def _reexec_jobs(scratch: Path, shape: tuple[int, int], chunk: tuple[int, int], modes: Any,
                 reduce: Any = None) -> list[Any]:
    """Re-execution jobs of a 3x3 stencil over a stored random array (as the query
    executor makes them), without a workflow run."""
    path = scratch / "reexec" / f"in_{shape[0]}x{shape[1]}.zarr"
    if not path.exists():
        arrays.write_array(path, np.random.default_rng(2).normal(size=shape), chunk)
    op = _bound(Convolve(np.ones((3, 3)) / 9), shape)
    return make_jobs(scratch, "r0", op, [path], None, chunk_grid(shape, chunk), (),
                     frozenset(modes), collect=reduce is None, reduce=reduce)


def _count_join(ch: Any, full: Any, pay: Any) -> int:
    full = as_pairs(full)
    return 0 if full is None else int(len(np.unique(full.ins[0].values)))


def measure_reexec(scratch: Path, repeat: int, spark: Any = None) -> dict[str, float]:
    """Driver fixed cost, plain cost per cell, tracing factor, and (with Spark) the fixed
    cost of a task.

    The query executor scales an operator's *stage* time without lineage by
    ``trace_factor``, so with Spark the factor is traced re-execution on the driver over
    the plain stage of the same tasks on Spark; without Spark, over the plain tasks run on
    the driver (a larger, conservative factor).
    """
    shape, chunk = (1024, 512), (512, 512)
    plain = _reexec_jobs(scratch, shape, chunk, {Mode.BLACKBOX}, _count_join)
    traced = _reexec_jobs(scratch, shape, chunk, {Mode.FULL}, _count_join)
    run_jobs(plain, None)  # warm caches and imports
    t_plain = _median_time(lambda: run_jobs(plain, None), repeat)
    t_trace = _median_time(lambda: run_jobs(traced, None), repeat)
    tiny = _reexec_jobs(scratch, (4, 4), (4, 4), {Mode.FULL}, _count_join)
    t_tiny = _median_time(lambda: run_jobs(tiny, None), repeat * 3)
    out = {"reexec_fixed_driver": t_tiny, "trace_factor": max(1.0, t_trace / t_plain),
           "reexec_per_cell": t_plain / (shape[0] * shape[1])}
    if spark is not None:
        run_jobs(plain, spark)
        t_stage = _median_time(lambda: run_jobs(plain, spark), repeat)
        out["trace_factor"] = max(1.0, t_trace / t_stage)
        many = _reexec_jobs(scratch, (64, 64), (16, 16), {Mode.FULL}, _count_join)
        run_jobs(many, spark)
        t = _median_time(lambda: run_jobs(many, spark), repeat)
        # QueryCosts charges tasks * reexec_fixed_task / 2 (two tasks at once)
        out["reexec_fixed_task"] = 2.0 * t / len(many)
    return out


def measure_task_factor(scratch: Path, spark: Any, repeat: int) -> float:
    """Lineage work (tracing a 3x3 stencil and storing FullMany shards, as the executor
    does) in two concurrent Spark tasks, over the same tasks run one after the other on
    the driver: the statistics pass samples on the driver, runs happen in Spark tasks."""
    shape, chunk = (2048, 512), (1024, 512)
    path = scratch / "factor" / "in.zarr"
    arrays.write_array(path, np.random.default_rng(3).normal(size=shape), chunk)
    op = _bound(Convolve(np.ones((3, 3)) / 9), shape)
    jobs = make_jobs(scratch / "factor", "r0", op, [path], None, chunk_grid(shape, chunk),
                     [FULL_MANY_BWD], frozenset({Mode.FULL}))

    def work(where: Any) -> float:
        res = run_jobs(jobs, where)
        shutil.rmtree(scratch / "factor" / "runs", ignore_errors=True)
        return sum(r["run_s"] + r["store_s"] for r in res)

    work(None)
    work(spark)
    ratios = [work(spark) / work(None) for _ in range(repeat)]
    return float(min(4.0, max(1.0, statistics.median(ratios))))


def measure_query(scratch: Path, quick: bool = False, spark: Any = None,
                  progress: Progress = None) -> QueryCosts:
    repeat = 3 if quick else 7
    base = load_calibration().query
    vals: dict[str, float] = {}
    vals["map_fixed"], vals["map_per_cell"] = measure_map(repeat)
    if progress:
        progress("  query: mapping functions")
    vals.update(measure_lookups(scratch, repeat, progress))
    vals.update(measure_reexec(scratch, repeat, spark))
    if progress:
        progress("  query: re-execution")
    return replace(base, **vals)


# ---------------------------------------------------------------------------------------
# all of it
# ---------------------------------------------------------------------------------------


def calibrate(quick: bool = False, spark: bool | Any = True, progress: Progress = None,
              scratch: str | Path | None = None) -> Calibration:
    """Measure everything; returns a :class:`Calibration` (not saved)."""
    session = None
    if spark is True:
        try:
            session = get_spark("local[2]")
        except Exception:  # noqa: BLE001 - Spark is optional here
            session = None
    elif spark not in (False, None):
        session = spark
    current = load_calibration()
    tmp = Path(tempfile.mkdtemp(prefix="subzero-calibrate-", dir=scratch))
    t0 = time.perf_counter()
    try:
        meta: dict[str, Any] = {
            "source": "subzero calibrate" + (" --quick" if quick else ""),
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": {"python": platform.python_version(), "platform": platform.platform(),
                        "cpus": os.cpu_count()},
        }
        if progress:
            progress("writing synthetic shards through the encoders' sinks")
        rows = measure_encoders(tmp / "encoders", quick, progress)
        coefficients, fit = fit_encoders(rows)
        per_logical = fit_file_per_logical(rows)
        meta["fit"] = fit
        meta["points"] = len(rows)
        if progress:
            progress("timing query-time access methods")
        query = measure_query(tmp, quick, session, progress)
        factor = current.task_factor
        if session is not None:
            factor = measure_task_factor(tmp, session, 3 if quick else 5)
            if progress:
                progress(f"  runtime: Spark tasks x{factor:.2f} the driver")
        meta["seconds"] = round(time.perf_counter() - t0, 1)
        return Calibration(coefficients, query, meta, factor, per_logical)
    except ImportError as e:
        raise CalibrationError(f"calibration needs {e.name}: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
