"""Bases of the operator library, on the core :class:`subzero.operator.Operator` interface.

Three bases cover most built-ins and derive exact mapping functions and tracing lineage
from their shape: :class:`ElementwiseOperator`, :class:`StencilOperator`,
:class:`AllToAllOperator`. User code subclasses :class:`UDF`; :class:`CellMapping` lifts
the paper's per-cell mapping functions to frontiers (the slow path). The contract itself
(modes, ``run``, mapping functions, parallelism) is documented in :mod:`subzero.operator`.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Iterable, Sequence

import numpy as np

from subzero.cells import Box, Ragged, any_over, as_linear, dilate, to_coords, unique
from subzero.errors import ShapeError
from subzero.frontier import mask_from_linear
from subzero.modes import Mode
from subzero.operator import (
    ELEMENTWISE, GLOBAL, Operator, Parallelism, stencil,
)
from subzero.runtime import TaskContext

Shape = tuple[int, ...]


class UDF(Operator):
    """Base class for user-defined operators.

    A UDF that declares nothing beyond BLACKBOX is traced as all-to-all within the blocks
    its task read (the paper's conservative default). Override :meth:`supported_modes` and
    call ``ctx.lwrite`` in :meth:`run` to expose finer lineage.
    """

    kind = "udf"


class CellMapping:
    """Mixin lifting per-cell mapping functions (the paper's form) to frontiers.

    Define ``map_b_cell(cell, i)`` and ``map_f_cell(cell, i)`` returning iterables of cell
    tuples. This is the slow path: it loops over the frontier's cells in Python.
    """

    def map_b_cell(self, cell: tuple[int, ...], i: int) -> Iterable[tuple[int, ...]]:
        raise NotImplementedError

    def map_f_cell(self, cell: tuple[int, ...], i: int) -> Iterable[tuple[int, ...]]:
        raise NotImplementedError

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        out = np.zeros(self.in_shapes[i], dtype=bool)
        for cell in np.argwhere(frontier_out):
            for c in self.map_b_cell(tuple(int(v) for v in cell), i):
                out[tuple(c)] = True
        return out

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        out = np.zeros(self.out_shape, dtype=bool)
        for cell in np.argwhere(frontier_in):
            for c in self.map_f_cell(tuple(int(v) for v in cell), i):
                out[tuple(c)] = True
        return out


# ---------------------------------------------------------------------------------------
# shape helpers
# ---------------------------------------------------------------------------------------


def _broadcast_axes(in_shape: Shape, out_shape: Shape) -> tuple[int, ...]:
    """Output axes along which input ``in_shape`` is broadcast (size 1 or missing)."""
    pad = len(out_shape) - len(in_shape)
    axes = list(range(pad))
    for k, n in enumerate(in_shape):
        if n == 1 and out_shape[pad + k] != 1:
            axes.append(pad + k)
    return tuple(axes)


def broadcast_map_b(frontier_out: np.ndarray, in_shape: Shape) -> np.ndarray:
    """Backward mapping of numpy broadcasting: an input cell feeds every output cell it is
    broadcast to."""
    axes = _broadcast_axes(in_shape, frontier_out.shape)
    if not axes:
        return frontier_out.copy()
    red = any_over(frontier_out, axes)
    pad = len(frontier_out.shape) - len(in_shape)
    return red.reshape(red.shape[pad:]) if pad else red


def broadcast_map_f(frontier_in: np.ndarray, out_shape: Shape) -> np.ndarray:
    """Forward mapping of numpy broadcasting (a fresh, writable frontier)."""
    return np.array(np.broadcast_to(frontier_in, out_shape), dtype=bool, order="C")


def box_neighbours(
    coords: np.ndarray, radius: Sequence[int], shape: Shape, wrap: bool = False
) -> Ragged:
    """For each cell, the linear indices of the box of ``radius`` around it (clipped at the
    border, or wrapped), as a Ragged, in C order within each box.

    Works in linear-index space: one ``(n, m)`` add of per-axis offsets and a per-axis
    bounds mask, no ``(n, m, ndim)`` coordinate array.
    """
    shape = tuple(int(v) for v in shape)
    ndim = len(shape)
    coords = np.asarray(coords, dtype=np.int64).reshape(-1, ndim)
    n = len(coords)
    if n == 0:
        return Ragged.empty()
    strides = np.ones(ndim, dtype=np.int64)
    for d in range(ndim - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    if not wrap:  # each axis's positions once, (n, k) per axis, combined by broadcasting
        lin_b = np.zeros((n,) + (1,) * ndim, dtype=np.int64)
        ok_b = np.ones((n,) + (1,) * ndim, dtype=bool)
        for d, r in enumerate(radius):
            pos = coords[:, d, None] + np.arange(-r, r + 1, dtype=np.int64)
            view = (n,) + (1,) * d + (2 * r + 1,) + (1,) * (ndim - d - 1)
            lin_b = lin_b + (pos * strides[d]).reshape(view)
            ok_b = ok_b & ((pos >= 0) & (pos < shape[d])).reshape(view)
        lin2, ok2 = lin_b.reshape(n, -1), ok_b.reshape(n, -1)
        return Ragged.from_lengths(lin2[ok2].astype(np.uint64), ok2.sum(axis=1))
    grids = np.meshgrid(*[np.arange(-r, r + 1, dtype=np.int64) for r in radius], indexing="ij")
    offsets = [g.reshape(-1) for g in grids]  # per axis, (m,)
    m = len(offsets[0])
    lin = np.zeros((n, m), dtype=np.int64)
    valid = np.ones((n, m), dtype=bool)
    for d in range(ndim):
        pos = coords[:, d, None] + offsets[d][None, :]  # (n, m) along axis d
        if wrap:
            pos %= shape[d]
        else:
            valid &= (pos >= 0) & (pos < shape[d])
        lin += pos * strides[d]
    if wrap:
        # a small array can wrap several offsets onto the same cell: keep sets exact
        lin.sort(axis=1)
        keep = np.ones_like(valid)
        keep[:, 1:] = lin[:, 1:] != lin[:, :-1]
        valid = keep
    return Ragged.from_lengths(lin[valid].astype(np.uint64), valid.sum(axis=1))


# ---------------------------------------------------------------------------------------
# bases for built-ins
# ---------------------------------------------------------------------------------------


class MappingOperator(Operator):
    """An operator whose lineage is a pure function of coordinates (paper's mapping
    operators). Supports MAP (nothing stored), FULL (for the Full strategies and tracing
    re-execution) and BLACKBOX. Subclasses implement :meth:`compute`, the pure kernel, and
    :meth:`trace`, which reports the block's region pairs through ``ctx``."""

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.FULL, Mode.BLACKBOX})

    @abstractmethod
    def compute(self, ctx: TaskContext, *inputs: np.ndarray) -> np.ndarray:
        """The pure per-chunk kernel."""

    def trace(self, ctx: TaskContext) -> None:
        """Report the output block's lineage as region pairs. Default: derive it from
        :meth:`map_b`, one output cell at a time per input (correct but slow; the bases
        below override it with vectorized versions)."""
        ch = ctx.chunk
        out_lin = ch.out_box.linear(self.out_shape)
        rows: list[list[np.ndarray]] = [[] for _ in self.in_shapes]
        for lin in out_lin:
            f = mask_from_linear(np.array([lin]), self.out_shape)
            for i in range(len(self.in_shapes)):
                rows[i].append(np.flatnonzero(self.map_b(f, i)).astype(np.uint64))
        ctx.lwrite_pairs(
            Ragged.from_singletons(out_lin), *[Ragged.from_rows(r) for r in rows]
        )

    def run(self, ctx: TaskContext, *inputs: np.ndarray) -> np.ndarray:
        out = self.compute(ctx, *inputs)
        if ctx.full:
            self.trace(ctx)
        return out


class ElementwiseOperator(MappingOperator):
    """Output cell ``c`` depends on cell ``c`` of every input (numpy broadcasting: a 1x1
    input feeds every output cell). Subclasses implement :meth:`kernel` on whole blocks."""

    parallelism = ELEMENTWISE

    @abstractmethod
    def kernel(self, *blocks: np.ndarray) -> np.ndarray:
        """numpy in, numpy out; broadcasting like numpy."""

    def compute(self, ctx: TaskContext, *inputs: np.ndarray) -> np.ndarray:
        out = self.kernel(*inputs)
        return np.broadcast_to(out, ctx.chunk.out_box.shape).astype(self.out_dtype, copy=False)

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        return broadcast_map_b(frontier_out, self.in_shapes[i])

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        return broadcast_map_f(frontier_in, self.out_shape)

    def map_b_lin(self, out_lin: np.ndarray, i: int) -> np.ndarray | None:
        shape = tuple(self.in_shapes[i])
        if shape == tuple(self.out_shape):
            return out_lin
        pad = len(self.out_shape) - len(shape)
        c = to_coords(out_lin, self.out_shape)[:, pad:].copy()
        c[:, np.asarray(shape) == 1] = 0  # a broadcast axis: the input's one cell
        return unique(as_linear(c, shape))

    def map_f_lin(self, in_lin: np.ndarray, i: int) -> np.ndarray | None:
        if tuple(self.in_shapes[i]) == tuple(self.out_shape):
            return in_lin
        return None  # a broadcast input reaches whole lines: the mask path

    def all_to_all(self, i: int) -> bool:
        return True

    def trace(self, ctx: TaskContext) -> None:
        ch = ctx.chunk
        out_lin = ch.out_box.linear(self.out_shape)
        coords = to_coords(out_lin, self.out_shape)
        ins = []
        for shape in self.in_shapes:
            pad = len(self.out_shape) - len(shape)
            c = coords[:, pad:].copy()
            c[:, np.asarray(shape) == 1] = 0
            ins.append(Ragged.from_singletons(as_linear(c, shape)))
        ctx.lwrite_pairs(Ragged.from_singletons(out_lin), *ins)


class StencilOperator(MappingOperator):
    """Output cell ``c`` depends on the box of ``radius`` around ``c`` in input 0 (clipped
    at the border; wrapped when ``boundary == "wrap"``) and on cell ``c`` of any further
    same-shape inputs. The mapping functions are box dilations; nothing is stored.

    Subclasses implement :meth:`kernel` on a block that includes the halo and return a block
    of the same shape; the base trims the halo. The kernel must treat the block edge with
    ``self.boundary`` (as ``scipy.ndimage`` does with ``mode=``), so that cells at the true
    array border are right and cells near a chunk border are trimmed away.
    """

    radius: tuple[int, ...] = (1,)
    boundary: str = "reflect"

    def __init__(self, radius: int | Sequence[int] = 1, boundary: str = "reflect") -> None:
        self.radius = (int(radius),) if np.isscalar(radius) else tuple(int(r) for r in radius)
        if any(r < 0 for r in self.radius):
            raise ShapeError(f"stencil radius must be non-negative. Got {self.radius}.")
        if boundary not in ("reflect", "nearest", "mirror", "constant", "wrap"):
            raise ShapeError(
                f"unknown boundary {boundary!r}; expected reflect, nearest, mirror, constant "
                "or wrap"
            )
        self.boundary = boundary

    @property
    def parallelism(self) -> Parallelism:  # type: ignore[override]
        # a wrapped stencil needs cells from the far side of the array: one task
        return GLOBAL if self.boundary == "wrap" else stencil(self.radius)

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        for s in in_shapes[1:]:
            if tuple(s) != tuple(in_shapes[0]):
                raise ShapeError(
                    f"operator {self.name!r} ({type(self).__name__}): input shapes "
                    f"{', '.join(str(tuple(x)) for x in in_shapes)} must be equal"
                )
        return tuple(in_shapes[0])

    def radius_for(self, ndim: int) -> tuple[int, ...]:
        return self.radius * ndim if len(self.radius) == 1 else self.radius

    def check_bound(self) -> None:
        if len(self.radius) not in (1, len(self.out_shape)):
            raise ShapeError(
                f"operator {self.name!r}: radius {self.radius} does not fit shape {self.out_shape}"
            )
        # a halo wider than the input reaches no further input cell and only costs memory:
        # a kernel's footprint grows as the radius to the power of the array's rank
        for axis, (r, n) in enumerate(zip(self.radius_for(len(self.out_shape)),
                                          self.out_shape)):
            if r > n:
                raise ShapeError(
                    f"operator {self.name!r} ({type(self).__name__}): radius {r} on axis "
                    f"{axis} of an input of shape {self.out_shape}; expected a radius of at "
                    f"most {n} (the halo may be no larger than the input)")

    @abstractmethod
    def kernel(self, *blocks: np.ndarray) -> np.ndarray:
        """Compute the stencil on blocks that include the halo; same shape out."""

    def compute(self, ctx: TaskContext, *inputs: np.ndarray) -> np.ndarray:
        full = self.kernel(*inputs)
        return np.asarray(full[ctx.chunk.interior(0)], dtype=self.out_dtype)

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        if i > 0:
            return frontier_out.copy()
        return dilate(frontier_out, self.radius_for(frontier_out.ndim), self.boundary == "wrap")

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        if i > 0:
            return frontier_in.copy()
        return dilate(frontier_in, self.radius_for(frontier_in.ndim), self.boundary == "wrap")

    def all_to_all(self, i: int) -> bool:
        return True

    def trace(self, ctx: TaskContext) -> None:
        ch = ctx.chunk
        out_lin = ch.out_box.linear(self.out_shape)
        rad = self.radius_for(len(self.out_shape))
        step = max(1, 2_000_000 // max(1, int(np.prod([2 * r + 1 for r in rad]))))
        for s in range(0, len(out_lin), step):
            part = out_lin[s : s + step]
            coords = to_coords(part, self.out_shape)
            ins = [box_neighbours(coords, rad, self.out_shape, self.boundary == "wrap")]
            ins += [Ragged.from_singletons(part) for _ in self.in_shapes[1:]]
            ctx.lwrite_pairs(Ragged.from_singletons(part), *ins)


class AllToAllOperator(MappingOperator):
    """Every output cell depends on every cell of every input (a global reduction broadcast
    back, a matrix inverse...). Runs as one task. Backward of any non-empty frontier is the
    whole input; tracing stores one region pair."""

    parallelism = GLOBAL

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        return np.full(self.in_shapes[i], bool(frontier_out.any()))

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        return np.full(self.out_shape, bool(frontier_in.any()))

    def all_to_all(self, i: int) -> bool:
        return True

    def whole_input(self, i: int) -> bool:
        return True

    def trace(self, ctx: TaskContext) -> None:
        ctx.lwrite(ctx.chunk.out_box, *[Box.full(s) for s in self.in_shapes])
