"""Box selections and axis permutations: :class:`Subarray` and :class:`Transpose`.

Both map output cell ``c`` to exactly one input cell: on input axis ``d``,
``start[d] + step[d] * c[k]`` where output axis ``k`` shows input axis ``d``
(``axes[k] == d``). So the mapping functions are a strided slice plus a transpose of the
frontier, an output chunk needs exactly the input block its cells come from
(:meth:`Subarray.input_box`), and tracing reports one-to-one pairs. Strings work like any
other dtype (the kernels only index).

>>> import numpy as np
>>> x = np.arange(12).reshape(3, 4)
>>> subarray(x, parse_slices("0:1, 0:1", "example"), (0, 1)).tolist()
[[0]]
>>> subarray(x, parse_slices(":, 0", "example"), (1, 0)).tolist()   # column 0 as a row
[[0, 4, 8]]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import MappingOperator
from operators.geometry import axis_strides, outer_linear
from operators.parse import parse_permutation, parse_slices, slices_text, who
from subzero.cells import Box, Ragged, as_linear, to_coords, unique
from subzero.errors import ShapeError, WorkflowError
from subzero.operator import BLOCKWISE
from subzero.runtime import TaskContext

Shape = tuple[int, ...]


# ---------------------------------------------------------------------------------------
# kernels (pure numpy)
# ---------------------------------------------------------------------------------------


def subarray(x: np.ndarray, slices: Sequence[slice], axes: Sequence[int]) -> np.ndarray:
    """``x[slices]`` with its axes permuted by ``axes`` (``np.transpose`` order)."""
    return np.transpose(np.asarray(x)[tuple(slices)], tuple(axes))


def transpose(x: np.ndarray, axes: Sequence[int] | None = None) -> np.ndarray:
    """``np.transpose(x, axes)``."""
    return np.transpose(np.asarray(x), None if axes is None else tuple(axes))


# ---------------------------------------------------------------------------------------
# operators
# ---------------------------------------------------------------------------------------


class Subarray(MappingOperator):
    """A box of the input (step 1 or larger), optionally with its axes permuted.

    Parameters
    ----------
    slices : one slice per input axis, as text (``"0:1, 0:1"``, ``"0:56, 4:"``, ``":, 0"``;
        a single index keeps its axis with length 1), a :class:`~subzero.cells.Box`, or a
        sequence of ``slice`` objects / ``(start, stop[, step])`` tuples. Negative bounds
        count from the end, like numpy; bounds past the array are an error (not clipped).
        ``None`` selects everything.
    axes : permutation applied after slicing (``np.transpose`` order); default: keep.

    Examples
    --------
    The astronomy ``overscanimg`` is ``Subarray("0:1, 0:1")``; the genomics ``names`` (column
    0 of the feature table as a 1 x 56 row) is ``Subarray(":, 0", axes=(1, 0))`` and its
    ``subsample`` is ``Subarray("0:56, 4:")``.

    >>> op = Subarray("0:2, 1:").bind("s", [(2, 3)], ["i8"])
    >>> op.kernel(np.arange(6).reshape(2, 3)).tolist()
    [[1, 2], [4, 5]]
    """

    n_inputs = 1
    # any chunking of the output: input_box() gives the exact input block of a chunk
    parallelism = BLOCKWISE

    def __init__(self, slices: Any = None, axes: Sequence[int] | None = None) -> None:
        what = type(self).__name__
        self.slices = None if slices is None else parse_slices(slices, what)
        if axes is not None:
            try:
                axes = tuple(int(a) for a in axes)
            except (TypeError, ValueError):
                raise WorkflowError(f"{what}: axes must be a sequence of ints. Got {axes!r}.") \
                    from None
        self.axes = axes

    def params(self) -> dict[str, Any]:
        return {"slices": None if self.slices is None else slices_text(self.slices),
                "axes": None if self.axes is None else list(self.axes)}

    # -- geometry (set at bind) ------------------------------------------------------------
    def _permutation(self, ndim: int) -> tuple[int, ...]:
        return tuple(range(ndim)) if self.axes is None else \
            parse_permutation(self.axes, ndim, who(self))

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        shape = tuple(in_shapes[0])
        nd = len(shape)
        sl = self.slices if self.slices is not None else (slice(None),) * nd
        if len(sl) != nd:
            raise ShapeError(
                f"{who(self)}: {len(sl)} slice(s) {slices_text(sl)!r} for a {nd}-d input "
                f"of shape {shape}"
            )
        start, step, count = [], [], []
        for d, (s, n) in enumerate(zip(sl, shape)):
            bad_start = s.start is not None and not (-n <= s.start < n)
            bad_stop = s.stop is not None and not (-n <= s.stop <= n)
            if bad_start or bad_stop:
                raise ShapeError(
                    f"{who(self)}: slice {slices_text([s])!r} on axis {d} is outside 0:{n} "
                    f"(input shape {shape})"
                )
            a, b, st = s.indices(n)
            cnt = len(range(a, b, st))
            if cnt == 0:
                raise ShapeError(
                    f"{who(self)}: slice {slices_text([s])!r} on axis {d} selects no cells "
                    f"(input shape {shape})"
                )
            start.append(a)
            step.append(st)
            count.append(cnt)
        self._perm = self._permutation(nd)
        self._inv = tuple(int(v) for v in np.argsort(self._perm))
        self._start, self._step, self._count = tuple(start), tuple(step), tuple(count)
        return tuple(count[d] for d in self._perm)

    def _selection(self) -> tuple[slice, ...]:
        """The slices of the input that the output shows (normalized, in range)."""
        return tuple(slice(a, a + s * (c - 1) + 1, s)
                     for a, s, c in zip(self._start, self._step, self._count))

    def input_box(self, out_box: Box, i: int) -> Box:
        nd = len(self.in_shapes[0])
        lo, hi = [0] * nd, [0] * nd
        for k, d in enumerate(self._perm):
            lo[d] = self._start[d] + self._step[d] * out_box.lo[k]
            hi[d] = (self._start[d] + self._step[d] * (out_box.hi[k] - 1) + 1
                     if out_box.hi[k] > out_box.lo[k] else lo[d])
        return Box(tuple(lo), tuple(hi))

    # -- execution -------------------------------------------------------------------------
    def kernel(self, x: np.ndarray) -> np.ndarray:
        """The whole-array kernel (what a single task computes)."""
        return subarray(x, self._selection(), self._perm)

    def compute(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        # the block starts at the first selected cell of the chunk: keep every step-th cell.
        # C order, not a view: zarr 3.1 stores an F-ordered string chunk scrambled
        # (zarr-python issue 3558), and a transpose view is F-ordered.
        return np.ascontiguousarray(
            subarray(x, tuple(slice(0, None, s) for s in self._step), self._perm))

    # -- lineage ---------------------------------------------------------------------------
    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        out = np.zeros(self.in_shapes[0], dtype=bool)
        out[self._selection()] = np.transpose(frontier_out, self._inv)
        return out

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        return np.transpose(frontier_in[self._selection()], self._perm).copy(order="C")

    def map_b_lin(self, out_lin: np.ndarray, i: int) -> np.ndarray:
        c = to_coords(out_lin, self.out_shape)[:, self._inv]  # output axes -> input axes
        c = np.asarray(self._start) + np.asarray(self._step) * c
        return unique(as_linear(c, self.in_shapes[0]))

    def map_f_lin(self, in_lin: np.ndarray, i: int) -> np.ndarray:
        c = to_coords(in_lin, self.in_shapes[0]) - np.asarray(self._start)
        step, count = np.asarray(self._step), np.asarray(self._count)
        k = c // step  # the output coordinate, where the input cell is selected
        keep = ((k * step == c) & (k >= 0) & (k < count)).all(axis=1)
        c = k[keep][:, self._perm]  # input axes -> output axes
        return unique(as_linear(c, self.out_shape))

    def all_to_all(self, i: int) -> bool:
        return self._count == tuple(self.in_shapes[0])

    def trace(self, ctx: TaskContext) -> None:
        box = ctx.chunk.out_box
        out_lin = box.linear(self.out_shape)
        st = axis_strides(self.in_shapes[0])
        # input linear index of each output cell, built axis by axis in the output's order
        per_axis = [(self._start[d] + self._step[d] * np.arange(box.lo[k], box.hi[k]))
                    * st[d] for k, d in enumerate(self._perm)]
        in_lin = outer_linear(per_axis) if box.ndim else np.zeros(1, dtype=np.uint64)
        ctx.lwrite_pairs(Ragged.from_singletons(out_lin), Ragged.from_singletons(in_lin))


class Transpose(Subarray):
    """Permute the axes (``np.transpose``): ``axes=None`` reverses them (``x.T``).

    >>> Transpose().bind("t", [(2, 3)], ["f8"]).out_shape
    (3, 2)
    >>> Transpose((1, 2, 0)).bind("t", [(2, 3, 4)], ["f8"]).out_shape
    (3, 4, 2)
    """

    def __init__(self, axes: Sequence[int] | None = None) -> None:
        super().__init__(None, axes)

    def params(self) -> dict[str, Any]:
        return {"axes": None if self.axes is None else list(self.axes)}

    def _permutation(self, ndim: int) -> tuple[int, ...]:
        return parse_permutation(self.axes, ndim, who(self))
