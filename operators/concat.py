"""Concatenation of ``n`` arrays along an axis: :class:`Concatenate`.

Input ``i`` fills the segment ``[offset_i, offset_i + n_i)`` of the output along the axis.
Each output cell comes from exactly one cell of exactly one input, so the mapping functions
cut or place the frontier's segment, and an output chunk reads from each input only the part
of its segment it overlaps (possibly nothing).

``all_to_all(i)`` is False as soon as another input contributes cells: the whole of input
``i`` maps forward to its segment only, not the whole output (the paper's section VI-C
example of where the entire-array optimization must not apply).

>>> import numpy as np
>>> concatenate([np.array([[1, 2]]), np.array([[3, 4], [5, 6]])], 0).tolist()
[[1, 2], [3, 4], [5, 6]]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import MappingOperator
from operators.parse import STRING_DTYPE, is_text, parse_axis, who
from subzero.cells import Box, Ragged
from subzero.errors import ShapeError, WorkflowError
from subzero.operator import BLOCKWISE
from subzero.runtime import TaskContext

Shape = tuple[int, ...]


# ---------------------------------------------------------------------------------------
# kernel (pure numpy)
# ---------------------------------------------------------------------------------------


def concatenate(blocks: Sequence[np.ndarray], axis: int, dtype: Any = None) -> np.ndarray:
    """``np.concatenate`` of the blocks along ``axis``, cast to ``dtype`` first when given
    (so fixed-width and variable-length strings mix)."""
    if dtype is not None:
        blocks = [np.asarray(b).astype(dtype, copy=False) for b in blocks]
    return np.concatenate(list(blocks), axis=axis)


# ---------------------------------------------------------------------------------------
# operator
# ---------------------------------------------------------------------------------------


class Concatenate(MappingOperator):
    """Join any number of inputs along ``axis`` (negative counts from the end). The inputs
    must have the same rank and the same sizes on the other axes.

    >>> op = Concatenate(axis=1).bind("c", [(2, 3), (2, 1)], ["f8", "f8"])
    >>> op.out_shape, op.all_to_all(0)
    ((2, 4), False)
    """

    n_inputs = None
    # any chunking: input_box() gives each input's overlap with a chunk
    parallelism = BLOCKWISE

    def __init__(self, axis: int = 0) -> None:
        if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
            raise WorkflowError(f"Concatenate: axis must be an int. Got {axis!r}.")
        self.axis = int(axis)

    def params(self) -> dict[str, Any]:
        return {"axis": self.axis}

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        if not in_shapes:
            raise ShapeError(f"{who(self)}: needs at least one input")
        nd = len(in_shapes[0])
        if nd == 0:
            raise ShapeError(f"{who(self)}: cannot concatenate 0-d arrays")
        ax = parse_axis(self.axis, nd, who(self))
        first = tuple(in_shapes[0])
        for s in in_shapes[1:]:
            s = tuple(s)
            if len(s) != nd or s[:ax] + s[ax + 1:] != first[:ax] + first[ax + 1:]:
                raise ShapeError(
                    f"{who(self)}: input shapes {', '.join(str(tuple(x)) for x in in_shapes)} "
                    f"differ on an axis other than {ax}"
                )
        self._ax = ax
        self._offsets = tuple(int(v) for v in np.cumsum([0] + [s[ax] for s in in_shapes]))
        return first[:ax] + (self._offsets[-1],) + first[ax + 1:]

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        text = [is_text(d) for d in in_dtypes]
        if any(text) and not all(text):
            raise WorkflowError(
                f"{who(self)}: cannot concatenate strings with numbers "
                f"({', '.join(str(d) for d in in_dtypes)})"
            )
        if all(text) and not all(np.dtype(d).kind == "U" for d in in_dtypes):
            return STRING_DTYPE
        return np.result_type(*in_dtypes)

    def _segment(self, i: int) -> tuple[slice, ...]:
        """Where input ``i`` lies in the output."""
        sl = [slice(None)] * len(self.out_shape)
        sl[self._ax] = slice(self._offsets[i], self._offsets[i + 1])
        return tuple(sl)

    def input_box(self, out_box: Box, i: int) -> Box:
        ax, a, b = self._ax, self._offsets[i], self._offsets[i + 1]
        lo_ax = min(max(out_box.lo[ax], a), b) - a
        hi_ax = max(min(out_box.hi[ax], b) - a, lo_ax)
        lo = out_box.lo[:ax] + (lo_ax,) + out_box.lo[ax + 1:]
        hi = out_box.hi[:ax] + (hi_ax,) + out_box.hi[ax + 1:]
        return Box(lo, hi)

    def kernel(self, *xs: np.ndarray) -> np.ndarray:
        """The whole-array kernel."""
        return concatenate(xs, self._ax, self.out_dtype)

    def compute(self, ctx: TaskContext, *blocks: np.ndarray) -> np.ndarray:
        # each block is its input's overlap with the chunk (maybe empty), in output order
        return concatenate(blocks, self._ax, self.out_dtype)

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        return frontier_out[self._segment(i)].copy()

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        out = np.zeros(self.out_shape, dtype=bool)
        out[self._segment(i)] = frontier_in
        return out

    def all_to_all(self, i: int) -> bool:
        return all(s[self._ax] == 0 for j, s in enumerate(self.in_shapes) if j != i)

    def trace(self, ctx: TaskContext) -> None:
        box = ctx.chunk.out_box
        n = len(self.in_shapes)
        for i, shape in enumerate(self.in_shapes):
            part = self.input_box(box, i)
            if part.is_empty():
                continue
            shift = [0] * len(shape)
            shift[self._ax] = self._offsets[i]
            out_part = Box(tuple(l + s for l, s in zip(part.lo, shift)),
                           tuple(h + s for h, s in zip(part.hi, shift)))
            ins: list[Any] = [None] * n
            ins[i] = Ragged.from_singletons(part.linear(shape))
            ctx.lwrite_pairs(Ragged.from_singletons(out_part.linear(self.out_shape)), *ins)
