"""PayMany (paper VI-B, Figure 4.3): one entry per region pair: output cells + payload.

Like FullMany (see :mod:`encoders.layouts.pairtable`) with the input cells replaced by a
payload section (:mod:`encoders.formats.payloads`): an R-tree over the bounding box of each
entry's output cells finds the entries a frontier touches. Pairs with identical output sets
merge into one entry holding all their distinct payloads. Backward-optimized only; forward
queries read every entry (``payload_pairs(None)``) and apply ``map_p``.

>>> PayMany().name
'PayMany'
"""

from __future__ import annotations

import numpy as np

from encoders.base import EncodedShard, Encoding, ShardData
from encoders.formats.codec import decode_sets, set_tokens
from encoders.formats.csr import (interleave, offsets_from_lengths, segment_any, take_rows,
                                  union_by_owner)
from encoders.formats.hashing import dedup_rows
from encoders.formats.payloads import payload_ids, read_section, section_tokens
from encoders.formats.varint import varint_encode
from encoders.layouts import pairtable
from encoders.layouts.keyspace import lin_range_box, touches
from encoders.layouts.pairs import lineage_pairs
from subzero.cells import Ragged
from subzero.frontier import member
from subzero.lineage import PairBatch, ShardSpec
from subzero.modes import Direction


class PayMany(Encoding):
    """Payload lineage, one entry per region pair plus an R-tree (see the docstring)."""

    name = "PayMany"
    payload = True
    directions = frozenset({Direction.BACKWARD})
    many = True
    into_mask = False

    def encode(self, pairs: PairBatch | None, spec: ShardSpec) -> EncodedShard:
        meta, pairs = lineage_pairs(pairs, spec, self.name, self.direction.value)
        if pairs is None:
            return EncodedShard(meta=dict(meta, empty=True))
        out = pairs.out
        ov, oo = np.asarray(out.values, dtype=np.uint64), np.asarray(out.offsets, np.int64)
        pid, first = payload_ids(pairs.payload)
        ginv, gfirst = dedup_rows(ov, oo)  # entries: distinct output sets
        e = len(gfirst)
        ids, id_off = union_by_owner(pid.astype(np.uint64), ginv, e)
        ev, eo = take_rows(ov, oo, gfirst)
        stok, stoff = set_tokens(ev, eo, spec.out_shape)
        (ptok, ptoff), raw = section_tokens(ids.astype(np.int64), id_off, pairs.payload, first)
        tok, toff = interleave([(stok, stoff), (ptok, ptoff)])
        b, blen = varint_encode(tok)
        body, boff = interleave([(b, offsets_from_lengths(blen)[toff]), raw])
        entries = Ragged(ev, eo)
        meta.update(empty=False, entries=int(e), records=int(e), payloads=int(len(first)),
                    key_spaces={"out": lin_range_box(ev, spec.out_shape)},
                    merged=int(len(pairs) - e))
        return EncodedShard(tables=[pairtable.entry_table(body, boff)],
                            rtrees=[pairtable.spatial_index("out", entries, spec.out_shape)],
                            meta=meta)

    def payload_pairs(self, shard: ShardData, out_lin: np.ndarray | None,
                      deadline: float | None = None) -> PairBatch | None:
        m = shard.meta
        if m.get("empty"):
            return None
        ids = None
        if out_lin is not None:
            if not touches(out_lin, m["key_spaces"]["out"], m["out_shape"]):
                return None
            ids = pairtable.candidates(shard, "out", out_lin, m["out_shape"])
            if ids is not None and len(ids) == 0:
                return None
        outs, pays = [], []
        for batch in pairtable.entries(shard, ids, deadline):
            tok, toff, ends = pairtable.tokens(batch)
            ov, oo, _, after = decode_sets(tok, toff[:-1], m["out_shape"])
            if out_lin is None:
                keep = np.ones(len(ov), dtype=bool)
            else:
                keep = member(out_lin, ov)
            rows = np.flatnonzero(segment_any(keep, oo))
            if len(rows) == 0:
                continue
            cs = np.zeros(len(keep) + 1, dtype=np.int64)
            np.cumsum(keep, out=cs[1:])
            kept = Ragged(ov[keep], offsets_from_lengths(cs[oo[1:]] - cs[oo[:-1]]))
            npay, payloads = read_section(np.asarray(batch.values, dtype=np.uint8), tok, ends,
                                          after[rows])
            pv, po = take_rows(kept.values, kept.offsets, np.repeat(rows, npay))
            outs.append(Ragged(pv, po))
            pays.append(payloads)
        if not outs:
            return None
        return PairBatch(Ragged.concat(outs), payload=Ragged.concat(pays))
