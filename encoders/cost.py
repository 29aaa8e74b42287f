"""A small size and cost model per encoding, for the strategy optimizer.

Inputs are the statistics the catalog keeps per shard (``pairs``, ``out_cells``, ``fanin``,
``payload_bytes``; see :func:`encoders.pairs.pair_stats`). With ``K`` key cells,
``P`` pairs, fanout ``f = K / P`` and fanin ``n`` (input cells per output cell):

- a cell set of ``n`` nearby cells costs ``SET_FIXED + n * CELL_BYTES`` bytes (varint
  deltas; a full rectangle costs ``SET_FIXED + 4`` whatever its size);
- FullOne backward: ``K * ITEM`` (index) ``+ K / RUN_FILL * RUN_OVERHEAD`` (one LMDB node
  per 256-cell run holding key cells) ``+ P * (SET_FIXED + n * CELL_BYTES)`` (one record
  per pair, shared by its output cells); forward: the same with ``P * n`` input cells as
  keys (an upper bound: overlapping pairs share keys) and records of ``f`` output cells;
- PayOne: ``K * ITEM + K / RUN_FILL * RUN_OVERHEAD + D * payload`` with ``D`` distinct
  payloads (``P`` in the worst case);
- FullMany / PayMany: ``P * (ENTRY_OVERHEAD + set(f) + set(n) or payload)`` in LMDB plus
  ``P * RTREE_ENTRY`` for the R-tree. Like FullOne's shared records, FullMany's groups of
  translated one-output-cell pairs (:mod:`encoders.relgroups`) are not modelled: the
  statistics cannot tell translated lineage from scattered lineage, so for per-pixel
  lineage this is an upper bound (measured shard sizes replace it once a run has them).

Time: writing costs ``WRITE_PER_BYTE`` per stored byte plus ``WRITE_PER_CELL`` per cell
encoded; a matched lookup costs ``LOOKUP_FIXED`` plus ``per cell`` (index run reads for
*One, R-tree probes for *Many); a mismatched lookup scans every record. The constants are
fitted to ``benchmarks/bench_encoders.py`` on the reference machine (2 cores); they are
meant for ranking strategies, not for promises.

>>> from subzero.modes import Direction
>>> e = estimate_full_one(Direction.BACKWARD, pairs=100_000, out_cells=100_000, fanin=10)
>>> 1e6 < e.disk_bytes < 5e6
True
"""

from __future__ import annotations

from encoders.base import Estimate
from subzero.modes import Direction

ITEM = 4.0            # bytes per key cell in a cell index (1 offset + 3 ref bytes)
RUN_OVERHEAD = 34.0   # LMDB node header + key + sub-page header per 256-cell run
RUN_FILL = 26.0       # key cells per run at 10% density (clustered lineage fills more)
SET_FIXED = 2.0       # length prefix + header
CELL_BYTES = 1.6      # varint delta per cell of a set of nearby cells
ENTRY_OVERHEAD = 18.0 # LMDB node header (8) + page pointer (2) + 8-byte key
RTREE_ENTRY = 46.0    # libspatialindex: 2-d box (32) + id (8) + length (4), pages ~full
WRITE_PER_BYTE = 4e-8
WRITE_PER_CELL = 1.5e-7
LOOKUP_FIXED = 2e-4
ONE_PER_CELL = 2e-6   # one index run read + record decode
MANY_PER_CELL = 8e-6  # one R-tree probe + entry read + decode
SCAN_PER_RECORD = 1e-6


def _set_bytes(n: float) -> float:
    return SET_FIXED + max(0.0, n) * CELL_BYTES


def _time(disk: float, cells: float, records: float, per_cell: float) -> Estimate:
    return Estimate(disk_bytes=disk, write_s=disk * WRITE_PER_BYTE + cells * WRITE_PER_CELL,
                    lookup_fixed_s=LOOKUP_FIXED, lookup_per_cell_s=per_cell,
                    scan_s=LOOKUP_FIXED + records * SCAN_PER_RECORD)


def estimate_full_one(direction: Direction, pairs: int, out_cells: int, fanin: float,
                      n_inputs: int = 1) -> Estimate:
    pairs, k = max(1, pairs), max(0, out_cells)
    fanout = k / pairs
    if Direction(direction) is Direction.BACKWARD:
        # every output cell is a key; a pair's keys share its record (fanout 1: one each)
        keys, records, per_rec = k, pairs, fanin
    else:
        # every input cell of a pair is a key (no overlap assumed: an upper bound) and the
        # keys of a pair share the record of its output cells
        keys, records, per_rec = pairs * max(1.0, fanin), pairs, fanout
    index = keys * ITEM + keys / RUN_FILL * RUN_OVERHEAD
    disk = index + records * _set_bytes(per_rec)
    return _time(disk, k * max(1.0, fanin), keys, ONE_PER_CELL)


def estimate_full_many(direction: Direction, pairs: int, out_cells: int, fanin: float,
                       n_inputs: int = 1) -> Estimate:
    pairs = max(1, pairs)
    fanout = out_cells / pairs
    disk = pairs * (ENTRY_OVERHEAD + _set_bytes(fanout) + _set_bytes(fanin)) \
        + pairs * RTREE_ENTRY * (n_inputs if Direction(direction) is Direction.FORWARD else 1)
    return _time(disk, pairs * (fanout + fanin), pairs, MANY_PER_CELL)


def estimate_pay_one(pairs: int, out_cells: int, payload_bytes: float,
                     distinct_payloads: int | None = None) -> Estimate:
    k = max(0, out_cells)
    d = pairs if distinct_payloads is None else distinct_payloads
    disk = k * ITEM + k / RUN_FILL * RUN_OVERHEAD + d * (SET_FIXED + payload_bytes)
    return _time(disk, k, k, ONE_PER_CELL)


def estimate_pay_many(pairs: int, out_cells: int, payload_bytes: float) -> Estimate:
    pairs = max(1, pairs)
    fanout = out_cells / pairs
    disk = pairs * (ENTRY_OVERHEAD + _set_bytes(fanout) + SET_FIXED + payload_bytes
                    + RTREE_ENTRY)
    return _time(disk, out_cells, pairs, MANY_PER_CELL)
