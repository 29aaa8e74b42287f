"""Coordinate helpers for the structural built-ins (vectorized; no per-cell loops).

>>> outer_linear([np.array([0, 4]), np.array([1, 2])]).tolist()
[1, 2, 5, 6]
>>> bbox_of_box_in(Box((1, 0), (2, 4)), (3, 4), (2, 6))
Box(lo=(0, 0), hi=(2, 6))
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from subzero.cells import Box, strides


def outer_linear(per_axis: Sequence[np.ndarray]) -> np.ndarray:
    """Linear indices of a grid given each axis's contribution (``coord * stride``), in C
    order of the grid: ``sum_k per_axis[k][i_k]`` raveled."""
    if not per_axis:
        return np.zeros(1, dtype=np.uint64)
    acc = np.asarray(per_axis[0], dtype=np.uint64)
    for a in per_axis[1:]:
        acc = np.add.outer(acc, np.asarray(a, dtype=np.uint64))
    return np.ascontiguousarray(acc, dtype=np.uint64).reshape(-1)


def axis_strides(shape: Sequence[int]) -> list[int]:
    """C-order element strides as Python ints."""
    return [int(s) for s in strides(tuple(shape))]


def bbox_of_box_in(out_box: Box, out_shape: Sequence[int], in_shape: Sequence[int]) -> Box:
    """The bounding box, in an array of ``in_shape``, of the cells whose C-order linear
    indices are those of ``out_box`` in an array of ``out_shape`` (a reshape's input block).

    The box's cells form runs of consecutive linear indices (one per combination of the
    leading axes); a run from ``s`` to ``e`` spans ``[s_k, e_k]`` on axis ``k`` when ``s``
    and ``e`` share their coordinates before ``k``, and the whole axis otherwise (it wraps).
    """
    out_shape, in_shape = tuple(out_shape), tuple(in_shape)
    if out_box.is_empty():
        return Box((0,) * len(in_shape), (0,) * len(in_shape))
    if not in_shape or not out_shape:  # a 0-d array has one cell
        return Box.full(in_shape)
    nd = len(out_shape)
    # axes from t on are contiguous within a run: every axis after t is full in the box
    t = nd - 1
    while t > 0 and out_box.lo[t] == 0 and out_box.hi[t] == out_shape[t]:
        t -= 1
    st = axis_strides(out_shape)
    heads = outer_linear([np.arange(out_box.lo[k], out_box.hi[k], dtype=np.uint64) * st[k]
                          for k in range(t)]) if t else np.zeros(1, dtype=np.uint64)
    first = sum(out_box.lo[k] * st[k] for k in range(t, nd))
    last = sum((out_box.hi[k] - 1) * st[k] for k in range(t, nd))
    s = np.stack(np.unravel_index((heads + np.uint64(first)).astype(np.intp), in_shape), 1)
    e = np.stack(np.unravel_index((heads + np.uint64(last)).astype(np.intp), in_shape), 1)
    lo, hi = [], []
    wrapped = np.zeros(len(s), dtype=bool)  # the run's start and end differ before axis k
    for k, n in enumerate(in_shape):
        if wrapped.any():
            lo.append(0)
            hi.append(n)
        else:
            lo.append(int(s[:, k].min()))
            hi.append(int(e[:, k].max()) + 1)
        wrapped |= s[:, k] != e[:, k]
    return Box(tuple(lo), tuple(hi))
