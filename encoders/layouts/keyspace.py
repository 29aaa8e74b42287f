"""Key-space geometry of sorted linear indices: coordinates, runs, boxes and ranges.

>>> import numpy as np
>>> lo, hi = run_boxes(np.array([1, 2, 3, 5, 6], dtype=np.uint64), (2, 4))
>>> lo.tolist(), hi.tolist()
([[0, 1], [1, 1]], [[0, 3], [1, 2]])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from subzero.cells import strides
from subzero.frontier import clip_span


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
    """Metadata describing a key space: linear range and bounding box of ``values``.

    The first axis's bounds come from the range alone (a linear index grows with it); the
    others from the remainders below the first axis's stride, in int64 (uint64 division
    is slower), which avoids building every cell's coordinates through :func:`coords`.

    >>> lin_range_box(np.array([7, 2, 9], dtype=np.uint64), (3, 4))
    {'count': 3, 'lin': [2, 9], 'lo': [0, 1], 'hi': [3, 4]}
    """
    values = np.asarray(values, dtype=np.uint64).reshape(-1)
    if len(values) == 0:
        return {"count": 0}
    shape = tuple(int(s) for s in shape)
    a, b = int(values.min()), int(values.max())
    if not shape:
        return {"count": int(len(values)), "lin": [a, b], "lo": [], "hi": []}
    st = [int(x) for x in strides(shape)]
    size = st[0] * shape[0]
    if b >= size or size >= 1 << 63:  # beyond the shape: coordinates wrap, as coords says
        c = coords(values, shape)[:, :len(shape)]
        return {"count": int(len(values)), "lin": [a, b], "lo": c.min(axis=0).tolist(),
                "hi": (c.max(axis=0) + 1).tolist()}
    lo, hi = [a // st[0]], [b // st[0] + 1]
    if len(shape) > 1:
        rest = values.view(np.int64)  # the remainder below the first axis's stride
        rest = rest % st[0] if lo[0] + 1 < hi[0] else rest - lo[0] * st[0]
        for ax in range(1, len(shape)):
            c = rest // st[ax] if st[ax] > 1 else rest
            if ax > 1:  # axis 1's quotient is below its size already
                c = c % shape[ax]
            lo.append(int(c.min()))
            hi.append(int(c.max()) + 1)
    return {"count": int(len(values)), "lin": [a, b], "lo": lo, "hi": hi}


def touches(q: np.ndarray, space: dict, shape: Sequence[int],
            at: np.ndarray | None = None) -> bool:
    """Whether sorted cells ``q`` can meet a key space (range, then box test); ``at``:
    their coordinates, when the caller has them."""
    if not space or not space.get("count"):
        return False
    a, b = clip_span(q, space["lin"][0], space["lin"][1])
    if a == b:
        return False
    if len(shape) < 2:
        return True
    c = (coords(q[a:b], shape) if at is None else at[a:b])[:, :len(shape)]
    inside = ((c >= np.asarray(space["lo"])) & (c < np.asarray(space["hi"]))).all(axis=1)
    return bool(inside.any())


__all__ = ["coords", "run_boxes", "row_bboxes", "lin_range_box", "touches"]
