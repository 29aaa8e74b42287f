"""FullOne (paper VI-B, Figure 4.2): one entry per key cell referencing a shared cell set.

Backward-optimized, the key cells are the output cells (one cell index ``k``); each record
holds one cell set per input. Forward-optimized, the key cells are the input cells, one
cell index ``k<i>`` per input, each record holding the output cells. Lookups in the matched
direction read the touched 256-cell runs of the index and the records they reference; the
other direction scans the whole index (paper VII: a mismatched index costs a scan).

Records are shared: keys with identical sets point at one record. Per value side the
encoder picks *absolute* or *relative* sets (relative to the key cell, so translated sets
are identical: the per-pixel box of a stencil is one record for every interior pixel). It
counts distinct sets both ways with a translation-aware hash and takes the form with fewer
(ties: relative, whose first index is a small offset) on an evenly spaced sample of at
most 65,536 keys; relative needs key and value arrays of the same shape.

>>> FullOne("bwd").name, FullOne("fwd").direction.value
('FullOne', 'fwd')
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from encoders.base import EncodedShard, Encoding, ShardData, check_deadline
from encoders.formats.codec import (add_anchors, decode_sets, scatter_lists, set_token_count,
                                    set_tokens)
from encoders.formats.csr import (
    compact_ids,
    interleave,
    offsets_from_lengths,
    segment_any,
    take_rows,
    uniq,
    uniq_inverse,
)
from encoders.formats.hashing import dedup_rows, finish_hash, poly_hash
from encoders.formats.varint import varint_encode
from encoders.layouts import cellindex, fewcells
from encoders.layouts.keyspace import lin_range_box, touches
from encoders.layouts.pairs import KeyGroups, group_keys, lineage_pairs
from subzero.cells import Ragged
from subzero.frontier import is_dense, member
from subzero.lineage import PairBatch, ShardSpec
from subzero.modes import Direction

HEAP = "heap"
SCATTER_RECORDS = 256  # up to this many records may be scattered from their bytes
SAMPLE = 1 << 16  # keys hashed to choose absolute or relative sets


def choose_relative(g: KeyGroups, key_shape: Sequence[int], val_shapes: Sequence[Sequence[int]],
                    policy: str = "auto") -> list[bool]:
    """Per value side: store sets relative to the key cell? (see the module docstring)."""
    out = []
    for v, shp in zip(g.values, val_shapes):
        if policy == "never" or tuple(shp) != tuple(key_shape) or len(g.keys) == 0:
            out.append(False)
        elif policy == "always":
            out.append(True)
        else:
            # decide on an evenly spaced sample of keys: the choice only affects size
            n = len(g.keys)
            pick = uniq(np.linspace(0, n - 1, min(n, SAMPLE)).astype(np.int64))
            rows, inv, _ = uniq_inverse(g.src[pick])
            h, psum = poly_hash(*take_rows(v.values, v.offsets, rows))
            lens = np.diff(v.offsets)[rows][inv]
            hs, ps = h[inv], psum[inv]
            n_abs = len(uniq(finish_hash(hs, lens)))
            n_rel = len(uniq(finish_hash(hs - g.keys[pick] * ps, lens)))
            out.append(n_rel <= n_abs)
    return out


def side_records(g: KeyGroups, val_shapes: Sequence[Sequence[int]], relative: Sequence[bool]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Records (CSR bytes) for one keyed side and the record index of every key.

    A record is the token streams of the value sets, one after the other, as varints. With
    only absolute sets a record depends on the source row alone, so rows shared by many
    keys (a pair's output cells) are encoded once; a relative set depends on its key.
    """
    if any(relative):
        rows, key_rec, anchors = g.src, np.arange(len(g.keys), dtype=np.int64), g.keys
    else:
        rows, key_rec = compact_ids(g.src, int(g.src.max()) + 1 if len(g.src) else 0)
        anchors = None
    parts = []
    for v, shp, rel in zip(g.values, val_shapes, relative):
        tv, to = take_rows(v.values, v.offsets, rows)
        parts.append(set_tokens(tv, to, shp, anchors if rel else None))
    tok, toff = interleave(parts) if len(parts) > 1 else parts[0]
    b, blen = varint_encode(tok)
    cb = offsets_from_lengths(blen)
    return b, cb[toff], key_rec.reshape(-1).astype(np.int64)


def shared_heap(records: list[tuple[np.ndarray, np.ndarray]]
                ) -> tuple[np.ndarray, list[np.ndarray], int]:
    """Dedup records across sides into one heap: ``(heap, refs per side, unique count)``."""
    vals = np.concatenate([r[0] for r in records])
    offs = [np.zeros(1, dtype=np.int64)]
    base, counts = 0, []
    for v, o in records:
        offs.append(o[1:] + base)
        base += len(v)
        counts.append(len(o) - 1)
    offs = np.concatenate(offs)
    inv, first = dedup_rows(vals, offs)
    uv, uo = take_rows(vals, offs, first)
    heap, hoff = cellindex.build_heap(uv, uo)
    refs = hoff[inv].astype(np.uint64)
    out, s = [], 0
    for c in counts:
        out.append(refs[s:s + c])
        s += c
    return heap, out, len(first)


def decode_set(shard: ShardData, refs: np.ndarray, set_index: int,
               shapes: Sequence[Sequence[int]]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Set ``set_index`` of the records at ``refs``: decoded once per distinct record.

    Returns ``(values, offsets, relative, inverse)``: CSR sets per distinct record (relative
    ones still need their key cell added) and the distinct record of each ref.
    """
    uref, inv, _ = uniq_inverse(refs)
    body, boff = cellindex.read_records(shard.blob(HEAP), uref)
    tok, toff, _ = cellindex.record_tokens(body, boff, whole=True)
    pos = toff[:-1]
    for s in range(set_index):
        pos = pos + set_token_count(tok, pos, len(shapes[s]))
    vals, offs, rel, _ = decode_sets(tok, pos, shapes[set_index])
    return vals, offs, rel, inv.reshape(-1)


def union_for_keys(shard: ShardData, cells: np.ndarray, refs: np.ndarray, set_index: int,
                   shapes: Sequence[Sequence[int]], into: np.ndarray | None = None
                   ) -> np.ndarray | None:
    """Union of one set over the looked-up keys (sorted unique uint64).

    ``into`` (a flat bool array over the set's array): a large union (more than
    ``1/SPARSE_FRACTION`` of it, :func:`subzero.frontier.is_dense`) is set True there
    instead, sparing the sort, and None is returned.
    """
    if len(cells) == 0:
        return np.empty(0, dtype=np.uint64)
    if into is not None and len(shapes) == 1 and len(refs) <= SCATTER_RECORDS:
        # one set per record: large absolute lists go straight from bytes to the mask
        uref = uniq(refs)
        body, boff = cellindex.read_records(shard.blob(HEAP), uref)
        if is_dense(len(body), len(into)) and scatter_lists(body, boff, into):
            return None
    vals, offs, rel, inv = decode_set(shard, refs, set_index, shapes)
    if rel.any():
        vals, offs = take_rows(vals, offs, inv)
        vals = add_anchors(vals, offs, rel[inv], cells)
    elif len(offs) == 2:
        return vals  # one record: its set is sorted and distinct already
    if into is not None and is_dense(len(vals), len(into)):
        into[vals.astype(np.intp)] = True
        return None
    return uniq(vals)


def keys_hitting(shard: ShardData, cells: np.ndarray, refs: np.ndarray, set_index: int,
                 shapes: Sequence[Sequence[int]], q: np.ndarray) -> np.ndarray:
    """The key cells whose set meets ``q`` (a scan step)."""
    if len(cells) == 0:
        return cells
    vals, offs, rel, inv = decode_set(shard, refs, set_index, shapes)
    if not rel.any():
        return cells[segment_any(member(q, vals), offs)[inv]]
    vals, offs = take_rows(vals, offs, inv)
    vals = add_anchors(vals, offs, rel[inv], cells)
    return cells[segment_any(member(q, vals), offs)]


class FullOne(Encoding):
    """Full lineage, one index entry per key cell (see the module docstring).

    ``relative`` is ``"auto"`` (measure), ``"never"`` or ``"always"`` (for benchmarks).
    """

    name = "FullOne"
    payload = False
    directions = frozenset({Direction.BACKWARD, Direction.FORWARD})
    many = False
    into_mask = True

    def __init__(self, direction: Direction | str = Direction.BACKWARD,
                 relative: str = "auto") -> None:
        super().__init__(Direction(direction))
        self.relative = relative

    # -- encoding --------------------------------------------------------------------------
    def _sides(self, pairs: PairBatch, spec: ShardSpec
               ) -> list[tuple[str, Ragged, tuple, list[Ragged], list[tuple]]]:
        if self.direction is Direction.BACKWARD:
            return [("k", pairs.out, spec.out_shape, list(pairs.ins), list(spec.in_shapes))]
        return [(f"k{i}", pairs.ins[i], spec.in_shapes[i], [pairs.out], [spec.out_shape])
                for i in range(len(spec.in_shapes))]

    def encode(self, pairs: PairBatch | None, spec: ShardSpec) -> EncodedShard:
        meta, pairs = lineage_pairs(pairs, spec, self.name, self.direction.value)
        if pairs is None:
            return EncodedShard(meta=dict(meta, empty=True))
        records, keyed, spaces, rel_meta = [], [], {}, {}
        collisions = 0
        for table, key_side, key_shape, vals, val_shapes in self._sides(pairs, spec):
            g = group_keys(key_side, vals)
            collisions += g.collisions
            rel = choose_relative(g, key_shape, val_shapes, self.relative)
            b, bo, key_rec = side_records(g, val_shapes, rel)
            records.append((b, bo))
            keyed.append((table, g.keys, key_rec))
            spaces[table] = lin_range_box(g.keys, key_shape)
            rel_meta[table] = rel
        heap, refs, n_unique = shared_heap(records)
        tables = [cellindex.index_table(t, keys, r[key_rec])
                  for (t, keys, key_rec), r in zip(keyed, refs)]
        meta.update(empty=False, key_spaces=spaces, relative=rel_meta,
                    keys=int(sum(len(k) for _, k, _ in keyed)), records=int(n_unique),
                    heap_bytes=int(len(heap)), collisions=int(collisions))
        return EncodedShard(tables=tables, blobs={HEAP: heap}, meta=meta)

    # -- lookups ---------------------------------------------------------------------------
    def _lookup(self, shard: ShardData, table: str, key_shape: Sequence[int], q: np.ndarray,
                set_index: int, shapes: Sequence[Sequence[int]], deadline: float | None,
                into: np.ndarray | None = None) -> np.ndarray | None:
        if shard.meta.get("empty"):
            return np.empty(0, dtype=np.uint64)
        space = shard.meta["key_spaces"].get(table)
        if len(q) <= fewcells.FEW_CELLS:  # a few cells: plain Python, same answer
            check_deadline(deadline)
            found = fewcells.lookup(shard, table,
                                    fewcells.touching(q.tolist(), space, key_shape))
            got = fewcells.union(shard, HEAP, found, set_index, shapes)
            if got is not None:
                if into is not None and is_dense(len(got), len(into)):
                    into[got.astype(np.intp)] = True  # as large answers always are
                    return None
                return got
            # long records: decode them vectorized (the keys are found already)
            cells = np.array([c for c, _ in found], dtype=np.uint64)
            refs = np.array([r for _, r in found], dtype=np.uint64)
            return union_for_keys(shard, cells, refs, set_index, shapes, into)
        if not touches(q, space, key_shape):
            return np.empty(0, dtype=np.uint64)
        cells, refs = cellindex.lookup(shard, table, q, deadline)
        check_deadline(deadline)
        return union_for_keys(shard, cells, refs, set_index, shapes, into)

    def _scan(self, shard: ShardData, table: str, q: np.ndarray, set_index: int,
              shapes: Sequence[Sequence[int]], deadline: float | None) -> np.ndarray:
        if shard.meta.get("empty") or len(q) == 0:
            return np.empty(0, dtype=np.uint64)
        hits = [keys_hitting(shard, c, r, set_index, shapes, q)
                for c, r in cellindex.scan(shard, table, deadline)]
        return uniq(np.concatenate(hits)) if hits else np.empty(0, dtype=np.uint64)

    def backward(self, shard: ShardData, out_lin: np.ndarray, i: int,
                 deadline: float | None = None, into: np.ndarray | None = None
                 ) -> np.ndarray | None:
        """As :meth:`Encoding.backward`; ``into`` as in :func:`union_for_keys`."""
        q = out_lin  # sorted unique uint64: the reader normalizes it
        m = shard.meta
        if self.direction is Direction.BACKWARD:
            return self._lookup(shard, "k", m["out_shape"], q, i, m["in_shapes"], deadline,
                                into)
        return self._scan(shard, f"k{i}", q, 0, [m["out_shape"]], deadline)

    def forward(self, shard: ShardData, in_lin: np.ndarray, i: int,
                deadline: float | None = None, into: np.ndarray | None = None
                ) -> np.ndarray | None:
        """As :meth:`Encoding.forward`; ``into`` as in :func:`union_for_keys`."""
        q = in_lin  # sorted unique uint64: the reader normalizes it
        m = shard.meta
        if self.direction is Direction.FORWARD:
            return self._lookup(shard, f"k{i}", m["in_shapes"][i], q, 0, [m["out_shape"]],
                                deadline, into)
        return self._scan(shard, "k", q, i, m["in_shapes"], deadline)
