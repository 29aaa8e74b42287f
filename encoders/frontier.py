"""Query-side helpers on sorted linear indices: membership, ranges, runs and boxes.

>>> import numpy as np
>>> member(np.array([2, 5, 9], dtype=np.uint64), np.array([5, 6], dtype=np.uint64)).tolist()
[True, False]
>>> lo, hi = run_boxes(np.array([1, 2, 3, 5, 6], dtype=np.uint64), (2, 4))
>>> lo.tolist(), hi.tolist()
([[0, 1], [1, 1]], [[0, 3], [1, 2]])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from encoders.csr import offsets_from_lengths, uniq
from subzero.cells import strides


def as_query(cells: np.ndarray) -> np.ndarray:
    """Query cells as sorted unique uint64 (cheap when they already are)."""
    q = np.asarray(cells, dtype=np.uint64).reshape(-1)
    if len(q) > 1 and not (q[1:] > q[:-1]).all():
        q = uniq(q)
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
    a = np.searchsorted(q, np.uint64(lo), side="left")
    b = np.searchsorted(q, np.uint64(hi), side="right")
    return q[a:b]


def coords(lin: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``(n, max(ndim, 2))`` int64 coordinates, padded with zero columns for rtree (which
    needs two dimensions)."""
    shape = tuple(int(s) for s in shape)
    lin = np.asarray(lin, dtype=np.uint64)
    d = len(shape)
    out = np.zeros((len(lin), max(d, 2)), dtype=np.int64)
    st = strides(shape)
    for ax in range(d):
        out[:, ax] = ((lin // st[ax]) % np.uint64(shape[ax])).astype(np.int64)
    return out


def run_boxes(q: np.ndarray, shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Cover sorted cells ``q`` exactly by runs along the last axis: ``(mins, maxs)``
    inclusive coordinates, one row per run (a dense frontier needs few boxes)."""
    shape = tuple(int(s) for s in shape)
    if len(q) == 0:
        z = np.zeros((0, max(len(shape), 2)), dtype=np.int64)
        return z, z
    last = shape[-1] if shape else 1
    brk = np.ones(len(q), dtype=bool)
    brk[1:] = (q[1:] != q[:-1] + np.uint64(1)) | (q[1:] % np.uint64(last) == 0)
    starts = np.flatnonzero(brk)
    ends = np.append(starts[1:], len(q)) - 1
    return coords(q[starts], shape), coords(q[ends], shape)


def row_bboxes(values: np.ndarray, offsets: np.ndarray, shape: Sequence[int]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bounding boxes of the non-empty CSR rows: ``(rows, mins, maxs)``."""
    lens = np.diff(offsets)
    rows = np.flatnonzero(lens > 0)
    c = coords(values, shape)
    starts = offsets[:-1][rows]
    if len(rows) == 0:
        z = np.zeros((0, c.shape[1]), dtype=np.int64)
        return rows, z, z
    return (rows, np.minimum.reduceat(c, starts, axis=0), np.maximum.reduceat(c, starts, axis=0))


def lin_range_box(values: np.ndarray, shape: Sequence[int]) -> dict:
    """Metadata describing a key space: linear range and bounding box of ``values``."""
    values = np.asarray(values, dtype=np.uint64)
    if len(values) == 0:
        return {"count": 0}
    c = coords(values, shape)[:, :len(shape)]
    return {"count": int(len(values)), "lin": [int(values.min()), int(values.max())],
            "lo": c.min(axis=0).tolist() if len(shape) else [],
            "hi": (c.max(axis=0) + 1).tolist() if len(shape) else []}


def touches(q: np.ndarray, space: dict, shape: Sequence[int]) -> bool:
    """Whether sorted cells ``q`` can meet a key space (range, then box test)."""
    if not space or not space.get("count"):
        return False
    q = clip_range(q, space["lin"][0], space["lin"][1])
    if len(q) == 0:
        return False
    if len(shape) < 2:
        return True
    c = coords(q, shape)[:, :len(shape)]
    inside = ((c >= np.asarray(space["lo"])) & (c < np.asarray(space["hi"]))).all(axis=1)
    return bool(inside.any())


__all__ = ["as_query", "member", "Members", "clip_range", "coords", "run_boxes",
           "row_bboxes", "lin_range_box", "touches", "offsets_from_lengths"]
