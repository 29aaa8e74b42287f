"""The cell-set codec: sorted linear indices as delta lists or boxes, absolute or relative.

Everything here is pure numpy and vectorized over whole batches of sets (CSR form, see
:mod:`encoders.formats.csr`); nothing loops over cells. Tokens become bytes with
:mod:`encoders.formats.varint`.

A set of cells (sorted unique linear indices) becomes a short stream of unsigned *tokens*,
later written as LEB128 varints:

==========  =========================================================================
kind        tokens after the header ``(count << 2) | kind``
==========  =========================================================================
0 list      first index, then ``gap - 1`` for each next index (delta encoding)
1 list rel  ``zigzag(first - anchor)``, then the gaps as above
2 box       ``lo`` per axis, then the extent per axis (the set is a full rectangle)
3 box rel   ``zigzag(lo - anchor coords)`` per axis, then the extents
==========  =========================================================================

*Relative* sets are stored against an *anchor* cell (the key cell of FullOne, the first
output cell of a FullMany entry), which makes them translation invariant: the identity
lineage ``{k} -> {k}`` or the 7x7 box around every pixel is then one and the same token
stream for every key, so FullOne stores it once. Relative sets are exact everywhere: a box
clipped at the array border is a different set and gets its own stream.

>>> from subzero.cells import Ragged
>>> sets = Ragged.from_rows([np.array([5, 6, 7]), np.array([], dtype=np.uint64)])
>>> tok = set_tokens(sets.values, sets.offsets, (100,))
>>> tok[0].tolist(), tok[1].tolist()        # a box: lo 5, extent 3; an empty list
([2, 5, 3, 0], [0, 3, 4])
>>> vals, offs, rel, _ = decode_sets(tok[0], tok[1][:-1], (100,))
>>> vals.tolist(), offs.tolist()
([5, 6, 7], [0, 3, 3])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from encoders.formats.csr import gather_index, interleave, offsets_from_lengths, take_rows
from encoders.formats.varint import unzigzag, zigzag
from subzero.cells import strides

U64 = np.uint64
LIST, LIST_REL, BOX, BOX_REL = 0, 1, 2, 3


def _coords_axis(lin: np.ndarray, shape: Sequence[int], axis: int) -> np.ndarray:
    st = strides(tuple(shape))
    c = lin // st[axis] if axis < len(shape) - 1 else lin
    return (c % U64(shape[axis]) if axis else c).astype(np.int64)


def _place(rows: np.ndarray, sub_vals: np.ndarray, sub_off: np.ndarray,
           out_off: np.ndarray, out: np.ndarray) -> None:
    """Scatter CSR rows of a sub-batch into rows ``rows`` of a preallocated batch."""
    ln = np.diff(sub_off)
    out[np.repeat(out_off[:-1][rows] - sub_off[:-1], ln)
        + np.arange(len(sub_vals), dtype=np.int64)] = sub_vals


def set_tokens(values: np.ndarray, offsets: np.ndarray, shape: Sequence[int],
               anchors: np.ndarray | None = None, boxes: bool = True
               ) -> tuple[np.ndarray, np.ndarray]:
    """Token streams (CSR) of canonical cell sets in an array of ``shape``.

    ``anchors`` (one linear index per row, in the same ``shape``) makes every set relative
    to its anchor. A row that is a full rectangle with more than ``2 * ndim`` cells is
    stored as a box.
    """
    shape = tuple(int(s) for s in shape)
    values = np.asarray(values, dtype=np.uint64)
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    ndim = len(shape)
    lens = np.diff(offsets)
    rel = anchors is not None
    is_box = np.zeros(n, dtype=bool)
    if boxes and ndim >= 1:
        cand = np.flatnonzero(lens > 2 * ndim)
        if len(cand) and ndim > 1:
            # a box's first and last cells are its corners: a cheap test on them alone
            # leaves only the rows that may be boxes for the full per-axis check
            f = values[offsets[:-1][cand]]
            last = values[offsets[1:][cand] - 1]
            vol = np.ones(len(cand), dtype=np.int64)
            for ax in range(ndim):
                a, b = _coords_axis(f, shape, ax), _coords_axis(last, shape, ax)
                vol *= np.maximum(b - a + 1, 0)
            cand = cand[vol == lens[cand]]
        if len(cand):
            cv, co = take_rows(values, offsets, cand)
            vol = np.ones(len(cand), dtype=np.int64)
            los, exts = [], []
            starts = co[:-1]
            for ax in range(ndim):
                c = _coords_axis(cv, shape, ax)
                lo = np.minimum.reduceat(c, starts)
                hi = np.maximum.reduceat(c, starts)
                los.append(lo)
                exts.append(hi - lo + 1)
                vol *= hi - lo + 1
            hit = vol == np.diff(co)
            is_box[cand[hit]] = True
            box_lo = np.stack(los, axis=1)[hit]
            box_ext = np.stack(exts, axis=1)[hit]
    tok_len = np.where(is_box, 1 + 2 * ndim, 1 + lens)
    tok_off = offsets_from_lengths(tok_len)
    tokens = np.empty(int(tok_off[-1]), dtype=np.uint64)
    # list rows: header, first (absolute or relative), gaps - 1
    lrows = np.flatnonzero(~is_box)
    if len(lrows):
        if len(lrows) == n:
            lv, lo_ = values, offsets
        else:
            lv, lo_ = take_rows(values, offsets, lrows)
        body = np.empty(len(lv), dtype=np.uint64)
        if len(lv):
            body[1:] = lv[1:] - lv[:-1] - U64(1)
            firsts = lo_[:-1][np.diff(lo_) > 0]
            frows = np.flatnonzero(np.diff(lo_) > 0)
            if rel:
                a = np.asarray(anchors, dtype=np.uint64)[lrows[frows]]
                body[firsts] = zigzag(lv[firsts].astype(np.int64) - a.astype(np.int64))
            else:
                body[firsts] = lv[firsts]
        hdr = (np.diff(lo_).astype(np.uint64) << U64(2)) | U64(LIST_REL if rel else LIST)
        if len(lrows) == n:  # header before every row: a mask beats a scatter
            is_hdr = np.zeros(len(tokens), dtype=bool)
            is_hdr[tok_off[:-1]] = True
            tokens[is_hdr] = hdr
            tokens[~is_hdr] = body
        else:
            hv, ho = interleave([(hdr, np.arange(len(lrows) + 1, dtype=np.int64)),
                                 (body, lo_)])
            _place(lrows, hv, ho, tok_off, tokens)
    brows = np.flatnonzero(is_box)
    if len(brows):
        if rel:
            st = strides(shape)
            a = np.asarray(anchors, dtype=np.uint64)[brows]
            ac = np.stack([((a // st[d]) % U64(shape[d])).astype(np.int64)
                           for d in range(ndim)], axis=1)
            lo_tok = zigzag(box_lo - ac)
        else:
            lo_tok = box_lo.astype(np.uint64)
        hdr = np.full((len(brows), 1), BOX_REL if rel else BOX, dtype=np.uint64)
        dense = np.concatenate([hdr, lo_tok.reshape(len(brows), ndim),
                                box_ext.astype(np.uint64)], axis=1)
        _place(brows, dense.reshape(-1), np.arange(len(brows) + 1) * (1 + 2 * ndim),
               tok_off, tokens)
    return tokens, tok_off


def set_token_count(tokens: np.ndarray, pos: np.ndarray, ndim: int) -> np.ndarray:
    """Number of tokens of the set whose header is at ``pos`` (to skip to the next set)."""
    hdr = tokens[pos]
    kind = hdr & U64(3)
    return np.where(kind >= BOX, 1 + 2 * ndim, 1 + (hdr >> U64(2)).astype(np.int64))


def decode_sets(tokens: np.ndarray, pos: np.ndarray, shape: Sequence[int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decode the set whose header token sits at ``pos[r]`` for every record ``r``.

    Returns ``(values, offsets, relative, next_pos)``: CSR cell sets in record order
    (relative sets hold offsets from their anchor as two's-complement uint64: add the
    anchor with :func:`add_anchors`), which records were relative, and the token position
    just after each set.
    """
    shape = tuple(int(s) for s in shape)
    ndim = len(shape)
    pos = np.asarray(pos, dtype=np.int64)
    hdr = tokens[pos]
    kind = (hdr & U64(3)).astype(np.int64)
    cnt = (hdr >> U64(2)).astype(np.int64)
    is_box = kind >= BOX
    relative = (kind == LIST_REL) | (kind == BOX_REL)
    st = strides(shape).astype(np.int64)
    ext = np.ones((len(pos), max(ndim, 1)), dtype=np.int64)
    if is_box.any():
        bpos = pos[is_box]
        ext_tok = tokens[bpos[:, None] + 1 + ndim + np.arange(ndim)].astype(np.int64)
        ext[is_box, :ndim] = ext_tok
    size = np.where(is_box, ext.prod(axis=1), cnt)
    out_off = offsets_from_lengths(size)
    out = np.empty(int(out_off[-1]), dtype=np.uint64)
    lrows = np.flatnonzero(~is_box)
    all_lists = len(lrows) == len(pos)
    if len(lrows):
        lc = cnt[lrows]
        if all_lists and _back_to_back(pos, cnt, len(tokens)):
            # the sets fill the stream (one set per record): every token but the headers
            body = np.ones(len(tokens), dtype=bool)
            body[pos] = False
            x = tokens[body]
            lo_ = out_off
        else:
            x = tokens[gather_index(pos[lrows] + 1, lc)]
            lo_ = offsets_from_lengths(lc)
        has = lc > 0
        firsts = lo_[:-1][has]
        x = x + U64(1)
        if len(firsts):
            raw = tokens[pos[lrows][has] + 1]
            relr = relative[lrows][has]
            x[firsts] = np.where(relr, unzigzag(raw).view(np.uint64), raw)
        cs = np.cumsum(x, dtype=np.uint64)
        before = np.zeros(len(lrows), dtype=np.uint64)
        nz = lo_[:-1] > 0
        before[nz] = cs[lo_[:-1][nz] - 1]
        if all_lists:  # the list rows are the rows: no scatter
            out = cs - np.repeat(before, lc)
        else:
            _place(lrows, cs - np.repeat(before, lc), lo_, out_off, out)
    brows = np.flatnonzero(is_box)
    if len(brows):
        bpos = pos[brows]
        lo_tok = tokens[bpos[:, None] + 1 + np.arange(ndim)]
        relb = relative[brows]
        lo = np.where(relb[:, None], unzigzag(lo_tok), lo_tok.astype(np.int64))
        bsize = size[brows]
        bo = offsets_from_lengths(bsize)
        j = np.arange(int(bo[-1]), dtype=np.int64) - np.repeat(bo[:-1], bsize)
        lin = np.zeros(len(j), dtype=np.int64)
        for d in range(ndim - 1, -1, -1):
            e = np.repeat(ext[brows, d], bsize)
            lin += (np.repeat(lo[:, d], bsize) + j % e) * st[d]
            j //= e
        _place(brows, lin.view(np.uint64), bo, out_off, out)
    nxt = pos + np.where(is_box, 1 + 2 * ndim, 1 + cnt)
    return out, out_off, relative, nxt


def scatter_lists(body: np.ndarray, offsets: np.ndarray, into: np.ndarray) -> bool:
    """Set the cells of records that are each one absolute, non-empty delta list (FullOne's
    forward records, for one) True in the flat bool array ``into``, straight from their
    varint bytes ``body`` (CSR ``offsets``); False, touching nothing, for any other records.

    Decoding to sorted cells first costs a gather per token and a sort; here the running
    sum goes over the bytes: a token's value sits at its last byte, the other bytes add
    nothing and so repeat a cell already set, and each record's header byte restarts the sum
    at the record's first cell.
    """
    n = len(offsets) - 1
    if n == 0 or len(body) == 0:
        return n == 0
    starts = offsets[:-1].tolist()
    b = memoryview(np.ascontiguousarray(body, dtype=np.uint8))
    hdr_end, first_end, first_val = [], [], []
    stops = offsets[1:].tolist()
    for r in range(n):  # headers and first values: two short varints per record
        j, vals = starts[r], []
        for _ in range(2):
            v, shift = 0, 0
            while j < stops[r]:
                x = b[j]
                v |= (x & 0x7F) << shift
                if x < 0x80:
                    break
                j += 1
                shift += 7
            else:
                return False  # the record ends first
            vals.append((v, j))
            j += 1
            if vals[0][0] & 3 != LIST or vals[0][0] >> 2 == 0:
                return False  # not an absolute, non-empty list
        (hdr, h_end), (first, f_end) = vals
        hdr_end.append(h_end)
        first_end.append(f_end)
        first_val.append(first)
    end = body < 0x80
    vb = (body & np.uint8(0x7F)).astype(np.uint64)
    at = np.flatnonzero(end[1:] & ~end[:-1]) + 1
    back = at - 1
    while len(at):  # multi-byte tokens: combine their bytes at the last one
        vb[at] = (vb[at] << U64(7)) | vb[back]
        back = back - 1
        keep = ~end[back]
        at, back = at[keep], back[keep]
    y = np.where(end, vb + U64(1), U64(0))  # a gap token adds gap + 1
    he = np.asarray(hdr_end, dtype=np.int64)
    fv = np.asarray(first_val, dtype=np.uint64)
    y[np.asarray(first_end, dtype=np.int64)] = 0
    y[he] = fv
    cs = np.cumsum(y[he[0]:], dtype=np.uint64)
    seg = np.diff(np.append(he, len(body)))  # a record's bytes from its header's end
    base = cs[he - he[0]] - fv  # the sum before the record
    into[(cs - np.repeat(base, seg)).astype(np.intp)] = True
    return True


def _back_to_back(pos: np.ndarray, cnt: np.ndarray, n_tokens: int) -> bool:
    """Whether list sets with headers at ``pos`` and ``cnt`` cells each are the whole
    token stream, one after the other."""
    if not len(pos) or pos[0] != 0 or int(pos[-1] + 1 + cnt[-1]) != n_tokens:
        return False
    return bool((pos[1:] == pos[:-1] + 1 + cnt[:-1]).all())


def add_anchors(values: np.ndarray, offsets: np.ndarray, relative: np.ndarray,
                anchors: np.ndarray) -> np.ndarray:
    """Turn the relative rows of a decoded batch into absolute linear indices."""
    if not relative.any():
        return values
    add = np.where(relative, np.asarray(anchors, dtype=np.uint64), U64(0))
    return values + np.repeat(add, np.diff(offsets))
