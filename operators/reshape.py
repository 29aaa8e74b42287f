"""Reshape in C order: :class:`Reshape`.

Output cell with C-order linear index ``k`` is input cell ``k``: the mapping functions are a
reshape of the frontier and tracing pairs each output cell with the same linear index in
the input. An output chunk needs the bounding box of its cells in the input
(:func:`operators.geometry.bbox_of_box_in`).

>>> import numpy as np
>>> op = Reshape((3, -1)).bind("r", [(2, 6)], ["f8"])
>>> op.out_shape
(3, 4)
>>> op.input_box(Box((0, 0), (1, 4)), 0)        # output row 0 is input cells 0..3
Box(lo=(0, 0), hi=(1, 4))
>>> op.input_box(Box((1, 0), (2, 4)), 0)        # row 1 is cells 4..7: it wraps a row
Box(lo=(0, 0), hi=(2, 6))
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import MappingOperator
from operators.geometry import bbox_of_box_in
from operators.parse import parse_shape_param, who
from subzero.cells import Box, Ragged
from subzero.errors import ShapeError
from subzero.operator import BLOCKWISE
from subzero.runtime import TaskContext

Shape = tuple[int, ...]


# ---------------------------------------------------------------------------------------
# kernels (pure numpy)
# ---------------------------------------------------------------------------------------


def reshape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``np.reshape(x, shape)`` in C order."""
    return np.reshape(np.asarray(x), tuple(shape), order="C")


def gather_linear(block: np.ndarray, block_lo: Sequence[int], shape: Sequence[int],
                  linear: np.ndarray) -> np.ndarray:
    """The cells with C-order ``linear`` indices in an array of ``shape``, read from
    ``block`` (which holds the cells of that array from ``block_lo`` on)."""
    block = np.asarray(block)
    if not len(shape):
        return block.reshape(-1)[np.zeros(len(linear), dtype=np.intp)]
    coords = np.unravel_index(np.asarray(linear, dtype=np.intp), tuple(shape))
    local = tuple(c - lo for c, lo in zip(coords, block_lo))
    return block[local]


# ---------------------------------------------------------------------------------------
# operator
# ---------------------------------------------------------------------------------------


class Reshape(MappingOperator):
    """Reshape to ``shape`` in C order (one entry may be ``-1``: inferred).

    >>> Reshape((2, 3)).bind("r", [(6,)], ["i8"]).kernel(np.arange(6)).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """

    n_inputs = 1
    # any chunking of the output: input_box() gives the bounding block of a chunk's cells
    parallelism = BLOCKWISE

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = parse_shape_param(shape, "Reshape")

    def params(self) -> dict[str, Any]:
        return {"shape": list(self.shape)}

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        src = tuple(in_shapes[0])
        size = int(np.prod(src, dtype=np.int64))
        known = int(np.prod([s for s in self.shape if s != -1], dtype=np.int64))
        if -1 in self.shape:
            if known == 0 or size % known:
                raise ShapeError(
                    f"{who(self)}: cannot reshape {src} (size {size}) to {self.shape}"
                )
            return tuple(size // known if s == -1 else s for s in self.shape)
        if known != size:
            raise ShapeError(f"{who(self)}: cannot reshape {src} (size {size}) to {self.shape}")
        return self.shape

    def input_box(self, out_box: Box, i: int) -> Box:
        return bbox_of_box_in(out_box, self.out_shape, self.in_shapes[0])

    def kernel(self, x: np.ndarray) -> np.ndarray:
        """The whole-array kernel."""
        return reshape(x, self.out_shape)

    def compute(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        ch = ctx.chunk
        if ch.out_box == Box.full(self.out_shape):
            return reshape(x, self.out_shape)
        lin = ch.out_box.linear(self.out_shape)
        return gather_linear(x, ch.in_boxes[0].lo, self.in_shapes[0], lin).reshape(
            ch.out_box.shape)

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        return np.array(frontier_out, dtype=bool, order="C").reshape(self.in_shapes[0])

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        return np.array(frontier_in, dtype=bool, order="C").reshape(self.out_shape)

    def all_to_all(self, i: int) -> bool:
        return True

    def trace(self, ctx: TaskContext) -> None:
        lin = ctx.chunk.out_box.linear(self.out_shape)
        ctx.lwrite_pairs(Ragged.from_singletons(lin), Ragged.from_singletons(lin))
