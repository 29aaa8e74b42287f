"""The zarr array store: every operator output of every run, chunked like its tasks.

The module holds:

- the zarr wrapper: :func:`create_array`, :func:`open_array`, :func:`read_array`,
  :func:`write_array`, :func:`read_box` and :func:`check_chunks`, with a numeric array's
  ``zarr.json`` written here (:func:`array_metadata`) so that a run need not import zarr;
- the chunk-file reader and writer (:class:`ChunkFiles`, :class:`PartChunk`,
  :func:`write_block`, :func:`map_frame`), which read and write zarr's chunk files
  directly, as Blosc frames followed by their checksum;
- Blosc frame splicing (:func:`_blosc_sizes`, :func:`_blosc_blocks`): a block written
  into part of a chunk replaces only the Blosc blocks it covers;
- direct writes (:class:`DirectWrites`, :func:`wait_written`): chunk files written past
  the page cache for arrays no later stage reads;
- the process's thread pools (:func:`thread_pool`, :func:`each`) that decode and encode
  the chunks of a large block side by side.

Arrays are never overwritten ("no overwrite"): creating an array that exists is an error.
Where each array lives is :mod:`subzero.engine.layout`'s business.

Numeric arrays are compressed with Blosc's LZ4 after a byte shuffle: a run writes every
intermediate array, and on calibrated images LZ4 writes and reads faster than zarr's
default Zstandard for no more disk. A byte shuffle rather than a bit shuffle: the arrays
are read far more often than written (re-execution, the explorer's tiles, replays), and a
byte shuffle decodes and encodes faster for a little more disk (arrays written before keep
their own codec, which their metadata names). ``benchmarks/bench_astronomy.py`` and
``benchmarks/bench_scale.py`` show both choices on the LSST exposures. A chunk that
compresses by less than :data:`RAW_BELOW` is stored raw in a Blosc frame
(:meth:`ChunkFiles.level_for`).

Every chunk ends with the CRC-32C of its bytes: zarr's own ``crc32c`` codec, last in the
array's codecs, which zarr checks on every read. :class:`ChunkFiles` appends it when it
writes a chunk and checks it the first time this process maps the file
(:func:`map_frame`), so a changed byte is a :class:`~subzero.errors.DamagedError` naming
the array and the chunk, never a changed value. Arrays written before keep their codecs.
"""

from __future__ import annotations

import errno
import itertools
import json
import mmap
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from subzero.cells import Box
from subzero.errors import DamagedError, StoreError

#: the attribute marking arrays whose every chunk is written (empty ones too): a chunk
#: file missing from such an array is damage, not a chunk of fill values
ALL_CHUNKS = "subzero_all_chunks"


def _is_text(dtype: np.dtype) -> bool:
    return dtype.kind in ("U", "O", "T")


def _zarr_dtype(dtype: np.dtype) -> Any:
    # strings are stored as variable-length UTF-8 (numpy StringDType) so that the kernels,
    # zarr and the encoders agree on one representation
    return np.dtypes.StringDType() if _is_text(dtype) else dtype


#: the shuffle before Blosc's LZ4 for numeric arrays (see the module docstring)
SHUFFLE = "shuffle"
#: a chunk is stored raw (Blosc level 0: its header, then its bytes) when Blosc would shrink
#: it by less than this factor: noisy floats (an image after its background is removed)
#: cost far more time to compress and decompress than the disk they save, while images
#: that shrink well (a flat-corrected exposure) cost about as much either way, so
#: compressing pays there (tuned by benchmarks/bench_astronomy.py). Any Blosc reader
#: (zarr too) decodes both.
RAW_BELOW = 2.0
#: a chunk's compression is judged on this many pieces of this many bytes, spread over it
SAMPLE_PIECES = 4
SAMPLE_BYTES = 1 << 18


#: chunks of a block at least this large (bytes) are decoded or encoded on several threads
#: (:func:`each`): a global operator's single task reads and writes whole arrays
PARALLEL_BYTES = 8 << 20
_CHUNK_THREADS = "subzero-chunks"
_pools: dict[str, tuple[int, Any]] = {}
_pools_lock = threading.Lock()


def preload() -> None:
    """Load what reading and writing chunks load on first use (numcodecs, with its
    registry of codecs; Blosc's first encoding, for the lock it makes), so that a run
    calls it before its clock starts, as it imports its kernels' modules: setup, not the
    run's work."""
    import numcodecs

    numcodecs.Blosc("lz4", 5, 1).encode(np.zeros(1))


def thread_pool(name: str, workers: int) -> Any:
    """This process's thread pool ``name`` (a ``ThreadPoolExecutor`` of ``workers``
    threads), made on first use, and anew in a forked Spark worker (threads do not survive
    a fork). A function running on a pool never waits on the same pool."""
    from concurrent.futures import ThreadPoolExecutor

    with _pools_lock:
        got = _pools.get(name)
        if got is None or got[0] != os.getpid():
            got = _pools[name] = (os.getpid(), ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix=name))
        return got[1]


def each(fn: Callable[[Any], None], keys: Sequence[Any], nbytes: int) -> None:
    """``fn(key)`` for every key: on this process's chunk threads when there are several
    keys and ``nbytes`` (the block's) is at least :data:`PARALLEL_BYTES` (Blosc and the
    copies release the GIL), else in turn; in turn too when called from a chunk thread (a
    pool thread waiting on its own pool could wait forever). The first error is raised once
    all ended."""
    if (len(keys) < 2 or nbytes < PARALLEL_BYTES
            or threading.current_thread().name.startswith(_CHUNK_THREADS)):
        for k in keys:
            fn(k)
        return
    pool = thread_pool(_CHUNK_THREADS, min(4, os.cpu_count() or 1))
    futures = [pool.submit(fn, k) for k in keys]
    errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e


#: zarr v3's names of the numeric dtypes whose metadata :func:`create_array` writes itself
_ZARR_NAMES = {np.dtype(t): n for t, n in [
    ("bool", "bool"), ("int8", "int8"), ("int16", "int16"), ("int32", "int32"),
    ("int64", "int64"), ("uint8", "uint8"), ("uint16", "uint16"), ("uint32", "uint32"),
    ("uint64", "uint64"), ("float16", "float16"), ("float32", "float32"),
    ("float64", "float64")]}


def array_metadata(shape: Sequence[int], dtype: np.dtype, chunks: Sequence[int]
                   ) -> dict[str, Any] | None:
    """The ``zarr.json`` zarr 3 writes for a numeric array as :func:`create_array` makes it
    (Blosc LZ4 after a byte shuffle, fill 0, every chunk written), None for a dtype it
    leaves to zarr (text, complex, non-native byte order). The tests check it against what
    zarr itself writes, dtype by dtype."""
    dtype = np.dtype(dtype)
    name = _ZARR_NAMES.get(dtype)
    if name is None or not dtype.isnative:
        return None
    fill: Any = False if dtype.kind == "b" else 0.0 if dtype.kind == "f" else 0
    return {
        "shape": [int(n) for n in shape],
        "data_type": name,
        "chunk_grid": {"name": "regular",
                       "configuration": {"chunk_shape": [int(c) for c in chunks]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": [
            # zarr names no byte order for one-byte types
            {"name": "bytes"} if dtype.itemsize == 1 else
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "blosc", "configuration": {
                "typesize": dtype.itemsize, "cname": "lz4", "clevel": 5, "shuffle": SHUFFLE,
                "blocksize": 0}},
            {"name": "crc32c"},  # every chunk's checksum, after its bytes (CHECKSUM)
        ],
        "attributes": {ALL_CHUNKS: True},
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }


def create_array(path: Path, shape: Sequence[int], dtype: Any, chunks: Sequence[int]) -> None:
    """Create an empty zarr array; refuse to overwrite one that exists.

    A numeric array's ``zarr.json`` is written here (:func:`array_metadata`): importing
    zarr is slow, and a run whose tasks write straight to the chunk files
    (:class:`ChunkFiles`) needs nothing else of it. Other arrays are created by zarr."""
    path = Path(path)
    if path.exists():
        raise StoreError(f"array {path.name[:-5]!r} already exists at {path} (no overwrite)")
    dtype = np.dtype(dtype)
    chunks = tuple(max(1, int(c)) for c in chunks) or ()
    doc = array_metadata(shape, dtype, chunks) if sys.byteorder == "little" else None
    if doc is not None:
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            raise StoreError(
                f"array {path.name[:-5]!r} already exists at {path} (no overwrite)") from None
        tmp = path / f".zarr.json.{os.getpid()}-{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(doc, indent=2))
        os.replace(tmp, path / "zarr.json")
        return
    import zarr  # zarr only for arrays it creates itself (slow to import)

    fill = "" if _is_text(dtype) else 0
    compressors: Any = [zarr.codecs.ZstdCodec() if _is_text(dtype) else
                        zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle=SHUFFLE),
                        zarr.codecs.Crc32cCodec()]
    try:
        zarr.create_array(
            store=str(path), shape=tuple(shape), chunks=chunks, dtype=_zarr_dtype(dtype),
            fill_value=fill, overwrite=False, compressors=compressors,
            config={"write_empty_chunks": True}, attributes={ALL_CHUNKS: True},
        )
    except zarr.errors.ContainsArrayError:
        raise StoreError(
            f"array {path.name[:-5]!r} already exists at {path} (no overwrite)") from None


def open_array(path: Path, mode: str = "r") -> Any:
    import zarr  # zarr only once an array is touched (slow to import)

    path = Path(path)
    if not path.exists():
        raise StoreError(f"no array at {path}")
    if mode == "r":
        return zarr.open_array(str(path), mode=mode)
    # write every chunk, fill values too (zarr's default skips them), so that a chunk file
    # missing later is damage (:func:`check_chunks`); the setting is per array object
    return zarr.open_array(str(path), mode=mode).with_config({"write_empty_chunks": True})


#: the file system's block size that ``O_DIRECT`` writes are aligned and sized to
DIRECT_ALIGN = 4096
#: chunk files written past the page cache but not yet renamed into place, at most (a
#: writer waits for the oldest beyond it: the copies' memory stays bounded)
DIRECT_PENDING_BYTES = 256 << 20
#: aligned buffers a process keeps for its next direct writes (the largest ones)
DIRECT_BUFFERS = 4
#: a chunk file smaller than this goes to the page cache even when ``direct`` is asked: its
#: write's latency, which its task waits for, outweighs the page cache's cost; larger
#: chunks (those of the larger scales) gain from writing direct (tuned by
#: benchmarks/bench_scale.py)
DIRECT_MIN_BYTES = 16 << 20


class DirectWrites:
    """Chunk files written past the page cache (``O_DIRECT``), on writer threads.

    Writing a file into the page cache costs CPU for every page (fresh pages, zeroed,
    copied into), all the more where the host takes freed memory back (a virtual
    machine); written with ``O_DIRECT`` it costs the device's time and almost no CPU.
    Read back, such a file comes from the device rather than from memory, so a run writes
    this way only the arrays no later stage of it reads (its tasks say ``direct``). See
    ``benchmarks/bench_scale.py``.

    :meth:`submit` copies the chunk's bytes into an aligned buffer (from a pool: memory
    reused, not fresh), hands the write to a writer thread (which writes it, cuts the file
    to its length and renames it into place) and returns its future; the task that wrote
    the chunk waits for its futures before it returns (:func:`wait_written`), so its chunks
    are in place when its stage is recorded. At most :data:`DIRECT_PENDING_BYTES` of copies
    wait at a time, and a process keeps :data:`DIRECT_BUFFERS` buffers for the next ones.
    A file system that refuses ``O_DIRECT`` (tmpfs) gets an ordinary write, and is not
    asked again.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = 0  # bytes of copies not yet written
        self._free: list[mmap.mmap] = []
        self._refused: set[int] = set()  # st_dev of file systems without O_DIRECT

    def submit(self, tmp: Path, dest: Path, parts: Sequence[Any]) -> Any:
        views = [memoryview(p).cast("B") for p in parts]
        n = sum(len(v) for v in views)
        size = max(DIRECT_ALIGN, -(-n // DIRECT_ALIGN) * DIRECT_ALIGN)
        with self._cond:
            while self._held and self._held + size > DIRECT_PENDING_BYTES:
                self._cond.wait()
            self._held += size
            buf = next((b for b in self._free if len(b) >= size), None)
            if buf is not None:
                self._free.remove(buf)
        if buf is None:
            buf = mmap.mmap(-1, max(size, 1 << 20))  # page-aligned, as O_DIRECT wants
        at = 0
        for v in views:
            buf[at:at + len(v)] = v
            at += len(v)
        del views
        buf[n:size] = bytes(size - n)  # the padding the cut removes
        return thread_pool("subzero-direct", 2).submit(self._write, tmp, dest, buf, n, size)

    def _write(self, tmp: Path, dest: Path, buf: mmap.mmap, n: int, size: int) -> None:
        try:
            dev = os.stat(tmp.parent).st_dev
            fd = None
            if dev not in self._refused:
                try:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT,
                                 0o644)
                except OSError:  # EINVAL: this file system has no O_DIRECT
                    self._refused.add(dev)
            try:
                if fd is not None:
                    try:
                        _write_all(fd, memoryview(buf)[:size], tmp)
                        os.ftruncate(fd, n)
                    except OSError as e:
                        if e.errno != errno.EINVAL:
                            raise
                        self._refused.add(dev)  # opened, but refuses the write itself
                        closing, fd = fd, None
                        os.close(closing)
                    finally:
                        if fd is not None:
                            os.close(fd)
                if fd is None:
                    with open(tmp, "wb") as out:
                        out.write(memoryview(buf)[:n])
            except BaseException:
                tmp.unlink(missing_ok=True)  # a failed write leaves no stray file
                raise
            os.replace(tmp, dest)
        finally:
            with self._cond:
                self._free.append(buf)
                if len(self._free) > DIRECT_BUFFERS:  # keep the largest few
                    self._free.remove(min(self._free, key=len))
                self._held -= size
                self._cond.notify_all()


def _write_all(fd: int, data: memoryview, path: Path) -> None:
    """Write all of ``data`` to ``fd``: ``os.write`` may write less than it was given (a
    full disk, a call beyond 2 GB), and a chunk cut short must not be renamed into place."""
    at = 0
    while at < len(data):
        k = os.write(fd, data[at:])
        if k <= 0:
            raise OSError(errno.EIO, f"writing {path} stopped after {at} of {len(data)} bytes")
        at += k


_direct_writes = DirectWrites()


def wait_written(futures: list[Any]) -> None:
    """Wait for the chunk writes ``futures`` (each :meth:`DirectWrites.submit`'s) and empty
    the list; raise the first that failed once all have ended."""
    first = None
    for fut in futures:
        e = fut.exception()
        if e is not None and first is None:
            first = e
    futures.clear()
    if first is not None:
        raise first


def write_block(path: Path, box: Box, block: np.ndarray,
                direct: list[Any] | None = None) -> None:
    """Write one block (a task's output chunk) into an existing array. A block made of
    whole chunks of a numeric array (one chunk, or a global operator's whole array) goes
    straight to their chunk files (:class:`ChunkFiles`: the bytes zarr would write, each
    renamed into place once whole; with ``direct``, a list, past the page cache on a writer
    thread, each write's future appended to it: :func:`wait_written`); anything else
    through zarr."""
    files = direct_files(path)
    if files is not None:
        keys = files.whole_chunks(box)
        if keys is not None:
            block = np.asarray(block)

            def put(key: tuple[int, ...]) -> None:
                # contiguous, as the encoder needs it anyway, so that level_for also judges
                # a view (a chunk cut from a block's columns, a kernel's trimmed halo)
                part = np.ascontiguousarray(
                    block[files.box(key).relative_to(box)] if len(keys) > 1 else block)
                files.write(key, part, level=files.level_for(part), direct=direct)

            each(put, keys, block.nbytes)
            return
    arr = open_array(path, "r+")
    if _is_text(np.asarray(block).dtype):
        # C-contiguous: zarr 3.1.6 scrambles string chunks written from transposed or
        # broadcast views (zarr-python issue 3558)
        block = np.ascontiguousarray(np.asarray(block, dtype=np.dtypes.StringDType()))
    arr[box.slices] = block


def remove_leftovers(path: Path) -> int:
    """Remove the temporary chunk files under the array at ``path`` (:class:`ChunkFiles`'
    ``.<chunk>.<pid>-<thread>.tmp``, zarr's ``<chunk>.<id>.partial``) that writers killed
    mid-write left: call only once no writer can still be running there (its Spark job has
    ended). Returns how many."""
    gone = 0
    for p in [*Path(path).glob("c/**/.*.tmp"), *Path(path).glob("c/**/*.partial")]:
        try:
            p.unlink()
            gone += 1
        except OSError:
            pass
    return gone


def chunk_keys(arr: Any, box: Box | None = None) -> list[tuple[int, ...]]:
    """The chunk grid indices covering ``box`` (every chunk when None) of a zarr array."""
    return grid_keys(tuple(arr.shape), tuple(arr.chunks), box)


def grid_keys(shape: Sequence[int], chunks: Sequence[int], box: Box | None = None
              ) -> list[tuple[int, ...]]:
    """The indices of the chunks of shape ``chunks`` covering ``box`` (every chunk when
    None) in an array of ``shape``.

    >>> grid_keys((5, 4), (3, 2), Box((2, 1), (4, 2)))
    [(0, 0), (1, 0)]
    """
    if not shape:
        return [()]
    lo = box.lo if box is not None else (0,) * len(shape)
    hi = box.hi if box is not None else shape
    ranges = [range(int(a) // c, -(-int(b) // c)) for a, b, c in zip(lo, hi, chunks)]
    return list(itertools.product(*ranges))


def chunk_file(path: Path, key: tuple[int, ...]) -> Path:
    """Where zarr (v3, default chunk keys) keeps chunk ``key`` of the array at ``path``."""
    return Path(path, "c", *[str(k) for k in key])


def _name(path: Path) -> str:
    return Path(path).name.removesuffix(".zarr")


def check_chunks(path: Path, arr: Any, box: Box | None = None) -> None:
    """Raise :class:`DamagedError` naming the first chunk under ``box`` whose file is
    missing (arrays written with every chunk only: others skip chunks of fill values)."""
    if not arr.attrs.get(ALL_CHUNKS):
        return
    for key in chunk_keys(arr, box):
        if not chunk_file(path, key).is_file():
            raise _missing(path, key)


def _missing(path: Path, key: tuple[int, ...]) -> DamagedError:
    return DamagedError(f"array {_name(path)!r} chunk {'.'.join(map(str, key)) or '0'} is "
                        f"missing ({chunk_file(path, key)}); run 'subzero verify' on this run")


def _read(path: Path, box: Box | None, step: Sequence[int] | None = None) -> np.ndarray:
    arr = open_array(path, "r")
    check_chunks(path, arr, box)
    try:
        if box is None or box.ndim == 0:
            if step is None or not arr.ndim:
                return np.asarray(arr[...])
            return np.asarray(arr[tuple(slice(None, None, int(k)) for k in step)])
        if step is None:
            return np.asarray(arr[box.slices])
        return np.asarray(arr[tuple(slice(s.start, s.stop, int(k))
                                    for s, k in zip(box.slices, step))])
    except (RuntimeError, ValueError, OSError) as e:  # a truncated or garbled chunk
        where = "" if box is None else f" (cells {box})"
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DamagedError(f"array {_name(path)!r} cannot be read{where}: {msg}; run "
                           "'subzero verify' on this run") from None


def read_box(path: Path, box: Box, step: Sequence[int] | None = None) -> np.ndarray:
    """Read the cells of ``box`` from the array at ``path`` (a chunk missing or damaged:
    :class:`DamagedError`, never fill values in its place); with ``step``, every
    ``step[k]``-th cell along axis ``k`` only (from the box's low corner). A numeric array
    is read from its chunk files directly (:class:`ChunkFiles`), others through zarr."""
    if step is None and box.ndim:
        files = direct_files(path)
        if files is not None:
            if box.ndim != len(files.shape) or not all(
                    0 <= a <= b <= n for a, b, n in zip(box.lo, box.hi, files.shape)):
                raise StoreError(f"cells {box} are not inside array {_name(path)!r} of "
                                 f"shape {files.shape}")
            return files.read_box(box)
    return _read(path, box, step)


#: arrays :func:`direct_files` has opened, by (path, zarr.json's inode and mtime): a
#: task reads and writes many chunks of the same arrays, and zarr's ``open_array`` costs
#: milliseconds a call
_DIRECT: dict[tuple[str, int, int], "ChunkFiles | None"] = {}
_DIRECT_MAX = 256
_direct_lock = threading.Lock()


def direct_files(path: Path) -> "ChunkFiles | None":
    """The array at ``path`` as :class:`ChunkFiles`, if it is one that class reads and
    writes exactly as zarr does and whose every chunk is written (:data:`ALL_CHUNKS`: a
    missing chunk file is damage, never fill values); None otherwise (use zarr)."""
    try:
        st = os.stat(Path(path, "zarr.json"))
    except OSError:
        return None  # zarr names what is wrong
    key = (str(path), st.st_ino, st.st_mtime_ns)
    with _direct_lock:
        if key in _DIRECT:
            return _DIRECT[key]
    files = ChunkFiles.open(Path(path))
    if files is not None:
        try:
            attrs = json.loads(files.meta or b"{}").get("attributes") or {}
        except ValueError:
            attrs = {}
        if not attrs.get(ALL_CHUNKS):
            files = None
    with _direct_lock:
        if len(_DIRECT) >= _DIRECT_MAX:
            _DIRECT.clear()
        _DIRECT[key] = files
    return files


def read_array(path: Path) -> np.ndarray:
    """The whole array at ``path`` (a numeric one from its chunk files, each checked
    against its checksum: a damaged chunk is named; others through zarr)."""
    files = direct_files(path)
    if files is not None:
        return files.read_box(Box.full(files.shape))
    return _read(path, None)


def write_array(path: Path, data: np.ndarray, chunks: Sequence[int]) -> None:
    """Create and fill a whole array (workflow inputs)."""
    create_array(path, data.shape, data.dtype, chunks)
    write_block(path, Box.full(data.shape), data)


def stored_bytes(path: Path) -> int:
    """Bytes the array takes on disk (all files under it)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def logical_bytes(shape: Sequence[int], dtype: Any) -> int:
    """Bytes of the array in memory (strings count their UTF-8 length on average 8)."""
    dtype = np.dtype(dtype)
    per = 8 if _is_text(dtype) else dtype.itemsize
    return int(np.prod(shape, dtype=np.int64)) * per


# -- direct chunk I/O -----------------------------------------------------------------------
def item_span(inter: Box, chunk: Box, chunks: Sequence[int]) -> tuple[int, int]:
    """The items, in C order within a chunk of shape ``chunks`` at ``chunk``, from the
    first to the last cell of ``inter`` (every cell of ``inter`` lies between them).

    >>> item_span(Box((1, 2), (3, 4)), Box((0, 0), (4, 5)), (4, 5))
    (7, 14)
    """
    first = last = 0
    for a, b, c, n in zip(inter.lo, inter.hi, chunk.lo, chunks):  # C order, by hand (a
        first, last = first * n + a - c, last * n + b - 1 - c     # numpy call costs more)
    return first, last + 1


#: bytes of the CRC-32C (little endian) that ends a chunk file of an array whose codecs end
#: with zarr's ``crc32c``
CHECKSUM = 4


class ChecksumError(ValueError):
    """A chunk file whose bytes do not match the checksum it ends with."""


def checksum(parts: Sequence[Any]) -> bytes:
    """The CRC-32C of the concatenated ``parts``, as zarr's ``crc32c`` codec appends it.

    >>> checksum([b"123456789"]).hex()  # the CRC-32C check value, e3069283, little endian
    '839206e3'
    """
    import google_crc32c  # zarr's own dependency for its crc32c codec

    crc = 0
    for p in parts:
        crc = google_crc32c.extend(crc, np.frombuffer(p, dtype=np.uint8))
    return int(crc).to_bytes(CHECKSUM, "little")


#: chunk files whose checksum this process has checked: (path, inode, mtime, size). A chunk
#: file is written whole and renamed into place, never written through, so one check per
#: file serves every later read of it (a replay's tiles read the same chunks again and again)
_CHECKED: set[tuple[str, int, int, int]] = set()
_CHECKED_MAX = 1 << 16
_checked_lock = threading.Lock()


def map_frame(path: Path, crc: bool) -> Any:
    """The Blosc frame of chunk file ``path``, memory-mapped (None: an empty file); with
    ``crc``, without the checksum that ends the file, which is checked first
    (:class:`ChecksumError`) unless this process checked the same file before."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        size = st.st_size - (CHECKSUM if crc else 0)
        if size <= 0:
            if crc and st.st_size:
                raise ChecksumError(f"it holds {st.st_size} bytes, fewer than a checksum")
            return None
        frame = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
        if not crc:
            return frame
        key = (str(path), st.st_ino, st.st_mtime_ns, st.st_size)
        with _checked_lock:
            known = key in _CHECKED
        if known:
            return frame
        stored = os.pread(fh.fileno(), CHECKSUM, size)
        if checksum([frame]) != stored:
            frame.close()
            raise ChecksumError("its bytes do not match the checksum written with them")
        with _checked_lock:
            if len(_CHECKED) >= _CHECKED_MAX:
                _CHECKED.clear()
            _CHECKED.add(key)
        return frame


def _blosc_sizes(frame: Any) -> tuple[int, int, int]:
    """A Blosc frame's (decoded bytes, block size, encoded bytes), from its 16-byte
    header (little endian at bytes 4, 8 and 12); -1 each for a frame shorter than that.

    >>> import numcodecs; f = numcodecs.Blosc("lz4", 5, 1).encode(np.zeros(10))
    >>> _blosc_sizes(f)[0], _blosc_sizes(f)[2] == len(f), _blosc_sizes(b"x")
    (80, True, (-1, -1, -1))
    """
    if len(frame) < 16:
        return -1, -1, -1
    return tuple(int.from_bytes(frame[i:i + 4], "little") for i in (4, 8, 12))  # type: ignore


def _blosc_blocks(frame: Any, itemsize: int) -> tuple[int, np.ndarray, np.ndarray] | None:
    """A compressed Blosc frame's block size and each block's (start, end) byte offsets,
    or None where it has no blocks of its own (stored raw, flag 0x02) or its header or
    offsets do not hold together. A block ends where the next stored one starts (threads
    may store blocks out of order).

    >>> import numcodecs
    >>> f = numcodecs.Blosc("lz4", 1, 1, blocksize=512).encode(np.arange(1500.0))
    >>> bsize, starts, ends = _blosc_blocks(f, 8)
    >>> bsize, len(starts), int(ends.max()) == len(f)
    (512, 24, True)
    """
    if len(frame) < 16:
        return None
    nbytes, bsize, cbytes = _blosc_sizes(frame)
    if (frame[2] & 0x02 or frame[3] != itemsize or cbytes != len(frame) or bsize <= 0
            or bsize % itemsize or nbytes <= 0):
        return None
    nblocks = -(-nbytes // bsize)
    if len(frame) < 16 + 4 * nblocks:
        return None
    starts = np.frombuffer(frame, dtype="<i4", count=nblocks, offset=16).astype(np.int64)
    order = np.argsort(starts, kind="stable")
    ends = np.empty_like(starts)
    ends[order] = np.append(starts[order][1:], cbytes)
    if starts[order[0]] != 16 + 4 * nblocks or np.any(ends <= starts):
        return None
    return bsize, starts, ends


class PartChunk:
    """A chunk of :class:`ChunkFiles` decoded block by block as its cells are asked for
    (:meth:`get`). Blosc compresses each block of a chunk on its own, so the cells of a
    small box cost the one or two blocks holding them rather than the whole chunk (a
    10-row box of a 4 MB LSST chunk: one of its four 1 MB blocks). A run of blocks is
    decoded as a Blosc frame of those blocks alone: the chunk's header with the run's
    sizes, their offsets, their bytes. The last block, when shorter and alone, is a frame
    of its own size marked unsplit (Blosc compresses a frame's last, shorter block
    unsplit). A frame without blocks of its own (stored raw) is copied from; one that is
    neither is decoded whole.

    ``array`` is the chunk's cells inside the array, writable and the chunk's own; cells
    of blocks not yet asked for hold garbage. Safe for several threads (one decodes at a
    time).
    """

    def __init__(self, files: "ChunkFiles", key: tuple[int, ...]) -> None:
        self.files, self.key = files, key
        self.full = np.empty(files.chunks, dtype=files.dtype)
        self.array = self.full[files.cut(key)]
        self.nbytes = self.full.nbytes
        self._bytes = self.full.reshape(-1).view(np.uint8)
        self._lock = threading.Lock()
        self._done: list[bool] | None = None  # per block: decoded (None: none yet)
        self._per = 0  # items per block
        self._whole = False

    def get(self, span: tuple[int, int] | None = None) -> np.ndarray:
        """``array``, with the items ``span`` (C order within the chunk; None: all)
        decoded."""
        if self._whole:
            return self.array
        if span is not None and self._done is not None and all(self._blocks(span)):
            return self.array  # (a block is marked once decoded)
        with self._lock:
            if not self._whole:
                self._decode(span)
        return self.array

    def _blocks(self, span: tuple[int, int]) -> list[bool]:
        """Whether each block holding the items ``span`` is decoded."""
        assert self._done is not None
        per = self._per
        return self._done[span[0] // per:(max(span[1], span[0] + 1) - 1) // per + 1]

    def _decode(self, span: tuple[int, int] | None) -> None:
        files, key = self.files, self.key
        data = files._map(key)
        try:
            files._check(data, self.nbytes)
            isz = files.dtype.itemsize
            raw = data[2] & 0x02
            got = None if raw else _blosc_blocks(data, isz)
            bsize = got[0] if got is not None else _blosc_sizes(data)[1]
            if ((span is None and self._done is None) or (got is None and not raw)
                    or bsize <= 0 or bsize % isz):  # (the same file: nothing decoded yet)
                files.codec.decode(data, out=self.full)
                self._whole = True
                return
            nblocks = -(-self.nbytes // bsize)
            if self._done is None:
                self._per = bsize // isz  # before _done: get() reads both unlocked
                self._done = [False] * nblocks
            first = 0 if span is None else span[0] // self._per
            # (span None: the rest, never a block decoded before: it may be patched)
            todo = [b for b, done in enumerate(self._done if span is None
                                               else self._blocks(span), first) if not done]
            a = 0
            while a < len(todo):  # runs of consecutive blocks still to decode
                z = a + 1
                while z < len(todo) and todo[z] == todo[z - 1] + 1:
                    z += 1
                self._run(data, todo[a], todo[z - 1] + 1, bsize, got)
                a = z
            if all(self._done):
                self._whole = True
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            raise files._damaged(key, e) from None
        finally:
            if data is not None:
                data.close()

    def _run(self, data: Any, a: int, z: int, bsize: int,
             got: tuple[int, np.ndarray, np.ndarray] | None) -> None:
        """Decode blocks ``a`` to ``z - 1`` into the chunk."""
        assert self._done is not None
        nblocks = len(self._done)
        lo, hi = a * bsize, min(z * bsize, self.nbytes)
        if got is None:  # stored raw: the items as they are
            self._bytes[lo:hi] = np.frombuffer(data, np.uint8, hi - lo, 16 + lo)
            self._done[a:z] = [True] * (z - a)
            return
        _, starts, ends = got
        if a == 0 and z == nblocks:
            self.files.codec.decode(data, out=self.full)
            self._done[:] = [True] * nblocks
            return
        head = bytes(data[:4])
        size = bsize
        if z - a == 1 and hi - lo < bsize:
            # the shorter last block alone: a frame of that one block, of its size, marked
            # unsplit (0x10), as Blosc decodes a frame's last, shorter block
            head, size = head[:2] + bytes([head[2] | 0x10]) + head[3:], hi - lo
        view = memoryview(data)
        bodies = [view[int(starts[b]):int(ends[b])] for b in range(a, z)]
        first = 16 + 4 * len(bodies)
        sizes = np.array([len(b) for b in bodies], dtype=np.int64)
        offsets = first + np.concatenate([[0], np.cumsum(sizes[:-1])])
        frame = b"".join([head, (hi - lo).to_bytes(4, "little"), size.to_bytes(4, "little"),
                          int(first + sizes.sum()).to_bytes(4, "little"),
                          offsets.astype("<i4").tobytes(), *bodies])
        del bodies, view
        self.files.codec.decode(frame, out=self._bytes[lo:hi])
        self._done[a:z] = [True] * (z - a)


class ChunkFiles:
    """Whole chunks of a numeric array this module created, read and written as files
    without zarr's machinery: the chunk file is the chunk's bytes (C order, little endian,
    edge chunks padded with the fill value) through the array's Blosc codec, exactly what
    zarr writes and reads (the tests compare the bytes). A replay rewrites a few chunks of
    many arrays, where zarr's per-call cost (its event loop, a read-modify-write of a
    partial chunk) is most of the time; it writes them with the array's compressor and
    shuffle at another level, or splices a patched chunk's Blosc blocks into its parent's
    (:meth:`write`): Blosc frames that zarr reads like any other (the tests check).

    :meth:`open` gives None for any array it cannot vouch for (text, 0-d, other codecs or
    chunk keys): use zarr there. A chunk is written to a temporary file and renamed over
    the old one, so a chunk file shared with another run by a hard link is never written
    through.
    """

    def __init__(self, path: Path, shape: tuple[int, ...], chunks: tuple[int, ...],
                 dtype: np.dtype, fill: Any, codec: Any, crc: bool = False) -> None:
        self.path, self.shape, self.chunks = Path(path), shape, chunks
        self.dtype, self.fill, self.codec = dtype, fill, codec
        self.meta: bytes | None = None  # the array's zarr.json, as read by open()
        self._folders: set[Path] = set()  # chunk folders known to exist
        #: answers of :meth:`keys` and :meth:`box`, remembered (a replay asks the same ones
        #: again and again)
        self._keys: dict[Box | None, list[tuple[int, ...]]] = {}
        self._boxes: dict[tuple[int, ...], Box] = {}
        self._scratch = threading.local()  # per thread: see _pair
        #: every chunk file ends with the CRC-32C of its Blosc frame (zarr's ``crc32c``
        #: codec): written by :meth:`write`, checked when a chunk is first read
        self.crc = crc

    @classmethod
    def open(cls, path: Path) -> "ChunkFiles | None":
        import numcodecs  # with zarr, only once an array is touched (slow to import)

        try:
            text = Path(path, "zarr.json").read_bytes()
            meta = json.loads(text)
            dtype = np.dtype(meta["data_type"])
            codecs = meta["codecs"]
            grid, keys = meta["chunk_grid"], meta["chunk_key_encoding"]
            shape = tuple(int(s) for s in meta["shape"])
            chunks = tuple(int(c) for c in grid["configuration"]["chunk_shape"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        crc = bool(codecs) and isinstance(codecs[-1], dict) and codecs[-1].get("name") == "crc32c"
        if crc:
            codecs = codecs[:-1]
        if (dtype.kind not in "biuf" or not shape or len(codecs) != 2
                or grid.get("name") != "regular" or keys.get("name") != "default"
                or keys.get("configuration", {}).get("separator", "/") != "/"
                or meta.get("storage_transformers")):
            return None
        raw, blosc = codecs
        endian = (raw.get("configuration") or {}).get("endian", "little")
        conf = blosc.get("configuration") or {}
        if (raw.get("name") != "bytes" or blosc.get("name") != "blosc"
                or (endian != "little" and dtype.itemsize > 1)
                or conf.get("typesize", dtype.itemsize) != dtype.itemsize):
            return None
        shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}.get(conf.get("shuffle"))
        fill = meta.get("fill_value", 0)
        if shuffle is None or not isinstance(fill, (int, float)):
            return None  # also a fill written as text (NaN, hex): zarr decodes those
        codec = numcodecs.Blosc(cname=conf.get("cname", "lz4"), clevel=int(conf.get("clevel", 5)),
                                shuffle=shuffle, blocksize=int(conf.get("blocksize", 0)))
        files = cls(path, shape, chunks, dtype.newbyteorder("<"), fill, codec, crc)
        files.meta = text
        return files

    def keys(self, box: Box | None = None) -> list[tuple[int, ...]]:
        got = self._keys.get(box)
        if got is None:
            if len(self._keys) > 4096:  # a long-lived reader asks about many boxes
                self._keys.clear()
            got = self._keys[box] = grid_keys(self.shape, self.chunks, box)
        return list(got)

    def box(self, key: tuple[int, ...]) -> Box:
        """The cells of chunk ``key`` inside the array."""
        got = self._boxes.get(key)
        if got is None:
            lo = tuple(k * c for k, c in zip(key, self.chunks))
            got = self._boxes[key] = Box(lo, tuple(min(a + c, s) for a, c, s
                                                   in zip(lo, self.chunks, self.shape)))
        return got

    def file(self, key: tuple[int, ...]) -> Path:
        return chunk_file(self.path, key)

    def key_of(self, box: Box) -> tuple[int, ...] | None:
        """The chunk whose cells ``box`` is exactly, or None."""
        if box.ndim != len(self.shape):
            return None
        key = tuple(int(a) // c for a, c in zip(box.lo, self.chunks))
        inside = all(0 <= k and k * c < s for k, c, s in zip(key, self.chunks, self.shape))
        return key if inside and self.box(key) == box else None

    def whole_chunks(self, box: Box) -> list[tuple[int, ...]] | None:
        """The chunks whose cells ``box`` is exactly, together (its corners on the chunk
        grid or the array's end), or None.

        >>> f = ChunkFiles(Path("a"), (5, 4), (2, 4), np.dtype("f8"), 0.0, None)
        >>> f.whole_chunks(Box((0, 0), (5, 4))), f.whole_chunks(Box((2, 0), (4, 4)))
        ([(0, 0), (1, 0), (2, 0)], [(1, 0)])
        >>> f.whole_chunks(Box((1, 0), (5, 4))) is None
        True
        """
        if box.ndim != len(self.shape) or box.is_empty() or not all(
                0 <= a < b <= n and a % c == 0 and (b % c == 0 or b == n)
                for a, b, c, n in zip(box.lo, box.hi, self.chunks, self.shape)):
            return None
        return self.keys(box)

    def read(self, key: tuple[int, ...]) -> np.ndarray:
        """Chunk ``key``, cut to the array, in a writable array of its own (a missing or
        garbled chunk: DamagedError). The file is decoded from a memory map (no copy of
        its bytes)."""
        full = np.empty(self.chunks, dtype=self.dtype)
        data = self._map(key)
        try:
            self._check(data, full.nbytes)
            self.codec.decode(data, out=full)
        except (RuntimeError, ValueError, TypeError) as e:
            raise self._damaged(key, e) from None
        finally:
            if data is not None:
                data.close()
        return full[self.cut(key)]

    def read_box(self, box: Box) -> np.ndarray:
        """The cells ``box`` of the array, decoded from the chunks holding them (a view of
        a chunk's own array when one holds them all): about 3x quicker than through zarr
        for a large array read in row blocks. Of a chunk it needs less than half of (a
        stencil's halo, a few rows), only the Blosc blocks holding the cells are decoded
        (:class:`PartChunk`)."""
        whole = int(np.prod(self.chunks))

        def chunk(key: tuple[int, ...], span: tuple[int, int]) -> np.ndarray:
            if 2 * (span[1] - span[0]) < whole:
                return self.part(key).get(span)
            return self.read(key)

        return self.assemble(box, chunk)

    def assemble(self, box: Box, chunk: Callable[[tuple[int, ...], tuple[int, int]],
                                                 np.ndarray]) -> np.ndarray:
        """The cells of ``box`` from the chunks ``chunk(key, span)`` gives (``span``: the
        items, C order within the chunk, that ``box`` needs of it, see :func:`item_span`);
        a view when one chunk holds them (never written to)."""
        keys = self.keys(box)
        if len(keys) == 1:
            cb = self.box(keys[0])
            return chunk(keys[0], item_span(box, cb, self.chunks))[box.relative_to(cb)]
        out = np.empty(box.shape, dtype=self.dtype)

        def put(k: tuple[int, ...]) -> None:
            cb = self.box(k)
            inter = cb.intersect(box)
            out[inter.relative_to(box)] = chunk(k, item_span(inter, cb, self.chunks))[
                inter.relative_to(cb)]

        each(put, keys, len(keys) * int(np.prod(self.chunks)) * self.dtype.itemsize)
        return out

    def part(self, key: tuple[int, ...]) -> "PartChunk":
        """Chunk ``key`` to decode block by block, as its cells are asked for."""
        return PartChunk(self, key)

    def cut(self, key: tuple[int, ...]) -> tuple[slice, ...]:
        """The cells of a whole chunk ``key`` that lie inside the array."""
        return tuple(slice(0, n) for n in self.box(key).shape)

    def _map(self, key: tuple[int, ...]) -> Any:
        """Chunk file ``key``'s Blosc frame memory-mapped (None: an empty file; missing,
        or not matching its checksum: DamagedError)."""
        try:
            return map_frame(self.file(key), self.crc)
        except FileNotFoundError:
            raise _missing(self.path, key) from None
        except ChecksumError as e:
            raise self._damaged(key, e) from None

    @staticmethod
    def _check(data: Any, nbytes: int) -> None:
        """Refuse a file whose Blosc header does not give a chunk of ``nbytes`` bytes."""
        size, _, encoded = _blosc_sizes(data) if data else (-1, -1, -1)
        if size != nbytes or encoded != len(data):
            raise ValueError(f"it decodes to {size} bytes; expected {nbytes}")

    def _damaged(self, key: tuple[int, ...], e: BaseException) -> DamagedError:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return DamagedError(f"array {_name(self.path)!r} chunk {'.'.join(map(str, key))} "
                            f"cannot be read: {msg}; run 'subzero verify' on this run")

    def level_for(self, block: np.ndarray) -> int | None:
        """0 (store raw) for a block that Blosc would shrink by less than
        :data:`RAW_BELOW`, judged on :data:`SAMPLE_PIECES` pieces spread over it (a few
        percent of a large chunk's encoding time); None (the array's own level) otherwise,
        and for blocks too small for the sample to pay."""
        flat = np.asarray(block)
        if flat.dtype != self.dtype or not flat.flags.c_contiguous:
            return None
        flat = flat.reshape(-1)
        piece = max(1, SAMPLE_BYTES // self.dtype.itemsize)
        if flat.size < 2 * piece * SAMPLE_PIECES:
            return None
        starts = np.linspace(0, flat.size - piece, SAMPLE_PIECES).astype(np.int64)
        packed = sum(len(self.codec.encode(flat[a:a + piece])) for a in starts)
        return 0 if packed * RAW_BELOW > piece * SAMPLE_PIECES * self.dtype.itemsize else None

    def codec_at(self, level: int) -> Any:
        """The array's Blosc compressor and shuffle at compression ``level`` (0: stored
        raw in Blosc's frame). Any Blosc reader, zarr's too, decodes a chunk whatever its
        level, which its header records, so chunks of several levels mix in one array."""
        cache = self.__dict__.setdefault("_levels", {})
        got = cache.get(level)
        if got is None:
            got = cache[level] = self._blosc(level, self.codec.get_config()["blocksize"])
        return got

    def _blosc(self, level: int, blocksize: int) -> Any:
        """A Blosc codec with the array's compressor and shuffle."""
        import numcodecs

        conf = self.codec.get_config()
        return numcodecs.Blosc(cname=conf["cname"], clevel=int(level), shuffle=conf["shuffle"],
                               blocksize=int(blocksize))

    def _raw_parts(self, block: np.ndarray) -> list[Any] | None:
        """The file of a chunk stored raw (Blosc level 0) as pieces written one after the
        other, without copying the block: Blosc's 16-byte header (the same for every chunk
        of the array: it holds sizes and flags only), the block's bytes, the fill value
        for the rows an edge chunk lacks. None where that does not apply (cut along a
        later axis, a block of another dtype or not contiguous): encode it then."""
        header = self.__dict__.get("_raw_header")
        if header is None:
            probe = self.codec_at(0).encode(np.zeros(self.chunks, dtype=self.dtype))
            nbytes = int(np.prod(self.chunks)) * self.dtype.itemsize
            header = self.__dict__["_raw_header"] = (
                bytes(probe[:16]) if len(probe) == 16 + nbytes else b"")
        if (not header or block.dtype != self.dtype or not block.flags.c_contiguous
                or block.shape[1:] != self.chunks[1:]):
            return None
        parts: list[Any] = [header, memoryview(block).cast("B")]
        missing = self.chunks[0] - block.shape[0]
        if missing:
            parts.append(np.full((missing,) + self.chunks[1:], self.fill,
                                 dtype=self.dtype).tobytes())
        return parts

    def _spliced(self, frame: Any, block: np.ndarray, span: tuple[int, int]
                 ) -> list[Any] | None:
        """The file of a chunk that differs from the chunk file ``frame`` (its bytes) only
        in the items ``span`` (C order, a range within the chunk): ``frame``'s Blosc
        blocks, with those holding the span compressed again from ``block`` (the chunk's
        cells inside the array). Blosc compresses each block on its own, so a block is
        compressed alone, as the block at the same place in a chunk of one (or, for the
        last, shorter block, two) blocks with the frame's block size and flags, and put in
        place of the old one. A 10 x 10 patch then costs one of a chunk's blocks instead
        of the whole chunk. None where that does not pay or apply (the last, shorter block
        after a bit shuffle, which Blosc compresses unsplit, slowly; a frame stored raw or
        of other sizes; an edge chunk cut along a later axis; another dtype): encode the
        chunk then."""
        isz = self.dtype.itemsize
        n = int(np.prod(self.chunks))
        if (len(frame) < 16 or block.dtype != self.dtype or not block.flags.c_contiguous
                or block.shape[1:] != self.chunks[1:]):
            return None
        flags, typesize = frame[2], frame[3]
        nbytes, bsize, cbytes = _blosc_sizes(frame)
        if (flags & 0x02 or typesize != isz or nbytes != n * isz or cbytes != len(frame)
                or bsize <= 0 or bsize % isz):
            return None  # 0x02: stored raw (no blocks)
        nblocks, per = -(-nbytes // bsize), bsize // isz
        starts = np.frombuffer(frame, dtype="<i4", count=nblocks, offset=16).astype(np.int64)
        ends = np.append(starts[1:], cbytes)
        if starts[0] != 16 + 4 * nblocks or np.any(ends < starts):
            return None
        flat, have = block.reshape(-1), block.size
        new: dict[int, Any] = {}
        bitshuffle = self.codec.get_config()["shuffle"] == 2
        for b in range(span[0] // per, (span[1] - 1) // per + 1):
            lo, hi = b * per, min((b + 1) * per, n)
            short = hi - lo < per  # the last, shorter block: compressed as the last of two
            if short and bitshuffle:  # unsplit, bit-shuffled: slower than the whole chunk
                return None  # at level 1, so recompress the whole chunk instead
            raw = flat[lo:min(hi, have)]
            if hi > have:  # an edge chunk's rows beyond the array hold the fill value
                raw = np.concatenate([raw, np.full(hi - max(lo, have), self.fill, self.dtype)])
            data = self._pair(per, raw) if short else np.ascontiguousarray(raw)
            body = self._block_body(data, flags, bsize, 2 if short else 1)
            if body is None:
                return None
            new[b] = body
        view = memoryview(frame)
        bodies = [new[b] if b in new else view[a:z]
                  for b, (a, z) in enumerate(zip(starts.tolist(), ends.tolist()))]
        sizes = np.array([len(x) for x in bodies], dtype=np.int64)
        first = 16 + 4 * nblocks
        offsets = first + np.concatenate([[0], np.cumsum(sizes[:-1])])
        header = bytes(frame[:12]) + int(first + sizes.sum()).to_bytes(4, "little")
        return [header, offsets.astype("<i4").tobytes(), *bodies]

    def _pair(self, per: int, last: np.ndarray) -> np.ndarray:
        """A block of zeros (``per`` items) followed by ``last``: the two-block chunk whose
        last block is compressed like a chunk's last, shorter one. The zeros are this
        thread's, made once."""
        zeros = getattr(self._scratch, "zeros", None)
        if zeros is None or len(zeros) != per + len(last):
            zeros = self._scratch.zeros = np.zeros(per + len(last), dtype=self.dtype)
        zeros[per:] = last
        return zeros

    def _block_body(self, data: np.ndarray, flags: int, bsize: int, count: int
                    ) -> bytes | None:
        """The last of the ``count`` Blosc blocks of ``data`` compressed with the array's
        compressor and shuffle, at level 1 (a block's level is its own business: the
        decoder reads none), into blocks of ``bsize`` bytes with header ``flags``, or None.
        Blosc scales a requested block size (by the type size, for codecs that split a
        block by byte), so the request that gives ``bsize`` is found once per block size
        and kept."""
        known = self.__dict__.setdefault("_block_codecs", {})
        isz = self.dtype.itemsize
        level = min(1, int(self.codec.get_config()["clevel"]))
        tries = [known[bsize]] if bsize in known else [
            self._blosc(level, want) for want in dict.fromkeys((bsize // isz, bsize))]
        for codec in tries:
            enc = codec.encode(data)
            size, got_bsize, _ = _blosc_sizes(enc)
            if (len(enc) >= 16 + 4 * count and enc[2] == flags and enc[3] == isz
                    and got_bsize == bsize and size == data.nbytes):
                known[bsize] = codec
                at = 16 + 4 * (count - 1)
                return enc[int.from_bytes(enc[at:at + 4], "little"):]
        return None

    def write(self, key: tuple[int, ...], block: np.ndarray, level: int | None = None,
              base: Path | None = None, span: tuple[int, int] | None = None,
              whole: Any = None, direct: list[Any] | None = None) -> None:
        """Write chunk ``key`` whole (``block``: its cells inside the array): the bytes zarr
        writes, or compressed at ``level`` (:meth:`codec_at`; a replay writes at 1, or 0
        where Blosc barely shrinks the chunk: 2.5x and 6x quicker to encode an LSST image
        chunk than zarr's level 5). With ``base`` (a chunk file) and ``span`` (the items,
        in C order within the chunk, where ``block`` may differ from it): ``base``'s
        Blosc blocks, those holding the span compressed again (:meth:`_spliced`).
        ``whole``: where ``block`` holds only the span's blocks' cells (a
        :class:`PartChunk`'s), a function giving it whole, called before it is written
        other than spliced. ``direct`` (a list): a file of at least
        :data:`DIRECT_MIN_BYTES` is written past the page cache on a writer thread
        (:class:`DirectWrites`), the write's future appended to it."""
        box = self.box(key)
        block = np.asarray(block)
        if block.shape != box.shape:
            raise StoreError(f"chunk {key} of {_name(self.path)!r} has shape {box.shape}; "
                             f"got a block of shape {block.shape}")
        parts, frame = None, None
        if base is not None and span is not None:
            try:
                frame = map_frame(base, self.crc)
            except (OSError, ValueError):  # a damaged base: the chunk is encoded whole
                frame = None
            if frame is not None:
                parts = self._spliced(frame, block, span)
        if parts is None and whole is not None:
            block = whole()
        if parts is None and level == 0:
            parts = self._raw_parts(block)
        if parts is None:
            if box.shape != self.chunks:  # an edge chunk: zarr pads with the fill value
                full = np.full(self.chunks, self.fill, dtype=self.dtype)
                full[tuple(slice(0, n) for n in box.shape)] = block
            else:
                full = np.ascontiguousarray(block, dtype=self.dtype)
            parts = [(self.codec if level is None else self.codec_at(level)).encode(full)]
        if self.crc:
            parts = [*parts, checksum(parts)]
        f = self.file(key)
        if f.parent not in self._folders:
            f.parent.mkdir(parents=True, exist_ok=True)
            self._folders.add(f.parent)
        tmp = f.with_name(f".{f.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        if direct is not None and sum(memoryview(p).nbytes for p in parts) >= DIRECT_MIN_BYTES:
            try:
                direct.append(_direct_writes.submit(tmp, f, parts))
            finally:
                del parts  # copied: the memory map's views, before it closes
                if frame is not None:
                    try:
                        frame.close()
                    except BufferError:
                        pass
            return
        try:
            with open(tmp, "wb") as out:
                for part in parts:
                    out.write(part)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a failed write (a full disk) leaves no stray file
            raise
        finally:
            del parts  # the memory map's views, before it closes
            if frame is not None:
                try:
                    frame.close()
                except BufferError:  # still viewed: closed when the last view goes
                    pass
        os.replace(tmp, f)
