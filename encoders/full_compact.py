"""FullCompact: Full lineage compressed to its regular structure, queried in place.

Operators that declare FULL lineage write a pair per cell (or per region) however regular
it is. FullCompact takes the same pairs as FullOne, groups them by key cell (output cells
backward-optimized, input-``i`` cells per input forward-optimized), and stores every key
cell whose value sets follow a pattern that many key cells of its tile share as one group
``(K, P)`` (:mod:`encoders.layouts.patterns`: the identity, a box at a fixed offset, a box
clipped by a border, a row's or a whole array's absolute set). The key cells left over, the
*residue* (exceptions, random pairs), are stored exactly as :class:`~encoders.full_one.
FullOne` stores its key cells: a cell index ``k`` / ``k<i>`` into a shared record heap.

A group is kept only when its record costs fewer bytes than its key cells would in the
residue, and a shard whose groups save nothing is written as the residue alone, so
lineage with no regular structure is never bigger than FullOne's.

Lookups run on the compressed form. In the keyed direction the groups whose key range
holds a query cell are read (one LMDB read of their records) and, per run of ``K``, the
query cells inside it are found by binary search and shifted by the pattern's offsets;
the residue is looked up as FullOne does. In the other direction every group is read and
``K & (q - O)`` is computed per group, as FullMany's grouped entries do
(:func:`encoders.layouts.relgroups.forward_cells`); the residue is scanned as FullOne's.

>>> FullCompact("fwd").name, FullCompact("bwd").direction.value
('FullCompact', 'bwd')
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from encoders.base import EncodedShard, Encoding, ShardData, Table, check_deadline
from encoders.formats.csr import uniq
from encoders.full_one import FullOne, choose_relative, shared_heap, side_records
from encoders.layouts import cellindex, pairtable, patterns
from encoders.layouts.keyspace import lin_range_box
from encoders.layouts.pairs import KeyGroups, group_keys, lineage_pairs
from subzero.cells import Ragged
from subzero.errors import ModeError
from subzero.frontier import Members
from subzero.lineage import PairBatch, ShardSpec
from subzero.modes import Direction

HEAP = "heap"
EMPTY = np.empty(0, dtype=np.uint64)
COMPACT = "auto"  # the default policy (see FullCompact)
DENSE_FACTOR = 8  # answers of at least 1/8 of their array are deduplicated with a mask


def parse_compact(compact: str) -> str:
    """``compact`` as one of ``"auto"``, ``"always"``, ``"never"`` (else ModeError)."""
    if compact not in ("auto", "always", "never"):
        raise ModeError(f"compact must be 'auto', 'always' or 'never'. Got {compact!r} "
                        "instead.")
    return compact


def _sorted_unique(parts: list[np.ndarray], size: int) -> np.ndarray:
    """The sorted distinct cells of ``parts`` (cells of an array of ``size``): through a
    dense mask when they are many (no sort), else :func:`uniq`."""
    if not parts:
        return EMPTY
    x = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if len(x) * DENSE_FACTOR < size or len(x) < 1024:
        return uniq(x)
    mask = np.zeros(size, dtype=bool)
    mask[x.astype(np.intp)] = True
    return np.flatnonzero(mask).astype(np.uint64)


class FullCompact(Encoding):
    """Full lineage as pattern groups plus a FullOne residue (see the module docstring).

    ``min_group``: key cells a pattern needs to become a group; ``tile``: key cells per
    tile (a group's cells lie in one tile); ``compact``: ``"auto"`` (groups where they
    save bytes), ``"always"`` (every group that forms: for tests) or ``"never"`` (the
    residue alone: FullOne's layout, for benchmarks). None: the module's defaults
    (:data:`encoders.layouts.patterns.MIN_GROUP`, :data:`~encoders.layouts.patterns.TILE`,
    :data:`encoders.full_compact.COMPACT`).
    """

    name = "FullCompact"
    payload = False
    directions = frozenset({Direction.BACKWARD, Direction.FORWARD})
    many = False
    into_mask = False

    def __init__(self, direction: Direction | str = Direction.BACKWARD,
                 min_group: int | None = None, tile: int | None = None,
                 compact: str | None = None) -> None:
        super().__init__(Direction(direction))
        self.min_group = int(patterns.MIN_GROUP if min_group is None else min_group)
        self.tile = int(patterns.TILE if tile is None else tile)
        self.compact = parse_compact(COMPACT if compact is None else compact)
        self._one = FullOne(self.direction)

    # -- encoding --------------------------------------------------------------------------
    def _sides(self, pairs: PairBatch, spec: ShardSpec
               ) -> list[tuple[str, Ragged, tuple, list[Ragged], list[tuple]]]:
        """``(table suffix, key side, key shape, value sides, value shapes)`` per index."""
        if self.direction is Direction.BACKWARD:
            return [("", pairs.out, spec.out_shape, list(pairs.ins), list(spec.in_shapes))]
        return [(str(i), pairs.ins[i], spec.in_shapes[i], [pairs.out], [spec.out_shape])
                for i in range(len(spec.in_shapes))]

    def encode(self, pairs: PairBatch | None, spec: ShardSpec) -> EncodedShard:
        meta, pairs = lineage_pairs(pairs, spec, self.name, self.direction.value)
        if pairs is None:
            return EncodedShard(meta=dict(meta, empty=True))
        sides = []
        for t, key_side, key_shape, vals, val_shapes in self._sides(pairs, spec):
            g = group_keys(key_side, vals)
            p = None
            if self.compact != "never":
                p = patterns.build(g.keys, g.src, g.values, key_shape, val_shapes,
                                   self.min_group, self.tile, pay=self.compact == "auto")
            sides.append((t, g, key_shape, val_shapes, p))
        shard = self._shard(meta, sides)
        grouped = sum(len(p.rows) for *_, p in sides if p is not None)
        keys = sum(len(g.keys) for _, g, *_ in sides)
        if self.compact == "auto" and 0 < grouped < keys // 2:
            # few keys grouped: make sure the groups pay (each does by its own estimate)
            plain = self._shard(meta, [(t, g, ks, vs, None) for t, g, ks, vs, _ in sides])
            if plain.logical_bytes <= shard.logical_bytes:
                return plain
        return shard

    def _shard(self, meta: dict, sides: list) -> EncodedShard:
        meta = dict(meta, empty=False)
        tables, blobs, records, keyed = [], {}, [], []
        spaces, rel_meta, info = {}, {}, {}
        collisions, n_keys = 0, 0
        for t, g, key_shape, val_shapes, p in sides:
            collisions += g.collisions
            n_keys += len(g.keys)
            if p is None:
                res = g
            else:
                left = np.ones(len(g.keys), dtype=bool)
                left[p.rows] = False
                res = KeyGroups(g.keys[left], g.src[left], g.values, 0)
                tables.append(Table("g" + t, np.arange(len(p), dtype=np.uint64),
                                    values=Ragged(p.records, p.record_offsets)))
                blobs["r" + t] = p.ranges()
            info[t] = {"groups": 0 if p is None else len(p), "residue": int(len(res.keys)),
                       "relative_groups": 0 if p is None else int(p.relative.sum())}
            if len(res.keys):
                rel = choose_relative(res, key_shape, val_shapes, "auto")
                b, bo, key_rec = side_records(res, val_shapes, rel)
                records.append((b, bo))
                keyed.append(("k" + t, res.keys, key_rec))
                spaces["k" + t] = lin_range_box(res.keys, key_shape)
                rel_meta["k" + t] = rel
        n_records = 0
        if records:
            heap, refs, n_records = shared_heap(records)
            tables += [cellindex.index_table(name, keys, r[key_rec])
                       for (name, keys, key_rec), r in zip(keyed, refs)]
            blobs[HEAP] = heap
        meta.update(key_spaces=spaces, relative=rel_meta, compact=info, keys=int(n_keys),
                    groups=int(sum(v["groups"] for v in info.values())),
                    records=int(n_records + sum(v["groups"] for v in info.values())),
                    collisions=int(collisions))
        return EncodedShard(tables=tables, blobs=blobs, meta=meta)

    # -- lookups ---------------------------------------------------------------------------
    def _keyed(self, shard: ShardData, t: str, key_shape: Sequence[int], q: np.ndarray,
               j: int, val_shapes: Sequence[Sequence[int]], deadline: float | None
               ) -> np.ndarray:
        """Side ``j``'s cells of the key cells ``q`` (the index's own direction)."""
        info = shard.meta["compact"][t]
        res = []
        if info["groups"]:
            check_deadline(deadline)
            ids = patterns.groups_meeting(shard.blob("r" + t).view(np.uint64), q)
            if len(ids):
                for batch in pairtable.entries(shard, ids, deadline, "g" + t):
                    tok, toff, _ = pairtable.tokens(batch)
                    d = patterns.decode_keys(tok, toff[:-1])
                    v, o, rel = patterns.value_sets(tok, d, j, val_shapes)
                    res.append(patterns.keyed_cells(d, q, v, o, rel))
        if info["residue"]:
            got = self._one._lookup(shard, "k" + t, key_shape, q, j, val_shapes, deadline)
            res.append(np.asarray(got, dtype=np.uint64))
        return _sorted_unique(res, int(np.prod(val_shapes[j], dtype=np.int64)))

    def _unkeyed(self, shard: ShardData, t: str, key_shape: Sequence[int], q: np.ndarray,
                 j: int, val_shapes: Sequence[Sequence[int]], deadline: float | None
                 ) -> np.ndarray:
        """The key cells whose side-``j`` cells meet ``q`` (every group and the residue's
        whole index are read: the mismatched direction)."""
        info = shard.meta["compact"][t]
        res = []
        if info["groups"]:
            shape = tuple(val_shapes[j])
            members = Members(q, int(np.prod(shape, dtype=np.int64)))
            same = key_shape if shape == tuple(key_shape) else None
            for batch in pairtable.entries(shard, None, deadline, "g" + t):
                tok, toff, _ = pairtable.tokens(batch)
                d = patterns.decode_keys(tok, toff[:-1])
                v, o, rel = patterns.value_sets(tok, d, j, val_shapes)
                res.append(patterns.unkeyed_cells(d, q, members, v, o, rel, same, deadline))
        if info["residue"]:
            res.append(self._one._scan(shard, "k" + t, q, j, val_shapes, deadline))
        return _sorted_unique(res, int(np.prod(key_shape, dtype=np.int64)))

    def backward(self, shard: ShardData, out_lin: np.ndarray, i: int,
                 deadline: float | None = None) -> np.ndarray:
        m = shard.meta
        if m.get("empty") or len(out_lin) == 0:
            return EMPTY
        if self.direction is Direction.BACKWARD:
            return self._keyed(shard, "", m["out_shape"], out_lin, i, m["in_shapes"],
                               deadline)
        return self._unkeyed(shard, str(i), m["in_shapes"][i], out_lin, 0, [m["out_shape"]],
                             deadline)

    def forward(self, shard: ShardData, in_lin: np.ndarray, i: int,
                deadline: float | None = None) -> np.ndarray:
        m = shard.meta
        if m.get("empty") or len(in_lin) == 0:
            return EMPTY
        if self.direction is Direction.FORWARD:
            return self._keyed(shard, str(i), m["in_shapes"][i], in_lin, 0, [m["out_shape"]],
                               deadline)
        return self._unkeyed(shard, "", m["out_shape"], in_lin, i, m["in_shapes"], deadline)
