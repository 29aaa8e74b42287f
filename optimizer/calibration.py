"""Calibrated constants of the cost model: the coefficients of the encodings' size/time
model and the query-time constants.

The storage cost of a strategy is the one linear size/time model of the encodings
(:mod:`encoders.sizes`: its features, targets and default coefficients), with one
coefficient vector per encoded strategy and target fitted on this machine by
:mod:`optimizer.calibrate` (``subzero calibrate``) from real shards written through the
registered sinks. :class:`Calibration` holds the fitted coefficients and predicts with them.

The file ``subzero/query/calibration.json`` holds ``{"encoders": {strategy: {target: {feature:
coefficient}}}, "query": {QueryCosts fields}, ...}``; the ``query`` part is the lead's
:class:`subzero.query.costs.QueryCosts`. Missing parts fall back to the defaults
(:data:`encoders.sizes.DEFAULTS`).

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

from encoders import sizes
from encoders.sizes import DEFAULT_FILE_PER_LOGICAL, DEFAULTS, ENCODED, FEATURES, TARGETS
from subzero.errors import SubZeroError
from subzero.jsonio import TooDeepError, loads_limited
from subzero.modes import Strategy
from subzero.query.costs import CALIBRATION_FILE, QueryCosts


class CalibrationError(SubZeroError):
    """A calibration file that cannot be read or a calibration that cannot run."""


def model_key(strategy: Strategy | str) -> str:
    """The calibrated sink a strategy writes through (``comp-one-bwd`` -> ``pay-one-bwd``):
    :func:`encoders.sizes.model_key`, raising :class:`CalibrationError` for strategies that
    store nothing.

    >>> model_key("comp-many-bwd")
    'pay-many-bwd'
    """
    s = Strategy.parse(strategy)
    if not s.stored:
        raise CalibrationError(f"strategy {s.name} stores nothing and has no size model")
    return sizes.model_key(s)


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
        """This machine's coefficients, else :data:`encoders.sizes.DEFAULTS`."""
        return sizes.coefficients(self.encoders, model_key(strategy), target)

    def predict(self, strategy: Strategy | str, target: str,
                features: Mapping[str, float]) -> float:
        """The linear model (:func:`encoders.sizes.predict`) with these coefficients."""
        return sizes.predict(self.encoders, model_key(strategy), target, features)

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
    """The calibration file (default ``subzero/query/calibration.json``), else the defaults.

    A file given explicitly must exist and parse; the default file may be absent.
    """
    p = Path(path) if path else CALIBRATION_FILE
    if not p.exists():
        if path:
            raise CalibrationError(f"calibration file {p} does not exist")
        return Calibration.default()
    try:
        doc = loads_limited(p.read_text())
    except TooDeepError as e:
        raise CalibrationError(f"calibration file {p}: its lists and objects are {e}") from None
    except (OSError, ValueError) as e:
        raise CalibrationError(f"calibration file {p} is not valid JSON ({e})") from None
    if not isinstance(doc, Mapping):
        raise CalibrationError(f"calibration file {p} must hold a JSON object")
    try:
        return Calibration.from_json(doc)
    except (TypeError, ValueError) as e:
        raise CalibrationError(f"calibration file {p}: {e}; expected numbers "
                               "(`subzero calibrate` rewrites it)") from None
