"""FullCompact's pattern groups looked up for a few cells in plain Python.

A query of a handful of cells meets a few group records of some tens of bytes. The
vectorized path (:func:`encoders.layouts.patterns.decode_keys`, :func:`~encoders.layouts.
patterns.value_sets`, :func:`~encoders.layouts.patterns.keyed_cells`) spends about a
hundred numpy calls on them whatever their size; here each record's tokens are read with
:func:`encoders.layouts.fewcells.varints`, the query cells are tested against its key
cells ``K`` by arithmetic (runs, strided runs, ranks in a box), and the pattern is decoded
with :func:`encoders.layouts.fewcells.decode_set`. The answers are the vectorized path's
(tests compare both); a record whose answer outgrows :data:`encoders.layouts.fewcells.
MAX_CELLS` cells, or whose patterns are anchored across shapes in the direction that
needs the inverse of the anchor, makes the functions return None and the caller take the
vectorized path.

>>> rec = bytes([1 << 2 | 1, 3, 4, 1 << 2 | 1, 0])  # K = 3..7, the identity
>>> keyed([rec], [4, 9], 0, (10,), [(10,)])
[4]
"""

from __future__ import annotations

from itertools import product
from typing import Sequence

from encoders.layouts.fewcells import (
    MAX_CELLS,
    _TooMany,
    decode_set,
    py_strides,
    skip_set,
    varints,
)

LIST_FORM, RUN_FORM, STRIDE_FORM, BOX_FORM = 0, 1, 2, 3
_WIDTH = (1, 2, 4)


def _plain_items(tok: Sequence[int], p: int) -> tuple[list[tuple[int, int, int, int]], int]:
    """The items of a list, runs or strided record of ``K`` at ``tok[p]`` as ``(start,
    length, count, period)`` (absolute starts), and the position after it."""
    hdr = tok[p]
    form, n = hdr & 3, hdr >> 2
    w = _WIDTH[form]
    items = []
    cur = 0
    prev_span = 0
    at = p + 1
    for i in range(n):
        a = tok[at]
        length = tok[at + 1] + 1 if w > 1 else 1
        count = tok[at + 2] + 1 if w > 2 else 1
        inner = tok[at + 3] + 1 if w > 2 else 0
        cur = a if i == 0 else cur + prev_span + a + (1 if w > 1 else 0)
        items.append((cur, length, count, length + inner))
        prev_span = count * length + (count - 1) * inner
        at += w
    return items, at


def _rank(items: list[tuple[int, int, int, int]], c: int) -> int:
    """The rank of cell ``c`` among the cells of ``items`` (in order), -1 if not one."""
    before = 0
    for start, length, count, period in items:
        off = c - start
        # the item's own cells end with its last run, not a period after it: the next
        # item may start in what would be its last gap
        if 0 <= off < (count - 1) * period + length:
            row, col = divmod(off, period)
            if col < length:
                return before + row * length + col
            return -1
        before += count * length
    return -1


def _key_test(tok: Sequence[int]) -> tuple[object, int]:
    """A test ``f(c) -> bool`` of ``c`` in the record's ``K`` and the position after ``K``."""
    hdr = tok[0]
    if hdr & 3 != BOX_FORM:
        items, at = _plain_items(tok, 0)
        return (lambda c: _rank(items, c) >= 0), at
    item = hdr >> 2
    n, holes = item >> 1, bool(item & 1)
    cover, at = _plain_items(tok, 1)
    listed = set()
    r = -1
    for g in tok[at:at + n]:
        r += g + 1
        listed.add(r)

    def test(c: int) -> bool:
        rk = _rank(cover, c)
        return rk >= 0 and ((rk in listed) != holes)

    return test, at + n


def _expand(tok: Sequence[int]) -> list[int] | None:
    """Every cell of the record's ``K`` (None past :data:`MAX_CELLS`)."""
    hdr = tok[0]
    if hdr & 3 != BOX_FORM:
        items, _ = _plain_items(tok, 0)
        test = None
    else:
        items, _ = _plain_items(tok, 1)
        test, _ = _key_test(tok)
    if sum(count * length for _, length, count, _ in items) > MAX_CELLS:
        return None
    cells = [s + row * period + col for s, length, count, period in items
             for row in range(count) for col in range(length)]
    return cells if test is None else [c for c in cells if test(c)]


def _anchor(c: int, key_shape: Sequence[int], val_shape: Sequence[int]) -> int:
    """:func:`encoders.layouts.patterns.anchor_cells` of one cell."""
    if tuple(key_shape) == tuple(val_shape):
        return c
    out = 0
    for s_k, s_v, n_k, n_v in zip(py_strides(key_shape), py_strides(val_shape), key_shape,
                                  val_shape):
        if n_k == n_v:
            out += (c // s_k) % n_k * s_v
    return out


def _pattern(tok: Sequence[int], at: int, j: int, val_shapes: Sequence[Sequence[int]]
             ) -> tuple[list[int], bool]:
    """Side ``j``'s pattern of the record whose sets start at ``tok[at]``."""
    for s in range(j):
        at = skip_set(tok, at, len(val_shapes[s]))
    cells, rel, _ = decode_set(tok, at, tuple(val_shapes[j]))
    return cells, rel


def _keys_of_anchor(a: int, key_shape: Sequence[int], val_shape: Sequence[int]
                    ) -> list[int] | None:
    """The key cells whose anchor (:func:`_anchor`) is the value cell ``a``: none when
    ``a`` lies off the anchors (a non-zero coordinate on an axis of extent 1 in the keys),
    every cell along the axes of extent 1 in the values; None past :data:`MAX_CELLS`."""
    axes = []
    size = 1
    for s_v, n_k, n_v in zip(py_strides(val_shape), key_shape, val_shape):
        c = (a // s_v) % n_v
        if n_k == n_v:
            axes.append((c,))
        elif c:
            return []
        else:
            axes.append(range(n_k))
            size *= n_k
    if size > MAX_CELLS:
        return None
    st = py_strides(key_shape)
    return [sum(x * s for x, s in zip(cs, st)) for cs in product(*axes)]


def keyed(records: Sequence[bytes], q: Sequence[int], j: int, key_shape: Sequence[int],
          val_shapes: Sequence[Sequence[int]]) -> list[int] | None:
    """Side ``j``'s cells (unsorted, with repeats) of the query cells ``q`` that the group
    ``records`` hold; None when the answer outgrows the plain-Python path."""
    try:
        return _keyed(records, q, j, key_shape, val_shapes)
    except _TooMany:
        return None


def _keyed(records: Sequence[bytes], q: Sequence[int], j: int, key_shape: Sequence[int],
           val_shapes: Sequence[Sequence[int]]) -> list[int] | None:
    out: list[int] = []
    for rec in records:
        tok = varints(rec)
        test, at = _key_test(tok)
        hits = [c for c in q if test(c)]
        if not hits:
            continue
        cells, rel = _pattern(tok, at, j, val_shapes)
        if rel:
            if len(cells) * len(hits) + len(out) > MAX_CELLS:
                return None
            for c in hits:
                a = _anchor(c, key_shape, val_shapes[j])
                out.extend(a + o for o in cells)
        else:
            if len(cells) + len(out) > MAX_CELLS:
                return None
            out.extend(cells)
    return out


def unkeyed(records: Sequence[bytes], q: Sequence[int], key_shape: Sequence[int],
            val_shape: Sequence[int]) -> list[int] | None:
    """The key cells (of ``key_shape``; unsorted) of the groups ``records`` (one value side,
    of ``val_shape``) whose pattern meets the value cells ``q``; None when that outgrows
    the plain-Python path."""
    try:
        return _unkeyed(records, q, key_shape, val_shape)
    except _TooMany:
        return None


def _unkeyed(records: Sequence[bytes], q: Sequence[int], key_shape: Sequence[int],
             val_shape: Sequence[int]) -> list[int] | None:
    same = tuple(key_shape) == tuple(val_shape)
    size = 1
    for n in val_shape:
        size *= n
    qs = set(q)
    out: list[int] = []
    for rec in records:
        tok = varints(rec)
        test, at = _key_test(tok)
        cells, rel = _pattern(tok, at, 0, [val_shape])
        if rel:
            if len(cells) * len(q) > MAX_CELLS:
                return None
            anchors = {c - o for c in q for o in cells}
            if same:
                out.extend(k for k in anchors if k >= 0 and test(k))
                continue
            for a in anchors:
                if not 0 <= a < size:
                    continue
                keys = _keys_of_anchor(a, key_shape, val_shape)
                if keys is None or len(keys) + len(out) > MAX_CELLS:
                    return None
                out.extend(k for k in keys if test(k))
        elif not qs.isdisjoint(cells):
            keys = _expand(tok)
            if keys is None or len(keys) + len(out) > MAX_CELLS:
                return None
            out.extend(keys)
    return out


__all__ = ["keyed", "unkeyed"]
