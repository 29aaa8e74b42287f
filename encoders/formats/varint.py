"""LEB128 varints and zigzag codes, encoded and decoded in bulk.

>>> import numpy as np
>>> b, lens = varint_encode(np.array([1, 300], dtype=np.uint64))
>>> b.tolist(), lens.tolist(), varint_decode(b)[0].tolist()
([1, 172, 2], [1, 2], [1, 300])
"""

from __future__ import annotations

import numpy as np

from encoders.formats.csr import offsets_from_lengths

U64 = np.uint64


def zigzag(v: np.ndarray) -> np.ndarray:
    """Signed to unsigned, small magnitudes to small codes: 0,-1,1,-2 -> 0,1,2,3."""
    v = np.asarray(v, dtype=np.int64)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def unzigzag(u: np.ndarray) -> np.ndarray:
    u = np.asarray(u, dtype=np.uint64)
    return (u >> U64(1)).view(np.int64) ^ -((u & U64(1)).view(np.int64))


def varint_lengths(u: np.ndarray) -> np.ndarray:
    """Bytes of each value as a LEB128 varint (1..10)."""
    u = np.asarray(u, dtype=np.uint64)
    n = np.ones(len(u), dtype=np.int64)
    for k in range(1, 10):
        n += u >= U64(1 << (7 * k))
    return n


def varint_encode(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LEB128 bytes of every value, concatenated, and the byte length of each.

    >>> varint_encode(np.array([1, 300], dtype=np.uint64))[0].tolist()
    [1, 172, 2]
    """
    u = np.asarray(u, dtype=np.uint64)
    lens = varint_lengths(u)
    total = int(lens.sum())
    if total == len(u):  # every value below 128: the bytes are the values
        return u.astype(np.uint8), lens
    starts = offsets_from_lengths(lens)[:-1]
    out = np.empty(total, dtype=np.uint8)
    # one pass per byte position (values rarely need more than 2 or 3 bytes)
    idx = None
    for k in range(int(lens.max())):
        if k:
            idx = np.flatnonzero(lens > k) if idx is None else idx[lens[idx] > k]
        v = u if idx is None else u[idx]
        ln = lens if idx is None else lens[idx]
        b = ((v >> U64(7 * k)) & U64(0x7F)).astype(np.uint8)
        b |= (ln > k + 1).astype(np.uint8) << 7
        out[(starts if idx is None else starts[idx]) + k] = b
    return out, lens


def varint_decode(buf: np.ndarray, stops: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Decode concatenated varints: ``(values, index of each value's last byte)``.

    ``stops`` (bool per byte) forces a value to end at a byte, so records decoded together
    never run into each other even when a record ends in raw (non-varint) bytes.
    """
    buf = np.asarray(buf, dtype=np.uint8)
    if len(buf) == 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    end = buf < 0x80
    if stops is not None:
        end |= stops
    end[-1] = True
    ends = np.flatnonzero(end)
    if len(ends) == len(buf):  # one byte per value
        return (buf & 0x7F).astype(np.uint64), ends
    # combine in place at each multi-byte token's last byte (its highest 7 bits), walking
    # back one byte at a time over the tokens that long only (most are one or two bytes):
    # a byte that ends no token belongs to the token after it
    vb = (buf & np.uint8(0x7F)).astype(np.uint64)
    at = np.flatnonzero(end[1:] & ~end[:-1]) + 1
    back = at - 1
    while len(at):
        vb[at] = (vb[at] << U64(7)) | vb[back]
        back = back - 1
        keep = ~end[back]  # back may reach -1: end[-1] is True
        at, back = at[keep], back[keep]
    return vb[ends], ends


def read_prefix_varint(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint starting at each byte position ``at``: ``(value, its byte length)``."""
    at = np.asarray(at, dtype=np.int64)
    idx = np.minimum(at[:, None] + np.arange(10, dtype=np.int64), len(buf) - 1)
    win = buf[idx]
    term = win < 0x80
    first = np.argmax(term, axis=1)
    k = np.arange(10)
    use = k[None, :] <= first[:, None]
    contrib = ((win & 0x7F).astype(np.uint64) << (7 * k).astype(np.uint64)) * use
    return np.bitwise_or.reduce(contrib, axis=1), first + 1
