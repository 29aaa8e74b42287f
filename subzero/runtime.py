"""The lineage runtime: chunk contexts, ``lwrite`` and lineage sinks (paper VI-A).

An operator's ``run(ctx, *inputs)`` receives a :class:`TaskContext`. When ``ctx.modes``
asks for ``FULL``, ``PAY`` or ``COMP`` lineage, the operator reports region pairs with

- ``ctx.lwrite(outcells, *incells)``: one region pair (full lineage), one cell set per input;
- ``ctx.lwrite(outcells, payload=b"...")``: one payload pair;
- ``ctx.lwrite_pairs(outcells, *incells)`` / ``ctx.lwrite_pairs(outcells, payloads=...)``:
  many pairs in one call (the fast path: per-pixel lineage of a million pixels is one call);
- ``ctx.lwrite_box(outcells, lo, hi)``: each output cell depends on a box at a fixed offset
  around it (an elementwise step, a stencil, a cleaner's flagged pixels), kept as one
  :class:`~subzero.lineage.BoxLineage` rather than a pair per cell.

Cells are in *global* coordinates, in any form :func:`subzero.cells.as_linear` accepts, or a
single integer (one linear index). The context keeps pairs per task as
:class:`~subzero.lineage.PairBatch` objects; the engine hands them to one
:class:`~subzero.lineage.LineageSink` per stored strategy when the task ends.

``lwrite`` may be called once per cell, so a call only keeps its cells as plain data (a
:class:`_CellColumn` per side); the calls become one ``PairBatch`` in bulk when the pairs
are read back, before an ``lwrite_pairs`` batch (to keep the calls' order), and whenever
more than :attr:`TaskContext.buffer_limit` calls wait. The batch is the one the
equivalent ``lwrite_pairs`` call records. Cells outside the arrays raise the
:class:`~subzero.errors.CellError` the call would have raised, at conversion time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from subzero.cells import Box, Ragged, as_linear, box_cells, size_of, strides, to_coords
from subzero.errors import CellError
from subzero.lineage import BoxedPairs, BoxLineage, PairBatch
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


_clock = time.perf_counter
#: ``lwrite_pairs`` batches of at least this many pairs of one cell on a box around it
#: (the identity, a stencil's box) are kept as a :class:`~subzero.lineage.BoxLineage`
#: (smaller ones are cheap as pairs)
IDENTITY_MIN = 4096


# the form of one held ``lwrite`` cell argument (see _CellColumn)
_COORD, _LIN, _BOX, _NONE, _ARRAY = range(5)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _one_cells(cells: Any, shape: tuple[int, ...], what: str, none_ok: bool) -> np.ndarray:
    """The linear indices of one ``lwrite`` cell argument, converted on its own.

    This is the rule a :class:`_CellColumn` follows in bulk: ``None`` is no cells when
    ``none_ok`` (an input without lineage), an integer is one linear index, and anything
    else goes to :func:`subzero.cells.as_linear`.

    Raises
    ------
    CellError
        Naming ``what`` and the bad value, as :func:`~subzero.cells.as_linear` does.

    Examples
    --------
    >>> _one_cells(7, (3, 4), "cells", False), _one_cells(None, (3, 4), "cells", True)
    (array([7], dtype=uint64), array([], dtype=uint64))
    """
    if cells is None and none_ok:
        return np.empty(0, dtype=np.uint64)
    if type(cells) is int or isinstance(cells, np.integer):
        cells = [cells]
    return as_linear(cells, shape, what)


class _CellColumn:
    """One side (the output cells, or one input's cells) of a task's buffered ``lwrite``
    calls, held as plain data and converted to linear indices in bulk.

    Per call, ``hold(cells)`` keeps a form code in ``kinds`` and the integers the form
    needs in ``ints``: a coordinate tuple of Python ints (alone or as the one item of a
    list) keeps its ``ndim`` values, a Python int (a linear index) itself, a :class:`Box`
    its ``lo`` then ``hi``, ``None`` (an input without lineage) nothing. Any other argument
    is converted at the call by :func:`_one_cells` and its linear indices kept in
    ``arrays``. Nothing refers to the caller's objects, so a list or array the caller
    reuses cannot change what was recorded, and the garbage collector has no containers
    to scan.

    :meth:`ragged` converts every held call with a few numpy operations per form (boxes
    grouped by their shape: the linear index of ``lo`` plus the shape's offsets in linear
    space); row ``k`` equals ``_one_cells`` of call ``k``'s argument.

    Parameters
    ----------
    shape : the shape of the array the cells lie in.
    what : names the cells in errors (``"lwrite(op) input 0 cells"``).
    none_ok : whether ``None`` is no cells (inputs) or an error (outputs).

    Examples
    --------
    >>> col = _CellColumn((3, 4), "cells", False)
    >>> for cells in ([(0, 1)], 5, Box((1, 1), (3, 3)), np.array([[2, 3]])):
    ...     col.hold(cells)
    >>> rows, bad = col.ragged()
    >>> [r.tolist() for r in rows.rows()], bad
    ([[1], [5], [5, 6, 9, 10], [11]], None)
    >>> col.hold((3, 0)); col.ragged()[1]     # the first call with cells outside the array
    4
    """

    __slots__ = ("shape", "what", "none_ok", "nd", "widths", "kinds", "ints", "arrays", "hold")

    def __init__(self, shape: Sequence[int], what: str, none_ok: bool) -> None:
        self.shape = tuple(int(v) for v in shape)
        self.what = what
        self.none_ok = none_ok
        nd = len(self.shape)
        self.nd = nd if nd else -1  # a 0-d array: every argument goes through as_linear
        self.widths = (nd, 1, 2 * nd, 0, 0)  # values in ``ints`` per form
        self.kinds = bytearray()
        self.ints: list[int] = []
        self.arrays: list[np.ndarray] = []
        self.hold = self._holder()

    def _holder(self) -> Callable[[Any], None]:
        """``hold(cells)``: keep one call's argument. It raises, keeping nothing, when
        ``as_linear`` refuses an argument of a form converted at the call.

        A closure over the column's lists and their bound methods, since it runs once per
        ``lwrite`` call.
        """
        nd, shape, what, none_ok = self.nd, self.shape, self.what, self.none_ok
        kind, extend, append = self.kinds.append, self.ints.extend, self.ints.append
        arrays = self.arrays

        def hold(cells: Any) -> None:
            tc = type(cells)
            if tc is list:
                if len(cells) == 1:
                    one = cells[0]
                    if type(one) is tuple and len(one) == nd:
                        for v in one:
                            if type(v) is not int:
                                break
                        else:
                            extend(one)
                            kind(_COORD)
                            return
                    elif type(one) is int:
                        append(one)
                        kind(_LIN)
                        return
            elif tc is Box:
                lo = cells.lo
                if len(lo) == nd:  # a Box holds tuples of Python ints
                    extend(lo)
                    extend(cells.hi)
                    kind(_BOX)
                    return
            elif tc is tuple:
                if len(cells) == nd:
                    for v in cells:
                        if type(v) is not int:
                            break
                    else:
                        extend(cells)
                        kind(_COORD)
                        return
            elif tc is int:
                append(cells)
                kind(_LIN)
                return
            elif cells is None and none_ok:
                kind(_NONE)
                return
            lin = _one_cells(cells, shape, what, none_ok)
            if isinstance(cells, np.ndarray) and np.may_share_memory(lin, cells):
                lin = lin.copy()  # the caller may reuse its array
            arrays.append(lin)
            kind(_ARRAY)

        return hold

    def __len__(self) -> int:
        return len(self.kinds)

    def _start(self, k: int) -> int:
        """Where call ``k``'s values begin in ``ints``."""
        return sum(map(self.widths.__getitem__, self.kinds[:k]))

    def pop(self) -> None:
        """Forget the last call (a call whose other cells were refused)."""
        kind = self.kinds.pop()
        w = self.widths[kind]
        if w:
            del self.ints[-w:]
        if kind == _ARRAY:
            self.arrays.pop()

    def clear(self) -> None:
        del self.kinds[:]
        self.ints.clear()
        self.arrays.clear()

    def cut(self, k: int) -> "_CellColumn":
        """Forget calls ``0..k``; return a column holding calls ``0..k-1``."""
        s, a = self._start(k), self.kinds[:k].count(_ARRAY)
        head = _CellColumn(self.shape, self.what, self.none_ok)
        head.kinds[:] = self.kinds[:k]
        head.ints[:] = self.ints[:s]
        head.arrays[:] = self.arrays[:a]
        kind = self.kinds[k]
        del self.kinds[:k + 1]
        del self.ints[:s + self.widths[kind]]
        del self.arrays[:a + (kind == _ARRAY)]
        return head

    def check(self, k: int) -> None:
        """Convert call ``k``'s argument on its own: raises what ``lwrite`` raised for it
        when every call was converted at once."""
        kind, s, nd, ints = self.kinds[k], self._start(k), self.nd, self.ints
        if kind == _COORD:
            cells: Any = tuple(ints[s:s + nd])
        elif kind == _LIN:
            cells = ints[s]
        elif kind == _BOX:
            cells = Box(tuple(ints[s:s + nd]), tuple(ints[s + nd:s + 2 * nd]))
        else:
            return  # None and arrays were converted at the call
        _one_cells(cells, self.shape, self.what, self.none_ok)

    def _values(self, width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``ints`` as int64, and a mask of the calls holding a value beyond int64 (which
        ``as_linear`` refuses)."""
        n, ints = len(width), self.ints
        try:
            return np.fromiter(ints, np.int64, len(ints)), np.zeros(n, dtype=bool)
        except OverflowError:
            lo, hi = _INT64
            ok = np.fromiter((lo <= v <= hi for v in ints), bool, len(ints))
            vals = np.fromiter((v if lo <= v <= hi else 0 for v in ints), np.int64, len(ints))
            over = np.zeros(n, dtype=bool)
            over[np.repeat(np.arange(n), width)[~ok]] = True
            return vals, over

    def ragged(self) -> tuple[Ragged | None, int | None]:
        """Every held call as a Ragged of linear indices (uint64, one row per call) and
        None; or None and the first call whose cells ``as_linear`` refuses."""
        n, nd, shape = len(self.kinds), max(self.nd, 0), self.shape
        kinds = np.frombuffer(bytes(self.kinds), dtype=np.uint8)
        one_form = bool(n) and kinds.min() == kinds.max()
        width = np.asarray(self.widths, dtype=np.int64)[kinds]
        vals, bad = self._values(width)
        if one_form and width[0]:  # each call's values are one row of a table: no gather
            table = vals.reshape(n, -1)
            start = None
        else:
            start = np.zeros(n, dtype=np.int64)
            np.cumsum(width[:-1], out=start[1:])
        st = [int(v) for v in strides(shape)]

        def of_form(form: int) -> np.ndarray:
            """The calls holding cells of ``form``."""
            if one_form:
                return np.arange(n) if kinds[0] == form else np.empty(0, dtype=np.int64)
            return np.flatnonzero(kinds == form)

        def column(calls: np.ndarray, j: int) -> np.ndarray:
            """Value ``j`` of each call in ``calls`` (all of one form)."""
            return table[:, j] if start is None else vals[start[calls] + j]

        lens = np.zeros(n, dtype=np.int64)
        # (calls, their linear indices end to end, cells per call: an int when uniform)
        fills: list[tuple[np.ndarray, np.ndarray, Any]] = []
        for form in (_COORD, _LIN):
            calls = of_form(form)
            if not len(calls):
                continue
            if form == _LIN:
                lin = column(calls, 0)
                out = lin.view(np.uint64) >= size_of(shape)  # negatives wrap to large values
            else:
                lin = np.zeros(len(calls), dtype=np.int64)
                out = np.zeros(len(calls), dtype=bool)
                for d in range(nd):
                    c = column(calls, d)
                    out |= c.view(np.uint64) >= shape[d]
                    lin += c * st[d]
            bad[calls] |= out
            lens[calls] = 1
            fills.append((calls, lin, 1))
        boxes = of_form(_BOX)
        if len(boxes):
            lo = [column(boxes, d) for d in range(nd)]
            hi = [column(boxes, nd + d) for d in range(nd)]
            full = np.ones(len(boxes), dtype=bool)
            outside = np.zeros(len(boxes), dtype=bool)
            for d in range(nd):
                full &= hi[d] > lo[d]
                outside |= (lo[d] < 0) | (hi[d] > shape[d])
            # an empty box has no cells wherever it lies; any other must lie inside
            bad[boxes] |= outside & full
        arrays = of_form(_ARRAY)
        if len(arrays):
            lens[arrays] = np.fromiter(map(len, self.arrays), np.int64, len(arrays))
            fills.append((arrays, np.concatenate(self.arrays), lens[arrays]))
        if bad.any():
            return None, int(np.argmax(bad))
        if len(boxes):
            fills.append(_box_cells(boxes, lo, hi, full, shape, st))
            lens[boxes] = fills[-1][2]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        if len(fills) == 1 and len(fills[0][0]) == n:  # calls of one form: cells in order
            return Ragged(fills[0][1].astype(np.uint64, copy=False), offsets), None
        values = np.empty(int(offsets[-1]), dtype=np.uint64)
        for calls, lin, counts in fills:
            if isinstance(counts, int):
                at = offsets[calls] if counts == 1 else (
                    offsets[calls][:, None] + np.arange(counts)).reshape(-1)
            else:  # each call's first cell, then the cells after it in its row
                at = np.repeat(offsets[calls] - (np.cumsum(counts) - counts), counts)
                at += np.arange(len(at))
            values[at] = lin
        return Ragged(values, offsets), None


def _box_cells(calls: np.ndarray, lo: list[np.ndarray], hi: list[np.ndarray], full: np.ndarray,
               shape: tuple[int, ...], st: list[int]) -> tuple[np.ndarray, np.ndarray, Any]:
    """The cells of boxes inside an array of ``shape`` (``lo``, ``hi``: one array per axis;
    ``full``: the boxes that are not empty), each box's in C order, boxes in order.

    Returns ``(calls, linear indices end to end, cells per box)``. Linear indices are
    ``lo``'s plus the offsets of the box's shape: one broadcast add over a grid of the
    largest box's shape with a mask per axis, or, when boxes differ so much in shape that
    the grid would be mostly masked, one add per distinct shape.
    """
    nd = len(shape)
    ext = [np.where(full, h - l, 0) for l, h in zip(lo, hi)]
    base = np.zeros(len(calls), dtype=np.int64)
    counts = np.ones(len(calls), dtype=np.int64)
    for d in range(nd):
        base += np.where(full, lo[d], 0) * st[d]
        counts *= ext[d]
    top = tuple(int(e.max()) for e in ext)
    grid_size = size_of(top)
    if len(calls) * grid_size <= 2 * int(counts.sum()) + len(calls):
        grid = np.indices(top, dtype=np.int64).reshape(nd, -1)
        offs = sum((grid[d] * st[d] for d in range(nd)), np.zeros(grid_size, dtype=np.int64))
        keep = np.ones((len(calls), grid_size), dtype=bool)
        for d in range(nd):
            keep &= grid[d] < ext[d][:, None]
        return calls, (base[:, None] + offs)[keep], counts
    sel = np.flatnonzero(full)
    key = np.zeros(len(sel), dtype=np.int64)  # each box's shape as a linear index
    for d in range(nd):
        key += (ext[d][sel] - 1) * st[d]
    parts, order = [], []
    for k in np.unique(key):
        g = sel[key == k]
        box = Box((0,) * nd, tuple(int(e) + 1 for e in np.unravel_index(int(k), shape)))
        parts.append((base[g][:, None] + box.linear(shape).astype(np.int64)).reshape(-1))
        order.append(np.repeat(g, box.size))
    # the groups' cells back in call order (a stable sort keeps each box's cells in order)
    where = np.argsort(np.concatenate(order), kind="stable")
    return calls, np.concatenate(parts)[where], counts


def _box_mask(lin: np.ndarray, shape: tuple[int, ...], box: Box) -> np.ndarray | None:
    """The cells ``lin`` (linear in ``shape``) as a mask over ``box``; None when one lies
    outside it. Through a mask of the whole array when the cells are a fair share of it
    (no division per cell), else through their coordinates."""
    size = int(np.prod(shape, dtype=np.int64))
    if size <= 8 * len(lin):
        whole = np.zeros(size, dtype=bool)
        whole[lin] = True
        mask = whole.reshape(shape)[box.slices]
        if np.count_nonzero(mask) != np.count_nonzero(whole):
            return None
        return np.ascontiguousarray(mask)
    flat = np.zeros(len(lin), dtype=np.int64)
    rest, step = lin, 1
    for n, a, b in zip(reversed(shape), reversed(box.lo), reversed(box.hi)):
        rest, c = np.divmod(rest, n)
        if len(c) and (c.min() < a or c.max() >= b):
            return None
        flat += (c - a) * step
        step *= b - a
    mask = np.zeros(box.shape, dtype=bool)
    mask.reshape(-1)[flat] = True
    return mask


def _box_offsets(keys: np.ndarray, sets: Ragged, shape: tuple[int, ...], step: np.ndarray
                 ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(lo, hi)`` when every set of ``sets`` is exactly the box ``[k + lo, k + hi)``
    around its key ``k`` (one per set, linear in ``shape``), clipped at the border, with
    ``lo <= 0 < hi``; None otherwise."""
    vals = np.asarray(sets.values, dtype=np.int64)
    offs = np.asarray(sets.offsets, dtype=np.int64)
    if len(vals) == len(keys) and np.array_equal(offs, step):  # one cell each
        return ((0,) * len(shape), (1,) * len(shape)) if np.array_equal(vals, keys) else None
    lens = np.diff(offs)
    if len(shape) == 0 or (lens == 0).any():
        return None
    first = np.zeros(len(vals), dtype=bool)
    first[offs[:-1]] = True
    if not (first[1:] | (vals[1:] > vals[:-1])).all():  # sorted, no cell twice in a set
        return None
    # a set of distinct cells inside a box of as many cells is the box itself
    vc = to_coords(vals, shape)
    kc = to_coords(keys, shape)
    lo = np.minimum.reduceat(vc, offs[:-1], axis=0) - kc
    hi = np.maximum.reduceat(vc, offs[:-1], axis=0) - kc + 1
    if not (np.prod(hi - lo, axis=1) == lens).all():
        return None
    blo, bhi = lo.min(axis=0), hi.max(axis=0)  # the unclipped box, if it is one
    if (blo > 0).any() or (bhi <= 0).any():
        return None
    n = np.asarray(shape, dtype=np.int64)
    if not (np.array_equal(lo, np.maximum(kc + blo, 0) - kc)
            and np.array_equal(hi, np.minimum(kc + bhi, n) - kc)):
        return None
    return tuple(int(v) for v in blo), tuple(int(v) for v in bhi)


class TaskContext:
    """What ``Operator.run`` receives: the chunk, the lineage modes asked for, ``lwrite``.

    Parameters
    ----------
    chunk : the task's :class:`ChunkContext`.
    modes : lineage modes to produce; ``{BLACKBOX}`` means produce none.
    op_name : for error messages.

    Attributes
    ----------
    capture_s : seconds spent recording lineage: in ``lwrite`` and ``lwrite_pairs`` calls
        and in converting buffered calls.
    buffer_limit : ``lwrite`` calls buffered before they are converted (bounded memory).
    """

    buffer_limit: int = 1 << 16

    def __init__(self, chunk: ChunkContext, modes: frozenset[Mode], op_name: str = "?") -> None:
        self.chunk = chunk
        self.modes = frozenset(modes)
        self.op_name = op_name
        self._full: list[PairBatch] = []
        self._pay: list[PairBatch] = []
        self._n_in = len(chunk.in_shapes)
        # lwrite calls not converted yet: full pairs (output, then each input) ...
        what = f"lwrite({op_name})"
        self._out_cells = _CellColumn(chunk.out_shape, f"{what} output cells", False)
        self._in_cells = tuple(_CellColumn(shape, f"{what} input {i} cells", True)
                               for i, shape in enumerate(chunk.in_shapes))
        # ... and payload pairs (output cells, payload bytes end to end, their lengths)
        self._pay_cells = _CellColumn(chunk.out_shape, f"{what} output cells", False)
        self._pay_bytes = bytearray()
        self._pay_lens: list[int] = []
        # looked up once per lwrite call
        self._out_kinds = self._out_cells.kinds
        self._hold_out = self._out_cells.hold
        self._hold_ins = tuple(col.hold for col in self._in_cells)
        self._hold_pay = self._pay_cells.hold
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
    def lwrite(self, outcells: Any, *incells: Any, payload: bytes | None = None) -> None:
        """Record one region pair: ``outcells`` depend on ``incells`` (or on a payload).

        The call is buffered and converted with the calls around it; the pairs are those
        of one :meth:`lwrite_pairs` call with the same cells, in call order.

        Parameters
        ----------
        outcells : output cells: a coordinate tuple, a list of them, a linear index, a
            :class:`~subzero.cells.Box`, or any form :func:`~subzero.cells.as_linear`
            accepts.
        *incells : one cell set per input, in the same forms, or ``None`` for an input
            without lineage. Not given with a payload.
        payload : bytes stored for the output cells instead of input cells (PAY, COMP).

        Raises
        ------
        CellError
            Naming the operator and the bad value. At the call: cells for the wrong
            number of inputs, cells and a payload together, or cells in a form
            ``as_linear`` refuses. Coordinates, linear indices and boxes outside the
            arrays are found when the calls are converted (reading the pairs back, a
            later ``lwrite_pairs``, a full buffer), which then raises; the refused call
            records nothing and the calls before and after it are kept.

        Examples
        --------
        >>> ctx.lwrite(Box((0, 0), (2, 2)), np.array([[5, 5]]))     # doctest: +SKIP
        >>> ctx.lwrite([(3, 4)], payload=b"\\x03")                   # doctest: +SKIP
        """
        t = _clock()
        if payload is None:
            if len(incells) != self._n_in:
                raise CellError(
                    f"lwrite({self.op_name}): got cells for {len(incells)} inputs; the operator "
                    f"has {self._n_in} (pass None for an input with no lineage)"
                )
            self._hold_out(outcells)
            holds = self._hold_ins
            try:
                if len(holds) == 1:
                    holds[0](incells[0])
                else:
                    for hold, cells in zip(holds, incells):
                        hold(cells)
            except BaseException:  # the call records nothing
                n = len(self._out_cells) - 1
                for col in (self._out_cells,) + self._in_cells:
                    if len(col) > n:
                        col.pop()
                raise
            if len(self._out_kinds) > self.buffer_limit:
                self._convert_full()
        else:
            if incells:
                raise CellError(f"lwrite({self.op_name}): give input cells or a payload, not both")
            if type(payload) is not bytes:
                payload = bytes(payload)  # a copy: the caller may reuse a bytearray
            self._hold_pay(outcells)
            self._pay_bytes += payload
            self._pay_lens.append(len(payload))
            if len(self._pay_lens) > self.buffer_limit:
                self._convert_pay()
        self.capture_s += _clock() - t

    def _convert_full(self) -> None:
        """Buffered full-lineage calls -> one PairBatch after the task's others."""
        cols = (self._out_cells,) + self._in_cells
        if not len(cols[0]):
            return
        got = [col.ragged() for col in cols]
        bad = [k for _, k in got if k is not None]
        if bad:
            k = min(bad)
            err = self._refused(cols, k)
            heads = [col.cut(k) for col in cols]  # the calls before k are kept
            if k:
                rows = [head.ragged()[0] for head in heads]
                self._full.append(PairBatch(rows[0], ins=tuple(rows[1:])))
            raise err
        self._full.append(PairBatch(got[0][0], ins=tuple(r for r, _ in got[1:])))
        for col in cols:
            col.clear()

    def _convert_pay(self) -> None:
        """Buffered payload calls -> one PairBatch after the task's others."""
        col, lens = self._pay_cells, self._pay_lens
        if not len(col):
            return
        out, k = col.ragged()
        if k is not None:
            err = self._refused((col,), k)
            head, cut = col.cut(k), sum(lens[:k])
            if k:
                self._pay.append(PairBatch(head.ragged()[0], payload=Ragged.from_lengths(
                    np.frombuffer(self._pay_bytes, dtype=np.uint8, count=cut).copy(),
                    np.asarray(lens[:k], dtype=np.int64))))
            del self._pay_bytes[:cut + lens[k]]
            del lens[:k + 1]
            raise err
        pay = np.frombuffer(self._pay_bytes, dtype=np.uint8).copy()
        self._pay.append(PairBatch(out, payload=Ragged.from_lengths(
            pay, np.asarray(lens, dtype=np.int64))))
        col.clear()
        del self._pay_bytes[:]
        lens.clear()

    def _refused(self, cols: Sequence[_CellColumn], k: int) -> Exception:
        """The error buffered call ``k`` raises when converted alone (its output cells
        first, then each input's)."""
        for col in cols:
            try:
                col.check(k)
            except Exception as e:  # noqa: BLE001 - raised by the caller
                return e
        return CellError(f"lwrite({self.op_name}): call {k} of the task has cells outside "
                         f"the arrays")

    def lwrite_box(self, outcells: Any, lo: Any, hi: Any, inputs: Any = None) -> None:
        """Record that each cell ``c`` of ``outcells`` depends on the cells ``[c + lo,
        c + hi)`` (clipped at the border) of each input of ``inputs``.

        Where the inputs have the output's shape and ``lo <= 0 < hi`` on every axis, the
        call is kept as one :class:`~subzero.lineage.BoxLineage` (a mask of the block's
        cells): an encoding that stores structure never expands it into pairs, so an
        elementwise step's identity (``lo=0, hi=1``) over a million pixels costs about a
        mask. Otherwise the equivalent pairs are recorded.

        Parameters
        ----------
        outcells : a bool mask of the task's output block (``ctx.chunk.out_box``'s
            shape), or global cells in any form :func:`~subzero.cells.as_linear` accepts.
        lo, hi : the box's corners relative to the cell, an int or one per axis (the
            3 x 3 box around a pixel is ``lo=-1, hi=2``).
        inputs : an input index or a sequence of them (default: every input).

        Raises
        ------
        CellError
            For cells outside the output, ``lo > hi`` on an axis, or an unknown input.

        Examples
        --------
        >>> ctx.lwrite_box(flagged, -2, 3)     # flagged pixels: their 5 x 5 box  # doctest: +SKIP
        >>> ctx.lwrite_box(~flagged, 0, 1)     # the others: themselves            # doctest: +SKIP
        """
        t = _clock()
        what = f"lwrite_box({self.op_name})"
        box, shape = self.chunk.out_box, tuple(self.chunk.out_shape)
        nd = len(shape)
        try:
            lo_ = np.broadcast_to(np.asarray(lo, dtype=np.int64), (nd,))
            hi_ = np.broadcast_to(np.asarray(hi, dtype=np.int64), (nd,))
        except (TypeError, ValueError):
            raise CellError(f"{what}: lo and hi must be integers, one per axis of "
                            f"{shape}. Got lo={lo!r}, hi={hi!r}.") from None
        if (lo_ > hi_).any():
            raise CellError(f"{what}: lo {tuple(lo_.tolist())} must not exceed hi "
                            f"{tuple(hi_.tolist())}")
        if inputs is None:
            picked = set(range(self._n_in))
        else:
            picked = {int(i) for i in np.atleast_1d(np.asarray(inputs)).reshape(-1)}
            if any(not 0 <= i < self._n_in for i in picked):
                raise CellError(f"{what}: inputs {sorted(picked)} are not all among the "
                                f"operator's inputs 0..{self._n_in - 1}")
        flags = tuple(i in picked for i in range(self._n_in))
        cells = np.asarray(outcells) if not isinstance(outcells, (Box, Ragged)) else None
        if cells is not None and cells.dtype == bool and cells.shape == box.shape:
            mask = cells
        else:
            lin = as_linear(outcells, shape, f"{what} output cells")
            c = to_coords(lin, shape) - np.asarray(box.lo, dtype=np.int64)
            inside = ((c >= 0) & (c < np.asarray(box.shape, dtype=np.int64))).all(axis=1)
            mask = np.zeros(box.shape, dtype=bool)
            mask[tuple(c[inside].T)] = True
            if not inside.all():  # cells beyond the block: as pairs
                self._box_pairs(lin[~inside], lo_, hi_, flags, what)
        regular = ((lo_ <= 0).all() and (hi_ > 0).all() and all(
            tuple(s) == shape for s, f in zip(self.chunk.in_shapes, flags) if f))
        part = BoxLineage(box, mask, tuple(int(v) for v in lo_), tuple(int(v) for v in hi_),
                          flags, shape)
        self._convert_full()
        if regular:
            self._full.append(part)
        else:
            self._box_pairs(part.keys(), lo_, hi_, flags, what)
        self.capture_s += _clock() - t

    def _box_pairs(self, lin: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   flags: tuple[bool, ...], what: str) -> None:
        """:meth:`lwrite_box` of the cells ``lin`` as pairs: each box clipped to the input
        it is read from."""
        self._convert_full()
        c = to_coords(lin, self.chunk.out_shape)
        ins = []
        for s, f in zip(self.chunk.in_shapes, flags):
            if not f:
                ins.append(Ragged.empty(len(lin)))
                continue
            if len(s) != len(self.chunk.out_shape):
                raise CellError(f"{what}: an input of shape {tuple(s)} has another rank "
                                f"than the output's {tuple(self.chunk.out_shape)}")
            a = np.maximum(c + lo, 0)
            b = np.maximum(np.minimum(c + hi, np.asarray(s, dtype=np.int64)), a)
            ins.append(box_cells(a, b, s))
        self._full.append(PairBatch(Ragged.from_singletons(lin), ins=tuple(ins)))

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
        Buffered ``lwrite`` calls are converted first, so the pairs stay in call order.
        """
        t = _clock()
        if payloads is None:
            self._convert_full()
        else:
            self._convert_pay()
        what = f"lwrite_pairs({self.op_name})"
        out = self._side(outcells, self.chunk.out_shape, None, f"{what} output cells")
        n = len(out)
        if payloads is not None:
            if incells:
                raise CellError(f"{what}: give input cells or payloads, not both")
            self._pay.append(PairBatch(out, payload=_payload_ragged(payloads, n)))
        else:
            if len(incells) != self._n_in:
                raise CellError(
                    f"{what}: got cells for {len(incells)} inputs; the operator has "
                    f"{self._n_in} (pass None for an input with no lineage)"
                )
            ins = tuple(
                Ragged.empty(n)
                if c is None
                else self._side(c, self.chunk.in_shapes[i], n, f"{what} input {i} cells")
                for i, c in enumerate(incells)
            )
            self._full.append(self._identity(out, ins) or PairBatch(out, ins=ins))
        self.capture_s += _clock() - t

    def _identity(self, out: Ragged, ins: tuple[Ragged, ...]) -> BoxLineage | None:
        """The pairs ``out -> ins`` as a :class:`BoxLineage` when each is one output cell
        (inside the block) on, per input, nothing or the box around it at one offset for
        the whole batch (clipped at the border; the identity is the box of one cell) of
        an input of the output's shape; None otherwise (and for small batches, which are
        cheap as pairs)."""
        n = len(out)
        shape = tuple(self.chunk.out_shape)
        if n < IDENTITY_MIN or len(out.values) != n:
            return None
        step = np.arange(n + 1, dtype=np.int64)
        if not np.array_equal(out.offsets, step):
            return None
        box = self.chunk.out_box
        keys = np.asarray(out.values, dtype=np.int64)
        mask = _box_mask(keys, shape, box)
        if mask is None:
            return None
        flags, corners, seen = [], None, {}
        for r, s in zip(ins, self.chunk.in_shapes):
            if len(r.values) == 0:
                flags.append(False)
                continue
            if tuple(s) != shape:
                return None
            got = seen.get(id(r))
            if got is None:
                got = seen[id(r)] = (r, _box_offsets(keys, r, shape, step))
            if got[1] is None or (corners is not None and got[1] != corners):
                return None
            corners = got[1]
            flags.append(True)
        if corners is None:
            return None
        return BoxLineage(box, mask, corners[0], corners[1], tuple(flags), shape)

    # -- what the runtime reads back ------------------------------------------------------
    def full_pairs(self) -> PairBatch | None:
        """The task's full region pairs in call order (buffered calls converted now), or
        None when there are none."""
        self._convert_pending()
        return PairBatch.concat([b.expand() if isinstance(b, BoxLineage) else b
                                 for b in self._full])

    def full_lineage(self) -> PairBatch | BoxedPairs | None:
        """The task's full lineage as the engine stores it: :meth:`full_pairs`, or, when
        some of it was recorded as boxes (:meth:`lwrite_box`), a
        :class:`~subzero.lineage.BoxedPairs` that keeps those unexpanded."""
        self._convert_pending()
        parts = tuple(b for b in self._full if isinstance(b, BoxLineage))
        if not parts:
            return PairBatch.concat(self._full)
        pairs = PairBatch.concat([b for b in self._full if not isinstance(b, BoxLineage)])
        return BoxedPairs(pairs, parts)

    def _convert_pending(self) -> None:
        if len(self._out_cells):
            t = _clock()
            try:
                self._convert_full()
            finally:
                self.capture_s += _clock() - t

    def payload_pairs(self) -> PairBatch | None:
        """The task's payload pairs in call order (buffered calls converted now), or None
        when there are none."""
        if self._pay_lens:
            t = _clock()
            try:
                self._convert_pay()
            finally:
                self.capture_s += _clock() - t
        return PairBatch.concat(self._pay)

    def pairs_for(self, strategy: Strategy) -> PairBatch | None:
        """The pairs stored for ``strategy``: full pairs for FULL, payload pairs for PAY
        and COMP, None otherwise."""
        if strategy.mode is Mode.FULL:
            return self.full_pairs()
        if strategy.mode in (Mode.PAY, Mode.COMP):
            return self.payload_pairs()
        return None


__all__ = ["ChunkContext", "TaskContext"]
