"""CSR batches of variable-length rows (``values`` + ``offsets``), vectorized.

The encoders hold every batch of cell sets, tokens or bytes in this form (as
:class:`subzero.cells.Ragged` does); these helpers gather, scatter, interleave, sort and merge
rows without a Python loop over rows or values.

>>> import numpy as np
>>> v, o = interleave([(np.array([1, 2, 3]), np.array([0, 2, 3])),
...                    (np.array([9, 8]), np.array([0, 1, 2]))])
>>> v.tolist(), o.tolist()
([1, 2, 9, 3, 8], [0, 3, 5])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from subzero.cells import run_starts  # noqa: F401  (where runs of equal values start)
from subzero.cells import unique as uniq  # noqa: F401  (sorted distinct values)

U64 = np.uint64


def offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    off = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    return off


def row_ids(offsets: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def gather_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Flat positions ``starts[k] + 0..lengths[k]-1`` for every row ``k`` (a ragged gather)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    off = offsets_from_lengths(lengths)
    return (np.repeat(np.asarray(starts, dtype=np.int64) - off[:-1], lengths)
            + np.arange(off[-1], dtype=np.int64))


def take_rows(values: np.ndarray, offsets: np.ndarray, rows: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``rows`` of a CSR batch, as a new CSR batch."""
    rows = np.asarray(rows, dtype=np.int64)
    n = len(offsets) - 1
    if n and offsets[0] == 0:
        width = int(offsets[1])
        if width and offsets[-1] == width * n and (np.diff(offsets) == width).all():
            # rows of one length (payloads, fixed fanin): a 2-d gather, no index arrays
            out = np.asarray(values)[:width * n].reshape(n, width)[rows].reshape(-1)
            return out, np.arange(len(rows) + 1, dtype=np.int64) * width
    lens = offsets[1:][rows] - offsets[:-1][rows]
    return values[gather_index(offsets[:-1][rows], lens)], offsets_from_lengths(lens)


def interleave(parts: Sequence[tuple[np.ndarray, np.ndarray]], dtype=None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Row ``r`` of the result is the concatenation of row ``r`` of every part.

    Each part lands through a boolean mask built from +1/-1 marks at its rows' edges (a
    cumulative sum of bytes): no int64 index array as long as the data, which matters for
    tens of millions of payload bytes.
    """
    lens = np.stack([np.diff(o) for _, o in parts])
    out_off = offsets_from_lengths(lens.sum(axis=0))
    total = int(out_off[-1])
    out = np.empty(total, dtype=dtype or parts[0][0].dtype)
    base = out_off[:-1].copy()
    for (v, o), ln in zip(parts, lens):
        if len(v) == total:
            out[:] = v
        elif len(v):
            nz = ln > 0
            marks = np.zeros(total + 1, dtype=np.int8)
            marks[base[nz]] = 1
            marks[base[nz] + ln[nz]] -= 1
            out[np.cumsum(marks[:-1], dtype=np.int8).view(bool)] = v
        base += ln
    return out, out_off


def uniq_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(distinct sorted values, inverse, index of the first occurrence of each)``."""
    x = np.asarray(x).reshape(-1)
    order = np.argsort(x, kind="stable")
    s = x[order]
    first = np.ones(len(s), dtype=bool)
    if len(s) > 1:
        np.not_equal(s[1:], s[:-1], out=first[1:])
    ids = np.cumsum(first) - 1
    inv = np.empty(len(x), dtype=np.int64)
    inv[order] = ids
    return s[first], inv, order[first]


def compact_ids(x: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct sorted values, inverse)`` of integers ``x`` in ``[0, n)``, as
    :func:`uniq_inverse` gives them, by marking the values seen instead of sorting: O(len(x)
    + n). A shard's keys point at a few thousand records, so ``n`` is small against
    ``len(x)`` and marking beats sorting.

    >>> u, inv = compact_ids(np.array([5, 2, 5, 0]), 8)
    >>> u.tolist(), inv.tolist()
    ([0, 2, 5], [2, 1, 2, 0])
    """
    x = np.asarray(x, dtype=np.int64).reshape(-1)
    seen = np.zeros(int(n), dtype=bool)
    seen[x] = True
    new = np.cumsum(seen, dtype=np.int64) - 1
    return np.flatnonzero(seen), new[x]


def segment_sum_u64(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-row sums modulo 2**64 (empty rows give 0)."""
    cs = np.zeros(len(x) + 1, dtype=np.uint64)
    np.cumsum(x, dtype=np.uint64, out=cs[1:])
    return cs[offsets[1:]] - cs[offsets[:-1]]


def segment_any(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    cs = np.zeros(len(mask) + 1, dtype=np.int64)
    np.cumsum(mask, out=cs[1:])
    return cs[offsets[1:]] > cs[offsets[:-1]]


def canonical_rows(values: np.ndarray, offsets: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Sort every row and drop duplicates within it (a no-op check when already canonical)."""
    values = np.asarray(values, dtype=np.uint64)
    offsets = np.asarray(offsets, dtype=np.int64)
    if len(values) < 2:
        return values, offsets
    inc = values[1:] > values[:-1]
    starts = np.zeros(len(values), dtype=bool)
    starts[offsets[:-1][np.diff(offsets) > 0]] = True
    if (inc | starts[1:]).all():
        return values, offsets
    rows = row_ids(offsets)
    order = np.lexsort((values, rows))
    v, r = values[order], rows[order]
    keep = np.ones(len(v), dtype=bool)
    keep[1:] = (v[1:] != v[:-1]) | (r[1:] != r[:-1])
    return v[keep], offsets_from_lengths(np.bincount(r[keep], minlength=len(offsets) - 1))


def union_by_owner(values: np.ndarray, owner: np.ndarray, n_owner: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique values per owner ``0..n_owner-1`` (the merge of colliding keys)."""
    values = np.asarray(values, dtype=np.uint64)
    owner = np.asarray(owner, dtype=np.int64)
    if len(values) == 0:
        return values, np.zeros(n_owner + 1, dtype=np.int64)
    vmax = int(values.max())
    if n_owner * (vmax + 1) < (1 << 63):
        comb = uniq(owner.astype(np.uint64) * U64(vmax + 1) + values)
        own = (comb // U64(vmax + 1)).astype(np.int64)
        vals = comb - own.astype(np.uint64) * U64(vmax + 1)
    else:
        order = np.lexsort((values, owner))
        v, o = values[order], owner[order]
        keep = np.ones(len(v), dtype=bool)
        keep[1:] = (v[1:] != v[:-1]) | (o[1:] != o[:-1])
        vals, own = v[keep], o[keep]
    return vals, offsets_from_lengths(np.bincount(own, minlength=n_owner))


def segment_cumsum(x: np.ndarray, offsets: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """The running sum of ``x`` (uint64) restarting at each segment: segment ``g`` holds
    ``x[offsets[g]:offsets[g + 1]]`` and ``seg`` is each item's segment.

    >>> segment_cumsum(np.array([1, 2, 3, 4], np.uint64), np.array([0, 2, 4]),
    ...                np.array([0, 0, 1, 1])).tolist()
    [1, 3, 3, 7]
    """
    cs = np.cumsum(x, dtype=np.uint64)
    base = np.zeros(len(offsets) - 1, dtype=np.uint64)
    nz = offsets[:-1] > 0
    base[nz] = cs[offsets[:-1][nz] - 1]
    return cs - base[seg]

