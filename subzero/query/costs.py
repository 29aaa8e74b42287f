"""Query-time cost estimates: which access method answers one query step fastest.

Before each step of a lineage query the executor estimates, from the catalog's statistics
and the frontier's size, what each available method would cost (paper VII-A):

- ``map``: a vectorized mapping function, linear in the array sizes;
- ``stored``: reading lineage from shards; a matching direction costs per query cell and per
  decoded cell, a mismatched one (e.g. backward on forward-optimized lineage) scans every
  stored pair and decodes every distinct stored set, and forward queries on payload
  lineage scan and apply ``map_p``;
- ``reexec``: re-running the operator in tracing mode on the touched tiles only, in
  proportion to the cells re-run, times a tracing factor, plus per-task overhead.

The constants are seconds on the machine that measured them. Defaults come from this
machine class; ``subzero calibrate`` (:mod:`optimizer.calibrate`) re-measures them into
``subzero/query/calibration.json``, which :func:`load_costs` reads when present.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


def cells_per_key(forward: bool, pairs: int, out_cells: int, in_cells: int,
                  key_space: int | None = None) -> float:
    """Cells a matched lookup decodes per query cell: the cell sets stored under one key.

    A key (an output cell backward, an input cell forward) holds the other side of every
    pair it is in: summed over keys that is about ``out_cells * in_cells / pairs`` cells,
    spread over the distinct keys, at most ``key_space`` of them (pairs overlap: an input
    pixel of a 3x3 stencil is in 9 pairs). Without ``key_space``: the mean fan-in.

    >>> cells_per_key(False, 100, 100, 900, key_space=100)   # 3x3 stencil, backward
    9.0
    >>> cells_per_key(True, 100, 100, 900, key_space=100)    # and forward
    9.0
    >>> cells_per_key(True, 18, 100, 393870, key_space=537600)   # few, wide pairs
    5.555555555555555
    """
    if key_space is None:
        return in_cells / max(1, out_cells)
    keys, other = (in_cells, out_cells) if forward else (out_cells, in_cells)
    return keys * other / max(1, pairs) / max(1, min(keys, key_space))


@dataclass(frozen=True)
class QueryCosts:
    """Seconds per unit of work for each query access method."""

    map_fixed: float = 5e-5
    map_per_cell: float = 1.5e-9  # per cell of the input plus output arrays
    shard_fixed: float = 1.3e-4  # one lookup in an open shard: position cursors, decode
    shard_open: float = 2.5e-4  # opening a shard (once per process: readers stay open)
    rtree_fixed: float = 3e-3  # *Many encodings: one R-tree probe of a shard
    lookup_per_cell: float = 2e-6  # matched direction, per query cell
    decode_per_cell: float = 2e-8  # per decoded lineage cell
    scan_per_pair: float = 3e-8  # mismatched direction: every stored pair
    scan_per_cell: float = 1.3e-7  # ... and every cell of its distinct stored sets
    payload_per_group: float = 4e-5  # one map_p call on a group of cells
    reexec_fixed_driver: float = 2e-3
    reexec_fixed_task: float = 6e-2  # one Spark task
    trace_factor: float = 4.0  # tracing (FULL pairs + join) vs. plain run time
    reexec_per_cell: float = 1e-7  # when the operator's own runtime is unknown
    # a home in object storage (subzero.engine.datastore): what one request costs before
    # its first byte, and each byte after it (an in-region S3 GET: tens of milliseconds;
    # one stream's bandwidth); benchmarks/bench_remote.py counts the requests and bytes
    remote_request: float = 3e-2
    remote_per_byte: float = 1.1e-8
    # the share of a shard's fetch one query is charged: the shard stays in the local
    # cache for the queries after it, while a re-execution reads its chunks again each time
    remote_fetch_share: float = 0.25

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "QueryCosts":
        known = {f.name for f in fields(cls)}
        return cls(**{k: float(v) for k, v in doc.items() if k in known})

    def to_json(self) -> dict[str, float]:
        return asdict(self)

    # -- estimates -------------------------------------------------------------------------
    def map_cost(self, in_cells: int, out_cells: int) -> float:
        return self.map_fixed + self.map_per_cell * (in_cells + out_cells)

    def stored_cost(self, matched: bool, payload: bool, forward: bool, n_query: int,
                    shards: int, pairs: int, out_cells: int, in_cells: int,
                    groups: int | None = None, many: bool = False,
                    key_space: int | None = None) -> float:
        """Reading stored lineage for ``n_query`` frontier cells.

        ``pairs``/``out_cells``/``in_cells`` are the strategy's totals over its shards;
        ``groups``: the distinct records stored, when known: payloads (one ``map_p`` call
        each), or the distinct cell sets a mismatched scan decodes (shared sets, such as
        the same relative stencil box around every cell, decode once; unknown counts as
        all distinct); ``many``: a FullMany/PayMany encoding, whose matched lookups probe
        an R-tree; ``key_space``: cells of the array a matched lookup is keyed by (output
        backward, input forward), which makes the cells decoded per query cell an
        estimate for either direction (see :func:`cells_per_key`).
        """
        fanin = cells_per_key(forward, pairs, out_cells, in_cells, key_space)
        if many and (matched or (payload and not forward)):
            return self._stored(matched, payload, forward, n_query, shards, pairs, fanin,
                                groups) + shards * self.rtree_fixed
        distinct = 1.0 if groups is None else min(1.0, groups / max(1, pairs))
        return self._stored(matched, payload, forward, n_query, shards, pairs, fanin, groups,
                            (in_cells + out_cells) * distinct)

    def _stored(self, matched: bool, payload: bool, forward: bool, n_query: int, shards: int,
                pairs: int, fanin: float, groups: int | None, cells: float = 0.0) -> float:
        if payload:
            distinct = pairs if groups is None else max(1, groups)
            if forward:  # scan every pair and apply map_p
                return (shards * self.shard_fixed + pairs * self.scan_per_pair
                        + min(distinct, 256) * self.payload_per_group)
            return (shards * self.shard_fixed + n_query * self.lookup_per_cell
                    + min(n_query, distinct, 256) * self.payload_per_group)
        if matched:
            return (shards * self.shard_fixed + n_query * self.lookup_per_cell
                    + n_query * max(1.0, fanin) * self.decode_per_cell)
        return shards * self.shard_fixed + pairs * self.scan_per_pair + cells * self.scan_per_cell

    def reexec_cost(self, op_runtime_s: float | None, total_cells: int, rerun_cells: int,
                    tasks: int, on_spark: bool, s_per_cell: float | None = None) -> float:
        """Re-executing ``rerun_cells`` of an operator's ``total_cells`` output cells in
        tracing mode, as ``tasks`` tiles: the one estimate both the query-time chooser
        (:class:`subzero.query.choice.MethodChoice`) and the strategy optimizer
        (:class:`optimizer.costs.CostModel`) use.

        Parameters
        ----------
        op_runtime_s : the operator's own run time without lineage, or None when unknown
            (then :attr:`reexec_per_cell` per re-run cell stands in for it).
        total_cells, rerun_cells : the operator's output cells, and those re-run.
        tasks : the tiles re-executed (one Spark task each).
        on_spark : re-executed as Spark tasks (a fixed cost per task) or on the driver.
        s_per_cell : seconds per re-run cell that earlier re-executions on the driver
            measured; when given, a driver estimate is that rate plus the fixed cost.

        Returns
        -------
        float
            Estimated seconds.

        Examples
        --------
        >>> c = QueryCosts(reexec_fixed_driver=0.5, trace_factor=2.0)
        >>> c.reexec_cost(10.0, 100, 10, 1, on_spark=False)   # a tenth of 10 s, traced
        2.5
        >>> c.reexec_cost(10.0, 100, 10, 1, on_spark=False, s_per_cell=0.1)
        1.5
        """
        if s_per_cell is not None and not on_spark:
            return self.reexec_fixed_driver + s_per_cell * rerun_cells
        frac = rerun_cells / max(1, total_cells)
        base = (op_runtime_s * frac if op_runtime_s is not None
                else rerun_cells * self.reexec_per_cell)
        fixed = tasks * self.reexec_fixed_task / 2 if on_spark else self.reexec_fixed_driver
        return fixed + base * self.trace_factor


def load_costs(path: str | Path | None = None) -> QueryCosts:
    """The calibrated constants if a calibration file exists, else the defaults."""
    p = Path(path) if path else CALIBRATION_FILE
    if p.exists():
        try:
            doc = json.loads(p.read_text())
            return QueryCosts.from_json(doc.get("query", doc))
        except (OSError, ValueError, TypeError):
            pass
    return QueryCosts()
