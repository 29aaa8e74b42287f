"""The query workload: how often each operator is traversed backward and forward, and with
how many frontier cells (paper VII: ``p_i``, from a sample workload).

Two sources:

- the catalog's **query log** (:func:`from_query_log`): every logged query of the workflow
  counts once; each step it took is a traversal of that operator in that direction with
  the frontier size the step actually saw;
- a **JSON file** of sample queries with weights (:func:`from_file`)::

      {"queries": [
        {"direction": "backward", "from": "bright", "to": "image", "cells": 10, "weight": 3},
        {"direction": "forward", "path": [["calibrate", 0], ["smooth", 0]],
         "box": "0:10,0:10"},
        {"named": "BQ0", "weight": 2}
      ]}

  ``cells`` is a count or a list of coordinates, ``box`` a half-open box; ``named`` is one
  of the workflow's named queries (needs a finished run for its cells). Frontier sizes
  after the first step are propagated with the operators' sampled fan-in and fan-out.

:class:`Workload` normalizes weights to one per query, so an operator's weight in a
direction is the expected number of traversals per query (its ``p_i``).

>>> w = Workload({("f", "backward"): [(1.0, 10)]}, 2.0, "example")
>>> w.p("f", "backward"), w.p("f", "forward"), w.sizes("f", "backward")
(0.5, 0.0, [(0.5, 10)])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from optimizer.costs import BACKWARD, DIRECTIONS
from optimizer.stats import OpProfile
from subzero.cells import Box
from subzero.engine.runs import LoadedRun
from subzero.errors import QueryError, SubZeroError
from subzero.frontier import start_frontier
from subzero.jsonio import TooDeepError, loads_limited
from subzero.modes import Mode
from subzero.query.paths import dag_steps

DEFAULT_QUERY_CELLS = 10


class WorkloadError(SubZeroError):
    """A workload file or query that cannot be used."""


@dataclass
class Workload:
    """Traversals per ``(operator, direction)``: ``[(weight, frontier cells), ...]``, and
    the total query weight they are normalized by."""

    traversals: dict[tuple[str, str], list[tuple[float, float]]] = field(default_factory=dict)
    total: float = 0.0
    source: str = ""

    def add(self, op: str, direction: str, weight: float, n: float) -> None:
        self.traversals.setdefault((op, direction), []).append((float(weight), float(n)))

    def p(self, op: str, direction: str) -> float:
        """Expected traversals of ``op`` in ``direction`` per query."""
        if self.total <= 0:
            return 0.0
        return sum(w for w, _ in self.traversals.get((op, direction), [])) / self.total

    def sizes(self, op: str, direction: str) -> list[tuple[float, float]]:
        """``[(weight per query, n)]`` of the traversals of ``op`` in ``direction``."""
        if self.total <= 0:
            return []
        return [(w / self.total, n) for w, n in self.traversals.get((op, direction), [])]

    @property
    def empty(self) -> bool:
        return not self.traversals

    def to_json(self) -> dict[str, Any]:
        ops = sorted({o for o, _ in self.traversals})
        return {"source": self.source, "queries": self.total,
                "operators": {o: {d: round(self.p(o, d), 6) for d in DIRECTIONS} for o in ops}}


def everything(ops: Sequence[str], n: float = DEFAULT_QUERY_CELLS) -> Workload:
    """The workload assumed when none is known: every operator queried once each way."""
    w = Workload(total=1.0, source=f"none known: every operator once each way, {n:g} cells")
    for o in ops:
        for d in DIRECTIONS:
            w.add(o, d, 1.0, n)
    return w


def from_query_log(cat: Any, workflow: str, ops: Sequence[str] | None = None) -> Workload:
    """Every logged query of runs of ``workflow``: one unit of weight each."""
    runs = {r["id"] for r in cat.runs() if r["workflow"] == workflow}
    w = Workload(source="query log")
    known = set(ops) if ops is not None else None
    for q in cat.query_log():
        if q["run"] not in runs:
            continue
        w.total += 1.0
        steps = q.get("steps") or []
        if steps:
            for s in steps:
                if known is None or s["operator"] in known:
                    w.add(s["operator"], q["direction"], 1.0, max(1, s.get("in_count") or 1))
        else:  # no per-step figures: the path with the query's start size
            for op, _ in q["path"]:
                if known is None or op in known:
                    w.add(op, q["direction"], 1.0, max(1, q.get("in_count") or 1))
    w.source = f"query log ({int(w.total)} queries)"
    return w


# ---------------------------------------------------------------------------------------
# sample queries from a file
# ---------------------------------------------------------------------------------------


def _step_fanout(prof: OpProfile | None, i: int, backward: bool) -> float:
    """Cells one frontier cell reaches through input ``i`` of an operator (sampled FULL
    lineage; 1 when unknown, as for elementwise operators)."""
    if prof is None:
        return 1.0
    ms = prof.modes.get(Mode.FULL)
    if ms is None or not ms.pairs or not ms.out_cells:
        return 1.0
    in_i = ms.in_by_input[i] if i < len(ms.in_by_input) else ms.in_cells / max(1, len(
        prof.in_shapes))
    if backward:
        return max(in_i / ms.out_distinct if ms.out_distinct else 1.0, 0.0)
    # forward: pairs an input cell is in, times output cells per pair
    distinct_i = ms.in_distinct / max(1, len(prof.in_shapes))
    return max((in_i / max(1.0, distinct_i)) * (ms.out_cells / ms.pairs), 0.0)


def parse_weight(value: Any, k: int) -> float:
    """The weight of sample query ``k`` (1-based): a finite number >= 0. A NaN or infinite
    weight would make every expected query cost NaN or infinite, and the plan meaningless.

    >>> parse_weight(2, 1), parse_weight("0.5", 2)
    (2.0, 0.5)
    >>> parse_weight(float("nan"), 3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    optimizer.workload.WorkloadError: query 3: weight must be a finite, non-negative number...
    """
    try:
        weight = float(value)
    except (TypeError, ValueError):
        raise WorkloadError(f"query {k}: weight must be a number. Got {value!r}.") from None
    if isinstance(value, bool) or not math.isfinite(weight) or weight < 0:
        raise WorkloadError(f"query {k}: weight must be a finite, non-negative number. "
                            f"Got {value!r}.")
    return weight


def _count_cells(q: Mapping[str, Any], shape: Sequence[int], k: int) -> float:
    if "cells" in q:
        c = q["cells"]
        if isinstance(c, (int, float)) and not isinstance(c, bool):
            if not math.isfinite(c):
                raise WorkloadError(f"query {k}: 'cells' must be a finite count or a list of "
                                    f"cells. Got {c!r}.")
            return float(max(1, min(int(c), int(np.prod(shape)))))
        if isinstance(c, list):
            return float(max(1, len(c)))
        raise WorkloadError(f"query {k}: 'cells' must be a count or a list of cells. "
                            f"Got {c!r}.")
    if "box" in q:
        return float(max(1, Box.parse(str(q["box"]), shape).size))
    return float(DEFAULT_QUERY_CELLS)


def _propagate(wf: Any, direction: str, start: str, steps: Sequence[tuple[str, int]],
               n0: float, profiles: Mapping[str, OpProfile]) -> list[tuple[str, float]]:
    """Frontier size at each step (union over branches bounded by array sizes)."""
    backward = direction == BACKWARD
    front: dict[str, float] = {start: n0}
    out = []
    for op, i in steps:
        src = wf.nodes[op].inputs[i]
        here, there = (op, src) if backward else (src, op)
        n = front.get(here, 0.0)
        if n <= 0:
            continue
        out.append((op, n))
        reach = n * _step_fanout(profiles.get(op), i, backward)
        cap = float(np.prod(wf.array_shape(there)))
        front[there] = min(cap, front.get(there, 0.0) + max(1.0, reach))
    return out


def from_queries(queries: Sequence[Mapping[str, Any]], wf: Any,
                 profiles: Mapping[str, OpProfile] | None = None, run: LoadedRun | None = None,
                 source: str = "sample queries") -> Workload:
    """A workload from sample queries (the JSON file's ``queries`` list)."""
    profiles = profiles or {}
    w = Workload(source=source)
    for k, q in enumerate(queries, 1):
        if not isinstance(q, Mapping):
            raise WorkloadError(f"query {k} must be a JSON object. Got {q!r}.")
        weight = parse_weight(q.get("weight", 1.0), k)
        q = dict(q)
        if "named" in q:
            nq = wf.queries.get(q["named"])
            if nq is None:
                raise WorkloadError(f"query {k}: workflow {wf.name!r} has no named query "
                                    f"{q['named']!r} (named: {', '.join(wf.queries) or 'none'})")
            q.update(direction=nq.direction, **{"from": nq.start})
            if nq.path:
                q["path"] = [list(s) for s in nq.path]
            else:
                q["to"] = nq.to
            if "cells" not in q and run is not None:
                q["cells"] = start_frontier(wf.array_shape(nq.start), nq.cells(run)).n
        direction = q.get("direction")
        if direction not in DIRECTIONS:
            raise WorkloadError(f"query {k}: direction must be 'backward' or 'forward'. "
                                f"Got {direction!r}.")
        if "path" in q:
            try:
                steps = [(str(o), int(i)) for o, i in q["path"]]
            except (TypeError, ValueError):
                raise WorkloadError(f"query {k}: path must be [[operator, input], ...]. "
                                    f"Got {q['path']!r}.") from None
            for o, i in steps:
                if o not in wf.nodes or not 0 <= i < len(wf.nodes[o].inputs):
                    raise WorkloadError(f"query {k}: no input {i} of operator {o!r} in "
                                        f"workflow {wf.name!r}")
            o0, i0 = steps[0]
            start = q.get("from") or (o0 if direction == BACKWARD else wf.nodes[o0].inputs[i0])
        else:
            start, target = q.get("from"), q.get("to")
            for what, name in (("from", start), ("to", target)):
                if name not in wf.inputs and name not in wf.nodes:
                    raise WorkloadError(f"query {k}: '{what}' must name an array of workflow "
                                        f"{wf.name!r}. Got {name!r}.")
            try:
                steps = dag_steps(wf, direction, start, target)
            except QueryError:
                raise WorkloadError(f"no {direction} path from {start!r} to {target!r} in "
                                    f"workflow {wf.name!r}") from None
        if start not in wf.inputs and start not in wf.nodes:
            raise WorkloadError(f"query {k}: unknown start array {start!r}")
        n0 = _count_cells(q, wf.array_shape(start), k)
        w.total += weight
        for op, n in _propagate(wf, direction, start, steps, n0, profiles):
            w.add(op, direction, weight, n)
    if not math.isfinite(w.total):  # finite weights whose sum overflows
        raise WorkloadError(f"the query weights add up to {w.total}; expected weights whose "
                            "sum is a finite number (scale them down)")
    return w


def from_file(path: str | Path, wf: Any, profiles: Mapping[str, OpProfile] | None = None,
              run: LoadedRun | None = None) -> Workload:
    """Read a workload file (``{"queries": [...]}`` or a bare list)."""
    p = Path(path)
    try:
        doc = loads_limited(p.read_text())
    except FileNotFoundError:
        raise WorkloadError(f"workload file {p} does not exist") from None
    except TooDeepError as e:
        raise WorkloadError(f"workload file {p}: its lists and objects are {e}") from None
    except (OSError, ValueError) as e:
        raise WorkloadError(f"workload file {p} is not valid JSON ({e})") from None
    queries = doc.get("queries") if isinstance(doc, Mapping) else doc
    if not isinstance(queries, list) or not queries:
        raise WorkloadError(f"workload file {p}: expected {{\"queries\": [...]}} with at least "
                            "one query")
    return from_queries(queries, wf, profiles, run, source=f"file {p.name}")
