"""Region-pair batches as encoders need them: canonical rows, statistics, key grouping.

>>> import numpy as np
>>> from subzero.cells import Ragged
>>> from subzero.lineage import PairBatch, ShardSpec
>>> b = PairBatch(Ragged.from_rows([[3, 1, 1], [2]]), ins=(Ragged.from_rows([[9, 8], [7]]),))
>>> c = canonical(b)
>>> c.out.values.tolist(), c.ins[0].values.tolist()
([1, 3, 2], [8, 9, 7])
>>> pair_stats(c)["fanin"]   # (2 out cells x 2 in + 1 x 1) / 3 out cells
1.6666666666666667
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from encoders.formats.csr import (
    canonical_rows,
    gather_index,
    row_ids,
    take_rows,
    union_by_owner,
)
from subzero.cells import Ragged
from subzero.lineage import BoxedPairs, PairBatch, ShardSpec


def _canon(r: Ragged) -> Ragged:
    v, o = canonical_rows(np.asarray(r.values, dtype=np.uint64),
                          np.asarray(r.offsets, dtype=np.int64))
    return Ragged(v, o)


def canonical(batch: PairBatch) -> PairBatch:
    """The batch with every cell set sorted and duplicate-free (payloads untouched)."""
    out = _canon(batch.out)
    if batch.is_payload:
        pay = Ragged(np.asarray(batch.payload.values, dtype=np.uint8),
                     np.asarray(batch.payload.offsets, dtype=np.int64))
        return PairBatch(out, payload=pay)
    return PairBatch(out, ins=tuple(_canon(r) for r in batch.ins))


def pair_stats(batch: PairBatch | BoxedPairs | None) -> dict[str, Any]:
    """Statistics of the pairs a task wrote (canonical, before any merging), for the catalog.

    - ``pairs``: region pairs written;
    - ``out_cells`` / ``in_cells``: cells over all pairs (a cell in two pairs counts twice;
      ``in_cells`` sums every input);
    - ``fanin``: mean number of input cells (all inputs together) per output cell, weighting
      each pair by its output cells: ``sum_k |out_k| * |in_k| / sum_k |out_k|``. It is the
      mean size of one output cell's backward lineage before deduplication (0 for payload
      pairs, which store no input cells);
    - ``fanout``: mean output cells per pair, ``out_cells / pairs``;
    - ``payload_bytes``: mean payload bytes per pair (payload pairs only).
    """
    if batch is None or len(batch) == 0:
        return {"pairs": 0, "out_cells": 0, "in_cells": 0, "fanin": 0.0, "fanout": 0.0,
                "payload_bytes": 0.0}
    if isinstance(batch, BoxedPairs):  # a part's cell is a pair of one output cell
        st = pair_stats(batch.pairs)
        n = sum(len(p) for p in batch.parts)
        part_in = sum(p.in_cells for p in batch.parts)
        out_cells = st["out_cells"] + n
        pairs = st["pairs"] + n
        return {"pairs": pairs, "out_cells": out_cells, "in_cells": st["in_cells"] + part_in,
                "fanin": (st["fanin"] * st["out_cells"] + part_in) / out_cells,
                "fanout": out_cells / pairs, "payload_bytes": 0.0}
    n = len(batch)
    olen = batch.out.lengths.astype(np.float64)
    out_cells = int(olen.sum())
    st: dict[str, Any] = {"pairs": n, "out_cells": out_cells,
                          "fanout": out_cells / n if n else 0.0}
    if batch.is_payload:
        st.update(in_cells=0, fanin=0.0,
                  payload_bytes=float(batch.payload.lengths.mean()) if n else 0.0)
    else:
        ilen = sum(r.lengths.astype(np.float64) for r in batch.ins)
        st.update(in_cells=int(np.sum(ilen)),
                  fanin=float((olen * ilen).sum() / out_cells) if out_cells else 0.0,
                  payload_bytes=0.0)
    return st


DIGEST_PREFIX = "sha256:"


def pairs_digest(batch: PairBatch | BoxedPairs | None) -> str:
    """A digest of the pairs of a canonical ``batch`` (None or empty: no pairs), equal for
    equal pairs in equal order: a shard records the digest of what it stores, so a what-if
    replay recomputing a chunk whose lineage came out the same shares the parent's shard
    instead of encoding and writing it again (SHA-256, 128 bits of it: a false match would
    silently change an answer, so no short checksum; SHA-256 rather than BLAKE2b because
    CPUs with SHA instructions hash it faster). The
    digest names its hash (``sha256:``); a shard written with BLAKE2b before records a bare
    hex digest, which no new digest equals, so its chunk is simply stored again.

    >>> b = PairBatch(Ragged.from_rows([[1], [2, 3]]), payload=Ragged.from_rows([[7], [8]]))
    >>> pairs_digest(b) == pairs_digest(canonical(b)) != pairs_digest(None)
    True
    >>> pairs_digest(b)[:7], len(pairs_digest(b))
    ('sha256:', 39)
    """
    h = hashlib.sha256()
    if batch is None or len(batch) == 0:
        return DIGEST_PREFIX + h.hexdigest()[:32]
    if isinstance(batch, BoxedPairs):  # its own form: never equal to plain pairs' digest
        h.update(b"boxed")
        h.update(pairs_digest(batch.pairs).encode())
        for p in batch.parts:
            h.update(repr((p.box.lo, p.box.hi, p.lo, p.hi, p.inputs, p.shape)).encode())
            h.update(np.packbits(p.mask.reshape(-1)).tobytes())
        return DIGEST_PREFIX + h.hexdigest()[:32]
    sides = [(batch.out, np.uint64)]
    if batch.is_payload:
        sides.append((batch.payload, np.uint8))
    else:
        sides.extend((r, np.uint64) for r in batch.ins)
    h.update(b"pay" if batch.is_payload else b"full%d" % len(sides))
    for r, dtype in sides:  # as a shard stores them (canonical's dtypes)
        offsets = np.ascontiguousarray(r.offsets, dtype=np.int64)
        h.update(np.int64(len(offsets)).tobytes())
        h.update(offsets)
        h.update(np.ascontiguousarray(r.values, dtype=dtype))
    return DIGEST_PREFIX + h.hexdigest()[:32]


@dataclass
class KeyGroups:
    """Distinct key cells of one side of a batch, each with ONE source row.

    ``keys`` are sorted unique; ``src[k]`` is the row of each value side (in ``values``)
    holding key ``k``'s lineage. Keys that occur in one pair point at that pair's row; a key
    occurring in several pairs (a collision) points at an extra row appended after the pairs
    holding the union of their sets (the paper's decode, union, re-encode).
    """

    keys: np.ndarray
    src: np.ndarray
    values: list[Ragged]
    collisions: int


def group_keys(key_side: Ragged, value_sides: Sequence[Ragged]) -> KeyGroups:
    """Group key cells across pairs and merge the value sets of colliding keys."""
    kv = np.asarray(key_side.values, dtype=np.uint64)
    kp = row_ids(np.asarray(key_side.offsets, dtype=np.int64))
    n_pairs = len(key_side)
    values = [Ragged(np.asarray(v.values, dtype=np.uint64), np.asarray(v.offsets, np.int64))
              for v in value_sides]
    if len(kv) < 2 or bool((kv[1:] > kv[:-1]).all()):  # sorted, no key twice (a mask's)
        return KeyGroups(kv, kp, values, 0)
    order = np.argsort(kv, kind="stable")
    sk, sp = kv[order], kp[order]
    first = np.ones(len(sk), dtype=bool)
    first[1:] = sk[1:] != sk[:-1]
    starts = np.flatnonzero(first)
    keys = sk[starts]
    counts = np.diff(np.append(starts, len(sk)))
    src = sp[starts].astype(np.int64)
    multi = np.flatnonzero(counts > 1)
    if len(multi):
        # incidences (collision index, pair) of every colliding key
        inc_owner = np.repeat(np.arange(len(multi), dtype=np.int64), counts[multi])
        inc_pair = sp[gather_index(starts[multi], counts[multi])]
        merged = []
        for v in values:
            gv, go = take_rows(v.values, v.offsets, inc_pair)
            owner = np.repeat(inc_owner, np.diff(go))
            mv, mo = union_by_owner(gv, owner, len(multi))
            merged.append(Ragged(np.concatenate([v.values, mv]),
                                 np.concatenate([v.offsets, v.offsets[-1] + mo[1:]])))
        values = merged
        src[multi] = n_pairs + np.arange(len(multi), dtype=np.int64)
    return KeyGroups(keys, src, values, int(len(multi)))


def spec_meta(spec: ShardSpec, encoding: str, direction: str) -> dict[str, Any]:
    """The metadata every shard carries (what ``open_shard`` reads back)."""
    return {
        "encoding": encoding, "direction": direction, "strategy": spec.strategy.name,
        "run": spec.run, "op": spec.op, "chunk": list(spec.chunk),
        "out_box": [list(spec.out_box.lo), list(spec.out_box.hi)],
        "out_shape": list(spec.out_shape), "in_shapes": [list(s) for s in spec.in_shapes],
    }


def drop_lineless(pairs: PairBatch) -> PairBatch:
    """Pairs without output cells, or without input cells in every input, relate nothing:
    drop them (so no key points at an empty set)."""
    keep = (pairs.out.lengths > 0) & (sum(r.lengths for r in pairs.ins) > 0)
    if keep.all():
        return pairs
    rows = np.flatnonzero(keep)
    return PairBatch(pairs.out.take(rows), ins=tuple(r.take(rows) for r in pairs.ins))


def keep_nonempty(pairs: PairBatch) -> PairBatch:
    """Payload pairs without output cells carry no lineage: drop them."""
    keep = pairs.out.lengths > 0
    if keep.all():
        return pairs
    rows = np.flatnonzero(keep)
    return PairBatch(pairs.out.take(rows), payload=pairs.payload.take(rows))


def lineage_pairs(pairs: PairBatch | None, spec: ShardSpec, encoding: str, direction: str
                  ) -> tuple[dict[str, Any], PairBatch | None]:
    """``(shard metadata, the pairs that relate something)``; None when no pair does, and
    the shard is then an empty one."""
    meta = spec_meta(spec, encoding, direction)
    if pairs is not None:
        pairs = keep_nonempty(pairs) if pairs.is_payload else drop_lineless(pairs)
    return meta, (pairs if pairs is not None and len(pairs) else None)
