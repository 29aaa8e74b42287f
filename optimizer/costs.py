"""The cost model: per operator and candidate strategy, predicted disk, runtime overhead, and
backward and forward query cost as a function of query size (paper VII).

- **disk** (bytes): what an earlier run of the same workflow measured for the strategy if
  one stored it; else what the statistics pass measured writing the sampled tiles through
  the strategy's real sink (a *probe*), scaled to the whole output; else the calibrated
  linear model of the sink (:mod:`optimizer.calibration`) applied to the operator's
  sampled lineage, split into one shard per task.
- **runtime overhead** (wall seconds added to the operator's stage): capturing the mode
  (sampled kernel time in the mode minus black box) plus storing each strategy (measured
  encode time, else the calibrated model), task seconds divided by the tasks that run at
  once (encode time: measured, probed or modelled like disk). Capture is shared by
  strategies of one mode, so it is reported apart.
- **query cost** (seconds for one query step of ``n`` frontier cells): the query executor's
  own estimates (:class:`subzero.query.costs.QueryCosts`, the constants it uses to choose
  an access method), so the optimizer plans with the numbers the executor will act on.
  Re-execution is always available at query time, so no strategy is ever charged more than
  re-executing (the executor switches).

Strategies come in as :class:`~subzero.modes.Strategy` values: names are parsed where they
enter (pins, plan files, the catalog), not here.

>>> from optimizer.stats import ModeStats, OpProfile, Probe
>>> from subzero.modes import FULL_ONE_BWD, Mode
>>> prof = OpProfile("f", "udf", frozenset({Mode.FULL}), (100, 100), ((100, 100),),
...                  (50, 100), 2, 1.0, 1.5, 2.0,
...                  modes={Mode.FULL: ModeStats(1e4, 1e4, 9e4, 1e4, 1e4, 0, 0, 0.2)})
>>> cm = CostModel()
>>> cm.disk(prof, FULL_ONE_BWD) > 0
True
>>> # capture: 0.2 task-seconds over 2 cores, times this machine's measured task factor
>>> round(cm.capture_s(prof, Mode.FULL) / cm.calibration.task_factor, 3)
0.1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence


from encoders.registry import encoding_class
from encoders.sizes import features
from optimizer.calibration import Calibration, load_calibration
from optimizer.stats import ModeStats, OpProfile, Probe
from subzero.modes import BLACKBOX, MAP, Direction, Mode, Strategy
from subzero.query.costs import QueryCosts
from subzero.query.reexec import expected_tiles

BACKWARD, FORWARD = "backward", "forward"
DIRECTIONS = (BACKWARD, FORWARD)


def mode_of(s: Strategy) -> Mode:
    """The capture mode a strategy feeds from."""
    return s.mode


def direction_of(s: Strategy) -> str | None:
    """``"backward"``/``"forward"`` for stored strategies (payloads are backward-keyed),
    None for map and black box."""
    if not s.stored:
        return None
    return FORWARD if s.direction is Direction.FORWARD else BACKWARD


@dataclass(frozen=True)
class Estimate:
    """The model's figures for one (operator, strategy)."""

    strategy: str
    disk: float  # bytes
    capture_s: float  # wall seconds of capturing its mode (shared within a mode)
    store_s: float  # wall seconds of encoding and writing its shards
    source: str  # "measured", "model", or "none" (stores nothing)

    @property
    def overhead_s(self) -> float:
        return self.capture_s + self.store_s


class CostModel:
    """Predictions for every candidate strategy of an operator.

    Parameters
    ----------
    calibration : the calibrated constants (default: ``subzero/query/calibration.json``).
    query : query-time constants (default: the calibration's ``query`` part).
    """

    def __init__(self, calibration: Calibration | None = None,
                 query: QueryCosts | None = None) -> None:
        self.calibration = calibration or load_calibration()
        self.query = query or self.calibration.query

    # -- disk and runtime ------------------------------------------------------------------
    def _mode_stats(self, prof: OpProfile, s: Strategy) -> ModeStats | None:
        return prof.modes.get(mode_of(s))

    def disk(self, prof: OpProfile, s: Strategy) -> float:
        if not s.stored:
            return 0.0
        m = prof.measured.get(s.name)
        if m is not None:
            return float(m.disk)
        pr = prof.probes.get(s.name)
        if pr is not None:
            fixed = (self.calibration.predict(s, "data_bytes", {"shard": 1})
                     + self.calibration.predict(s, "index_bytes", {"shard": 1}))
            if pr.logical > 0 and (encoding_class(s.encoding).many
                                   or pr.bytes <= 1.5 * pr.shards * fixed):
                # few or compact entries (grouped per-cell lineage, sparse lineage) may
                # not fill the probe's first pages, so its file bytes hide how the shards
                # grow: scale what it holds, at this machine's file bytes per logical byte
                grown = pr.logical * prof.out_size / max(1.0, pr.cells)
                return prof.tasks * fixed + self.calibration.logical_factor(s) * grown
            return self._scale_probe(prof, pr, pr.bytes, fixed)
        ms = self._mode_stats(prof, s)
        if ms is None or ms.pairs == 0:
            # no lineage in this mode (or never sampled): only the empty shards
            ms = ModeStats()
        f = features(ms, s, prof.tasks)
        return (self.calibration.predict(s, "data_bytes", f)
                + self.calibration.predict(s, "index_bytes", f))

    @staticmethod
    def _scale_probe(prof: OpProfile, pr: Probe, total: float, per_shard: float) -> float:
        """A probe's figure for the whole operator: the calibrated per-shard part once per
        task, the rest in proportion to the output cells (the probed tiles hold
        ``pr.cells``). Sparse lineage may leave probed tiles (nearly) empty, smaller than
        any real shard: then only the per-shard part remains."""
        rest = max(0.0, total - pr.shards * per_shard)
        return prof.tasks * per_shard + rest * prof.out_size / max(1.0, pr.cells)

    def capture_s(self, prof: OpProfile, mode: Mode) -> float:
        """Wall seconds capturing ``mode`` adds to the operator's stage."""
        ms = prof.modes.get(mode)
        if ms is None:
            return 0.0
        # sampled alone on the driver; the run's tasks share cores and memory
        return ms.capture_task_s * self.calibration.task_factor / max(1.0, prof.parallel)

    def store_s(self, prof: OpProfile, s: Strategy) -> float:
        if not s.stored:
            return 0.0
        m = prof.measured.get(s.name)
        pr = prof.probes.get(s.name)
        if m is not None:
            task_s = m.store_task_s
        elif pr is not None:
            fixed = self.calibration.predict(s, "store_s", {"shard": 1})
            task_s = self._scale_probe(prof, pr, pr.store_task_s, fixed)
            task_s *= self.calibration.task_factor
        else:
            ms = self._mode_stats(prof, s) or ModeStats()
            task_s = self.calibration.predict(s, "store_s", features(ms, s, prof.tasks))
            task_s *= self.calibration.task_factor
        return task_s / max(1.0, prof.parallel)

    def estimate(self, prof: OpProfile, s: Strategy) -> Estimate:
        if not s.stored:
            return Estimate(s.name, 0.0, 0.0, 0.0, "none")
        source = ("measured" if s.name in prof.measured
                  else "probe" if s.name in prof.probes else "model")
        return Estimate(s.name, self.disk(prof, s), self.capture_s(prof, s.mode),
                        self.store_s(prof, s), source)

    def runtime_with(self, prof: OpProfile, strategies: Sequence[Strategy]) -> float:
        """Predicted stage wall time of the operator storing ``strategies``."""
        modes = {s.mode for s in strategies if s.stored}
        return (prof.runtime_s + sum(self.capture_s(prof, m) for m in modes)
                + sum(self.store_s(prof, s) for s in strategies))

    # -- queries ---------------------------------------------------------------------------
    def reexec_cost(self, prof: OpProfile, n: float) -> float:
        """Re-executing the tiles ``n`` frontier cells touch: what queries measured per cell
        when they did it before, else estimated from the operator's runtime."""
        tiles, cells = expected_tiles(prof.out_shape, prof.chunks, prof.tasks, prof.global_, n)
        # a runtime of 0 is one the statistics did not measure
        return self.query.reexec_cost(prof.runtime_s or None, prof.out_size, cells, tiles,
                                      on_spark=False, s_per_cell=prof.reexec_s_per_cell)

    def query_cost(self, prof: OpProfile, s: Strategy, direction: str, n: float) -> float:
        """Seconds for one query step of ``n`` frontier cells through the operator with
        strategy ``s`` available (never more than re-executing, which is always possible)."""
        c = self.query
        reexec = self.reexec_cost(prof, n)
        if s == BLACKBOX:
            return reexec
        in_size = sum(prof.in_sizes) / max(1, len(prof.in_sizes))
        if s == MAP:
            return min(reexec, c.map_cost(int(in_size), prof.out_size))
        ms = self._mode_stats(prof, s) or ModeStats()
        backward = direction == BACKWARD
        payload = s.mode in (Mode.PAY, Mode.COMP)
        matched = (payload and backward) or (
            s.direction is (Direction.BACKWARD if backward else Direction.FORWARD))
        in_cells = ms.in_cells / max(1, len(prof.in_shapes))  # one input per query step
        key_space = prof.out_size if backward else int(in_size)
        cost = c.stored_cost(matched, payload, not backward, int(n), max(1, prof.tasks),
                             int(ms.pairs), int(ms.out_cells), int(in_cells),
                             groups=1 if payload and prof.batch_payloads else None,
                             many=encoding_class(s.encoding).many, key_space=key_space)
        if s.mode is Mode.COMP:
            cost += c.map_cost(int(in_size), prof.out_size)
        return min(reexec, cost)

    def expected_query_cost(self, prof: OpProfile, strategy: Strategy, direction: str,
                            sizes: Sequence[tuple[float, float]]) -> float:
        """Weighted mean of :meth:`query_cost` over ``[(weight, n), ...]``."""
        tot = sum(w for w, _ in sizes)
        if tot <= 0:
            return 0.0
        return sum(w * self.query_cost(prof, strategy, direction, n) for w, n in sizes) / tot


def summarize(model: CostModel, prof: OpProfile, strategies: Sequence[Strategy],
              sizes: Mapping[str, Sequence[tuple[float, float]]]) -> dict[str, float]:
    """Predicted figures of an operator storing ``strategies``: disk, runtime overhead and
    the expected query cost per direction (the best of its strategies and re-execution)."""
    ss = list(strategies)
    modes = {s.mode for s in ss if s.stored}
    out = {
        "disk": sum(model.disk(prof, s) for s in ss),
        "overhead_s": sum(model.capture_s(prof, m) for m in modes)
        + sum(model.store_s(prof, s) for s in ss),
        "runtime_s": model.runtime_with(prof, ss),
    }
    for d in DIRECTIONS:
        sz = sizes.get(d) or []
        out[f"q_{d}"] = min(model.expected_query_cost(prof, s, d, sz) for s in [*ss, BLACKBOX])
    return out
