"""The lineage sink the executor writes through: buffer, encode, write, publish.

:func:`make_sink` returns a :class:`ShardSink` for a stored strategy. A caller calls
``write(batch)`` any number of times, then ``close()``, which encodes everything it was given
as ONE shard (colliding keys from different writes are merged like any others) and
publishes it; or ``abort()``, which leaves nothing behind. :func:`write_shard` does all of
that for one batch: the engine's tasks, the statistics pass and calibration use it.

>>> stats = write_shard(spec, batch)         # doctest: +SKIP
>>> sorted(stats)[:4]                        # doctest: +SKIP
['attempt', 'data_bytes', 'encode_s', 'fanin']
"""

from __future__ import annotations

import time
from typing import Any

from encoders.base import Encoding
from encoders.layouts.pairs import canonical, pair_stats, pairs_digest
from encoders.registry import encoding_for
from encoders.store import ShardWriter
from subzero.lineage import BoxedPairs, LineageSink, PairBatch, ShardSpec
from subzero.modes import Mode


class ShardSink(LineageSink):
    """Stores one task's pairs for one strategy as one shard (see the module docstring).

    ``close()`` returns plain data for the catalog's ``shards`` table: ``path`` (the
    published directory), ``data_bytes`` (LMDB file), ``index_bytes`` (R-tree files),
    ``pairs``, ``out_cells``, ``in_cells``, ``fanin``, ``fanout`` (defined in
    :func:`encoders.layouts.pairs.pair_stats`), ``encode_s`` (seconds in ``close``: encoding,
    writing and publishing), ``attempt``; and, beyond the catalog's columns, ``write_s``
    (the LMDB/R-tree part of ``encode_s``), ``payload_bytes``, ``records`` and ``digest``
    (:func:`~encoders.layouts.pairs.pairs_digest` of the pairs stored, also in the shard's
    ``meta.json``).
    """

    def __init__(self, spec: ShardSpec, encoding: Encoding | None = None) -> None:
        self.spec = spec
        self.encoding = encoding or encoding_for(spec.strategy)
        self.batches: list[PairBatch] = []
        self.writer: ShardWriter | None = None
        self._payload = spec.strategy.mode in (Mode.PAY, Mode.COMP)

    def write(self, batch: PairBatch | BoxedPairs) -> None:
        if batch is None or len(batch) == 0:
            return
        if isinstance(batch, BoxedPairs):
            if self._payload:
                raise TypeError(f"strategy {self.spec.strategy.name} stores payload pairs; "
                                "got full lineage")
            if not self.encoding.boxes:
                batch = batch.expand()
            self.batches.append(batch)
            return
        if batch.is_payload != self._payload:
            raise TypeError(f"strategy {self.spec.strategy.name} stores "
                            f"{'payload' if self._payload else 'full'} pairs; got "
                            f"{'payload' if batch.is_payload else 'full'} pairs")
        if not batch.is_payload and len(batch.ins) != len(self.spec.in_shapes):
            raise TypeError(f"pairs carry {len(batch.ins)} inputs; operator {self.spec.op} "
                            f"has {len(self.spec.in_shapes)}")
        self.batches.append(batch)

    def close(self, same_as: str | None = None) -> dict[str, Any]:
        """Encode and publish the pairs written; with ``same_as`` (another shard's digest)
        equal to theirs, publish nothing and return only ``{"digest": ..., "same": True}``."""
        t0 = time.perf_counter()
        pairs = _gathered(self.batches)
        self.batches = []
        digest = pairs_digest(pairs)
        if same_as is not None and digest == same_as:
            return {"digest": digest, "same": True}
        stats = pair_stats(pairs)
        stats["digest"] = digest
        enc = self.encoding.encode(pairs, self.spec)
        stats["records"] = int(enc.meta.get("records", enc.meta.get("entries", 0)))
        self.writer = ShardWriter(self.spec)
        try:
            stats["encode_s"] = time.perf_counter() - t0  # meta.json: encoding so far
            out = self.writer.write(enc, stats)
        except BaseException:
            self.writer.abort()
            raise
        out["encode_s"] = time.perf_counter() - t0
        self.writer = None
        return out

    def abort(self) -> None:
        self.batches = []
        if self.writer is not None:
            self.writer.abort()
            self.writer = None


def _gathered(batches: list) -> PairBatch | BoxedPairs | None:
    """The batches written, as one canonical batch (a :class:`BoxedPairs` when some of
    them are: the explicit pairs together, every part kept)."""
    if not any(isinstance(b, BoxedPairs) for b in batches):
        pairs = PairBatch.concat(batches)
        return canonical(pairs) if pairs is not None else None
    explicit = PairBatch.concat([b.pairs if isinstance(b, BoxedPairs) else b
                                 for b in batches])
    parts = tuple(p for b in batches if isinstance(b, BoxedPairs) for p in b.parts)
    return BoxedPairs(canonical(explicit) if explicit is not None else None, parts)


def make_sink(spec: ShardSpec) -> ShardSink:
    """The sink that stores ``spec``'s strategy as one shard at ``spec.path``."""
    return ShardSink(spec)


def write_shard(spec: ShardSpec, batch: PairBatch | BoxedPairs | None, same_as: str | None = None
                ) -> dict[str, Any]:
    """Store ``batch`` (None or empty: an empty shard) as the shard ``spec`` describes and
    return the sink's statistics (see :class:`ShardSink`; ``same_as``: nothing stored when
    the pairs' digest equals it); on any error nothing is left."""
    sink = make_sink(spec)
    try:
        if batch is not None and len(batch):
            sink.write(batch)
        # (the LineageSink protocol's close() takes nothing: only ShardSink compares)
        return sink.close() if same_as is None else sink.close(same_as=same_as)
    except BaseException:
        sink.abort()
        raise
