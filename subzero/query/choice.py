"""The query-time optimizer (paper VII-A): which access method answers one step cheapest.

Before each step the executor asks :class:`MethodChoice` for the cheapest method the run
has for the operator, from the catalog's statistics, the frontier's size and the cost
constants (:mod:`subzero.query.costs`):

- ``map`` is taken whenever the run has it (the paper's optimizer prefers mapping
  functions over every other class);
- ``stored:<strategy>`` and ``reexec`` are compared by estimate. A stored read gets a
  *budget*: the estimated cost of re-executing instead; the executor switches to
  re-execution once reading has taken that long, which bounds the worst case at about
  twice the black-box cost.

Re-execution estimates use what earlier re-executions of the operator measured per cell
when there are any (:meth:`MethodChoice.record_reexec` keeps them, in the catalog too, where
the strategy optimizer reads them), else the operator's own stage time.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from encoders.registry import encoding_class
from subzero.cells import size_of
from subzero.engine import datastore
from subzero.engine.catalog import Catalog
from subzero.engine.runs import LoadedRun
from subzero.engine.spark import active_session
from subzero.frontier import Frontier
from subzero.modes import MAP, Direction, Mode, Strategy
from subzero.operator import Operator
from subzero.query.costs import QueryCosts
from subzero.query.reexec import tiles_touched
from subzero.query.stored import ShardReaders

METHODS = ("auto", "map", "stored", "reexec")
# re-execution goes to Spark only when the driver would need longer than this
SPARK_REEXEC_MIN_S = 1.0
# the statistics row (strategy column) of observed re-execution costs
REEXEC_KEY = "reexec"

Option = tuple[str, Strategy | None]  # ("map" | "stored" | "reexec", stored strategy)
# the files of a typical shard (its LMDB environment, metadata, an R-tree's two)
SHARD_FILES = 3


def _payloads_met(n: int, keyed: int, records: int) -> int:
    """The distinct payloads a backward step of ``n`` frontier cells is expected to map
    (one ``map_p`` call each), of ``records`` shared by ``keyed`` output cells: a payload
    names a region (a star, a cosmic ray's pixels), and a frontier drawn from such regions
    meets about one per region's worth of cells. The estimate may fall short for cells
    scattered over many regions; a stored read then has the re-execution estimate as its
    deadline, and falls back to re-executing once it is spent.

    >>> _payloads_met(608, 5973, 310), _payloads_met(10, 5973, 310), _payloads_met(5, 10, 10)
    (32, 1, 5)
    """
    per = max(1.0, keyed / max(1, records))
    return int(min(records, max(1, math.ceil(n / per))))


class MethodChoice:
    """Access methods and their estimated costs for the steps of queries on one run.

    Parameters
    ----------
    run, catalog : the run, and its home's catalog (statistics, shard rows).
    costs : the cost constants.
    readers : the run's shard readers (a shard not yet opened costs its opening).
    where : where re-execution runs: ``"auto"``, ``"driver"`` or ``"spark"``.
    tile_cells : the re-execution tile size (:func:`subzero.query.reexec.tile_shape`).
    """

    def __init__(self, run: LoadedRun, catalog: Catalog, costs: QueryCosts,
                 readers: ShardReaders, where: str = "auto", tile_cells: int = 1 << 16
                 ) -> None:
        self.run = run
        self.catalog = catalog
        self.costs = costs
        self.readers = readers
        self.where = where
        self.tile_cells = int(tile_cells)
        self.op_stats = catalog.op_stats(run.id)
        self.shards: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for row in catalog.shards(run.id):
            self.shards.setdefault((row["op"], row["strategy"]), []).append(row)
        self.stats: dict[tuple[str, str], dict[str, float]] = {}
        for row in catalog.statistics(run.id):
            self.stats.setdefault((row["op"], row["strategy"]), {})[row["key"]] = row["value"]
        # per (operator, strategy): shard count and totals, summed once (steps are hot)
        self.totals: dict[tuple[str, str], tuple[int, int, int, int]] = {
            key: (len(rows), sum(r["pairs"] or 0 for r in rows),
                  sum(r["out_cells"] or 0 for r in rows), sum(r["in_cells"] or 0 for r in rows))
            for key, rows in self.shards.items()}
        self._methods: dict[str, list[Option]] = {}
        self._facts: dict[tuple[str, int, bool], list[tuple]] = {}
        # a home in object storage: shards not in the local cache, and every chunk a
        # re-execution reads, are fetched first (:meth:`_fetch_cost`, :meth:`_read_cost`)
        self.remote = datastore.mounted(run.home) is not None
        self._uncached: dict[tuple[str, str], tuple[int, float]] = {}
        self._array_bytes = ({n: int(a.get("stored_bytes") or 0)
                              for n, a in catalog.arrays(run.id).items()}
                             if self.remote else {})

    def methods(self, op_name: str) -> list[Option]:
        """The access methods this run has for an operator (re-execution always)."""
        if op_name in self._methods:
            return self._methods[op_name]
        out: list[Option] = []
        strategies = self.run.strategies(op_name)
        if MAP in strategies:
            out.append(("map", None))
        for s in strategies:
            if s.stored and self.shards.get((op_name, s.name)):
                out.append(("stored", s))
        out.append(("reexec", None))
        self._methods[op_name] = out
        return out

    def _chunks_met(self, op: Operator, backward: bool, f: Frontier) -> int | None:
        """How many of ``op``'s output chunks (its shards: one per chunk and strategy) a
        sparse backward frontier meets; None when every shard may be read (forward
        steps, dense frontiers)."""
        if not backward or not f.sparse or not op.out_shape:
            return None
        at = f.coords() // np.asarray(self.run.chunks(op.name), dtype=np.int64)
        grid = tuple(-(-int(n) // int(ch)) for n, ch in zip(op.out_shape,
                                                            self.run.chunks(op.name)))
        return int(len(np.unique(np.ravel_multi_index(tuple(at.T), grid))))

    def tiles(self, op: Operator, i: int, backward: bool, mask: Any) -> tuple[list, int]:
        """The tiles re-execution would run for the frontier ``mask``, and their cells."""
        return tiles_touched(op, self.run.chunks(op.name), i, backward, mask, self.tile_cells)

    def choose(self, op: Operator, i: int, backward: bool, f: Frontier, method: str
               ) -> tuple[Option, float | None]:
        """The cheapest method (or the cheapest of the forced kind) and, under ``auto``, how
        long reading stored lineage may take before re-execution is the better bet."""
        options = self.methods(op.name)
        if method == "auto" and options[0][0] == "map":
            return ("map", None), None
        if method == "reexec":
            return ("reexec", None), None
        c = self.costs
        n_in = f.n
        facts = self._option_facts(op, i, backward, options)
        touched = self._chunks_met(op, backward, f)
        costs = []  # per map or stored option, in the order of ``facts``
        for option, fixed, args in facts:
            if args is None:  # a mapping function
                costs.append(fixed)
            else:
                key = (op.name, option[1].name)
                shards = args[2] if touched is None else min(args[2], touched)
                if args[1] and backward and args[6] is not None and args[6] > 1:
                    args = args[:6] + (_payloads_met(n_in, args[4], args[6]),) + args[7:]
                unopened = self.readers.unopened(key, self.shards[key])
                costs.append(fixed + c.stored_cost(args[0], args[1], not backward, n_in,
                                                   shards, *args[3:])
                             + c.shard_open * min(unopened, shards)
                             + self._fetch_cost(key, min(unopened, shards)))
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
        tiles, cells = self.tiles(op, i, backward, f)
        on_spark = self.use_spark(cells, len(tiles), op)
        reexec = c.reexec_cost(self._stats(op.name).get("runtime_nolineage_s"),
                               size_of(op.out_shape), cells, len(tiles), on_spark,
                               s_per_cell=self._observed(op.name))
        reexec += self._read_cost(op, cells, len(tiles))
        if best is not None and costs[best] <= reexec:
            return facts[best][0], reexec if auto else None
        return ("reexec", None), reexec if auto else None

    def _option_facts(self, op: Operator, i: int, backward: bool, options: list[Option]
                      ) -> list[tuple]:
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
                if payload and op.batches_payloads():  # one map_p_rows call a step
                    records = 1
                n_in = max(1, len(op.in_shapes))  # the totals count every input's cells
                facts.append(((kind, s), map_cost if s.mode is Mode.COMP else 0.0,
                              (matched, payload, n_shards, pairs, outs, ins // n_in,
                               int(records) if records is not None else None,
                               encoding_class(s.encoding).many,
                               size_of(op.in_shapes[i] if not backward else op.out_shape))))
        self._facts[key] = facts
        return facts

    # -- a home in object storage -----------------------------------------------------------
    def _fetch_cost(self, key: tuple[str, str], opening: int) -> float:
        """What fetching the shards a stored read opens costs, of those not in the local
        cache (none for a local home): a request per file, and their bytes, of which one
        query is charged :attr:`~subzero.query.costs.QueryCosts.remote_fetch_share` (the
        shard serves the queries after it from the cache)."""
        if not self.remote or opening <= 0:
            return 0.0
        got = self._uncached.get(key)
        if got is None:
            rows = self.shards[key]
            missing = [r for r in rows if not os.path.isdir(
                datastore.shard_folder(self.run.home, r, fetch=False))]
            per = (sum(int(r.get("data_bytes") or 0) + int(r.get("index_bytes") or 0)
                       for r in missing) / len(missing)) if missing else 0.0
            got = self._uncached[key] = (len(missing), per)
        missing, per = got
        n = min(opening, missing)
        c = self.costs
        return c.remote_fetch_share * n * (SHARD_FILES * c.remote_request
                                           + per * c.remote_per_byte)

    def _read_cost(self, op: Operator, cells: int, tiles: int) -> float:
        """What re-executing ``cells`` output cells of ``op`` reads from object storage
        (none for a local home): a request per tile and input, and the share of each
        input's stored bytes the cells need."""
        if not self.remote:
            return 0.0
        share = min(1.0, cells / max(1, size_of(op.out_shape)))
        inputs = self.run.workflow.nodes[op.name].inputs
        nbytes = sum(self._array_bytes.get(a, 0) for a in inputs) * share
        c = self.costs
        return tiles * len(inputs) * c.remote_request + nbytes * c.remote_per_byte

    # -- re-execution estimates --------------------------------------------------------------
    def _stats(self, op_name: str) -> dict[str, Any]:
        return self.op_stats.get(op_name, {})

    def _observed(self, op_name: str) -> float | None:
        """Seconds per re-executed output cell that earlier queries measured, if any."""
        return self.stats.get((op_name, REEXEC_KEY), {}).get("s_per_cell")

    def driver_estimate(self, op: Operator, cells: int) -> float:
        """Seconds to re-execute ``cells`` output cells of ``op`` on the driver: what earlier
        re-executions of it took per cell when known, else the cost model's estimate."""
        runtime = self._stats(op.name).get("runtime_nolineage_s")
        return self.costs.reexec_cost(runtime, size_of(op.out_shape), cells, 1, False,
                                      s_per_cell=self._observed(op.name))

    def record_reexec(self, op_name: str, cells: int, seconds: float) -> None:
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

    def use_spark(self, cells: int, tasks: int, op: Operator | None = None) -> bool:
        """Spark only pays when the driver would be busy for a while: each Spark task costs
        tens of milliseconds before it starts, and the driver needs none of that."""
        if self.where == "driver":
            return False
        if self.where == "spark":
            return True
        if active_session() is None or tasks < 2:
            return False
        estimate = (self.driver_estimate(op, cells) if op is not None
                    else cells * self.costs.reexec_per_cell * self.costs.trace_factor)
        return estimate > SPARK_REEXEC_MIN_S
