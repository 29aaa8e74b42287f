"""Frontiers: the set of cells a query has reached in one array (paper VI-C).

A frontier is held in whichever form its size makes cheap, and converted on first use:

- a few cells: sorted unique uint64 *linear indices*, so a step costs in proportion to its
  cells rather than to the array;
- many cells: a numpy bool *mask* with the array's shape (the paper's boolean array), which
  mapping functions need and where deduplication is free.

The line between the two is :data:`SPARSE_FRACTION`: a set of more than
``size // SPARSE_FRACTION`` cells of its array is kept as a mask. :class:`Frontier` is the
frontier of a query step, :class:`FrontierUnion` gathers the answers of several shards or
paths into one, and the helpers at the end test many cells against one sorted query
(:func:`as_query`, :func:`member`, :class:`Members`, :func:`clip_range`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from subzero.cells import Box, as_linear, size_of, to_coords, unique

#: a set of more than ``size // SPARSE_FRACTION`` cells is kept as a mask, not as cells
SPARSE_FRACTION = 16


def is_dense(n: int, size: int) -> bool:
    """Whether ``n`` cells of an array of ``size`` cells are better kept as a mask."""
    return n * SPARSE_FRACTION > size


def frontier(shape: Sequence[int], cells: Any = None) -> np.ndarray:
    """A bool frontier of ``shape`` holding ``cells`` (any form :func:`as_linear` takes)."""
    shape = tuple(shape)
    mask = np.zeros(shape, dtype=bool)
    if cells is not None:
        mask.reshape(-1)[as_linear(cells, shape).astype(np.intp)] = True
    return mask


def mask_from_linear(linear: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Frontier from trusted in-range linear indices (no checks: hot path)."""
    mask = np.zeros(tuple(shape), dtype=bool)
    mask.reshape(-1)[np.asarray(linear, dtype=np.intp)] = True
    return mask


class Frontier:
    """The cells of one array during a query: sorted unique uint64 linear indices (a few
    cells) or a bool mask (many), each computed from the other on first use and kept, so a
    step costs in proportion to the cells it touches, not to the array, until some step
    needs the mask (a mapping function does).

    >>> f = Frontier((3, 4), lin=np.array([1, 6], np.uint64))
    >>> f.n, int(f.mask.sum()), f.meets(Box((1, 0), (2, 4)))
    (2, 2, True)
    >>> f.union(Frontier((3, 4), lin=np.array([6, 7], np.uint64))).lin.tolist()
    [1, 6, 7]
    """

    __slots__ = ("shape", "size", "_lin", "_mask", "_n", "_coords")

    def __init__(self, shape: Sequence[int], *, lin: np.ndarray | None = None,
                 mask: np.ndarray | None = None, n: int | None = None) -> None:
        if (lin is None) == (mask is None):
            raise ValueError("a Frontier holds linear indices or a mask")
        self.shape = tuple(int(s) for s in shape)
        self.size = size_of(self.shape)
        self._lin, self._mask = lin, mask
        self._n = len(lin) if lin is not None else n
        self._coords: np.ndarray | None = None  # of the few cells, once asked (meets)

    @classmethod
    def everything(cls, shape: Sequence[int]) -> "Frontier":
        """Every cell of an array, built as a mask or indices only when a step asks (an
        all-to-all step's answer costs nothing however large the array).

        >>> f = Frontier.everything((2000, 3000))
        >>> f.n, f.full, f.meets(Box((5, 5), (6, 6)))
        (6000000, True, True)
        """
        f = cls.__new__(cls)
        f.shape = tuple(int(s) for s in shape)
        f.size = size_of(f.shape)
        f._lin = f._mask = f._coords = None
        f._n = f.size
        return f

    @classmethod
    def of(cls, f: Any, n: int | None = None) -> "Frontier":
        """``f`` itself if a Frontier, else one over the bool mask ``f`` (holding ``n``
        cells, when known)."""
        if isinstance(f, Frontier):
            return f
        mask = np.asarray(f, dtype=bool)
        return cls(mask.shape, mask=mask, n=None if n is None else int(n))

    @property
    def n(self) -> int:
        """How many cells."""
        if self._n is None:
            self._n = int(np.count_nonzero(self._mask))
        return self._n

    @property
    def lin(self) -> np.ndarray:
        """Sorted unique uint64 linear indices."""
        if self._lin is None:
            self._lin = (np.arange(self.size, dtype=np.uint64) if self._mask is None
                         else np.flatnonzero(self._mask).astype(np.uint64))
        return self._lin

    @property
    def mask(self) -> np.ndarray:
        """The bool mask (shared: do not modify it)."""
        if self._mask is None:
            self._mask = (np.ones(self.shape, dtype=bool) if self._lin is None
                          else mask_from_linear(self._lin, self.shape))
        return self._mask

    @property
    def full(self) -> bool:
        return self.n == self.size

    @property
    def sparse(self) -> bool:
        """Whether it holds linear indices of few cells (so a step may work on them
        alone, whether or not a mask was also built)."""
        return self._lin is not None and not is_dense(self.n, self.size)

    def meets(self, box: Box) -> bool:
        """Whether a cell lies in ``box``."""
        if self.full:
            return box.size > 0
        if self._mask is not None and not self.sparse:
            return bool(self._mask[box.slices].any())
        if not len(self._lin):
            return False
        c = self.coords()
        return bool(((c >= np.asarray(box.lo, dtype=np.int64))
                     & (c < np.asarray(box.hi, dtype=np.int64))).all(axis=1).any())

    def coords(self) -> np.ndarray:
        """The cells' ``(n, ndim)`` coordinates, in :attr:`lin` order; worked out once
        (a step asks about every shard's box)."""
        c = self._coords
        if c is None:
            c = self._coords = to_coords(self.lin, self.shape)
        return c

    def union(self, other: "Frontier") -> "Frontier":
        for x, y in ((self, other), (other, self)):
            if x._n == 0:  # nothing to add (counts known for free only)
                return y
            if x._n == x.size:  # everything already
                return x
        a, b = (self, other) if self._mask is not None else (other, self)
        if a._mask is None:  # both sparse
            if not is_dense(a.n + b.n, self.size):
                return Frontier(self.shape, lin=unique(np.concatenate([a._lin, b._lin])))
            return Frontier(self.shape, mask=a.mask | b.mask)
        if b._mask is not None:
            return Frontier(self.shape, mask=a._mask | b._mask)
        mask = a._mask.copy()  # a mask and a few cells: set them in a copy
        mask.reshape(-1)[b._lin.astype(np.intp)] = True
        return Frontier(self.shape, mask=mask)


def start_frontier(shape: Sequence[int], cells: Any = None) -> Frontier:
    """The frontier a query starts from: a bool mask of the array's shape as it is, any
    other form :func:`as_linear` takes as sorted distinct cells (checked)."""
    shape = tuple(int(s) for s in shape)
    if isinstance(cells, np.ndarray) and cells.dtype == bool and cells.shape == shape:
        return Frontier(shape, mask=cells)
    if cells is None:
        return Frontier(shape, lin=np.empty(0, dtype=np.uint64))
    lin = as_linear(cells, shape)
    # a box's cells come sorted and distinct (C order); other forms may not
    return Frontier(shape, lin=lin if isinstance(cells, Box) else unique(lin))


class FrontierUnion:
    """The union of many answers in one array (the shards of a step, the paths of a DAG):
    sorted cells while the total stays small, a mask once it is large.

    ``flat`` is the mask, flat: a reader may set a large answer there directly and
    :meth:`add` ``None`` for it, which spares sorting it.

    >>> u = FrontierUnion((4, 4))
    >>> u.add(np.array([1, 2], np.uint64)); u.add(np.array([2, 3], np.uint64))
    >>> u.frontier().lin.tolist()
    [1, 2, 3]
    """

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.size = size_of(self.shape)
        self.flat = np.zeros(self.size, dtype=bool)
        self.dense = False
        self._parts: list[np.ndarray] = []
        self._total = 0

    def add(self, got: np.ndarray | None) -> None:
        """Add sorted unique uint64 cells, or ``None`` for an answer already set in
        :attr:`flat`."""
        if got is None:
            self.dense = True
            return
        if not len(got):
            return
        self._total += len(got)
        if self.dense or is_dense(self._total, self.size):
            self.flat[got.astype(np.intp)] = True
            self.dense = True
        else:
            self._parts.append(got)

    @property
    def full(self) -> bool:
        """Whether every cell is in (checked only once the union is a mask)."""
        return self.dense and bool(self.flat.all())

    def frontier(self) -> Frontier:
        if self.dense:
            for p in self._parts:
                self.flat[p.astype(np.intp)] = True
            self._parts = []
            return Frontier(self.shape, mask=self.flat.reshape(self.shape))
        if len(self._parts) == 1:
            return Frontier(self.shape, lin=self._parts[0])
        return Frontier(self.shape, lin=unique(np.concatenate(self._parts)) if self._parts
                        else np.empty(0, dtype=np.uint64))


# ---------------------------------------------------------------------------------------
# many cells against one sorted query
# ---------------------------------------------------------------------------------------


def as_query(cells: np.ndarray) -> np.ndarray:
    """Query cells as sorted unique uint64 (cheap when they already are)."""
    q = np.asarray(cells, dtype=np.uint64).reshape(-1)
    if len(q) > 1 and not (q[1:] > q[:-1]).all():
        q = unique(q)
    return q


def member(sorted_q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x in sorted_q`` elementwise (``sorted_q`` sorted uint64)."""
    if len(sorted_q) == 0:
        return np.zeros(len(x), dtype=bool)
    idx = np.searchsorted(sorted_q, x)
    idx[idx == len(sorted_q)] = 0
    return sorted_q[idx] == x


class Members:
    """``x in q`` for many batches of ``x`` against one query (sorted unique uint64 ``q``
    in an array of ``size`` cells).

    A large query becomes a dense bool mask (one byte per cell of the array, so only when
    that costs at most :data:`DENSE_BYTES_PER_CELL` bytes per query cell or 4 MiB): an
    indexed load instead of a binary search of a big array per tested cell, which is what
    makes scanning a shard against a frontier of half the array cheap. ``x`` must hold
    cells of the array (below ``size``).

    >>> m = Members(np.array([2, 5], dtype=np.uint64), 8)
    >>> m(np.array([5, 6], dtype=np.uint64)).tolist()
    [True, False]
    """

    def __init__(self, q: np.ndarray, size: int) -> None:
        self.q = q
        self.mask: np.ndarray | None = None
        self.size = int(size)
        # built on first use: many lookups never test single cells against the query
        self._dense = (len(q) >= DENSE_MIN
                       and self.size <= max(1 << 22, DENSE_BYTES_PER_CELL * len(q)))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self._dense and self.mask is None:
            self.mask = np.zeros(self.size, dtype=bool)
            self.mask[self.q] = True
        if self.mask is not None:
            return self.mask[x]
        return member(self.q, x)


DENSE_MIN = 4096            # below this a binary search of q is as fast as a mask
DENSE_BYTES_PER_CELL = 64   # mask bytes allowed per query cell


def clip_range(q: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The part of sorted ``q`` inside ``[lo, hi]``."""
    a, b = clip_span(q, lo, hi)
    return q[a:b]


def clip_span(q: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """Where the part of sorted ``q`` inside ``[lo, hi]`` starts and ends (``q[a:b]``), for
    a caller slicing something aligned with ``q`` too.

    >>> clip_span(np.array([1, 3, 5, 7], np.uint64), 3, 5)
    (1, 3)
    """
    return (int(np.searchsorted(q, np.uint64(lo), side="left")),
            int(np.searchsorted(q, np.uint64(hi), side="right")))
