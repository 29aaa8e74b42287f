"""The per-cell layout shared by FullOne and PayOne: a cell index plus a record heap.

Cell index
    One LMDB DUPSORT|DUPFIXED table. Every key cell is one fixed-width duplicate item
    ``[k & 255][ref, big-endian]`` stored under the 8-byte big-endian key ``k & ~255`` (the
    linear index of the 256-cell run holding ``k``). LMDB packs the items of one key
    densely, without its per-entry node header, so a key cell costs ``1 + ref`` bytes plus
    about 34 bytes per run it shares with up to 255 other key cells, instead of the
    ``18 + value`` bytes of a plain entry. A lookup of any number of cells reads each run
    touched once (``Cursor.getmulti`` with ``dupfixed_bytes``) and matches in numpy.

Record heap
    One blob of length-prefixed records (varint byte length, then the record); ``ref`` is a
    record's byte offset. Identical records are stored once and shared by every key that
    points at them (the paper's "reference to a single entry"); with relative cell sets this
    includes whole families of translated sets (see :mod:`encoders.formats.codec`).

>>> import numpy as np
>>> t = index_table("k", np.array([3, 300], dtype=np.uint64), np.array([0, 7], dtype=np.uint64))
>>> t.keys.tolist(), t.items.tolist()
([0, 256], [[3, 0], [44, 7]])
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from encoders.base import ShardData, Table, check_deadline
from encoders.formats.csr import gather_index, interleave, offsets_from_lengths, uniq
from encoders.formats.varint import read_prefix_varint, varint_decode, varint_encode
from subzero.frontier import clip_range, member

BUCKET_BITS = 8
_LOW = np.uint64((1 << BUCKET_BITS) - 1)
_BATCH = 8192  # runs per getmulti call (deadline checks in between)
_FEW_RECORDS = 64  # up to this many records are sliced one by one, not gathered


def ref_width(max_ref: int) -> int:
    return max(1, (int(max_ref).bit_length() + 7) // 8)


def index_table(name: str, keys: np.ndarray, refs: np.ndarray) -> Table:
    """The cell index for sorted unique ``keys`` pointing at heap offsets ``refs``."""
    keys = np.asarray(keys, dtype=np.uint64)
    refs = np.asarray(refs, dtype=np.uint64)
    w = ref_width(int(refs.max()) if len(refs) else 0)
    items = np.empty((len(keys), 1 + w), dtype=np.uint8)
    items[:, 0] = (keys & _LOW).astype(np.uint8)
    rb = np.ascontiguousarray(refs.astype(">u8")).view(np.uint8).reshape(-1, 8)
    items[:, 1:] = rb[:, 8 - w:]
    return Table(name, keys & ~_LOW, items=items)


def build_heap(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate records (CSR bytes) with varint length prefixes: ``(heap, offsets)``."""
    lens = np.diff(offsets).astype(np.uint64)
    pb, pl = varint_encode(lens)
    heap, hoff = interleave([(pb, offsets_from_lengths(pl)),
                             (np.asarray(values, dtype=np.uint8), offsets)])
    return heap, hoff[:-1]


def record_span(heap: memoryview, ref: int) -> tuple[int, int]:
    """``(start, length)`` of the record at byte offset ``ref`` of a heap (after its
    varint length prefix)."""
    n, shift = 0, 0
    while True:
        x = heap[ref]
        ref += 1
        n |= (x & 0x7F) << shift
        if x < 0x80:
            return ref, n
        shift += 7


def read_records(heap: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The records at byte offsets ``refs`` (CSR bytes, in ``refs`` order)."""
    refs = np.asarray(refs, dtype=np.int64)
    if len(refs) == 0:
        return np.empty(0, dtype=np.uint8), np.zeros(1, dtype=np.int64)
    if len(refs) <= _FEW_RECORDS:  # a few (maybe long) records: one slice each
        view = memoryview(heap)
        parts = [heap[a:a + n] for a, n in (record_span(view, r) for r in refs.tolist())]
        lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        return np.concatenate(parts), offsets_from_lengths(lens)
    n, plen = read_prefix_varint(heap, refs)
    lens = n.astype(np.int64)
    return heap[gather_index(refs + plen, lens)], offsets_from_lengths(lens)


def record_tokens(body: np.ndarray, offsets: np.ndarray, whole: bool = False
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Varint tokens of records decoded together: ``(tokens, token offsets, token ends)``,
    where ``ends`` is each token's last byte (records never run into each other).
    ``whole``: every record is whole varints (FullOne's), so each ends a token anyway."""
    stops = None
    if not whole:
        stops = np.zeros(len(body), dtype=bool)
        nz = np.diff(offsets) > 0
        stops[offsets[1:][nz] - 1] = True
    tok, ends = varint_decode(body, stops)
    toff = np.searchsorted(ends, offsets, side="left")
    return tok, toff.astype(np.int64), ends


def _refs(items: np.ndarray) -> np.ndarray:
    w = items.shape[1] - 1
    pad = np.zeros((len(items), 8), dtype=np.uint8)
    pad[:, 8 - w:] = items[:, 1:]
    return pad.view(">u8").reshape(-1).astype(np.uint64)


def lookup(shard: ShardData, table: str, q: np.ndarray, deadline: float | None
           ) -> tuple[np.ndarray, np.ndarray]:
    """``(cells, refs)`` for the query cells (sorted unique uint64) present in the index."""
    space = shard.meta.get("key_spaces", {}).get(table)
    if not space or not space.get("count") or len(q) == 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64)
    q = clip_range(q, space["lin"][0], space["lin"][1])
    runs = uniq(q & ~_LOW)
    cells, refs = [], []
    for s in range(0, len(runs), _BATCH):
        check_deadline(deadline)
        k, items = shard.items(table, runs[s:s + _BATCH])
        c = k + items[:, 0].astype(np.uint64)
        hit = member(q, c)
        cells.append(c[hit])
        refs.append(_refs(items[hit]))
    if not cells:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64)
    return np.concatenate(cells), np.concatenate(refs)


def scan(shard: ShardData, table: str, deadline: float | None, batch: int = 1 << 16
         ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every ``(cells, refs)`` of the index, about ``batch`` cells at a time."""
    runs = shard.all_keys(table)
    step = max(1, batch >> BUCKET_BITS) * 4
    for s in range(0, len(runs), step):
        check_deadline(deadline)
        k, items = shard.items(table, runs[s:s + step])
        yield k + items[:, 0].astype(np.uint64), _refs(items)
