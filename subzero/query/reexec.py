"""Black-box lineage: re-executing an operator in tracing mode on the tiles a frontier
touches, and joining the traced pairs with the frontier inside the tasks (paper VI-C).

The tile rule lives here, once: a query re-executes tiles of the run's chunks, each chunk
halved along its longest axis until a tile holds at most ``tile_cells`` cells
(:func:`tile_shape`); backward, the tiles holding a frontier cell; forward, the tiles
whose input window (halo included) holds one; more than :data:`MAX_TILES` tiles, the
run's own chunks instead (fewer, larger tasks). A global operator re-runs whole. The
optimizer's cost model estimates the same tiles for a query of ``n`` scattered cells
(:func:`expected_tiles`), and its statistics pass samples tiles of the same shape.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial
from typing import Any, Sequence

import numpy as np

from subzero.cells import Box, size_of, to_coords, unique
from subzero.chunking import chunk_grid
from subzero.engine.reexec import reexecute
from subzero.engine.runs import LoadedRun
from subzero.frontier import Frontier
from subzero.lineage import PairBatch, as_pairs
from subzero.operator import Operator
from subzero.runtime import ChunkContext

TILE_CELLS = 1 << 16  # output cells per re-executed tile, at most
MAX_TILES = 64  # more tiles than this: re-execute the run's own chunks instead


def tile_shape(chunk: Sequence[int], cells: int = TILE_CELLS) -> tuple[int, ...]:
    """``chunk`` halved along its longest axis until it holds at most ``cells`` cells.

    >>> tile_shape((1001, 513)), tile_shape((10, 10))
    ((251, 257), (10, 10))
    """
    return _tile_shape(tuple(int(c) for c in chunk), int(cells))


@lru_cache(maxsize=256)  # a query asks it at each step: a few chunk shapes per run
def _tile_shape(chunk: tuple[int, ...], cells: int) -> tuple[int, ...]:
    tile = list(chunk)
    while int(np.prod(tile)) > cells:
        ax = int(np.argmax(tile))
        if tile[ax] == 1:
            break
        tile[ax] = (tile[ax] + 1) // 2
    return tuple(tile)


def touched_boxes(mask: np.ndarray, tile: Sequence[int]) -> list[Box]:
    """The boxes of the ``tile``-shaped grid over ``mask`` that hold a True cell, C order
    (as :func:`subzero.chunking.chunk_grid` lists them); an or-reduction per axis.

    >>> m = np.zeros((5, 6), dtype=bool); m[4, 1] = True
    >>> touched_boxes(m, (2, 4))
    [Box(lo=(4, 0), hi=(5, 4))]
    """
    if mask.ndim == 0:
        return [Box((), ())] if bool(mask) else []
    shape, tile = mask.shape, tuple(int(t) for t in tile)
    grid = mask
    for ax, t in enumerate(tile):
        grid = _any_per_block(grid, ax, t)
    return _tile_boxes(np.argwhere(grid), shape, tile)


def touched_boxes_lin(lin: np.ndarray, shape: Sequence[int], tile: Sequence[int]
                      ) -> list[Box]:
    """:func:`touched_boxes` of a few cells given as linear indices (no mask).

    >>> touched_boxes_lin(np.array([25], np.uint64), (5, 6), (2, 4))
    [Box(lo=(4, 0), hi=(5, 4))]
    """
    shape, tile = tuple(int(s) for s in shape), tuple(int(t) for t in tile)
    if not shape:
        return [Box((), ())] if len(lin) else []
    grid = tuple(-(-n // t) for n, t in zip(shape, tile))
    at = to_coords(lin, shape) // np.asarray(tile, dtype=np.int64)
    # one key per tile (1-d: np.unique over rows sorts them as structured values, slowly)
    keys = np.unique(np.ravel_multi_index(tuple(at.T), grid))
    return _tile_boxes(np.stack(np.unravel_index(keys, grid), axis=1), shape, tile)


def _tile_boxes(idx: np.ndarray, shape: Sequence[int], tile: Sequence[int]) -> list[Box]:
    """The boxes of the ``tile`` grid over ``shape`` at grid indices ``idx`` (rows)."""
    return [Box(tuple(k * t for k, t in zip(i, tile)),
                tuple(min(n, (k + 1) * t) for k, t, n in zip(i, tile, shape)))
            for i in np.asarray(idx, dtype=np.int64).tolist()]


def _any_per_block(a: np.ndarray, ax: int, t: int) -> np.ndarray:
    """``a`` or-reduced over consecutive blocks of ``t`` along axis ``ax`` (the last block
    may be shorter); reshapes, so a C-contiguous mask is read once, vectorized."""
    n = a.shape[ax]
    k = n // t
    parts = []
    idx: list[slice] = [slice(None)] * a.ndim
    if k:
        idx[ax] = slice(0, k * t)
        head = a[tuple(idx)]
        parts.append(head.reshape(a.shape[:ax] + (k, t) + a.shape[ax + 1:]).any(axis=ax + 1))
    if k * t < n:
        idx[ax] = slice(k * t, n)
        parts.append(a[tuple(idx)].any(axis=ax, keepdims=True))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=ax)


def chunks_touched(op: Operator, chunks: Sequence[int], i: int, backward: bool,
                   mask: np.ndarray) -> list[Box]:
    """The run's own chunks of ``op``'s output that the frontier ``mask`` touches."""
    out = []
    for _, box in chunk_grid(op.out_shape, chunks):
        sub = mask[box.slices] if backward else mask[op.input_box(box, i).slices]
        if sub.any():
            out.append(box)
    return out


def tiles_touched(op: Operator, chunks: Sequence[int], i: int, backward: bool,
                  mask: Any, tile_cells: int = TILE_CELLS) -> tuple[list[Box], int]:
    """The output tiles to re-execute for the frontier ``mask`` (a bool mask or a
    :class:`~subzero.frontier.Frontier`; of the output backward, of input ``i`` forward),
    and how many output cells they hold."""
    if op.parallelism.kind == "global":
        return [Box.full(op.out_shape)], size_of(op.out_shape)
    tile = tile_shape(chunks, tile_cells)
    if backward and isinstance(mask, Frontier) and mask.sparse:  # its few cells' tiles
        tiles = touched_boxes_lin(mask.lin, op.out_shape, tile)
    elif backward:  # one pass over the frontier: which tiles hold a frontier cell
        tiles = touched_boxes(Frontier.of(mask).mask, tile)
    else:  # a tile's input window (halo included) must hold one
        m = Frontier.of(mask).mask
        tiles = [box for _, box in chunk_grid(op.out_shape, tile)
                 if m[op.input_box(box, i).slices].any()]
    if len(tiles) > MAX_TILES:
        tiles = chunks_touched(op, chunks, i, backward, Frontier.of(mask).mask)
    return tiles, int(sum(b.size for b in tiles))


def expected_tiles(out_shape: Sequence[int], chunks: Sequence[int], n_chunks: int,
                   global_: bool, n: float, tile_cells: int = TILE_CELLS) -> tuple[int, int]:
    """How many tiles (and output cells) :func:`tiles_touched` re-executes, expected, for
    ``n`` frontier cells scattered at random (each tile is missed with probability
    ``(1 - 1/tiles) ** n``).

    >>> expected_tiles((1024, 1024), (512, 1024), 2, False, 1)
    (1, 65536)
    """
    size = size_of(out_shape)
    if global_:
        return 1, size
    tile = tile_shape(chunks, tile_cells)
    total = math.prod(math.ceil(s / t) for s, t in zip(out_shape, tile))
    touched = total * -math.expm1(n * math.log1p(-1.0 / total)) if total > 1 else 1.0
    touched = max(1.0, min(total, touched))
    cells = touched * size_of(tile)
    if touched > MAX_TILES:  # whole chunks then
        k = max(1, n_chunks)
        touched = k * -math.expm1(n * math.log1p(-1.0 / k)) if k > 1 else 1
        cells = touched * size / k
    return max(1, round(touched)), int(min(size, cells))


# ---------------------------------------------------------------------------------------
# in-task joins (module level: shipped to Spark by reference)
# ---------------------------------------------------------------------------------------


def _unpack(packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.unpackbits(packed, count=size_of(shape)).astype(bool)


def _join_backward(ch: ChunkContext, full: PairBatch | None, pay: PairBatch | None, *,
                   i: int, packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Input-``i`` cells of the traced pairs whose output cells meet the frontier."""
    full = as_pairs(full)
    if full is None or not len(full):
        return np.empty(0, dtype=np.uint64)
    rows = np.flatnonzero(full.out.any_in(_unpack(packed, shape)))
    return unique(full.ins[i].take(rows).values)


def _join_forward(ch: ChunkContext, full: PairBatch | None, pay: PairBatch | None, *,
                  i: int, packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Output cells of the traced pairs whose input-``i`` cells meet the frontier."""
    full = as_pairs(full)
    if full is None or not len(full):
        return np.empty(0, dtype=np.uint64)
    rows = np.flatnonzero(full.ins[i].any_in(_unpack(packed, shape)))
    return unique(full.out.take(rows).values)


def reexecute_join(run: LoadedRun, op: Operator, i: int, backward: bool, mask: np.ndarray,
                   tiles: Sequence[Box], where: str, spark: Any = None) -> np.ndarray:
    """Re-execute ``op`` on ``tiles`` in tracing mode and join inside each task: the
    lineage of the frontier ``mask`` through input ``i``, as a bool mask."""
    out_shape = op.in_shapes[i] if backward else op.out_shape
    res = np.zeros(out_shape, dtype=bool)
    if not tiles:
        return res
    join = _join_backward if backward else _join_forward
    reduce = partial(join, i=i, packed=np.packbits(mask.reshape(-1)), shape=mask.shape)
    results = reexecute(run, op.name, boxes=tiles, reduce=reduce, where=where, spark=spark)
    flat = res.reshape(-1)
    for r in results:
        flat[np.asarray(r["result"], dtype=np.intp)] = True
    return res
