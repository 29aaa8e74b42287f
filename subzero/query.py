"""Lineage queries: walk operator paths with boolean frontiers (paper IV, VI-C, VII-A).

A query starts from cells of one array and follows a *path*, a list of ``(operator, input
index)`` steps as in the paper, or every path of the DAG to a target array (``to=``; paths
are unioned). Each step maps a frontier (a numpy bool array with the array's shape) through
one operator, using the cheapest access method the run has for it:

``map``
    the operator's vectorized mapping function (nothing stored);
``stored:<strategy>``
    lineage read from its shards: Full lineage in either direction (a mismatched direction
    scans, and is costed accordingly), Pay lineage (``map_p`` on the payloads; forward
    queries scan every payload), Comp lineage (the mapping default, overridden by the
    payload result for cells that stored a payload);
``reexec``
    the operator re-executed in tracing mode (``modes={FULL}``) on the tiles the frontier
    touches only (backward: output tiles holding frontier cells; forward: tiles whose input
    window holds frontier cells), joining the traced pairs with the frontier inside the task;
``entire-array``
    the frontier is full and the operator's ``all_to_all(i)`` says the result is full too.

Before each step the query-time optimizer estimates every available method's cost
(:mod:`optimizer.query_costs`) and runs the cheapest; while reading stored lineage it
switches to re-execution once the reading has cost more than re-execution is estimated to,
which bounds the worst case at about twice the black-box cost. Empty frontiers end a query
early; a step stops reading shards once its result is full. Every query is logged in the
catalog (the optimizer's workload).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Sequence

import numpy as np

from encoders.base import LookupTimeout
from subzero.engine.catalog import Catalog
from subzero.cells import Box, as_linear, size_of, to_coords, unique
from subzero.frontier import Frontier, start_frontier
from subzero.errors import CellError, QueryError
from subzero.engine.runs import LoadedRun
from subzero.engine.reexec import reexecute
from subzero.modes import Direction, Mode, Strategy
from subzero.runtime import ChunkContext
from subzero.lineage import PairBatch

METHODS = ("auto", "map", "stored", "reexec")
MAX_JSON_CELLS = 10_000

# re-execution goes to Spark only when the driver would need longer than this
SPARK_REEXEC_MIN_S = 1.0
# the statistics row (strategy column) of observed re-execution costs
REEXEC_KEY = "reexec"

# One reader per shard for the whole process: LMDB refuses to open an environment twice in
# one process, and a finished run's shards never change, so executors share them.
_READERS: dict[str, Any] = {}
_OPENED = [0]  # readers opened so far (unopened-shard counts are redone when it grows)


@dataclass
class Step:
    """What one query step did."""

    operator: str
    input: int
    method: str
    in_count: int
    out_count: int
    elapsed_s: float
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        d = {"operator": self.operator, "input": self.input, "method": self.method,
             "in_count": self.in_count, "out_count": self.out_count, "elapsed_s": self.elapsed_s}
        if self.note:
            d["note"] = self.note
        return d


@dataclass
class LineageResult:
    """A query's answer: the frontier reached in the target array, and how."""

    run: str
    direction: str
    array: str
    shape: tuple[int, ...]
    mask: np.ndarray
    steps: list[Step] = field(default_factory=list)
    elapsed_s: float = 0.0
    start: str = ""
    known_count: int | None = field(default=None, repr=False, compare=False)

    @property
    def count(self) -> int:
        if self.known_count is None:
            self.known_count = int(np.count_nonzero(self.mask))
        return self.known_count

    @property
    def coords(self) -> np.ndarray:
        """The result cells as an ``(n, ndim)`` int64 array, C order."""
        return np.argwhere(self.mask).astype(np.int64)

    @property
    def linear(self) -> np.ndarray:
        return np.flatnonzero(self.mask).astype(np.uint64)

    def to_json(self, max_cells: int = MAX_JSON_CELLS) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "run": self.run, "direction": self.direction, "array": self.array,
            "shape": list(self.shape), "count": self.count, "elapsed_s": self.elapsed_s,
            "steps": [s.to_json() for s in self.steps],
        }
        if self.count <= max_cells:
            doc["cells"] = self.coords.tolist()
        return doc


# ---------------------------------------------------------------------------------------
# in-task joins for re-execution (module level: shipped to Spark by reference)
# ---------------------------------------------------------------------------------------


def _unpack(packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    return np.unpackbits(packed, count=n).astype(bool)


def _join_backward(ch: ChunkContext, full: PairBatch | None, pay: PairBatch | None, *,
                   i: int, packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Input-``i`` cells of the traced pairs whose output cells meet the frontier."""
    if full is None or not len(full):
        return np.empty(0, dtype=np.uint64)
    flat = _unpack(packed, shape)
    rows = np.flatnonzero(full.out.any_in(flat))
    return unique(full.ins[i].take(rows).values)


def _join_forward(ch: ChunkContext, full: PairBatch | None, pay: PairBatch | None, *,
                  i: int, packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Output cells of the traced pairs whose input-``i`` cells meet the frontier."""
    if full is None or not len(full):
        return np.empty(0, dtype=np.uint64)
    flat = _unpack(packed, shape)
    rows = np.flatnonzero(full.ins[i].any_in(flat))
    return unique(full.out.take(rows).values)


def touched_boxes(mask: np.ndarray, tile: Sequence[int]) -> list[Box]:
    """The boxes of the ``tile``-shaped grid over ``mask`` that hold a True cell, C order
    (as :func:`subzero.chunking.chunk_grid` lists them); an or-reduction per axis.

    >>> m = np.zeros((5, 6), dtype=bool); m[4, 1] = True
    >>> touched_boxes(m, (2, 4))
    [Box(lo=(4, 0), hi=(5, 4))]
    """
    if mask.ndim == 0:
        return [Box((), ())] if bool(mask) else []
    shape, tile = mask.shape, tuple(int(t) for t in tile)
    grid = mask
    for ax, t in enumerate(tile):
        grid = _any_per_block(grid, ax, t)
    return [Box(tuple(int(k) * t for k, t in zip(idx, tile)),
                tuple(min(n, (int(k) + 1) * t) for k, t, n in zip(idx, tile, shape)))
            for idx in np.argwhere(grid)]


def _any_per_block(a: np.ndarray, ax: int, t: int) -> np.ndarray:
    """``a`` or-reduced over consecutive blocks of ``t`` along axis ``ax`` (the last block
    may be shorter); reshapes, so a C-contiguous mask is read once, vectorized."""
    n = a.shape[ax]
    k = n // t
    parts = []
    idx: list[slice] = [slice(None)] * a.ndim
    if k:
        idx[ax] = slice(0, k * t)
        head = a[tuple(idx)]
        parts.append(head.reshape(a.shape[:ax] + (k, t) + a.shape[ax + 1:]).any(axis=ax + 1))
    if k * t < n:
        idx[ax] = slice(k * t, n)
        parts.append(a[tuple(idx)].any(axis=ax, keepdims=True))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=ax)


# ---------------------------------------------------------------------------------------
# payload helpers
# ---------------------------------------------------------------------------------------


def group_by_payload(pairs: PairBatch) -> list[tuple[bytes, np.ndarray]]:
    """``[(payload, output linear indices)]``, one group per distinct payload (vectorized
    when payloads have one length, which is the common case)."""
    if pairs is None or not len(pairs):
        return []
    lens = pairs.payload.lengths
    if len(lens) and (lens == lens[0]).all():
        width = int(lens[0])
        rows = pairs.payload.values.reshape(len(pairs), width) if width else np.zeros(
            (len(pairs), 1), np.uint8)
        uniq, inv = np.unique(rows, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        payloads = [u.tobytes() if width else b"" for u in uniq]
    else:
        keys = [pairs.payload.row(k).tobytes() for k in range(len(pairs))]
        payloads, inv = np.unique(np.array(keys, dtype=object), return_inverse=True)
        payloads = list(payloads)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(payloads) + 1))
    out = []
    for g, p in enumerate(payloads):
        rows_g = order[bounds[g]:bounds[g + 1]]
        out.append((p, pairs.out.take(rows_g).values))
    return out


# ---------------------------------------------------------------------------------------
# the executor
# ---------------------------------------------------------------------------------------


class QueryExecutor:
    """Answers lineage queries on one finished run.

    Parameters
    ----------
    run : the run (:func:`subzero.engine.runs.load_run`).
    catalog : for statistics and the query log (opened from the run's home if None).
    where : where re-execution runs: ``"auto"`` (Spark for large re-executions when a
        session is already running, else this process), ``"driver"`` or ``"spark"``.
    log : record each query in the catalog's query log.
    """

    def __init__(self, run: LoadedRun, catalog: Catalog | None = None, where: str = "auto",
                 log: bool = True, costs: Any = None, tile_cells: int = 1 << 16,
                 min_switch_s: float = 0.05, entire_array: bool = True) -> None:
        from optimizer.query_costs import load_costs

        self.run = run
        self._own_catalog = catalog is None
        self.catalog = catalog or Catalog(run.home / "catalog.sqlite")
        self.where = where
        self.log = log
        self.costs = costs or load_costs()
        self.tile_cells = int(tile_cells)
        # never abandon stored lineage sooner than this (re-execution estimates are rough)
        self.min_switch_s = float(min_switch_s)
        #: apply the entire-array optimization (off only to measure what it saves)
        self.entire_array = bool(entire_array)
        self.op_stats = self.catalog.op_stats(run.id)
        self.shards: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for row in self.catalog.shards(run.id):
            self.shards.setdefault((row["op"], row["strategy"]), []).append(row)
        self.stats: dict[tuple[str, str], dict[str, float]] = {}
        for row in self.catalog.statistics(run.id):
            self.stats.setdefault((row["op"], row["strategy"]), {})[row["key"]] = row["value"]
        # per (operator, strategy): shard count and totals, summed once (steps are hot)
        self.totals: dict[tuple[str, str], tuple[int, int, int, int]] = {
            key: (len(rows), sum(r["pairs"] or 0 for r in rows),
                  sum(r["out_cells"] or 0 for r in rows), sum(r["in_cells"] or 0 for r in rows))
            for key, rows in self.shards.items()}
        self._methods: dict[str, list[tuple[str, Strategy | None]]] = {}
        self._between: dict[tuple[str, str, str], set[str]] = {}
        self._facts: dict[tuple[str, int, bool], list[tuple]] = {}
        self._row_readers: dict[str, Any] = {}  # shard path in the home -> its reader
        # (op, strategy) -> (shards not open, _OPENED when counted)
        self._unopened_n: dict[tuple[str, str], tuple[int, int]] = {}
        self._home = str(run.home)

    def close(self) -> None:
        if self._own_catalog:
            self.catalog.close()

    # -- public ----------------------------------------------------------------------------
    def backward(self, cells: Any, start: str | None = None,
                 path: Sequence[tuple[str, int]] | None = None, to: str | None = None,
                 method: str = "auto") -> LineageResult:
        return self.query("backward", cells, start, path, to, method)

    def forward(self, cells: Any, start: str | None = None,
                path: Sequence[tuple[str, int]] | None = None, to: str | None = None,
                method: str = "auto") -> LineageResult:
        return self.query("forward", cells, start, path, to, method)

    def query(self, direction: str, cells: Any, start: str | None,
              path: Sequence[tuple[str, int]] | None, to: str | None,
              method: str = "auto") -> LineageResult:
        t0 = time.perf_counter()
        if direction not in ("backward", "forward"):
            raise QueryError(f"direction must be 'backward' or 'forward'. Got {direction!r}.")
        if method not in METHODS:
            raise QueryError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
        if (path is None) == (to is None):
            raise QueryError("give either a path or a target (to=...), not both or neither")
        wf = self.run.workflow
        if path is not None:
            steps, start, target = self._check_path(direction, path, start)
        else:
            if start is None:
                raise QueryError("a query with to=... needs the start array (from)")
            self._check_array(start)
            self._check_array(to)
            steps, target = None, to
        f0 = start_frontier(wf.array_shape(start), cells)
        n0 = f0.n
        if path is not None:
            got, done = self._walk_path(direction, steps, f0, method)
        else:
            got, done = self._walk_dag(direction, start, to, f0, method)
        res = LineageResult(self.run.id, direction, target, wf.array_shape(target), got.mask,
                            done, time.perf_counter() - t0, start, known_count=got.n)
        if self.log:
            self.catalog.log_query(
                self.run.id, direction, start, target,
                [[s.operator, s.input] for s in done], n0, res.count, res.elapsed_s,
                [s.to_json() for s in done])
        return res

    # -- paths -----------------------------------------------------------------------------
    def _check_array(self, name: str) -> None:
        wf = self.run.workflow
        if name not in wf.inputs and name not in wf.ops:
            raise QueryError(f"run {self.run.id} has no array {name!r} "
                             f"(arrays: {', '.join([*wf.inputs, *wf.order])})")

    def _check_path(self, direction: str, path: Sequence[tuple[str, int]], start: str | None
                    ) -> tuple[list[tuple[str, int]], str, str]:
        wf = self.run.workflow
        steps = []
        for k, step in enumerate(path):
            try:
                op_name, idx = step
                idx = int(idx)
            except (TypeError, ValueError):
                raise QueryError(f"path step {k + 1} must be (operator, input index). "
                                 f"Got {step!r}.") from None
            if op_name not in wf.ops:
                raise QueryError(f"operator {op_name!r} is not in run {self.run.id} "
                                 f"(operators: {', '.join(wf.order)})")
            n_in = len(wf.nodes[op_name].inputs)
            if not 0 <= idx < n_in:
                raise QueryError(f"operator {op_name!r} has {n_in} input(s); input index {idx} "
                                 f"is out of range")
            steps.append((op_name, idx))
        if not steps:
            raise QueryError("the path is empty")
        if direction == "backward":
            first = steps[0][0]
            if start is not None and start != first:
                raise QueryError(f"a backward path starts at the operator that produced the "
                                 f"cells: path starts at {first!r}, cells are in {start!r}")
            for k in range(len(steps) - 1):
                (op, i), (nxt, _) = steps[k], steps[k + 1]
                src = wf.nodes[op].inputs[i]
                if src != nxt:
                    raise QueryError(f"impossible path at step {k + 2}: input {i} of {op!r} is "
                                     f"{src!r}, not the output of {nxt!r}")
            last_op, last_i = steps[-1]
            return steps, first, wf.nodes[last_op].inputs[last_i]
        first_op, first_i = steps[0]
        src = wf.nodes[first_op].inputs[first_i]
        if start is not None and start != src:
            raise QueryError(f"a forward path's first step reads the start array: input "
                             f"{first_i} of {first_op!r} is {src!r}, not {start!r}")
        for k in range(len(steps) - 1):
            (op, _), (nxt, j) = steps[k], steps[k + 1]
            if wf.nodes[nxt].inputs[j] != op:
                raise QueryError(f"impossible path at step {k + 2}: input {j} of {nxt!r} is "
                                 f"{wf.nodes[nxt].inputs[j]!r}, not the output of {op!r}")
        return steps, src, steps[-1][0]

    def _walk_path(self, direction: str, steps: list[tuple[str, int]], f: Frontier,
                   method: str) -> tuple[Frontier, list[Step]]:
        done: list[Step] = []
        for op_name, i in steps:
            f, step = self._step(op_name, i, direction == "backward", f, method)
            done.append(step)
        return f, done

    def _relevant(self, direction: str, start: str, target: str) -> set[str]:
        """Arrays on some path between ``start`` and ``target``."""
        key = (direction, start, target)
        if key not in self._between:
            self._between[key] = self._find_relevant(direction, start, target)
        return self._between[key]

    def _find_relevant(self, direction: str, start: str, target: str) -> set[str]:
        wf = self.run.workflow
        parents = {n: set(wf.nodes[n].inputs) for n in wf.order}

        def ancestors(a: str) -> set[str]:
            seen, todo = {a}, [a]
            while todo:
                x = todo.pop()
                for p in parents.get(x, ()):
                    if p not in seen:
                        seen.add(p)
                        todo.append(p)
            return seen

        lo, hi = (target, start) if direction == "backward" else (start, target)
        between = {a for a in ancestors(hi) if lo in ancestors(a)}
        if lo not in between or hi not in between or lo == hi:
            word = "back to" if direction == "backward" else "forward to"
            raise QueryError(f"no path from {start!r} {word} {target!r} in workflow "
                             f"{wf.name!r}")
        return between

    def _walk_dag(self, direction: str, start: str, target: str, f0: Frontier, method: str
                  ) -> tuple[Frontier, list[Step]]:
        """Union over every path: propagate frontiers through the DAG in (reverse)
        topological order; lineage distributes over unions, so this equals the union of the
        per-path answers while visiting each (operator, input) once."""
        wf = self.run.workflow
        between = self._relevant(direction, start, target)
        fronts: dict[str, Frontier] = {start: f0}
        done: list[Step] = []
        if direction == "backward":
            for op_name in reversed(wf.order):
                if op_name not in between or op_name == target or op_name not in fronts:
                    continue
                for i, src in enumerate(wf.nodes[op_name].inputs):
                    if src not in between:
                        continue
                    got, step = self._step(op_name, i, True, fronts[op_name], method)
                    done.append(step)
                    fronts[src] = fronts[src].union(got) if src in fronts else got
        else:
            for op_name in wf.order:
                if op_name not in between:
                    continue
                for i, src in enumerate(wf.nodes[op_name].inputs):
                    if src not in between or src not in fronts:
                        continue
                    got, step = self._step(op_name, i, False, fronts[src], method)
                    done.append(step)
                    fronts[op_name] = fronts[op_name].union(got) if op_name in fronts else got
        empty = Frontier(wf.array_shape(target), lin=np.empty(0, dtype=np.uint64))
        return fronts.get(target, empty), done

    # -- one step --------------------------------------------------------------------------
    def methods(self, op_name: str) -> list[tuple[str, Strategy | None]]:
        """The access methods this run has for an operator (re-execution always)."""
        if op_name in self._methods:
            return self._methods[op_name]
        out: list[tuple[str, Strategy | None]] = []
        strategies = self.run.strategies(op_name)
        if Strategy.parse("map") in strategies:
            out.append(("map", None))
        for s in strategies:
            if s.stored and self.shards.get((op_name, s.name)):
                out.append(("stored", s))
        out.append(("reexec", None))
        self._methods[op_name] = out
        return out

    def step(self, op_name: str, i: int, direction: str, f: Any, method: str = "auto",
             n_in: int | None = None) -> tuple[np.ndarray, Step]:
        """Map frontier ``f`` (a bool mask or a :class:`~subzero.cells.Frontier`) through
        input ``i`` of ``op_name`` (backward: output -> input i; forward: input i ->
        output); returns the mask reached. ``n_in``: ``f``'s cell count, when known."""
        front = Frontier.of(f, n_in)
        got, step = self._step(op_name, i, direction == "backward", front, method)
        return got.mask, step

    def _step(self, op_name: str, i: int, backward: bool, f: Frontier, method: str
              ) -> tuple[Frontier, Step]:
        t0 = time.perf_counter()
        op = self.run.op(op_name)
        out_shape = op.in_shapes[i] if backward else op.out_shape
        n_in = f.n
        note = ""
        if n_in == 0:
            res, used = Frontier(out_shape, lin=np.empty(0, dtype=np.uint64)), "empty"
        elif self.entire_array and n_in == f.size and op.all_to_all(i):
            res = Frontier(out_shape, mask=np.ones(out_shape, dtype=bool), n=size_of(out_shape))
            used = "entire-array"
        else:
            options = self.methods(op_name)
            (kind, strategy), budget = self._choose(op, i, backward, f, options, method)
            if kind == "map":
                m = op.map_b(f.mask, i) if backward else op.map_f(f.mask, i)
                res, used = Frontier(out_shape, mask=np.asarray(m, dtype=bool)), "map"
            elif kind == "stored":
                deadline = (time.perf_counter() + max(budget, self.min_switch_s)
                            if budget is not None else None)
                res = self._stored(op, i, backward, f, strategy, deadline)
                used = f"stored:{strategy.name}"
                if res is None:  # reading cost more than re-executing would
                    res = self._reexec(op, i, backward, f)
                    used = "reexec"
                    note = (f"switched from stored:{strategy.name} after "
                            f"{max(budget, self.min_switch_s):.3f} s")
            else:
                res, used = self._reexec(op, i, backward, f), "reexec"
        step = Step(op_name, i, used, n_in, res.n, time.perf_counter() - t0, note)
        return res, step

    def _stats(self, op_name: str) -> dict[str, Any]:
        return self.op_stats.get(op_name, {})

    def _choose(self, op: Any, i: int, backward: bool, f: Frontier,
                options: list[tuple[str, Strategy | None]], method: str
                ) -> tuple[tuple[str, Strategy | None], float | None]:
        """The cheapest method (or the cheapest of the forced kind) and, under ``auto``, how
        long reading stored lineage may take before re-execution is the better bet."""
        if method == "auto" and options[0][0] == "map":
            # the paper's optimizer picks mapping functions over every other class
            return ("map", None), None
        if method == "reexec":
            return ("reexec", None), None
        c = self.costs
        n_in = f.n
        facts = self._option_facts(op, i, backward, options)
        costs = []  # per map or stored option, in the order of ``facts``
        for option, fixed, args in facts:
            if args is None:  # a mapping function
                costs.append(fixed)
            else:
                costs.append(fixed + c.stored_cost(args[0], args[1], not backward, n_in,
                                                   *args[2:])
                             + c.shard_open * self._unopened(op.name, option[1].name))
        best = min(range(len(costs)), key=costs.__getitem__) if costs else None
        if method != "auto":
            forced = [k for k, fact in enumerate(facts) if fact[0][0] == method]
            if forced:  # no re-execution fallback for a forced method
                return facts[min(forced, key=costs.__getitem__)][0], None
        auto = method == "auto"  # (a forced method the operator lacks falls back here)
        floor = c.reexec_fixed_driver  # no re-execution costs less
        if best is not None and costs[best] < floor:
            # certainly cheaper than re-executing: skip finding the tiles it would run
            return facts[best][0], floor if auto else None
        tiles, cells = self._tiles(op, i, backward, f.mask)
        on_spark = self._use_spark(cells, len(tiles), op)
        if not on_spark and self._observed(op.name) is not None:
            reexec = self._driver_estimate(op, cells)
        else:
            reexec = c.reexec_cost(self._stats(op.name).get("runtime_nolineage_s"),
                                   size_of(op.out_shape), cells, len(tiles), on_spark)
        if best is not None and costs[best] <= reexec:
            return facts[best][0], reexec if auto else None
        return ("reexec", None), reexec if auto else None

    def _option_facts(self, op: Any, i: int, backward: bool,
                      options: list[tuple[str, Strategy | None]]) -> list[tuple]:
        """Per map or stored option, what its cost estimate needs besides the frontier:
        ``(option, fixed cost, stored_cost arguments or None)``; worked out once per
        operator input and direction (steps are hot)."""
        key = (op.name, i, backward)
        facts = self._facts.get(key)
        if facts is not None:
            return facts
        c = self.costs
        map_cost = c.map_cost(size_of(op.in_shapes[i]), size_of(op.out_shape))
        facts = []
        for kind, s in options:
            if kind == "map":
                facts.append(((kind, s), map_cost, None))
            elif kind == "stored":
                n_shards, pairs, outs, ins = self.totals[(op.name, s.name)]
                payload = s.mode in (Mode.PAY, Mode.COMP)
                matched = payload and backward or (
                    s.direction is (Direction.BACKWARD if backward else Direction.FORWARD))
                records = self.stats.get((op.name, s.name), {}).get("records")
                n_in = max(1, len(op.in_shapes))  # the totals count every input's cells
                facts.append(((kind, s), map_cost if s.mode is Mode.COMP else 0.0,
                              (matched, payload, n_shards, pairs, outs, ins // n_in,
                               int(records) if records is not None else None,
                               s.encoding in ("FullMany", "PayMany"),
                               size_of(op.in_shapes[i] if not backward else op.out_shape))))
        self._facts[key] = facts
        return facts

    # -- stored lineage --------------------------------------------------------------------
    def _unopened(self, op_name: str, strategy: str) -> int:
        """Shards of the strategy this process has not opened yet (readers stay open;
        counted again only after some reader was opened)."""
        key = (op_name, strategy)
        n, stamp = self._unopened_n.get(key, (None, None))
        if n is None or (n and stamp != _OPENED[0]):
            n = sum(os.path.join(self._home, row["path"]) not in _READERS
                    for row in self.shards.get(key, ()))
            self._unopened_n[key] = (n, _OPENED[0])
        return n

    def _reader(self, row: dict[str, Any]) -> Any:
        reader = self._row_readers.get(row["path"])
        if reader is not None:
            return reader
        key = os.path.join(self._home, row["path"])  # the home is already absolute
        reader = _READERS.get(key)
        if reader is None:
            from encoders.lookup import open_shard

            reader = _READERS[key] = open_shard(key)
            _OPENED[0] += 1
        self._row_readers[row["path"]] = reader
        return reader

    def _stored(self, op: Any, i: int, backward: bool, f: Frontier, s: Strategy,
                deadline: float | None) -> Frontier | None:
        """Answer from stored lineage; None if ``deadline`` passed (switch to reexec)."""
        rows = self.shards[(op.name, s.name)]
        try:
            if s.mode is Mode.FULL:
                return self._stored_full(op, i, backward, f, rows, deadline)
            res = self._stored_payload(op, i, backward, f, rows, s.mode is Mode.COMP,
                                       deadline)
            return Frontier(res.shape, mask=res)
        except LookupTimeout:
            return None

    def _stored_full(self, op: Any, i: int, backward: bool, f: Frontier, rows: list[dict],
                     deadline: float | None) -> Frontier:
        """The union of every shard's answer: sorted cells while it is small, a mask once
        it is not (large answers are decoded straight into it; the shards stop once it is
        full)."""
        out_shape = op.in_shapes[i] if backward else op.out_shape
        size = size_of(out_shape)
        q = f.lin
        flat = np.zeros(size, dtype=bool)
        parts: list[np.ndarray] = []
        dense, total = False, 0
        for row in rows:
            reader = self._reader(row)
            if backward and len(rows) > 1 and not f.meets(reader.out_box):
                continue  # backward: this shard's output chunk holds no frontier cell
            got = (reader.backward(q, i, deadline, flat) if backward
                   else reader.forward(q, i, deadline, flat))
            if got is None:  # a large answer, set in the mask
                dense = True
            elif len(got):
                total += len(got)
                if dense or total * Frontier.SPARSE_FRACTION > size:
                    flat[got.astype(np.intp)] = True
                    dense = True
                else:
                    parts.append(got)  # sorted unique (the lookup contract)
            if dense and len(rows) > 1 and flat.all():
                break  # the frontier is full: nothing left to add
        if dense:
            for p in parts:
                flat[p.astype(np.intp)] = True
            return Frontier(out_shape, mask=flat.reshape(out_shape))
        if len(parts) == 1:
            return Frontier(out_shape, lin=parts[0])
        return Frontier(out_shape, lin=unique(np.concatenate(parts)) if parts
                        else np.empty(0, dtype=np.uint64))

    def _payload_pairs(self, rows: list[dict], q: np.ndarray | None, f: np.ndarray | None,
                       deadline: float | None) -> PairBatch | None:
        batches = []
        for row in rows:
            reader = self._reader(row)
            if f is not None and not f[reader.out_box.slices].any():
                continue
            b = reader.payload_pairs(q, deadline)
            if b is not None and len(b):
                batches.append(b)
        return PairBatch.concat(batches)

    def _stored_payload(self, op: Any, i: int, backward: bool, front: Frontier,
                        rows: list[dict], composite: bool, deadline: float | None
                        ) -> np.ndarray:
        from encoders.base import check_deadline

        in_shape, out_shape = op.in_shapes[i], op.out_shape
        f = front.mask
        if backward:
            q = front.lin
            groups = group_by_payload(self._payload_pairs(rows, q, f, deadline))
            res = None
            if composite:  # the mapping default for the cells that stored no payload
                rest = f.copy()
                for _, outs in groups:
                    rest.reshape(-1)[outs.astype(np.intp)] = False
                if not groups or rest.any():
                    res = np.asarray(op.map_b(rest, i), dtype=bool)
                    if not res.flags.writeable:
                        res = res.copy()
            if res is None:
                res = np.zeros(in_shape, dtype=bool)
            flat = res.reshape(-1)
            for payload, outs in groups:
                check_deadline(deadline)
                got = as_linear(op.map_p(to_coords(outs, out_shape), payload, i), in_shape)
                flat[got.astype(np.intp)] = True
            return res
        # forward: payloads cannot be keyed by input cells; scan them all (paper V-A3)
        pairs = self._payload_pairs(rows, None, None, deadline)
        res = np.zeros(out_shape, dtype=bool)
        covered = np.zeros(out_shape, dtype=bool)
        for payload, outs in group_by_payload(pairs):
            check_deadline(deadline)
            covered.reshape(-1)[outs.astype(np.intp)] = True
            hits = np.asarray(op.map_p_hits(to_coords(outs, out_shape), payload, i, f), bool)
            res.reshape(-1)[outs[hits].astype(np.intp)] = True
        if composite:
            res |= np.asarray(op.map_f(f, i), dtype=bool) & ~covered
        return res

    # -- re-execution ----------------------------------------------------------------------
    def _tile_shape(self, chunk: Sequence[int]) -> tuple[int, ...]:
        tile = list(chunk)
        while int(np.prod(tile)) > self.tile_cells:
            ax = int(np.argmax(tile))
            if tile[ax] == 1:
                break
            tile[ax] = (tile[ax] + 1) // 2
        return tuple(tile)

    def _tiles(self, op: Any, i: int, backward: bool, f: np.ndarray
               ) -> tuple[list[Box], int]:
        """Output tiles to re-execute and how many output cells they hold."""
        from subzero.chunking import chunk_grid

        if op.parallelism.kind == "global":
            return [Box.full(op.out_shape)], int(np.prod(op.out_shape))
        chunk = self.run.chunks(op.name)
        tile = self._tile_shape(chunk)
        if backward:  # one pass over the frontier: which tiles hold a frontier cell
            tiles = touched_boxes(f, tile)
        else:  # a tile's input window (halo included) must hold one
            tiles = [box for _, box in chunk_grid(op.out_shape, tile)
                     if f[op.input_box(box, i).slices].any()]
        if len(tiles) > 64:  # many tiles: fewer, larger tasks (the run's own chunks)
            tiles = self._coarse(op, i, backward, f)
        return tiles, int(sum(b.size for b in tiles))

    def _coarse(self, op: Any, i: int, backward: bool, f: np.ndarray) -> list[Box]:
        """The run's own chunks that the frontier touches."""
        from subzero.chunking import chunk_grid

        out = []
        for _, box in chunk_grid(op.out_shape, self.run.chunks(op.name)):
            sub = f[box.slices] if backward else f[op.input_box(box, i).slices]
            if sub.any():
                out.append(box)
        return out

    def _observed(self, op_name: str) -> float | None:
        """Seconds per re-executed output cell that earlier queries measured, if any."""
        return self.stats.get((op_name, REEXEC_KEY), {}).get("s_per_cell")

    def _driver_estimate(self, op: Any, cells: int) -> float:
        """Seconds to re-execute ``cells`` output cells of ``op`` on the driver: what earlier
        re-executions of it took per cell when known, else the cost model's estimate."""
        observed = self._observed(op.name)
        if observed is not None:
            return self.costs.reexec_fixed_driver + observed * cells
        total = int(np.prod(op.out_shape))
        runtime = self._stats(op.name).get("runtime_nolineage_s")
        return self.costs.reexec_cost(runtime, total, cells, 1, False)

    def _record_reexec(self, op_name: str, cells: int, seconds: float) -> None:
        """Remember what a driver re-execution cost (the paper's query-time statistics):
        the next estimate for this operator, here and in the strategy optimizer, uses it."""
        if cells <= 0:
            return
        obs = max(0.0, seconds - self.costs.reexec_fixed_driver) / cells
        old = self._observed(op_name)
        value = obs if old is None else 0.5 * (old + obs)
        self.stats.setdefault((op_name, REEXEC_KEY), {})["s_per_cell"] = value
        try:
            self.catalog.set_statistics(self.run.id, op_name, REEXEC_KEY, {"s_per_cell": value})
        except Exception:  # noqa: BLE001 - a read-only catalog must not fail a query
            pass

    def _use_spark(self, cells: int, tasks: int, op: Any = None) -> bool:
        """Spark only pays when the driver would be busy for a while: each Spark task costs
        tens of milliseconds before it starts, and the driver needs none of that."""
        if self.where == "driver":
            return False
        if self.where == "spark":
            return True
        from subzero.engine.spark import active_session

        if active_session() is None or tasks < 2:
            return False
        estimate = (self._driver_estimate(op, cells) if op is not None
                    else cells * self.costs.reexec_per_cell * self.costs.trace_factor)
        return estimate > SPARK_REEXEC_MIN_S

    def _reexec(self, op: Any, i: int, backward: bool, front: Frontier) -> Frontier:
        f = front.mask
        tiles, cells = self._tiles(op, i, backward, f)
        out_shape = op.in_shapes[i] if backward else op.out_shape
        res = np.zeros(out_shape, dtype=bool)
        if not tiles:
            return Frontier(out_shape, mask=res, n=0)
        join = _join_backward if backward else _join_forward
        reduce = partial(join, i=i, packed=np.packbits(f.reshape(-1)), shape=f.shape)
        where = "spark" if self._use_spark(cells, len(tiles), op) else "driver"
        if where == "spark" and op.parallelism.kind != "global":
            tiles = self._coarse(op, i, backward, f)  # few large tasks, not many small ones
        t0 = time.perf_counter()
        results = reexecute(self.run, op.name, boxes=tiles, reduce=reduce, where=where)
        if where == "driver":
            self._record_reexec(op.name, cells, time.perf_counter() - t0)
        flat = res.reshape(-1)
        for r in results:
            flat[np.asarray(r["result"], dtype=np.intp)] = True
        return Frontier(out_shape, mask=res)


def parse_path(text: str) -> list[tuple[str, int]]:
    """CLI form ``op:idx,op:idx,...`` (``op`` alone means input 0)."""
    out = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        name, _, idx = part.partition(":")
        try:
            out.append((name.strip(), int(idx) if idx.strip() else 0))
        except ValueError:
            raise QueryError(f"bad path step {part!r}; expected operator:input_index") from None
    if not out:
        raise QueryError(f"bad path {text!r}; expected op:idx,op:idx,...")
    return out


def parse_cells_text(text: str, shape: Sequence[int]) -> np.ndarray:
    """CLI form ``"r,c;r,c"`` -> ``(n, ndim)`` coordinates."""
    rows = []
    for part in [p.strip() for p in text.split(";") if p.strip()]:
        try:
            rows.append([int(v) for v in part.split(",")])
        except ValueError:
            raise CellError(f"bad cell {part!r}; expected integers like 'r,c'") from None
    if not rows:
        raise CellError(f"no cells in {text!r}; expected 'r,c;r,c'")
    if any(len(r) != len(shape) for r in rows):
        bad = next(r for r in rows if len(r) != len(shape))
        raise CellError(f"cell {tuple(bad)} has {len(bad)} coordinates; the array "
                        f"{tuple(shape)} has {len(shape)} axes")
    return np.asarray(rows, dtype=np.int64)
