"""Lookups of a few cells in plain Python (the FullOne cell index and record heap).

A query of a handful of cells touches one or two index runs and a few short records. The
vectorized path (:mod:`encoders.layouts.cellindex`, :mod:`encoders.formats.codec`) spends
about 100 numpy calls on it whatever its size, which is most of a sub-millisecond lineage
query; here the same bytes are read with a few LMDB calls and a few hundred Python
operations. The answer is the same (tests compare both paths on every encoding the codec
has); anything larger than :data:`FEW_CELLS` query cells or :data:`MAX_CELLS` answer cells
returns None and the caller takes the vectorized path.

>>> varints(bytes([1, 172, 2]))
[1, 300]
>>> decode_set([2 << 2 | 2, 1, 3, 2, 2], 0, (10, 10))[:2]   # a 2x2 box at (1, 3)
([13, 14, 23, 24], False)
"""

from __future__ import annotations

from functools import lru_cache
from itertools import product
from typing import Sequence

import numpy as np

from encoders.base import ShardData
from encoders.formats.codec import BOX, BOX_REL, LIST_REL
from encoders.layouts.cellindex import bucket_bits, low_bytes, record_span

FEW_CELLS = 64     # query cells up to which lookups run in plain Python
MAX_CELLS = 4096   # decoded cells (absolute sets once, relative ones per key) up to which they do
MAX_RECORD = 1024  # record bytes up to which a record is decoded in plain Python


@lru_cache(maxsize=256)
def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= int(n)
    return tuple(out[::-1])


def py_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """C-order strides in cells, as Python ints."""
    return _strides(tuple(int(n) for n in shape))


def varints(b: bytes) -> list[int]:
    """LEB128 varints of ``b`` (a record of whole tokens)."""
    out, v, shift = [], 0, 0
    for x in b:
        if x < 0x80:
            out.append(v | (x << shift))
            v = shift = 0
        else:
            v |= (x & 0x7F) << shift
            shift += 7
    return out


def _unzigzag(u: int) -> int:
    return (u >> 1) ^ -(u & 1)


def touching(q: Sequence[int], space: dict | None, shape: Sequence[int]) -> list[int]:
    """The cells of ``q`` inside a key space (its linear range and bounding box), the test
    :func:`encoders.layouts.keyspace.touches` makes, kept per cell."""
    if not space or not space.get("count"):
        return []
    lo_lin, hi_lin = space["lin"]
    q = [c for c in q if lo_lin <= c <= hi_lin]
    if len(shape) < 2 or not q:
        return q
    lo, hi = space["lo"], space["hi"]
    if len(shape) == 2:
        n = int(shape[1])
        (r0, c0), (r1, c1) = lo, hi
        return [c for c in q if r0 <= c // n < r1 and c0 <= c % n < c1]
    axes = list(zip(py_strides(shape), shape, lo, hi))
    return [c for c in q if all(a <= (c // s) % n < b for s, n, a, b in axes)]


def lookup(shard: ShardData, table: str, q: Sequence[int]) -> list[tuple[int, int]]:
    """``[(cell, ref)]`` for the query cells (sorted) present in a cell index
    (:mod:`encoders.layouts.cellindex`): one LMDB read per run, matched with ``bytes.find``
    on a 256-cell run's low bytes (sorted, one per item) or by bisection on a longer run's
    two-byte ones."""
    bits = bucket_bits(shard, table)
    lb = low_bytes(bits)
    kp = 0 if shard.meta.get("tables", {}).get(table) == "packed" else 8  # key prefix
    w = kp + int(shard.meta.get("item_bytes", {}).get(table, 1))
    low = (1 << bits) - 1
    out: list[tuple[int, int]] = []
    run, lows, buf = -1, b"", b""
    for c in q:
        r = c >> bits
        if r != run:
            run = r
            buf = shard.run_items(table, r << bits)
            lows = buf[kp::w]
        j = lows.find(c & low) if lb == 1 else _find_two_byte(buf, w, kp, c & low)
        if j >= 0:
            out.append((c, int.from_bytes(buf[j * w + kp + lb:(j + 1) * w], "big")))
    return out


def _find_two_byte(buf: bytes, w: int, kp: int, v: int) -> int:
    """The item of a run (``w``-byte rows: ``kp`` bytes of key, a two-byte low part, the
    ref) whose low part is ``v``, found with ``bytes.find`` (a match not at an item's low
    part is passed over; low parts are unique within a run); -1 when none is."""
    pat = bytes((v >> 8, v & 0xFF))
    j = buf.find(pat, kp)
    while j >= 0:
        k, r = divmod(j - kp, w)
        if r == 0:
            return k
        j = buf.find(pat, j + 1)
    return -1


def records(heap: np.ndarray, refs: Sequence[int]) -> list[bytes]:
    """The records at byte offsets ``refs`` of a record heap, as bytes (in ``refs`` order)."""
    view = memoryview(heap)
    return [bytes(view[a:a + n]) for a, n in (record_span(view, ref) for ref in refs)]


def payload_rows(cells: Sequence[Sequence[int]], recs: Sequence[bytes]
                 ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None:
    """The payload pairs of records holding a payload section each (:mod:`encoders.formats.
    payloads`: a varint count, the payloads' varint lengths, their bytes), each record
    paired with the cells ``cells`` gives it: ``((cells, offsets), (payload bytes,
    offsets))``, one row per payload in record order, as :func:`~encoders.formats.payloads.
    read_section` and ``take_rows`` give them. None when a record is too long for plain
    Python (:data:`MAX_RECORD`); a record whose payloads do not end where it does is
    garbled (ValueError, which a query step reports as damage, as the vectorized path's
    errors)."""
    out: list[int] = []
    out_len: list[int] = []
    pays: list[bytes] = []
    for cs, rec in zip(cells, recs):
        if len(rec) > MAX_RECORD:
            return None
        p, m = record_span(rec, 0)  # a varint: the count, then each length
        lens = []
        for _ in range(m):
            p, n = record_span(rec, p)
            lens.append(n)
        if p + sum(lens) != len(rec):
            raise ValueError(f"a payload record of {len(rec)} bytes holds {p + sum(lens)}")
        for n in lens:
            pays.append(rec[p:p + n])
            p += n
            out.extend(cs)
            out_len.append(len(cs))
    cell_off = np.zeros(len(out_len) + 1, dtype=np.int64)
    np.cumsum(out_len, out=cell_off[1:])
    pay_off = np.zeros(len(pays) + 1, dtype=np.int64)
    np.cumsum(list(map(len, pays)), out=pay_off[1:])
    return ((np.array(out, dtype=np.uint64), cell_off),
            (np.frombuffer(b"".join(pays), dtype=np.uint8).copy(), pay_off))


def decode_set(tok: Sequence[int], p: int, shape: Sequence[int]
               ) -> tuple[list[int], bool, int]:
    """The set whose header token is ``tok[p]`` (:mod:`encoders.formats.codec`): ``(cells,
    relative, position after it)``; a relative set holds signed offsets from its anchor."""
    ndim = len(shape)
    hdr = tok[p]
    kind, cnt = hdr & 3, hdr >> 2
    rel = kind in (LIST_REL, BOX_REL)
    if kind < BOX:
        if cnt == 0:
            return [], rel, p + 1
        cur = _unzigzag(tok[p + 1]) if rel else tok[p + 1]
        cells = [cur]
        for g in tok[p + 2:p + 1 + cnt]:
            cur += g + 1
            cells.append(cur)
        return cells, rel, p + 1 + cnt
    lo = tok[p + 1:p + 1 + ndim]
    if rel:
        lo = [_unzigzag(x) for x in lo]
    ext = tok[p + 1 + ndim:p + 1 + 2 * ndim]
    st = py_strides(shape)
    size = 1
    for e in ext:
        size *= e
    if size > MAX_CELLS:
        raise _TooMany
    base = sum(a * s for a, s in zip(lo, st))
    cells = [base + sum(j * s for j, s in zip(js, st))
             for js in product(*[range(e) for e in ext])]
    return cells, rel, p + 1 + 2 * ndim


def skip_set(tok: Sequence[int], p: int, ndim: int) -> int:
    """The position after the set whose header is ``tok[p]``."""
    hdr = tok[p]
    return p + (1 + 2 * ndim if (hdr & 3) >= BOX else 1 + (hdr >> 2))


_ONE = 1 << 2  # the header of a one-cell absolute list (codec.LIST)


class _TooMany(Exception):
    """The answer outgrows the plain-Python path."""


def union(shard: ShardData, heap_name: str, found: list[tuple[int, int]], set_index: int,
          shapes: Sequence[Sequence[int]]) -> np.ndarray | None:
    """Union of set ``set_index`` of the records of ``found`` (``(key cell, ref)``, relative
    sets anchored at their key cell) as sorted unique uint64; None when a record or the
    answer is too large for plain Python (use the vectorized path).

    Records hold one set per shape, one after the other; the distinct records are read,
    joined and decoded in one pass.
    """
    if not found:
        return np.empty(0, dtype=np.uint64)
    heap = memoryview(shard.blob(heap_name))
    refs = list(dict.fromkeys([r for _, r in found]))
    parts, size = [], 0
    for ref in refs:
        n = heap[ref]
        start = ref + 1
        if n >= 0x80:
            start, n = record_span(heap, ref)
        size += n
        # a list cell takes a byte at least: more bytes than MAX_CELLS may mean too many
        # cells to decode here, so the vectorized path decides before any is decoded
        if n > MAX_RECORD or size > MAX_CELLS:
            return None
        parts.append(heap[start:start + n])
    tok = varints(b"".join(parts))
    decoded: dict[int, tuple[list[int], bool]] = {}
    before = [len(shp) for shp in shapes[:set_index]]
    after = [len(shp) for shp in shapes[set_index + 1:]]
    shape = shapes[set_index]
    p = 0
    try:
        for ref in refs:
            for nd in before:
                p = skip_set(tok, p, nd)
            hdr = tok[p]
            if hdr == _ONE:  # one absolute cell (the commonest set): inline
                decoded[ref] = ([tok[p + 1]], False)
                p += 2
            else:
                cells, rel, p = decode_set(tok, p, shape)
                decoded[ref] = (cells, rel)
            for nd in after:
                p = skip_set(tok, p, nd)
    except _TooMany:
        return None
    out: set[int] = set()
    total, relative = 0, False
    for cells, rel in decoded.values():  # absolute sets: once per record
        if rel:
            relative = True
        else:
            total += len(cells)
            if total > MAX_CELLS:
                return None
            out.update(cells)
    if relative:  # relative sets: once per key cell
        for cell, ref in found:
            cells, rel = decoded[ref]
            if rel:
                total += len(cells)
                if total > MAX_CELLS:
                    return None
                if len(cells) == 1:
                    out.add(cell + cells[0])
                else:
                    out.update([cell + c for c in cells])
    if total > MAX_CELLS:
        return None
    return np.array(sorted(out), dtype=np.uint64)
