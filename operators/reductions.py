"""Reductions (sum, mean, min, max, ...) over all axes or some, with the reduced axes kept
(size 1), dropped, or broadcast back to the input's shape: :class:`Reduce`, and
:class:`MeanBroadcast` (the global mean broadcast to the input's shape).

An output cell depends on the input cells that share its coordinates on the kept axes
(every cell for a global reduction), so

- the mapping functions are an ``any`` over the reduced axes followed by a broadcast;
- a global reduction runs as one task (:data:`~operators.base.GLOBAL`) and traces one
  region pair; a per-axis one splits over the kept axes, each chunk reading whole lines
  along the reduced axes (:meth:`Reduce.input_box`), and traces one pair per line;
- ``all_to_all`` holds (the whole output depends on the whole input and back).

Examples: the astronomy ``meanoverscan`` is ``Reduce("mean")`` (1x1 -> 1x1), ``bgmean`` is
``MeanBroadcast()`` (global mean filling the image's shape), the genomics ``cumodds`` is
``Reduce("sum", axis=1)`` (one sum per patient row, shape ``(patients, 1)``).

>>> import numpy as np
>>> reduce(np.array([[1.0, 3.0], [5.0, 7.0]]), "mean", (1,)).tolist()
[[2.0], [6.0]]
>>> MeanBroadcast().bind("bg", [(1, 2)], ["f8"]).kernel(np.array([[1.0, 3.0]]))
array([[2., 2.]])
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from operators.base import MappingOperator
from operators.geometry import axis_strides, outer_linear
from operators.parse import dtype_spec, parse_axes, parse_dtype, who
from operators.partials import combine_sums, sum_partial
from subzero.cells import Box, Ragged, any_over, size_of
from subzero.errors import WorkflowError
from subzero.operator import BLOCKWISE, GLOBAL, Parallelism
from subzero.runtime import TaskContext

Shape = tuple[int, ...]

#: Reduction names and their numpy functions (all take ``axis`` and ``keepdims``).
REDUCERS: dict[str, Callable[..., Any]] = {
    name: getattr(np, name) for name in (
        "sum", "mean", "min", "max", "prod", "std", "var", "median", "any", "all", "ptp",
        "count_nonzero", "nansum", "nanmean", "nanmin", "nanmax", "nanprod", "nanstd",
        "nanvar", "nanmedian",
    )
}
# those that accumulate in a requested dtype; the others are cast afterwards
_TAKES_DTYPE = {"sum", "mean", "prod", "std", "var", "nansum", "nanmean", "nanprod", "nanstd",
                "nanvar"}


# ---------------------------------------------------------------------------------------
# kernel (pure numpy)
# ---------------------------------------------------------------------------------------


def reduce(x: np.ndarray, func: str, axes: Sequence[int] | None = None, keepdims: bool = True,
           dtype: Any = None) -> np.ndarray:
    """Reduce ``x`` with ``func`` (a key of :data:`REDUCERS`) over ``axes`` (``None``: all).
    ``dtype`` is the accumulator and result dtype (``np.sum(dtype=...)``).

    A reduction over some axes is computed line by line: the reduced axes are moved last
    and flattened into one contiguous line per kept position, then reduced along it. numpy's
    own multi-axis reduction sums in an order that depends on the array's extent, so a
    chunk would round differently from the whole array; this way every chunking gives the
    same bits (``np.sum(x, axis=1)`` on a C-order 2-d array is already such a line).
    """
    fn = REDUCERS[func]
    x = np.asarray(x)
    nd = x.ndim
    axes = tuple(range(nd)) if axes is None else tuple(sorted(int(a) for a in axes))
    kw = {"dtype": dtype} if dtype is not None and func in _TAKES_DTYPE else {}
    if len(axes) == nd:
        out = np.asarray(fn(x, axis=None, keepdims=keepdims, **kw))
    else:
        kept = [d for d in range(nd) if d not in axes]
        kept_shape = tuple(x.shape[d] for d in kept)
        line = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
        lines = np.transpose(x, kept + list(axes)).reshape(kept_shape + (line,))
        out = np.asarray(fn(lines, axis=-1, **kw))
        if keepdims:
            out = np.expand_dims(out, axes)
    return out if dtype is None or out.dtype == dtype else out.astype(dtype)


def parse_reducer(func: Any, what: str) -> str:
    if func not in REDUCERS:
        raise WorkflowError(
            f"{what}: unknown reduction {func!r}; expected one of {', '.join(sorted(REDUCERS))}"
        )
    return str(func)


# ---------------------------------------------------------------------------------------
# operators
# ---------------------------------------------------------------------------------------


def _check_rows(name: str, boxes: Sequence[Box], rows: int) -> None:
    """Raise unless ``boxes`` (chunks of whole rows) cover rows ``0..rows-1`` once each: a
    missing or repeated chunk's partial would make a wrong minimum or sum, silently.

    >>> _check_rows("m", [Box((2, 0), (4, 3)), Box((0, 0), (2, 3))], 4)
    >>> _check_rows("m", [Box((0, 0), (2, 3)), Box((0, 0), (2, 3))], 4)
    Traceback (most recent call last):
    ...
    ValueError: global operator 'm': partials of rows 0..1 and 0..1 overlap; expected ...
    """
    at = 0
    spans = sorted((b.lo[0], b.hi[0]) for b in boxes)
    for k, (lo, hi) in enumerate(spans):
        if lo < at:
            a, b = spans[k - 1]
            raise ValueError(f"global operator {name!r}: partials of rows {a}..{b - 1} and "
                             f"{lo}..{hi - 1} overlap; expected each row of 0..{rows - 1} once")
        if lo > at:
            break
        at = hi
    if at < rows:
        raise ValueError(f"global operator {name!r}: no partial for row {at} of its input; "
                         f"expected each row of 0..{rows - 1} once")


class Reduce(MappingOperator):
    """Reduce over ``axis`` (``None``: all axes; an int; a tuple).

    Parameters
    ----------
    func : ``"sum"``, ``"mean"``, ``"min"``, ``"max"``, ``"prod"``, ``"std"``, ``"var"``,
        ``"median"``, ``"any"``, ``"all"``, ``"ptp"``, ``"count_nonzero"`` or a ``nan*``
        variant.
    axis : axes to reduce.
    keepdims : keep the reduced axes with size 1 (default, like a 1x1 result for a global
        reduction of an image), or drop them (``False``; a global reduction is then 0-d).
    broadcast : fill the input's shape with the reduced values (``bgmean``).
    dtype : accumulator and output dtype (``"float64"``); default: numpy's choice.

    >>> Reduce("sum", axis=1).bind("s", [(4, 3)], ["f8"]).out_shape
    (4, 1)
    >>> Reduce("max", axis=0, keepdims=False).bind("m", [(4, 3)], ["f8"]).out_shape
    (3,)
    """

    n_inputs = 1

    def __init__(self, func: str, axis: int | Sequence[int] | None = None,
                 keepdims: bool = True, broadcast: bool = False, dtype: Any = None) -> None:
        self.func = parse_reducer(func, type(self).__name__)
        if axis is not None and not np.isscalar(axis):
            axis = tuple(axis)
        self.axis = axis
        self.keepdims = bool(keepdims)
        self.broadcast = bool(broadcast)
        if self.broadcast and not self.keepdims:
            raise WorkflowError(
                f"{type(self).__name__}: broadcast=True keeps the input's shape; it cannot be "
                "combined with keepdims=False"
            )
        self.dtype = None if dtype is None else dtype_spec(parse_dtype(dtype, type(self).__name__))

    def params(self) -> dict[str, Any]:
        return {"func": self.func, "axis": list(self.axis) if isinstance(self.axis, tuple)
                else self.axis, "keepdims": self.keepdims, "broadcast": self.broadcast,
                "dtype": self.dtype}

    # -- planning --------------------------------------------------------------------------
    @property
    def parallelism(self) -> Parallelism:  # type: ignore[override]
        # a global reduction is computed once and written to every chunk by one task
        axes = getattr(self, "_axes", None)
        if axes is None:
            return GLOBAL if self.axis is None else BLOCKWISE
        return GLOBAL if len(axes) == len(self.in_shapes[0]) else BLOCKWISE

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        shape = tuple(in_shapes[0])
        self._axes = parse_axes(self.axis, len(shape), who(self))
        self._kept = tuple(d for d in range(len(shape)) if d not in self._axes)
        if self.broadcast:
            return shape
        if self.keepdims:
            return tuple(1 if d in self._axes else n for d, n in enumerate(shape))
        return tuple(shape[d] for d in self._kept)

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        dt = np.dtype(in_dtypes[0])
        sample = np.zeros((1,) * max(1, len(self.in_shapes[0])), dt)
        try:
            with np.errstate(all="ignore"):
                return reduce(sample, self.func, None, True,
                              None if self.dtype is None else parse_dtype(self.dtype, "")).dtype
        except (TypeError, ValueError):
            raise WorkflowError(f"{who(self)}: cannot compute {self.func!r} of {dt}") from None

    def input_box(self, out_box: Box, i: int) -> Box:
        shape = self.in_shapes[0]
        if self.parallelism is GLOBAL:
            return Box.full(shape)
        lo, hi = [0] * len(shape), list(shape)
        for d in self._kept:
            k = self._out_axis(d)
            lo[d], hi[d] = out_box.lo[k], out_box.hi[k]
        return Box(tuple(lo), tuple(hi))

    def _out_axis(self, d: int) -> int:
        """The output axis showing kept input axis ``d``."""
        return d if (self.keepdims or self.broadcast) else self._kept.index(d)

    # -- execution -------------------------------------------------------------------------
    def kernel(self, x: np.ndarray) -> np.ndarray:
        """The whole-array kernel."""
        r = reduce(x, self.func, self._axes, self.keepdims,
                   None if self.dtype is None else self.out_dtype)
        return np.broadcast_to(r, x.shape).copy() if self.broadcast else r

    def compute(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        # the block holds whole lines along the reduced axes for the chunk's kept range, so
        # the reduced block is the chunk (size 1 on reduced axes: broadcast to the chunk)
        r = reduce(x, self.func, self._axes, self.keepdims,
                   None if self.dtype is None else self.out_dtype)
        # broadcast: a read-only view, which the writer copies a chunk at a time, so a
        # global mean of a large array never fills a whole array of fresh memory first
        return np.broadcast_to(r, ctx.chunk.out_box.shape) if self.broadcast else r

    # -- a global reduction from its input's chunks ----------------------------------------
    def _combining(self) -> str | None:
        """How partials combine to the bits of the whole-array reduction: ``"tree"`` (a
        float64 sum or mean: numpy's pairwise summation tree, :mod:`operators.partials`),
        ``"any-order"`` (min, max, any, all; integer sums, exact in any order), or None."""
        dt, func = self.in_dtypes[0], self.func
        if func in ("min", "max", "any", "all") and dt.kind in "biuf":
            return "any-order"
        acc = np.dtype(self.dtype) if self.dtype is not None else None
        if func == "sum" and dt.kind in "biu" and (acc is None or acc.kind in "iu"):
            return "any-order"
        f8 = np.dtype(np.float64)
        if func in ("sum", "mean") and dt == f8 and acc in (None, f8):
            return "tree"
        return None

    def combines(self, in_chunks: Shape) -> bool:
        """A global sum, mean, min, max, any or all (see :meth:`_combining` for the dtypes)
        of an input chunked in whole rows (a contiguous range of its values each)."""
        shape = self.in_shapes[0]
        return (self.parallelism is GLOBAL and len(shape) > 0 and all(n > 0 for n in shape)
                and tuple(in_chunks[1:]) == tuple(shape[1:])
                and self._combining() is not None)

    def partial(self, block: np.ndarray, box: Box) -> Any:
        if self._combining() == "tree":
            row = int(np.prod(self.in_shapes[0][1:], dtype=np.int64))
            values = np.ascontiguousarray(block, dtype=np.float64).reshape(-1)
            return sum_partial(values, box.lo[0] * row, int(np.prod(self.in_shapes[0])))
        return reduce(block, self.func, None, False, self.dtype)

    def combine(self, parts: Sequence[tuple[Box, Any]]) -> np.ndarray:
        """:func:`reduce` of the whole input, bit for bit, from the chunks' partials."""
        _check_rows(self.name, [b for b, _ in parts], self.in_shapes[0][0])
        if self._combining() == "tree":
            n = int(np.prod(self.in_shapes[0]))
            total = combine_sums([p for _, p in parts], n)
            value = np.asarray(total / n if self.func == "mean" else total)
        else:
            value = reduce(np.array([p for _, p in parts]), self.func, None, False, self.dtype)
        nd = len(self.in_shapes[0])
        value = value.reshape((1,) * nd if self.keepdims else ())
        return value.astype(self.out_dtype, copy=False)

    def run_combined(self, ctx: TaskContext, combined: Any) -> np.ndarray:
        if ctx.full:
            self.trace(ctx)
        return np.broadcast_to(combined, ctx.chunk.out_box.shape) if self.broadcast else combined

    # -- lineage ---------------------------------------------------------------------------
    def _kept_mask_from_out(self, frontier_out: np.ndarray) -> np.ndarray:
        """The output frontier as a mask over the kept axes (size 1 on reduced axes)."""
        if self.keepdims or self.broadcast:
            return any_over(frontier_out, self._axes)
        return np.expand_dims(frontier_out, self._axes)

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        k = self._kept_mask_from_out(frontier_out)
        return np.broadcast_to(k, self.in_shapes[0]).copy()

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        k = any_over(frontier_in, self._axes)
        if self.broadcast:
            return np.broadcast_to(k, self.out_shape).copy()
        return k.reshape(self.out_shape).copy()

    def all_to_all(self, i: int) -> bool:
        # an empty input feeds nothing: its (empty) whole would not reach the whole output
        return int(np.prod(self.in_shapes[0])) > 0 or int(np.prod(self.out_shape)) == 0

    def whole_input(self, i: int) -> bool:
        # one reduction of the whole input (all axes reduced, or the kept ones of size 1):
        # every output cell, the broadcast ones included, depends on every input cell
        if not self.in_shapes:
            return self.axis is None
        shape = self.in_shapes[0]
        return size_of(shape) > 0 and all(shape[d] == 1 for d in self._kept)

    def trace(self, ctx: TaskContext) -> None:
        box = ctx.chunk.out_box
        shape = self.in_shapes[0]
        if self.parallelism is GLOBAL:
            ctx.lwrite(box, Box.full(shape))
            return
        # one pair per line: the chunk's output cells sharing kept coordinates, and the
        # input cells with those kept coordinates (all of the reduced axes)
        out_grid = box.linear(self.out_shape).reshape(box.shape)
        if self.keepdims or self.broadcast:
            order = [*self._kept, *self._axes]
            n_groups = int(np.prod([box.shape[d] for d in self._kept]))
            out_grid = np.transpose(out_grid, order).reshape(n_groups, -1)
        else:
            out_grid = out_grid.reshape(-1, 1)
        st = axis_strides(shape)
        per_axis = [np.arange(box.lo[self._out_axis(d)], box.hi[self._out_axis(d)]) * st[d]
                    for d in self._kept]
        per_axis += [np.arange(shape[d]) * st[d] for d in self._axes]
        in_grid = outer_linear(per_axis).reshape(len(out_grid), -1)
        ctx.lwrite_pairs(Ragged.from_dense(out_grid), Ragged.from_dense(in_grid))


class MeanBroadcast(Reduce):
    """An array of the input's shape filled with the input's mean in float64 (over all axes
    by default: the global mean, one task; or over ``axis``).

    >>> MeanBroadcast().bind("bg", [(2001, 513)], ["f8"]).parallelism.kind
    'global'
    """

    def __init__(self, axis: int | Sequence[int] | None = None) -> None:
        super().__init__("mean", axis=axis, keepdims=True, broadcast=True, dtype="float64")

    def params(self) -> dict[str, Any]:
        return {} if self.axis is None else {"axis": Reduce.params(self)["axis"]}
