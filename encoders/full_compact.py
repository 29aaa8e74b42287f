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

A forward index may also be built the other way round (*swapped*, table ``h<i>``): the
output cells grouped by their input-``i`` pattern as the backward index groups them,
with, per group, the range of input cells it reaches (blob ``s<i>``), and only the pairs
of the output cells left over keyed by input cell. A cleaner's flagged pixel is one 5 x 5
box keyed by output cell but 25 patterns keyed by input cell; the smaller of the two
builds is kept. Where input and output share a shape, the output cells left over may stay
keyed by output cell too (cell index ``b<i>``, FullOne's layout), with the offsets their
sets reach, linear and per axis (``reach``, ``reach_axes``): a lookup by input cell reads
only the keys within reach of its query cells (a cosmic ray's boxes of several sizes are a
few relative records keyed by output cell, a distinct set of output cells per input cell
the other way).

Box lineage (:class:`~subzero.lineage.BoxedPairs`: ``ctx.lwrite_box``, identity
``lwrite_pairs`` batches, the ``udf.cells`` decorator) is taken as it is: each part's
groups come from its mask (:mod:`encoders.layouts.boxgroups`), in both directions, and
only the cells those leave over are grouped from pairs, so a million pixels that keep
their value cost a mask, not a pair each.

Lookups run on the compressed form. In the keyed direction the groups whose key range
holds a query cell are read (one LMDB read of their records) and, per run of ``K``, the
query cells inside it are found by binary search and shifted by the pattern's offsets;
the residue is looked up as FullOne does (a few query cells: in plain Python, see
:mod:`encoders.layouts.fewpatterns`; groups outside the query cells' tiles are skipped
unread). Swapped groups are read as the other direction reads groups. In the other
direction every group is read and
``K & (q - O)`` is computed per group, as FullMany's grouped entries do
(:func:`encoders.layouts.relgroups.forward_cells`); the residue is scanned as FullOne's.

>>> FullCompact("fwd").name, FullCompact("bwd").direction.value
('FullCompact', 'bwd')
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from encoders.base import EncodedShard, Encoding, ShardData, Table, check_deadline
from encoders.formats.csr import offsets_from_lengths, take_rows, uniq
from encoders.full_one import (FullOne, choose_relative, keys_hitting, shared_heap,
                               side_records)
from encoders.layouts import boxgroups, cellindex, fewcells, fewpatterns, pairtable, patterns
from encoders.layouts.keyspace import coords, lin_range_box
from encoders.layouts.pairs import KeyGroups, group_keys, lineage_pairs, spec_meta
from encoders.layouts.relgroups import tile_ids, tile_shape
from subzero.cells import Ragged
from subzero.errors import ModeError
from subzero.frontier import Members
from subzero.lineage import BoxedPairs, PairBatch, ShardSpec
from subzero.modes import Direction

HEAP = "heap"
EMPTY = np.empty(0, dtype=np.uint64)
COMPACT = "auto"  # the default policy (see FullCompact)
DENSE_FACTOR = 8  # answers of at least 1/8 of their array are deduplicated with a mask
#: forward indexes built the other way round (:meth:`FullCompact._swapped_sides`):
#: ``"auto"`` when that is smaller, ``"always"`` whenever a group forms (for tests)
SWAPPED = "auto"
#: a swapped index's left-over output cells kept keyed by output cell (see
#: :meth:`FullCompact._swapped_sides`): ``"auto"`` when that is smaller, ``"always"``
#: wherever the shapes allow it, ``"never"`` (for tests)
OUTKEYED = "auto"
#: rows of the keys' boxes of reach searched at most (see :func:`_in_reach`)
REACH_ROWS = 1 << 20


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


def _ranges(shard: ShardData, t: str, info: dict, kind: str = "r") -> np.ndarray:
    """Side ``t``'s range blob (``kind`` ``"r"``: its groups' key ranges, ``"s"``: the
    key-cell ranges its swapped groups reach) as uint64 ``lo, hi`` pairs (stored in 32
    bits where the key cells fit, see :meth:`FullCompact._shard`)."""
    raw = shard.blob(kind + t)
    if info.get("range_bytes" if kind == "r" else "swapped_range_bytes") == 4:
        return raw.view(np.uint32).astype(np.uint64)
    return raw.view(np.uint64)


def _meeting(shard: ShardData, t: str, info: dict, key_shape: Sequence[int], q: np.ndarray
             ) -> np.ndarray:
    """Ids of side ``t``'s groups that may hold a key cell of ``q``: their key range holds
    one, and (when the shard says its tile size) their tile, that of their first key cell,
    is one of ``q``'s tiles."""
    ranges = _ranges(shard, t, info)
    ids = patterns.groups_meeting(ranges, q)
    tile = info.get("tile")
    if tile is None or len(ids) < 2:
        return ids
    kmin = ranges.reshape(-1, 2)[ids.astype(np.intp), 0]
    if len(q) + len(ids) <= 4 * fewcells.FEW_CELLS:  # plain Python: a few cells and groups
        shape = tuple(int(x) for x in key_shape)
        want = {_tile_of(c, shape, int(tile)) for c in q.tolist()}
        keep = [k for k, c in enumerate(kmin.tolist()) if _tile_of(c, shape, int(tile)) in want]
        return ids[keep]
    mine = tile_ids(kmin, key_shape, int(tile))
    return ids[np.isin(mine, tile_ids(q, key_shape, int(tile)))]


@lru_cache(maxsize=64)
def _tiling(shape: tuple[int, ...], tile: int) -> tuple[tuple[int, int, int], ...]:
    """Per axis ``(cell stride, extent, tile extent)`` of :func:`encoders.layouts.relgroups.
    tile_shape`."""
    return tuple(zip(fewcells.py_strides(shape), shape, tile_shape(shape, tile)))


def _tile_of(c: int, shape: tuple[int, ...], tile: int) -> tuple[int, ...]:
    """The tile (per axis) of cell ``c``, as :func:`encoders.layouts.relgroups.tile_ids`."""
    return tuple((c // s) % n // e for s, n, e in _tiling(shape, tile))


def _reach(g: KeyGroups, shape: Sequence[int]) -> tuple[int, int, list[list[int]]]:
    """``(dlo, dhi, axes)``: the least and greatest ``v - k`` over the key cells ``k`` of
    ``g`` and the cells ``v`` of their (one) value side, both sides of ``shape``, linear
    and per axis (``[lo, hi]`` of the coordinates' differences): a value cell ``q`` is
    reached only by the keys in ``[q - dhi, q - dlo]``, and of those only by the ones
    whose box of reach holds it."""
    v, o = take_rows(np.asarray(g.values[0].values, dtype=np.uint64),
                     np.asarray(g.values[0].offsets, dtype=np.int64), g.src)
    nd = len(shape)
    if len(v) == 0:
        return 0, 0, [[0, 0]] * nd
    k = np.repeat(g.keys, np.diff(o))
    d = v.astype(np.int64) - k.astype(np.int64)
    dc = coords(v, shape)[:, :nd] - coords(k, shape)[:, :nd]
    return (int(d.min()), int(d.max()),
            [[int(x), int(y)] for x, y in zip(dc.min(axis=0), dc.max(axis=0))])


def _in_reach(keys: np.ndarray, q: np.ndarray, axes: Sequence[Sequence[int]],
              shape: Sequence[int]) -> np.ndarray:
    """Which of the key cells ``keys`` have a cell of ``q`` (sorted) in their box of reach
    (``axes``, see :func:`_reach`): per key, the rows of its box
    (:func:`encoders.layouts.patterns.box_rows`) are searched in ``q``. All of them when
    those rows are too many to list."""
    shape = tuple(int(x) for x in shape)
    nd = len(shape)
    if nd < 2 or len(keys) == 0:
        return np.ones(len(keys), dtype=bool)
    ax = np.asarray(axes, dtype=np.int64)
    top = np.asarray(shape, dtype=np.int64) - 1
    c = coords(keys, shape)[:, :nd]
    blo = np.clip(c + ax[:, 0], 0, top)
    bhi = np.clip(c + ax[:, 1], 0, top)
    some = np.flatnonzero(((c + ax[:, 0] <= top) & (c + ax[:, 1] >= 0)).all(axis=1))
    if int(np.prod(bhi[some, :-1] - blo[some, :-1] + 1, axis=1).sum()) > REACH_ROWS:
        return np.ones(len(keys), dtype=bool)
    owner, start, stop = patterns.box_rows(blo[some], bhi[some], shape)
    qi = q.astype(np.int64)
    hit = np.searchsorted(qi, start, side="left") < np.searchsorted(qi, stop, side="right")
    out = np.zeros(len(keys), dtype=bool)
    out[some[owner[hit]]] = True
    return out


def _reaching(shard: ShardData, table: str, q: np.ndarray, info: dict,
              val_shape: Sequence[int], deadline: float | None) -> np.ndarray:
    """The key cells of the cell index ``table`` whose set (cells of ``val_shape``, of the
    keys' shape too) meets the cells ``q`` (sorted unique): only the keys within reach
    (``info["reach"]``, see :func:`_reach`) of a query cell are read, from the index runs
    their windows touch, or the whole index when those are as many as its keys, and only
    those whose box of reach holds a query cell are decoded."""
    space = shard.meta["key_spaces"].get(table) or {}
    if not space.get("count") or len(q) == 0:
        return EMPTY
    if len(q) <= fewcells.FEW_CELLS:
        got = _few_reaching(shard, table, q.tolist(), info, space, val_shape)
        if got is not None:
            return np.array(sorted(got), dtype=np.uint64)
    reach = info["reach"]
    qi = q.astype(np.int64)
    lo = np.maximum(qi - int(reach[1]), int(space["lin"][0]))
    hi = np.minimum(qi - int(reach[0]), int(space["lin"][1]))
    ok = lo <= hi
    lo, hi = lo[ok], hi[ok]
    if len(lo) == 0:
        return EMPTY
    # windows of one width, clipped, are sorted by both ends: merge the touching ones
    new = np.ones(len(lo), dtype=bool)
    new[1:] = lo[1:] > hi[:-1] + 1
    s = np.flatnonzero(new)
    lo, hi = lo[s], hi[np.append(s[1:], len(hi)) - 1]
    bits = cellindex.bucket_bits(shard, table)
    rlo, rhi = lo >> bits, hi >> bits
    n = rhi - rlo + 1
    if int(n.sum()) < int(space["count"]):
        ro = offsets_from_lengths(n)
        runs = uniq((np.repeat(rlo, n) + np.arange(int(ro[-1]), dtype=np.int64)
                     - np.repeat(ro[:-1], n)).astype(np.uint64) << np.uint64(bits))
        check_deadline(deadline)
        k, items = shard.items(table, runs)
        batches = [cellindex._cells_refs(k, items, cellindex.low_bytes(bits))]
    else:
        batches = cellindex.scan(shard, table, deadline)
    size = int(np.prod(val_shape, dtype=np.int64))
    box = int(np.prod([hi_ - lo_ + 1 for lo_, hi_ in info["reach_axes"]], dtype=np.int64))
    out = []
    for cells, refs in batches:
        w = np.searchsorted(lo, cells.astype(np.int64), side="right") - 1
        inside = (w >= 0) & (cells.astype(np.int64) <= hi[np.maximum(w, 0)])
        cells, refs = cells[inside], refs[inside]
        if len(q) * box < size:  # else most boxes hold a query cell: test none
            near = _in_reach(cells, q, info["reach_axes"], val_shape)
            cells, refs = cells[near], refs[near]
        got = (_few_hitting(shard, cells, refs, q, val_shape)
               if len(q) + len(cells) <= fewcells.FEW_CELLS else None)
        out.append(keys_hitting(shard, cells, refs, 0, [val_shape], q) if got is None
                   else got)
    return uniq(np.concatenate(out)) if out else EMPTY


def _few_reaching(shard: ShardData, table: str, q: list[int], info: dict, space: dict,
                  val_shape: Sequence[int]) -> list[int] | None:
    """:func:`_reaching` of a few cells in plain Python: the index runs within reach of
    ``q`` read one by one (:meth:`encoders.base.ShardData.run_items`), their keys tested
    against the query cells' boxes of reach, the few left decoded
    (:func:`_few_hitting`). None when the runs or their items are too many for it."""
    (dlo, dhi), axes = info["reach"], info["reach_axes"]
    a, b = int(space["lin"][0]), int(space["lin"][1])
    bits = cellindex.bucket_bits(shard, table)
    spans = [(max(c - dhi, a) >> bits, min(c - dlo, b) >> bits) for c in q]
    if sum(max(0, y - x + 1) for x, y in spans) > fewcells.FEW_CELLS:
        return None
    runs = sorted({r for x, y in spans for r in range(x, y + 1)})
    lb = cellindex.low_bytes(bits)
    kp = 0 if shard.meta.get("tables", {}).get(table) == "packed" else 8
    w = kp + int(shard.meta.get("item_bytes", {}).get(table, 1))
    shape = tuple(int(x) for x in val_shape)
    axis = list(zip(fewcells.py_strides(shape), shape, axes))
    # per query cell, the box its keys lie in: q's coordinates minus the reach
    boxes = [[((c // s) % n - hi, (c // s) % n - lo) for s, n, (lo, hi) in axis] for c in q]
    cells, refs, budget = [], [], 4 * fewcells.MAX_CELLS
    for r in runs:
        buf = shard.run_items(table, r << bits)
        budget -= (len(buf) // w) * len(q)
        if budget < 0:
            return None
        for j in range(0, len(buf), w):
            k = (r << bits) + int.from_bytes(buf[j + kp:j + kp + lb], "big")
            kc = [(k // s) % n for s, n, _ in axis]
            if any(all(x0 <= x <= x1 for x, (x0, x1) in zip(kc, box)) for box in boxes):
                cells.append(k)
                refs.append(int.from_bytes(buf[j + kp + lb:j + w], "big"))
    got = _few_hitting(shard, np.array(cells, dtype=np.uint64),
                       np.array(refs, dtype=np.uint64), q, val_shape)
    return None if got is None else got.tolist()


def _few_hitting(shard: ShardData, cells: np.ndarray, refs: np.ndarray,
                 q: np.ndarray | list[int], val_shape: Sequence[int]) -> np.ndarray | None:
    """:func:`encoders.full_one.keys_hitting` of a few keys in plain Python
    (:func:`encoders.layouts.fewcells.union` per key); None when a set outgrows it."""
    want = set(q.tolist() if isinstance(q, np.ndarray) else q)
    hit = []
    for c, r in zip(cells.tolist(), refs.tolist()):
        got = fewcells.union(shard, HEAP, [(c, r)], 0, [val_shape])
        if got is None:
            return None
        if not want.isdisjoint(got.tolist()):
            hit.append(c)
    return np.array(hit, dtype=np.uint64)


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
    boxes = True

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

    def encode(self, pairs: PairBatch | BoxedPairs | None, spec: ShardSpec) -> EncodedShard:
        if isinstance(pairs, BoxedPairs):
            if self.compact != "never":
                if self.direction is Direction.BACKWARD:
                    return self._encode_boxed(pairs, spec)
                swapped = self._swapped_sides(None, spec, pairs)
                if swapped is not None:  # box lineage: the swapped build, never expanded
                    meta = spec_meta(spec, self.name, self.direction.value)
                    return self._shard(meta, swapped)
            pairs = pairs.expand()
        meta, pairs = lineage_pairs(pairs, spec, self.name, self.direction.value)
        if pairs is None:
            return EncodedShard(meta=dict(meta, empty=True))
        sides = []
        for t, key_side, key_shape, vals, val_shapes in self._sides(pairs, spec):
            g = group_keys(key_side, vals)
            sides.append((t, g, key_shape, val_shapes, self._build(g, key_shape, val_shapes),
                          None))
        shard = self._shard(meta, sides)
        grouped = sum(len(p.rows) for *_, p, _ in sides if p is not None)
        keys = sum(len(g.keys) for _, g, *_ in sides)
        if self.compact == "auto" and 0 < grouped < keys // 2:
            # few keys grouped: make sure the groups pay (each does by its own estimate)
            plain = self._shard(meta, [(t, g, ks, vs, None, None)
                                       for t, g, ks, vs, *_ in sides])
            if plain.logical_bytes <= shard.logical_bytes:
                shard = plain
        if self.direction is Direction.FORWARD and self.compact != "never":
            swapped = self._swapped_sides(pairs, spec)
            if swapped is not None:
                other = self._shard(meta, swapped)
                if SWAPPED == "always" or other.logical_bytes < shard.logical_bytes:
                    return other
        return shard

    def _encode_boxed(self, pairs: BoxedPairs, spec: ShardSpec) -> EncodedShard:
        """A backward index of pairs and boxes: each box part's groups straight from its
        mask (:func:`encoders.layouts.boxgroups.split`), everything else grouped from
        pairs as :meth:`encode` does."""
        meta = spec_meta(spec, self.name, self.direction.value)
        sides = range(len(spec.in_shapes))
        groups, rest, grouped = boxgroups.split(pairs, spec, sides, self.tile, self.min_group,
                                                self.compact == "auto")
        if rest is None:
            g = KeyGroups(EMPTY, np.empty(0, dtype=np.int64), [], 0)
            found = None
        else:
            g = group_keys(rest.out, list(rest.ins))
            found = self._build(g, spec.out_shape, spec.in_shapes)
        p = boxgroups.merged(found, groups)
        if p is None and rest is None:
            return EncodedShard(meta=dict(meta, empty=True))
        shard = self._shard(meta, [("", g, spec.out_shape, list(spec.in_shapes), p, None)])
        shard.meta["keys"] = int(shard.meta["keys"]) + grouped
        return shard

    def _build(self, g: KeyGroups, key_shape: Sequence[int],
               val_shapes: Sequence[Sequence[int]]) -> patterns.Patterns | None:
        """The pattern groups of ``g`` under this encoding's policy (None: no group)."""
        if self.compact == "never":
            return None
        return patterns.build(g.keys, g.src, g.values, key_shape, val_shapes,
                              self.min_group, self.tile, pay=self.compact == "auto")

    def _swapped_sides(self, pairs: PairBatch | None, spec: ShardSpec,
                       boxed: BoxedPairs | None = None) -> list | None:
        """A forward index's sides built the other way round: per input ``i``, groups of
        output cells by their input-``i`` pattern (the backward grouping: a cleaner's
        flagged pixel is one box, where keyed by input cell it is 25 patterns), then the
        output cells left out. Where input and output share a shape those stay keyed by
        output cell too (a cosmic ray's boxes of several sizes, keyed by input cell, are a
        distinct set of output cells per input cell), read through the offsets their sets
        reach (:func:`_reaching`); else their pairs are keyed by input cell as usual.
        ``boxed`` (in place of ``pairs``): box lineage, whose parts' groups come from
        their masks (:func:`encoders.layouts.boxgroups.split`). None when no input's
        output cells form a group."""
        sides, any_swapped = [], False
        for i, in_shape in enumerate(spec.in_shapes):
            t = str(i)
            if boxed is None:
                extra, outs, ins = [], pairs.out, pairs.ins[i]
            else:  # the parts' groups from their masks, the rest as pairs
                extra, plain, _ = boxgroups.split(boxed, spec, [i], self.tile,
                                                  self.min_group, self.compact == "auto")
                outs, ins = (plain.out, plain.ins[0]) if plain is not None else (
                    Ragged.empty(), Ragged.empty())
            g2 = group_keys(outs, [ins])
            p2 = boxgroups.merged(self._build(g2, spec.out_shape, [in_shape]), extra)
            if p2 is None:
                key_side, vals = ins, [outs]
            else:
                any_swapped = True
                left = np.ones(len(g2.keys), dtype=bool)
                left[p2.rows] = False
                rv, ro = take_rows(np.asarray(g2.values[0].values, dtype=np.uint64),
                                   np.asarray(g2.values[0].offsets, dtype=np.int64),
                                   g2.src[left])
                key_side, vals = Ragged(rv, ro), [Ragged.from_singletons(g2.keys[left])]
            g = group_keys(key_side, vals)
            side = (t, g, in_shape, [spec.out_shape],
                    self._build(g, in_shape, [spec.out_shape]),
                    None if p2 is None else (p2, tuple(spec.out_shape), None))
            if (p2 is not None and tuple(in_shape) == tuple(spec.out_shape)
                    and OUTKEYED != "never"):
                # the output cells left out keyed by output cell, when that is smaller
                rest = KeyGroups(g2.keys[left], g2.src[left], g2.values, 0)
                other = (t, rest, in_shape, [spec.out_shape], None,
                         (p2, tuple(spec.out_shape), _reach(rest, in_shape)))
                if OUTKEYED == "always" or (self._shard({}, [other]).logical_bytes
                                            <= self._shard({}, [side]).logical_bytes):
                    side = other
            sides.append(side)
        return sides if any_swapped else None

    def _shard(self, meta: dict, sides: list) -> EncodedShard:
        meta = dict(meta, empty=False)
        tables, blobs, records, keyed = [], {}, [], []
        spaces, rel_meta, info = {}, {}, {}
        collisions, n_keys = 0, 0
        for t, g, key_shape, val_shapes, p, swapped in sides:
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
                narrow = int(np.prod(key_shape, dtype=np.int64)) <= 1 << 32
                blobs["r" + t] = p.ranges(np.uint32 if narrow else np.uint64)
            info[t] = {"groups": 0 if p is None else len(p), "residue": int(len(res.keys)),
                       "relative_groups": 0 if p is None else int(p.relative.sum())}
            if p is not None and narrow:  # key cells fit 32 bits: the ranges too
                info[t]["range_bytes"] = 4
            if p is not None:  # a group's key cells lie in one tile: lookups skip others
                info[t]["tile"] = self.tile
            reach = None
            if swapped is not None:
                p2, other_shape, reach = swapped
                tables.append(Table("h" + t, np.arange(len(p2), dtype=np.uint64),
                                    values=Ragged(p2.records, p2.record_offsets)))
                lo, hi = patterns.value_ranges(p2, other_shape, key_shape)
                wide = int(np.prod(key_shape, dtype=np.int64)) > 1 << 32
                blobs["s" + t] = np.stack([lo, hi], axis=1).astype(
                    np.uint64 if wide else np.uint32).reshape(-1).view(np.uint8)
                info[t]["swapped"] = len(p2)
                info[t]["swapped_range_bytes"] = 8 if wide else 4
            name, rk_shape, rv_shapes = "k" + t, key_shape, val_shapes
            if reach is not None:  # keyed by output cell (see _swapped_sides)
                name, rk_shape, rv_shapes = "b" + t, other_shape, [key_shape]
                info[t].update(residue=0, outkeyed=len(res.keys), reach=list(reach[:2]),
                               reach_axes=reach[2])
            if len(res.keys):
                rel = choose_relative(res, rk_shape, rv_shapes, "auto")
                b, bo, key_rec = side_records(res, rv_shapes, rel)
                records.append((b, bo))
                keyed.append((name, res.keys, key_rec))
                spaces[name] = lin_range_box(res.keys, rk_shape)
                rel_meta[name] = rel
        n_records = 0
        if records:
            heap, refs, n_records = shared_heap(records)
            tables += [cellindex.index_table(name, keys, r[key_rec])
                       for (name, keys, key_rec), r in zip(keyed, refs)]
            blobs[HEAP] = heap
        meta.update(key_spaces=spaces, relative=rel_meta, compact=info, keys=int(n_keys),
                    groups=int(sum(v["groups"] + v.get("swapped", 0) for v in info.values())),
                    records=int(n_records + sum(v["groups"] + v.get("swapped", 0)
                                                for v in info.values())),
                    collisions=int(collisions))
        return EncodedShard(tables=tables, blobs=blobs, meta=meta)

    # -- lookups ---------------------------------------------------------------------------
    def _keyed(self, shard: ShardData, t: str, key_shape: Sequence[int], q: np.ndarray,
               j: int, val_shapes: Sequence[Sequence[int]], deadline: float | None
               ) -> np.ndarray:
        """Side ``j``'s cells of the key cells ``q`` (the index's own direction)."""
        info = shard.meta["compact"][t]
        if len(q) <= fewcells.FEW_CELLS:
            got = self._few_keyed(shard, t, key_shape, q, j, val_shapes, deadline)
            if got is not None:
                return got
        res = []
        if info["groups"]:
            check_deadline(deadline)
            ids = _meeting(shard, t, info, key_shape, q)
            if len(ids):
                for batch in pairtable.entries(shard, ids, deadline, "g" + t):
                    tok, toff, _ = pairtable.tokens(batch)
                    d = patterns.decode_keys(tok, toff[:-1])
                    res.append(patterns.keyed_groups(tok, d, j, val_shapes, q, key_shape))
        if info.get("swapped"):  # groups keyed by side-j cells: the other direction
            check_deadline(deadline)
            ids = patterns.groups_meeting(_ranges(shard, t, info, "s"), q)
            if len(ids):
                res += self._swapped_unkeyed(shard, t, key_shape, q, val_shapes[j], ids,
                                             deadline)
        if info["residue"]:
            got = self._one._lookup(shard, "k" + t, key_shape, q, j, val_shapes, deadline)
            res.append(np.asarray(got, dtype=np.uint64))
        if info.get("outkeyed"):
            res.append(_reaching(shard, "b" + t, q, info, key_shape, deadline))
        return _sorted_unique(res, int(np.prod(val_shapes[j], dtype=np.int64)))

    def _few_keyed(self, shard: ShardData, t: str, key_shape: Sequence[int], q: np.ndarray,
                   j: int, val_shapes: Sequence[Sequence[int]], deadline: float | None
                   ) -> np.ndarray | None:
        """:meth:`_keyed` for a few cells in plain Python (:mod:`encoders.layouts.
        fewpatterns`); None when the answer outgrows it."""
        info = shard.meta["compact"][t]
        qs = q.tolist()
        out: list[int] = []
        for kind, table, swapped in (("r", "g", False), ("s", "h", True)):
            if not info.get("swapped" if swapped else "groups"):
                continue
            check_deadline(deadline)
            ids = (patterns.groups_meeting(_ranges(shard, t, info, kind), q) if swapped
                   else _meeting(shard, t, info, key_shape, q))
            if not len(ids):
                continue
            recs = []
            for batch in pairtable.entries(shard, ids, deadline, table + t):
                v, o = bytes(np.asarray(batch.values, dtype=np.uint8)), batch.offsets.tolist()
                recs += [v[a:b] for a, b in zip(o[:-1], o[1:])]
            got = (fewpatterns.unkeyed(recs, qs, val_shapes[j], key_shape) if swapped
                   else fewpatterns.keyed(recs, qs, j, key_shape, val_shapes))
            if got is None:
                return None
            out += got
        if info.get("outkeyed"):
            out += _reaching(shard, "b" + t, q, info, key_shape, deadline).tolist()
        if info["residue"]:
            got = self._one._lookup(shard, "k" + t, key_shape, q, j, val_shapes, deadline)
            if len(got) > fewcells.MAX_CELLS:
                res = [np.array(out, dtype=np.uint64), np.asarray(got, dtype=np.uint64)]
                return _sorted_unique(res, int(np.prod(val_shapes[j], dtype=np.int64)))
            out += got.tolist()
        return np.array(sorted(set(out)), dtype=np.uint64)

    def _swapped_unkeyed(self, shard: ShardData, t: str, key_shape: Sequence[int],
                         q: np.ndarray, other: Sequence[int], ids: np.ndarray | None,
                         deadline: float | None) -> list[np.ndarray]:
        """Cells (of shape ``other``) of the swapped groups ``ids`` (None: every one) whose
        pattern meets the key cells ``q`` (see :meth:`FullCompact._swapped_sides`)."""
        shape = tuple(key_shape)
        members = Members(q, int(np.prod(shape, dtype=np.int64)))
        same = shape if shape == tuple(other) else None
        res = []
        for batch in pairtable.entries(shard, ids, deadline, "h" + t):
            tok, toff, _ = pairtable.tokens(batch)
            d = patterns.decode_keys(tok, toff[:-1])
            res.append(patterns.unkeyed_groups(tok, d, 0, [shape], q, members, same, deadline,
                                               (other, shape)))
        return res

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
                res.append(patterns.unkeyed_groups(tok, d, j, val_shapes, q, members, same,
                                                   deadline, (key_shape, shape)))
        if info.get("swapped"):  # groups keyed by side-j cells: q's own direction
            for batch in pairtable.entries(shard, None, deadline, "h" + t):
                tok, toff, _ = pairtable.tokens(batch)
                d = patterns.decode_keys(tok, toff[:-1])
                res.append(patterns.keyed_groups(tok, d, 0, [key_shape], q, val_shapes[j]))
        if info["residue"]:
            res.append(self._one._scan(shard, "k" + t, q, j, val_shapes, deadline))
        if info.get("outkeyed"):  # keyed by q's own cells
            got = self._one._lookup(shard, "b" + t, val_shapes[j], q, 0, [key_shape],
                                    deadline)
            res.append(np.asarray(got, dtype=np.uint64))
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
