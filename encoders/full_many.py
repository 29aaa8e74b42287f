"""FullMany (paper VI-B, Figure 4.1): one entry per region pair holding both cell sets.

Each entry (see :mod:`encoders.layouts.pairtable`) stores the pair's output cells and its
input cells per input; an R-tree over the bounding boxes of the *key* cells (output cells
when backward-optimized, input-``i`` cells per input when forward-optimized) finds the
entries a frontier touches. An entry's output cells are stored once however many they are,
which is why FullMany wins at high fanout. Input sets of an input shaped like the output are
stored relative to the entry's first output cell (smaller varints). Pairs with identical key
sets merge into one entry.

Per-pixel lineage (one output cell per pair: identity, stencil boxes, windows) would cost an
entry and an R-tree box per cell, about 70 bytes. Such pairs are grouped instead
(:mod:`encoders.layouts.relgroups`): pairs whose input cells sit at the same offsets from
their output cell, in one tile of about 4096 cells, share one entry ``(cells, offsets)`` and
one R-tree box, in both directions; clipped border sets have other offsets, so the groups
stay exact. ``relative="auto"`` groups offsets that at least two pairs of a tile share (a
lone pair is no smaller as a group); the rest stay plain entries. R-tree ids past the plain
entries are groups.

Lookups read the entries and groups the R-tree finds, or scan them all when the frontier
has so many runs that probing would cost more (and always in the mismatched direction);
cells are tested against a large frontier with a dense mask (:class:`subzero.frontier.
Members`), so a scan costs about a microsecond per plain entry.

>>> FullMany("fwd").direction.value
'fwd'
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from encoders.base import EncodedShard, Encoding, ShardData, SpatialIndex, Table
from encoders.formats.codec import add_anchors, decode_sets, set_token_count, set_tokens
from encoders.formats.csr import (
    interleave,
    offsets_from_lengths,
    row_ids,
    segment_any,
    take_rows,
    union_by_owner,
    uniq,
)
from encoders.formats.hashing import dedup_rows
from encoders.formats.varint import varint_encode
from encoders.layouts import pairtable, relgroups
from encoders.layouts.keyspace import lin_range_box, touches
from encoders.layouts.pairs import lineage_pairs
from subzero.cells import Ragged
from subzero.errors import ModeError
from subzero.frontier import Members
from subzero.lineage import PairBatch, ShardSpec
from subzero.modes import Direction


def _rag(v: np.ndarray, o: np.ndarray) -> Ragged:
    return Ragged(np.asarray(v, dtype=np.uint64), np.asarray(o, dtype=np.int64))


def _take(r: Ragged, rows: np.ndarray) -> Ragged:
    return _rag(*take_rows(r.values, r.offsets, rows))


def _union(r: Ragged, group: np.ndarray, n: int) -> Ragged:
    """Row ``g`` of the result = union of the rows of ``r`` in group ``g``."""
    owner = group[row_ids(np.asarray(r.offsets, dtype=np.int64))]
    return _rag(*union_by_owner(r.values, owner, n))


def parse_policy(relative: str) -> str:
    """``relative`` as one of ``"auto"``, ``"always"``, ``"never"`` (else ModeError)."""
    if relative not in ("auto", "always", "never"):
        raise ModeError(f"relative must be 'auto', 'always' or 'never'. Got {relative!r} "
                        "instead.")
    return relative


def merge_entries(out: Ragged, ins: Sequence[Ragged], backward: bool
                  ) -> tuple[Ragged, list[Ragged]]:
    """Merge pairs whose key side is identical: ``(output sets, input sets per input)``."""
    if backward:
        kv, ko = out.values, out.offsets
    else:
        n = len(out)
        parts = []
        for r in ins:  # the key is the tuple of input sets: prefix each with its length
            parts += [(r.lengths.astype(np.uint64), np.arange(n + 1, dtype=np.int64)),
                      (np.asarray(r.values, dtype=np.uint64), r.offsets)]
        kv, ko = interleave(parts)
    inv, first = dedup_rows(np.asarray(kv, dtype=np.uint64), np.asarray(ko, dtype=np.int64))
    if len(first) == len(out):
        return out, list(ins)
    e = len(first)
    if backward:
        return _take(out, first), [_union(r, inv, e) for r in ins]
    return _union(out, inv, e), [_take(r, first) for r in ins]


def input_sets(tok: np.ndarray, after_out: np.ndarray, anchors: np.ndarray,
               in_shapes: Sequence[Sequence[int]], i: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode input ``i``'s cell sets (absolute, CSR) of entries whose output set ends at
    token ``after_out`` and starts with cell ``anchors``."""
    p = after_out
    for s in range(i):
        p = p + set_token_count(tok, p, len(in_shapes[s]))
    v, o, rel, _ = decode_sets(tok, p, in_shapes[i])
    return add_anchors(v, o, rel, anchors), o


class FullMany(Encoding):
    """Full lineage, one entry per region pair plus R-trees (see the module docstring).

    ``relative`` is ``"auto"`` (relative input sets where shapes match; grouped entries for
    offsets that at least two one-output-cell pairs of a tile share), ``"always"`` (every
    one-output-cell pair in a group, even alone: for tests) or ``"never"`` (absolute sets,
    one entry per pair). ``tile``: cells per tile (a group's output cells lie in one tile).
    """

    name = "FullMany"
    payload = False
    directions = frozenset({Direction.BACKWARD, Direction.FORWARD})
    many = True
    into_mask = False

    def __init__(self, direction: Direction | str = Direction.BACKWARD,
                 relative: str = "auto", tile: int = relgroups.TILE) -> None:
        super().__init__(Direction(direction))
        self.relative = parse_policy(relative)
        self.tile = int(tile)

    def encode(self, pairs: PairBatch | None, spec: ShardSpec) -> EncodedShard:
        meta, pairs = lineage_pairs(pairs, spec, self.name, self.direction.value)
        if pairs is None:
            return EncodedShard(meta=dict(meta, empty=True))
        bwd = self.direction is Direction.BACKWARD
        out, ins = merge_entries(_rag(pairs.out.values, pairs.out.offsets),
                                 [_rag(r.values, r.offsets) for r in pairs.ins], bwd)
        rel = [self.relative != "never" and tuple(s) == tuple(spec.out_shape)
               for s in spec.in_shapes]
        anchors = out.values[out.offsets[:-1]]
        out_tok = set_tokens(out.values, out.offsets, spec.out_shape)
        in_tok = [set_tokens(r.values, r.offsets, s, anchors if rl else None)
                  for r, s, rl in zip(ins, spec.in_shapes, rel)]
        groups = relgroups.build(out, ins, in_tok, rel, spec.in_shapes, spec.out_shape,
                                 self.relative, self.tile)
        plain = np.arange(len(out), dtype=np.int64)
        parts = [out_tok, *in_tok]
        if groups is not None:
            plain = np.setdiff1d(plain, groups.rows, assume_unique=True)
            parts = [take_rows(t, o, plain) for t, o in parts]
        tok, toff = interleave(parts)
        b, blen = varint_encode(tok)
        body_off = offsets_from_lengths(blen)[toff]
        n_plain, n_groups = len(plain), 0 if groups is None else len(groups)
        tables = [pairtable.entry_table(b, body_off)] if n_plain else []
        if n_groups:
            tables.append(Table(relgroups.TABLE, np.arange(n_groups, dtype=np.uint64),
                                values=Ragged(groups.records, groups.record_offsets)))
        def kept(r: Ragged) -> Ragged:  # the plain entries' rows
            return r if groups is None else _take(r, plain)

        if bwd:
            boxes = None if groups is None else relgroups.key_boxes(groups, spec.out_shape)
            trees = [self._tree("out", kept(out), spec.out_shape, boxes)]
            spaces = {"out": lin_range_box(out.values, spec.out_shape)}
        else:
            trees = [self._tree(f"in{i}", kept(r), s, None if groups is None else
                                relgroups.input_boxes(groups, r, s, spec.out_shape))
                     for i, (r, s) in enumerate(zip(ins, spec.in_shapes))]
            spaces = {f"in{i}": lin_range_box(r.values, s)
                      for i, (r, s) in enumerate(zip(ins, spec.in_shapes))}
        meta.update(empty=False, entries=int(n_plain), groups=int(n_groups),
                    records=int(n_plain + n_groups), relative=rel, key_spaces=spaces,
                    merged=int(len(pairs) - len(out)), tile=self.tile,
                    grouped_pairs=int(0 if groups is None else len(groups.rows)))
        return EncodedShard(tables=tables, rtrees=trees, meta=meta)

    @staticmethod
    def _tree(name: str, sets: Ragged, shape: Sequence[int],
              group_boxes: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> SpatialIndex:
        """One R-tree: plain entries (ids ``0..``) then groups (ids after them)."""
        sp = pairtable.spatial_index(name, sets, shape)
        if group_boxes is None:
            return sp
        gids, mins, maxs = group_boxes
        return SpatialIndex(name, np.concatenate([sp.ids, len(sets) + gids]),
                            np.concatenate([sp.mins, mins.astype(np.float64)]),
                            np.concatenate([sp.maxs, maxs.astype(np.float64)]))

    # -- lookups ---------------------------------------------------------------------------
    def _query(self, shard: ShardData, q: np.ndarray, key: int, target: int,
               deadline: float | None) -> np.ndarray:
        """Cells of set ``target`` of the pairs whose set ``key`` meets ``q``
        (set -1 is the output cells, ``i >= 0`` input ``i``)."""
        m = shard.meta
        if m.get("empty") or len(q) == 0:
            return np.empty(0, dtype=np.uint64)
        out_shape, in_shapes = m["out_shape"], m["in_shapes"]
        key_shape = out_shape if key < 0 else in_shapes[key]
        keyed = (self.direction is Direction.BACKWARD) == (key < 0)
        if keyed:
            tree = "out" if key < 0 else f"in{key}"
            if not touches(q, m["key_spaces"].get(tree), key_shape):
                return np.empty(0, dtype=np.uint64)
            ids = pairtable.candidates(shard, tree, q, key_shape)
            if ids is not None and len(ids) == 0:
                return np.empty(0, dtype=np.uint64)
        else:
            ids = None  # mismatched direction: scan every entry
        n_plain = int(m.get("entries", 0))
        members = Members(q, int(np.prod(key_shape, dtype=np.int64)))
        res = []
        if n_plain and (ids is None or ids[0] < n_plain):
            pids = None if ids is None else ids[ids < n_plain]
            res += self._plain(shard, pids, q, members, key, target, deadline)
        if m.get("groups") and (ids is None or ids[-1] >= n_plain):
            gids = None if ids is None else ids[ids >= n_plain] - np.uint64(n_plain)
            res += self._groups(shard, gids, q, members, key, target, deadline)
        return uniq(np.concatenate(res)) if res else np.empty(0, dtype=np.uint64)

    @staticmethod
    def _plain(shard: ShardData, ids: np.ndarray | None, q: np.ndarray, members: Members,
               key: int, target: int, deadline: float | None) -> list[np.ndarray]:
        out_shape, in_shapes = shard.meta["out_shape"], shard.meta["in_shapes"]
        res = []
        for batch in pairtable.entries(shard, ids, deadline):
            tok, toff, _ = pairtable.tokens(batch)
            ov, oo, _, after_out = decode_sets(tok, toff[:-1], out_shape)
            anchors = ov[oo[:-1]]
            if key < 0:
                hit = segment_any(members(ov), oo)
            else:
                kv, ko = input_sets(tok, after_out, anchors, in_shapes, key)
                hit = segment_any(members(kv), ko)
            rows = np.flatnonzero(hit)
            if len(rows) == 0:
                continue
            if target < 0:
                res.append(take_rows(ov, oo, rows)[0])
            else:
                res.append(input_sets(tok, after_out[rows], anchors[rows], in_shapes,
                                      target)[0])
        return res

    @staticmethod
    def _groups(shard: ShardData, ids: np.ndarray | None, q: np.ndarray, members: Members,
                key: int, target: int, deadline: float | None) -> list[np.ndarray]:
        out_shape, in_shapes = shard.meta["out_shape"], shard.meta["in_shapes"]
        # coordinate boxes narrow a forward lookup when the input is shaped like the output
        same = key >= 0 and tuple(in_shapes[key]) == tuple(out_shape)
        res = []
        for batch in pairtable.entries(shard, ids, deadline, relgroups.TABLE):
            tok, toff, _ = pairtable.tokens(batch)
            d = relgroups.decode_keys(tok, toff[:-1])
            if key < 0:
                ov, oo = relgroups.offset_sets(tok, d, target, in_shapes)
                res.append(relgroups.backward_cells(d, q, ov, oo))
            else:
                ov, oo = relgroups.offset_sets(tok, d, key, in_shapes)
                res.append(relgroups.forward_cells(d, q, members, ov, oo,
                                                   out_shape if same else None, deadline))
        return res

    def backward(self, shard: ShardData, out_lin: np.ndarray, i: int,
                 deadline: float | None = None) -> np.ndarray:
        return self._query(shard, out_lin, -1, i, deadline)

    def forward(self, shard: ShardData, in_lin: np.ndarray, i: int,
                deadline: float | None = None) -> np.ndarray:
        return self._query(shard, in_lin, i, -1, deadline)
