"""Lineage as data: batches of region pairs, the spec of one shard, and the sink interface.

A task's ``lwrite`` calls (:mod:`subzero.runtime`) are buffered as :class:`PairBatch` es (CSR
rows of linear indices); when the task ends, the engine hands them to one
:class:`LineageSink` per stored strategy, described by a :class:`ShardSpec`. The encoders
(:mod:`encoders.sink`) implement the sink that writes LMDB shards; :class:`MemorySink`
keeps pairs in memory (tests, statistics). :func:`payload_lineage` applies an operator's
payload functions to pairs (a query's shards, or the lineage checker's pairs in memory).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from subzero.cells import Box, Ragged, as_linear, box_cells, to_coords, unique
from subzero.frontier import Frontier
from subzero.modes import Strategy


@dataclass
class PairBatch:
    """A batch of region pairs in CSR form (linear indices, uint64).

    Full pairs have ``ins`` (one :class:`Ragged` per input, aligned with ``out``); payload
    pairs have ``payload`` (a Ragged of uint8 bytes, aligned with ``out``).
    """

    out: Ragged
    ins: tuple[Ragged, ...] | None = None
    payload: Ragged | None = None

    def __post_init__(self) -> None:
        if (self.ins is None) == (self.payload is None):
            raise ValueError("a PairBatch holds either input cells or payloads")

    @property
    def is_payload(self) -> bool:
        return self.payload is not None

    def __len__(self) -> int:
        return len(self.out)

    @property
    def out_cells(self) -> int:
        return int(len(self.out.values))

    @property
    def in_cells(self) -> int:
        return int(sum(len(r.values) for r in self.ins)) if self.ins else 0

    @classmethod
    def concat(cls, batches: Sequence["PairBatch"]) -> "PairBatch | None":
        batches = [b for b in batches if b is not None]
        if not batches:
            return None
        if len(batches) == 1:
            return batches[0]
        out = Ragged.concat([b.out for b in batches])
        if batches[0].is_payload:
            return cls(out, payload=Ragged.concat([b.payload for b in batches]))
        n_in = len(batches[0].ins)
        ins = tuple(Ragged.concat([b.ins[i] for b in batches]) for i in range(n_in))
        return cls(out, ins=ins)

    def payload_bytes(self, k: int) -> bytes:
        return self.payload.row(k).tobytes()

    def restrict(self, out_lin: np.ndarray) -> "PairBatch":
        """The payload pairs meeting ``out_lin`` (output linear indices), each restricted
        to those output cells, as a shard's ``payload_pairs`` answers (vectorized).

        >>> b = PairBatch(Ragged.from_rows([[1, 2], [3], [4, 5]]),
        ...               payload=Ragged.from_rows([[7], [8], [9]], np.uint8))
        >>> r = b.restrict(np.array([2, 4, 5], np.uint64))
        >>> [x.tolist() for x in r.out.rows()], r.payload.values.tolist()
        ([[2], [4, 5]], [7, 9])
        """
        if not self.is_payload:
            raise ValueError("restrict takes payload pairs")
        want = np.asarray(out_lin).astype(self.out.values.dtype, copy=False)
        hit = np.isin(self.out.values, want)
        lens = np.bincount(self.out.row_ids()[hit], minlength=len(self))
        keep = np.flatnonzero(lens)
        return PairBatch(Ragged.from_lengths(self.out.values[hit], lens[keep]),
                         payload=self.payload.take(keep))


@dataclass(frozen=True, eq=False)
class BoxLineage:
    """Cells of one output block that each depend on a box at a fixed offset around them.

    Output cell ``c`` (a cell of ``mask``, a bool array over ``box``) depends on the input
    cells ``[c + lo, c + hi)``, clipped at the array's border, of every input ``i`` with
    ``inputs[i]`` (on none of the others). ``shape`` is the output's shape and every such
    input's. ``lo <= 0 < hi`` per axis, so every cell's box holds the cell itself.

    This is the regular lineage operators declare in bulk (an elementwise step's identity,
    ``lo = 0, hi = 1``; a stencil's box; a cleaner's flagged pixels and their 5 x 5 box),
    kept as a mask so that an encoding that stores structure (FullCompact) never expands it
    into pairs; :meth:`expand` gives the pairs for every other encoding.

    >>> b = BoxLineage(Box((0, 0), (2, 3)), np.array([[1, 0, 0], [0, 0, 1]], bool),
    ...                (0, 0), (1, 2), (True,), (2, 3))
    >>> p = b.expand()
    >>> p.out.values.tolist(), [r.tolist() for r in p.ins[0].rows()]
    ([0, 5], [[0, 1], [5]])
    >>> len(b), b.in_cells
    (2, 3)
    """

    box: Box
    mask: np.ndarray
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    inputs: tuple[bool, ...]
    shape: tuple[int, ...]

    def __len__(self) -> int:
        return int(np.count_nonzero(self.mask))

    def coords(self) -> np.ndarray:
        """The cells' global coordinates, ``(n, ndim)`` int64, in C order."""
        return np.argwhere(self.mask).astype(np.int64) + np.asarray(self.box.lo, np.int64)

    def keys(self) -> np.ndarray:
        """The cells' linear indices in the output (sorted, uint64)."""
        flat = np.flatnonzero(self.mask.reshape(-1))
        return self.box.linear(self.shape)[flat]

    def _extents(self) -> list[np.ndarray]:
        """Per axis, the clipped box extent of every coordinate of ``box`` on that axis."""
        out = []
        for a, b, l, h, n in zip(self.box.lo, self.box.hi, self.lo, self.hi, self.shape):
            x = np.arange(a, b, dtype=np.int64)
            out.append(np.minimum(x + h, n) - np.maximum(x + l, 0))
        return out

    @property
    def in_cells(self) -> int:
        """Input cells over all of the cells' boxes and inputs (as ``PairBatch.in_cells``)."""
        k = sum(self.inputs)
        if not k or not self.mask.any():
            return 0
        if all(h - l == 1 for l, h in zip(self.lo, self.hi)):
            return k * len(self)
        w = np.ones((), dtype=np.int64)
        for e in self._extents():
            w = np.multiply.outer(w, e)
        return k * int(w[self.mask].sum())

    def where(self, mask: np.ndarray) -> "BoxLineage":
        """The same lineage for the cells of ``mask`` (over ``box``) only."""
        return BoxLineage(self.box, self.mask & mask, self.lo, self.hi, self.inputs,
                          self.shape)

    def expand(self) -> "PairBatch":
        """The lineage as pairs: one per cell, in C order, its box's cells sorted."""
        c = self.coords()
        n = len(c)
        out = Ragged.from_singletons(self.keys())
        lo = np.maximum(c + np.asarray(self.lo, np.int64), 0)
        hi = np.minimum(c + np.asarray(self.hi, np.int64), np.asarray(self.shape, np.int64))
        cells = box_cells(lo, hi, self.shape) if any(self.inputs) else None
        return PairBatch(out, ins=tuple(cells if f else Ragged.empty(n)
                                        for f in self.inputs))


@dataclass(frozen=True, eq=False)
class BoxedPairs:
    """A task's FULL lineage as explicit ``pairs`` plus :class:`BoxLineage` ``parts``.

    A cell in several of them depends on the union of their sets, as with pairs. Sinks of
    encodings that take it as it is (:attr:`encoders.base.Encoding.boxes`) keep the parts
    unexpanded; the others store :meth:`expand`.
    """

    pairs: PairBatch | None
    parts: tuple[BoxLineage, ...]

    is_payload = False

    def __len__(self) -> int:
        return (len(self.pairs) if self.pairs is not None else 0) + sum(
            len(p) for p in self.parts)

    @property
    def out_cells(self) -> int:
        return (self.pairs.out_cells if self.pairs is not None else 0) + sum(
            len(p) for p in self.parts)

    @property
    def in_cells(self) -> int:
        return (self.pairs.in_cells if self.pairs is not None else 0) + sum(
            p.in_cells for p in self.parts)

    def expand(self) -> PairBatch | None:
        """Every part as pairs, after the explicit pairs."""
        return PairBatch.concat([self.pairs, *(p.expand() for p in self.parts)])


def as_pairs(batch: "PairBatch | BoxedPairs | None") -> PairBatch | None:
    """``batch`` as a :class:`PairBatch` (a :class:`BoxedPairs` expanded)."""
    return batch.expand() if isinstance(batch, BoxedPairs) else batch


@dataclass(frozen=True)
class ShardSpec:
    """What a sink needs to know about the shard it writes (a frozen spec, no I/O)."""

    path: str  # the shard's directory (:func:`subzero.engine.layout.shard_dir`)
    run: str
    op: str
    strategy: Strategy
    chunk: tuple[int, ...]
    out_box: Box
    out_shape: tuple[int, ...]
    in_shapes: tuple[tuple[int, ...], ...]
    attempt: int = 0


class LineageSink(ABC):
    """Receives one task's region pairs for one strategy and stores them somewhere.

    ``write`` may be called several times; ``close`` publishes what was written and returns
    plain-data statistics for the catalog; ``abort`` discards it.
    """

    @abstractmethod
    def write(self, batch: PairBatch) -> None: ...

    @abstractmethod
    def close(self) -> dict[str, Any]: ...

    def abort(self) -> None:  # pragma: no cover - default: nothing to clean
        pass


class MemorySink(LineageSink):
    """Keeps pairs in memory: for tests, re-execution and the statistics pass."""

    def __init__(self, spec: ShardSpec | None = None) -> None:
        self.spec = spec
        self.batches: list[PairBatch] = []

    def write(self, batch: "PairBatch | BoxedPairs") -> None:
        self.batches.append(as_pairs(batch))

    def close(self) -> dict[str, Any]:
        b = PairBatch.concat(self.batches)
        return {
            "pairs": len(b) if b else 0,
            "out_cells": b.out_cells if b else 0,
            "in_cells": b.in_cells if b else 0,
            "data_bytes": 0,
            "index_bytes": 0,
        }

    @property
    def pairs(self) -> PairBatch | None:
        return PairBatch.concat(self.batches)


#: ``pairs_for(out_lin, frontier)``: the payload pairs meeting the output cells ``out_lin``
#: (restricted to them), every pair when None; ``frontier`` (or None) lets a provider skip
#: stores that hold none of its cells
PairsFor = Callable[[np.ndarray | None, Frontier | None], "PairBatch | None"]


def group_by_payload(pairs: PairBatch | None) -> list[tuple[bytes, np.ndarray]]:
    """``[(payload, output linear indices)]``, one group per distinct payload (vectorized
    when payloads have one length, which is the common case)."""
    if pairs is None or not len(pairs):
        return []
    lens = pairs.payload.lengths
    if len(lens) and (lens == lens[0]).all():
        width = int(lens[0])
        rows = pairs.payload.values.reshape(len(pairs), width) if width else np.zeros(
            (len(pairs), 1), np.uint8)
        if 0 < width <= 8:  # rows as big-endian integers sort as the rows do (quicker)
            keys = np.zeros((len(pairs), 8), dtype=np.uint8)
            keys[:, :width] = rows
            ukeys, inv = np.unique(keys.view(">u8").reshape(-1), return_inverse=True)
            uniq = ukeys.astype(">u8").view(np.uint8).reshape(-1, 8)[:, :width]
        else:
            uniq, inv = np.unique(rows, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        payloads = [u.tobytes() if width else b"" for u in uniq]
    else:
        keys = [pairs.payload.row(k).tobytes() for k in range(len(pairs))]
        payloads, inv = np.unique(np.array(keys, dtype=object), return_inverse=True)
        payloads = list(payloads)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(payloads) + 1))
    out = []
    for g, p in enumerate(payloads):
        rows_g = order[bounds[g]:bounds[g + 1]]
        out.append((p, pairs.out.take(rows_g).values))
    return out


def _fixed_rows(pairs: PairBatch | None) -> tuple[np.ndarray, np.ndarray] | None:
    """Payload pairs as ``(payload per output cell (n, width) uint8, output linear
    indices)`` when every payload has one width (else None)."""
    if pairs is None or not len(pairs):
        return None
    lens = pairs.payload.lengths
    if not (lens == lens[0]).all() or int(lens[0]) == 0:
        return None
    rows = pairs.payload.values.reshape(len(pairs), int(lens[0]))
    return rows[pairs.out.row_ids()], pairs.out.values


def _payload_rows(op: Any, i: int, pairs: PairBatch | None, out_shape: tuple
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """Backward payload lineage of every pair in one vectorized call, when the operator
    has a batch form (:meth:`~subzero.operator.Operator.map_p_rows`) and the payloads one
    width: ``(input linear indices, output linear indices covered)``; else None."""
    fixed = _fixed_rows(pairs)
    if fixed is None:
        return None
    rows, outs = fixed
    got = op.map_p_rows(to_coords(outs, out_shape), rows, i)
    if got is None:
        return None
    return (np.asarray(got).astype(np.uint64, copy=False),
            np.asarray(outs).astype(np.uint64, copy=False))


def _no_check() -> None:
    pass


def _payload_backward_lin(pairs_for: PairsFor, op: Any, i: int, front: Frontier,
                          composite: bool, check: Callable[[], None]) -> Frontier | None:
    """:func:`payload_lineage` backward for a sparse frontier, on linear indices only (no
    mask of either array); None when the operator's default mapping needs the mask."""
    in_shape, out_shape = op.in_shapes[i], op.out_shape
    pairs = pairs_for(front.lin, front)
    batch = _payload_rows(op, i, pairs, out_shape)
    groups = [] if batch is not None else group_by_payload(pairs)
    parts = [] if batch is None else [batch[0]]
    if composite:  # the mapping default for the cells that stored no payload
        have = (batch[1] if batch is not None else
                np.concatenate([outs for _, outs in groups]).astype(np.uint64) if groups
                else np.empty(0, np.uint64))
        rest = front.lin[~np.isin(front.lin, have)]  # (sorted and distinct, as it is)
        if len(rest):
            lin = op.map_b_lin(rest, i)
            if lin is None:
                return None
            parts.append(np.asarray(lin, dtype=np.uint64))
    for payload, outs in groups:
        check()
        got = as_linear(op.map_p(to_coords(outs, out_shape), payload, i), in_shape)
        parts.append(np.asarray(got).astype(np.uint64, copy=False))
    lin = unique(np.concatenate(parts)) if parts else np.empty(0, np.uint64)
    return Frontier(in_shape, lin=lin)


def payload_lineage(pairs_for: PairsFor, op: Any, i: int, backward: bool, front: Frontier,
                    composite: bool, check: Callable[[], None] | None = None) -> Frontier:
    """Payload (or, ``composite``, Comp) lineage of the frontier ``front`` through input
    ``i`` of the operator ``op``, from the payload pairs ``pairs_for`` provides (a query:
    its shards; the lineage checker: the pairs of a run in memory).

    Backward applies ``map_p`` (its batch form ``map_p_rows`` when the operator has one and
    the payloads one width) to the payloads of the frontier's cells; forward scans every
    payload with ``map_p_hits`` (``map_p_rows_hits``; paper V-A3). Composite lineage is the
    mapping default, overridden by the payload answer for the cells that stored a payload.
    ``check`` is called between payload groups (a query's deadline).
    """
    check = check or _no_check
    in_shape, out_shape = op.in_shapes[i], op.out_shape
    if backward and front.sparse:
        got = _payload_backward_lin(pairs_for, op, i, front, composite, check)
        if got is not None:
            return got
    f = front.mask
    if backward:
        pairs = pairs_for(front.lin, front)
        batch = _payload_rows(op, i, pairs, out_shape)
        groups = [] if batch is not None else group_by_payload(pairs)
        res = None
        if composite:  # the mapping default for the cells that stored no payload
            rest = f.copy()
            if batch is not None:
                rest.reshape(-1)[batch[1].astype(np.intp)] = False
            for _, outs in groups:
                rest.reshape(-1)[outs.astype(np.intp)] = False
            if not (groups or batch is not None) or rest.any():
                res = np.asarray(op.map_b(rest, i), dtype=bool)
                if not res.flags.writeable:
                    res = res.copy()
        if res is None:
            res = np.zeros(in_shape, dtype=bool)
        flat = res.reshape(-1)
        if batch is not None:
            flat[batch[0].astype(np.intp)] = True
        for payload, outs in groups:
            check()
            got = as_linear(op.map_p(to_coords(outs, out_shape), payload, i), in_shape)
            flat[got.astype(np.intp)] = True
        return Frontier(in_shape, mask=res)
    # forward: payloads cannot be keyed by input cells; scan them all (paper V-A3)
    pairs = pairs_for(None, None)
    res = np.zeros(out_shape, dtype=bool)
    covered = np.zeros(out_shape, dtype=bool)
    fixed = _fixed_rows(pairs)
    if fixed is not None:  # every payload at once, when the operator has the batch form
        rows, outs = fixed
        hits = op.map_p_rows_hits(to_coords(outs, out_shape), rows, i, f)
        if hits is not None:
            covered.reshape(-1)[outs.astype(np.intp)] = True
            res.reshape(-1)[outs[np.asarray(hits, bool)].astype(np.intp)] = True
            pairs = None
    for payload, outs in group_by_payload(pairs):
        check()
        covered.reshape(-1)[outs.astype(np.intp)] = True
        hits = np.asarray(op.map_p_hits(to_coords(outs, out_shape), payload, i, f), bool)
        res.reshape(-1)[outs[hits].astype(np.intp)] = True
    if composite:
        res |= np.asarray(op.map_f(f, i), dtype=bool) & ~covered
    return Frontier(out_shape, mask=res)


def expand_pairs(batch: PairBatch, i: int) -> set[tuple[int, int]]:
    """Brute-force model: the set of (out, in) linear-index pairs of input ``i``.

    For tests only (it is the slow, obviously correct reading of a batch).
    """
    pairs: set[tuple[int, int]] = set()
    for k in range(len(batch)):
        for o in batch.out.row(k).tolist():
            for v in batch.ins[i].row(k).tolist():
                pairs.add((o, v))
    return pairs


__all__ = ["BoxLineage", "BoxedPairs", "PairBatch", "PairsFor", "ShardSpec", "LineageSink",
           "MemorySink", "as_pairs", "expand_pairs", "group_by_payload", "payload_lineage"]
