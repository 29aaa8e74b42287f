"""The size and time model of the encodings: one linear function of a few lineage features.

What a strategy's shards cost is modelled as a linear function of a few *features* of the
lineage they store, with one coefficient vector per encoded strategy and target.
:data:`DEFAULTS` are rough values for an LMDB store with 8-byte keys; ``subzero calibrate``
(:mod:`optimizer.calibrate`) fits the coefficients on this machine from real shards written
through the sinks, and :mod:`optimizer.calibration` keeps them.

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
Composite strategies write through the payload sinks, so ``comp-*`` uses the ``pay-*``
coefficients (:func:`model_key`).

>>> from types import SimpleNamespace
>>> st = SimpleNamespace(pairs=100, out_cells=100, in_cells=900, out_distinct=100,
...                      in_distinct=900, payload_bytes=0.0, payload_cell_bytes=0.0)
>>> f = features(st, "full-one-bwd", shards=1)
>>> f["key"], f["value"]
(100, 900)
>>> predict(None, "full-one-bwd", "data_bytes", f)
44768.0
"""

from __future__ import annotations

from typing import Any, Mapping

from subzero.errors import ModeError
from subzero.modes import Direction, Mode, Strategy

FEATURES = ("shard", "pair", "key", "key_distinct", "value", "payload_dup")
TARGETS = ("data_bytes", "index_bytes", "store_s")
#: the strategies whose sinks are modelled (comp-* use the pay-* sinks: same encodings)
ENCODED = ("full-one-bwd", "full-one-fwd", "full-many-bwd", "full-many-fwd",
           "full-compact-bwd", "full-compact-fwd", "pay-one-bwd", "pay-many-bwd")

DEFAULT_FILE_PER_LOGICAL = 1.3  # B-tree and R-tree pages about 3/4 full

# Rough values for an LMDB store with 8-byte keys, used until `subzero calibrate` has run.
_ONE_STORE = {"shard": 2e-3, "pair": 2e-7, "key": 4e-7, "key_distinct": 4e-7, "value": 3e-8}
_MANY_STORE = {"shard": 3e-3, "pair": 3e-6, "key": 3e-8, "value": 3e-8}
# FullCompact tokenizes the key cells' patterns to find groups before it writes
_COMPACT_STORE = {"shard": 2e-3, "pair": 2e-7, "key": 8e-7, "key_distinct": 8e-7, "value": 1e-7}
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
    # FullCompact: FullOne's bytes as the bound (a shard whose patterns save nothing is
    # FullOne's layout); what regular lineage saves shows in the optimizer's probes
    "full-compact-bwd": {"data_bytes": {"shard": 32768, "pair": 24, "key_distinct": 24,
                                        "value": 8},
                         "index_bytes": {}, "store_s": _COMPACT_STORE},
    "full-compact-fwd": {"data_bytes": {"shard": 32768, "pair": 24, "key_distinct": 24,
                                        "key": 8, "value": 8},
                         "index_bytes": {}, "store_s": _COMPACT_STORE},
    "pay-one-bwd": {"data_bytes": {"shard": 32768, "key_distinct": 24, "payload_dup": 1},
                    "index_bytes": {}, "store_s": _ONE_STORE},
    "pay-many-bwd": {"data_bytes": {"shard": 32768, "pair": 48, "key": 8, "value": 1},
                     "index_bytes": {"shard": 16384, "pair": 48}, "store_s": _MANY_STORE},
}

#: coefficients per encoded strategy, target and feature (the shape of :data:`DEFAULTS`)
Coefficients = Mapping[str, Mapping[str, Mapping[str, float]]]


def model_key(strategy: Strategy | str) -> str:
    """The modelled sink a strategy writes through (``comp-one-bwd`` -> ``pay-one-bwd``);
    :class:`~subzero.errors.ModeError` for strategies that store nothing.

    >>> model_key("comp-many-bwd")
    'pay-many-bwd'
    """
    s = Strategy.parse(strategy)
    if not s.stored:
        raise ModeError(f"strategy {s.name} stores nothing and has no size model")
    if s.mode is Mode.COMP:
        s = Strategy(Mode.PAY, s.encoding, s.direction)
    return s.name


def features(stats: Any, strategy: Strategy | str, shards: float) -> dict[str, float]:
    """The features of storing ``stats`` with ``strategy`` in ``shards`` shards.

    ``stats`` has the counts of the lineage over the shards (floats: they may be estimates):
    ``pairs``, ``out_cells`` and ``in_cells`` (cell incidences over all pairs, every input
    added up), ``out_distinct`` and ``in_distinct`` (distinct cells), ``payload_bytes``
    (over all pairs) and ``payload_cell_bytes`` (each pair's payload bytes times its output
    cells), like :class:`optimizer.stats.ModeStats`.
    """
    s = Strategy.parse(strategy)
    if s.mode is Mode.FULL:
        fwd = s.direction is Direction.FORWARD
        return {"shard": shards, "pair": stats.pairs,
                "key": stats.in_cells if fwd else stats.out_cells,
                "key_distinct": stats.in_distinct if fwd else stats.out_distinct,
                "value": stats.out_cells if fwd else stats.in_cells, "payload_dup": 0.0}
    return {"shard": shards, "pair": stats.pairs, "key": stats.out_cells,
            "key_distinct": stats.out_distinct, "value": stats.payload_bytes,
            "payload_dup": stats.payload_cell_bytes}


def coefficients(table: Coefficients | None, strategy: Strategy | str,
                 target: str) -> Mapping[str, float]:
    """The coefficients of ``strategy`` (its :func:`model_key`) and ``target`` in ``table``,
    else the :data:`DEFAULTS`."""
    key = model_key(strategy)
    got = (table or {}).get(key, {}).get(target)
    return got if got is not None else DEFAULTS[key][target]


def predict(table: Coefficients | None, strategy: Strategy | str, target: str,
            features: Mapping[str, float]) -> float:
    """The linear model: the sum of coefficient times feature, with the coefficients of
    ``table`` (None: the :data:`DEFAULTS`)."""
    coef = coefficients(table, strategy, target)
    return float(sum(coef.get(f, 0.0) * float(features.get(f, 0.0)) for f in FEATURES))


def disk_bytes(table: Coefficients | None, strategy: Strategy | str,
               features: Mapping[str, float]) -> float:
    """Predicted bytes on disk: ``data_bytes`` (LMDB) plus ``index_bytes`` (R-trees)."""
    return (predict(table, strategy, "data_bytes", features)
            + predict(table, strategy, "index_bytes", features))


__all__ = ["FEATURES", "TARGETS", "ENCODED", "DEFAULTS", "DEFAULT_FILE_PER_LOGICAL",
           "Coefficients", "model_key", "features", "coefficients", "predict", "disk_bytes"]
