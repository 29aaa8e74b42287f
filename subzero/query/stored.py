"""Reading stored lineage for a query step: open shard readers, kept for the process, and
the union of their answers (full lineage) or the payload functions applied to theirs.

Full lineage answers in either direction (a mismatched direction scans). Payload lineage
answers backward with ``map_p`` on the payloads of the frontier's cells; forward it scans
every payload (paper V-A3). Composite lineage is the mapping default, overridden by the
payload answer for the cells that stored a payload.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import lmdb
import numpy as np

from encoders.base import LookupTimeout, check_deadline
from encoders.lookup import ShardReader, open_shard
from encoders.store import check_shard_files
from subzero.cells import as_linear, to_coords, unique
from subzero.errors import DamagedError, StoreError
from subzero.frontier import Frontier, FrontierUnion
from subzero.lineage import PairBatch
from subzero.operator import Operator

# One reader per shard for the whole process: LMDB refuses to open an environment twice in
# one process, and a finished run's shards never change, so every executor shares them.
_READERS: dict[str, ShardReader] = {}
_OPENED = [0]  # readers opened so far (unopened-shard counts are redone when it grows)


#: what reading a damaged shard raises (a garbage page: lmdb.CorruptedError; a cut file:
#: lmdb.Error or OSError; garbled records: decoding errors)
READ_ERRORS = (lmdb.Error, OSError, ValueError, KeyError, IndexError, StoreError)


def damaged(row: dict[str, Any], problem: str) -> DamagedError:
    """The one-line error naming a damaged shard by operator, strategy and chunk."""
    return DamagedError(
        f"damaged lineage shard of operator {row['op']!r}, strategy {row['strategy']}, chunk "
        f"{row['chunk']}: {problem}; run 'subzero verify {row.get('run') or 'RUN'}' to list "
        "what is damaged (--method auto re-executes the operator instead)")


def _problem(e: BaseException) -> str:
    msg = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


class _Guarded:
    """A shard reader whose read errors name its shard (:func:`damaged`)."""

    def __init__(self, reader: ShardReader, row: dict[str, Any]) -> None:
        self._reader, self._row = reader, row
        self.out_box = reader.out_box

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._reader, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except LookupTimeout:
                raise
            except READ_ERRORS as e:
                raise damaged(self._row, f"cannot be read ({_problem(e)})") from None
        return call


class ShardReaders:
    """The shards of one run, by catalog row, opened on first use and kept open.

    A shard is checked against the checksum the catalog recorded when it was published
    the first time this process opens it (a CRC-32 of its files: about a millisecond per
    MB), so a damaged shard is named (:class:`~subzero.errors.DamagedError`) instead of
    answering wrongly; reading errors name it too.
    """

    def __init__(self, home: str) -> None:
        self.home = str(home)
        self._by_row: dict[str, ShardReader] = {}  # shard path in the home -> its reader
        # (op, strategy) -> (shards not open, _OPENED when counted)
        self._unopened: dict[tuple[str, str], tuple[int, int]] = {}

    def reader(self, row: dict[str, Any]) -> Any:
        reader = self._by_row.get(row["path"])
        if reader is not None:
            return reader
        key = os.path.join(self.home, row["path"])  # the home is already absolute
        raw = _READERS.get(key)
        if raw is None:
            problem = check_shard_files(key, row.get("checksum"))
            if problem is not None:
                raise damaged(row, problem)
            try:
                raw = open_shard(key)
            except READ_ERRORS as e:
                raise damaged(row, f"cannot be opened ({_problem(e)})") from None
            _READERS[key] = raw
            _OPENED[0] += 1
        reader = self._by_row[row["path"]] = _Guarded(raw, row)
        return reader

    def unopened(self, key: tuple[str, str], rows: Sequence[dict[str, Any]]) -> int:
        """Shards among ``rows`` this process has not opened yet (readers stay open;
        counted again only after some reader was opened)."""
        n, stamp = self._unopened.get(key, (None, None))
        if n is None or (n and stamp != _OPENED[0]):
            n = sum(os.path.join(self.home, row["path"]) not in _READERS for row in rows)
            self._unopened[key] = (n, _OPENED[0])
        return n


def read_full(readers: Sequence[ShardReader], f: Frontier, i: int, backward: bool,
              out_shape: Sequence[int], deadline: float | None) -> Frontier:
    """The union of every shard's answer for the frontier ``f`` through input ``i``:
    sorted cells while it is small, a mask once it is not (large answers are decoded
    straight into it; the shards stop once it is full)."""
    u = FrontierUnion(out_shape)
    q = f.lin
    for reader in readers:
        if backward and len(readers) > 1 and not f.meets(reader.out_box):
            continue  # backward: this shard's output chunk holds no frontier cell
        look = reader.backward if backward else reader.forward
        u.add(look(q, i, deadline, u.flat))
        if len(readers) > 1 and u.full:
            break  # nothing left to add
    return u.frontier()


def _payload_pairs(readers: Sequence[ShardReader], q: np.ndarray | None,
                   f: Frontier | None, deadline: float | None) -> PairBatch | None:
    batches = []
    for reader in readers:
        if f is not None and not f.meets(reader.out_box):
            continue
        b = reader.payload_pairs(q, deadline)
        if b is not None and len(b):
            batches.append(b)
    return PairBatch.concat(batches)


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


def _payload_backward_lin(readers: Sequence[ShardReader], op: Operator, i: int,
                          front: Frontier, composite: bool, deadline: float | None
                          ) -> Frontier | None:
    """:func:`read_payload` backward for a sparse frontier, on linear indices only (no
    mask of either array); None when the operator's default mapping needs the mask."""
    in_shape, out_shape = op.in_shapes[i], op.out_shape
    pairs = _payload_pairs(readers, front.lin, front, deadline)
    batch = _payload_rows(op, i, pairs, out_shape)
    groups = [] if batch is not None else group_by_payload(pairs)
    parts = [] if batch is None else [batch[0]]
    if composite:  # the mapping default for the cells that stored no payload
        have = (batch[1] if batch is not None else
                np.concatenate([outs for _, outs in groups]).astype(np.uint64) if groups
                else np.empty(0, np.uint64))
        rest = np.setdiff1d(front.lin, have)
        if len(rest):
            lin = op.map_b_lin(rest, i)
            if lin is None:
                return None
            parts.append(np.asarray(lin, dtype=np.uint64))
    for payload, outs in groups:
        check_deadline(deadline)
        got = as_linear(op.map_p(to_coords(outs, out_shape), payload, i), in_shape)
        parts.append(np.asarray(got).astype(np.uint64, copy=False))
    lin = unique(np.concatenate(parts)) if parts else np.empty(0, np.uint64)
    return Frontier(in_shape, lin=lin)


def _payload_rows(op: Operator, i: int, pairs: PairBatch | None, out_shape: tuple
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


def read_payload(readers: Sequence[ShardReader], op: Operator, i: int, backward: bool,
                 front: Frontier, composite: bool, deadline: float | None) -> Frontier:
    """Payload (or, ``composite``, Comp) lineage of the frontier through input ``i``."""
    in_shape, out_shape = op.in_shapes[i], op.out_shape
    if backward and front.sparse:
        got = _payload_backward_lin(readers, op, i, front, composite, deadline)
        if got is not None:
            return got
    f = front.mask
    if backward:
        pairs = _payload_pairs(readers, front.lin, front, deadline)
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
            check_deadline(deadline)
            got = as_linear(op.map_p(to_coords(outs, out_shape), payload, i), in_shape)
            flat[got.astype(np.intp)] = True
        return Frontier(in_shape, mask=res)
    # forward: payloads cannot be keyed by input cells; scan them all (paper V-A3)
    pairs = _payload_pairs(readers, None, None, deadline)
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
        check_deadline(deadline)
        covered.reshape(-1)[outs.astype(np.intp)] = True
        hits = np.asarray(op.map_p_hits(to_coords(outs, out_shape), payload, i, f), bool)
        res.reshape(-1)[outs[hits].astype(np.intp)] = True
    if composite:
        res |= np.asarray(op.map_f(f, i), dtype=bool) & ~covered
    return Frontier(out_shape, mask=res)


__all__ = ["ShardReaders", "read_full", "read_payload", "group_by_payload"]
