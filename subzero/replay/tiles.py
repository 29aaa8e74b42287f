"""Cells and tiles: the tiles of an operator to recompute for the cells a change reaches,
and the changed cells from comparisons of recomputed boxes.

An operator that stores lineage (its shards are per output chunk) or is global is
recomputed by whole task chunks; any other by the bounding box of the reached cells in
each chunk they touch (a 10 x 10 box stays a 10 x 10 recompute).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from subzero.cells import Box, to_coords
from subzero.chunking import task_grid
from subzero.frontier import Frontier, is_dense
from subzero.replay.plan import cells_of

__all__ = ["bbox", "changes", "tiles", "few", "LIST_CELLS"]

#: a changed array lists its changed cells when it has at most this many
LIST_CELLS = 20


def bbox(mask: np.ndarray, within: Box) -> Box | None:
    """The bounding box of ``mask``'s cells inside ``within`` (global coordinates).

    >>> m = np.zeros((4, 4), bool); m[1, 2] = m[2, 1] = True
    >>> bbox(m, Box.full((4, 4)))
    Box(lo=(1, 1), hi=(3, 3))
    """
    sub = mask[within.slices]
    if not sub.any():
        return None
    lo, hi = [], []
    for ax in range(sub.ndim):
        other = tuple(k for k in range(sub.ndim) if k != ax)
        idx = np.flatnonzero(sub.any(axis=other) if other else sub)
        lo.append(within.lo[ax] + int(idx[0]))
        hi.append(within.lo[ax] + int(idx[-1]) + 1)
    return Box(tuple(lo), tuple(hi))


def changes(shape: Sequence[int], parts: Sequence[tuple[Box, np.ndarray]]) -> Frontier:
    """The changed cells of an array, from the comparison ``diff`` of each recomputed
    ``box`` (disjoint): their indices when few, else a mask.

    >>> f = changes((4, 5), [(Box((1, 1), (3, 3)), np.array([[0, 1], [0, 0]], bool))])
    >>> f.n, f.lin.tolist()
    (1, [7])
    """
    shape = tuple(shape)
    counts = [int(np.count_nonzero(diff)) for _, diff in parts]
    n, size = sum(counts), cells_of(shape)
    if n == size:
        return Frontier.everything(shape)
    if not is_dense(n, size):
        lins = [np.ravel_multi_index(tuple(c + lo for c, lo in zip(np.nonzero(diff), box.lo)),
                                     shape) for (box, diff), k in zip(parts, counts) if k]
        lin = np.sort(np.concatenate(lins)) if lins else np.empty(0, dtype=np.int64)
        return Frontier(shape, lin=lin.astype(np.uint64))
    mask = np.zeros(shape, dtype=bool)
    for box, diff in parts:
        mask[box.slices] = diff
    return Frontier(shape, mask=mask, n=n)


def tiles(op: Any, chunks: Sequence[int], reach: Frontier | None, by_chunk: bool
          ) -> list[tuple[tuple[int, ...], Box]]:
    """The output tiles of ``op`` to recompute for the reached cells ``reach`` (None:
    every cell): the task chunks holding some (``by_chunk``), else in each the bounding
    box of those."""
    grid = list(task_grid(op, chunks))
    if reach is None:
        return grid
    out = []
    if reach.sparse:  # a few cells: their coordinates, not the mask
        coords = to_coords(reach.lin, reach.shape)
        for idx, box in grid:
            here = coords[((coords >= box.lo) & (coords < box.hi)).all(axis=1)]
            if len(here):
                out.append((idx, box if by_chunk else
                            Box(tuple(here.min(axis=0).tolist()),
                                tuple((here.max(axis=0) + 1).tolist()))))
        return out
    mask = reach.mask
    for idx, box in grid:
        if by_chunk:
            if mask[box.slices].any():
                out.append((idx, box))
        else:
            b = bbox(mask, box)
            if b is not None:
                out.append((idx, b))
    return out


def few(cells: Frontier) -> list[list[int]] | None:
    """The coordinates of ``cells`` when there are at most :data:`LIST_CELLS`."""
    return to_coords(cells.lin, cells.shape).tolist() if 0 < cells.n <= LIST_CELLS else None
