"""FullCompact's pattern groups: key cells that share one relative (or absolute) pattern.

After the pairs of a shard are grouped by key cell (each key cell ``k`` with the union of
its value sets ``S_j(k)``, one per value side ``j``), most regular lineage repeats one
*pattern* over many key cells: the identity ``S(k) = {k}``, a box at a fixed offset, a
clipped box along one border, or one absolute set for a whole row or a whole array. A
key cell's pattern is, per value side, the codec's token stream of ``S_j(k) - a(k)`` where
the side is aligned with the key side (*relative*: translation invariant; ``a(k)`` is
:func:`anchor_cells`, ``k`` itself when the shapes agree, ``k`` with its reduced or
broadcast axes set to 0 otherwise, so a row reduction's rows share one pattern), else of
``S_j(k)`` (*absolute*). A set of more than :data:`ABS_CELLS` cells joins an absolute
group only when its tokens are few (:data:`ABS_TOKENS`: a box, a whole array), and a
query decodes each distinct absolute pattern once. Key cells whose relative pattern at least ``min_group`` cells of one tile
share form a group ``(K, P)``; of the others, those whose absolute pattern enough cells
share form one too (a column of a row reduction read forward, the cells of an aggregate).
Every other key cell is left to the residue (stored as FullOne stores it). Lookups unite
every group (and the residue) holding a key cell, so a relative group's ``K`` may also take
the key cells of its bounding box whose own sets hold its pattern (:func:`_fills`): those
keep their whole sets in their own group or the residue, and an identity group with
exceptions is a whole tile rather than a tile minus its exceptions. Absolute patterns
are tokenized once per distinct value row (a pair's sets, however many key cells share it),
relative ones once per key cell with at most :data:`REL_CELLS` value cells; a large shard
whose evenly spaced sample of keys repeats no pattern is left to the residue untokenized.

The patterns are exact: equal token streams are equal sets (:mod:`encoders.formats.codec`),
and a box clipped by the border has other offsets than an interior box, so it is another
group. Relative offsets are linear, so ``k + o`` is the cell itself whatever row it is on.

Record (varint tokens, one plain LMDB entry per group; group ids are the keys)
    ``K`` (:func:`key_tokens`: a delta list, runs of consecutive cells, strided runs (the
    rows of a box being one item), or a subset of its bounding box (the box minus its
    holes, or its few cells as ranks in it), whichever takes fewest bytes), then per
    value side the
    pattern's token stream, relative or absolute (the stream's header says which).

Range blob
    ``kmin, kmax`` of every group (uint64 pairs): a lookup keeps the groups whose linear
    range holds a query cell with two binary searches per group, then reads those records.

>>> from subzero.cells import Ragged
>>> keys = np.arange(64, dtype=np.uint64)
>>> sets = [Ragged.from_singletons(keys.copy())]          # identity: key k in row k
>>> p = build(keys, np.arange(64), sets, (64,), [(64,)])
>>> len(p.rows), len(p), p.relative.tolist(), p.kmin.tolist(), p.kmax.tolist()
(64, 1, [True], [0], [63])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from encoders.formats.codec import decode_sets, set_token_count, set_tokens
from encoders.formats.csr import (
    compact_ids,
    gather_index,
    interleave,
    offsets_from_lengths,
    row_ids,
    segment_any,
    segment_cumsum,
    take_rows,
    uniq_inverse,
)
from encoders.formats.hashing import dedup_rows
from encoders.formats.varint import varint_encode, varint_lengths
from encoders.layouts.keyspace import coords
from encoders.layouts.relgroups import Decoded, forward_cells, tile_ids
from subzero.cells import Ragged, run_starts, strides
from subzero.frontier import Members

TILE = 1 << 12   # key cells per tile: bounds what one group's lookup decodes
MIN_GROUP = 4    # key cells a pattern needs to become a group (fewer stay in the residue)
#: a group's bytes beside its record (its LMDB key and range) and a residue key cell's
#: bytes (its index item and a share of the records): a group is kept when its record and
#: these cost fewer bytes than its cells would in the residue
GROUP_BYTES, KEY_BYTES = 24, 3
REL_CELLS = 4096  # value cells a key may have and still be tested for a relative pattern
#: value cells a key may have and still join a group of an absolute pattern: a group
#: repeats its pattern per tile, while the residue keeps a set shared by many keys once
#: (a whole-array dependency is cheaper there)
ABS_CELLS = 1 << 16
#: ... unless its absolute pattern is at most this many tokens (a box, a whole array:
#: repeated per tile it costs less than its keys in the residue)
ABS_TOKENS = 64
_REL_CHUNK = 1 << 22  # value cells expanded at a time to tokenize relative patterns
#: larger key sets are first sampled: without repeats among the sample's patterns (a
#: share :data:`SAMPLE_SHARED` of it) no group is looked for
SAMPLE, SAMPLE_SHARED = 4096, 1 / 32
#: a relative group also takes the key cells of its bounding box whose sets hold its
#: pattern (see :func:`_fills`) when they are at most this share of its members ...
FILL_SHARE = 1 / 4
#: ... and its pattern at most this many cells per value side
FILL_CELLS = 64

U64 = np.uint64


@dataclass
class Patterns:
    """Groups built from one keyed side (plain data; see :func:`build`).

    ``rows``: the key rows whose whole lineage the groups hold (sorted; the others are
    the residue; a group's ``K`` may hold some of those too, see :func:`_fills`);
    ``records``/``record_offsets``: group records (CSR bytes); ``kmin``/``kmax``: each
    group's smallest and largest key cell; ``relative``: whether a group's patterns are
    relative (else absolute).
    """

    rows: np.ndarray
    records: np.ndarray
    record_offsets: np.ndarray
    kmin: np.ndarray
    kmax: np.ndarray
    relative: np.ndarray

    def __len__(self) -> int:
        return len(self.kmin)

    def ranges(self, dtype: type = U64) -> np.ndarray:
        """The range blob: ``kmin, kmax`` per group in ``dtype``, as uint8 bytes."""
        return np.stack([self.kmin, self.kmax], axis=1).astype(dtype).reshape(-1).view(np.uint8)


def _pattern_ids(parts: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """One id per row of the CSR ``parts`` read side by side (equal rows, equal ids)."""
    if n == 0:
        return np.empty(0, dtype=np.int64)
    kv, ko = interleave(parts) if len(parts) > 1 else parts[0]
    inv, _ = dedup_rows(np.asarray(kv, dtype=U64), np.asarray(ko, dtype=np.int64))
    return np.asarray(inv, dtype=np.int64).reshape(-1)


def _relative_tokens(side: Ragged, shape: Sequence[int], rows: np.ndarray,
                     anchors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token streams of the sets ``side[rows]`` relative to ``anchors``, about
    :data:`_REL_CHUNK` cells at a time (a key's set is expanded only here)."""
    vals = np.asarray(side.values, dtype=U64)
    offs = np.asarray(side.offsets, dtype=np.int64)
    toks, lens = [], []
    step = max(1, _REL_CHUNK // max(1, int(np.diff(offs)[rows].max(initial=0))))
    for c in range(0, len(rows), step):
        tv, to = take_rows(vals, offs, rows[c:c + step])
        t, o = set_tokens(tv, to, shape, anchors[c:c + step])
        toks.append(np.asarray(t, dtype=U64))
        lens.append(np.diff(o))
    if not toks:
        return np.empty(0, dtype=U64), np.zeros(1, dtype=np.int64)
    return np.concatenate(toks), offsets_from_lengths(np.concatenate(lens))


def _absolute_tokens(values: Sequence[Ragged], val_shapes: Sequence[Sequence[int]],
                     rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per value side, the token streams of rows ``rows`` as absolute sets."""
    return [set_tokens(*take_rows(np.asarray(v.values, dtype=U64),
                                  np.asarray(v.offsets, dtype=np.int64), rows), s)
            for v, s in zip(values, val_shapes)]


def aligned(key_shape: Sequence[int], val_shape: Sequence[int]) -> bool:
    """Whether a side of ``val_shape`` can hold patterns relative to the key cells of
    ``key_shape``: the same number of axes, each of one extent in both or of extent 1 in
    either (a reduced or a broadcast axis)."""
    k, v = tuple(int(x) for x in key_shape), tuple(int(x) for x in val_shape)
    return len(k) == len(v) and all(a == b or a == 1 or b == 1 for a, b in zip(k, v))


def anchor_cells(keys: np.ndarray, key_shape: Sequence[int], val_shape: Sequence[int]
                 ) -> np.ndarray:
    """The cells (of ``val_shape``) relative patterns of the key cells ``keys`` are taken
    from: the key itself where the shapes agree, else its coordinates with every axis
    whose extents differ set to 0 (see :func:`aligned`). A row reduction's output cell
    ``(r, 0)`` anchors at the input's ``(r, 0)``, so every row shares one pattern."""
    keys = np.asarray(keys, dtype=U64)
    k, v = tuple(int(x) for x in key_shape), tuple(int(x) for x in val_shape)
    if k == v:
        return keys
    c = coords(keys, k)
    st = np.asarray(strides(v), dtype=np.int64)
    lin = np.zeros(len(keys), dtype=np.int64)
    for ax, (a, b) in enumerate(zip(k, v)):
        if a == b:
            lin += c[:, ax].astype(np.int64) * st[ax]
    return lin.astype(U64)


def _pattern_tokens(keys: np.ndarray, src: np.ndarray, values: Sequence[Ragged],
                    val_shapes: Sequence[Sequence[int]], same: Sequence[bool],
                    relative: bool, key_shape: Sequence[int]
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per value side, the token streams of the keys' patterns: relative to the keys'
    anchors (:func:`anchor_cells`) on the sides aligned with the key side (``same``) when
    ``relative``, else absolute."""
    return [_relative_tokens(v, s, src, anchor_cells(keys, key_shape, s)) if relative and sm
            else _absolute_tokens([v], [s], src)[0]
            for v, s, sm in zip(values, val_shapes, same)]


def _repeats_in_sample(keys: np.ndarray, src: np.ndarray, values: Sequence[Ragged],
                       val_shapes: Sequence[Sequence[int]], same: Sequence[bool],
                       key_shape: Sequence[int]) -> bool:
    """Whether at least :data:`SAMPLE_SHARED` of :data:`SAMPLE` evenly spaced keys share
    their relative or absolute pattern with another key of the sample."""
    pick = np.unique(np.linspace(0, len(keys) - 1, SAMPLE).astype(np.int64))
    need = SAMPLE_SHARED * len(pick)
    rows, at = compact_ids(src[pick], int(src.max()) + 1)  # each shared row tokenized once
    rid = _pattern_ids(_absolute_tokens(values, val_shapes, rows), len(rows))
    inv = rid[np.asarray(at, dtype=np.int64).reshape(-1)]
    if (np.bincount(inv)[inv] >= 2).sum() >= need:
        return True
    if not any(same):
        return False
    cells = sum(np.diff(np.asarray(v.offsets, dtype=np.int64))[src[pick]] for v in values)
    pick = pick[cells <= REL_CELLS]
    if len(pick) < need:
        return False
    inv = _pattern_ids(_pattern_tokens(keys[pick], src[pick], values, val_shapes, same, True,
                                       key_shape), len(pick))
    return bool((np.bincount(inv)[inv] >= 2).sum() >= need)


def build(keys: np.ndarray, src: np.ndarray, values: Sequence[Ragged],
          key_shape: Sequence[int], val_shapes: Sequence[Sequence[int]],
          min_group: int = MIN_GROUP, tile: int = TILE, pay: bool = True
          ) -> Patterns | None:
    """Group the key cells ``keys`` (sorted unique) whose value sets repeat a pattern (see
    the module docstring); None when no group forms. Key ``keys[k]``'s sets are rows
    ``src[k]`` of ``values`` (one Ragged per value side, rows shared by keys, as
    :class:`encoders.layouts.pairs.KeyGroups` holds them): absolute patterns are tokenized
    once per distinct row, relative ones per key, only for keys with at most
    :data:`REL_CELLS` value cells. ``pay``: keep only the groups whose record costs less
    than their cells would in the residue (:data:`GROUP_BYTES`, :data:`KEY_BYTES`)."""
    n = len(keys)
    if n < min_group:
        return None
    keys = np.asarray(keys, dtype=U64)
    src = np.asarray(src, dtype=np.int64).reshape(-1)
    same = [aligned(key_shape, s) for s in val_shapes]
    if n > SAMPLE and not _repeats_in_sample(keys, src, values, val_shapes, same, key_shape):
        return None  # nothing regular: spare tokenizing every key
    tid = tile_ids(keys, key_shape, tile)
    code = np.full(n, -1, dtype=np.int64)
    use_rel = np.zeros(n, dtype=bool)
    if any(same):
        cells = sum(np.diff(np.asarray(v.offsets, dtype=np.int64))[src] for v in values)
        elig = np.flatnonzero(cells <= REL_CELLS)
        if len(elig) >= min_group:
            rel = _pattern_tokens(keys[elig], src[elig], values, val_shapes, same, True,
                                  key_shape)
            inv = _pattern_ids([(tid[elig], np.arange(len(elig) + 1, dtype=np.int64)), *rel],
                               len(elig))
            ok = np.bincount(inv)[inv] >= min_group
            code[elig[ok]], use_rel[elig[ok]] = inv[ok], True
    rest = np.flatnonzero(code < 0)
    if len(rest):
        sizes = sum(np.diff(np.asarray(v.offsets, dtype=np.int64))[src[rest]] for v in values)
        big = sizes > ABS_CELLS
        if big.any():  # large sets join only where their tokens are few (a box)
            rows, at = compact_ids(src[rest[big]], int(src.max()) + 1)
            short = sum(np.diff(np.asarray(o, dtype=np.int64)) for _, o in
                        _absolute_tokens(values, val_shapes, rows)) <= ABS_TOKENS
            big[np.flatnonzero(big)[short[np.asarray(at, dtype=np.int64).reshape(-1)]]] = False
        rest = rest[~big]
    if len(rest) >= min_group:  # absolute patterns: the tile and the row's sets
        rows, at = compact_ids(src[rest], int(src.max()) + 1)
        rid = _pattern_ids(_absolute_tokens(values, val_shapes, rows), len(rows))
        key = (tid[rest].astype(np.int64) * (int(rid.max()) + 1)
               + rid[np.asarray(at, dtype=np.int64).reshape(-1)])
        _, inv = uniq_inverse(key.astype(U64))[:2]
        inv = np.asarray(inv, dtype=np.int64).reshape(-1)
        ok = np.bincount(inv)[inv] >= min_group
        code[rest[ok]] = inv[ok] + (int(code.max()) + 1)
    pattern = (src, values, val_shapes, same, tuple(key_shape))
    sel = np.flatnonzero(code >= 0)
    if len(sel) == 0:
        return None
    fill = _fills(keys, code, use_rel, tid, src, values, key_shape, val_shapes)
    p, order, gid = _assemble(keys, code, sel, use_rel, pattern, fill)
    size = np.diff(p.record_offsets) + GROUP_BYTES
    lose = size >= KEY_BYTES * np.bincount(gid, minlength=len(p))
    if not pay or not lose.any():
        return p
    # drop the groups that would not pay: each record stands alone, so no re-encoding
    keep = np.flatnonzero(~lose)
    if len(keep) == 0:
        return None
    rec, roff = take_rows(np.asarray(p.records), np.asarray(p.record_offsets), keep)
    return Patterns(rows=np.sort(order[~lose[gid]]), records=rec, record_offsets=roff,
                    kmin=p.kmin[keep], kmax=p.kmax[keep], relative=p.relative[keep])


def box_rows(lo: np.ndarray, hi: np.ndarray, shape: Sequence[int]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows (runs along the last axis) of the boxes ``[lo, hi]`` (inclusive int64
    coordinates, one box a row) of an array of ``shape``: ``(box, first cell, last
    cell)`` per row, by box, rows in C order.

    >>> [x.tolist() for x in box_rows(np.array([[1, 1]]), np.array([[2, 3]]), (4, 5))]
    [[0, 0], [6, 11], [8, 13]]
    """
    shape = tuple(int(x) for x in shape)
    nd = len(shape)
    lo = np.asarray(lo, dtype=np.int64).reshape(-1, nd)
    hi = np.asarray(hi, dtype=np.int64).reshape(-1, nd)
    ext = hi[:, :-1] - lo[:, :-1] + 1
    rows = np.prod(ext, axis=1)
    ro = offsets_from_lengths(rows)
    owner = np.repeat(np.arange(len(lo), dtype=np.int64), rows)
    m = np.arange(int(ro[-1]), dtype=np.int64) - ro[:-1][owner]
    st = np.asarray(strides(shape), dtype=np.int64)
    start = lo[owner, -1].copy()
    for a in range(nd - 2, -1, -1):  # the outer coordinates, the innermost fastest
        e = ext[owner, a]
        start += (lo[owner, a] + m % e) * st[a]
        m //= e
    return owner, start, start + (hi[owner, -1] - lo[owner, -1])


def _fills(keys: np.ndarray, code: np.ndarray, use_rel: np.ndarray, tid: np.ndarray,
           src: np.ndarray, values: Sequence[Ragged], key_shape: Sequence[int],
           val_shapes: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Key cells a relative group may take beside its members: ``(key rows, group codes)``.

    Lookups unite the groups (and the residue) holding a key cell, so a group may also
    hold a key cell of its tile and bounding box whose sets hold the group's pattern at
    that cell (every side of the key side's shape): the cell keeps its whole sets where
    it is (its own group, the residue), the union is exact, and the group's ``K`` loses
    a hole (identity with exceptions: a whole tile, not a tile minus its exceptions).
    Only groups whose holes are at most :data:`FILL_SHARE` of their members and whose
    pattern is at most :data:`FILL_CELLS` cells per side are filled."""
    none = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    shape = tuple(int(x) for x in key_shape)
    nd, size = len(shape), int(np.prod(shape, dtype=np.int64))
    if nd == 0 or any(tuple(int(x) for x in v) != shape for v in val_shapes):
        return none
    sel = np.flatnonzero((code >= 0) & use_rel)
    if len(sel) == 0:
        return none
    order = sel[np.argsort(code[sel], kind="stable")]  # by group, keys sorted within
    gc = code[order]
    first = run_starts(gc)
    n_mem = np.diff(np.append(first, len(order)))
    rep = order[first]
    mc = coords(keys[order], shape)[:, :nd]
    blo = np.minimum.reduceat(mc, first, axis=0)
    bhi = np.maximum.reduceat(mc, first, axis=0)
    holes = np.prod(bhi - blo + 1, axis=1) - n_mem  # cells of each bounding box left out
    plen = [np.diff(np.asarray(v.offsets, dtype=np.int64))[src[rep]] for v in values]
    ok = (holes > 0) & (holes <= FILL_SHARE * n_mem)
    for n in plen:
        ok &= n <= FILL_CELLS
    g = np.flatnonzero(ok)
    if len(g) == 0:
        return none
    # the key cells in each box: per row of the box, a range of the sorted keys
    owner, start, stop = box_rows(blo[g], bhi[g], shape)
    a = np.searchsorted(keys, start.astype(U64))
    span = np.searchsorted(keys, stop.astype(U64), side="right") - a
    so = offsets_from_lengths(span)
    cg = g[np.repeat(owner, span)]
    rows = np.repeat(a, span) + np.arange(int(so[-1]), dtype=np.int64) - np.repeat(
        so[:-1], span)
    keep = (code[rows] != gc[first][cg]) & (tid[rows] == tid[rep][cg])
    rows, cg = rows[keep], cg[keep]
    if len(rows) == 0 or len(rows) * size >= 1 << 62:
        return none
    good = np.ones(len(rows), dtype=bool)
    for v in values:  # the pattern shifted to each candidate lies in the candidate's set
        vv = np.asarray(v.values, dtype=U64)
        vo = np.asarray(v.offsets, dtype=np.int64)
        pr = src[rep[cg]]
        pl = np.diff(vo)[pr]
        shift = np.repeat(keys[rows].astype(np.int64) - keys[rep[cg]].astype(np.int64), pl)
        t = vv[gather_index(vo[:-1][pr], pl)].astype(np.int64) + shift
        sl = np.diff(vo)[src[rows]]
        if int(sl.sum()) > _REL_CHUNK:
            return none
        sv = vv[gather_index(vo[:-1][src[rows]], sl)].astype(np.int64)
        cand = np.arange(len(rows), dtype=np.int64)
        have = np.sort(np.repeat(cand, sl) * size + sv)
        want = np.repeat(cand, pl) * size + np.clip(t, 0, size - 1)
        at = np.minimum(np.searchsorted(have, want), max(len(have) - 1, 0))
        inside = (t >= 0) & (t < size) & (have[at] == want if len(have) else False)
        good &= ~segment_any(~inside, offsets_from_lengths(pl))
    return rows[good], gc[first][cg[good]]


def _assemble(keys: np.ndarray, code: np.ndarray, sel: np.ndarray, use_rel: np.ndarray,
              pattern: tuple, fill: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[Patterns, np.ndarray, np.ndarray]:
    """The groups of the key rows ``sel`` by their pattern ``code`` (and the extra key
    cells ``fill``, rows and codes, of :func:`_fills`), the members (key rows, ``fill``'s
    left out) ordered by group then cell, and the group of each member."""
    src, values, val_shapes, same, key_shape = pattern
    mrow, mcode, own = sel, code[sel], np.ones(len(sel), dtype=bool)
    if fill is not None and len(fill[0]):
        mrow = np.concatenate([sel, fill[0]])
        mcode = np.concatenate([mcode, fill[1]])
        own = np.concatenate([own, np.zeros(len(fill[0]), dtype=bool)])
        at = np.lexsort((mrow, mcode))  # by group, keys sorted within
    else:
        at = np.argsort(mcode, kind="stable")
    order, gc, own = mrow[at], mcode[at], own[at]
    kk = keys[order]
    newg = np.ones(len(kk), dtype=bool)
    newg[1:] = gc[1:] != gc[:-1]
    gid = np.cumsum(newg) - 1
    n_groups = int(gid[-1]) + 1
    first = np.flatnonzero(newg)
    mine = np.flatnonzero(own)
    rep = order[mine[run_starts(gid[mine])]]  # a member key row per group: its pattern
    rel = use_rel[rep]
    ktok, koff = key_tokens(kk, gid, newg, n_groups, key_shape)
    # the patterns of the groups' representatives: relative ones, then absolute ones
    r, a = np.flatnonzero(rel), np.flatnonzero(~rel)
    parts_r = _pattern_tokens(keys[rep[r]], src[rep[r]], values, val_shapes, same, True,
                              key_shape)
    # absolute ones once per distinct row (a whole-array set shared by every tile's group)
    rows_a, at_a = compact_ids(src[rep[a]], int(src.max()) + 1)
    parts_a = [take_rows(np.asarray(tv, dtype=U64), np.asarray(to, dtype=np.int64), at_a)
               for tv, to in _pattern_tokens(keys[rep[a]][:0], rows_a, values, val_shapes,
                                             same, False, key_shape)]
    back = np.argsort(np.concatenate([r, a]), kind="stable")  # to group order
    pat = []
    for (rt, ro), (at, ao) in zip(parts_r, parts_a):
        tv = np.concatenate([np.asarray(rt, dtype=U64), np.asarray(at, dtype=U64)])
        to = np.concatenate([ro[:-1], np.asarray(ao, dtype=np.int64) + ro[-1]])
        pat.append(take_rows(tv, to, back))
    tok, toff = interleave([(ktok, koff), *pat])
    b, blen = varint_encode(tok)
    last = np.append(first[1:], len(kk)) - 1
    p = Patterns(rows=np.sort(sel), records=b, record_offsets=offsets_from_lengths(blen)[toff],
                 kmin=kk[first], kmax=kk[last], relative=rel)
    return p, order[mine], gid[mine]


LIST_FORM, RUN_FORM, STRIDE_FORM, BOX_FORM = 0, 1, 2, 3
_ITEM_TOKENS = np.array([1, 2, 4], dtype=np.int64)


def key_tokens(kk: np.ndarray, gid: np.ndarray, newg: np.ndarray, n_groups: int,
               shape: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Token streams of every group's cells ``K`` (sorted ``kk`` by group ``gid``; ``newg``
    flags each group's first cell), in whichever of four forms takes the fewest bytes:
    header ``(items << 2) | form``, then per item

    - list (0): one cell, ``cell`` for the first, else the cells skipped since the last;
    - runs (1): a run of consecutive cells, ``(a, length - 1)``;
    - strided runs (2): ``count`` runs of one length, ``stride`` cells apart (the rows of
      a box), ``(a, length - 1, count - 1, gap - 1)``, where ``gap`` is the cells between
      two of its runs;
    - box subset (3, only given the key side's ``shape``): ``items`` is
      ``(n << 1) | holes``; then the record of the group's bounding box (its *cover*) in
      one of the forms above, then ``n`` cells as ranks in the cover (its cells counted
      in order), the first as its rank, the others as the ranks skipped since the last:
      the cover's cells not in ``K`` when ``holes``, else those in ``K``. Identity with
      a sparse set of exceptions is then a whole tile with a few holes, not a run broken
      at every exception, and the exceptions' own group lists small ranks, not linear
      gaps across rows.

    ``a`` being the first cell of the group, else the cells skipped since the previous
    item's end, minus one (runs are maximal, so at least one is skipped)."""
    n_mem = np.bincount(gid, minlength=n_groups)
    brk = newg.copy()
    brk[1:] |= kk[1:] != kk[:-1] + U64(1)
    rs = np.flatnonzero(brk)                       # runs: first member, length, group
    rl = np.diff(np.append(rs, len(kk))).astype(np.int64)
    rg = gid[rs]
    rstart = kk[rs]
    rfirst = newg[rs]
    gap = np.zeros(len(rs), dtype=np.int64)        # cells skipped before each run
    if len(rs) > 1:
        gap[1:] = (rstart[1:] - rstart[:-1]).astype(np.int64) - rl[:-1]
    gap[rfirst] = 0
    # strided items: runs of equal length and equal gap (a group's first run has none)
    qb = rfirst.copy()
    qb[1:] |= (rl[1:] != rl[:-1]) | ((gap[1:] != gap[:-1]) & ~rfirst[:-1])
    qs = np.flatnonzero(qb)
    qcount = np.diff(np.append(qs, len(rs)))
    qg = rg[qs]
    n_runs = np.bincount(rg, minlength=n_groups)
    n_quads = np.bincount(qg, minlength=n_groups)
    # every form's tokens for every group; the one with the fewest bytes is kept
    d = np.empty(len(kk), dtype=U64)               # list form: first cell, cells skipped
    if len(kk):
        d[1:] = kk[1:] - kk[:-1] - U64(1)
        d[newg] = kk[newg]
    ra = np.where(rfirst, rstart, (gap - 1).astype(U64))
    run_tok = np.stack([ra, (rl - 1).astype(U64)], axis=1).reshape(-1)
    inner = np.where(qcount > 1, gap[np.minimum(qs + 1, len(rs) - 1)], 1)
    qa = np.where(rfirst[qs], rstart[qs], (gap[qs] - 1).astype(U64))
    quad = np.stack([qa, (rl[qs] - 1).astype(U64), (qcount - 1).astype(U64),
                     (inner - 1).astype(U64)], axis=1).reshape(-1)
    cost = np.stack([_bytes_by(d, gid, n_groups), _bytes_by(run_tok, np.repeat(rg, 2),
                                                            n_groups),
                     _bytes_by(quad, np.repeat(qg, 4), n_groups)])
    form = np.argmin(cost, axis=0)
    items = np.choose(form, [n_mem, n_runs, n_quads])
    boxed = (np.empty(0, dtype=U64), np.zeros(n_groups + 1, dtype=np.int64))
    if shape is not None and len(kk):
        got = _box_subset(kk, gid, newg, n_groups, shape, cost.min(axis=0))
        if got is not None:
            picked, n_items, boxed = got
            form[picked] = BOX_FORM
            items[picked] = n_items
    hdr = (items.astype(U64) << U64(2)) | form.astype(U64)
    msel = form[gid] == LIST_FORM
    rsel = np.repeat(form[rg] == RUN_FORM, 2)
    qsel = np.repeat(form[qg] == STRIDE_FORM, 4)
    rows = np.arange(n_groups + 1, dtype=np.int64)
    return interleave([(hdr, rows),
                       (d[msel], offsets_from_lengths(np.where(form == LIST_FORM, n_mem, 0))),
                       (run_tok[rsel], offsets_from_lengths(np.where(form == RUN_FORM,
                                                                     2 * n_runs, 0))),
                       (quad[qsel], offsets_from_lengths(np.where(form == STRIDE_FORM,
                                                                  4 * n_quads, 0))),
                       boxed])


def _bytes_by(tok: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Varint bytes of the tokens ``tok`` summed per ``group``."""
    return np.bincount(group, weights=varint_lengths(np.asarray(tok, dtype=U64)),
                       minlength=n_groups).astype(np.int64)


#: a group is tried as a box subset only when its bounding box holds at most this many
#: cells per key cell (ranks in a larger box cost as much as the linear gaps)
BOX_SPARSITY = 128


def _box_subset(kk: np.ndarray, gid: np.ndarray, newg: np.ndarray, n_groups: int,
                shape: Sequence[int], best: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]] | None:
    """The groups that take fewer bytes as a subset of their bounding box (form 3 of
    :func:`key_tokens`) than their ``best``, their item fields, and their tokens after the
    header (cover record, ranks) as a CSR over all groups; None when no group does. Only
    boxes of one or two axes (every other extent 1) are tried: their cover is one run or
    one strided item, written without expanding it."""
    shape = tuple(int(x) for x in shape)
    if len(shape) == 0:
        return None
    c = coords(kk, shape)[:, :len(shape)].astype(np.int64)  # (1-d: coords pads an axis)
    first = np.flatnonzero(newg)
    lo = np.minimum.reduceat(c, first, axis=0)
    hi = np.maximum.reduceat(c, first, axis=0)
    ext = hi - lo + 1
    box = np.prod(ext, axis=1)
    n_mem = np.diff(np.append(first, len(kk)))
    flat = np.all(ext[:, :-2] == 1, axis=1) if len(shape) > 2 else np.ones(n_groups, bool)
    listed = np.minimum(box - n_mem, n_mem)
    # a rank gap below 128 is one byte; the cover is a few
    est = 6 + listed
    cand = np.flatnonzero(flat & (est < best) & (box <= BOX_SPARSITY * n_mem))
    if len(cand) == 0:
        return None
    st = np.asarray(strides(shape), dtype=np.int64)
    # the covers: one run, or rows of one length a fixed gap apart
    w = ext[cand, -1]
    h = ext[cand, -2] if len(shape) > 1 else np.ones(len(cand), dtype=np.int64)
    full_w = shape[-1]
    start = (lo[cand] * st).sum(axis=1).astype(U64)
    one_run = (h == 1) | (w == full_w)
    chdr = np.where(one_run, (1 << 2) | RUN_FORM, (1 << 2) | STRIDE_FORM).astype(U64)
    ctok = np.stack([chdr, start, (np.where(one_run, w * h, w) - 1).astype(U64),
                     (h - 1).astype(U64), (full_w - w - 1).astype(U64)], axis=1)
    clen = np.where(one_run, 3, 5)
    cv = ctok.reshape(-1)[(np.arange(5)[None, :] < clen[:, None]).reshape(-1)]
    # every key's rank in its group's box (row-major order: the cover's order)
    pos = np.full(n_groups, -1, dtype=np.int64)
    pos[cand] = np.arange(len(cand))
    mine = np.flatnonzero(pos[gid] >= 0)
    g = pos[gid[mine]]
    bstride = np.ones((len(cand), len(shape)), dtype=np.int64)
    for ax in range(len(shape) - 2, -1, -1):
        bstride[:, ax] = bstride[:, ax + 1] * ext[cand, ax + 1]
    rank = ((c[mine] - lo[cand][g]) * bstride[g]).sum(axis=1)
    holes = 2 * (box[cand] - n_mem[cand]) <= box[cand]    # list the holes, else the members
    if holes.any():  # holes: the ranks not taken, boxes at most twice their keys
        hb = np.where(holes, box[cand], 0)
        ho = offsets_from_lengths(hb)
        taken = np.zeros(int(ho[-1]), dtype=bool)
        hm = holes[g]
        taken[ho[:-1][g[hm]] + rank[hm]] = True
        free = np.flatnonzero(~taken)
        fg = np.searchsorted(ho, free, side="right") - 1
        rank = np.concatenate([rank[~hm], free - ho[:-1][fg]])
        g = np.concatenate([g[~hm], fg])
        order = np.lexsort((rank, g))
        rank, g = rank[order], g[order]
    n = np.bincount(g, minlength=len(cand))
    rfirst = np.zeros(len(rank), dtype=bool)
    rfirst[offsets_from_lengths(n)[:-1][n > 0]] = True
    rtok = np.empty(len(rank), dtype=U64)
    if len(rank):
        rtok[1:] = (rank[1:] - rank[:-1] - 1).astype(U64)
        rtok[rfirst] = rank[rfirst].astype(U64)
    tok, off = interleave([(cv, offsets_from_lengths(clen)), (rtok, offsets_from_lengths(n))])
    item = (n.astype(U64) << U64(1)) | holes.astype(U64)
    real = (_bytes_by(tok, row_ids(off), len(cand)) + varint_lengths(
        (item << U64(2)) | U64(BOX_FORM)))
    keep = np.flatnonzero(real < best[cand])
    if len(keep) == 0:
        return None
    tv, to = take_rows(np.asarray(tok, dtype=U64), off, keep)
    lens = np.zeros(n_groups, dtype=np.int64)
    lens[cand[keep]] = np.diff(to)
    return cand[keep], item[keep], (tv, offsets_from_lengths(lens))


def decode_keys(tok: np.ndarray, pos: np.ndarray) -> Decoded:
    """Decode the ``K`` (see :func:`key_tokens`) of the records whose tokens start at
    ``pos``, as runs (strided items expanded to their runs, box subsets to theirs)."""
    pos = np.asarray(pos, dtype=np.int64)
    form = (tok[pos] & U64(3)).astype(np.int64) if len(pos) else np.zeros(0, np.int64)
    boxed = form == BOX_FORM
    if not boxed.any():
        return _decode_plain(tok, pos)
    b, p = np.flatnonzero(boxed), np.flatnonzero(~boxed)
    dp = _decode_plain(tok, pos[p])
    dc = _decode_plain(tok, pos[b] + 1)  # the covers
    item = (tok[pos[b]] >> U64(2)).astype(np.int64)
    n, holes = item >> 1, (item & 1).astype(bool)
    no = offsets_from_lengths(n)
    ng = np.repeat(np.arange(len(b), dtype=np.int64), n)
    raw = tok[gather_index(dc.sets_at, n)]
    first = np.zeros(len(raw), dtype=bool)
    first[no[:-1][n > 0]] = True
    inc = raw + U64(1)
    inc[first] = raw[first]
    rank = segment_cumsum(inc, no, ng).astype(np.int64)
    # rank -> cell through the covers' runs (cumulative lengths, one line for all groups)
    cum = np.cumsum(dc.lengths)
    before = cum - dc.lengths                   # cells of all earlier runs
    gfirst = np.zeros(len(b), dtype=np.int64)   # cells of earlier groups' covers
    f = run_starts(dc.group)
    gfirst[dc.group[f]] = before[f]
    line = rank + gfirst[ng]
    r = np.searchsorted(cum, line, side="right")
    cell = dc.starts[r] + (line - before[r]).astype(U64)
    hs, hl, hg = _cut(dc.starts, dc.lengths, dc.group, cell[holes[ng]], ng[holes[ng]])
    keep = holes[hg]
    mem = ~holes[ng]
    st = np.concatenate([hs[keep], cell[mem]])
    ln = np.concatenate([hl[keep], np.ones(int(mem.sum()), dtype=np.int64)])
    gb = np.concatenate([hg[keep], ng[mem]])
    # both parts' runs, by group (original order) then start
    g = np.concatenate([p[dp.group], b[gb]])
    st = np.concatenate([dp.starts, st])
    ln = np.concatenate([dp.lengths, ln])
    if len(g) > 1 and not (g[1:] >= g[:-1]).all():
        # each group's runs come from one part, sorted by start: order by group alone
        order = np.argsort(g, kind="stable")
        st, ln, g = st[order], ln[order], g[order]
    n_rec = len(pos)
    kmin = np.zeros(n_rec, dtype=U64)
    kmax = np.zeros(n_rec, dtype=U64)
    if len(g):
        f = run_starts(g)
        last = np.append(f[1:], len(g)) - 1
        kmin[g[f]] = st[f]
        kmax[g[last]] = st[last] + (ln[last] - 1).astype(U64)
    sets_at = np.empty(n_rec, dtype=np.int64)
    sets_at[p] = dp.sets_at
    sets_at[b] = dc.sets_at + n
    return Decoded(st, ln, g, kmin, kmax, sets_at)


def _cut(starts: np.ndarray, lengths: np.ndarray, group: np.ndarray, holes: np.ndarray,
         hole_group: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs ``(starts, lengths)`` of groups ``group`` (sorted by group then start) with the
    cells ``holes`` (sorted by group then cell, each inside a run of its group) removed:
    the pieces left, non-empty, in the same order."""
    if len(holes) == 0:
        return starts, lengths, group
    # one increasing line for every group: a group's cells shifted past the one before
    ends = starts + lengths.astype(U64)
    n_groups = int(max(group.max(initial=-1), hole_group.max(initial=-1))) + 1
    gmin = np.zeros(n_groups, dtype=np.int64)
    gspan = np.zeros(n_groups, dtype=np.int64)
    f = run_starts(group)
    last = np.append(f[1:], len(group)) - 1
    gmin[group[f]] = starts[f].astype(np.int64)
    gspan[group[f]] = ends[last].astype(np.int64) - gmin[group[f]]
    base = np.concatenate([[0], np.cumsum(gspan)[:-1]]) - gmin
    rs = starts.astype(np.int64) + base[group]
    re = ends.astype(np.int64) + base[group]
    h = holes.astype(np.int64) + base[hole_group]
    lo = np.searchsorted(h, rs)
    hi = np.searchsorted(h, re)
    cnt = hi - lo                       # holes inside each run: cnt + 1 pieces
    pieces = cnt + 1
    po = offsets_from_lengths(pieces)
    k = np.arange(int(po[-1]), dtype=np.int64) - np.repeat(po[:-1], pieces)
    r = np.repeat(np.arange(len(rs), dtype=np.int64), pieces)
    hidx = lo[r] + k                     # the hole ending piece k (k < cnt)
    a = np.where(k == 0, rs[r], h[np.maximum(hidx - 1, 0)] + 1)
    e = np.where(k == cnt[r], re[r], h[np.minimum(hidx, len(h) - 1)])
    keep = e > a
    r, a, e = r[keep], a[keep], e[keep]
    g = group[r]
    return (a - base[g]).astype(U64), (e - a).astype(np.int64), g


def _decode_plain(tok: np.ndarray, pos: np.ndarray) -> Decoded:
    """:func:`decode_keys` for records in the list, runs or strided form only."""
    pos = np.asarray(pos, dtype=np.int64)
    hdr = tok[pos]
    form = (hdr & U64(3)).astype(np.int64)
    n = (hdr >> U64(2)).astype(np.int64)
    width = _ITEM_TOKENS[form]
    ntok = n * width
    tok_off = offsets_from_lengths(ntok)
    item_off = offsets_from_lengths(n)
    grp = np.repeat(np.arange(len(pos), dtype=np.int64), n)
    local = np.arange(len(grp), dtype=np.int64) - item_off[:-1][grp]
    w = width[grp]
    at = np.repeat(pos + 1, n) + local * w
    a = tok[at]
    length = np.where(w > 1, tok[np.where(w > 1, at + 1, at)].astype(np.int64) + 1, 1)
    count = np.where(w > 2, tok[np.where(w > 2, at + 2, at)].astype(np.int64) + 1, 1)
    inner = np.where(w > 2, tok[np.where(w > 2, at + 3, at)].astype(np.int64) + 1, 0)
    span = count * length + (count - 1) * inner     # first cell to one past the last
    first = local == 0
    prev_span = np.zeros(len(grp), dtype=U64)
    prev_span[1:] = span[:-1].astype(U64)
    inc = a + prev_span + (w > 1).astype(U64)
    inc[first] = a[first]
    istart = segment_cumsum(inc, item_off, grp)
    # runs: every item's count runs, (length + inner) apart
    k = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(
        offsets_from_lengths(count)[:-1], count)
    starts = np.repeat(istart, count) + (k * np.repeat(length + inner, count)).astype(U64)
    lengths = np.repeat(length, count)
    group = np.repeat(grp, count)
    last = item_off[1:] - 1
    kmin = istart[item_off[:-1]]
    kmax = istart[last] + (span[last] - 1).astype(U64)
    return Decoded(starts, lengths, group, kmin, kmax, pos + 1 + ntok)



# ---------------------------------------------------------------------------------------
# lookups
# ---------------------------------------------------------------------------------------


def groups_meeting(ranges: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Ids (uint64) of the groups whose key range (the range blob) holds a cell of ``q``."""
    r = ranges.reshape(-1, 2)
    lo = np.searchsorted(q, r[:, 0])
    hi = np.searchsorted(q, r[:, 1], side="right")
    return np.flatnonzero(hi > lo).astype(U64)


def value_sets(tok: np.ndarray, d: Decoded, j: int, val_shapes: Sequence[Sequence[int]]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Side ``j``'s pattern per group: ``(values, offsets, relative)`` (relative ones are
    offsets as two's-complement uint64)."""
    p = d.sets_at
    for s in range(j):
        p = p + set_token_count(tok, p, len(val_shapes[s]))
    v, o, rel, _ = decode_sets(tok, p, val_shapes[j])
    return v, o, rel


def _only(v: np.ndarray, o: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR ``(v, o)`` with every row not flagged in ``rows`` emptied."""
    keep = rows[row_ids(o)]
    return v[keep], offsets_from_lengths(np.where(rows, np.diff(o), 0))


def expand_keys(d: Decoded, groups: np.ndarray) -> np.ndarray:
    """Every key cell of the flagged ``groups`` (unsorted across groups)."""
    r = np.flatnonzero(groups[d.group])
    ln = d.lengths[r]
    lo = offsets_from_lengths(ln)
    return (np.repeat(d.starts[r], ln)
            + (np.arange(int(lo[-1]), dtype=np.int64) - np.repeat(lo[:-1], ln)).astype(U64))


def keyed_cells(d: Decoded, q: np.ndarray, v: np.ndarray, o: np.ndarray, rel: np.ndarray,
                key_shape: Sequence[int] | None = None, val_shape: Sequence[int] | None = None
                ) -> np.ndarray:
    """Value cells (unsorted, with repeats) of the groups' key cells in ``q``: per run of
    ``K``, its cells in ``q`` by two binary searches, their anchors (:func:`anchor_cells`,
    the cells themselves unless both shapes are given and differ) plus each offset
    (relative groups); an absolute group's set once if any of its cells is in ``q``."""
    n_groups = len(d.kmin)
    lo = np.searchsorted(q, d.starts)
    hi = np.searchsorted(q, d.starts + d.lengths.astype(U64))
    cnt = (hi - lo).astype(np.int64)
    hg = np.repeat(d.group, cnt)
    hits = q[gather_index(lo, cnt)]
    r = rel[hg]
    hits, hg = hits[r], hg[r]
    if key_shape is not None and val_shape is not None and len(hits):
        hits = anchor_cells(hits, key_shape, val_shape)
    olen = np.diff(o)[hg]
    out = [np.repeat(hits, olen) + v[gather_index(o[:-1][hg], olen)]]
    hit_groups = np.bincount(d.group, weights=cnt, minlength=n_groups) > 0
    ag = np.flatnonzero(hit_groups & ~rel)
    if len(ag):
        out.append(take_rows(v, o, ag)[0])
    return np.concatenate(out)


def _side_patterns(tok: np.ndarray, d: Decoded, j: int, val_shapes: Sequence[Sequence[int]],
                   pick: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where the side-``j`` patterns of the groups ``d`` start in ``tok``, which are
    relative, and the relative ones of the groups ``pick`` (every relative one when None)
    decoded: ``(starts, relative, cells, lengths per group)``."""
    p = d.sets_at
    for s_ in range(j):
        p = p + set_token_count(tok, p, len(val_shapes[s_]))
    n = len(p)
    kind = (tok[p] & U64(3)).astype(np.int64) if n else np.zeros(0, np.int64)
    rel = (kind == 1) | (kind == 3)
    ri = np.flatnonzero(rel if pick is None else rel & pick)
    vv, oo, _, _ = decode_sets(tok, p[ri], val_shapes[j])
    lens = np.zeros(n, dtype=np.int64)
    lens[ri] = np.diff(oo)
    return p, rel, vv, lens


def keyed_groups(tok: np.ndarray, d: Decoded, j: int, val_shapes: Sequence[Sequence[int]],
                 q: np.ndarray, key_shape: Sequence[int]) -> np.ndarray:
    """:func:`keyed_cells` of the decoded groups ``d`` (their side-``j`` patterns read from
    ``tok``), decoding only the relative patterns and each distinct absolute pattern of a
    group holding a query cell once: the groups of the tiles of a whole-array dependency
    share one large set."""
    lo = np.searchsorted(q, d.starts)
    hi = np.searchsorted(q, d.starts + d.lengths.astype(U64))
    hit = np.bincount(d.group, weights=hi - lo, minlength=len(d.sets_at)) > 0
    p, rel, vv, lens = _side_patterns(tok, d, j, val_shapes, hit)
    out = []
    if (rel & hit).any():
        out.append(keyed_cells(d, q, vv, offsets_from_lengths(lens), rel, key_shape,
                               val_shapes[j]))
    ai = np.flatnonzero(~rel & hit)
    if len(ai):
        cnt = set_token_count(tok, p[ai], len(val_shapes[j]))
        _, first = dedup_rows(tok[gather_index(p[ai], cnt)], offsets_from_lengths(cnt))
        out.append(decode_sets(tok, p[ai[first]], val_shapes[j])[0])
    return np.concatenate(out) if out else np.empty(0, dtype=U64)


def unkeyed_groups(tok: np.ndarray, d: Decoded, j: int, val_shapes: Sequence[Sequence[int]],
                   q: np.ndarray, members: Members, shape: Sequence[int] | None,
                   deadline: float | None,
                   shapes: tuple[Sequence[int], Sequence[int]] | None = None) -> np.ndarray:
    """:func:`unkeyed_cells` of the decoded groups ``d`` (their side-``j`` patterns read
    from ``tok``), decoding each distinct absolute pattern once: the groups of the tiles
    of a whole-array dependency share one large set, tested against ``q`` once."""
    p, rel, vv, lens = _side_patterns(tok, d, j, val_shapes)
    ri, ai = np.flatnonzero(rel), np.flatnonzero(~rel)
    out = []
    if len(ri):
        ro = offsets_from_lengths(lens)
        if shapes is not None and tuple(shapes[0]) != tuple(shapes[1]):
            out.append(_anchored_cells(d, members, vv, ro, rel, shapes, deadline))
        else:
            out.append(forward_cells(d, q, members, vv, ro, shape, deadline))
    if len(ai):
        cnt = set_token_count(tok, p[ai], len(val_shapes[j]))
        inv, first = dedup_rows(tok[gather_index(p[ai], cnt)], offsets_from_lengths(cnt))
        av, ao, _, _ = decode_sets(tok, p[ai[first]], val_shapes[j])
        hit = np.zeros(len(p), dtype=bool)
        hit[ai] = segment_any(members(av), ao)[np.asarray(inv, dtype=np.int64)]
        if hit.any():
            out.append(expand_keys(d, hit))
    return np.concatenate(out) if out else np.empty(0, dtype=U64)


def unkeyed_cells(d: Decoded, q: np.ndarray, members: Members, v: np.ndarray, o: np.ndarray,
                  rel: np.ndarray, shape: Sequence[int], deadline: float | None,
                  shapes: tuple[Sequence[int], Sequence[int]] | None = None) -> np.ndarray:
    """Key cells (unsorted) whose value set meets the value cells ``q``: ``K & (q - O)``
    for relative groups (:func:`encoders.layouts.relgroups.forward_cells`), all of ``K``
    for an absolute group whose set meets ``q``. ``shapes``: the key and value sides'
    shapes; where they differ, relative groups are anchored (:func:`anchor_cells`) and
    tested by expanding them (:func:`_anchored_cells`)."""
    rv, ro = _only(v, o, rel)
    if shapes is not None and tuple(shapes[0]) != tuple(shapes[1]):
        out = [_anchored_cells(d, members, rv, ro, rel, shapes, deadline)]
    else:
        out = [forward_cells(d, q, members, rv, ro, shape, deadline)]
    av, ao = _only(v, o, ~rel)  # relative rows hold offsets, not cells
    hit = ~rel & segment_any(members(av), ao)
    if hit.any():
        out.append(expand_keys(d, hit))
    return np.concatenate(out)


def value_ranges(p: Patterns, key_shape: Sequence[int], val_shape: Sequence[int]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per group of ``p`` (one value side, of ``val_shape``), the smallest and largest
    value cell its keys reach (``lo > hi`` for an empty pattern): what a lookup by value
    cell tests to skip a group it cannot meet."""
    from encoders.layouts.cellindex import record_tokens

    n = len(p)
    lo = np.ones(n, dtype=U64)
    hi = np.zeros(n, dtype=U64)
    if n == 0:
        return lo, hi
    tok, toff, _ = record_tokens(np.asarray(p.records, dtype=np.uint8),
                                 np.asarray(p.record_offsets, dtype=np.int64))
    d = decode_keys(tok, toff[:-1])
    p_ = d.sets_at
    cnt = set_token_count(tok, p_, len(val_shape))
    inv, first = dedup_rows(tok[gather_index(p_, cnt)], offsets_from_lengths(cnt))
    inv = np.asarray(inv, dtype=np.int64)  # each distinct pattern decoded once
    v, o, urel, _ = decode_sets(tok, p_[first], val_shape)
    rel = urel[inv]
    olen = np.diff(o)[inv]
    has = olen > 0
    vi = v.view(np.int64) if len(v) else v.astype(np.int64)
    umin = np.zeros(len(first), dtype=np.int64)
    umax = np.zeros(len(first), dtype=np.int64)
    uhas = np.diff(o) > 0
    if uhas.any():
        umin[uhas] = np.minimum.reduceat(vi, o[:-1][uhas])
        umax[uhas] = np.maximum.reduceat(vi, o[:-1][uhas])
    vmin, vmax = umin[inv], umax[inv]
    amin = np.zeros(n, dtype=np.int64)
    amax = np.zeros(n, dtype=np.int64)
    if rel.any():  # the keys' anchors: expanded (a group's keys lie in one tile)
        keys = expand_keys(d, np.ones(n, dtype=bool))
        kg = np.repeat(d.group, d.lengths)
        a = anchor_cells(keys, key_shape, val_shape).astype(np.int64)
        first = run_starts(kg)
        amin[kg[first]] = np.minimum.reduceat(a, first)
        amax[kg[first]] = np.maximum.reduceat(a, first)
    top = int(np.prod(val_shape, dtype=np.int64)) - 1
    glo = np.clip(np.where(rel, amin + vmin, vmin), 0, max(top, 0))
    ghi = np.clip(np.where(rel, amax + vmax, vmax), 0, max(top, 0))
    lo[has], hi[has] = glo[has].astype(U64), ghi[has].astype(U64)
    return lo, hi


def _anchored_cells(d: Decoded, members: Members, v: np.ndarray, o: np.ndarray,
                    rel: np.ndarray, shapes: tuple[Sequence[int], Sequence[int]],
                    deadline: float | None) -> np.ndarray:
    """Key cells of the ``rel`` groups whose anchored pattern (anchor plus offsets ``(v,
    o)``) meets ``members``: every key's cells expanded, about :data:`_REL_CHUNK` cells at
    a time."""
    from encoders.base import check_deadline

    runs = np.flatnonzero(rel[d.group])
    if len(runs) == 0:
        return np.empty(0, dtype=U64)
    ln = d.lengths[runs]
    lo = offsets_from_lengths(ln)
    keys = (np.repeat(d.starts[runs], ln)
            + (np.arange(int(lo[-1]), dtype=np.int64) - np.repeat(lo[:-1], ln)).astype(U64))
    kg = np.repeat(d.group[runs], ln)
    olen = np.diff(o)
    per = olen[kg]
    out = []
    step = max(1, _REL_CHUNK // max(1, int(olen.max(initial=1))))
    for c in range(0, len(keys), step):
        check_deadline(deadline)
        k, g, n = keys[c:c + step], kg[c:c + step], per[c:c + step]
        cells = (np.repeat(anchor_cells(k, *shapes), n)
                 + v[gather_index(o[:-1][g], n)])
        hit = segment_any(members(cells), offsets_from_lengths(n))
        out.append(k[hit])
    return np.concatenate(out)


__all__ = ["aligned", "box_rows", "anchor_cells", "value_ranges", "keyed_groups", "unkeyed_groups", "TILE", "MIN_GROUP", "Patterns", "build", "key_tokens", "decode_keys",
           "groups_meeting", "value_sets",
           "expand_keys", "keyed_cells", "unkeyed_cells"]
