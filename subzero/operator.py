"""The operator contract (DESIGN.md, "Operator contract"; paper Table I).

An operator computes one output array from ``n`` input arrays, one output *chunk* per call:

- :meth:`Operator.supported_modes` declares which lineage modes it can produce
  (``BLACKBOX`` is always possible);
- :meth:`Operator.run` ``(ctx, *blocks)`` computes the output block ``ctx.chunk.out_box``
  from input blocks ``ctx.chunk.in_boxes`` and, when ``ctx.modes`` asks for it, reports
  lineage through ``ctx.lwrite`` / ``ctx.lwrite_pairs``;
- :meth:`Operator.map_b` / :meth:`Operator.map_f` map whole boolean frontiers (vectorized);
  :class:`operators.base.CellMapping` lifts the paper's per-cell form to frontiers (the
  slow path);
- :meth:`Operator.map_p` recomputes input cells from a stored payload (and
  :meth:`Operator.map_p_hits` tests payload lineage forward);
- an operator supporting ``COMP`` gives its *default* mapping as ``map_b``/``map_f`` (used
  for the cells that stored no payload) and does not list ``MAP`` unless the default alone is
  its whole lineage;
- :meth:`Operator.all_to_all` marks where the entire-array optimization is safe;
- :meth:`Operator.whole_input` marks a *global dependency* (every output cell depends on
  every cell of an input: a global mean, a model fitted on the whole input), which a query
  in local scope lists instead of following;
- re-executed in tracing mode, an operator without ``FULL`` reports its exact mapping
  functions where it supports ``MAP`` (:meth:`Operator.trace_mapped`), else every cell of
  its blocks (:meth:`Operator.trace_all_to_all`);
- :attr:`Operator.parallelism` says how it splits into tasks: :data:`ELEMENTWISE` (any
  chunking, input block = output block), :func:`stencil` (input block = output block plus
  a halo), or :data:`GLOBAL` (one task sees whole inputs).

The interface lives in the core so that workflows, the engine and queries can type it; the
operator library (:mod:`operators`) builds on it: :class:`operators.ElementwiseOperator`,
:class:`operators.StencilOperator` and :class:`operators.AllToAllOperator` derive exact
mapping functions and tracing lineage from their shape, and user code subclasses
:class:`operators.UDF`.
"""

from __future__ import annotations

import copy
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from subzero.cells import Box, Ragged, as_linear
from subzero.errors import ModeError, ShapeError, WorkflowError
from subzero.frontier import mask_from_linear
from subzero.modes import Mode
from subzero.recorded import Recorded
from subzero.runtime import TaskContext

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Parallelism:
    """How an operator splits into Spark tasks.

    ``kind`` is ``"elementwise"`` (input block = output block, numpy broadcasting),
    ``"stencil"`` (with a halo ``depth`` per axis), ``"blockwise"`` (any output chunking; the
    operator's :meth:`Operator.input_box` names the exact input block of each output block:
    subarray, transpose, matrix multiply...) or ``"global"`` (a single task sees the whole
    inputs).
    """

    kind: str
    depth: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("elementwise", "stencil", "blockwise", "global"):
            raise ValueError(f"unknown parallelism {self.kind!r}")
        if any(d < 0 for d in self.depth):
            raise ValueError(f"halo depth must be non-negative. Got {self.depth}.")

    def __str__(self) -> str:
        return f"stencil{list(self.depth)}" if self.kind == "stencil" else self.kind


ELEMENTWISE = Parallelism("elementwise")
BLOCKWISE = Parallelism("blockwise")
GLOBAL = Parallelism("global")


def stencil(depth: int | Sequence[int]) -> Parallelism:
    """Stencil parallelism with a halo of ``depth`` cells (one int, or one per axis)."""
    d = (int(depth),) if np.isscalar(depth) else tuple(int(x) for x in depth)
    return Parallelism("stencil", d)


class Operator(Recorded, ABC):
    """Base class of every operator. Subclasses implement :meth:`run` and what they support.

    An operator remembers the arguments it was constructed with (:class:`Recorded`): a
    run's manifest records its class and those arguments, and later commands rebuild it
    from them, so an operator's state comes from its constructor.

    An operator instance is *bound* into a workflow, which sets :attr:`name`,
    :attr:`in_shapes`, :attr:`in_dtypes`, :attr:`out_shape` and :attr:`out_dtype`; the
    mapping functions use them.
    """

    #: How the operator splits into tasks.
    parallelism: Parallelism = ELEMENTWISE
    #: Number of inputs, or None for any number.
    n_inputs: int | None = None
    #: "builtin" or "udf" (for listings and plans).
    kind: str = "builtin"
    #: Modules the kernel imports when it first runs (kept out of import time because they
    #: are slow to import, like ``scipy.ndimage``). A run that executes in the driver's own
    #: process imports them before its clock starts, as it would start Spark first; a Spark
    #: worker imports them in its first task.
    imports: tuple[str, ...] = ()

    name: str = "?"
    in_shapes: tuple[Shape, ...] = ()
    in_dtypes: tuple[np.dtype, ...] = ()
    out_shape: Shape = ()
    out_dtype: np.dtype = np.dtype("float64")

    # -- planning --------------------------------------------------------------------------
    def supported_modes(self) -> frozenset[Mode]:
        """Lineage modes this operator can produce. BLACKBOX is always included."""
        return frozenset({Mode.BLACKBOX})

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        """Shape of the output given input shapes; raise :class:`ShapeError` if they clash."""
        return broadcast_shape(self, in_shapes)

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.result_type(*in_dtypes) if in_dtypes else np.dtype("float64")

    def params(self) -> dict[str, Any]:
        """The operator's parameters, as plain data, for the catalog."""
        return {}

    def bind(self, name: str, in_shapes: Sequence[Shape], in_dtypes: Sequence[Any]) -> "Operator":
        """A copy of this operator bound to a name and concrete input shapes and dtypes."""
        if self.n_inputs is not None and len(in_shapes) != self.n_inputs:
            raise ShapeError(
                f"operator {name!r} ({type(self).__name__}) takes {self.n_inputs} input(s); "
                f"got {len(in_shapes)}"
            )
        imports = (self.imports,) if isinstance(self.imports, str) else self.imports
        if not isinstance(imports, (tuple, list)) or not all(
                isinstance(m, str) and m for m in imports):
            raise WorkflowError(
                f"operator {name!r} ({type(self).__name__}): imports must be module names "
                f"(a tuple of strings such as ('scipy.ndimage',)); got {self.imports!r}")
        op = copy.copy(self)
        op.name = name
        op.imports = tuple(imports)
        op.in_shapes = tuple(tuple(int(v) for v in s) for s in in_shapes)
        op.in_dtypes = tuple(np.dtype(d) for d in in_dtypes)
        op.out_shape = tuple(int(v) for v in op.output_shape(op.in_shapes))
        op.out_dtype = np.dtype(op.output_dtype(op.in_dtypes))
        op.check_bound()
        return op

    def check_bound(self) -> None:
        """Hook: validate parameters against bound shapes (raise ShapeError)."""

    def input_box(self, out_box: Box, i: int) -> Box:
        """The block of input ``i`` needed to compute ``out_box`` (global coordinates)."""
        shape = self.in_shapes[i]
        if self.parallelism.kind == "global":
            return Box.full(shape)
        if self.parallelism.kind == "stencil":
            depth = self.parallelism.depth
            if len(depth) == 1:
                depth = depth * len(shape)
            if shape != self.out_shape:
                return Box.full(shape)
            return out_box.dilate(depth, shape)
        if self.parallelism.kind == "blockwise":
            raise NotImplementedError(
                f"{type(self).__name__} declares blockwise parallelism and must give input_box")
        return broadcast_box(out_box, shape, self.out_shape)

    # -- execution -------------------------------------------------------------------------
    @abstractmethod
    def run(self, ctx: TaskContext, *inputs: np.ndarray) -> np.ndarray:
        """Compute the output block ``ctx.chunk.out_box`` from the input blocks."""

    # -- a global operator from its input's chunks (optional) ------------------------------
    def combines(self, in_chunks: Shape) -> bool:
        """Whether this global operator (one input) can be computed from a small *partial*
        of each chunk of its input (chunks of shape ``in_chunks``), combined, instead of one
        task reading the whole input: the tasks that make the input's chunks compute the
        partials (:meth:`partial`), the driver combines them (:meth:`combine`), and the
        operator's tasks make its output chunks from the result (:meth:`run_combined`),
        the same bits as :meth:`run` on the whole input. Default: no."""
        return False

    def partial(self, block: np.ndarray, box: Box) -> Any:
        """The partial of input block ``box`` (plain, small, picklable data)."""
        raise NotImplementedError(f"operator {self.name!r} does not combine partials")

    def combine(self, parts: Sequence[tuple[Box, Any]]) -> Any:
        """The combined result of the partials of every chunk of the input."""
        raise NotImplementedError(f"operator {self.name!r} does not combine partials")

    def run_combined(self, ctx: TaskContext, combined: Any) -> np.ndarray:
        """Output block ``ctx.chunk.out_box`` from :meth:`combine`'s result (and its lineage,
        as :meth:`run` reports it)."""
        raise NotImplementedError(f"operator {self.name!r} does not combine partials")

    # -- mapping functions (vectorized over frontiers) -------------------------------------
    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        """Backward mapping: input-``i`` cells the output frontier depends on (bool array)."""
        raise ModeError(f"operator {self.name!r} has no backward mapping function")

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        """Forward mapping: output cells that depend on the input-``i`` frontier."""
        raise ModeError(f"operator {self.name!r} has no forward mapping function")

    def map_b_lin(self, out_lin: np.ndarray, i: int) -> np.ndarray | None:
        """:meth:`map_b` of a few cells, given and returned as sorted unique uint64 linear
        indices, in time proportional to the cells, not the arrays; None when the operator
        has no such form (the executor then maps the bool mask)."""
        return None

    def map_f_lin(self, in_lin: np.ndarray, i: int) -> np.ndarray | None:
        """:meth:`map_f` of a few cells as linear indices (see :meth:`map_b_lin`)."""
        return None

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> Any:
        """Input-``i`` cells that ``outcells`` (``(n, ndim)`` coordinates sharing one
        ``payload``) depend on, in any form :func:`subzero.cells.as_linear` takes."""
        raise ModeError(f"operator {self.name!r} has no payload function")

    def map_p_rows(self, outcells: np.ndarray, payloads: np.ndarray, i: int
                   ) -> np.ndarray | None:
        """:meth:`map_p` of many payloads at once: ``payloads`` is ``(n, width)`` uint8, one
        fixed-width payload per row of ``outcells``; returns the union of their input-``i``
        lineage as linear indices (any order, repeats allowed: the caller sorts once), or
        None when the operator has no such batch form (the
        default: a query then calls :meth:`map_p` once per distinct payload)."""
        return None

    def batches_payloads(self) -> bool:
        """Whether the operator has :meth:`map_p_rows` (a query then maps a step's payloads
        in one call, however many distinct ones it meets), which the cost models count."""
        return type(self).map_p_rows is not Operator.map_p_rows

    def map_p_rows_hits(self, outcells: np.ndarray, payloads: np.ndarray, i: int,
                        frontier_in: np.ndarray) -> np.ndarray | None:
        """:meth:`map_p_hits` of many payloads at once (rows as in :meth:`map_p_rows`):
        which rows' lineage meets ``frontier_in``, or None without a batch form."""
        return None

    def map_p_hits(self, outcells: np.ndarray, payload: bytes, i: int,
                   frontier_in: np.ndarray) -> np.ndarray:
        """Forward test of payload lineage: which of ``outcells`` (``(n, ndim)``, all sharing
        ``payload``) have input-``i`` lineage meeting ``frontier_in``. Returns a bool array.

        The default is the paper's scan, by bisection: :meth:`map_p` of a set of cells is the
        union of their lineages, so a half whose union misses the frontier is settled at once
        and only halves that meet it are split: about ``k log n`` calls for ``k`` hits among
        ``n`` cells instead of ``n``. Operators whose payload lineage has structure (a radius,
        a region) override it with a direct vectorized test.
        """
        shape = self.in_shapes[i]
        flat = frontier_in.reshape(-1)
        outcells = np.asarray(outcells)
        hits = np.zeros(len(outcells), dtype=bool)
        todo = [(0, len(outcells))] if len(outcells) else []
        while todo:
            a, b = todo.pop()
            got = as_linear(self.map_p(outcells[a:b], payload, i), shape).astype(np.intp)
            if not flat[got].any():
                continue
            if b - a == 1:
                hits[a] = True
            else:
                m = (a + b) // 2
                todo += [(m, b), (a, m)]
        return hits

    def all_to_all(self, i: int) -> bool:
        """True when the whole output maps to the whole input ``i`` and back (entire-array
        optimization; paper VI-C)."""
        return False

    def whole_input(self, i: int) -> bool:
        """True when *every* output cell depends on *every* cell of input ``i`` (a global
        mean, a model fitted on the whole input): a global dependency, which a query in
        local scope lists instead of following (:mod:`subzero.query.executor`).

        Not :meth:`all_to_all`: that one says the whole output maps to the whole input,
        which holds for elementwise operators too, whose output cells each depend on one
        input cell.

        Parameters
        ----------
        i : int
            The input's index.

        Returns
        -------
        bool
            False unless the operator says otherwise (the default).

        Examples
        --------
        >>> from operators import Binary, MeanBroadcast
        >>> MeanBroadcast().bind("m", [(4, 3)], ["f8"]).whole_input(0)
        True
        >>> Binary("add").bind("a", [(4, 3), (4, 3)], ["f8", "f8"]).whole_input(0)
        False
        """
        return False

    # -- tracing fallback ------------------------------------------------------------------
    def trace_all_to_all(self, ctx: TaskContext) -> None:
        """The paper's default for operators that expose nothing: every output cell of the
        block depends on every input cell the task read."""
        ch = ctx.chunk
        ctx.lwrite(ch.out_box, *[b for b in ch.in_boxes])

    def trace_mapped(self, ctx: TaskContext) -> None:
        """Tracing from exact mapping functions: each output cell of the block as one pair,
        with its :meth:`map_b` lineage in every input.

        What an operator that supports ``MAP`` but not ``FULL`` reports when it is
        re-executed in tracing mode (:func:`subzero.engine.tasks.run_task`), instead of
        :meth:`trace_all_to_all`: the same pairs a ``FULL`` trace of exact lineage gives.

        This is the slow path, kept exact: one mapping call per output cell and input,
        through :meth:`map_b_lin` where the operator has it (time in proportion to the
        cell's lineage), else :meth:`map_b` of a one-cell mask (a pass over both arrays
        per cell). Queries do not take it: a black-box query step of such an operator
        applies its mapping functions to the whole frontier at once
        (:class:`subzero.query.executor.QueryExecutor`). It serves direct re-execution in
        tracing mode (:func:`subzero.engine.reexec.reexecute`).

        Parameters
        ----------
        ctx : the task's context; the pairs go to ``ctx.lwrite_pairs`` and the mapping
            calls count as capture time (``ctx.capture_s``).

        Examples
        --------
        >>> from subzero.runtime import ChunkContext
        >>> class Prev(Operator):  # out[k] = x[k - 1], and out[0] = x[0]
        ...     parallelism = stencil(1)
        ...     def supported_modes(self):
        ...         return frozenset({Mode.MAP, Mode.BLACKBOX})
        ...     def run(self, ctx, x):
        ...         return x[:-1]
        ...     def map_b_lin(self, out_lin, i):
        ...         return np.unique(np.maximum(out_lin.astype(np.int64) - 1, 0)
        ...                          ).astype(np.uint64)
        >>> op = Prev().bind("prev", [(4,)], ["float64"])
        >>> ch = ChunkContext((0,), Box((1,), (3,)), (Box((0,), (4,)),), (4,), ((4,),))
        >>> ctx = TaskContext(ch, frozenset({Mode.FULL}), op.name)
        >>> op.trace_mapped(ctx)
        >>> pairs = ctx.full_pairs()
        >>> pairs.out.values.tolist(), pairs.ins[0].values.tolist()
        ([1, 2], [0, 1])
        """
        t0 = time.perf_counter()
        out_lin = ctx.chunk.out_box.linear(self.out_shape)
        ins = [self._map_b_cells(out_lin, i) for i in range(len(self.in_shapes))]
        ctx.capture_s += time.perf_counter() - t0  # lwrite_pairs counts its own time
        ctx.lwrite_pairs(Ragged.from_singletons(out_lin), *ins)

    def _map_b_cells(self, out_lin: np.ndarray, i: int) -> Ragged:
        """Per output cell of ``out_lin`` (linear indices), its input-``i`` lineage by the
        mapping functions, as one row each."""
        rows: list[np.ndarray] = []
        for o in out_lin:
            one = np.array([o], dtype=np.uint64)
            got = self.map_b_lin(one, i)
            if got is None:  # no linear form: a fresh one-cell mask (map_b may return it)
                got = np.flatnonzero(self.map_b(mask_from_linear(one, self.out_shape), i))
            rows.append(np.unique(np.asarray(got).astype(np.uint64, copy=False)))
        return Ragged.from_rows(rows)

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({ps})"


def broadcast_shape(op: Operator, in_shapes: Sequence[Shape]) -> Shape:
    """numpy broadcasting of the input shapes, with the operator named in the error."""
    if not in_shapes:
        raise ShapeError(f"operator {op.name!r} needs at least one input")
    try:
        return tuple(np.broadcast_shapes(*in_shapes))
    except ValueError:
        raise ShapeError(
            f"operator {op.name!r} ({type(op).__name__}): input shapes "
            f"{', '.join(str(tuple(s)) for s in in_shapes)} do not match"
        ) from None


def broadcast_box(out_box: Box, in_shape: Shape, out_shape: Shape) -> Box:
    """The block of a broadcast input needed for ``out_box``."""
    pad = len(out_shape) - len(in_shape)
    lo, hi = [], []
    for k, n in enumerate(in_shape):
        if n == 1 and out_shape[pad + k] != 1:
            lo.append(0)
            hi.append(1)
        else:
            lo.append(out_box.lo[pad + k])
            hi.append(out_box.hi[pad + k])
    return Box(tuple(lo), tuple(hi))
