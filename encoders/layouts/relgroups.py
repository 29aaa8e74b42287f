"""FullMany's grouped entries: many one-output-cell pairs stored relative to their cell.

Per-pixel lineage (identity, a stencil box, a window around a flagged pixel) is millions of
region pairs whose output side is ONE cell ``k``. Written relative to ``k`` (linear
offsets ``O_i = S_i - k`` of the input-``i`` cells; exact: a box clipped at the border has
other offsets than an interior box, so it is another group), most of them are identical.
Pairs whose offsets agree in every input and whose cells ``k`` fall in one *tile* (a
block of at most ``tile`` cells, about square: :func:`tile_shape`) form one group
``(K, O_0 .. O_{n-1})``, meaning the pairs ``({k}, k + O_i)`` for ``k`` in ``K``. A group
is one LMDB entry and one R-tree entry instead of ``|K|`` of each, and decoding it for a
query costs little: ``K`` is a few runs, a relative box a handful of tokens.

The output cell anchors a group in both directions: backward-optimized shards index
``bbox(K)``; forward-optimized ones index, per input, a box covering ``K + O_i`` (``bbox(K)``
grown by the offsets' coordinate extent when no offset can wrap around a row there, else
the box of its linear range). Pairs with several output cells (a star and its ring) stay
ordinary entries; a pair whose only single cell is an input cell (fan-out lineage) is left
alone too: its offsets are only translation invariant when the shapes agree, which
fan-out operators (upsampling, broadcasting) rarely have.

Record (varint tokens, table ``g``)
    ``K``: header ``(n << 1) | form`` then either a delta list (form 0: ``n`` cells, first
    index then ``gap - 1``) or runs (form 1: ``n`` runs of consecutive cells, ``start`` or
    ``gap - 1`` then ``length - 1``), whichever is shorter. Then per input the token stream
    of the offsets in the codec's relative form (:mod:`encoders.formats.codec`: a box is
    ``1 + 2 * ndim`` tokens however large, the identity ``{k}`` two). Inputs shaped unlike
    the output store relative lists (a box there is no box around ``k``).

Lookups (all vectorized over the groups read)
    output cells ``q`` (backward): ``K & q`` by two binary searches per run of ``K``, then
    ``hits + O_i``. Input-``i`` cells ``q`` (forward): the ``k`` with ``(k + O_i) & q``
    non-empty, i.e. ``K & (q - O_i)``: per group either shift the query cells within
    reach of the group by every offset and look them up in ``K``'s runs, or expand
    ``K + O_i`` and test it against the query, whichever tests fewer cells.

>>> from subzero.cells import Ragged
>>> out = Ragged.from_singletons(np.arange(6, dtype=np.uint64))
>>> ins = [Ragged.from_singletons(np.arange(6, dtype=np.uint64))]  # identity
>>> toks = [set_tokens(ins[0].values, ins[0].offsets, (6,), out.values)]
>>> g = build(out, ins, toks, [True], [(6,)], (6,))
>>> g.rows.tolist(), len(g.record_offsets) - 1   # six pairs, one group
([0, 1, 2, 3, 4, 5], 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, Sequence

import numpy as np

from encoders.base import check_deadline
from encoders.formats.codec import decode_sets, set_token_count, set_tokens
from encoders.formats.csr import (
    gather_index,
    interleave,
    offsets_from_lengths,
    run_starts,
    segment_any,
    segment_cumsum,
    take_rows,
)
from encoders.formats.hashing import dedup_rows
from encoders.formats.varint import varint_encode
from encoders.layouts.keyspace import coords, row_bboxes
from subzero.cells import Ragged
from subzero.frontier import Members

TABLE = "g"
TILE = 4096      # cells per tile: a group's output cells lie in one tile
MIN_GROUP = 2    # "auto": a group of one pair is no smaller than the pair's own entry
SKETCH_MIN = 16  # key tokens per pair above which a sketch first weeds out lone pairs
LIST_FORM, RUN_FORM = 0, 1
_CHUNK = 1 << 22  # cells expanded at a time when testing K + O against a query
_BOX_MIN_OFFSETS = 4  # offsets from which a forward lookup narrows query cells by box

U64 = np.uint64


@dataclass
class Grouped:
    """Groups built from one shard's pairs (plain data; see :func:`build`).

    ``rows``: the pair rows the groups hold (sorted; every other row stays a plain entry);
    ``records``/``record_offsets``: the group records (CSR bytes); ``keys``: each group's
    cells ``K`` (CSR, sorted); ``rep_rows``: a member pair per group (its sets give the
    offsets, for R-tree boxes) and its output cell ``rep_cells``.
    """

    rows: np.ndarray
    records: np.ndarray
    record_offsets: np.ndarray
    keys: Ragged
    rep_rows: np.ndarray
    rep_cells: np.ndarray

    def __len__(self) -> int:
        return len(self.rep_rows)


def tile_shape(shape: Sequence[int], cells: int = TILE) -> tuple[int, ...]:
    """Tile extents for an array of ``shape``: halve the longest axis until a tile holds at
    most ``cells`` cells (a 2001 x 513 image gets 63 x 65 tiles). Square-ish tiles keep
    the R-tree boxes of groups small."""
    return _tile_shape(tuple(int(s) for s in shape), int(cells))


@lru_cache(maxsize=256)
def _tile_shape(shape: tuple[int, ...], cells: int) -> tuple[int, ...]:
    """:func:`tile_shape` of a shape of Python ints (every few-cell lookup asks again)."""
    t = [max(1, int(s)) for s in shape]
    while int(np.prod(t, dtype=np.int64)) > max(1, cells) and max(t) > 1:
        ax = int(np.argmax(t))
        t[ax] = (t[ax] + 1) // 2
    return tuple(t)


def tile_ids(cells: np.ndarray, shape: Sequence[int], tile: int = TILE) -> np.ndarray:
    """The tile (see :func:`tile_shape`) of every cell, as one uint64 per cell."""
    shape = tuple(int(s) for s in shape)
    t = tile_shape(shape, tile)
    c = coords(cells, shape)
    ids = np.zeros(len(cells), dtype=U64)
    for ax, (n, e) in enumerate(zip(shape, t)):
        ids = ids * U64(-(-n // e)) + (c[:, ax] // e).astype(U64)
    return ids


def build(out: Ragged, ins: Sequence[Ragged], in_tokens: Sequence[tuple[np.ndarray, np.ndarray]],
          relative: Sequence[bool], in_shapes: Sequence[Sequence[int]],
          out_shape: Sequence[int], policy: str = "auto", tile: int = TILE) -> Grouped | None:
    """Group the one-output-cell pairs of a merged batch (None when no group forms).

    ``in_tokens[i]`` are the token streams of input ``i``'s sets, relative to each pair's
    first output cell where ``relative[i]`` (else absolute: those sets are re-tokenized
    relative to ``k``, as lists). ``policy``: ``"auto"`` groups offsets shared by at least
    :data:`MIN_GROUP` pairs of a tile, ``"always"`` every one-output-cell pair, ``"never"``
    none.
    """
    if policy == "never":
        return None
    least = 1 if policy == "always" else MIN_GROUP
    oo = np.asarray(out.offsets, dtype=np.int64)
    cand = np.flatnonzero(np.diff(oo) == 1)
    if len(cand) < least:
        return None
    k = np.asarray(out.values, dtype=U64)[oo[:-1][cand]]
    tid = tile_ids(k, out_shape, tile)
    if least > 1 and _key_length(ins, in_tokens, relative, cand) > SKETCH_MIN * len(cand):
        # long keys: first drop the pairs whose offsets surely match no other pair's
        alike = _maybe_shared(tid, k, ins, in_tokens, relative, cand)
        cand, k, tid = cand[alike], k[alike], tid[alike]
        if len(cand) < least:
            return None
    # the grouping key of a pair: its tile, then its relative sets (exact: equal token
    # streams are equal offset sets, see encoders.formats.codec)
    parts = [(tid, np.arange(len(cand) + 1, dtype=np.int64))]
    for r, (tv, to), rel, shp in zip(ins, in_tokens, relative, in_shapes):
        if rel:
            parts.append(take_rows(tv, to, cand))
        else:
            v, o = take_rows(np.asarray(r.values, dtype=U64),
                             np.asarray(r.offsets, dtype=np.int64), cand)
            parts.append(set_tokens(v, o, shp, k, boxes=False))
    kv, ko = interleave(parts)
    inv, first = dedup_rows(kv, ko)
    keep = np.bincount(inv)[inv] >= least
    if not keep.any():
        return None
    sel = np.flatnonzero(keep)
    kk, gold = k[sel], inv[sel]
    order = np.lexsort((kk, gold, tid[sel]))  # groups in tile order, cells sorted
    kk, gold, sel = kk[order], gold[order], sel[order]
    newg = np.ones(len(kk), dtype=bool)
    newg[1:] = gold[1:] != gold[:-1]
    gid = np.cumsum(newg) - 1
    rep = first[gold[newg]]            # candidate index of each group's representative
    dup = np.zeros(len(kk), dtype=bool)  # a cell twice in one group: one pair suffices
    dup[1:] = ~newg[1:] & (kk[1:] == kk[:-1])
    if dup.any():
        kk, gid, newg = kk[~dup], gid[~dup], newg[~dup]
    n_groups = int(gid[-1]) + 1
    mem_off = offsets_from_lengths(np.bincount(gid, minlength=n_groups))
    key_tok, key_off = _key_tokens(kk, gid, newg, n_groups)
    # offsets part of the record: the representative's grouping key minus its tile token
    starts, lens = ko[:-1][rep] + 1, np.diff(ko)[rep] - 1
    tok, toff = interleave([(key_tok, key_off),
                            (kv[gather_index(starts, lens)], offsets_from_lengths(lens))])
    b, blen = varint_encode(tok)
    return Grouped(rows=np.sort(cand[sel]), records=b,
                   record_offsets=offsets_from_lengths(blen)[toff],
                   keys=Ragged(kk, mem_off), rep_rows=cand[rep], rep_cells=k[rep])


def _key_length(ins: Sequence[Ragged], in_tokens: Sequence[tuple[np.ndarray, np.ndarray]],
                relative: Sequence[bool], cand: np.ndarray) -> int:
    """Tokens (or cells, for inputs that need re-tokenizing) in the candidates' keys."""
    n = 0
    for r, (_, to), rel in zip(ins, in_tokens, relative):
        o = np.asarray(to if rel else r.offsets, dtype=np.int64)
        n += int((o[1:][cand] - o[:-1][cand]).sum())
    return n


def _maybe_shared(tid: np.ndarray, k: np.ndarray, ins: Sequence[Ragged],
                  in_tokens: Sequence[tuple[np.ndarray, np.ndarray]], relative: Sequence[bool],
                  cand: np.ndarray) -> np.ndarray:
    """Candidates whose sketch another candidate shares: the tile, and per input the
    length and a dozen tokens of its relative stream (the first six, the last four, two in
    the middle), or the count and a few offsets of its cells. Equal grouping keys have
    equal sketches, so every other candidate is alone in its group; the sketch costs a few
    values per pair where the exact key costs every token (scattered lineage of fanin 100
    would otherwise spend a third of its encoding on finding no groups)."""
    cols = [tid]
    for r, (tv, to), rel in zip(ins, in_tokens, relative):
        if rel:
            vals = tv
            to = np.asarray(to, dtype=np.int64)
            st, ln = to[:-1][cand], np.diff(to)[cand]
        else:
            vals = np.asarray(r.values, dtype=U64)
            ro = np.asarray(r.offsets, dtype=np.int64)
            st, ln = ro[:-1][cand], np.diff(ro)[cand]
        cols.append(ln.astype(U64))
        picks = [st + j for j in range(6)] + [st + ln - j for j in range(1, 5)]
        picks += [st + ln // 2, st + ln // 3]
        for at in picks:
            ok = (at >= st) & (at < st + ln)
            v = vals[np.where(ok, at, 0)] if len(vals) else np.zeros(len(at), dtype=U64)
            if not rel:  # cells relative to the pair's output cell
                v = v - k
            cols.append(np.where(ok, v, U64(0)))
    m = np.stack(cols, axis=1)
    inv, _ = dedup_rows(m.reshape(-1), np.arange(len(m) + 1, dtype=np.int64) * m.shape[1])
    return np.bincount(inv)[inv] >= 2


def _key_tokens(kk: np.ndarray, gid: np.ndarray, newg: np.ndarray, n_groups: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Token streams of every group's cells ``K`` (sorted ``kk`` by group ``gid``)."""
    n_mem = np.bincount(gid, minlength=n_groups)
    brk = newg.copy()
    brk[1:] |= kk[1:] != kk[:-1] + U64(1)
    rstart = np.flatnonzero(brk)
    rlen = np.diff(np.append(rstart, len(kk)))
    rg = gid[rstart]
    n_runs = np.bincount(rg, minlength=n_groups)
    runs = 2 * n_runs < n_mem
    form = np.where(runs, RUN_FORM, LIST_FORM).astype(U64)
    hdr = (np.where(runs, n_runs, n_mem).astype(U64) << U64(1)) | form
    # runs form: (start | gap - 1, length - 1) per run
    rsel = runs[rg]
    rs, rl, rfirst = kk[rstart][rsel], rlen[rsel], newg[rstart][rsel]
    a = np.empty(len(rs), dtype=U64)
    if len(rs):
        a[0] = rs[0]
        a[1:] = rs[1:] - (rs[:-1] + rl[:-1].astype(U64)) - U64(1)
        a[rfirst] = rs[rfirst]
    run_tok = np.stack([a, (rl - 1).astype(U64)], axis=1).reshape(-1)
    # list form: first cell, then gap - 1
    msel = ~runs[gid]
    lk, lfirst = kk[msel], newg[msel]
    d = np.empty(len(lk), dtype=U64)
    if len(lk):
        d[0] = lk[0]
        d[1:] = lk[1:] - lk[:-1] - U64(1)
        d[lfirst] = lk[lfirst]
    rows = np.arange(n_groups + 1, dtype=np.int64)
    return interleave([(hdr, rows),
                       (run_tok, offsets_from_lengths(np.where(runs, 2 * n_runs, 0))),
                       (d, offsets_from_lengths(np.where(runs, 0, n_mem)))])


# ---------------------------------------------------------------------------------------
# R-tree boxes
# ---------------------------------------------------------------------------------------


def range_cover(lo: np.ndarray, hi: np.ndarray, shape: Sequence[int]
                ) -> tuple[np.ndarray, np.ndarray]:
    """The smallest boxes holding every cell of the linear ranges ``[lo, hi]``: an axis
    is narrowed only while every earlier axis keeps one coordinate over the range."""
    cl, ch = coords(lo, shape), coords(hi, shape)
    mins, maxs = cl.copy(), ch.copy()
    same = np.ones(len(lo), dtype=bool)
    for ax, n in enumerate(tuple(int(s) for s in shape)):
        mins[:, ax] = np.where(same, cl[:, ax], 0)
        maxs[:, ax] = np.where(same, ch[:, ax], n - 1)
        same &= cl[:, ax] == ch[:, ax]
    return mins, maxs


def key_boxes(g: Grouped, shape: Sequence[int]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bounding boxes of every group's output cells ``K``: ``(groups, mins, maxs)``."""
    return row_bboxes(g.keys.values, g.keys.offsets, shape)


def input_boxes(g: Grouped, sets: Ragged, shape: Sequence[int], out_shape: Sequence[int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boxes covering every group's input cells ``K + O`` in one input (whose sets, one
    row per pair, are ``sets``): ``(groups with input cells, mins, maxs)``."""
    shape = tuple(int(s) for s in shape)
    v, o = take_rows(np.asarray(sets.values, dtype=U64),
                     np.asarray(sets.offsets, dtype=np.int64), g.rep_rows)
    lens = np.diff(o)
    rows = np.flatnonzero(lens > 0)
    ko = g.keys.offsets
    kmin, kmax = g.keys.values[ko[:-1][rows]], g.keys.values[ko[1:][rows] - 1]
    rep_k = g.rep_cells
    off = v.astype(np.int64) - np.repeat(rep_k.astype(np.int64), lens)
    st = o[:-1][rows]
    omin, omax = np.minimum.reduceat(off, st), np.maximum.reduceat(off, st)
    mins, maxs = range_cover((kmin.astype(np.int64) + omin).astype(U64),
                             (kmax.astype(np.int64) + omax).astype(U64), shape)
    if shape == tuple(int(s) for s in out_shape) and len(rows):
        # offsets as coordinate steps: exact when no step can leave the array from K's box
        _, kmn, kmx = key_boxes(g, shape)
        kmn, kmx = kmn[rows], kmx[rows]
        dc = coords(v, shape) - np.repeat(coords(rep_k, shape), lens, axis=0)
        dmin, dmax = np.minimum.reduceat(dc, st, axis=0), np.maximum.reduceat(dc, st, axis=0)
        lim = np.zeros(mins.shape[1], dtype=np.int64)
        lim[:len(shape)] = np.asarray(shape, dtype=np.int64) - 1
        ok = ((kmn + dmin >= 0) & (kmx + dmax <= lim)).all(axis=1)
        mins[ok], maxs[ok] = (kmn + dmin)[ok], (kmx + dmax)[ok]
    return rows, mins, maxs


# ---------------------------------------------------------------------------------------
# lookups
# ---------------------------------------------------------------------------------------


@dataclass
class Decoded:
    """A batch of group records: ``K`` as runs (``starts``, ``lengths``, ``group`` of each
    run, sorted by group then start), each group's smallest and largest cell, and the
    token position after ``K`` (where the offset sets begin)."""

    starts: np.ndarray
    lengths: np.ndarray
    group: np.ndarray
    kmin: np.ndarray
    kmax: np.ndarray
    sets_at: np.ndarray


def decode_keys(tok: np.ndarray, pos: np.ndarray) -> Decoded:
    """Decode the ``K`` of the records whose tokens start at ``pos``."""
    hdr = tok[pos]
    runs = (hdr & U64(1)) == U64(RUN_FORM)
    n = (hdr >> U64(1)).astype(np.int64)
    ntok = np.where(runs, 2 * n, n)
    x = tok[gather_index(pos + 1, ntok)]
    n_items = n  # runs (form 1) or single cells (form 0) per group
    item_off = offsets_from_lengths(n_items)
    grp = np.repeat(np.arange(len(pos), dtype=np.int64), n_items)
    is_run = runs[grp]
    # position of each item's first token inside x
    tok_off = offsets_from_lengths(ntok)
    local = np.arange(len(grp), dtype=np.int64) - item_off[:-1][grp]
    at = tok_off[:-1][grp] + np.where(is_run, 2 * local, local)
    a = x[at]
    length = np.ones(len(grp), dtype=np.int64)
    if is_run.any():
        length[is_run] = x[at[is_run] + 1].astype(np.int64) + 1
    first = local == 0
    # next start = previous start + previous length + gap; a run's gap token is gap - 1
    # (runs are maximal, gap >= 1), a list's is the cells skipped (gap >= 0)
    prev_len = np.zeros(len(grp), dtype=U64)
    prev_len[1:] = length[:-1].astype(U64)
    inc = a + prev_len + is_run.astype(U64)
    inc[first] = a[first]
    # start = running sum of increments within each group
    starts = segment_cumsum(inc, item_off, grp)
    last = item_off[1:] - 1
    kmin = starts[item_off[:-1]]
    kmax = starts[last] + length[last].astype(U64) - U64(1)
    return Decoded(starts, length, grp, kmin, kmax, pos + 1 + ntok)


def offset_sets(tok: np.ndarray, d: Decoded, i: int, in_shapes: Sequence[Sequence[int]]
                ) -> tuple[np.ndarray, np.ndarray]:
    """Input ``i``'s offsets per group (uint64 two's complement, CSR)."""
    p = d.sets_at
    for s in range(i):
        p = p + set_token_count(tok, p, len(in_shapes[s]))
    v, o, _, _ = decode_sets(tok, p, in_shapes[i])
    return v, o


def backward_cells(d: Decoded, q: np.ndarray, ov: np.ndarray, oo: np.ndarray) -> np.ndarray:
    """Input cells (unsorted, with repeats) of the groups' pairs whose cell is in ``q``."""
    lo = np.searchsorted(q, d.starts)
    hi = np.searchsorted(q, d.starts + d.lengths.astype(U64))
    cnt = hi - lo
    hits = q[gather_index(lo, cnt)]
    hg = np.repeat(d.group, cnt)
    olen = np.diff(oo)[hg]
    return np.repeat(hits, olen) + ov[gather_index(oo[:-1][hg], olen)]


def forward_cells(d: Decoded, q: np.ndarray, members: Members, ov: np.ndarray,
                  oo: np.ndarray, shape: Sequence[int] | None = None,
                  deadline: float | None = None) -> np.ndarray:
    """Output cells ``k`` of the groups whose input cells ``k + O`` meet ``q``.

    ``shape`` (the input's shape, given when it is the output's) narrows the query cells
    that can reach a group from its linear range to its box (see :func:`_reach_boxes`).
    """
    n_groups = len(d.kmin)
    olen = np.diff(oo)
    has = olen > 0
    off = ov.view(np.int64)
    omin = np.zeros(n_groups, dtype=np.int64)
    omax = np.zeros(n_groups, dtype=np.int64)
    if has.any():
        omin[has] = np.minimum.reduceat(off, oo[:-1][has])
        omax[has] = np.maximum.reduceat(off, oo[:-1][has])
    # query cells within reach of each group: q in [kmin + omin, kmax + omax]
    lo_v = np.maximum(d.kmin.astype(np.int64) + omin, 0)
    hi_v = np.maximum(d.kmax.astype(np.int64) + omax, -1)
    qlo = np.searchsorted(q, lo_v.astype(U64))
    qhi = np.where(hi_v < 0, qlo, np.searchsorted(q, hi_v.astype(U64), side="right"))
    nq = np.maximum(qhi - qlo, 0) * has
    # boxes pay off for groups with several offsets: a query cell dropped by its box saves
    # a lookup per offset, and testing it costs about one
    boxed = has & (olen >= _BOX_MIN_OFFSETS)
    boxes = None if shape is None or not boxed.any() else _reach_boxes(d, off, oo, boxed,
                                                                        shape)
    est = nq.astype(np.float64)
    if boxes is not None:  # expect the share of the range inside the box
        mins, maxs, ok = boxes
        vol = np.prod(maxs - mins + 1, axis=1).astype(np.float64)
        est = np.where(ok, nq * np.minimum(1.0, vol / np.maximum(1, hi_v - lo_v + 1)), est)
    nk = np.bincount(d.group, weights=d.lengths, minlength=n_groups)
    shift = has & (nq > 0) & (est <= nk)
    expand = has & (nq > 0) & (est > nk)
    res = [_shifted(d, q, off, oo, olen, qlo, nq, np.flatnonzero(shift), boxes, shape)]
    res += list(_expanded(d, members, ov, oo, olen, expand, deadline))
    return np.concatenate(res)


def _reach_boxes(d: Decoded, off: np.ndarray, oo: np.ndarray, boxed: np.ndarray,
                 shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the ``boxed`` groups, the box of their input cells ``K + O`` as ``bbox(K)``
    grown by the coordinate steps of the offsets (taken at ``kmin``, a cell of ``K``), and
    whether it is valid: no step leaves the array from ``bbox(K)``, so no offset wraps
    around a row and every ``k + o`` is ``coords(k)`` plus its step (the encoder's test).
    Other groups get no valid box."""
    shape = tuple(int(x) for x in shape)
    n_groups = len(boxed)
    width = max(len(shape), 2)
    mins = np.zeros((n_groups, width), dtype=np.int64)
    maxs = np.zeros((n_groups, width), dtype=np.int64)
    runs = np.flatnonzero(boxed[d.group])
    groups = np.flatnonzero(boxed)
    rmin, rmax = range_cover(d.starts[runs], d.starts[runs] + (d.lengths[runs] - 1).astype(U64),
                             shape)
    g = d.group[runs]
    first = run_starts(g)
    kmn = np.minimum.reduceat(rmin, first, axis=0)
    kmx = np.maximum.reduceat(rmax, first, axis=0)
    cnt = np.diff(oo)[groups]
    k0 = np.repeat(d.kmin[groups], cnt)
    step = coords(k0 + off.view(U64)[gather_index(oo[:-1][groups], cnt)], shape) - coords(k0,
                                                                                        shape)
    st = offsets_from_lengths(cnt)[:-1]
    mins[groups] = kmn + np.minimum.reduceat(step, st, axis=0)
    maxs[groups] = kmx + np.maximum.reduceat(step, st, axis=0)
    lim = np.zeros(width, dtype=np.int64)
    lim[:len(shape)] = np.asarray(shape, dtype=np.int64) - 1
    ok = boxed & ((mins >= 0) & (maxs <= lim)).all(axis=1)
    return mins, maxs, ok


def _shifted(d: Decoded, q: np.ndarray, off: np.ndarray, oo: np.ndarray, olen: np.ndarray,
             qlo: np.ndarray, nq: np.ndarray, groups: np.ndarray,
             boxes: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
             shape: Sequence[int] | None) -> np.ndarray:
    """For the ``groups`` given: the cells ``x - o`` (``x`` a query cell within reach,
    ``o`` an offset) that are in ``K``."""
    if len(groups) == 0:
        return np.empty(0, dtype=U64)
    pg = np.repeat(groups, nq[groups])                    # one (group, query cell) per pair
    x = q[gather_index(qlo[groups], nq[groups])]
    if boxes is not None:  # keep the query cells inside the group's box
        mins, maxs, ok = boxes
        chk = ok[pg]
        if chk.any():
            c, cg = coords(x[chk], shape), pg[chk]
            keep = ~chk
            keep[chk] = ((c >= mins[cg]) & (c <= maxs[cg])).all(axis=1)
            pg, x = pg[keep], x[keep]
    x = x.astype(np.int64)
    n_o = olen[pg]
    cand = np.repeat(x, n_o) - off[gather_index(oo[:-1][pg], n_o)]
    cg = np.repeat(pg, n_o)
    # look every candidate up in its group's runs: groups laid end to end by their span
    span = (d.kmax - d.kmin).astype(np.int64) + 1
    gbase = offsets_from_lengths(span)
    kmin = d.kmin.astype(np.int64)
    run_key = gbase[d.group] + (d.starts.astype(np.int64) - kmin[d.group])
    rel = cand - kmin[cg]
    keep = (rel >= 0) & (rel < span[cg])
    cand, ckey = cand[keep], gbase[cg[keep]] + rel[keep]
    j = np.searchsorted(run_key, ckey, side="right") - 1
    hit = ckey < run_key[j] + d.lengths[j]
    return cand[hit].astype(U64)


def _expanded(d: Decoded, members: Members, ov: np.ndarray, oo: np.ndarray, olen: np.ndarray,
              groups: np.ndarray, deadline: float | None) -> Iterator[np.ndarray]:
    """For the groups flagged in ``groups``: the cells ``k`` of ``K`` with some ``k + o``
    in the query, expanding about :data:`_CHUNK` cells at a time."""
    sel = np.flatnonzero(groups[d.group])  # runs of those groups
    if len(sel) == 0:
        return
    cost = np.cumsum(d.lengths[sel] * olen[d.group[sel]])
    cuts = np.searchsorted(cost, np.arange(1, int(cost[-1]) // _CHUNK + 1) * _CHUNK)
    for r in np.split(sel, cuts):
        check_deadline(deadline)
        if len(r) == 0:
            continue
        ln = d.lengths[r]
        lo = offsets_from_lengths(ln)
        ks = (np.repeat(d.starts[r], ln)
              + (np.arange(int(lo[-1]), dtype=np.int64) - np.repeat(lo[:-1], ln)).astype(U64))
        kg = np.repeat(d.group[r], ln)
        n_o = olen[kg]
        x = np.repeat(ks, n_o) + ov[gather_index(oo[:-1][kg], n_o)]
        yield ks[segment_any(members(x), offsets_from_lengths(n_o))]


__all__ = ["TABLE", "TILE", "Grouped", "tile_shape", "tile_ids", "build", "key_boxes",
           "input_boxes", "range_cover", "Decoded", "decode_keys", "offset_sets",
           "backward_cells", "forward_cells"]
