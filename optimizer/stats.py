"""Per-operator statistics the cost model needs, from the catalog and a cheap sampling pass.

Every run records per operator its stage time with and without lineage capture
(``op_stats``) and, per stored strategy and chunk, the real bytes and encode time of its
shards (``shards``). What no run records for an operator that never stored lineage is the
*shape* of its lineage in each mode: how many region pairs, how many cells on each side,
how many distinct ones, how many payload bytes, and what capturing them costs.
:func:`statistics_pass` estimates those by re-executing the operator (nothing is written)
on a few spread-out output tiles in each supported mode, and extrapolates by the fraction
of output cells sampled. The estimates are kept in the catalog's ``statistics`` table under
``(run, op, MODE)``, so the pass runs once per run.

:func:`load_profiles` assembles one :class:`OpProfile` per operator: the sampled mode
statistics, the run's timings, and what earlier runs of the same workflow measured for
strategies they stored (real bytes beat any model).

>>> ms = ModeStats(pairs=10, out_cells=10, in_cells=90, out_distinct=10, in_distinct=30)
>>> ms.fanin, ms.scaled(2.0).pairs
(9.0, 20.0)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from encoders.sink import write_shard
from subzero.cells import Box, size_of
from subzero.chunking import chunk_grid
from subzero.engine import layout
from subzero.engine.catalog import Catalog
from subzero.engine.homeconfig import open_catalog
from subzero.engine.reexec import reexecute
from subzero.engine.runs import load_run
from subzero.errors import CatalogError
from subzero.lineage import BoxedPairs, PairBatch, as_pairs
from subzero.modes import Mode, Strategy
from subzero.query.reexec import tile_shape
from subzero.runtime import ChunkContext

#: the modes whose lineage shape is sampled (BLACKBOX is sampled as the timing baseline)
SAMPLED_MODES = (Mode.FULL, Mode.PAY, Mode.COMP)
SAMPLE_CELLS = 1 << 14  # output cells per sampled tile
SAMPLE_TILES = 3
SPARSE_PAIRS = 64  # fewer sampled pairs than this: sample 8 times as many tiles
_STAT_KEYS = ("pairs", "out_cells", "in_cells", "out_distinct", "in_distinct", "payload_bytes",
              "payload_cell_bytes", "capture_task_s")


@dataclass(frozen=True)
class ModeStats:
    """The lineage one operator produces in one mode, over its whole output (extrapolated).

    Counts are floats because they are estimates. ``in_cells``/``in_distinct`` add up over
    all inputs; ``in_by_input`` splits ``in_cells`` per input. ``capture_task_s`` is the
    task time capturing this mode adds to the operator (kernel tracing plus ``lwrite``),
    summed over tasks.
    """

    pairs: float = 0.0
    out_cells: float = 0.0
    in_cells: float = 0.0
    out_distinct: float = 0.0
    in_distinct: float = 0.0
    payload_bytes: float = 0.0
    payload_cell_bytes: float = 0.0
    capture_task_s: float = 0.0
    in_by_input: tuple[float, ...] = ()

    @property
    def fanin(self) -> float:
        """Input cells per output cell (all inputs)."""
        return self.in_cells / self.out_cells if self.out_cells else 0.0

    def scaled(self, k: float) -> "ModeStats":
        vals = {f.name: getattr(self, f.name) * k for f in fields(self)
                if f.name not in ("in_by_input",)}
        return ModeStats(**vals, in_by_input=tuple(v * k for v in self.in_by_input))

    def to_row(self) -> dict[str, float]:
        row = {k: float(getattr(self, k)) for k in _STAT_KEYS}
        row.update({f"in_cells_{i}": float(v) for i, v in enumerate(self.in_by_input)})
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, float]) -> "ModeStats":
        by_input = []
        while f"in_cells_{len(by_input)}" in row:
            by_input.append(float(row[f"in_cells_{len(by_input)}"]))
        return cls(**{k: float(row.get(k, 0.0)) for k in _STAT_KEYS}, in_by_input=tuple(by_input))


@dataclass(frozen=True)
class Measured:
    """What an earlier run measured for one stored strategy of an operator."""

    run: str
    disk: float  # data + index bytes over all shards
    store_task_s: float  # encode seconds summed over shards
    shards: int


@dataclass(frozen=True)
class OpProfile:
    """Everything the cost model knows about one operator.

    ``runtime_s`` is the stage wall time without lineage capture; ``task_s`` the task
    seconds it summed to; ``parallel`` how many of those ran at once (tasks over cores), so
    that task seconds of lineage overhead become wall seconds.
    """

    name: str
    kind: str
    supported: frozenset[Mode]
    out_shape: tuple[int, ...]
    in_shapes: tuple[tuple[int, ...], ...]
    chunks: tuple[int, ...]
    tasks: int
    runtime_s: float
    task_s: float
    parallel: float
    global_: bool = False
    modes: dict[Mode, ModeStats] = field(default_factory=dict)
    measured: dict[str, Measured] = field(default_factory=dict)
    probes: dict[str, "Probe"] = field(default_factory=dict)
    #: seconds per output cell that queries measured when they re-executed this operator
    #: on the driver (None: never observed; the cost model estimates it)
    reexec_s_per_cell: float | None = None
    #: whether a query maps a step's payloads in one call (``Operator.batches_payloads``)
    batch_payloads: bool = False

    @property
    def out_size(self) -> int:
        return int(np.prod(self.out_shape, dtype=np.int64))

    @property
    def in_sizes(self) -> tuple[int, ...]:
        return tuple(int(np.prod(s, dtype=np.int64)) for s in self.in_shapes)

    def supports(self, s: Strategy) -> bool:
        return s.mode is Mode.BLACKBOX or s.mode in self.supported

    def with_modes(self, modes: Mapping[Mode, ModeStats]) -> "OpProfile":
        return replace(self, modes={**self.modes, **modes})


# ---------------------------------------------------------------------------------------
# the sampling pass
# ---------------------------------------------------------------------------------------


def _probe(ch: ChunkContext, pairs: PairBatch | BoxedPairs | None,
           probe: tuple[str, str, tuple[str, ...]]) -> dict[str, list[float]]:
    """Write the tile's pairs through each strategy's sink into a scratch home, keep the
    bytes and seconds it reports, and delete the shard."""
    scratch, op_name, names = probe
    out: dict[str, list[float]] = {}
    for name in names:
        spec = layout.shard_spec(Path(scratch), "probe", op_name, Strategy.parse(name),
                                 ch.index, ch.out_box, ch.out_shape, ch.in_shapes)
        t0 = time.perf_counter()
        st = write_shard(spec, pairs)
        store_s = time.perf_counter() - t0
        if st.get("path"):
            shutil.rmtree(st["path"], ignore_errors=True)
        out[name] = [float(st.get("data_bytes", 0) + st.get("index_bytes", 0)), store_s,
                     float(st.get("logical_bytes", 0))]
    return out


def _tile_stats(ch: ChunkContext, full: PairBatch | BoxedPairs | None, pay: PairBatch | None,
                probe: tuple[str, str, tuple[str, ...]] | None = None) -> dict:
    """Reduce one re-executed tile's pairs to counts inside its task (module level: shipped
    to Spark by reference; nothing large travels back). With ``probe`` also encode them
    through the real sinks (:func:`_probe`)."""
    d: dict[str, Any] = {"cells": int(ch.out_box.size)}
    if probe is not None:  # as a run stores them: boxes unexpanded where they are
        strategies = [Strategy.parse(n) for n in probe[2]]
        d["probe"] = _probe(ch, full if strategies and strategies[0].mode is Mode.FULL else pay,
                            probe)
    full = as_pairs(full)
    if full is not None and len(full):
        d["full"] = {
            "pairs": len(full), "out_cells": full.out_cells, "in_cells": full.in_cells,
            "out_distinct": int(len(np.unique(full.out.values))),
            "in_distinct": int(sum(len(np.unique(r.values)) for r in full.ins)),
            "in_by_input": [int(len(r.values)) for r in full.ins],
        }
    if pay is not None and len(pay):
        plen = pay.payload.lengths.astype(np.float64)
        d["pay"] = {
            "pairs": len(pay), "out_cells": pay.out_cells,
            "out_distinct": int(len(np.unique(pay.out.values))),
            "payload_bytes": float(plen.sum()),
            "payload_cell_bytes": float((plen * pay.out.lengths).sum()),
        }
    return d


def sample_boxes(out_shape: Sequence[int], chunks: Sequence[int], tiles: int = SAMPLE_TILES,
                 cells: int = SAMPLE_CELLS) -> list[Box]:
    """Up to ``tiles`` output tiles of at most ``cells`` cells, spread evenly over the array
    (each inside one chunk, so a tile's halo looks like a real task's).

    >>> [str(b) for b in sample_boxes((100, 10), (50, 10), tiles=2, cells=100)]
    ['0:7,0:10', '91:98,0:10']
    """
    tile = tile_shape([max(1, min(int(c), int(s))) for c, s in zip(chunks, out_shape)], cells)
    grid = chunk_grid(out_shape, tile)
    whole = [g for g in grid if g[1].size == size_of(tile)]
    grid = whole or grid  # ragged edge tiles would under-represent a tile's halo share
    if len(grid) <= tiles:
        return [b for _, b in grid]
    picks = np.unique(np.linspace(0, len(grid) - 1, tiles).round().astype(int))
    return [grid[k][1] for k in picks]


def _measure(run: Any, op_name: str, boxes: Sequence[Box] | None, mode: Mode,
             repeat: int, probe: tuple | None = None) -> tuple[list[dict], float]:
    """Re-run in ``mode`` on the boxes; the tile results and the least kernel time seen
    (the last repeat probes the sinks, so probing never counts as kernel time)."""
    best, results = float("inf"), []
    for k in range(repeat):
        reduce = partial(_tile_stats, probe=probe) if probe and k == repeat - 1 else _tile_stats
        results = reexecute(run, op_name, boxes=boxes, modes=frozenset({mode}),
                            reduce=reduce, where="driver")
        best = min(best, sum(r["run_s"] for r in results))
    return [r["result"] for r in results], best


#: the strategies each sampled mode feeds, probed through their sinks
PROBED = {Mode.FULL: ("full-one-bwd", "full-many-bwd", "full-compact-bwd", "full-one-fwd",
                      "full-many-fwd", "full-compact-fwd"),
          Mode.PAY: ("pay-one-bwd", "pay-many-bwd"), Mode.COMP: ("comp-one-bwd",
                                                                 "comp-many-bwd")}


@dataclass(frozen=True)
class Probe:
    """Real bytes and seconds of storing the sampled tiles with one strategy."""

    bytes: float
    store_task_s: float
    shards: int
    cells: float  # output cells the probed tiles cover
    logical: float = 0.0  # what the shards hold before page overheads (0: unknown)


def sample_operator(run: Any, op_name: str, tiles: int = SAMPLE_TILES,
                    cells: int = SAMPLE_CELLS, repeat: int = 2, probe: bool = True
                    ) -> tuple[dict[Mode, ModeStats], dict[str, Probe]]:
    """Estimate the lineage of ``op_name`` in every sampled mode it supports by
    re-executing it (on the driver, nothing written to the run) on a few tiles, then
    scaling up by the fraction of output cells sampled. Capture time is the kernel time in
    the mode minus the kernel time in black box on the same tiles. With ``probe`` the
    tiles' pairs are also written through each strategy's real sink into a scratch
    directory (then deleted), which measures the encodings on this operator's own
    lineage (its compressibility is what a size model can only guess)."""
    op = run.op(op_name)
    modes = [m for m in SAMPLED_MODES if m in op.supported_modes()]
    if not modes:
        return {}, {}
    global_ = op.parallelism.kind == "global"
    boxes = None if global_ else sample_boxes(op.out_shape, run.chunks(op_name), tiles, cells)
    _, base_s = _measure(run, op_name, boxes, Mode.BLACKBOX, repeat)
    out: dict[Mode, ModeStats] = {}
    probes: dict[str, Probe] = {}
    scratch = tempfile.mkdtemp(prefix="subzero-probe-") if probe else None
    try:
        for mode in modes:
            spec = (scratch, op_name, PROBED[mode]) if scratch else None
            res, run_s = _measure(run, op_name, boxes, mode, repeat, spec)
            mode_base = base_s
            part = "full" if mode is Mode.FULL else "pay"
            if boxes is not None and sum(r.get(part, {}).get("pairs", 0) for r in res) < \
                    SPARSE_PAIRS:
                # sparse lineage (cosmic rays, stars): a few tiles may miss it; look wider
                wider = sample_boxes(op.out_shape, run.chunks(op_name), tiles * 8, cells)
                if len(wider) > len(boxes):
                    res, run_s = _measure(run, op_name, wider, mode, repeat, spec)
                    _, mode_base = _measure(run, op_name, wider, Mode.BLACKBOX, repeat)
            sampled = sum(r["cells"] for r in res)
            for name in PROBED[mode]:
                got = [r["probe"][name] for r in res if name in r.get("probe", {})]
                if got:
                    probes[name] = Probe(sum(g[0] for g in got), sum(g[1] for g in got),
                                         len(got), float(sampled),
                                         sum(g[2] if len(g) > 2 else 0.0 for g in got))
            out[mode] = _mode_from_tiles(op, mode, res, run_s - mode_base)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return out, probes


def _mode_from_tiles(op: Any, mode: Mode, res: list[dict], capture_s: float) -> ModeStats:
    """Add up the sampled tiles' counts and scale them to the whole output."""
    sampled = sum(r["cells"] for r in res)
    k = int(np.prod(op.out_shape, dtype=np.int64)) / max(1, sampled)
    part = "full" if mode is Mode.FULL else "pay"
    acc: dict[str, float] = {}
    by_input = np.zeros(len(op.in_shapes))
    for r in res:
        for key, v in r.get(part, {}).items():
            if key == "in_by_input":
                by_input += np.asarray(v, dtype=np.float64)
            else:
                acc[key] = acc.get(key, 0.0) + float(v)
    ms = ModeStats(**acc, capture_task_s=max(0.0, capture_s),
                   in_by_input=tuple(float(v) for v in by_input) if part == "full" else ())
    return ms.scaled(k)


def statistics_pass(home: Any, rid: str, ops: Sequence[str] | None = None,
                    force: bool = False, catalog: Catalog | None = None, probe: str = "udf",
                    **kw: Any) -> dict[str, dict[Mode, ModeStats]]:
    """Sample every operator of run ``rid`` that has no mode statistics yet (or all of
    ``ops`` with ``force``) and record the estimates in the catalog. Returns what it
    sampled. Needs the run's arrays; writes no lineage.

    ``probe`` says which operators also get their sampled lineage written through the real
    sinks: ``"udf"`` (default) those without mapping functions, the only ones the optimizer
    stores lineage for unless pinned; ``"all"``; or ``"none"``.
    """
    if probe not in ("udf", "all", "none"):
        raise ValueError(f"probe must be 'udf', 'all' or 'none'. Got {probe!r}.")
    cat = catalog or open_catalog(layout.resolve_home(home))
    try:
        run = load_run(home, rid, catalog=cat)
        have = _stored_modes(cat, run.id)
        todo = [n for n in (ops or run.workflow.order) if force or n not in have]
        done: dict[str, dict[Mode, ModeStats]] = {}
        for name in todo:
            t0 = time.perf_counter()
            wanted = probe == "all" or (
                probe == "udf" and Mode.MAP not in run.op(name).supported_modes())
            got, probes = sample_operator(run, name, probe=wanted, **kw)
            for mode, ms in got.items():
                cat.set_statistics(run.id, name, mode.value, ms.to_row())
            for sname, pr in probes.items():
                cat.set_statistics(run.id, name, sname, {
                    "probe_bytes": pr.bytes, "probe_store_s": pr.store_task_s,
                    "probe_shards": pr.shards, "probe_cells": pr.cells,
                    "probe_logical": pr.logical})
            # a marker row, so operators with nothing to sample are not sampled again
            cat.set_statistics(run.id, name, "BLACKBOX",
                               {"sampled": 1.0, "sample_s": time.perf_counter() - t0})
            done[name] = got
        return done
    finally:
        if catalog is None:
            cat.close()


def _stored_modes(cat: Catalog, rid: str) -> dict[str, dict[Mode, dict[str, float]]]:
    """``{op: {mode: {key: value}}}`` of the mode statistics recorded for a run."""
    out: dict[str, dict[Mode, dict[str, float]]] = {}
    for r in cat.statistics(rid):
        if r["strategy"] in Mode.__members__:
            out.setdefault(r["op"], {}).setdefault(Mode(r["strategy"]), {})[r["key"]] = r["value"]
    return out


def _stored_probes(cat: Catalog, rid: str) -> dict[str, dict[str, Probe]]:
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for r in cat.statistics(rid):
        if r["key"].startswith("probe_"):
            rows.setdefault((r["op"], r["strategy"]), {})[r["key"]] = r["value"]
    out: dict[str, dict[str, Probe]] = {}
    for (op, sname), v in rows.items():
        out.setdefault(op, {})[sname] = Probe(v.get("probe_bytes", 0.0),
                                              v.get("probe_store_s", 0.0),
                                              int(v.get("probe_shards", 1)),
                                              v.get("probe_cells", 1.0),
                                              v.get("probe_logical", 0.0))
    return out


# ---------------------------------------------------------------------------------------
# profiles from the catalog
# ---------------------------------------------------------------------------------------


def _same_shapes(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(n in b and tuple(b[n]["shape"]) == tuple(v["shape"]) for n, v in a.items())


def measured_strategies(cat: Catalog, rid: str) -> dict[str, dict[str, Measured]]:
    """Per operator and stored strategy, the newest measurement by any complete run of the
    same workflow with the same array shapes as ``rid`` (``{op: {strategy: Measured}}``)."""
    info = cat.run(rid)
    arrays = cat.arrays(rid)
    out: dict[str, dict[str, Measured]] = {}
    for r in reversed(cat.runs()):
        if r["workflow"] != info["workflow"] or r["status"] != "complete":
            continue
        if r["id"] != rid and not _same_shapes(arrays, cat.arrays(r["id"])):
            continue
        ops = cat.operators(r["id"])
        acc: dict[tuple[str, str], list[float]] = {}
        for s in cat.shards(r["id"]):
            if s["strategy"] not in ops.get(s["op"], {}).get("strategies", []):
                continue  # dropped over a budget
            a = acc.setdefault((s["op"], s["strategy"]), [0.0, 0.0, 0])
            a[0] += (s["data_bytes"] or 0) + (s["index_bytes"] or 0)
            a[1] += s["encode_s"] or 0.0
            a[2] += 1
        for (op, strat), (disk, enc, n) in acc.items():
            out.setdefault(op, {}).setdefault(strat, Measured(r["id"], disk, enc, int(n)))
    return out


def load_profiles(home: Any, rid: str, sample: bool = True, catalog: Catalog | None = None,
                  cpus: int | None = None) -> dict[str, OpProfile]:
    """One :class:`OpProfile` per operator of run ``rid`` (workflow order), running the
    statistics pass first for operators never sampled (``sample=False`` skips it; then
    only measured strategies have sizes)."""
    cat = catalog or open_catalog(layout.resolve_home(home))
    try:
        run = load_run(home, rid, catalog=cat)
        if sample:
            statistics_pass(home, run.id, catalog=cat)
        stats = cat.op_stats(run.id)
        base_runs = _baseline_runtimes(cat, run.id)
        modes = _stored_modes(cat, run.id)
        probes = _stored_probes(cat, run.id)
        measured = measured_strategies(cat, run.id)
        observed = _observed_reexec(cat, run.id)
        cores = cpus or _cores(run.info)
        out: dict[str, OpProfile] = {}
        for name in run.workflow.order:
            op = run.op(name)
            st = stats.get(name)
            if st is None:
                raise CatalogError(f"run {run.id} has no statistics for operator {name!r}")
            tasks = int(st["tasks"] or 1)
            task_s = float(st["task_s"] or 0.0)
            lineage = float(st["capture_s"] or 0.0) + float(st["store_s"] or 0.0)
            out[name] = OpProfile(
                name=name, kind=op.kind, supported=frozenset(op.supported_modes()),
                out_shape=tuple(op.out_shape), in_shapes=tuple(op.in_shapes),
                chunks=run.chunks(name), tasks=tasks,
                runtime_s=base_runs.get(name, float(st["runtime_nolineage_s"]
                                                    or st["runtime_s"] or 0.0)),
                task_s=max(0.0, task_s - lineage), parallel=float(max(1, min(tasks, cores))),
                global_=op.parallelism.kind == "global",
                modes={m: ModeStats.from_row(v) for m, v in modes.get(name, {}).items()
                       if m is not Mode.BLACKBOX},
                measured=measured.get(name, {}), probes=probes.get(name, {}),
                reexec_s_per_cell=observed.get(name),
                batch_payloads=op.batches_payloads(),
            )
        return out
    finally:
        if catalog is None:
            cat.close()


def _observed_reexec(cat: Catalog, rid: str) -> dict[str, float]:
    """Per operator, the re-execution cost (seconds per output cell) that queries measured
    on the complete runs of the same workflow and shapes, the run's own first."""
    info, arrays = cat.run(rid), cat.arrays(rid)
    rows = [r for r in cat.statistics() if r["strategy"] == "reexec" and r["key"] == "s_per_cell"]
    by_run: dict[str, dict[str, float]] = {}
    for r in rows:
        by_run.setdefault(r["run"], {})[r["op"]] = float(r["value"])
    out: dict[str, float] = {}
    others = [x for x in cat.runs() if x["id"] != rid and x["status"] == "complete"
              and x["workflow"] == info["workflow"] and x["id"] in by_run
              and _same_shapes(cat.arrays(x["id"]), arrays)]
    for x in sorted(others, key=lambda x: x["seq"]):  # newer runs overwrite older ones
        out.update(by_run[x["id"]])
    out.update(by_run.get(rid, {}))
    return out


def _baseline_runtimes(cat: Catalog, rid: str) -> dict[str, float]:
    """Per operator, the median stage time over the complete runs of the same workflow and
    shapes in which it stored nothing (stage times on a shared machine are noisy; runs
    that stored lineage are left out because their kernel time includes tracing)."""
    info, arrays = cat.run(rid), cat.arrays(rid)
    times: dict[str, list[float]] = {}
    for r in cat.runs():
        if r["workflow"] != info["workflow"] or r["status"] != "complete":
            continue
        if r["id"] != rid and not _same_shapes(arrays, cat.arrays(r["id"])):
            continue
        ops = cat.operators(r["id"])
        for op, st in cat.op_stats(r["id"]).items():
            strategies = ops.get(op, {}).get("strategies", [])
            if st["runtime_s"] is not None and not any(
                    Strategy.parse(s).stored for s in strategies):
                times.setdefault(op, []).append(float(st["runtime_s"]))
    return {op: float(np.median(v)) for op, v in times.items() if v}


def _cores(info: Mapping[str, Any]) -> int:
    """Cores the run's Spark master had (local[N] / local[*]), else this machine's."""
    master = str(info.get("master") or "")
    if master.startswith("local[") and master.endswith("]"):
        n = master[6:-1]
        if n.isdigit():
            return max(1, int(n))
    return os.cpu_count() or 1
