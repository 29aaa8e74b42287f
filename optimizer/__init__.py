"""The strategy optimizer (paper VII): statistics, cost model, workload, ILP and plans.

========================  ===============================================================
module                    holds
========================  ===============================================================
``optimizer.stats``       per-operator statistics; the sampling pass (nothing stored)
``optimizer.calibration`` calibrated constants and the encoders' size/time model
``optimizer.calibrate``   ``subzero calibrate``: measuring them on this machine
``optimizer.costs``       disk, runtime overhead and query cost per strategy
``optimizer.workload``    query log / sample queries -> traversal probabilities
``optimizer.ilp``         the ILP on PuLP + CBC
``optimizer.plan``        the pipeline: :func:`optimize`, :func:`plan_from_catalog`
``optimizer.query_costs`` the query executor's per-step cost constants
``optimizer.cli``         ``subzero optimize`` and ``subzero calibrate``
========================  ===============================================================

Names are re-exported lazily: the query executor imports ``optimizer.query_costs`` on every
query and must not pay for PuLP.

>>> from optimizer import optimize, solve    # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "optimize": "optimizer.plan", "plan_from_catalog": "optimizer.plan",
    "PlanResult": "optimizer.plan", "CostModel": "optimizer.costs",
    "Workload": "optimizer.workload", "solve": "optimizer.ilp",
    "Calibration": "optimizer.calibration", "load_calibration": "optimizer.calibration",
    "load_profiles": "optimizer.stats", "statistics_pass": "optimizer.stats",
}

__all__ = ["Calibration", "CostModel", "PlanResult", "Workload", "load_calibration",
           "load_profiles", "optimize", "plan_from_catalog", "solve", "statistics_pass"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'optimizer' has no attribute {name!r}")
