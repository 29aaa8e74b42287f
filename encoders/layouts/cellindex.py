"""The per-cell layout shared by FullOne and PayOne: a cell index plus a record heap.

Cell index
    One LMDB table of runs. Every key cell is one fixed-width item ``[k & low][ref,
    big-endian]``, and the items of one run of ``2**bits`` cells (``low = 2**bits - 1``)
    are one entry under the 8-byte big-endian key ``k & ~low``, one after the other, sorted
    (a *packed* table, :attr:`encoders.base.Table.packed`). A key cell then costs its item
    bytes plus about 18 bytes per run it shares with other key cells, and writing a shard
    is one LMDB put per run, not per cell. A lookup of any number of cells reads each run
    touched once (``Cursor.getmulti``) and matches in numpy. Shards written before this
    layout hold the same items as DUPSORT|DUPFIXED duplicates (about 34 bytes a run, a put
    per cell), which readers still take (``meta["tables"]`` says which).

    Dense key sets take 256-cell runs (8 bits, a one-byte low part: what every shard had
    before the run length could vary). Sparse ones (a cosmic-ray mask's few thousand cells
    in a chunk of half a million) would pay mostly the runs' own bytes, so the encoder
    chooses longer runs, up to 4,096 cells with a two-byte low part, where the modelled
    LMDB bytes are fewest and no run holds more than :data:`MAX_RUN_ITEMS` items (what one
    looked-up cell makes a query read). A shard whose runs are not 256 cells records
    ``bucket_bits`` in its metadata.

Record heap
    One blob of length-prefixed records (varint byte length, then the record); ``ref`` is a
    record's byte offset. Identical records are stored once and shared by every key that
    points at them (the paper's "reference to a single entry"); with relative cell sets this
    includes whole families of translated sets (see :mod:`encoders.formats.codec`).

>>> import numpy as np
>>> t = index_table("k", np.array([3, 300], dtype=np.uint64), np.array([0, 7]), bits=8)
>>> t.keys.tolist(), t.items.tolist()
([0, 256], [[3, 0], [44, 7]])
>>> t = index_table("k", np.array([3, 300], dtype=np.uint64), np.array([0, 7]), bits=12)
>>> t.keys.tolist(), t.items.tolist(), t.bucket_bits
([0, 0], [[0, 3, 0], [1, 44, 7]], 12)
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from encoders.base import ShardData, Table, check_deadline
from encoders.formats.csr import (gather_index, interleave, offsets_from_lengths, run_starts,
                                  uniq)
from encoders.formats.varint import read_prefix_varint, varint_decode, varint_encode
from subzero.frontier import clip_range, member

BUCKET_BITS = 8  # the default run: 256 cells, a one-byte low part
MAX_BUCKET_BITS = 16  # the longest a shard may have: 65,536 cells, a two-byte low part
#: the longest the encoder chooses: past 4,096 cells LMDB fills its pages worse than the
#: size model says, so longer buckets take more pages, not fewer (see
#: benchmarks/bench_encoders.py)
CHOSEN_MAX_BITS = 12
MAX_RUN_ITEMS = 1024  # items a run may hold when it is longer than the default
_ENTRY_BYTES = 18  # LMDB's bytes per entry besides its value: node header, key, pointer
_NODE_MAX = 2040  # LMDB's largest node on a 4 KB page: a longer value gets pages of its own
_PAGE = 4096
_BATCH = 8192  # runs per getmulti call (deadline checks in between)
_FEW_RECORDS = 64  # up to this many records are sliced one by one, not gathered


def ref_width(max_ref: int) -> int:
    return max(1, (int(max_ref).bit_length() + 7) // 8)


def low_bytes(bits: int) -> int:
    """Bytes of an item's low part for runs of ``2**bits`` cells."""
    return 1 if bits <= 8 else 2


def bucket_bits(shard: ShardData, table: str) -> int:
    """The run length (in bits) of a shard's cell index."""
    return int(shard.meta.get("bucket_bits", {}).get(table, BUCKET_BITS))


def _run_counts(keys: np.ndarray, bits: int) -> np.ndarray:
    starts = run_starts(keys >> np.uint64(bits))
    return np.diff(np.append(starts, len(keys)))


def modelled_bytes(counts: np.ndarray, item: int) -> int:
    """LMDB bytes of a cell index whose runs hold ``counts`` items of ``item`` bytes, one
    entry per run: a short one stays in its leaf page, a long one takes whole pages."""
    b = counts.astype(np.int64) * item
    big = b + 16 > _NODE_MAX
    pages = -(-(b[big] + 16) // _PAGE)
    return int((b[~big] + _ENTRY_BYTES).sum() + (pages * _PAGE + _ENTRY_BYTES).sum())


def choose_bits(keys: np.ndarray, ref_bytes: int) -> int:
    """The run length for sorted unique ``keys``: the fewest modelled bytes among 8 to
    :data:`CHOSEN_MAX_BITS` bits (even), runs longer than 256 cells only while none holds
    over MAX_RUN_ITEMS."""
    best, best_bytes = BUCKET_BITS, None
    for bits in range(BUCKET_BITS, CHOSEN_MAX_BITS + 1, 2):
        counts = _run_counts(keys, bits)
        if bits > BUCKET_BITS and (len(counts) == 0 or counts.max() > MAX_RUN_ITEMS):
            break
        n = modelled_bytes(counts, low_bytes(bits) + ref_bytes)
        if best_bytes is None or n < best_bytes:
            best, best_bytes = bits, n
    return best


def index_table(name: str, keys: np.ndarray, refs: np.ndarray, bits: int | None = None
                ) -> Table:
    """The cell index for sorted unique ``keys`` pointing at heap offsets ``refs``, in runs
    of ``2**bits`` cells (None: :func:`choose_bits`)."""
    keys = np.asarray(keys, dtype=np.uint64)
    refs = np.asarray(refs, dtype=np.uint64)
    w = ref_width(int(refs.max()) if len(refs) else 0)
    if bits is None:
        bits = choose_bits(keys, w)
    if not BUCKET_BITS <= bits <= MAX_BUCKET_BITS:
        raise ValueError(f"bits={bits}: expected {BUCKET_BITS} to {MAX_BUCKET_BITS}")
    lb = low_bytes(bits)
    low = np.uint64((1 << bits) - 1)
    items = np.empty((len(keys), lb + w), dtype=np.uint8)
    kb = np.ascontiguousarray((keys & low).astype(">u8")).view(np.uint8).reshape(-1, 8)
    items[:, :lb] = kb[:, 8 - lb:]
    rb = np.ascontiguousarray(refs.astype(">u8")).view(np.uint8).reshape(-1, 8)
    items[:, lb:] = rb[:, 8 - w:]
    return Table(name, keys & ~low, items=items, bucket_bits=bits, packed=True)


def build_heap(values: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate records (CSR bytes) with varint length prefixes: ``(heap, offsets)``."""
    lens = np.diff(offsets).astype(np.uint64)
    pb, pl = varint_encode(lens)
    heap, hoff = interleave([(pb, offsets_from_lengths(pl)),
                             (np.asarray(values, dtype=np.uint8), offsets)])
    return heap, hoff[:-1]


def record_span(heap: memoryview | bytes, ref: int) -> tuple[int, int]:
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


def _be(items: np.ndarray) -> np.ndarray:
    """Big-endian unsigned integers of the rows of a uint8 ``(n, width)`` array."""
    w = items.shape[1]
    pad = np.zeros((len(items), 8), dtype=np.uint8)
    pad[:, 8 - w:] = items
    return pad.view(">u8").reshape(-1).astype(np.uint64)


def _cells_refs(k: np.ndarray, items: np.ndarray, lb: int) -> tuple[np.ndarray, np.ndarray]:
    low = items[:, 0].astype(np.uint64) if lb == 1 else _be(items[:, :lb])
    return k + low, _be(items[:, lb:])


def lookup(shard: ShardData, table: str, q: np.ndarray, deadline: float | None
           ) -> tuple[np.ndarray, np.ndarray]:
    """``(cells, refs)`` for the query cells (sorted unique uint64) present in the index."""
    space = shard.meta.get("key_spaces", {}).get(table)
    if not space or not space.get("count") or len(q) == 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64)
    bits = bucket_bits(shard, table)
    lb = low_bytes(bits)
    q = clip_range(q, space["lin"][0], space["lin"][1])
    runs = uniq(q & ~np.uint64((1 << bits) - 1))
    cells, refs = [], []
    for s in range(0, len(runs), _BATCH):
        check_deadline(deadline)
        k, items = shard.items(table, runs[s:s + _BATCH])
        c, r = _cells_refs(k, items, lb)
        hit = member(q, c)
        cells.append(c[hit])
        refs.append(r[hit])
    if not cells:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64)
    return np.concatenate(cells), np.concatenate(refs)


def scan(shard: ShardData, table: str, deadline: float | None, batch: int = 1 << 16
         ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every ``(cells, refs)`` of the index, about ``batch`` cells at a time (runs hold at
    most 256 or :data:`MAX_RUN_ITEMS` cells)."""
    bits = bucket_bits(shard, table)
    runs = shard.all_keys(table)
    per_run = 1 << BUCKET_BITS if bits == BUCKET_BITS else MAX_RUN_ITEMS
    step = max(1, batch // per_run) * 4
    for s in range(0, len(runs), step):
        check_deadline(deadline)
        k, items = shard.items(table, runs[s:s + step])
        yield _cells_refs(k, items, low_bytes(bits))
