"""Batched lineage lookups on published shards (the query executor's entry point).

>>> r = open_shard(path)                      # doctest: +SKIP
>>> r.backward(np.array([5, 9], np.uint64), 0)  # doctest: +SKIP
array([4, 5, 6, 8, 9, 10], dtype=uint64)

Every call answers a whole frontier (sorted unique uint64 linear indices) in one pass per
shard: a shard whose key cells the frontier does not touch is skipped from its metadata;
the matched direction reads only the index runs (FullOne/PayOne) or R-tree hits
(FullMany/PayMany) the frontier touches; the other direction scans the shard. ``deadline``
(a ``time.perf_counter()`` value) is checked before each lookup and inside scans; passing it
raises :class:`LookupTimeout`, the query executor's cue to re-execute instead.

A :class:`ShardReader` keeps its LMDB environment open (read-only, no locks) until
``close()``; it is not thread-safe.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from encoders.base import LookupTimeout, check_deadline
from encoders.registry import encoding_class
from encoders.store import LmdbShard, read_meta
from subzero.cells import Box
from subzero.errors import QueryError
from subzero.frontier import as_query, is_dense
from subzero.lineage import PairBatch
from subzero.modes import Direction, Mode, Strategy


class ShardReader:
    """One published shard, open for lookups.

    Attributes: ``strategy`` (:class:`Strategy`), ``out_box`` (:class:`Box` of the output
    chunk), ``out_shape``, ``in_shapes``, ``path``, ``meta`` (the shard's metadata).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.meta = read_meta(self.path)
        self.strategy = Strategy.parse(self.meta["strategy"])
        lo, hi = self.meta["out_box"]
        self.out_box = Box(tuple(lo), tuple(hi))
        self.out_shape = tuple(self.meta["out_shape"])
        self.in_shapes = tuple(tuple(s) for s in self.meta["in_shapes"])
        self._out_size = math.prod(self.out_shape)
        self._in_sizes = [math.prod(s) for s in self.in_shapes]
        self.encoding = encoding_class(self.meta["encoding"])(Direction(self.meta["direction"]))
        self._data = LmdbShard(self.path, self.meta)
        # into_mask: decodes a large answer straight into a caller's mask (else _spill does)
        self._into = self.encoding.into_mask

    @property
    def data(self) -> LmdbShard:
        """The open LMDB tables of the shard (what ``subzero verify`` reads through)."""
        return self._data

    @property
    def full(self) -> bool:
        return self.strategy.mode is Mode.FULL

    def _input(self, i: int) -> int:
        if not 0 <= int(i) < len(self.in_shapes):
            raise QueryError(f"input {i} is out of range: operator {self.meta['op']!r} has "
                             f"{len(self.in_shapes)} input(s)")
        return int(i)

    def backward(self, out_lin: np.ndarray, i: int, deadline: float | None = None,
                 into: np.ndarray | None = None) -> np.ndarray | None:
        """Input-``i`` cells (sorted unique uint64) of the output cells ``out_lin``.

        ``into``: a flat bool array over the answer's array. A large answer (more than a
        sixteenth of it) is then set True there instead, which spares sorting it, and
        None is returned; a small one is returned as usual.
        """
        return self._full(self.encoding.backward, out_lin, i, deadline, into)

    def forward(self, in_lin: np.ndarray, i: int, deadline: float | None = None,
                into: np.ndarray | None = None) -> np.ndarray | None:
        """Output cells (sorted unique uint64) depending on input-``i`` cells ``in_lin``;
        ``into`` as in :meth:`backward`."""
        return self._full(self.encoding.forward, in_lin, i, deadline, into)

    def _full(self, look: Any, cells: np.ndarray, i: int, deadline: float | None,
              into: np.ndarray | None) -> np.ndarray | None:
        if not self.full:
            raise QueryError(f"shard {self.path} stores {self.strategy.name} lineage; "
                             "use payload_pairs")
        check_deadline(deadline)
        q, i = as_query(cells), self._input(i)
        if into is not None:
            size = self._in_sizes[i] if look == self.encoding.backward else self._out_size
            if into.shape != (size,) or into.dtype != bool:
                raise QueryError(f"into must be a flat bool array of {size} cells (the "
                                 f"answer's array); got {into.dtype} {into.shape}")
        if self._into:
            return look(self._data, q, i, deadline, into)
        return _spill(look(self._data, q, i, deadline), into)

    def payload_pairs(self, out_lin: np.ndarray | None, deadline: float | None = None
                      ) -> PairBatch | None:
        """Payload pairs meeting ``out_lin``, restricted to those output cells; every pair
        when ``out_lin`` is None (forward queries scan and apply ``map_p``)."""
        if self.full:
            raise QueryError(f"shard {self.path} stores full lineage; use backward/forward")
        check_deadline(deadline)
        q = None if out_lin is None else as_query(out_lin)
        return self.encoding.payload_pairs(self._data, q, deadline)

    def payload_records(self, out_lin: np.ndarray, deadline: float | None = None,
                        at: np.ndarray | None = None) -> Any:
        """This shard's part of :meth:`payload_pairs` for the output cells ``out_lin``
        (``at``: their coordinates), left for the encoding's ``pairs_from_records`` to
        decode together with other shards' (encodings that have both, see
        :class:`encoders.pay_one.PayOne`)."""
        if self.full:
            raise QueryError(f"shard {self.path} stores full lineage; use backward/forward")
        check_deadline(deadline)
        return self.encoding.payload_records(self._data, as_query(out_lin), deadline, at)

    def close(self) -> None:
        self._data.close()

    def __enter__(self) -> "ShardReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _spill(got: np.ndarray, into: np.ndarray | None) -> np.ndarray | None:
    """``got``, or None after setting it in ``into`` when it is large (see ``backward``)."""
    if into is None or not is_dense(len(got), len(into)):
        return got
    into[got.astype(np.intp)] = True
    return None


def open_shard(path: str | os.PathLike) -> ShardReader:
    """Open a published shard for lookups (reads its metadata)."""
    return ShardReader(path)


# One reader per shard for the whole process: LMDB refuses to open an environment twice in
# one process, and a published shard never changes, so every user in the process (query
# executors, ``subzero verify``) shares it.
_SHARED: dict[str, ShardReader] = {}
#: held while a shard is opened: two threads asking for the same new shard (the
#: explorer's query workers) would otherwise both open it, and LMDB refuses the second
_SHARED_LOCK = threading.Lock()


def _shared_key(path: str | os.PathLike) -> str:
    return os.path.abspath(os.fspath(path))


def shared_shard(path: str | os.PathLike) -> ShardReader:
    """The process's reader of the published shard at ``path``, opened on first use and
    kept open."""
    key = _shared_key(path)
    reader = _SHARED.get(key)
    if reader is None:
        with _SHARED_LOCK:
            reader = _SHARED.get(key)
            if reader is None:
                reader = _SHARED[key] = open_shard(key)
    return reader


def open_shared(path: str | os.PathLike) -> ShardReader | None:
    """The process's reader of the shard at ``path`` if it is open, else None."""
    return _SHARED.get(_shared_key(path))


__all__ = ["open_shard", "ShardReader", "LookupTimeout"]
