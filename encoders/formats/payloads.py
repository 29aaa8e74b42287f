"""Payload lists inside records, shared by PayOne and PayMany.

A payload section is the varint tokens ``m, len_1 .. len_m`` followed by the ``m`` raw
payloads. It follows whatever tokens precede it in a record (nothing for PayOne, the
output cell set for PayMany). Identical payloads are numbered once (:func:`payload_ids`);
a key holding several payloads (colliding pairs) keeps them all, sorted by number.

>>> import numpy as np
>>> from subzero.cells import Ragged
>>> pay = Ragged.from_rows([np.frombuffer(b"ab", np.uint8), np.frombuffer(b"c", np.uint8)],
...                        np.uint8)
>>> (tok, toff), raw = section_tokens(np.array([1, 0]), np.array([0, 2]), pay, np.array([0, 1]))
>>> tok.tolist(), bytes(raw[0])
([2, 1, 2], b'cab')
"""

from __future__ import annotations

import numpy as np

from encoders.formats.csr import (gather_index, interleave, offsets_from_lengths, segment_sum_u64,
                                  take_rows)
from encoders.formats.hashing import dedup_rows
from encoders.formats.varint import varint_encode
from subzero.cells import Ragged


def payload_ids(payload: Ragged) -> tuple[np.ndarray, np.ndarray]:
    """Number identical payloads: ``(id per pair, first pair of each id)``."""
    return dedup_rows(np.asarray(payload.values, dtype=np.uint8),
                      np.asarray(payload.offsets, dtype=np.int64))


def section_tokens(ids: np.ndarray, id_off: np.ndarray, payload: Ragged, first: np.ndarray
                   ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """For rows of payload ids (CSR): the token part ``(m, lens)`` and the raw bytes part,
    both CSR with one row per id row."""
    m = np.diff(id_off).astype(np.uint64)
    src = first[np.asarray(ids, dtype=np.int64)]
    lens = np.diff(payload.offsets)[src].astype(np.uint64)
    tok, toff = interleave([(m, np.arange(len(m) + 1, dtype=np.int64)), (lens, id_off)])
    raw, _ = take_rows(np.asarray(payload.values, dtype=np.uint8), payload.offsets, src)
    raw_off = offsets_from_lengths(segment_sum_u64(lens, id_off).astype(np.int64))
    return (tok, toff), (raw, raw_off)


def join_bytes(tok: np.ndarray, toff: np.ndarray, raw: tuple[np.ndarray, np.ndarray]
               ) -> tuple[np.ndarray, np.ndarray]:
    """Records = varint bytes of each token row, then its raw bytes (CSR uint8)."""
    b, blen = varint_encode(tok)
    cb = offsets_from_lengths(blen)
    return interleave([(b, cb[toff]), (np.asarray(raw[0], dtype=np.uint8), raw[1])])


def read_section(body: np.ndarray, tok: np.ndarray, ends: np.ndarray, pos: np.ndarray
                 ) -> tuple[np.ndarray, Ragged]:
    """Decode the payload sections starting at token ``pos`` of each record:
    ``(m per record, payload rows in record order)``."""
    pos = np.asarray(pos, dtype=np.int64)
    m = tok[pos].astype(np.int64)
    lens = tok[gather_index(pos + 1, m)].astype(np.int64)
    raw_start = ends[pos + m] + 1
    lo = offsets_from_lengths(lens)
    # start of every payload: its record's raw start plus the payloads before it there
    m_off = offsets_from_lengths(m)
    starts = np.repeat(raw_start - lo[m_off[:-1]], m) + lo[:-1]
    vals = body[gather_index(starts, lens)]
    return m, Ragged(vals, lo)
