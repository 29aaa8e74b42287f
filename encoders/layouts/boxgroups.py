"""FullCompact's groups of a :class:`~subzero.lineage.BoxLineage`, built from its mask.

A box part says that each of its cells ``c`` depends on ``[c + lo, c + hi)``, clipped at
the border. Every cell whose box lies inside the array (an *interior* cell) has the same
relative pattern, so the groups :func:`encoders.layouts.patterns.build` would find among
its pairs are known without expanding them: per tile (:func:`encoders.layouts.relgroups.
tile_shape`), the part's interior cells of the tile, keyed as the tile's box minus its
holes (or as the few cells it holds), with the pattern's tokens computed once from one
cell's box. The records are those ``build`` writes (:func:`encoders.layouts.patterns.
key_tokens` forms, :func:`~encoders.layouts.patterns._pattern_tokens` tokens), so lookups
read them unchanged.

The cells left over, returned as a mask, are stored as pairs: cells whose box the border
clips (their patterns differ), tiles with fewer than ``min_group`` of the part's cells,
groups whose record would not pay (``pay``, the rule of ``build``), and every cell of an
array of more than two axes (whose tiles are not covered by one strided item).

>>> from subzero.cells import Box
>>> from subzero.lineage import BoxLineage
>>> mask = np.ones((8, 8), bool); mask[3, 4] = False
>>> part = BoxLineage(Box((0, 0), (8, 8)), mask, (0, 0), (1, 1), (True,), (8, 8))
>>> p, spill = box_groups(part, [(8, 8)], tile=64, min_group=4, pay=True)
>>> len(p), p.kmin.tolist(), p.kmax.tolist(), int(spill.sum())
(1, [0], [63], 0)
"""

from __future__ import annotations

from itertools import product
from typing import Sequence

import numpy as np

from encoders.formats.csr import offsets_from_lengths, segment_any
from encoders.formats.varint import varint_encode, varint_lengths
from encoders.layouts.patterns import (
    BOX_FORM,
    GROUP_BYTES,
    KEY_BYTES,
    RUN_FORM,
    STRIDE_FORM,
    Patterns,
    _pattern_tokens,
    aligned,
)
from encoders.layouts.keyspace import coords
from encoders.layouts.pairs import drop_lineless
from encoders.layouts.relgroups import tile_shape
from subzero.cells import Box, Ragged, strides
from subzero.lineage import BoxedPairs, BoxLineage, PairBatch, ShardSpec

U64 = np.uint64


def _pattern(part: BoxLineage, rep: int, val_shapes: Sequence[Sequence[int]]
             ) -> np.ndarray:
    """The tokens of the interior cell ``rep``'s pattern, every value side in turn, as
    ``build`` tokenizes a key's sets relative to its anchor."""
    shape = part.shape
    c = np.unravel_index(rep, shape)
    cells = Box(tuple(int(x) + a for x, a in zip(c, part.lo)),
                tuple(int(x) + b for x, b in zip(c, part.hi))).linear(shape)
    empty = np.empty(0, dtype=U64)
    values = [Ragged.from_rows([cells if f else empty]) for f in part.inputs]
    same = [aligned(shape, s) for s in val_shapes]
    sides = _pattern_tokens(np.array([rep], dtype=U64), np.zeros(1, dtype=np.int64), values,
                            val_shapes, same, True, shape)
    return np.concatenate([np.asarray(t, dtype=U64) for t, _ in sides])


def box_groups(part: BoxLineage, val_shapes: Sequence[Sequence[int]], tile: int,
               min_group: int, pay: bool, fill: np.ndarray | None = None
               ) -> tuple[Patterns | None, np.ndarray]:
    """The groups of ``part``'s interior cells, one per tile (None: no group), and the mask
    (over ``part.box``) of its cells left to be stored as pairs (see the module
    docstring). ``val_shapes``: the inputs' shapes. ``fill``: a mask of other cells whose
    sets hold the part's pattern at them, which a group's key cells may take too (as
    :func:`encoders.layouts.patterns.build` fills its groups): lookups unite every group
    holding a cell, so an identity tile whose exceptions read boxes has no holes."""
    shape = tuple(int(s) for s in part.shape)
    nd = len(shape)
    box = part.box
    spill = part.mask.copy()
    if nd == 0 or nd > 2 or not spill.any():
        return None, spill
    # cells whose box lies inside the array: -lo <= c < n - hi + 1 per axis
    ilo = [max(a, -l) for a, l in zip(box.lo, part.lo)]
    ihi = [min(b, n - h + 1) for b, n, h in zip(box.hi, shape, part.hi)]
    if any(a >= b for a, b in zip(ilo, ihi)):
        return None, spill
    te = tile_shape(shape, tile)
    st = [int(s) for s in strides(shape)]
    width = shape[-1]
    toks: list[np.ndarray] = []
    kmin: list[int] = []
    kmax: list[int] = []
    count: list[int] = []
    covers: list[tuple[slice, ...]] = []
    for t in product(*(range(a // e, (b - 1) // e + 1) for a, b, e in zip(ilo, ihi, te))):
        clo = [max(a, k * e) for a, k, e in zip(ilo, t, te)]
        chi = [min(b, (k + 1) * e) for b, k, e in zip(ihi, t, te)]
        sl = tuple(slice(a - o, b - o) for a, b, o in zip(clo, chi, box.lo))
        own = int(np.count_nonzero(part.mask[sl]))
        if own < min_group:
            continue
        flat = (part.mask[sl] if fill is None else part.mask[sl] | fill[sl]).reshape(-1)
        size = len(flat)
        n = int(np.count_nonzero(flat)) if fill is not None else own
        start = sum(a * s for a, s in zip(clo, st))
        w = chi[-1] - clo[-1]
        h = chi[0] - clo[0] if nd == 2 else 1
        if h == 1 or w == width:  # the cover: one run, or rows a fixed gap apart
            cover = [(1 << 2) | RUN_FORM, start, h * w - 1]
        else:
            cover = [(1 << 2) | STRIDE_FORM, start, w - 1, h - 1, width - w - 1]
        if n == size:
            ktok = np.array(cover, dtype=U64)
        else:  # a subset of the cover: its holes, or its cells when they are fewer
            holes = 2 * (size - n) <= size
            ranks = np.flatnonzero(~flat if holes else flat).astype(U64)
            gaps = np.empty(len(ranks), dtype=U64)
            gaps[0] = ranks[0]
            gaps[1:] = ranks[1:] - ranks[:-1] - U64(1)
            item = (len(ranks) << 1) | int(holes)
            ktok = np.concatenate([np.array([(item << 2) | BOX_FORM, *cover], dtype=U64),
                                   gaps])
        first = int(np.argmax(flat))
        last = size - 1 - int(np.argmax(flat[::-1]))
        toks.append(ktok)
        kmin.append(start + first // w * width + first % w)
        kmax.append(start + last // w * width + last % w)
        count.append(own)
        covers.append(sl)
    if not toks:
        return None, spill
    pat = _pattern(part, kmin[0], val_shapes)
    klen = np.array([len(k) for k in toks], dtype=np.int64)
    kbytes = np.add.reduceat(varint_lengths(np.concatenate(toks)),
                             offsets_from_lengths(klen)[:-1])
    size = kbytes + int(varint_lengths(pat).sum())
    keep = np.ones(len(toks), dtype=bool)
    if pay:  # the rule of patterns.build: a group's record and keys cost less as pairs
        keep = size + GROUP_BYTES < KEY_BYTES * np.asarray(count, dtype=np.int64)
    if not keep.any():
        return None, spill
    for k in np.flatnonzero(keep):
        sl = covers[k]
        spill[sl] &= ~part.mask[sl]
    ids = np.flatnonzero(keep)
    tok = np.concatenate([np.concatenate([toks[k], pat]) for k in ids])
    b, blen = varint_encode(tok)
    rec_tokens = offsets_from_lengths(klen[ids] + len(pat))
    byte_at = offsets_from_lengths(blen)[rec_tokens]
    p = Patterns(rows=np.empty(0, dtype=np.int64), records=b, record_offsets=byte_at,
                 kmin=np.asarray(kmin, dtype=U64)[ids], kmax=np.asarray(kmax, dtype=U64)[ids],
                 relative=np.ones(len(ids), dtype=bool))
    return p, spill


def split(pairs: BoxedPairs, spec: ShardSpec, sides: Sequence[int], tile: int,
          min_group: int, pay: bool) -> tuple[list[Patterns], PairBatch | None, int]:
    """The lineage of ``pairs`` through the inputs ``sides`` (their value sides, in that
    order), keyed by output cell: the groups :func:`box_groups` builds from the parts'
    masks, the pairs left to be grouped as pairs (the explicit ones, and the parts' cells
    that the border clips, that another part or pair names too (their sets are united
    there), or that form no group that pays), and how many output cells the groups hold."""
    box = spec.out_box
    shapes = [spec.in_shapes[i] for i in sides]
    explicit = pairs.pairs
    if explicit is not None:
        explicit = drop_lineless(PairBatch(explicit.out,
                                           ins=tuple(explicit.ins[i] for i in sides)))
    parts = [BoxLineage(p.box, p.mask, p.lo, p.hi, tuple(p.inputs[i] for i in sides),
                        p.shape) for p in pairs.parts]
    parts = [p for p in parts if any(p.inputs) and p.mask.any()]
    seen = np.zeros(box.shape, dtype=np.uint8)
    for p in parts:
        if p.box == box:
            seen += p.mask
    if explicit is not None and len(explicit):
        seen += _mask_of(explicit.out.values, spec.out_shape, box)
    shared = seen > 1
    held = None  # explicit pairs' cells whose sets hold the cell itself
    groups, left, grouped = [], [], 0
    for p in parts:
        if p.box != box:
            left.append(p.expand())
            continue
        # cells whose sets hold p's pattern: its own cells that go to pairs, the cells of
        # parts whose boxes hold its box on its inputs, and for the identity, the cells of
        # explicit pairs that name themselves
        fill = p.mask & shared
        for q in parts:
            if q is not p and q.box == box and _holds(q, p):
                fill |= q.mask
        if explicit is not None and all(h - l == 1 for l, h in zip(p.lo, p.hi)):
            held = _self_holding(explicit, p.inputs, spec.out_shape, box)
            fill |= held
        got, spill = box_groups(p.where(~shared), shapes, tile, min_group, pay, fill)
        spill |= p.mask & shared
        grouped += int(np.count_nonzero(p.mask)) - int(np.count_nonzero(spill))
        if got is not None:
            groups.append(got)
        if spill.any():
            left.append(p.where(spill).expand())
    rest = PairBatch.concat([explicit, *left])
    return groups, (rest if rest is not None and len(rest) else None), grouped


def _holds(q: BoxLineage, p: BoxLineage) -> bool:
    """Whether every cell's sets in ``q`` hold its sets in ``p`` (where ``p``'s box lies
    inside the array): ``q``'s box holds ``p``'s on every input ``p`` reads."""
    return (all(a <= b for a, b in zip(q.lo, p.lo)) and all(a >= b for a, b in zip(q.hi, p.hi))
            and all(b or not a for a, b in zip(p.inputs, q.inputs)))


def _self_holding(pairs: PairBatch, inputs: Sequence[bool], shape: Sequence[int], box: Box
                  ) -> np.ndarray:
    """A mask over ``box`` of the output cells of one-cell pairs whose sets hold the cell
    itself on every input of ``inputs`` (what the identity's groups may take)."""
    mask = np.zeros(box.shape, dtype=bool)
    rows = np.flatnonzero(pairs.out.lengths == 1)
    if len(rows) == 0:
        return mask
    k = np.asarray(pairs.out.values, dtype=U64)[pairs.out.offsets[:-1][rows]]
    ok = np.ones(len(rows), dtype=bool)
    for r, f in zip(pairs.ins, inputs):
        if f:
            sub = r.take(rows)
            hit = np.asarray(sub.values, dtype=U64) == np.repeat(k, sub.lengths)
            ok &= segment_any(hit, sub.offsets)
    return _mask_of(k[ok], shape, box)


def _mask_of(cells: np.ndarray, shape: Sequence[int], box: Box) -> np.ndarray:
    """A mask over ``box`` of the cells (linear in ``shape``) that lie in it."""
    c = coords(np.asarray(cells, dtype=U64), shape)[:, :len(box.lo)] - np.asarray(
        box.lo, dtype=np.int64)
    inside = ((c >= 0) & (c < np.asarray(box.shape, dtype=np.int64))).all(axis=1)
    mask = np.zeros(box.shape, dtype=bool)
    mask[tuple(c[inside].T)] = True
    return mask


def merged(first: Patterns | None, more: Sequence[Patterns]) -> Patterns | None:
    """The groups of ``first`` (whose ``rows`` are kept: the key rows it groups) followed
    by those of ``more`` (groups of cells that are not key rows)."""
    every = [p for p in (first, *more) if p is not None and len(p)]
    if not every:
        return first
    if len(every) == 1 and every[0] is first:
        return first
    rec = np.concatenate([np.asarray(p.records, dtype=np.uint8) for p in every])
    lens = np.concatenate([np.diff(np.asarray(p.record_offsets, dtype=np.int64))
                           for p in every])
    return Patterns(rows=(first.rows if first is not None
                          else np.empty(0, dtype=np.int64)),
                    records=rec, record_offsets=offsets_from_lengths(lens),
                    kmin=np.concatenate([p.kmin for p in every]).astype(U64),
                    kmax=np.concatenate([p.kmax for p in every]).astype(U64),
                    relative=np.concatenate([p.relative for p in every]).astype(bool))
