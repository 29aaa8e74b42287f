"""Reading stored lineage for a query step: open shard readers, kept for the process, and
the union of their answers (full lineage) or the payload functions applied to theirs.

Full lineage answers in either direction (a mismatched direction scans). Payload lineage
answers backward with ``map_p`` on the payloads of the frontier's cells; forward it scans
every payload (paper V-A3). Composite lineage is the mapping default, overridden by the
payload answer for the cells that stored a payload. The payload functions are applied by
:func:`subzero.lineage.payload_lineage`, shared with the lineage checker.
"""

from __future__ import annotations

from typing import Any, Sequence

import lmdb
import numpy as np

from encoders.base import LookupTimeout, check_deadline
from encoders.lookup import ShardReader, open_shared, shared_shard
from encoders.store import check_shard_files
from subzero.engine import datastore
from subzero.errors import DamagedError, StoreError
from subzero.frontier import Frontier, FrontierUnion
from subzero.lineage import PairBatch, group_by_payload, payload_lineage
from subzero.operator import Operator

#: readers this module opened so far (unopened-shard counts are redone when it grows); the
#: readers themselves are the process's shared ones (:func:`encoders.lookup.shared_shard`)
_OPENED = [0]


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


#: read errors that are also what a decoder bug raises: damage only when the shard's files
#: no longer match their checksum
DECODE_ERRORS = (ValueError, KeyError, IndexError)


class _Guarded:
    """A shard reader whose read errors name its shard (:func:`damaged`). A decoding error
    on a shard whose files still match the recorded checksum is a bug, not damage: it is
    raised as it is rather than hidden behind a re-execution."""

    def __init__(self, reader: ShardReader, row: dict[str, Any], path: str) -> None:
        self._reader, self._row, self._path = reader, row, path
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
                if isinstance(e, DECODE_ERRORS) and self._intact():
                    raise
                raise damaged(self._row, f"cannot be read ({_problem(e)})") from None
        return call

    def _intact(self) -> bool:
        """The shard's files still match the checksum recorded for it (False when none was
        recorded: a decoding error is then taken for damage)."""
        checksum = self._row.get("checksum")
        return bool(checksum) and check_shard_files(self._path, checksum) is None


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
        # the home is already absolute; an object-store home's shard is fetched into the
        # local cache once, checked against the row's checksum as it arrives
        key = datastore.shard_folder(self.home, row, fetch=False)
        raw = open_shared(key)
        if raw is None:
            key = datastore.shard_folder(self.home, row)
            problem = check_shard_files(key, row.get("checksum"))
            if problem is not None:
                raise damaged(row, problem)
            try:
                raw = shared_shard(key)
            except READ_ERRORS as e:
                raise damaged(row, f"cannot be opened ({_problem(e)})") from None
            _OPENED[0] += 1
        reader = self._by_row[row["path"]] = _Guarded(raw, row, key)
        return reader

    def unopened(self, key: tuple[str, str], rows: Sequence[dict[str, Any]]) -> int:
        """Shards among ``rows`` this process has not opened yet (readers stay open;
        counted again only after some reader was opened)."""
        n, stamp = self._unopened.get(key, (None, None))
        if n is None or (n and stamp != _OPENED[0]):
            n = sum(open_shared(datastore.shard_folder(self.home, row, fetch=False)) is None
                    for row in rows)
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
    if q is not None and f is not None and f.sparse and len(readers) > 1:
        got = _payload_pairs_together(readers, f, deadline)
        if got is not NotImplemented:
            return got
    batches = []
    for reader in readers:
        if f is not None and not f.meets(reader.out_box):
            continue
        b = reader.payload_pairs(q, deadline)
        if b is not None and len(b):
            batches.append(b)
    return PairBatch.concat(batches)


def _payload_pairs_together(readers: Sequence[ShardReader], f: Frontier,
                             deadline: float | None) -> Any:
    """The payload pairs of the sparse frontier ``f``'s cells from several shards, as
    :func:`_payload_pairs` gives them, with their records decoded in one pass: each shard
    is asked only for the cells in its output chunk, and gives its records undecoded
    (``payload_records``); the encoding decodes them all at once (``pairs_from_records``).
    A step meeting 16 shards costs one decoding instead of 16 (BQ0 at 64x the cells of an
    exposure). NotImplemented for an encoding without the two halves. Should the joint
    decoding fail, the shards are read one by one again, so that the damaged one is named.
    """
    kind = type(readers[0].encoding)
    if not hasattr(kind, "pairs_from_records") or any(
            type(r.encoding) is not kind for r in readers):
        return NotImplemented
    lin, at = f.lin, f.coords()
    lo = np.array([r.out_box.lo for r in readers], dtype=np.int64)
    hi = np.array([r.out_box.hi for r in readers], dtype=np.int64)
    # which cells lie in which shard's output chunk: (cells, shards), an axis at a time
    inside = np.ones((len(lin), len(readers)), dtype=bool)
    for ax in range(at.shape[1]):
        c = at[:, ax, None]
        inside &= (c >= lo[None, :, ax]) & (c < hi[None, :, ax])
    found, asked = [], []
    for s in np.flatnonzero(inside.any(axis=0)).tolist():
        reader, mine = readers[s], inside[:, s]
        rec = reader.payload_records(lin[mine], deadline, at[mine])
        asked.append((reader, lin[mine]))
        if rec is not None:
            found.append(rec)
    try:
        return kind.pairs_from_records(found)
    except DECODE_ERRORS:
        return PairBatch.concat([reader.payload_pairs(q, deadline) for reader, q in asked])


def read_payload(readers: Sequence[ShardReader], op: Operator, i: int, backward: bool,
                 front: Frontier, composite: bool, deadline: float | None) -> Frontier:
    """Payload (or, ``composite``, Comp) lineage of the frontier through input ``i``, from
    the shards' payload pairs (:func:`subzero.lineage.payload_lineage`, which the lineage
    checker runs on a run's pairs in memory)."""

    def pairs_for(q: np.ndarray | None, f: Frontier | None) -> PairBatch | None:
        return _payload_pairs(readers, q, f, deadline)

    return payload_lineage(pairs_for, op, i, backward, front, composite,
                           lambda: check_deadline(deadline))


__all__ = ["ShardReaders", "read_full", "read_payload", "group_by_payload"]
