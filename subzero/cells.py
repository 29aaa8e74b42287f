"""Cells, boxes, ragged cell sets, and the box dilation of a mask.

A *cell* is a coordinate in one array. In bulk SubZero handles cells in three forms:

- an ``(n, ndim)`` int64 array of coordinates,
- a 1-d uint64 array of *linear indices* (``np.ravel_multi_index``, C order), the form
  stored in lineage (LMDB keys are 8-byte big-endian linear indices, so key order is index
  order),
- a :class:`Box`, a half-open rectangle ``[lo, hi)``.

Frontiers (the sets of cells a query reaches) are :mod:`subzero.frontier`'s. Everything here
is vectorized; no function loops over cells in Python.

Examples
--------
>>> import numpy as np
>>> as_linear(np.array([[0, 1], [2, 3]]), (3, 4))
array([ 1, 11], dtype=uint64)
>>> Box((1, 1), (3, 3)).linear((3, 4))
array([ 5,  6,  9, 10], dtype=uint64)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
from subzero.errors import CellError

Shape = tuple[int, ...]


def parse_shape(shape: Any, what: str = "shape") -> Shape:
    """Return ``shape`` as a tuple of non-negative ints, or raise naming the bad value."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise CellError(f"{what} must be a tuple of ints. Got {shape!r} instead.") from None
    if any(s < 0 for s in out):
        raise CellError(f"{what} must have non-negative sizes. Got {out} instead.")
    return out


def size_of(shape: Shape) -> int:
    """Cells in an array of ``shape`` (1 for a 0-d array)."""
    return math.prod(int(n) for n in shape)


def strides(shape: Shape) -> np.ndarray:
    """C-order element strides of ``shape`` as uint64 (for linear indices)."""
    st = np.ones(len(shape), dtype=np.uint64)
    for d in range(len(shape) - 2, -1, -1):
        st[d] = st[d + 1] * np.uint64(shape[d + 1])
    return st


def _all_ints(lo: tuple, hi: tuple) -> bool:
    """Whether every value of two tuples is exactly a Python ``int`` (not a bool or a
    numpy integer)."""
    for v in lo:
        if type(v) is not int:
            return False
    for v in hi:
        if type(v) is not int:
            return False
    return True


@dataclass(frozen=True, init=False)
class Box:
    """A half-open rectangle of cells ``[lo, hi)`` in global coordinates.

    Parameters
    ----------
    lo, hi : the corners, any sequences of integers of one length; they are stored as
        tuples of Python ints.

    Raises
    ------
    CellError
        If ``lo`` and ``hi`` differ in length.

    Examples
    --------
    >>> b = Box((0, 2), (2, 4))
    >>> b.shape, b.size, b.slices
    ((2, 2), 4, (slice(0, 2, None), slice(2, 4, None)))
    >>> Box([np.int64(1)], (3.0,))
    Box(lo=(1,), hi=(3,))
    """

    lo: tuple[int, ...]
    hi: tuple[int, ...]

    def __init__(self, lo: Sequence[int], hi: Sequence[int]) -> None:
        # UDFs build one box per cell, so corners that are already tuples of Python ints
        # are stored as given (a type test per value); anything else is rebuilt with int()
        if type(lo) is not tuple or type(hi) is not tuple or not _all_ints(lo, hi):
            lo = tuple(int(v) for v in lo)
            hi = tuple(int(v) for v in hi)
        if len(lo) != len(hi):
            raise CellError(f"box corners differ in rank: lo={lo}, hi={hi}")
        # a frozen dataclass: fields are set on the instance dict, bypassing __setattr__
        d = self.__dict__
        d["lo"] = lo
        d["hi"] = hi

    @classmethod
    def full(cls, shape: Sequence[int]) -> "Box":
        """The box covering a whole array."""
        return cls((0,) * len(shape), tuple(shape))

    @classmethod
    def from_slices(cls, slices: Sequence[slice], shape: Sequence[int]) -> "Box":
        """Box from a tuple of slices (step 1, clipped like numpy indexing)."""
        if len(slices) != len(shape):
            raise CellError(
                f"a box needs one slice per axis of shape {tuple(shape)}. Got {len(slices)}."
            )
        lo, hi = [], []
        for s, n in zip(slices, shape):
            start, stop, step = s.indices(n)
            if step != 1:
                raise CellError(f"box slices must have step 1. Got {s!r}.")
            lo.append(start)
            hi.append(max(start, stop))
        return cls(tuple(lo), tuple(hi))

    @classmethod
    def parse(cls, text: str, shape: Sequence[int]) -> "Box":
        """Parse ``"r0:r1,c0:c1"`` (half-open, like numpy slices) against ``shape``.

        >>> Box.parse("0:10, 5:7", (100, 100))
        Box(lo=(0, 5), hi=(10, 7))
        """
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != len(shape):
            raise CellError(
                f"box {text!r} has {len(parts)} axes; expected {len(shape)} "
                f"(like 'r0:r1,c0:c1') for shape {tuple(shape)}"
            )
        lo, hi = [], []
        for p, n in zip(parts, shape):
            bits = p.split(":")
            try:
                if len(bits) == 1:
                    a = int(bits[0])
                    b = a + 1
                elif len(bits) == 2:
                    a = int(bits[0]) if bits[0].strip() else 0
                    b = int(bits[1]) if bits[1].strip() else n
                else:
                    raise ValueError
            except ValueError:
                raise CellError(f"bad box axis {p!r} in {text!r}; expected 'start:stop'") from None
            if not (0 <= a < b <= n):
                raise CellError(
                    f"box axis {p!r} is outside 0:{n} or empty (array shape {tuple(shape)})"
                )
            lo.append(a)
            hi.append(b)
        return cls(tuple(lo), tuple(hi))

    @property
    def ndim(self) -> int:
        return len(self.lo)

    @property
    def shape(self) -> Shape:
        return tuple(max(0, h - l) for l, h in zip(self.lo, self.hi))

    @property
    def size(self) -> int:
        return size_of(self.shape)

    @property
    def slices(self) -> tuple[slice, ...]:
        return tuple(slice(l, h) for l, h in zip(self.lo, self.hi))

    def is_empty(self) -> bool:
        return any(h <= l for l, h in zip(self.lo, self.hi))

    def clip(self, shape: Sequence[int]) -> "Box":
        lo = tuple(min(max(l, 0), n) for l, n in zip(self.lo, shape))
        hi = tuple(min(max(h, 0), n) for h, n in zip(self.hi, shape))
        return Box(lo, hi)

    def dilate(self, depth: Sequence[int], shape: Sequence[int]) -> "Box":
        """Grow by ``depth`` cells per axis, clipped to ``shape`` (a stencil's halo)."""
        lo = tuple(l - d for l, d in zip(self.lo, depth))
        hi = tuple(h + d for h, d in zip(self.hi, depth))
        return Box(lo, hi).clip(shape)

    def intersect(self, other: "Box") -> "Box":
        lo = tuple(max(a, b) for a, b in zip(self.lo, other.lo))
        hi = tuple(max(lo_, min(a, b)) for lo_, a, b in zip(lo, self.hi, other.hi))
        return Box(lo, hi)

    def contains_box(self, other: "Box") -> bool:
        return all(a <= b for a, b in zip(self.lo, other.lo)) and all(
            a >= b for a, b in zip(self.hi, other.hi)
        )

    def relative_to(self, outer: "Box") -> tuple[slice, ...]:
        """Slices locating this box inside the block that holds ``outer``."""
        return tuple(slice(l - o, h - o) for l, h, o in zip(self.lo, self.hi, outer.lo))

    def linear(self, shape: Sequence[int]) -> np.ndarray:
        """Linear indices (uint64, sorted) of the box's cells in an array of ``shape``."""
        shape = tuple(shape)
        if self.is_empty():
            return np.empty(0, dtype=np.uint64)
        st = strides(shape)
        acc = np.zeros((), dtype=np.uint64)
        for d in range(len(shape)):
            ax = np.arange(self.lo[d], self.hi[d], dtype=np.uint64) * st[d]
            acc = np.add.outer(acc, ax) if d else ax
        return np.ascontiguousarray(acc, dtype=np.uint64).ravel()

    def coords(self) -> np.ndarray:
        """The box's cells as an ``(n, ndim)`` int64 array, C order."""
        grids = np.indices(self.shape, dtype=np.int64).reshape(self.ndim, -1).T
        return grids + np.asarray(self.lo, dtype=np.int64)

    def __str__(self) -> str:
        return ",".join(f"{l}:{h}" for l, h in zip(self.lo, self.hi))


def check_coords(coords: np.ndarray, shape: Shape, what: str = "cells") -> None:
    """Raise if any coordinate row lies outside ``shape`` (vectorized)."""
    if coords.size == 0:
        return
    lo = coords.min(axis=0)
    hi = coords.max(axis=0)
    bad = (lo < 0) | (hi >= np.asarray(shape, dtype=np.int64))
    if bad.any():
        ax = int(np.flatnonzero(bad)[0])
        rows = np.flatnonzero((coords[:, ax] < 0) | (coords[:, ax] >= shape[ax]))
        cell = tuple(int(v) for v in coords[rows[0]])
        raise CellError(f"{what}: cell {cell} is outside the array shape {shape}")


def parse_cells(text: str, shape: Sequence[int]) -> np.ndarray:
    """The text form ``"r,c;r,c"`` -> ``(n, ndim)`` int64 coordinates (whitespace around
    the separators ignored; inside a number it is an error), in one pass of C-level
    splitting and conversion; a bad cell is named in one line.

    >>> parse_cells("1,2; 3 ,4;", (5, 5)).tolist()
    [[1, 2], [3, 4]]
    >>> parse_cells("1 2,3", (5, 5))
    Traceback (most recent call last):
    ...
    subzero.errors.CellError: bad cell '1 2,3'; expected integers like 'r,c'
    """
    shape = tuple(int(s) for s in shape)
    # whitespace runs to one space, then none beside a separator (all C-level); a space
    # left is inside a number, which int() refuses below
    flat_text = " ".join(str(text).split())
    for old, new in ((" ,", ","), (", ", ","), (" ;", ";"), ("; ", ";")):
        flat_text = flat_text.replace(old, new)
    parts = [p for p in flat_text.split(";") if p]
    if not parts:
        raise CellError(f"no cells in {text!r}; expected 'r,c;r,c'")
    counts = np.fromiter(map(str.count, parts, itertools.repeat(",")), np.int64, len(parts))
    if (counts != len(shape) - 1).any():
        bad = parts[int(np.argmax(counts != len(shape) - 1))]
        raise CellError(f"cell ({bad.replace(',', ', ')}) has {bad.count(',') + 1} "
                        f"coordinates; the array {shape} has {len(shape)} axes")
    try:
        flat = np.fromiter(map(int, ",".join(parts).split(",")), np.int64,
                           len(parts) * len(shape))
    except (ValueError, OverflowError):  # the slow path only names the bad cell
        for part in parts:
            try:
                vals = [int(v) for v in part.split(",")]
            except ValueError:
                raise CellError(f"bad cell {part!r}; expected integers like 'r,c'") from None
            if any(not -2 ** 63 <= v < 2 ** 63 for v in vals):
                raise CellError(f"cell {part!r}: a coordinate is out of range; expected "
                                f"cells inside the array {shape}") from None
        raise CellError(f"bad cells {str(text)[:60]!r}; expected integers like 'r,c;r,c'"
                        ) from None
    return flat.reshape(len(parts), len(shape))


def as_linear(cells: Any, shape: Sequence[int], what: str = "cells") -> np.ndarray:
    """Normalize cells given in any accepted form to 1-d uint64 linear indices.

    Accepted forms: an ``(n, ndim)`` coordinate array (or list of coordinate tuples), a
    single coordinate tuple, a 1-d array of linear indices, a :class:`Box`, a tuple of
    slices, or a bool mask with the array's shape. The result keeps the given order and
    duplicates; use :func:`unique` when a set is needed.
    """
    shape = tuple(int(s) for s in shape)
    size = size_of(shape)
    ndim = len(shape)
    if isinstance(cells, Box):
        if cells.ndim != ndim:
            raise CellError(f"{what}: box {cells} has rank {cells.ndim}; array has shape {shape}")
        if not Box.full(shape).contains_box(cells) and not cells.is_empty():
            raise CellError(f"{what}: box {cells} is outside the array shape {shape}")
        return cells.linear(shape)
    if isinstance(cells, tuple) and cells and all(isinstance(s, slice) for s in cells):
        return Box.from_slices(cells, shape).linear(shape)
    if isinstance(cells, tuple) and len(cells) == ndim and all(
        isinstance(v, (int, np.integer)) for v in cells
    ):
        cells = np.asarray([cells], dtype=np.int64)
    arr = np.asarray(cells)
    if arr.dtype == bool:
        if arr.shape != shape:
            raise CellError(f"{what}: mask has shape {arr.shape}; expected the array's {shape}")
        return np.flatnonzero(arr).astype(np.uint64)
    if arr.size == 0:
        return np.empty(0, dtype=np.uint64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise CellError(
            f"{what}: expected integer coordinates, linear indices, a box or a bool mask; "
            f"got an array of {arr.dtype}"
        )
    if arr.ndim == 2:
        if arr.shape[1] != ndim:
            raise CellError(
                f"{what}: coordinates have {arr.shape[1]} columns; array {shape} has {ndim} axes"
            )
        coords = arr.astype(np.int64, copy=False)
        check_coords(coords, shape, what)
        if ndim == 0:
            return np.zeros(len(coords), dtype=np.uint64)
        return np.ravel_multi_index(tuple(coords.T), shape).astype(np.uint64)
    if arr.ndim == 1:
        if np.issubdtype(arr.dtype, np.signedinteger) and arr.min() < 0:
            raise CellError(f"{what}: linear index {int(arr.min())} is negative")
        lin = arr.astype(np.uint64, copy=False)
        mx = int(lin.max())
        if mx >= size:
            raise CellError(
                f"{what}: linear index {mx} is outside the array shape {shape} (size {size})"
            )
        return lin
    raise CellError(
        f"{what}: expected an (n, {ndim}) coordinate array, linear indices, a box or a mask; "
        f"got an array of shape {arr.shape}"
    )


def unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a 1-d array (a sort and a mask: numpy 2.4's ``np.unique``
    is tens of times slower on large unsorted integer arrays)."""
    v = np.sort(np.asarray(values).reshape(-1))
    if len(v) < 2:
        return v
    keep = np.empty(len(v), dtype=bool)
    keep[0] = True
    np.not_equal(v[1:], v[:-1], out=keep[1:])
    return v[keep]


def run_starts(x: np.ndarray) -> np.ndarray:
    """Where each run of equal values of a sorted (or grouped) array starts.

    >>> run_starts(np.array([3, 3, 5, 7, 7, 7])).tolist()
    [0, 2, 3]
    """
    x = np.asarray(x).reshape(-1)
    first = np.ones(len(x), dtype=bool)
    if len(x) > 1:
        np.not_equal(x[1:], x[:-1], out=first[1:])
    return np.flatnonzero(first)


def to_coords(linear: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Linear indices to an ``(n, ndim)`` int64 coordinate array."""
    linear = np.asarray(linear, dtype=np.int64)
    if len(shape) == 0:
        return np.zeros((len(linear), 0), dtype=np.int64)
    return np.stack(np.unravel_index(linear, tuple(shape)), axis=1).astype(np.int64)


def cells_where(mask: np.ndarray) -> np.ndarray:
    """The ``(n, ndim)`` coordinates of the True cells of ``mask`` in C order:
    ``np.argwhere(mask)``, found through the flat indices (about ten times quicker on a
    large, sparse 2-d mask).

    >>> cells_where(np.array([[False, True], [True, False]])).tolist()
    [[0, 1], [1, 0]]
    """
    mask = np.asarray(mask)
    return to_coords(np.flatnonzero(mask), mask.shape)


def any_over(mask: np.ndarray, axes: Sequence[int], keepdims: bool = True) -> np.ndarray:
    """``mask.any(axis=axes, keepdims=keepdims)`` for a bool frontier, quicker when the
    reduced axes are the last ones and hold at most 64 cells: numpy reduces one short line
    per kept cell, a cost that grows with the kept cells, so the lines are padded to whole
    8-byte words instead and or-ed one word column at a time.

    >>> m = np.zeros((3, 2, 5), dtype=bool); m[1, 1, 4] = True
    >>> any_over(m, (1, 2)).ravel().tolist(), any_over(m, (2,), keepdims=False).shape
    ([False, True, False], (3, 2))
    """
    m = np.asarray(mask, dtype=bool)
    nd = m.ndim
    axes = tuple(sorted({int(a) % nd for a in axes})) if nd else ()
    r = len(axes)
    line = size_of(m.shape[nd - r:])
    kept = m.shape[:nd - r]
    if not r or r == nd or axes != tuple(range(nd - r, nd)) or line > 64 \
            or size_of(kept) < 64:
        return m.any(axis=axes, keepdims=keepdims)
    n = size_of(kept)
    flat = np.ascontiguousarray(m).reshape(-1).view(np.uint8)
    out = np.zeros(n, dtype=bool)
    at = 0
    # each line read as whole words in place (unaligned strided views, no copy): 8-byte
    # words while they fit, then 4, 2 and 1 byte for the rest of the line
    for width, dt in ((8, np.uint64), (4, np.uint32), (2, np.uint16), (1, np.uint8)):
        while line - at >= width:
            col = np.ndarray((n,), dtype=dt, buffer=flat, offset=at, strides=(line,))
            out |= col != 0
            at += width
    return out.reshape(kept + (1,) * r if keepdims else kept)


def _shift_or(out: np.ndarray, src: np.ndarray, ax: int, k: int, wrap: bool) -> None:
    """``out |= src`` shifted by ``+k`` and ``-k`` cells along ``ax`` (in place)."""
    if wrap:
        out |= np.roll(src, k, axis=ax)
        out |= np.roll(src, -k, axis=ax)
        return
    n = src.shape[ax]
    if k >= n:
        out |= src.any(axis=ax, keepdims=True)
        return
    a = [slice(None)] * src.ndim
    b = [slice(None)] * src.ndim
    a[ax], b[ax] = slice(k, None), slice(None, n - k)
    out[tuple(a)] |= src[tuple(b)]
    out[tuple(b)] |= src[tuple(a)]


def dilate(mask: np.ndarray, radius: int | Sequence[int], wrap: bool = False) -> np.ndarray:
    """Box dilation of a frontier by ``radius`` cells per axis.

    This is the backward and forward mapping of a stencil of that radius: each output cell
    depends on the box of input cells around it, clipped at the border (or wrapped around
    when the stencil's boundary mode wraps). Separable, with shifted ORs whose reach doubles
    each pass: O(n log r) bool operations, a fraction of a millisecond per megapixel.
    """
    if np.isscalar(radius):
        radius = (int(radius),) * mask.ndim
    out = np.array(mask, dtype=bool, copy=True)
    for ax, r in enumerate(radius):
        if r <= 0 or out.shape[ax] == 0:
            continue
        if wrap and 2 * r + 1 >= out.shape[ax]:
            out |= out.any(axis=ax, keepdims=True)
            continue
        reach = 0
        while reach < r:
            step = min(reach + 1, r - reach)
            _shift_or(out, out.copy(), ax, step, wrap)
            reach += step
    return out


def box_cells(lo: np.ndarray, hi: np.ndarray, shape: Sequence[int]) -> "Ragged":
    """The cells of the boxes ``[lo, hi)`` (``(n, ndim)`` int arrays, inside ``shape``) as
    a :class:`Ragged` of linear indices, each box's cells in C order (so each row is
    sorted), with one broadcast add per distinct box shape.

    >>> box_cells(np.array([[0, 1]]), np.array([[2, 3]]), (4, 4)).values.tolist()
    [1, 2, 5, 6]
    """
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    shape = tuple(int(s) for s in shape)
    n = len(lo)
    if n == 0:
        return Ragged.empty()
    ext = np.maximum(hi - lo, 0)
    sizes = np.prod(ext, axis=1)
    st = np.asarray(strides(shape), dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    values = np.empty(int(offsets[-1]), dtype=np.uint64)
    start = lo @ st if len(shape) else np.zeros(n, dtype=np.int64)
    # group the boxes by shape: one integer key per shape, sorted once
    span = ext.max(axis=0) + 1
    key = np.ravel_multi_index(tuple(ext.T), tuple(span)) if len(shape) else np.zeros(n, int)
    order = np.argsort(key, kind="stable")
    kinds, first = np.unique(key[order], return_index=True)
    bounds = np.append(first, n)
    for k in range(len(kinds)):
        rows = order[bounds[k]:bounds[k + 1]]
        e = ext[rows[0]]
        size = int(np.prod(e))
        if size == 0:
            continue
        grid = np.zeros((), dtype=np.int64)
        for d in range(len(shape)):
            grid = np.add.outer(grid, np.arange(e[d], dtype=np.int64) * st[d])
        at = offsets[rows][:, None] + np.arange(size)
        values[at] = (start[rows][:, None] + grid.reshape(-1)).astype(np.uint64)
    return Ragged(values, offsets)


@dataclass(frozen=True)
class Ragged:
    """A batch of variable-length sets in CSR form: row ``k`` is
    ``values[offsets[k]:offsets[k+1]]``.

    SubZero uses it for batches of region pairs: the output cells of each pair, the input
    cells of each pair for one input, or payload bytes.

    >>> r = Ragged.from_rows([np.array([1, 2]), np.array([7])])
    >>> len(r), r.lengths.tolist(), r.row(1).tolist()
    (2, [2, 1], [7])
    """

    values: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, k: int) -> np.ndarray:
        return self.values[self.offsets[k] : self.offsets[k + 1]]

    def rows(self) -> Iterable[np.ndarray]:
        for k in range(len(self)):
            yield self.row(k)

    def row_ids(self) -> np.ndarray:
        """For every value, the index of the row it belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)

    @classmethod
    def empty(cls, n: int = 0, dtype: Any = np.uint64) -> "Ragged":
        return cls(np.empty(0, dtype=dtype), np.zeros(n + 1, dtype=np.int64))

    @classmethod
    def from_singletons(cls, values: np.ndarray) -> "Ragged":
        values = np.asarray(values)
        return cls(values, np.arange(len(values) + 1, dtype=np.int64))

    @classmethod
    def from_dense(cls, values: np.ndarray) -> "Ragged":
        """Rows of a 2-d array, each row one set."""
        values = np.asarray(values)
        n, k = values.shape
        return cls(values.reshape(-1), np.arange(n + 1, dtype=np.int64) * k)

    @classmethod
    def from_rows(cls, rows: Sequence[np.ndarray], dtype: Any = np.uint64) -> "Ragged":
        rows = [np.asarray(r, dtype=dtype).reshape(-1) for r in rows]
        lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        values = np.concatenate(rows) if rows else np.empty(0, dtype=dtype)
        return cls(values.astype(dtype, copy=False), offsets)

    @classmethod
    def from_lengths(cls, values: np.ndarray, lengths: np.ndarray) -> "Ragged":
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(np.asarray(values), offsets)

    @classmethod
    def concat(cls, parts: Sequence["Ragged"]) -> "Ragged":
        parts = [p for p in parts]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        values = np.concatenate([p.values for p in parts])
        lens = np.concatenate([p.lengths for p in parts])
        return cls.from_lengths(values, lens)

    def take(self, rows: np.ndarray) -> "Ragged":
        """The sub-batch of the given rows (vectorized gather)."""
        rows = np.asarray(rows, dtype=np.int64)
        lens = self.lengths[rows]
        starts = self.offsets[:-1][rows]
        total = int(lens.sum())
        if total == 0:
            return Ragged(self.values[:0], np.zeros(len(rows) + 1, dtype=np.int64))
        # index of each gathered value: start of its row plus its position in the row
        row_of = np.repeat(np.arange(len(rows)), lens)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        pos = np.arange(total, dtype=np.int64) - offsets[:-1][row_of]
        return Ragged(self.values[starts[row_of] + pos], offsets)

    def any_in(self, mask_flat: np.ndarray) -> np.ndarray:
        """Per row: does any value (a linear index) hit ``mask_flat``? Vectorized."""
        if len(self) == 0:
            return np.zeros(0, dtype=bool)
        hit = mask_flat[self.values.astype(np.intp, copy=False)]
        counts = np.bincount(self.row_ids()[hit], minlength=len(self))
        return counts > 0
