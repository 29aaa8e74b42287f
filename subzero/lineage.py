"""Lineage as data: batches of region pairs, the spec of one shard, and the sink interface.

A task's ``lwrite`` calls (:mod:`subzero.runtime`) are buffered as :class:`PairBatch` es (CSR
rows of linear indices); when the task ends, the engine hands them to one
:class:`LineageSink` per stored strategy, described by a :class:`ShardSpec`. The encoders
(:mod:`encoders.sink`) implement the sink that writes LMDB shards; :class:`MemorySink`
keeps pairs in memory (tests, statistics).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

from subzero.cells import Box, Ragged
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

    def write(self, batch: PairBatch) -> None:
        self.batches.append(batch)

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


__all__ = ["PairBatch", "ShardSpec", "LineageSink", "MemorySink", "expand_pairs"]
