"""64-bit row fingerprints and exact deduplication of CSR rows.

Rows are hashed (a polynomial over their values, finished with a mixer), grouped by hash,
and every row is then compared with its group's representative, so the result is exact:
a 64-bit collision only costs a slow path.

>>> import numpy as np
>>> inv, first = dedup_rows(np.array([1, 2, 1, 2, 7], np.uint64), np.array([0, 2, 4, 5]))
>>> inv[0] == inv[1] != inv[2], len(first)
(np.True_, 2)
"""

from __future__ import annotations

import numpy as np

from encoders.formats.csr import gather_index, segment_any, segment_sum_u64, uniq_inverse

U64 = np.uint64
_P = np.uint64(0x100000001B3)  # FNV prime: odd, so powers never vanish mod 2**64
_C = np.uint64(0x9E3779B97F4A7C15)


def _mix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> U64(30))
    h = h * U64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> U64(27))
    h = h * U64(0x94D049BB133111EB)
    return h ^ (h >> U64(31))


def _powers(n: int) -> np.ndarray:
    p = np.full(max(n, 1), _P, dtype=np.uint64)
    p[0] = 1
    return np.cumprod(p, dtype=np.uint64)


def poly_hash(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row ``sum_j (v_j + C) P**j`` (mod 2**64) and ``sum_j P**j``.

    Shifting every value of a row by ``-a`` changes its hash by ``-a * sum_j P**j``: that is
    how the relative (translation-invariant) form of a set is hashed without building it.
    """
    values = np.asarray(values, dtype=np.uint64)
    lens = np.diff(offsets)
    pw = _powers(int(lens.max()) if len(lens) else 1)
    pos = np.arange(len(values), dtype=np.int64) - np.repeat(offsets[:-1], lens)
    mult = pw[pos]
    psum = np.zeros(len(pw) + 1, dtype=np.uint64)
    np.cumsum(pw, dtype=np.uint64, out=psum[1:])
    return segment_sum_u64((values + _C) * mult, offsets), psum[lens]


def finish_hash(h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return _mix(h ^ _mix(np.asarray(lengths, dtype=np.uint64) + _C))


def _dedup_dense(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`dedup_rows` for rows of one length (an ``(n, L)`` matrix): byte rows are
    hashed eight bytes at a time and compared as whole rows."""
    n, width = m.shape
    if width == 0:
        return np.zeros(n, dtype=np.int64), np.zeros(1, dtype=np.int64)
    if m.dtype == np.uint8 and width <= 8:  # a row is one word: equal words, equal rows
        words = np.zeros((n, 8), dtype=np.uint8)
        words[:, :width] = m
        _, inv, first = uniq_inverse(words.view(np.uint64).reshape(-1))
        return inv, first
    if m.dtype == np.uint8:  # over 8 bytes: hashed a word at a time, then checked
        words = np.zeros((n, -(-width // 8) * 8), dtype=np.uint8)
        words[:, :width] = m
        w = words.view(np.uint64)
    else:
        w = m.astype(np.uint64, copy=False)
    pw = _powers(w.shape[1])
    h = np.zeros(n, dtype=np.uint64)
    for j in range(w.shape[1]):  # columns, not cells: a handful of vector ops
        h += (w[:, j] + _C) * pw[j]
    _, inv, first = uniq_inverse(finish_hash(h, np.full(n, width)))
    if (m[first[inv]] == m).all():
        return inv, first
    return _dedup_exact(m.reshape(-1), np.arange(n + 1, dtype=np.int64) * width)


def _dedup_exact(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dedup by comparing bytes in Python: only after a 64-bit hash collision."""
    seen: dict[bytes, int] = {}
    inv = np.empty(len(offsets) - 1, dtype=np.int64)
    first: list[int] = []
    for r in range(len(inv)):
        key = values[offsets[r]:offsets[r + 1]].tobytes()
        if key not in seen:
            seen[key] = len(first)
            first.append(r)
        inv[r] = seen[key]
    return inv, np.asarray(first, dtype=np.int64)


def dedup_rows(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact dedup of CSR rows: ``(inverse, first)``; row ``r`` equals row
    ``first[inverse[r]]``. Hash first, then verify every row against its representative
    (a hash collision falls back to comparing bytes in Python: it never happens in
    practice, but keeps the result exact)."""
    n = len(offsets) - 1
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lens = np.diff(offsets)
    if (lens == lens[0]).all() and offsets[0] == 0:
        return _dedup_dense(np.asarray(values)[:offsets[-1]].reshape(n, int(lens[0])))
    h = finish_hash(poly_hash(values, offsets)[0], lens)
    _, inv, first = uniq_inverse(h)
    rep = first[inv]
    ok = lens[rep] == lens
    if ok.all():
        a = values[gather_index(offsets[:-1][rep], lens)]
        diff = a != values
        ok = ~segment_any(diff, offsets)
    if ok.all():
        return inv.astype(np.int64), first.astype(np.int64)
    return _dedup_exact(values, offsets)
