"""FullCompact's pattern groups: key cells that share one relative (or absolute) pattern.

After the pairs of a shard are grouped by key cell (each key cell ``k`` with the union of
its value sets ``S_j(k)``, one per value side ``j``), most regular lineage repeats one
*pattern* over many key cells: the identity ``S(k) = {k}``, a box at a fixed offset, a
clipped box along one border, or one absolute set for a whole row or a whole array. A
key cell's pattern is, per value side, the codec's token stream of ``S_j(k) - k`` where the
side is shaped like the key side (*relative*: translation invariant), else of ``S_j(k)``
(*absolute*). Key cells whose relative pattern at least ``min_group`` cells of one tile
share form a group ``(K, P)``; of the others, those whose absolute pattern enough cells
share form one too (a column of a row reduction read forward, the cells of an aggregate).
Every other key cell is left to the residue (stored as FullOne stores it). Absolute patterns
are tokenized once per distinct value row (a pair's sets, however many key cells share it),
relative ones once per key cell with at most :data:`REL_CELLS` value cells; a large shard
whose evenly spaced sample of keys repeats no pattern is left to the residue untokenized.

The patterns are exact: equal token streams are equal sets (:mod:`encoders.formats.codec`),
and a box clipped by the border has other offsets than an interior box, so it is another
group. Relative offsets are linear, so ``k + o`` is the cell itself whatever row it is on.

Record (varint tokens, one plain LMDB entry per group; group ids are the keys)
    ``K`` (:func:`key_tokens`: a delta list, runs of consecutive cells, or strided runs,
    the rows of a box being one item, whichever is shortest), then per value side the
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
from encoders.formats.varint import varint_encode
from encoders.layouts.relgroups import Decoded, forward_cells, tile_ids
from subzero.cells import Ragged
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
_REL_CHUNK = 1 << 22  # value cells expanded at a time to tokenize relative patterns
#: larger key sets are first sampled: without repeats among the sample's patterns (a
#: share :data:`SAMPLE_SHARED` of it) no group is looked for
SAMPLE, SAMPLE_SHARED = 4096, 1 / 32

U64 = np.uint64


@dataclass
class Patterns:
    """Groups built from one keyed side (plain data; see :func:`build`).

    ``rows``: the key rows the groups hold (sorted; the others are the residue);
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

    def ranges(self) -> np.ndarray:
        """The range blob: ``kmin, kmax`` per group as uint8 bytes."""
        return np.stack([self.kmin, self.kmax], axis=1).astype(U64).reshape(-1).view(np.uint8)


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


def _pattern_tokens(keys: np.ndarray, src: np.ndarray, values: Sequence[Ragged],
                    val_shapes: Sequence[Sequence[int]], same: Sequence[bool],
                    relative: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per value side, the token streams of the keys' patterns: relative to the key on the
    sides shaped like the key side when ``relative``, else absolute."""
    return [_relative_tokens(v, s, src, keys) if relative and sm
            else _absolute_tokens([v], [s], src)[0]
            for v, s, sm in zip(values, val_shapes, same)]


def _repeats_in_sample(keys: np.ndarray, src: np.ndarray, values: Sequence[Ragged],
                       val_shapes: Sequence[Sequence[int]], same: Sequence[bool]) -> bool:
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
    inv = _pattern_ids(_pattern_tokens(keys[pick], src[pick], values, val_shapes, same, True),
                       len(pick))
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
    same = [tuple(s) == tuple(key_shape) for s in val_shapes]
    if n > SAMPLE and not _repeats_in_sample(keys, src, values, val_shapes, same):
        return None  # nothing regular: spare tokenizing every key
    tid = tile_ids(keys, key_shape, tile)
    code = np.full(n, -1, dtype=np.int64)
    use_rel = np.zeros(n, dtype=bool)
    if any(same):
        cells = sum(np.diff(np.asarray(v.offsets, dtype=np.int64))[src] for v in values)
        elig = np.flatnonzero(cells <= REL_CELLS)
        if len(elig) >= min_group:
            rel = _pattern_tokens(keys[elig], src[elig], values, val_shapes, same, True)
            inv = _pattern_ids([(tid[elig], np.arange(len(elig) + 1, dtype=np.int64)), *rel],
                               len(elig))
            ok = np.bincount(inv)[inv] >= min_group
            code[elig[ok]], use_rel[elig[ok]] = inv[ok], True
    rest = np.flatnonzero(code < 0)
    if len(rest):
        sizes = sum(np.diff(np.asarray(v.offsets, dtype=np.int64))[src[rest]] for v in values)
        rest = rest[sizes <= ABS_CELLS]
    if len(rest) >= min_group:  # absolute patterns: the tile and the row's sets
        rows, at = compact_ids(src[rest], int(src.max()) + 1)
        rid = _pattern_ids(_absolute_tokens(values, val_shapes, rows), len(rows))
        key = (tid[rest].astype(np.int64) * (int(rid.max()) + 1)
               + rid[np.asarray(at, dtype=np.int64).reshape(-1)])
        _, inv = uniq_inverse(key.astype(U64))[:2]
        inv = np.asarray(inv, dtype=np.int64).reshape(-1)
        ok = np.bincount(inv)[inv] >= min_group
        code[rest[ok]] = inv[ok] + (int(code.max()) + 1)
    pattern = (src, values, val_shapes, same)
    for _ in range(2):  # a second pass without the groups that would not pay
        sel = np.flatnonzero(code >= 0)
        if len(sel) == 0:
            return None
        p, order, gid = _assemble(keys, code, sel, use_rel, pattern)
        size = np.diff(p.record_offsets) + GROUP_BYTES
        lose = size >= KEY_BYTES * np.bincount(gid, minlength=len(p))
        if not pay or not lose.any():
            return p
        code[order[lose[gid]]] = -1
    sel = np.flatnonzero(code >= 0)
    return None if len(sel) == 0 else _assemble(keys, code, sel, use_rel, pattern)[0]


def _assemble(keys: np.ndarray, code: np.ndarray, sel: np.ndarray, use_rel: np.ndarray,
              pattern: tuple) -> tuple[Patterns, np.ndarray, np.ndarray]:
    """The groups of the key rows ``sel`` by their pattern ``code``, the members (key rows)
    ordered by group then cell, and the group of each member."""
    src, values, val_shapes, same = pattern
    order = sel[np.argsort(code[sel], kind="stable")]  # by group, keys sorted within
    kk, gc = keys[order], code[order]
    newg = np.ones(len(kk), dtype=bool)
    newg[1:] = gc[1:] != gc[:-1]
    gid = np.cumsum(newg) - 1
    n_groups = int(gid[-1]) + 1
    first = np.flatnonzero(newg)
    rep = order[first]                    # a member key row per group: its pattern
    rel = use_rel[rep]
    ktok, koff = key_tokens(kk, gid, newg, n_groups)
    # the patterns of the groups' representatives: relative ones, then absolute ones
    r, a = np.flatnonzero(rel), np.flatnonzero(~rel)
    parts_r = _pattern_tokens(keys[rep[r]], src[rep[r]], values, val_shapes, same, True)
    parts_a = _pattern_tokens(keys[rep[a]], src[rep[a]], values, val_shapes, same, False)
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
    return p, order, gid


LIST_FORM, RUN_FORM, STRIDE_FORM = 0, 1, 2
_ITEM_TOKENS = np.array([1, 2, 4], dtype=np.int64)


def key_tokens(kk: np.ndarray, gid: np.ndarray, newg: np.ndarray, n_groups: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Token streams of every group's cells ``K`` (sorted ``kk`` by group ``gid``; ``newg``
    flags each group's first cell), in the shortest of three forms: header
    ``(items << 2) | form``, then per item

    - list (0): one cell, ``cell`` for the first, else the cells skipped since the last;
    - runs (1): a run of consecutive cells, ``(a, length - 1)``;
    - strided runs (2): ``count`` runs of one length, ``stride`` cells apart (the rows of
      a box), ``(a, length - 1, count - 1, gap - 1)``, where ``gap`` is the cells between
      two of its runs;

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
    # strided items: runs of equal length and equal gap, after a group's first run
    qb = rfirst.copy()
    qb[1:] |= (rl[1:] != rl[:-1]) | (gap[1:] != gap[:-1]) | rfirst[:-1]
    qs = np.flatnonzero(qb)
    qcount = np.diff(np.append(qs, len(rs)))
    qg = rg[qs]
    n_runs = np.bincount(rg, minlength=n_groups)
    n_quads = np.bincount(qg, minlength=n_groups)
    cost = np.stack([n_mem, 2 * n_runs, 4 * n_quads])
    form = np.argmin(cost, axis=0)
    items = np.choose(form, [n_mem, n_runs, n_quads])
    hdr = (items.astype(U64) << U64(2)) | form.astype(U64)
    # list form: first cell, then cells skipped
    msel = form[gid] == LIST_FORM
    lk, lfirst = kk[msel], newg[msel]
    d = np.empty(len(lk), dtype=U64)
    if len(lk):
        d[1:] = lk[1:] - lk[:-1] - U64(1)
        d[lfirst] = lk[lfirst]
    # runs form
    rsel = form[rg] == RUN_FORM
    ra = np.where(rfirst, rstart, (gap - 1).astype(U64))[rsel]
    run_tok = np.stack([ra, (rl[rsel] - 1).astype(U64)], axis=1).reshape(-1)
    # strided form: the gap inside an item is the one before its second run
    qsel = form[qg] == STRIDE_FORM
    inner = np.where(qcount > 1, gap[np.minimum(qs + 1, len(rs) - 1)], 1)
    qa = np.where(rfirst[qs], rstart[qs], (gap[qs] - 1).astype(U64))
    quad = np.stack([qa, (rl[qs] - 1).astype(U64), (qcount - 1).astype(U64),
                     (inner - 1).astype(U64)], axis=1)[qsel].reshape(-1)
    rows = np.arange(n_groups + 1, dtype=np.int64)
    return interleave([(hdr, rows),
                       (d, offsets_from_lengths(np.where(form == LIST_FORM, n_mem, 0))),
                       (run_tok, offsets_from_lengths(np.where(form == RUN_FORM, 2 * n_runs,
                                                               0))),
                       (quad, offsets_from_lengths(np.where(form == STRIDE_FORM, 4 * n_quads,
                                                            0)))])


def decode_keys(tok: np.ndarray, pos: np.ndarray) -> Decoded:
    """Decode the ``K`` (see :func:`key_tokens`) of the records whose tokens start at
    ``pos``, as runs (strided items expanded to their runs)."""
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


def keyed_cells(d: Decoded, q: np.ndarray, v: np.ndarray, o: np.ndarray, rel: np.ndarray
                ) -> np.ndarray:
    """Value cells (unsorted, with repeats) of the groups' key cells in ``q``: per run of
    ``K``, its cells in ``q`` by two binary searches, plus each offset (relative groups);
    an absolute group's set once if any of its cells is in ``q``."""
    n_groups = len(d.kmin)
    lo = np.searchsorted(q, d.starts)
    hi = np.searchsorted(q, d.starts + d.lengths.astype(U64))
    cnt = (hi - lo).astype(np.int64)
    hg = np.repeat(d.group, cnt)
    hits = q[gather_index(lo, cnt)]
    r = rel[hg]
    hits, hg = hits[r], hg[r]
    olen = np.diff(o)[hg]
    out = [np.repeat(hits, olen) + v[gather_index(o[:-1][hg], olen)]]
    hit_groups = np.bincount(d.group, weights=cnt, minlength=n_groups) > 0
    ag = np.flatnonzero(hit_groups & ~rel)
    if len(ag):
        out.append(take_rows(v, o, ag)[0])
    return np.concatenate(out)


def unkeyed_cells(d: Decoded, q: np.ndarray, members: Members, v: np.ndarray, o: np.ndarray,
                  rel: np.ndarray, shape: Sequence[int], deadline: float | None
                  ) -> np.ndarray:
    """Key cells (unsorted) whose value set meets the value cells ``q``: ``K & (q - O)``
    for relative groups (:func:`encoders.layouts.relgroups.forward_cells`), all of ``K``
    for an absolute group whose set meets ``q``."""
    rv, ro = _only(v, o, rel)
    out = [forward_cells(d, q, members, rv, ro, shape, deadline)]
    av, ao = _only(v, o, ~rel)  # relative rows hold offsets, not cells
    hit = ~rel & segment_any(members(av), ao)
    if hit.any():
        out.append(expand_keys(d, hit))
    return np.concatenate(out)


__all__ = ["TILE", "MIN_GROUP", "Patterns", "build", "key_tokens", "decode_keys",
           "groups_meeting", "value_sets",
           "expand_keys", "keyed_cells", "unkeyed_cells"]
