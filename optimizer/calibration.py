"""Calibrated constants of the cost model, and the linear size/time model of each encoding.

The storage cost of a strategy is modelled as a linear function of a few *features* of the
lineage it stores, with one coefficient vector per encoding and direction, fitted on this
machine by :mod:`optimizer.calibrate` (``subzero calibrate``) from real shards written
through the registered sinks:

================  ==========================================================================
feature           meaning
================  ==========================================================================
``shard``         one per shard (an LMDB environment, its pages, the R-tree files)
``pair``          region pairs (hash entries of the *Many encodings, R-tree rectangles)
``key``           key-side cell incidences (backward: output cells; forward: input cells)
``key_distinct``  distinct key cells (the hash entries of the *One encodings)
``value``         value-side incidences (backward: input cells; forward: output cells;
                  payload encodings: payload bytes, once per pair)
``payload_dup``   payload bytes times output cells (PayOne stores a copy per cell)
================  ==========================================================================

Three targets are modelled: ``data_bytes`` and ``index_bytes`` (what the sinks report, i.e.
what the executor's disk budget counts) and ``store_s`` (task seconds spent in the sink).

The file ``optimizer/calibration.json`` holds ``{"encoders": {strategy: {target: {feature:
coefficient}}}, "query": {QueryCosts fields}, ...}``; the ``query`` part is the lead's
:class:`optimizer.query_costs.QueryCosts`. Missing parts fall back to :data:`DEFAULTS`.

>>> cal = Calibration.default()
>>> f = {"shard": 1, "pair": 100, "key": 100, "key_distinct": 100, "value": 900,
...      "payload_dup": 0}
>>> cal.predict("full-one-bwd", "data_bytes", f) > 0
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from optimizer.query_costs import CALIBRATION_FILE, QueryCosts
from subzero.errors import SubZeroError
from subzero.modes import Mode, Strategy

FEATURES = ("shard", "pair", "key", "key_distinct", "value", "payload_dup")
TARGETS = ("data_bytes", "index_bytes", "store_s")
#: the strategies whose sinks are calibrated (comp-* use the pay-* sinks: same encodings)
ENCODED = ("full-one-bwd", "full-one-fwd", "full-many-bwd", "full-many-fwd", "pay-one-bwd",
           "pay-many-bwd")

DEFAULT_FILE_PER_LOGICAL = 1.3  # B-tree and R-tree pages about 3/4 full

# Rough values for an LMDB store with 8-byte keys, used until `subzero calibrate` has run.
_ONE_STORE = {"shard": 2e-3, "pair": 2e-7, "key": 4e-7, "key_distinct": 4e-7, "value": 3e-8}
_MANY_STORE = {"shard": 3e-3, "pair": 3e-6, "key": 3e-8, "value": 3e-8}
DEFAULTS: dict[str, dict[str, dict[str, float]]] = {
    "full-one-bwd": {"data_bytes": {"shard": 32768, "pair": 24, "key_distinct": 24, "value": 8},
                     "index_bytes": {}, "store_s": _ONE_STORE},
    "full-one-fwd": {"data_bytes": {"shard": 32768, "pair": 24, "key_distinct": 24, "key": 8,
                                    "value": 8},
                     "index_bytes": {}, "store_s": _ONE_STORE},
    "full-many-bwd": {"data_bytes": {"shard": 32768, "pair": 48, "key": 8, "value": 8},
                      "index_bytes": {"shard": 16384, "pair": 48}, "store_s": _MANY_STORE},
    "full-many-fwd": {"data_bytes": {"shard": 32768, "pair": 48, "key": 8, "value": 8},
                      "index_bytes": {"shard": 16384, "pair": 48}, "store_s": _MANY_STORE},
    "pay-one-bwd": {"data_bytes": {"shard": 32768, "key_distinct": 24, "payload_dup": 1},
                    "index_bytes": {}, "store_s": _ONE_STORE},
    "pay-many-bwd": {"data_bytes": {"shard": 32768, "pair": 48, "key": 8, "value": 1},
                     "index_bytes": {"shard": 16384, "pair": 48}, "store_s": _MANY_STORE},
}


class CalibrationError(SubZeroError):
    """A calibration file that cannot be read or a calibration that cannot run."""


def model_key(strategy: Strategy | str) -> str:
    """The calibrated sink a strategy writes through (``comp-one-bwd`` -> ``pay-one-bwd``).

    >>> model_key("comp-many-bwd")
    'pay-many-bwd'
    """
    s = Strategy.parse(strategy)
    if not s.stored:
        raise CalibrationError(f"strategy {s.name} stores nothing and has no size model")
    if s.mode is Mode.COMP:
        s = Strategy(Mode.PAY, s.encoding, s.direction)
    return s.name


@dataclass
class Calibration:
    """Coefficients per encoded strategy and target, plus the query-time constants."""

    encoders: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    query: QueryCosts = field(default_factory=QueryCosts)
    meta: dict[str, Any] = field(default_factory=dict)
    #: lineage work (tracing, encoding) in concurrent Spark tasks over the same work run
    #: alone on the driver, where the statistics pass samples it
    task_factor: float = 1.0
    #: file bytes per logical byte (keys, values, R-tree entries) as shards grow, per
    #: encoded strategy: how a probe too small to fill a page scales
    file_per_logical: dict[str, float] = field(default_factory=dict)

    def logical_factor(self, strategy: Strategy | str) -> float:
        return float(self.file_per_logical.get(model_key(strategy), DEFAULT_FILE_PER_LOGICAL))

    @classmethod
    def default(cls) -> "Calibration":
        return cls({k: {t: dict(c) for t, c in v.items()} for k, v in DEFAULTS.items()},
                   QueryCosts(), {"source": "defaults"})

    def coefficients(self, strategy: Strategy | str, target: str) -> dict[str, float]:
        key = model_key(strategy)
        got = self.encoders.get(key, {}).get(target)
        return got if got is not None else DEFAULTS[key][target]

    def predict(self, strategy: Strategy | str, target: str,
                features: Mapping[str, float]) -> float:
        """The linear model: sum of coefficient times feature."""
        coef = self.coefficients(strategy, target)
        return float(sum(coef.get(f, 0.0) * float(features.get(f, 0.0)) for f in FEATURES))

    # -- files ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"version": 1, **self.meta, "encoders": self.encoders,
                "file_per_logical": self.file_per_logical,
                "runtime": {"task_factor": self.task_factor}, "query": self.query.to_json()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Calibration":
        base = cls.default()
        enc = {k: {t: dict(c) for t, c in v.items()} for k, v in base.encoders.items()}
        for k, v in (doc.get("encoders") or {}).items():
            if k in enc and isinstance(v, Mapping):
                for t, c in v.items():
                    if t in TARGETS and isinstance(c, Mapping):
                        enc[k][t] = {f: float(x) for f, x in c.items() if f in FEATURES}
        query = QueryCosts.from_json(doc["query"]) if isinstance(doc.get("query"), Mapping) \
            else QueryCosts()
        meta = {k: v for k, v in doc.items()
                if k not in ("encoders", "query", "version", "runtime", "file_per_logical")}
        factor = float((doc.get("runtime") or {}).get("task_factor", 1.0))
        per_logical = {k: float(v) for k, v in (doc.get("file_per_logical") or {}).items()
                       if k in ENCODED and float(v) > 0}
        return cls(enc, query, meta, factor if factor > 0 else 1.0, per_logical)

    def save(self, path: str | Path = CALIBRATION_FILE) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")
        return p


def load_calibration(path: str | Path | None = None) -> Calibration:
    """The calibration file (default ``optimizer/calibration.json``), else the defaults.

    A file given explicitly must exist and parse; the default file may be absent.
    """
    p = Path(path) if path else CALIBRATION_FILE
    if not p.exists():
        if path:
            raise CalibrationError(f"calibration file {p} does not exist")
        return Calibration.default()
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise CalibrationError(f"calibration file {p} is not valid JSON ({e})") from None
    if not isinstance(doc, Mapping):
        raise CalibrationError(f"calibration file {p} must hold a JSON object")
    try:
        return Calibration.from_json(doc)
    except (TypeError, ValueError) as e:
        raise CalibrationError(f"calibration file {p}: {e}; expected numbers "
                               "(`subzero calibrate` rewrites it)") from None
