"""The zarr array store: every operator output of every run, chunked like its tasks.

This module is the zarr-facing array API: creating and opening arrays
(:func:`create_array`, :func:`open_array`, with a numeric array's ``zarr.json`` written here,
:func:`array_metadata`, so that a run need not import zarr), reading and writing cells
(:func:`read_box`, :func:`write_block`, :func:`read_array`, :func:`write_array`), finding
chunks and checking they are there (:func:`chunk_keys`, :func:`check_chunks`), and an
array's sizes (:func:`stored_bytes`, :func:`logical_bytes`). A numeric array is read and
written chunk by chunk without zarr's machinery (:func:`direct_files`, a
:class:`~subzero.engine.chunkstore.ChunkFiles`); others go through zarr. The rest lives
beside it: the chunk codec in :mod:`subzero.engine.codec`, chunk stores in
:mod:`subzero.engine.chunkstore`, writes past the page cache in
:mod:`subzero.engine.direct`, thread pools in :mod:`subzero.pools`.

Arrays are never overwritten ("no overwrite"): creating an array that exists is an error.
Where each array lives is :mod:`subzero.engine.layout`'s business.

Numeric arrays are compressed with Blosc's LZ4 after a byte shuffle: a run writes every
intermediate array, and on calibrated images LZ4 writes and reads faster than zarr's
default Zstandard for no more disk. A byte shuffle rather than a bit shuffle: the arrays
are read far more often than written (re-execution, the explorer's tiles, replays), and a
byte shuffle decodes and encodes faster for a little more disk (arrays written before keep
their own codec, which their metadata names). ``benchmarks/bench_astronomy.py`` and
``benchmarks/bench_scale.py`` show both choices on the LSST exposures. A chunk that
compresses by less than :data:`~subzero.engine.codec.RAW_BELOW` is stored raw in a Blosc
frame (:meth:`~subzero.engine.codec.ChunkCodec.level_for`).

Every chunk ends with the CRC-32C of its bytes: zarr's own ``crc32c`` codec, last in the
array's codecs, which zarr checks on every read. :class:`~subzero.engine.chunkstore.ChunkFiles`
appends it when it writes a chunk and checks it the first time this process maps the file
(:func:`~subzero.engine.chunkstore.map_frame`), so a changed byte is a
:class:`~subzero.errors.DamagedError` naming the array and the chunk, never a changed value.
Arrays written before keep their codecs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from subzero.cells import Box
from subzero.engine import datastore
from subzero.engine.chunkstore import (
    ChunkFiles, LocalChunkStore, array_name, chunk_file, grid_keys, item_span, missing_chunk)
from subzero.engine.codec import RAW_BELOW
from subzero.errors import DamagedError, StoreError
from subzero.pools import each

__all__ = ["ALL_CHUNKS", "SHUFFLE", "RAW_BELOW", "array_metadata", "create_array",
           "open_array", "write_block", "remove_leftovers", "chunk_keys", "grid_keys",
           "chunk_file", "check_chunks", "read_box", "direct_files", "read_array",
           "write_array", "stored_bytes", "logical_bytes", "item_span"]

#: the attribute marking arrays whose every chunk is written (empty ones too): a chunk
#: file missing from such an array is damage, not a chunk of fill values
ALL_CHUNKS = "subzero_all_chunks"
#: the shuffle before Blosc's LZ4 for numeric arrays (see the module docstring)
SHUFFLE = "shuffle"


def _is_text(dtype: np.dtype) -> bool:
    return dtype.kind in ("U", "O", "T")


def _zarr_dtype(dtype: np.dtype) -> Any:
    # strings are stored as variable-length UTF-8 (numpy StringDType) so that the kernels,
    # zarr and the encoders agree on one representation
    return np.dtypes.StringDType() if _is_text(dtype) else dtype
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
    (:class:`ChunkFiles`) needs nothing else of it. Other arrays are created by zarr.

    Parameters
    ----------
    path
        The array's folder (``<name>.zarr``).
    shape, dtype, chunks
        Its shape, dtype and chunk shape.

    Raises
    ------
    StoreError
        An array exists at ``path`` (no overwrite).

    Examples
    --------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp(), "y.zarr")
    >>> create_array(p, (4, 3), "f8", (2, 3)); direct_files(p).chunks
    (2, 3)
    """
    path = Path(path)
    remote = datastore.mounted(path) is not None
    if datastore.array_exists(path) if remote else path.exists():
        raise StoreError(f"array {path.name[:-5]!r} already exists at {path} (no overwrite)")
    dtype = np.dtype(dtype)
    chunks = tuple(max(1, int(c)) for c in chunks) or ()
    doc = array_metadata(shape, dtype, chunks) if sys.byteorder == "little" else None
    if doc is not None and remote:
        datastore.put_array_metadata(path, json.dumps(doc, indent=2).encode())
        return
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
            store=_zarr_store(path), shape=tuple(shape), chunks=chunks, dtype=_zarr_dtype(dtype),
            fill_value=fill, overwrite=False, compressors=compressors,
            config={"write_empty_chunks": True}, attributes={ALL_CHUNKS: True},
        )
    except zarr.errors.ContainsArrayError:
        raise StoreError(
            f"array {path.name[:-5]!r} already exists at {path} (no overwrite)") from None


def open_array(path: Path, mode: str = "r") -> Any:
    """The zarr array at ``path``.

    Parameters
    ----------
    path
        The array's folder.
    mode
        zarr's mode: ``"r"`` to read, ``"r+"`` to write (every chunk written, fill values
        too).

    Raises
    ------
    StoreError
        There is no array at ``path``.
    """
    import zarr  # zarr only once an array is touched (slow to import)

    path = Path(path)
    if not (datastore.array_exists(path) if datastore.mounted(path) is not None
            else path.exists()):
        raise StoreError(f"no array at {path}")
    if mode == "r":
        return zarr.open_array(_zarr_store(path, read_only=True), mode=mode)
    # write every chunk, fill values too (zarr's default skips them), so that a chunk file
    # missing later is damage (:func:`check_chunks`); the setting is per array object
    return zarr.open_array(_zarr_store(path), mode=mode).with_config(
        {"write_empty_chunks": True})


def _zarr_store(path: Path, read_only: bool = False) -> Any:
    """What zarr opens the array at ``path`` through: its folder, or in an object-store
    home zarr's own store over the same objects (:class:`zarr.storage.ObjectStore`)."""
    m = datastore.mounted(path)
    if m is None:
        return str(path)
    from zarr.storage import ObjectStore

    return ObjectStore(m.store.client_at(m.key(path)), read_only=read_only)


def write_block(path: Path, box: Box, block: np.ndarray,
                direct: list[Any] | None = None) -> None:
    """Write one block (a task's output chunk) into an existing array.

    A block made of whole chunks of a numeric array (one chunk, or a global operator's
    whole array) goes straight to their chunk files (:class:`ChunkFiles`: the bytes zarr
    would write, each renamed into place once whole); anything else through zarr.

    Parameters
    ----------
    path
        The array.
    box
        The block's cells.
    block
        Their values.
    direct
        A list: chunk files large enough go past the page cache on a writer thread, each
        write's future appended to it (:func:`~subzero.engine.direct.wait_written`).
    """
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
    """Remove the temporary chunk files under the array at ``path`` that writers killed
    mid-write left (:meth:`LocalChunkStore.remove_leftovers`): call only once no writer
    can still be running there (its Spark job has ended). Returns how many (none in
    object storage, where a chunk is one PUT and nothing temporary is stored)."""
    if datastore.mounted(path) is not None:
        return 0
    return LocalChunkStore(Path(path)).remove_leftovers()


def chunk_keys(arr: Any, box: Box | None = None) -> list[tuple[int, ...]]:
    """The chunk grid indices covering ``box`` (every chunk when None) of a zarr array."""
    return grid_keys(tuple(arr.shape), tuple(arr.chunks), box)


def check_chunks(path: Path, arr: Any, box: Box | None = None) -> None:
    """Raise :class:`DamagedError` naming the first chunk under ``box`` whose file is
    missing (arrays written with every chunk only: others skip chunks of fill values)."""
    if not arr.attrs.get(ALL_CHUNKS):
        return
    m = datastore.mounted(path)
    for key in chunk_keys(arr, box):
        if not (chunk_file(path, key).is_file() if m is None
                else m.store.exists(m.key(chunk_file(path, key)))):
            raise missing_chunk(path, key)


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
        raise DamagedError(f"array {array_name(path)!r} cannot be read{where}: {msg}; run "
                           "'subzero verify' on this run") from None


def read_box(path: Path, box: Box, step: Sequence[int] | None = None) -> np.ndarray:
    """Read the cells of ``box`` from the array at ``path``.

    A numeric array is read from its chunk files directly (:class:`ChunkFiles`), others
    through zarr.

    Parameters
    ----------
    path
        The array.
    box
        The cells.
    step
        Every ``step[k]``-th cell along axis ``k`` only, from the box's low corner.

    Raises
    ------
    DamagedError
        A chunk is missing or damaged (never fill values in its place).
    StoreError
        ``box`` is not inside the array.
    """
    if step is None and box.ndim:
        files = direct_files(path)
        if files is not None:
            if box.ndim != len(files.shape) or not all(
                    0 <= a <= b <= n for a, b, n in zip(box.lo, box.hi, files.shape)):
                raise StoreError(f"cells {box} are not inside array {array_name(path)!r} "
                                 f"of shape {files.shape}")
            return files.read_box(box)
    return _read(path, box, step)


#: arrays :func:`direct_files` has opened, by (path, zarr.json's inode and mtime): a
#: task reads and writes many chunks of the same arrays, and opening one costs a read and
#: a parse of its metadata
_DIRECT: dict[tuple[str, int, int], "ChunkFiles | None"] = {}
_DIRECT_MAX = 256
_direct_lock = threading.Lock()


def direct_files(path: Path) -> "ChunkFiles | None":
    """The array at ``path`` as :class:`ChunkFiles`, if it is one that class reads and
    writes exactly as zarr does and whose every chunk is written (:data:`ALL_CHUNKS`: a
    missing chunk file is damage, never fill values); None otherwise (use zarr)."""
    if datastore.mounted(path) is not None:
        return _all_chunks(datastore.array_files(path))
    try:
        st = os.stat(Path(path, "zarr.json"))
    except OSError:
        return None  # zarr names what is wrong
    key = (str(path), st.st_ino, st.st_mtime_ns)
    with _direct_lock:
        if key in _DIRECT:
            return _DIRECT[key]
    files = _all_chunks(ChunkFiles.open(Path(path)))
    with _direct_lock:
        if len(_DIRECT) >= _DIRECT_MAX:
            _DIRECT.clear()
        _DIRECT[key] = files
    return files


def _all_chunks(files: "ChunkFiles | None") -> "ChunkFiles | None":
    """``files`` if its array has every chunk written (:data:`ALL_CHUNKS`), else None."""
    if files is not None:
        try:
            attrs = json.loads(files.meta or b"{}").get("attributes") or {}
        except ValueError:
            attrs = {}
        if not attrs.get(ALL_CHUNKS):
            return None
    return files


def read_array(path: Path) -> np.ndarray:
    """The whole array at ``path`` (a numeric one from its chunk files, each checked
    against its checksum: a damaged chunk is named; others through zarr)."""
    files = direct_files(path)
    if files is not None:
        return files.read_box(Box.full(files.shape))
    return _read(path, None)


def write_array(path: Path, data: np.ndarray, chunks: Sequence[int]) -> None:
    """Create and fill a whole array (workflow inputs).

    Examples
    --------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp(), "x.zarr")
    >>> write_array(p, np.arange(6.0).reshape(2, 3), (1, 3))
    >>> read_array(p).tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    """
    create_array(path, data.shape, data.dtype, chunks)
    write_block(path, Box.full(data.shape), data)


def stored_bytes(path: Path) -> int:
    """Bytes the array takes on disk (all files under it), or in object storage."""
    if datastore.mounted(path) is not None:
        return datastore.stored_bytes(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def logical_bytes(shape: Sequence[int], dtype: Any) -> int:
    """Bytes of the array in memory (strings count their UTF-8 length on average 8).

    >>> logical_bytes((2, 3), "f4"), logical_bytes((4,), "U")
    (24, 32)
    """
    dtype = np.dtype(dtype)
    per = 8 if _is_text(dtype) else dtype.itemsize
    return int(np.prod(shape, dtype=np.int64)) * per
