"""PayOne (paper VI-B, Figure 4.4): one entry per output cell holding its payload.

The cell index ``k`` (see :mod:`encoders.layouts.cellindex`) maps every output cell to a
record in the heap holding its payload list. The paper duplicates the payload in every
entry; here identical payload lists are one shared record, so an operator whose payloads
come from a small vocabulary (a radius, a flag) costs about two bytes per output cell.
Payloads cannot be keyed by input cells, so PayOne is backward-optimized only; forward
queries read every pair (``payload_pairs(None)``) and apply ``map_p``, as the paper says.

>>> PayOne().directions == frozenset({Direction.BACKWARD})
True
"""

from __future__ import annotations

from itertools import accumulate
from typing import NamedTuple, Sequence

import numpy as np

from encoders.base import EncodedShard, Encoding, ShardData, check_deadline
from encoders.formats.csr import compact_ids, run_starts, take_rows
from encoders.formats.hashing import dedup_rows
from encoders.formats.payloads import join_bytes, payload_ids, read_section, section_tokens
from encoders.layouts import cellindex, fewcells
from encoders.layouts.keyspace import lin_range_box, touches
from encoders.layouts.pairs import group_keys, lineage_pairs
from subzero.cells import Ragged
from subzero.lineage import PairBatch, ShardSpec
from subzero.modes import Direction

HEAP = "heap"


class PayloadRecords(NamedTuple):
    """What one shard holds for some output cells (:meth:`PayOne.payload_records`):
    ``cells``, one row per record (the cells pointing at it), and ``records``, the
    records' bytes (CSR, in the same order)."""

    cells: Ragged
    records: Ragged


class FewRecords(NamedTuple):
    """:class:`PayloadRecords` of a few cells, as Python lists (:meth:`PayOne._few_records`):
    ``cells``, per record the cells pointing at it (sorted), and ``records``, its bytes.
    Several shards' decode in plain Python (:func:`fewcells.payload_rows`) with a handful of
    numpy calls in all, where each shard's arrays would cost dozens (a query step meeting
    9 shards of 28 cells each, BQ0 at 64x)."""

    cells: list[list[int]]
    records: list[bytes]

    def arrays(self) -> PayloadRecords:
        """The same records as :class:`PayloadRecords`."""
        return PayloadRecords(
            Ragged(np.array([c for cs in self.cells for c in cs], dtype=np.uint64),
                   np.array(list(accumulate(map(len, self.cells), initial=0)), np.int64)),
            Ragged(np.frombuffer(b"".join(self.records), dtype=np.uint8),
                   np.array(list(accumulate(map(len, self.records), initial=0)), np.int64)))


def group_cells_by_ref(cells: np.ndarray, refs: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(distinct refs, cells sorted by ref, CSR offsets of each ref's cells)``."""
    order = np.lexsort((cells, refs))
    c, r = cells[order], refs[order]
    starts = run_starts(r)
    return r[starts], c, np.append(starts, len(r)).astype(np.int64)


class PayOne(Encoding):
    """Payload lineage, one index entry per output cell (see the module docstring)."""

    name = "PayOne"
    payload = True
    directions = frozenset({Direction.BACKWARD})
    many = False
    into_mask = False

    def encode(self, pairs: PairBatch | None, spec: ShardSpec) -> EncodedShard:
        meta, pairs = lineage_pairs(pairs, spec, self.name, self.direction.value)
        if pairs is None:
            return EncodedShard(meta=dict(meta, empty=True))
        pid, first = payload_ids(pairs.payload)
        g = group_keys(pairs.out, [Ragged.from_singletons(pid.astype(np.uint64))])
        ext = g.values[0]
        # one record per distinct payload list; keys share them. Without colliding keys
        # every list is one pair's payload: its payload id numbers it already
        if g.collisions:
            rinv, rfirst = dedup_rows(ext.values, ext.offsets)
        else:
            rinv, rfirst = pid, first
        used, key_rec = compact_ids(rinv[g.src], len(rfirst))
        lv, lo = take_rows(ext.values, ext.offsets, rfirst[used])
        (tok, toff), raw = section_tokens(lv, lo, pairs.payload, first)
        body, boff = join_bytes(tok, toff, raw)
        heap, hoff = cellindex.build_heap(body, boff)
        refs = hoff[key_rec.reshape(-1)].astype(np.uint64)
        meta.update(empty=False, key_spaces={"k": lin_range_box(g.keys, spec.out_shape)},
                    keys=int(len(g.keys)), records=int(len(used)), payloads=int(len(first)),
                    heap_bytes=int(len(heap)), collisions=int(g.collisions))
        return EncodedShard(tables=[cellindex.index_table("k", g.keys, refs)],
                            blobs={HEAP: heap}, meta=meta)

    def payload_pairs(self, shard: ShardData, out_lin: np.ndarray | None,
                      deadline: float | None = None) -> PairBatch | None:
        if out_lin is None:
            if shard.meta.get("empty"):
                return None
            got = list(cellindex.scan(shard, "k", deadline))
            cells = np.concatenate([c for c, _ in got]) if got else np.empty(0, np.uint64)
            refs = np.concatenate([r for _, r in got]) if got else np.empty(0, np.uint64)
            found = self._records(shard, cells, refs, deadline)
        else:
            found = self.payload_records(shard, out_lin, deadline)
        return None if found is None else self.pairs_from_records([found])

    def payload_records(self, shard: ShardData, out_lin: np.ndarray,
                        deadline: float | None = None, at: np.ndarray | None = None
                        ) -> PayloadRecords | None:
        """The shard's half of :meth:`payload_pairs` for the output cells ``out_lin``
        (``at``: their coordinates, when known): the cells found, grouped by the record
        they point at, and those records' bytes, not yet decoded; None when none is found.
        :meth:`pairs_from_records` decodes the records of several shards at once (a
        query's step meets several: one decoding instead of one per shard)."""
        m = shard.meta
        if m.get("empty"):
            return None
        if len(out_lin) <= fewcells.FEW_CELLS:  # a few cells: plain Python, same records
            check_deadline(deadline)
            space = m["key_spaces"]["k"]
            q = fewcells.touching(out_lin.tolist(), space, m["out_shape"])
            return self._few_records(shard, fewcells.lookup(shard, "k", q) if q else [])
        if not touches(out_lin, m["key_spaces"]["k"], m["out_shape"], at):
            return None
        cells, refs = cellindex.lookup(shard, "k", out_lin, deadline)
        return self._records(shard, cells, refs, deadline)

    @staticmethod
    def _few_records(shard: ShardData, found: list[tuple[int, int]]) -> FewRecords | None:
        """:meth:`_records` of a few ``(cell, ref)`` (sorted by cell) in plain Python."""
        if not found:
            return None
        by_ref: dict[int, list[int]] = {}
        for c, r in found:
            by_ref.setdefault(r, []).append(c)
        refs = sorted(by_ref)
        return FewRecords([by_ref[r] for r in refs],
                          fewcells.records(shard.blob(HEAP), refs))

    @staticmethod
    def _records(shard: ShardData, cells: np.ndarray, refs: np.ndarray,
                 deadline: float | None) -> PayloadRecords | None:
        if len(cells) == 0:
            return None
        check_deadline(deadline)
        uref, c, coff = group_cells_by_ref(cells, refs)
        body, boff = cellindex.read_records(shard.blob(HEAP), uref)
        return PayloadRecords(Ragged(c, coff), Ragged(body, boff))

    @staticmethod
    def pairs_from_records(found: Sequence[PayloadRecords | FewRecords | None]
                           ) -> PairBatch | None:
        """The payload pairs of the records :meth:`payload_records` found, of one shard
        or several (the shards' pairs one after the other, as :meth:`PairBatch.concat` of
        each shard's :meth:`payload_pairs`): every record's payload section decoded in one
        pass (a record ends its varints, whatever heap it came from); in plain Python when
        every shard found a few cells' records (:class:`FewRecords`)."""
        found = [f for f in found if f is not None]
        if not found:
            return None
        if all(type(f) is FewRecords for f in found):
            rows = fewcells.payload_rows([c for f in found for c in f.cells],
                                         [r for f in found for r in f.records])
            if rows is not None:
                return PairBatch(Ragged(*rows[0]), payload=Ragged(*rows[1]))
        found = [f.arrays() if type(f) is FewRecords else f for f in found]
        cells = Ragged.concat([f.cells for f in found])
        records = Ragged.concat([f.records for f in found])
        body, boff = records.values, records.offsets
        tok, toff, ends = cellindex.record_tokens(body, boff)
        npay, payloads = read_section(body, tok, ends, toff[:-1])
        rows = np.repeat(np.arange(len(boff) - 1), npay)
        ov, oo = take_rows(cells.values, cells.offsets, rows)
        return PairBatch(Ragged(ov, oo), payload=payloads)
