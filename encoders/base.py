"""Interfaces of lineage storage (paper VI-B): encodings, shard data, plain-data results.

This module holds interfaces only, like ``zarr.abc``: implementations import it, never the
other way round.

- An :class:`Encoding` turns a task's region pairs into plain data (:class:`EncodedShard`:
  sorted LMDB tables, byte blobs, R-tree boxes, metadata) and answers lookups against a
  published shard through the :class:`ShardData` access interface. It never does I/O.
- :class:`ShardData` is what a store hands an encoding at query time: batched reads of the
  shard's LMDB tables and R-trees. Only the store (``encoders.store``) touches files.
- :class:`LookupTimeout` is raised when a lookup passes its ``deadline`` (a
  ``time.perf_counter()`` value), so the query executor can switch to re-execution.

Example
-------
>>> from encoders.registry import encoding_for             # doctest: +SKIP
>>> enc = encoding_for(Strategy.parse("full-one-bwd"))      # doctest: +SKIP
>>> shard = enc.encode(pairs, spec)                         # doctest: +SKIP
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

import numpy as np

from subzero.cells import Ragged
from subzero.errors import ModeError
from subzero.lineage import PairBatch, ShardSpec
from subzero.modes import Direction


class LookupTimeout(Exception):
    """A lookup ran past its deadline (the caller should re-execute instead)."""


def check_deadline(deadline: float | None) -> None:
    """Raise :class:`LookupTimeout` when ``time.perf_counter()`` has passed ``deadline``."""
    if deadline is not None and time.perf_counter() > deadline:
        raise LookupTimeout(f"lineage lookup passed its deadline by "
                            f"{time.perf_counter() - deadline:.3f} s")


# ---------------------------------------------------------------------------------------
# plain data an encoding produces (the store writes it)
# ---------------------------------------------------------------------------------------


@dataclass
class Table:
    """One LMDB database of a shard, keys sorted so it can be written in append mode.

    Either ``items`` (a DUPSORT|DUPFIXED table: one fixed-width ``(n, width)`` uint8 item per
    key occurrence, keys non-decreasing and items of one key sorted; or, ``packed``, the
    same items as one plain entry per key) or ``values`` (a plain table: strictly
    increasing keys, one uint8 Ragged row per key).
    """

    name: str
    keys: np.ndarray
    items: np.ndarray | None = None
    values: Ragged | None = None
    #: a cell index's run length in bits (:mod:`encoders.layouts.cellindex`): recorded in
    #: the shard's metadata when it is not the default 8
    bucket_bits: int = 8
    #: ``items`` stored packed: one plain entry per distinct key holding its items one after
    #: the other (one LMDB put per key instead of per item); readers see the same items
    packed: bool = False

    @property
    def has_items(self) -> bool:
        return self.items is not None

    @property
    def dupfixed(self) -> bool:
        """A DUPSORT|DUPFIXED table (one LMDB item per key occurrence)."""
        return self.items is not None and not self.packed

    @property
    def kind(self) -> str:
        """What the shard's metadata calls it: ``dupfixed``, ``packed`` or ``plain``."""
        return "plain" if self.items is None else "packed" if self.packed else "dupfixed"

    @property
    def nbytes(self) -> int:
        """Payload bytes (keys + values) before LMDB's own overhead."""
        n = 8 * len(self.keys)
        if self.items is not None:
            return n + int(self.items.size)
        return n + int(len(self.values.values)) if self.values is not None else n


@dataclass
class SpatialIndex:
    """Boxes for one on-disk R-tree: entry ``ids[k]`` covers ``[mins[k], maxs[k]]``
    (inclusive cell coordinates, at least 2 columns: rtree needs two dimensions)."""

    name: str
    ids: np.ndarray
    mins: np.ndarray
    maxs: np.ndarray

    @property
    def nbytes(self) -> int:
        """Entry bytes (id + box as doubles) before the R-tree's own pages."""
        return int(len(self.ids)) * (8 + 16 * int(self.mins.shape[1] if self.mins.ndim > 1
                                                    else 1))


@dataclass
class EncodedShard:
    """Everything a store needs to write one shard: plain data, no file handles."""

    tables: list[Table] = field(default_factory=list)
    blobs: dict[str, np.ndarray] = field(default_factory=dict)
    rtrees: list[SpatialIndex] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def logical_bytes(self) -> int:
        """What the shard holds before page and tree overheads: keys, values, blobs and
        R-tree entries. Files round it up to pages, which hides how a small shard grows;
        the statistics pass scales this instead (see :meth:`optimizer.costs.CostModel.
        disk`)."""
        return (sum(t.nbytes for t in self.tables)
                + sum(int(np.asarray(b).nbytes) for b in self.blobs.values())
                + sum(sp.nbytes for sp in self.rtrees))


# ---------------------------------------------------------------------------------------
# what a store gives an encoding at query time
# ---------------------------------------------------------------------------------------


class ShardData(ABC):
    """Read access to one published shard (batched; no per-key Python calls needed).

    All keys are uint64 linear indices or entry ids; results come back as numpy arrays.
    """

    meta: dict[str, Any]

    @abstractmethod
    def items(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every item stored under each of ``keys`` (sorted unique uint64) in a DUPFIXED
        table: ``(key per item, (n, width) uint8 items)``; absent keys are skipped."""

    def run_items(self, table: str, key: int) -> bytes:
        """The items stored under one key of a DUPFIXED table as raw bytes, one row of
        ``8 + width`` bytes per item (the big-endian key, then the item), or, in a packed
        table (``meta["tables"]``), of ``width`` bytes (the items alone); ``b""`` when the
        key is absent. For lookups of a few cells, which parse these in plain Python."""
        k, items = self.items(table, np.array([key], dtype=np.uint64))
        if not len(k):
            return b""
        if self.meta.get("tables", {}).get(table) == "packed":
            return items.tobytes()
        keys = np.ascontiguousarray(k.astype(">u8")).view(np.uint8).reshape(-1, 8)
        return np.concatenate([keys, items], axis=1).tobytes()

    @abstractmethod
    def all_keys(self, table: str) -> np.ndarray:
        """Every distinct key of a table, sorted uint64."""

    @abstractmethod
    def values(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, Ragged]:
        """Values of a plain table for ``keys`` (sorted unique uint64): the keys found and
        one uint8 row per found key."""

    @abstractmethod
    def scan(self, table: str, batch: int) -> Iterator[tuple[np.ndarray, Ragged]]:
        """Every ``(keys, values)`` of a plain table, ``batch`` entries at a time."""

    @abstractmethod
    def blob(self, name: str) -> np.ndarray:
        """A byte blob as a uint8 array (zero-copy where the store allows it)."""

    @abstractmethod
    def rtree_query(self, name: str, mins: np.ndarray, maxs: np.ndarray) -> np.ndarray:
        """Sorted unique ids of R-tree entries meeting any of the boxes ``[mins, maxs]``."""

    @abstractmethod
    def close(self) -> None: ...


# ---------------------------------------------------------------------------------------
# encodings
# ---------------------------------------------------------------------------------------


class Encoding(ABC):
    """How one strategy lays region pairs out in a shard and answers lookups on it.

    Subclasses set :attr:`name` (``"FullOne"``...), :attr:`payload` (payload pairs rather
    than input cells) and :attr:`directions` (the directions they can be keyed by), and
    declare their capabilities, which callers test instead of names or classes:

    - :attr:`many`: keys are indexed by an R-tree over the boxes of the key cell sets (one
      entry per region pair), so a matched lookup probes the R-tree rather than reading
      index runs cell by cell (FullMany, PayMany).
    - :attr:`into_mask`: ``backward``/``forward`` take ``into=``, a caller's flat bool mask
      over the answer's array, and decode a large answer straight into it, returning None
      (FullOne). Other encodings answer sorted cells, which the caller spills itself.
    - :attr:`boxes`: ``encode`` takes a :class:`~subzero.lineage.BoxedPairs` as it is,
      its boxes unexpanded (FullCompact); the sink expands them for the others.

    Instances are bound to one direction.
    """

    name: ClassVar[str]
    payload: ClassVar[bool]
    directions: ClassVar[frozenset[Direction]]
    many: ClassVar[bool]
    into_mask: ClassVar[bool]
    boxes: ClassVar[bool] = False

    def __init__(self, direction: Direction = Direction.BACKWARD) -> None:
        direction = Direction(direction)
        if direction not in self.directions:
            raise ModeError(f"{self.name} cannot be {direction}-optimized; it supports "
                            f"{sorted(d.value for d in self.directions)}")
        self.direction = direction

    @abstractmethod
    def encode(self, pairs: PairBatch | None, spec: ShardSpec) -> EncodedShard:
        """Lay out ``pairs`` (canonical: every row sorted and unique) as plain data."""

    def backward(self, shard: ShardData, out_lin: np.ndarray, i: int,
                 deadline: float | None = None) -> np.ndarray:
        """Input-``i`` cells (unique sorted uint64) of the pairs meeting ``out_lin`` (sorted
        unique uint64, as :class:`encoders.lookup.ShardReader` passes it)."""
        raise NotImplementedError(f"{self.name} stores payloads; use payload_pairs")

    def forward(self, shard: ShardData, in_lin: np.ndarray, i: int,
                deadline: float | None = None) -> np.ndarray:
        """Output cells (unique sorted uint64) of the pairs meeting input-``i`` ``in_lin``
        (sorted unique uint64)."""
        raise NotImplementedError(f"{self.name} stores payloads; use payload_pairs")

    def payload_pairs(self, shard: ShardData, out_lin: np.ndarray | None,
                      deadline: float | None = None) -> PairBatch | None:
        """Payload pairs meeting ``out_lin`` restricted to those cells (all pairs if None)."""
        raise NotImplementedError(f"{self.name} stores input cells; use backward/forward")
