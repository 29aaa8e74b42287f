"""The per-pair layout shared by FullMany and PayMany: an entry table plus R-trees.

Entries
    One plain LMDB table ``e``: key = entry number (8-byte big-endian, written in append
    mode), value = the entry's record: varint tokens of its output cell set, then of its
    input cell sets (FullMany) or a payload section (PayMany). Pairs whose key sets are
    identical are merged into one entry first (decode, union, re-encode).

R-trees
    One per key space, bulk-loaded over the bounding box of each entry's key cells
    (``out`` when backward-optimized; ``in<i>`` per input when forward-optimized). A lookup
    covers the frontier exactly with runs along the last axis, asks the R-tree for entries
    meeting any run, reads those entries and keeps the ones whose key cells really meet the
    frontier (boxes are only a filter). When the frontier has so many runs that probing
    would cost more than reading every entry, it scans instead (:func:`candidates`).

FullMany adds a second table of grouped entries (:mod:`encoders.layouts.relgroups`) whose
R-tree boxes share these trees, with ids after the plain entries.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from encoders.base import ShardData, SpatialIndex, Table, check_deadline
from encoders.layouts.cellindex import record_tokens
from encoders.layouts.keyspace import row_bboxes, run_boxes
from subzero.cells import Ragged

TABLE = "e"
_BATCH = 16384  # entries per read (deadline checks in between)
# an R-tree probe costs about as much as reading and decoding this many entries (tuned by
# the microbenchmark, benchmarks/bench_encoders.py)
PROBE_PER_ENTRY = 4.0


def entry_table(values: np.ndarray, offsets: np.ndarray) -> Table:
    n = len(offsets) - 1
    return Table(TABLE, np.arange(n, dtype=np.uint64), values=Ragged(values, offsets))


def spatial_index(name: str, sets: Ragged, shape: Sequence[int]) -> SpatialIndex:
    """R-tree boxes over the non-empty rows of ``sets`` (id = entry number)."""
    rows, mins, maxs = row_bboxes(sets.values, sets.offsets, shape)
    return SpatialIndex(name, rows.astype(np.int64), mins.astype(np.float64),
                        maxs.astype(np.float64))


def candidates(shard: ShardData, tree: str, q: np.ndarray, shape: Sequence[int]
               ) -> np.ndarray | None:
    """Entry numbers an R-tree finds for the cells ``q``, or None to scan every entry
    (FullMany's grouped entries count as entries: R-tree ids past ``entries`` are theirs)."""
    mins, maxs = run_boxes(q, shape)
    n = int(shard.meta.get("entries", 0)) + int(shard.meta.get("groups", 0))
    if len(mins) * PROBE_PER_ENTRY > max(1, n):
        return None
    return shard.rtree_query(tree, mins, maxs).astype(np.uint64)


def entries(shard: ShardData, ids: np.ndarray | None, deadline: float | None,
            table: str = TABLE) -> Iterator[Ragged]:
    """Entry records of ``ids`` (every entry when None), in batches."""
    if ids is None:
        for _, vals in shard.scan(table, _BATCH):
            check_deadline(deadline)
            yield vals
        return
    for s in range(0, len(ids), _BATCH):
        check_deadline(deadline)
        _, vals = shard.values(table, ids[s:s + _BATCH])
        yield vals


def tokens(batch: Ragged) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tokens, token offsets, token last bytes)`` of a batch of entry records."""
    return record_tokens(np.asarray(batch.values, dtype=np.uint8),
                         np.asarray(batch.offsets, dtype=np.int64))


__all__ = ["TABLE", "entry_table", "spatial_index", "candidates", "entries", "tokens"]
