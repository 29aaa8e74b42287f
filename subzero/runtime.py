"""The lineage runtime: chunk contexts, ``lwrite`` and lineage sinks (paper VI-A).

An operator's ``run(ctx, *inputs)`` receives a :class:`TaskContext`. When ``ctx.modes``
asks for ``FULL``, ``PAY`` or ``COMP`` lineage, the operator reports region pairs with

- ``ctx.lwrite(outcells, *incells)``: one region pair (full lineage), one cell set per input;
- ``ctx.lwrite(outcells, payload=b"...")``: one payload pair;
- ``ctx.lwrite_pairs(outcells, *incells)`` / ``ctx.lwrite_pairs(outcells, payloads=...)``:
  many pairs in one call (the fast path: per-pixel lineage of a million pixels is one call).

Cells are in *global* coordinates, in any form :func:`subzero.cells.as_linear` accepts. The
context buffers pairs per task as :class:`~subzero.lineage.PairBatch` objects; the engine
hands them to one :class:`~subzero.lineage.LineageSink` per stored strategy when the task
ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from subzero.cells import Box, Ragged, as_linear
from subzero.errors import CellError
from subzero.lineage import PairBatch
from subzero.modes import Mode, Strategy


@dataclass(frozen=True)
class ChunkContext:
    """Where one task's block lies: given explicitly to kernels, never inferred.

    Attributes
    ----------
    index : grid index of the output chunk.
    out_box : global box of the output block the task computes.
    in_boxes : global box of each input block handed to ``run`` (a stencil's block
        includes its halo, clipped at the array border).
    out_shape, in_shapes : shapes of the whole arrays.
    """

    index: tuple[int, ...]
    out_box: Box
    in_boxes: tuple[Box, ...]
    out_shape: tuple[int, ...]
    in_shapes: tuple[tuple[int, ...], ...]

    def interior(self, i: int) -> tuple[slice, ...]:
        """Slices of input block ``i`` that cover the output box (to trim a halo)."""
        return self.out_box.relative_to(self.in_boxes[i])

    def out_cells(self, local: np.ndarray) -> np.ndarray:
        """Local coordinates in the output block -> global ``(n, ndim)`` coordinates."""
        return np.asarray(local, dtype=np.int64).reshape(-1, len(self.out_shape)) + np.asarray(
            self.out_box.lo, dtype=np.int64
        )

    def in_cells(self, i: int, local: np.ndarray) -> np.ndarray:
        """Local coordinates in input block ``i`` -> global coordinates in input ``i``."""
        return np.asarray(local, dtype=np.int64).reshape(-1, len(self.in_shapes[i])) + np.asarray(
            self.in_boxes[i].lo, dtype=np.int64
        )


def _payload_ragged(payloads: Any, n: int) -> Ragged:
    if isinstance(payloads, Ragged):
        if len(payloads) != n:
            raise CellError(f"lwrite_pairs: {len(payloads)} payloads for {n} pairs")
        return Ragged(np.asarray(payloads.values, dtype=np.uint8), payloads.offsets)
    if isinstance(payloads, (bytes, bytearray, memoryview)):
        one = np.frombuffer(bytes(payloads), dtype=np.uint8)
        return Ragged(np.tile(one, n), np.arange(n + 1, dtype=np.int64) * len(one))
    arr = payloads if isinstance(payloads, np.ndarray) else None
    if arr is not None and arr.ndim == 2:
        if len(arr) != n:
            raise CellError(f"lwrite_pairs: {len(arr)} payload rows for {n} pairs")
        return Ragged.from_dense(np.ascontiguousarray(arr).view(np.uint8).reshape(n, -1))
    rows = list(payloads)
    if len(rows) != n:
        raise CellError(f"lwrite_pairs: {len(rows)} payloads for {n} pairs")
    return Ragged.from_rows([np.frombuffer(bytes(p), dtype=np.uint8) for p in rows], np.uint8)


class TaskContext:
    """What ``Operator.run`` receives: the chunk, the lineage modes asked for, ``lwrite``.

    Parameters
    ----------
    chunk : the task's :class:`ChunkContext`.
    modes : lineage modes to produce; ``{BLACKBOX}`` means produce none.
    op_name : for error messages.
    """

    def __init__(self, chunk: ChunkContext, modes: frozenset[Mode], op_name: str = "?") -> None:
        self.chunk = chunk
        self.modes = frozenset(modes)
        self.op_name = op_name
        self._full: list[PairBatch] = []
        self._pay: list[PairBatch] = []
        self.capture_s = 0.0

    # -- what the operator should produce -------------------------------------------------
    @property
    def full(self) -> bool:
        """Whether full region pairs are wanted (tracing mode is ``{FULL}``)."""
        return Mode.FULL in self.modes

    @property
    def payload(self) -> bool:
        """Whether payload pairs for *every* output cell with lineage are wanted (PAY)."""
        return Mode.PAY in self.modes

    @property
    def composite(self) -> bool:
        """Whether payload pairs for the cells that differ from the mapping are wanted."""
        return Mode.COMP in self.modes

    @property
    def n_inputs(self) -> int:
        return len(self.chunk.in_shapes)

    # -- lwrite ---------------------------------------------------------------------------
    def _out(self, cells: Any) -> np.ndarray:
        return as_linear(cells, self.chunk.out_shape, f"lwrite({self.op_name}) output cells")

    def _in(self, i: int, cells: Any) -> np.ndarray:
        if cells is None:
            return np.empty(0, dtype=np.uint64)
        return as_linear(cells, self.chunk.in_shapes[i], f"lwrite({self.op_name}) input {i} cells")

    def lwrite(self, outcells: Any, *incells: Any, payload: bytes | None = None) -> None:
        """Record one region pair: ``outcells`` depend on ``incells`` (or on a payload).

        >>> ctx.lwrite(Box((0, 0), (2, 2)), np.array([[5, 5]]))     # doctest: +SKIP
        >>> ctx.lwrite([(3, 4)], payload=b"\\x03")                   # doctest: +SKIP
        """
        t = time.perf_counter()
        out = self._out(outcells)
        if payload is not None:
            if incells:
                raise CellError(f"lwrite({self.op_name}): give input cells or a payload, not both")
            pay = np.frombuffer(bytes(payload), dtype=np.uint8)
            self._pay.append(
                PairBatch(
                    Ragged(out, np.array([0, len(out)], dtype=np.int64)),
                    payload=Ragged(pay, np.array([0, len(pay)], dtype=np.int64)),
                )
            )
        else:
            if len(incells) != self.n_inputs:
                raise CellError(
                    f"lwrite({self.op_name}): got cells for {len(incells)} inputs; the operator "
                    f"has {self.n_inputs} (pass None for an input with no lineage)"
                )
            ins = tuple(self._in(i, c) for i, c in enumerate(incells))
            self._full.append(
                PairBatch(
                    Ragged(out, np.array([0, len(out)], dtype=np.int64)),
                    ins=tuple(Ragged(v, np.array([0, len(v)], dtype=np.int64)) for v in ins),
                )
            )
        self.capture_s += time.perf_counter() - t

    def _side(self, cells: Any, shape: tuple[int, ...], n: int | None, what: str) -> Ragged:
        if isinstance(cells, Ragged):
            vals = np.asarray(cells.values)
            if vals.size and not np.issubdtype(vals.dtype, np.integer):
                raise CellError(f"{what}: Ragged values must be linear indices (integers)")
            lin = as_linear(vals.astype(np.uint64, copy=False), shape, what) if vals.size else (
                np.empty(0, dtype=np.uint64))
            r = Ragged(lin, np.asarray(cells.offsets, dtype=np.int64))
        else:
            arr = np.asarray(cells)
            if arr.ndim == 3:  # (n, k, ndim) coordinates: k cells per pair
                k = arr.shape[1]
                lin = as_linear(arr.reshape(-1, arr.shape[2]), shape, what)
                r = Ragged(lin, np.arange(arr.shape[0] + 1, dtype=np.int64) * k)
            else:
                r = Ragged.from_singletons(as_linear(arr, shape, what))
        if n is not None and len(r) != n:
            raise CellError(f"{what}: {len(r)} cell sets for {n} pairs")
        return r

    def lwrite_pairs(self, outcells: Any, *incells: Any, payloads: Any = None) -> None:
        """Record many region pairs at once.

        ``outcells`` is a :class:`Ragged` of linear indices (one set per pair), or an
        ``(n, ndim)`` coordinate array / 1-d linear array (one cell per pair). Each of
        ``incells`` is a Ragged, a one-cell-per-pair array, an ``(n, k, ndim)`` coordinate
        array (k cells per pair) or ``None`` (no lineage in that input). ``payloads`` is one
        ``bytes`` for all pairs, a list of bytes, a 2-d array (one row per pair) or a Ragged.
        """
        t = time.perf_counter()
        what = f"lwrite_pairs({self.op_name})"
        out = self._side(outcells, self.chunk.out_shape, None, f"{what} output cells")
        n = len(out)
        if payloads is not None:
            if incells:
                raise CellError(f"{what}: give input cells or payloads, not both")
            self._pay.append(PairBatch(out, payload=_payload_ragged(payloads, n)))
        else:
            if len(incells) != self.n_inputs:
                raise CellError(
                    f"{what}: got cells for {len(incells)} inputs; the operator has "
                    f"{self.n_inputs} (pass None for an input with no lineage)"
                )
            ins = tuple(
                Ragged.empty(n)
                if c is None
                else self._side(c, self.chunk.in_shapes[i], n, f"{what} input {i} cells")
                for i, c in enumerate(incells)
            )
            self._full.append(PairBatch(out, ins=ins))
        self.capture_s += time.perf_counter() - t

    # -- what the runtime reads back ------------------------------------------------------
    def full_pairs(self) -> PairBatch | None:
        return PairBatch.concat(self._full)

    def payload_pairs(self) -> PairBatch | None:
        return PairBatch.concat(self._pay)

    def pairs_for(self, strategy: Strategy) -> PairBatch | None:
        if strategy.mode is Mode.FULL:
            return self.full_pairs()
        if strategy.mode in (Mode.PAY, Mode.COMP):
            return self.payload_pairs()
        return None


__all__ = ["ChunkContext", "TaskContext"]
