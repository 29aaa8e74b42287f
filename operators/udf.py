"""Decorators that turn a plain numpy function into an operator with honest lineage.

Most analysis code has one of a few lineage shapes. Declare the shape once and SubZero
derives exact mapping functions from it, so the operator stores nothing and queries
answer in place:

================================  ======================================================
decorator                         an output cell depends on
================================  ======================================================
:func:`elementwise`               the same cell of every input (numpy broadcasting)
:func:`stencil` ``(radius)``      the box of ``radius`` around it in input 0 (and the
                                  same cell of any further input)
:func:`along` ``(axis)``,         the whole line through it along ``axis`` (a row or a
:func:`rows`, :func:`columns`     column of a 2-d image): axis reductions, broadcasts
:func:`whole_array`               every cell of every input (a global mean, a model fit)
:func:`blackbox`                  unknown: queries re-run it in the cells they touch
:func:`cells`                     what the function says, per chunk, in one vectorized
                                  call (data-dependent lineage)
================================  ======================================================

The function's positional parameters are the operator's inputs, numpy blocks in and a
numpy block out; its parameters with defaults are the operator's parameters, given as
keywords when the operator is made (and recorded in the run's manifest)::

    @udf.stencil(radius=lambda size: size // 2)
    def background(image, size=5):
        return ndimage.median_filter(image, size=size, mode="mirror")

    wf.add("bg", background(size=7), "image")

The decorator returns an operator *class*, named and located like the function (so a run
records it as ``module:name`` and rebuilds it from its code); the plain function stays
available as ``background.function``.

A data-dependent operator (:func:`cells`) also takes a keyword parameter ``lineage``, a
:class:`Lineage` recorder. Cells it says nothing about follow the ``default`` mapping; for
the others it records boxes or cell lists as arrays, all cells of the chunk in one call::

    @udf.cells(default="elementwise", halo=2)
    def clean(image, mask, *, lineage):
        out = image.copy()
        ys, xs = np.nonzero(mask)
        out[ys, xs] = ...                                  # the 5x5 median there
        lineage.around((ys, xs), radius=2)                 # those cells read their 5x5 box
        return out

Such an operator can store its lineage as full region pairs (``FULL``) or as small
payloads for the exceptions only (``COMP``, what the ``subzero`` strategy picks): the
payload names the box relative to the cell (or the box or cells themselves), and its
mapping functions expand it at query time.
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any, Callable, Sequence

import numpy as np

from operators.base import (
    AllToAllOperator, ElementwiseOperator, StencilOperator, UDF, box_neighbours,
    broadcast_map_b, broadcast_map_f,
)
from subzero.cells import Box, Ragged, box_cells, dilate, parse_shape, to_coords, unique
from subzero.errors import CellError, WorkflowError
from subzero.modes import Mode
from subzero.operator import BLOCKWISE, ELEMENTWISE, GLOBAL, Operator, Parallelism
from subzero.operator import stencil as halo_of
from subzero.runtime import TaskContext

Shape = tuple[int, ...]

__all__ = [
    "UDFError", "Lineage", "elementwise", "stencil", "along", "rows", "columns",
    "whole_array", "blackbox", "cells",
]


class UDFError(WorkflowError, ValueError):
    """A decorated function or its use that cannot work: a signature the decorator cannot
    call, a parameter it does not take, a radius that does not fit the array, lineage
    cells outside an input. A :class:`ValueError` in Python; one line and exit 2 on the
    command line."""


# ---------------------------------------------------------------------------------------
# signatures and parameters
# ---------------------------------------------------------------------------------------


class _Signature:
    """What a decorated function's signature says: how many inputs it takes (None: any
    number, through ``*args``), its parameters with their defaults, and whether it takes
    the ``lineage`` recorder."""

    def __init__(self, fn: Callable[..., Any], what: str, lineage: bool) -> None:
        if not callable(fn) or isinstance(fn, type):
            raise UDFError(f"{what} decorates a function; got {fn!r}")
        name = getattr(fn, "__qualname__", repr(fn))
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            raise UDFError(f"{what}: cannot read the signature of {name}") from None
        inputs, params, var = 0, {}, False
        has_lineage = False
        for p in sig.parameters.values():
            if p.name == "lineage":
                if p.kind not in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
                    raise UDFError(f"{what}: {name} takes 'lineage' positionally; make it "
                                   "a keyword parameter (after '*')")
                has_lineage = True
            elif p.kind is p.VAR_POSITIONAL:
                var = True
            elif p.kind is p.VAR_KEYWORD:
                raise UDFError(f"{what}: {name} takes **{p.name}; name its parameters, so "
                               "that a run can record them")
            elif p.default is p.empty:
                if p.kind is p.KEYWORD_ONLY:
                    raise UDFError(f"{what}: {name}'s keyword parameter {p.name!r} has no "
                                   "default; give it one (parameters are set when the "
                                   "operator is made)")
                if params:
                    raise UDFError(f"{what}: {name}'s input {p.name!r} comes after a "
                                   "parameter with a default; put the inputs first")
                inputs += 1
            else:
                params[p.name] = p.default
        if lineage and not has_lineage:
            raise UDFError(f"{what}: {name} must take a keyword parameter 'lineage' "
                           f"(def {fn.__name__}(..., *, lineage)), the recorder of its "
                           "data-dependent lineage")
        if not lineage and has_lineage:
            raise UDFError(f"{what}: {name} takes 'lineage', which only udf.cells "
                           "provides; use @udf.cells for data-dependent lineage")
        if inputs == 0 and not var:
            raise UDFError(f"{what}: {name} takes no input array; its positional "
                           "parameters are the operator's inputs")
        self.name = name
        self.inputs: int | None = None if var else inputs
        self.params = params


def _call(fn: Callable[..., Any], given: dict[str, Any]) -> Any:
    """``fn`` called with the parameters it names from ``given`` (a radius or shape rule
    such as ``lambda size: size // 2``)."""
    names = [p.name for p in inspect.signature(fn).parameters.values()]
    return fn(**{k: given[k] for k in names if k in given})


class _Decorated(Operator):
    """What every decorated operator shares: its function, its recorded parameters, and
    errors that name the operator."""

    kind = "udf"
    #: the decorated function, called with the input blocks and the parameters
    function: Callable[..., Any]
    _sig: _Signature
    _what: str = "udf"
    _dtype: Any = None

    def __init__(self, *args: Any, **params: Any) -> None:
        if args:
            raise UDFError(f"{self._sig.name}: give its parameters by name "
                           f"({', '.join(self._sig.params) or 'it has none'}); got "
                           f"{len(args)} positional argument(s)")
        unknown = sorted(set(params) - set(self._sig.params))
        if unknown:
            accepted = ", ".join(sorted(self._sig.params)) or "none"
            raise UDFError(f"{self._sig.name} takes no parameter {unknown[0]!r}; its "
                           f"parameters are: {accepted}")
        self.values = {**self._sig.params, **params}

    def params(self) -> dict[str, Any]:
        return dict(self.values)

    def who(self) -> str:
        return f"operator {self.name!r} ({self._sig.name})"

    def apply(self, *blocks: np.ndarray, **extra: Any) -> np.ndarray:
        """The function on the blocks, its result as an array."""
        return np.asarray(type(self).function(*blocks, **extra, **self.values))

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        if self._dtype is not None:
            return np.dtype(self._dtype)
        return _probe_dtype(self, in_dtypes)

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        return f"{self._sig.name}({ps})"


def _probe_dtype(op: _Decorated, in_dtypes: Sequence[np.dtype]) -> np.dtype:
    """The dtype the function returns on small blocks of ones of the inputs' dtypes and
    ranks (numpy's own promotion, a threshold's bool); numpy's promotion of the inputs
    when the function cannot run on them."""
    blocks = [np.ones((3,) * len(s), dtype=d) for s, d in zip(op.in_shapes, in_dtypes)]
    extra = {"lineage": Lineage.ignored()} if isinstance(op, _Cells) else {}
    try:
        with np.errstate(all="ignore"):
            return np.asarray(type(op).function(*blocks, **extra, **op.values)).dtype
    except Exception:  # noqa: BLE001 - a function that needs real data: promote instead
        return np.result_type(*in_dtypes) if in_dtypes else np.dtype("float64")


def _shape_of(rule: Any, in_shapes: Sequence[Shape], who: str) -> Shape:
    """An output shape from a decorator's ``shape``: None (input 0's shape), a tuple, or
    a callable of the input shapes."""
    if rule is None:
        return tuple(in_shapes[0])
    got = rule(*[tuple(s) for s in in_shapes]) if callable(rule) else rule
    try:
        return parse_shape(got, f"{who}: shape")
    except CellError as e:
        raise UDFError(str(e)) from None


def _make(base: type, fn: Callable[..., Any], what: str, lineage: bool = False,
          **attrs: Any) -> type:
    sig = _Signature(fn, what, lineage)
    ns = {
        "__module__": getattr(fn, "__module__", __name__),
        "__qualname__": getattr(fn, "__qualname__", fn.__name__),
        "__doc__": fn.__doc__,
        "function": staticmethod(fn),
        "_sig": sig,
        "_what": what,
        "n_inputs": sig.inputs,
        **attrs,
    }
    return type(fn.__name__, (base,), ns)


def _decorator(base: type, what: str, lineage: bool = False, **attrs: Any
               ) -> Callable[[Callable[..., Any]], type]:
    def wrap(fn: Callable[..., Any]) -> type:
        return _make(base, fn, what, lineage, **attrs)
    return wrap


def _radius(value: Any, what: str) -> Any:
    if callable(value):
        return value
    r = (value,) if np.isscalar(value) else tuple(value)
    try:
        r = tuple(int(v) for v in r)
    except (TypeError, ValueError):
        raise UDFError(f"{what}: radius must be an int, one int per axis, or a function of "
                       f"the parameters. Got {value!r}.") from None
    if not r or any(v < 0 for v in r):
        raise UDFError(f"{what}: radius must be non-negative. Got {value!r}.")
    return r


def _fits(op: Operator, radius: Sequence[int], shape: Shape, who: str) -> tuple[int, ...]:
    """``radius`` per axis of ``shape``, refused when it does not fit (rank or size)."""
    radius = tuple(radius)
    if len(radius) == 1:
        radius = radius * len(shape)
    if len(radius) != len(shape):
        raise UDFError(f"{who}: radius {radius} has {len(radius)} axes; the input has "
                       f"shape {shape}")
    for axis, (r, n) in enumerate(zip(radius, shape)):
        if r > n:
            raise UDFError(f"{who}: radius {r} on axis {axis} does not fit an input of "
                           f"shape {shape}; expected at most {n}")
    return radius


# ---------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------


class _Elementwise(_Decorated, ElementwiseOperator):
    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.FULL, Mode.BLACKBOX})

    def kernel(self, *blocks: np.ndarray) -> np.ndarray:
        return self.apply(*blocks)


def elementwise(fn: Callable[..., Any] | None = None, *, dtype: Any = None) -> Any:
    """An operator whose output cell ``c`` depends on cell ``c`` of every input.

    The function takes the inputs' blocks (numpy broadcasting applies: a ``(1, 1)``
    input is the same value everywhere) and returns the output block.

    Parameters
    ----------
    fn : the function (when used as ``@udf.elementwise`` without arguments).
    dtype : the output's dtype; default, what the function returns.

    Examples
    --------
    >>> @elementwise
    ... def calibrate(raw, gain=2.0):
    ...     return raw / gain
    >>> calibrate.function(np.array([4.0]), gain=4.0).tolist()
    [1.0]
    """
    make = _decorator(_Elementwise, "udf.elementwise", _dtype=dtype)
    return make(fn) if fn is not None else make


# ---------------------------------------------------------------------------------------
# stencil
# ---------------------------------------------------------------------------------------


class _Stencil(_Decorated, StencilOperator):
    _radius: Any = (1,)
    _wrap: bool = False

    def __init__(self, *args: Any, **params: Any) -> None:
        _Decorated.__init__(self, *args, **params)
        rule = type(self)._radius
        r = _radius(_call(rule, self.values), self._sig.name) if callable(rule) else rule
        StencilOperator.__init__(self, r, "wrap" if self._wrap else "reflect")

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.FULL, Mode.BLACKBOX})

    def check_bound(self) -> None:
        _fits(self, self.radius, self.out_shape, self.who())

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        try:
            return StencilOperator.output_shape(self, in_shapes)
        except WorkflowError as e:
            raise UDFError(str(e)) from None

    def kernel(self, *blocks: np.ndarray) -> np.ndarray:
        out = self.apply(*blocks)
        if out.shape != blocks[0].shape:
            raise WorkflowError(
                f"{self.who()}: returned a block of shape {out.shape} for a block of shape "
                f"{blocks[0].shape}; a stencil returns its input block's shape (the halo is "
                "trimmed after)")
        return out


def stencil(radius: Any = 1, *, wrap: bool = False, dtype: Any = None
            ) -> Callable[[Callable[..., Any]], type]:
    """An operator whose output cell ``c`` depends on the box of ``radius`` around ``c``
    in input 0 (clipped at the array's border) and on cell ``c`` of any further input.

    The function receives input 0's block *with a halo* of ``radius`` cells on each side
    (less at the array's border) and returns a block of the same shape; SubZero trims the
    halo. Treat the block's edge as the array's edge (``scipy.ndimage``'s ``mode=``).

    Parameters
    ----------
    radius : int, one int per axis, or a function of the operator's parameters
        (``lambda size: size // 2``).
    wrap : the stencil wraps around the array's edges (``mode="wrap"``): it then runs as
        one task over the whole array.
    dtype : the output's dtype; default, what the function returns.
    """
    return _decorator(_Stencil, "udf.stencil", _radius=_radius(radius, "udf.stencil"),
                      _wrap=bool(wrap), _dtype=dtype)


# ---------------------------------------------------------------------------------------
# along an axis (rows, columns)
# ---------------------------------------------------------------------------------------

_OUT = ("same", "reduce", "keep")


class _Along(_Decorated):
    """Output cells depend on the whole line of input cells along ``_axis`` through them."""

    parallelism = BLOCKWISE
    _axis: int = -1
    _out: str = "same"

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.FULL, Mode.BLACKBOX})

    def axis(self) -> int:
        nd = len(self.in_shapes[0]) if self.in_shapes else 0
        return self._axis % nd if nd else 0

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        first = tuple(in_shapes[0])
        for s in in_shapes[1:]:
            if tuple(s) != first:
                raise UDFError(f"{self.who()}: input shapes "
                               f"{', '.join(str(tuple(x)) for x in in_shapes)} must be equal")
        if not -len(first) <= self._axis < len(first):
            raise UDFError(f"{self.who()}: axis {self._axis} does not fit an input of shape "
                           f"{first}")
        ax = self._axis % len(first)
        if self._out == "reduce":
            return first[:ax] + first[ax + 1:]
        if self._out == "keep":
            return first[:ax] + (1,) + first[ax + 1:]
        return first

    def _in_box(self, out_box: Box) -> Box:
        ax, shape = self.axis(), self.in_shapes[0]
        lo, hi = list(out_box.lo), list(out_box.hi)
        if self._out == "reduce":
            lo.insert(ax, 0)
            hi.insert(ax, shape[ax])
        else:
            lo[ax], hi[ax] = 0, shape[ax]
        return Box(tuple(lo), tuple(hi))

    def input_box(self, out_box: Box, i: int) -> Box:
        return self._in_box(out_box)

    def run(self, ctx: TaskContext, *blocks: np.ndarray) -> np.ndarray:
        out = self.apply(*blocks)
        want = ctx.chunk.out_box.shape
        if out.shape != want:
            if self._out == "same" and out.shape == self._in_box(ctx.chunk.out_box).shape:
                out = out[ctx.chunk.out_box.relative_to(self._in_box(ctx.chunk.out_box))]
            else:
                raise WorkflowError(
                    f"{self.who()}: returned a block of shape {out.shape}; expected {want} "
                    f"(lines along axis {self.axis()}, output {self._out!r})")
        if ctx.full:
            self.trace(ctx)
        return out

    def _lines(self, out_mask: np.ndarray) -> np.ndarray:
        """The lines (the input's shape with the line axis removed) the output mask meets."""
        ax = self.axis()
        if self._out == "reduce":
            return out_mask
        return out_mask.any(axis=ax)

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        lines = self._lines(np.asarray(frontier_out, dtype=bool))
        ax = self.axis()
        return np.array(np.broadcast_to(np.expand_dims(lines, ax), self.in_shapes[i]),
                        dtype=bool)

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        ax = self.axis()
        lines = np.asarray(frontier_in, dtype=bool).any(axis=ax)
        if self._out == "reduce":
            return lines.copy()
        return np.array(np.broadcast_to(np.expand_dims(lines, ax), self.out_shape),
                        dtype=bool)

    def all_to_all(self, i: int) -> bool:
        return True

    def trace(self, ctx: TaskContext) -> None:
        """One pair per line: the block's output cells on that line and the whole line of
        every input."""
        ch, ax = ctx.chunk, self.axis()
        shape = self.in_shapes[0]
        out_lin = ch.out_box.linear(self.out_shape)
        coords = to_coords(out_lin, self.out_shape)
        line_coords = coords if self._out == "reduce" else np.delete(coords, ax, axis=1)
        line_shape = shape[:ax] + shape[ax + 1:]
        key = (np.ravel_multi_index(tuple(line_coords.T), line_shape) if line_shape
               else np.zeros(len(coords), dtype=np.int64))
        order = np.argsort(key, kind="stable")
        uniq, starts = np.unique(key[order], return_index=True)
        outs = Ragged(out_lin[order], np.append(starts, len(order)).astype(np.int64))
        n = shape[ax]
        lc = np.asarray(np.unravel_index(uniq, line_shape)).T if line_shape else (
            np.zeros((len(uniq), 0), dtype=np.int64))
        full = np.repeat(np.insert(lc, ax, 0, axis=1), n, axis=0)
        full[:, ax] = np.tile(np.arange(n), len(uniq))
        ins = Ragged(np.ravel_multi_index(tuple(full.T), shape).astype(np.uint64),
                     np.arange(len(uniq) + 1, dtype=np.int64) * n)
        ctx.lwrite_pairs(outs, *[ins for _ in self.in_shapes])


def along(axis: int, *, out: str = "same", dtype: Any = None
          ) -> Callable[[Callable[..., Any]], type]:
    """An operator whose output cells depend on the whole line of input cells along
    ``axis`` through them: a reduction along the axis, or a transform of each line.

    The function receives blocks of whole lines (every cell along ``axis``) of each input
    (all of one shape) and returns, per ``out``:

    - ``"same"``: a block of the input block's shape (a line's cells from the whole line:
      subtracting a row's median);
    - ``"reduce"``: the block with ``axis`` removed (``np.median(x, axis=axis)``);
    - ``"keep"``: the block with ``axis`` of size 1 (``keepdims=True``).
    """
    if out not in _OUT:
        raise UDFError(f"udf.along: out must be one of {', '.join(_OUT)}. Got {out!r}.")
    try:
        axis = int(axis)
    except (TypeError, ValueError):
        raise UDFError(f"udf.along: axis must be an int. Got {axis!r}.") from None
    return _decorator(_Along, "udf.along", _axis=axis, _out=out, _dtype=dtype)


def rows(fn: Callable[..., Any] | None = None, *, out: str = "same", dtype: Any = None
         ) -> Any:
    """:func:`along` the last axis: each row of a 2-d image (a row's output cells depend on
    the whole input row)."""
    make = along(-1, out=out, dtype=dtype)
    return make(fn) if fn is not None else make


def columns(fn: Callable[..., Any] | None = None, *, out: str = "same", dtype: Any = None
            ) -> Any:
    """:func:`along` the first axis: each column of a 2-d image."""
    make = along(0, out=out, dtype=dtype)
    return make(fn) if fn is not None else make


# ---------------------------------------------------------------------------------------
# whole array, black box
# ---------------------------------------------------------------------------------------


class _Whole(_Decorated, AllToAllOperator):
    _shape: Any = None

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.FULL, Mode.BLACKBOX})

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        return _shape_of(type(self)._shape, in_shapes, self.who())

    def compute(self, ctx: TaskContext, *blocks: np.ndarray) -> np.ndarray:
        return _whole_block(self, self.apply(*blocks))


def _whole_block(op: _Decorated, out: np.ndarray) -> np.ndarray:
    if out.shape != tuple(op.out_shape):
        try:
            return np.broadcast_to(out, op.out_shape)
        except ValueError:
            raise WorkflowError(f"{op.who()}: returned shape {out.shape}; expected "
                                f"{tuple(op.out_shape)} (give shape= to the decorator)"
                                ) from None
    return out


def whole_array(fn: Callable[..., Any] | None = None, *, shape: Any = None,
                dtype: Any = None) -> Any:
    """An operator whose every output cell depends on every cell of every input (a global
    statistic, a model fitted on the whole array). It runs as one task; a query through
    it reaches whole arrays at once (the entire-array rule) and stores nothing.

    Parameters
    ----------
    shape : the output's shape: input 0's shape (default), a tuple, or a function of the
        input shapes (``lambda image: (image[0],)``). A smaller result (a scalar) is
        broadcast to it.
    dtype : the output's dtype; default, what the function returns.
    """
    make = _decorator(_Whole, "udf.whole_array", _shape=shape, _dtype=dtype)
    return make(fn) if fn is not None else make


class _Blackbox(_Decorated, UDF):
    _shape: Any = None
    _halo: Any = None

    @property
    def parallelism(self) -> Parallelism:  # type: ignore[override]
        if self._halo is None:
            return GLOBAL
        return halo_of(self._halo) if any(self._halo) else ELEMENTWISE

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        if self._halo is not None:
            first = tuple(in_shapes[0])
            if any(tuple(s) != first for s in in_shapes[1:]):
                raise UDFError(f"{self.who()}: input shapes "
                               f"{', '.join(str(tuple(x)) for x in in_shapes)} must be equal "
                               "(a black box with a halo works block by block)")
            return first
        return _shape_of(type(self)._shape, in_shapes, self.who())

    def check_bound(self) -> None:
        if self._halo is not None:
            _fits(self, self._halo, self.out_shape, self.who())

    def run(self, ctx: TaskContext, *blocks: np.ndarray) -> np.ndarray:
        out = self.apply(*blocks)
        if self._halo is not None and blocks and out.shape == blocks[0].shape:
            return out[ctx.chunk.interior(0)]
        return _whole_block(self, out) if self._halo is None else out


def blackbox(fn: Callable[..., Any] | None = None, *, shape: Any = None, dtype: Any = None,
             halo: int | Sequence[int] | None = None) -> Any:
    """An operator that declares no lineage. A query re-runs it on the part of its output
    it touches, and takes every cell the re-run read as the lineage of every cell it made.

    Parameters
    ----------
    shape, dtype : as in :func:`whole_array`.
    halo : None (default): one task over the whole arrays. A radius (int or per axis):
        block by block with that halo, like :func:`stencil`, so a query re-runs only the
        blocks it touches.
    """
    h = None if halo is None else _radius(halo, "udf.blackbox")
    make = _decorator(_Blackbox, "udf.blackbox", _shape=shape, _dtype=dtype, _halo=h)
    return make(fn) if fn is not None else make


# ---------------------------------------------------------------------------------------
# data-dependent lineage
# ---------------------------------------------------------------------------------------

#: payload records: a box relative to the cell, an absolute box, absolute cells
_REL, _ABS, _CELLS = 1, 2, 3
_ALL = 255  # a record for every input


def _timed(method: Callable[..., None]) -> Callable[..., None]:
    """A recording method whose time counts in its recorder's ``spent``."""
    @functools.wraps(method)
    def timed(self: "Lineage", *args: Any, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        try:
            method(self, *args, **kwargs)
        finally:
            self.spent += time.perf_counter() - t0
    return timed


class Lineage:
    """The recorder a :func:`cells` operator's function receives as ``lineage``.

    Coordinates are local to the blocks the function receives: output cell ``(0, 0)`` is
    the first cell of the output block, input boxes and cells are positions in the input
    blocks (with their halo). Every method takes many cells at once, as arrays: an
    ``(n, ndim)`` array, the tuple ``np.nonzero`` returns, or a bool mask of the block.
    ``inputs`` selects the inputs a record is about (default: every input).

    Output cells outside the block's own part (in its halo) are ignored; the neighbouring
    block records them.
    """

    def __init__(self, op: "_Cells | None", ctx: TaskContext | None,
                 block_lo: tuple[int, ...] = ()) -> None:
        self._op = op
        self._ctx = ctx
        self._lo = np.asarray(block_lo, dtype=np.int64)
        self.records: list[tuple[int, np.ndarray, tuple[int, ...], Any]] = []
        #: seconds spent in the recording calls (capture time)
        self.spent = 0.0

    @classmethod
    def ignored(cls) -> "Lineage":
        return cls(None, None)

    @property
    def wanted(self) -> bool:
        """Whether this run records lineage (skip computing it when not)."""
        ctx = self._ctx
        return ctx is not None and (ctx.full or ctx.composite or ctx.payload)

    def _inputs(self, inputs: Any) -> tuple[int, ...]:
        op = self._op
        n = len(op.in_shapes)
        if inputs is None:
            return tuple(range(n))
        got = (inputs,) if np.isscalar(inputs) else tuple(inputs)
        for i in got:
            if not isinstance(i, (int, np.integer)) or not 0 <= int(i) < n:
                raise UDFError(f"{op.who()}: lineage names input {i!r}; the operator has "
                               f"inputs 0..{n - 1}")
        return tuple(int(i) for i in got)

    def _cells(self, cells: Any) -> np.ndarray:
        """Local output cells as global ``(n, ndim)`` coordinates."""
        nd = len(self._op.out_shape)
        if isinstance(cells, tuple) and len(cells) == nd and all(
                np.ndim(c) == 1 for c in cells):
            c = np.stack([np.asarray(v, dtype=np.int64) for v in cells], axis=1) if nd else (
                np.zeros((0, 0), np.int64))
        else:
            a = np.asarray(cells)
            if a.dtype == bool:
                c = np.argwhere(a)
            else:
                c = a.astype(np.int64, copy=False).reshape(-1, nd)
        return c + self._lo

    @_timed
    def around(self, cells: Any, radius: int | Sequence[int], inputs: Any = None) -> None:
        """Each of ``cells`` depends on the box of ``radius`` around it (clipped at the
        array's border) in ``inputs``."""
        if not self.wanted:
            return
        c = self._cells(cells)
        r = np.broadcast_to(np.asarray(radius, dtype=np.int64), (c.shape[1],))
        if (r < 0).any():
            raise UDFError(f"{self._op.who()}: lineage radius must be non-negative. Got "
                           f"{radius!r}.")
        self.records.append((_REL, c, self._inputs(inputs), (-r, r + 1)))

    @_timed
    def boxes(self, cells: Any, lo: Any, hi: Any, inputs: Any = None) -> None:
        """Each of ``cells`` depends on the box ``[lo, hi)`` (input-block coordinates, one
        row per cell or one for all) of ``inputs``."""
        if not self.wanted:
            return
        c = self._cells(cells)
        ins = self._inputs(inputs)
        base = [self._in_lo(i) for i in ins]
        if any((b != base[0]).any() for b in base[1:]):
            raise UDFError(f"{self._op.who()}: lineage.boxes of inputs with different "
                           "blocks; record each input separately")
        lo = np.broadcast_to(np.asarray(lo, dtype=np.int64), c.shape) + base[0]
        hi = np.broadcast_to(np.asarray(hi, dtype=np.int64), c.shape) + base[0]
        for i in ins:
            shape = np.asarray(self._op.in_shapes[i])
            bad = (lo < 0).any(axis=1) | (hi > shape).any(axis=1) | (lo > hi).any(axis=1)
            if bad.any():
                k = int(np.argmax(bad))
                raise UDFError(
                    f"{self._op.who()}: lineage box {tuple(lo[k].tolist())}-"
                    f"{tuple(hi[k].tolist())} of output cell {tuple(c[k].tolist())} is "
                    f"outside input {i} of shape {tuple(shape.tolist())}")
        self.records.append((_ABS, c, ins, (lo, hi)))

    @_timed
    def cells(self, cells: Any, incells: Any, inputs: Any = None) -> None:
        """Each of ``cells`` (``n`` of them) depends on its ``k`` cells of ``incells``, an
        ``(n, k, ndim)`` array of input-block coordinates (the same for each input of
        ``inputs``). Cells of one group (a labelled region) may share rows."""
        if not self.wanted:
            return
        c = self._cells(cells)
        if not len(c):
            return
        ins = self._inputs(inputs)
        nd = len(self._op.in_shapes[ins[0]])
        inc = np.asarray(incells, dtype=np.int64).reshape(len(c), -1, nd)
        for i in ins:
            shape = np.asarray(self._op.in_shapes[i])
            g = inc + self._in_lo(i)
            bad = ((g < 0) | (g >= shape)).any(axis=2)
            if bad.any():
                k, j = np.argwhere(bad)[0]
                raise UDFError(f"{self._op.who()}: lineage cell {tuple(g[k, j].tolist())} "
                               f"of output cell {tuple(c[k].tolist())} is outside input {i} "
                               f"of shape {tuple(shape.tolist())}")
            lin = np.ravel_multi_index(tuple(g.reshape(-1, nd).T), tuple(shape)).reshape(
                len(c), -1).astype(np.uint64)
            self.records.append((_CELLS, c, (i,), lin))

    def _in_lo(self, i: int) -> np.ndarray:
        return np.asarray(self._ctx.chunk.in_boxes[i].lo, dtype=np.int64)


class _Cells(_Decorated, UDF):
    _default: Any = "elementwise"
    _halo: Any = 0
    _shape: Any = None

    @property
    def parallelism(self) -> Parallelism:  # type: ignore[override]
        if self._halo == "global":
            return GLOBAL
        return halo_of(self._halo) if any(self._halo) else ELEMENTWISE

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.FULL, Mode.COMP, Mode.BLACKBOX})

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        if self._halo == "global":
            return _shape_of(type(self)._shape, in_shapes, self.who())
        first = tuple(in_shapes[0])
        if any(tuple(s) != first for s in in_shapes[1:]):
            raise UDFError(f"{self.who()}: input shapes "
                           f"{', '.join(str(tuple(x)) for x in in_shapes)} must be equal")
        return first

    def check_bound(self) -> None:
        if self._halo not in ("global",) and any(self._halo):
            _fits(self, self._halo, self.out_shape, self.who())
        d = self._default
        if isinstance(d, tuple):
            _fits(self, d, self.out_shape, self.who())
        if d != "none" and any(tuple(s) != tuple(self.out_shape) for s in self.in_shapes):
            raise UDFError(f"{self.who()}: a default mapping ({d!r}) needs inputs of the "
                           f"output's shape {tuple(self.out_shape)}; use default='none' "
                           "and record every cell's lineage")

    # -- the default mapping -------------------------------------------------------------
    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        d = self._default
        if d == "none":
            return np.zeros(self.in_shapes[i], dtype=bool)
        if d == "elementwise":
            return broadcast_map_b(frontier_out, self.in_shapes[i])
        return dilate(frontier_out, _fits(self, d, self.out_shape, self.who()))

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        d = self._default
        if d == "none":
            return np.zeros(self.out_shape, dtype=bool)
        if d == "elementwise":
            return broadcast_map_f(frontier_in, self.out_shape)
        return dilate(frontier_in, _fits(self, d, self.out_shape, self.who()))

    def map_b_lin(self, out_lin: np.ndarray, i: int) -> np.ndarray | None:
        if self._default == "none":
            return np.empty(0, dtype=np.uint64)
        if self._default == "elementwise":
            return out_lin
        return None

    def map_f_lin(self, in_lin: np.ndarray, i: int) -> np.ndarray | None:
        return self.map_b_lin(in_lin, i)

    def _default_ragged(self, out_lin: np.ndarray, i: int) -> Ragged:
        d = self._default
        if d == "none":
            return Ragged.empty(len(out_lin))
        if d == "elementwise":
            return Ragged.from_singletons(out_lin)
        r = _fits(self, d, self.out_shape, self.who())
        return box_neighbours(to_coords(out_lin, self.out_shape), r, self.out_shape)

    # -- running -------------------------------------------------------------------------
    def run(self, ctx: TaskContext, *blocks: np.ndarray) -> np.ndarray:
        ch = ctx.chunk
        base = ch.in_boxes[0].lo if ch.in_boxes and self._halo != "global" else (
            (0,) * len(self.out_shape))
        rec = Lineage(self, ctx, base)
        out = self.apply(*blocks, lineage=rec)
        if self._halo == "global":
            out = _whole_block(self, out)
        elif blocks and out.shape == blocks[0].shape and out.shape != ch.out_box.shape:
            out = out[ch.interior(0)]
        if rec.wanted:  # recording and emitting count as capture, as lwrite calls do
            t0, before = time.perf_counter(), ctx.capture_s
            self._emit(ctx, rec)
            ctx.capture_s = before + rec.spent + time.perf_counter() - t0
        return out

    def _records(self, ctx: TaskContext, rec: Lineage
                 ) -> list[tuple[int, np.ndarray, tuple[int, ...], Any]]:
        """The records restricted to the block's own output cells, with global linear
        output indices."""
        box = ctx.chunk.out_box
        lo, hi = np.asarray(box.lo, np.int64), np.asarray(box.hi, np.int64)
        out = []
        for kind, c, ins, data in rec.records:
            keep = ((c >= lo) & (c < hi)).all(axis=1) if c.size else np.zeros(len(c), bool)
            if not keep.all():
                c = c[keep]
                if kind == _ABS:
                    data = (data[0][keep], data[1][keep])
                elif kind == _CELLS:
                    data = data[keep]
            if len(c):
                lin = np.ravel_multi_index(tuple(c.T), self.out_shape).astype(np.uint64)
                out.append((kind, lin, ins, data, c))
        return out

    def _emit(self, ctx: TaskContext, rec: Lineage) -> None:
        records = self._records(ctx, rec)
        if ctx.full:
            self._emit_full(ctx, records)
        if ctx.composite:
            self._emit_payloads(ctx, records)

    def _emit_full(self, ctx: TaskContext, records: list) -> None:
        """The records and the default mapping as full lineage: boxes around cells (and
        the default's identity or box) through ``ctx.lwrite_box``, which keeps them as
        masks where it can; absolute boxes and cells as pairs."""
        n_in = len(self.in_shapes)
        box = ctx.chunk.out_box
        base = np.asarray(box.lo, dtype=np.int64)
        covered = np.zeros(box.shape, dtype=bool)
        for kind, lin, ins, data, c in records:
            mine = np.zeros(box.shape, dtype=bool)
            mine[tuple((c - base).T)] = True
            covered |= mine
            if kind == _REL:
                ctx.lwrite_box(mine, data[0], data[1], inputs=ins)
                continue
            sides = []
            for i in range(n_in):
                if i not in ins:
                    sides.append(Ragged.empty(len(lin)))
                elif kind == _ABS:
                    sides.append(box_cells(data[0], data[1], self.in_shapes[i]))
                else:
                    k = data.shape[1]
                    sides.append(Ragged(data.reshape(-1),
                                        np.arange(len(lin) + 1, dtype=np.int64) * k))
            ctx.lwrite_pairs(Ragged.from_singletons(lin), *sides)
        d = self._default
        if d == "none" or covered.all():
            return
        r = (0,) * len(self.out_shape) if d == "elementwise" else _fits(
            self, d, self.out_shape, self.who())
        ctx.lwrite_box(~covered, tuple(-x for x in r), tuple(x + 1 for x in r))

    def _emit_payloads(self, ctx: TaskContext, records: list) -> None:
        """One payload per recorded output cell: its records, concatenated."""
        parts: list[tuple[np.ndarray, np.ndarray]] = []  # (out lin, (n, width) uint8 rows)
        for kind, lin, ins, data, c in records:
            groups = [(_ALL, ins)] if ins == tuple(range(len(self.in_shapes))) else [
                (i, (i,)) for i in ins]
            for tag, _ in groups:
                head = np.tile(np.array([kind, tag], dtype=np.uint8), (len(lin), 1))
                if kind == _REL:
                    body = np.concatenate([np.broadcast_to(data[0], c.shape),
                                           np.broadcast_to(data[1], c.shape)], axis=1)
                    body = np.ascontiguousarray(body, dtype="<i4").view(np.uint8)
                elif kind == _ABS:
                    body = np.ascontiguousarray(np.concatenate([data[0], data[1]], axis=1),
                                                dtype="<i8").view(np.uint8)
                else:
                    k = data.shape[1]
                    cnt = np.full((len(lin), 1), k, dtype="<u4").view(np.uint8)
                    body = np.concatenate(
                        [cnt, np.ascontiguousarray(data, dtype="<u8").view(np.uint8)], axis=1)
                parts.append((lin, np.concatenate([head, body], axis=1)))
        if not parts:
            return
        lin = np.concatenate([p[0] for p in parts])
        widths = {p[1].shape[1] for p in parts}
        if len(widths) == 1 and len(np.unique(lin)) == len(lin):
            rows = np.concatenate([p[1] for p in parts])
            ctx.lwrite_pairs(Ragged.from_singletons(lin), payloads=rows)
            return
        by_cell: dict[int, list[bytes]] = {}
        for cells, rows in parts:
            for o, r in zip(cells.tolist(), rows):
                by_cell.setdefault(o, []).append(r.tobytes())
        keys = sorted(by_cell)
        ctx.lwrite_pairs(np.asarray(keys, dtype=np.uint64),
                         payloads=[b"".join(by_cell[k]) for k in keys])

    # -- payloads back to cells ------------------------------------------------------------
    def _decode(self, payload: bytes) -> list[tuple[int, int, np.ndarray]]:
        """A payload's records: ``(kind, input tag, body bytes)``."""
        out, at, b = [], 0, memoryview(payload)
        while at < len(b):
            kind, tag = b[at], b[at + 1]
            nd = len(self.out_shape) if kind == _REL else (
                len(self.in_shapes[0 if tag == _ALL else tag]))
            if kind == _REL:
                size = 2 * nd * 4
            elif kind == _ABS:
                size = 2 * nd * 8
            else:
                size = 4 + 8 * int(np.frombuffer(b[at + 2:at + 6], dtype="<u4")[0])
            out.append((kind, tag, np.frombuffer(b[at + 2:at + 2 + size], dtype=np.uint8)))
            at += 2 + size
        return out

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> Any:
        shape = self.in_shapes[i]
        c = np.asarray(outcells, dtype=np.int64).reshape(-1, len(self.out_shape))
        parts = []
        for kind, tag, body in self._decode(payload):
            if tag != _ALL and tag != i:
                continue
            if kind == _REL:
                off = body.view("<i4").reshape(2, -1).astype(np.int64)
                lo = np.maximum(c + off[0], 0)
                hi = np.minimum(c + off[1], np.asarray(shape))
                parts.append(box_cells(lo, hi, shape).values)
            elif kind == _ABS:
                box = body.view("<i8").reshape(2, -1)
                parts.append(Box(tuple(box[0].tolist()), tuple(box[1].tolist())).linear(shape))
            else:
                parts.append(body[4:].view("<u8").astype(np.uint64))
        return unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.uint64)

    def map_p_rows(self, outcells: np.ndarray, payloads: np.ndarray, i: int
                   ) -> np.ndarray | None:
        """Relative boxes of many cells at once (the common payload); None otherwise."""
        rel = self._relative_rows(outcells, payloads, i)
        if rel is None:
            return None
        _, lo, hi = rel
        return box_cells(lo, hi, self.in_shapes[i]).values

    def _relative_rows(self, outcells: np.ndarray, payloads: np.ndarray, i: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Rows that are each one relative box: which rows are about input ``i``, and
        their boxes' corners clipped to that input; None for other payloads."""
        nd = len(self.out_shape)
        if payloads.shape[1] != 2 + 8 * nd or not (payloads[:, 0] == _REL).all():
            return None
        tags = payloads[:, 1]
        keep = (tags == _ALL) | (tags == i)
        off = np.ascontiguousarray(payloads[keep, 2:]).view("<i4").reshape(-1, 2, nd)
        c = np.asarray(outcells, dtype=np.int64)[keep]
        shape = np.asarray(self.in_shapes[i])
        return keep, np.clip(c + off[:, 0], 0, shape), np.clip(c + off[:, 1], 0, shape)

    def map_p_rows_hits(self, outcells: np.ndarray, payloads: np.ndarray, i: int,
                        frontier_in: np.ndarray) -> np.ndarray | None:
        """Which rows' relative boxes meet ``frontier_in``: box sums of the frontier's
        summed-area table (one lookup per box corner), so a forward query tests every
        payload at once; None for other payloads."""
        rel = self._relative_rows(outcells, payloads, i)
        if rel is None:
            return None
        keep, lo, hi = rel
        nd, shape = len(self.out_shape), np.asarray(self.in_shapes[i])
        table = np.zeros(tuple(shape + 1), dtype=np.int64)
        table[(slice(1, None),) * nd] = np.asarray(frontier_in, dtype=np.int64)
        for axis in range(nd):
            np.cumsum(table, axis=axis, out=table)
        total = np.zeros(len(lo), dtype=np.int64)
        for corner in range(1 << nd):  # inclusion-exclusion over the box's corners
            pick = [(corner >> d) & 1 for d in range(nd)]
            at = tuple(np.where(pick[d], lo[:, d], hi[:, d]) for d in range(nd))
            total += (-1) ** sum(pick) * table[at]
        hits = np.zeros(len(payloads), dtype=bool)
        hits[keep] = total > 0
        return hits


def cells(default: Any = "elementwise", *, halo: Any = 0, shape: Any = None,
          dtype: Any = None) -> Callable[[Callable[..., Any]], type]:
    """An operator with data-dependent lineage, recorded per chunk in one vectorized call.

    The function takes the input blocks and a keyword ``lineage`` (a :class:`Lineage`)
    and returns the output block. Cells it records nothing for follow ``default``:

    - ``"elementwise"``: the same cell of every input (inputs of the output's shape);
    - a radius (int or per axis): the box of that radius around the cell in every input;
    - ``"none"``: no lineage.

    Parameters
    ----------
    default : the mapping of the cells the function records nothing for.
    halo : how far beyond its output block the function reads: 0 (the block itself), a
        radius (int or per axis: blocks come with that halo, like :func:`stencil`'s, and
        the function returns the block's shape), or ``"global"`` (one task over the whole
        arrays: a connected-component labeller).
    shape : the output's shape when ``halo="global"`` (as in :func:`whole_array`).
    dtype : the output's dtype; default, what the function returns.

    The operator stores its lineage as full pairs (``FULL``, a pair for every cell) or as
    payloads for the recorded cells only (``COMP``, the ``subzero`` strategy's choice);
    queries expand payloads with the same arithmetic.
    """
    if isinstance(default, str):
        if default not in ("elementwise", "none"):
            raise UDFError(f"udf.cells: default must be 'elementwise', 'none' or a radius. "
                           f"Got {default!r}.")
        d: Any = default
    else:
        d = _radius(default, "udf.cells")
    h = "global" if halo == "global" else _radius(halo, "udf.cells")
    if halo != "global" and shape is not None:
        raise UDFError("udf.cells: shape= applies to halo='global' only; a blockwise "
                       "operator's output has its inputs' shape")
    return _decorator(_Cells, "udf.cells", lineage=True, _default=d, _halo=h,
                      _shape=shape, _dtype=dtype)
