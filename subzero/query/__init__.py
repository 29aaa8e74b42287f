"""Lineage queries: walk operator paths with frontiers (paper IV, VI-C, VII-A).

==========================  ==============================================================
module                      holds
==========================  ==============================================================
``query.executor``          :class:`QueryExecutor`: the walk, one step per operator input
``query.paths``             checked paths, and the steps of every path between two arrays
``query.choice``            the query-time optimizer: the cheapest method per step
``query.costs``             its cost constants (calibrated per machine)
``query.stored``            reading stored lineage: open shards, unions, payloads
``query.reexec``            re-execution in tracing mode on touched tiles: the tile rule
``query.results``           :class:`LineageResult`, its steps and global dependencies
==========================  ==============================================================

>>> qx = QueryExecutor(load_run(home, "latest"))                    # doctest: +SKIP
>>> qx.backward([(10, 20)], start="bright", to="image").count       # doctest: +SKIP
"""

from subzero.query.executor import QueryExecutor
from subzero.query.results import GlobalDependency, LineageResult, Step

__all__ = ["QueryExecutor", "LineageResult", "Step", "GlobalDependency"]
