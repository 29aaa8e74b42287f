"""Chunk stores: where an array's chunk files are kept, and the chunks read and written there.

The module holds:

- :class:`ChunkStore`, the interface a store of chunk files implements (read a chunk or a
  byte range of it, write one atomically, list, delete), and :class:`LocalChunkStore`, the
  local file system's, which keeps zarr's layout (:func:`chunk_file`) and reads a chunk
  through a memory map (:func:`map_frame`, its checksum checked once per file);
- :class:`ChunkFiles`: the chunks of a numeric array read and written without zarr's
  machinery, encoded and decoded by the array's :class:`~subzero.engine.codec.ChunkCodec`
  and kept in its store, and :class:`PartChunk`, a chunk decoded block by block;
- the chunk grid's geometry (:func:`grid_keys`, :func:`item_span`).

A chunk is written whole to a temporary file and renamed over the old one, so that a
reader sees the old chunk or the new one, never part of either, and a writer killed
mid-write leaves the old chunk (and a temporary file, which
:meth:`LocalChunkStore.remove_leftovers` removes). A chunk file shared with another run by
a hard link is never written through.

Nothing is synced to the device (no ``fsync``, which would cost every chunk write the
device's latency): the rename protects a chunk against a writer that dies, not against the
machine losing power.
"""

from __future__ import annotations

import itertools
import json
import mmap
import os
import threading
from abc import ABC, abstractmethod
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from subzero import settings
from subzero.cells import Box
from subzero.engine import direct as _direct
from subzero.engine.codec import (
    CHECKSUM, ChecksumError, ChunkCodec, PartDecoder, checksum, without_checksum)
from subzero.errors import DamagedError, StoreError
from subzero.pools import each

__all__ = ["Key", "ChunkStore", "LocalChunkStore", "ChunkFiles", "PartChunk", "map_frame",
           "chunk_file", "grid_keys", "item_span", "missing_chunk", "array_name"]

#: a chunk's index on the chunk grid (``()`` for a 0-d array)
Key = tuple[int, ...]

#: chunk files whose checksum this process remembers having checked, at most (then it
#: forgets them all): each entry is a small tuple, and a replay or the explorer reads the
#: same chunks again and again, so more entries save more checks at more memory
CHECKED_MAX = settings.define(
    "CHECKED_CHUNKS", 1 << 16, int,
    "Chunk files whose checksum a process remembers having checked (a file is written "
    "whole and renamed into place, so one check serves every later read of it).",
    benchmark="benchmarks/bench_replay.py", module=__name__)


# -- the chunk grid -------------------------------------------------------------------------
def grid_keys(shape: Sequence[int], chunks: Sequence[int], box: Box | None = None
              ) -> list[Key]:
    """The indices of the chunks covering ``box`` in an array.

    Parameters
    ----------
    shape
        The array's shape.
    chunks
        Its chunk shape.
    box
        The cells (None: every chunk).

    Examples
    --------
    >>> grid_keys((5, 4), (3, 2), Box((2, 1), (4, 2)))
    [(0, 0), (1, 0)]
    """
    if not shape:
        return [()]
    lo = box.lo if box is not None else (0,) * len(shape)
    hi = box.hi if box is not None else shape
    ranges = [range(int(a) // c, -(-int(b) // c)) for a, b, c in zip(lo, hi, chunks)]
    return list(itertools.product(*ranges))


def item_span(inter: Box, chunk: Box, chunks: Sequence[int]) -> tuple[int, int]:
    """The items, in C order within a chunk, from the first to the last cell of ``inter``.

    Parameters
    ----------
    inter
        Cells inside the chunk.
    chunk
        The chunk's cells.
    chunks
        The chunk shape (an edge chunk's cells are fewer).

    Returns
    -------
    tuple of int
        ``(first, last + 1)``: every cell of ``inter`` lies between them.

    Examples
    --------
    >>> item_span(Box((1, 2), (3, 4)), Box((0, 0), (4, 5)), (4, 5))
    (7, 14)
    """
    first = last = 0
    for a, b, c, n in zip(inter.lo, inter.hi, chunk.lo, chunks):  # C order, by hand (a
        first, last = first * n + a - c, last * n + b - 1 - c     # numpy call costs more)
    return first, last + 1


def chunk_file(path: Path, key: Key) -> Path:
    """Where zarr (v3, default chunk keys) keeps chunk ``key`` of the array at ``path``.

    Examples
    --------
    >>> chunk_file(Path("a.zarr"), (1, 0)).as_posix()
    'a.zarr/c/1/0'
    """
    return Path(path, "c", *[str(k) for k in key])


def array_name(path: Path) -> str:
    """The name of the array at ``path`` (its folder without ``.zarr``)."""
    return Path(path).name.removesuffix(".zarr")


def missing_chunk(path: Path, key: Key) -> DamagedError:
    """The error of chunk ``key`` of the array at ``path`` missing."""
    return DamagedError(f"array {array_name(path)!r} chunk {'.'.join(map(str, key)) or '0'} "
                        f"is missing ({chunk_file(path, key)}); run 'subzero verify' on this run")


def release(frame: Any) -> None:
    """Close a memory-mapped frame (a frame in memory needs nothing), unless it is still
    viewed: then it closes when the last view goes."""
    close = getattr(frame, "close", None)
    if close is not None:
        try:
            close()
        except BufferError:
            pass


# -- stores ---------------------------------------------------------------------------------
class ChunkStore(ABC):
    """Where one array's chunk files are kept: bytes by chunk key.

    A store does I/O only; what the bytes mean is the codec's business
    (:mod:`subzero.engine.codec`). Every write is atomic: a reader sees the chunk as it was
    or as written, never part of it, and a writer that fails or dies leaves the old chunk.
    """

    @abstractmethod
    def read(self, key: Key) -> bytes:
        """The whole chunk file ``key``.

        Raises
        ------
        FileNotFoundError
            The chunk is not stored.
        """

    @abstractmethod
    def read_range(self, key: Key, start: int, stop: int) -> bytes:
        """Bytes ``start`` to ``stop`` of chunk file ``key`` (fewer where the file ends).

        Raises
        ------
        FileNotFoundError
            The chunk is not stored.
        """

    @abstractmethod
    def write(self, key: Key, parts: Sequence[Any]) -> None:
        """Store chunk file ``key`` as ``parts`` (buffers) one after the other, atomically.

        Raises
        ------
        OSError
            The write failed (a full disk); the chunk is as it was.
        """

    @abstractmethod
    def list_keys(self) -> list[Key]:
        """The keys of the stored chunks, sorted (never a write's temporary)."""

    @abstractmethod
    def delete(self, key: Key) -> None:
        """Remove chunk ``key`` (nothing when it is not stored)."""

    def frame(self, key: Key, crc: bool) -> Any:
        """The Blosc frame of chunk ``key``.

        Parameters
        ----------
        key
            The chunk.
        crc
            Whether the file ends with its checksum, checked and cut here.

        Returns
        -------
        buffer or None
            The frame (None: an empty file). A store may return a memory map, which the
            caller closes.

        Raises
        ------
        FileNotFoundError
            The chunk is not stored.
        ChecksumError
            Its bytes do not match its checksum.
        """
        data = self.read(key)
        return without_checksum(data) if crc else (data or None)

    def frame_part(self, key: Key, crc: bool, span: tuple[int, int], itemsize: int) -> Any:
        """The Blosc frame of chunk ``key`` as far as decoding the items ``span`` (C order
        within the chunk) needs it: a store that reads by range may return a frame of the
        chunk's length whose header, block offsets and blocks holding ``span`` are read and
        whose other bytes are not (then unchecked against the checksum, which covers the
        whole file). The default is :meth:`frame`.

        Parameters
        ----------
        key, crc
            As for :meth:`frame`.
        span
            The items to decode.
        itemsize
            The array's bytes per item.
        """
        return self.frame(key, crc)

    def write_direct(self, key: Key, parts: Sequence[Any]) -> Future | None:
        """Store chunk ``key`` as :meth:`write` does, past the page cache where the store
        can (a run's arrays that no later stage reads).

        Returns
        -------
        concurrent.futures.Future or None
            The write's future, to wait for before the chunk is used; None once written.
        """
        self.write(key, parts)
        return None


class LocalChunkStore(ChunkStore):
    """The chunk files of the zarr array at ``root`` on the local file system.

    Chunk ``key`` is the file :func:`chunk_file` names. A write goes to a temporary file
    in the same folder (``.<chunk>.<pid>-<thread>.tmp``), renamed over the chunk once
    whole; a failed write removes it. Reads of a frame go through a memory map
    (:func:`map_frame`): the decoder reads the pages it needs, without a copy.

    Parameters
    ----------
    root
        The array's folder (``<name>.zarr``).

    Examples
    --------
    >>> import tempfile
    >>> store = LocalChunkStore(Path(tempfile.mkdtemp(), "a.zarr"))
    >>> store.write((1, 0), [b"abc", b"def"])
    >>> store.read((1, 0)), store.read_range((1, 0), 2, 4), store.list_keys()
    (b'abcdef', b'cd', [(1, 0)])
    >>> store.delete((1, 0)); store.list_keys()
    []
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._folders: set[Path] = set()  # chunk folders known to exist

    def path(self, key: Key) -> Path:
        """The file of chunk ``key``."""
        return chunk_file(self.root, key)

    def read(self, key: Key) -> bytes:
        return self.path(key).read_bytes()

    def read_range(self, key: Key, start: int, stop: int) -> bytes:
        with open(self.path(key), "rb") as fh:
            return os.pread(fh.fileno(), max(0, stop - start), start)

    def frame(self, key: Key, crc: bool) -> Any:
        return map_frame(self.path(key), crc)

    def _target(self, key: Key) -> tuple[Path, Path]:
        """Chunk ``key``'s file and this thread's temporary file for it, the folder made."""
        f = self.path(key)
        if f.parent not in self._folders:
            f.parent.mkdir(parents=True, exist_ok=True)
            self._folders.add(f.parent)
        return f, f.with_name(f".{f.name}.{os.getpid()}-{threading.get_ident()}.tmp")

    def write(self, key: Key, parts: Sequence[Any]) -> None:
        f, tmp = self._target(key)
        try:
            with open(tmp, "wb") as out:
                for part in parts:
                    out.write(part)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a failed write (a full disk) leaves no stray file
            raise
        os.replace(tmp, f)

    def write_direct(self, key: Key, parts: Sequence[Any]) -> Future | None:
        """Past the page cache on a writer thread (:mod:`subzero.engine.direct`), a file
        large enough to gain from it; others at once, as :meth:`write`."""
        f, tmp = self._target(key)
        fut = _direct.write_direct(tmp, f, parts)
        if fut is None:
            self.write(key, parts)
        return fut

    def list_keys(self) -> list[Key]:
        base = self.root / "c"
        if base.is_file():
            return [()]
        out: list[Key] = []
        for folder, _dirs, files in os.walk(base):
            rel = Path(folder).relative_to(base).parts
            if not all(p.isdigit() for p in rel):
                continue
            out += [tuple(int(p) for p in (*rel, f)) for f in files if f.isdigit()]
        return sorted(out)

    def delete(self, key: Key) -> None:
        self.path(key).unlink(missing_ok=True)

    def remove_leftovers(self) -> int:
        """Remove the temporary chunk files killed writers left (this store's
        ``.<chunk>.<pid>-<thread>.tmp``, zarr's ``<chunk>.<id>.partial``): call only once
        no writer can still be running there. Returns how many."""
        gone = 0
        for p in [*self.root.glob("c/**/.*.tmp"), *self.root.glob("c/**/*.partial")]:
            try:
                p.unlink()
                gone += 1
            except OSError:
                pass
        return gone


#: chunk files whose checksum this process has checked: (path, inode, mtime, size). A chunk
#: file is written whole and renamed into place, never written through, so one check per
#: file serves every later read of it (a replay's tiles read the same chunks again and again)
_CHECKED: set[tuple[str, int, int, int]] = set()
_checked_lock = threading.Lock()


def map_frame(path: Path, crc: bool) -> Any:
    """The Blosc frame of chunk file ``path``, memory-mapped.

    Parameters
    ----------
    path
        The chunk file.
    crc
        Whether the file ends with its checksum: then the frame is without it, and it is
        checked first unless this process checked the same file before.

    Returns
    -------
    mmap.mmap or None
        The frame (None: an empty file), for the caller to close.

    Raises
    ------
    FileNotFoundError
        No such file.
    ChecksumError
        The file's bytes do not match its checksum.
    """
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
            if len(_CHECKED) >= CHECKED_MAX:
                _CHECKED.clear()
            _CHECKED.add(key)
        return frame


# -- chunks of an array ---------------------------------------------------------------------
class PartChunk:
    """A chunk of :class:`ChunkFiles` decoded block by block as its cells are asked for.

    The cells of a small box cost the one or two Blosc blocks holding them rather than the
    whole chunk (:class:`~subzero.engine.codec.PartDecoder`). ``array`` is the chunk's cells
    inside the array, writable and the chunk's own; cells of blocks not yet asked for hold
    garbage. Safe for several threads (one decodes at a time).

    Parameters
    ----------
    files
        The array.
    key
        The chunk.
    """

    def __init__(self, files: "ChunkFiles", key: Key) -> None:
        self.files, self.key = files, key
        self._decoder = PartDecoder(files.chunk_codec)
        self.full = self._decoder.full
        self.array = self.full[files.cut(key)]
        self.nbytes = self.full.nbytes
        self._lock = threading.Lock()

    @property
    def whole(self) -> bool:
        """Whether every block of the chunk is decoded."""
        return self._decoder.whole

    def get(self, span: tuple[int, int] | None = None) -> np.ndarray:
        """``array``, with the items ``span`` (C order within the chunk; None: all)
        decoded.

        Raises
        ------
        DamagedError
            The chunk file is missing, does not match its checksum or does not decode.
        """
        decoder = self._decoder
        if decoder.whole or (span is not None and decoder.decoded(span)):
            return self.array  # (a block is marked once decoded)
        with self._lock:
            if not decoder.whole:
                files, key = self.files, self.key
                frame = files._map(key, span)
                try:
                    decoder.decode(frame, span)
                except (RuntimeError, ValueError, TypeError, IndexError) as e:
                    raise files._damaged(key, e) from None
                finally:
                    release(frame)
        return self.array


class ChunkFiles:
    """Whole chunks of a numeric array, read and written without zarr's machinery.

    A chunk file is the chunk's bytes (C order, little endian, edge chunks padded with the
    fill value) through the array's Blosc codec, then its checksum: exactly what zarr writes
    and reads (the tests compare the bytes). A replay rewrites a few chunks of many arrays,
    where zarr's per-call cost (its event loop, a read-modify-write of a partial chunk) is
    most of the time; it writes them with the array's compressor and shuffle at another
    level, or splices a patched chunk's Blosc blocks into its parent's (:meth:`write`):
    Blosc frames that zarr reads like any other (the tests check).

    :meth:`open` gives None for any array it cannot vouch for (text, 0-d, other codecs or
    chunk keys): use zarr there.

    Parameters
    ----------
    path
        The array's folder.
    shape, chunks, dtype, fill
        The array's shape, chunk shape, dtype (little endian) and fill value.
    codec
        Its ``numcodecs.Blosc``.
    crc
        Whether every chunk file ends with the CRC-32C of its Blosc frame (zarr's
        ``crc32c`` codec): written by :meth:`write`, checked when a chunk is first read.
    store
        Where its chunk files are (None: :class:`LocalChunkStore` at ``path``).
    """

    def __init__(self, path: Path, shape: tuple[int, ...], chunks: tuple[int, ...],
                 dtype: np.dtype, fill: Any, codec: Any, crc: bool = False,
                 store: ChunkStore | None = None) -> None:
        self.path, self.shape, self.chunks = Path(path), shape, chunks
        self.dtype, self.fill, self.codec = dtype, fill, codec
        self.crc = crc
        self.store = LocalChunkStore(self.path) if store is None else store
        self.chunk_codec = ChunkCodec(chunks, dtype, fill, codec)
        self.meta: bytes | None = None  # the array's zarr.json, as read by open()
        #: answers of :meth:`keys` and :meth:`box`, remembered (a replay asks the same ones
        #: again and again)
        self._keys: dict[Box | None, list[Key]] = {}
        self._boxes: dict[Key, Box] = {}

    @classmethod
    def open(cls, path: Path, store: ChunkStore | None = None, text: bytes | None = None
             ) -> "ChunkFiles | None":
        """The array at ``path``, or None where it is not one this class reads and writes
        exactly as zarr does (use zarr there).

        ``store`` and ``text``: where its chunk files are (None: :class:`LocalChunkStore`
        at ``path``) and its ``zarr.json`` (None: read from ``path``), for an array kept
        elsewhere than the local file system (:mod:`subzero.engine.objectstore`)."""
        import numcodecs  # with zarr, only once an array is touched (slow to import)

        try:
            if text is None:
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
        files = cls(path, shape, chunks, dtype.newbyteorder("<"), fill, codec, crc, store)
        files.meta = text
        return files

    # -- the grid --------------------------------------------------------------------------
    def keys(self, box: Box | None = None) -> list[Key]:
        """The chunks covering ``box`` (None: all)."""
        got = self._keys.get(box)
        if got is None:
            if len(self._keys) > 4096:  # a long-lived reader asks about many boxes
                self._keys.clear()
            got = self._keys[box] = grid_keys(self.shape, self.chunks, box)
        return list(got)

    def box(self, key: Key) -> Box:
        """The cells of chunk ``key`` inside the array."""
        got = self._boxes.get(key)
        if got is None:
            lo = tuple(k * c for k, c in zip(key, self.chunks))
            got = self._boxes[key] = Box(lo, tuple(min(a + c, s) for a, c, s
                                                   in zip(lo, self.chunks, self.shape)))
        return got

    def file(self, key: Key) -> Path:
        """The local file of chunk ``key``."""
        return chunk_file(self.path, key)

    def key_of(self, box: Box) -> Key | None:
        """The chunk whose cells ``box`` is exactly, or None."""
        if box.ndim != len(self.shape):
            return None
        key = tuple(int(a) // c for a, c in zip(box.lo, self.chunks))
        inside = all(0 <= k and k * c < s for k, c, s in zip(key, self.chunks, self.shape))
        return key if inside and self.box(key) == box else None

    def whole_chunks(self, box: Box) -> list[Key] | None:
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

    def cut(self, key: Key) -> tuple[slice, ...]:
        """The cells of a whole chunk ``key`` that lie inside the array."""
        return tuple(slice(0, n) for n in self.box(key).shape)

    # -- reading ---------------------------------------------------------------------------
    def read(self, key: Key) -> np.ndarray:
        """Chunk ``key``, cut to the array, in a writable array of its own (a missing or
        garbled chunk: DamagedError). A local file is decoded from a memory map (no copy of
        its bytes)."""
        frame = self._map(key)
        try:
            full = self.chunk_codec.decode(frame)
        except (RuntimeError, ValueError, TypeError) as e:
            raise self._damaged(key, e) from None
        finally:
            release(frame)
        return full[self.cut(key)]

    def read_box(self, box: Box) -> np.ndarray:
        """The cells ``box`` of the array, decoded from the chunks holding them (a view of
        a chunk's own array when one holds them all). Of a chunk it needs less than half of
        (a stencil's halo, a few rows), only the Blosc blocks holding the cells are decoded
        (:class:`PartChunk`)."""
        whole = int(np.prod(self.chunks))

        def chunk(key: Key, span: tuple[int, int]) -> np.ndarray:
            if 2 * (span[1] - span[0]) < whole:
                return self.part(key).get(span)
            return self.read(key)

        return self.assemble(box, chunk)

    def assemble(self, box: Box, chunk: Callable[[Key, tuple[int, int]], np.ndarray]
                 ) -> np.ndarray:
        """The cells of ``box`` from the chunks ``chunk(key, span)`` gives (``span``: the
        items, C order within the chunk, that ``box`` needs of it, see :func:`item_span`);
        a view when one chunk holds them (never written to)."""
        keys = self.keys(box)
        if len(keys) == 1:
            cb = self.box(keys[0])
            return chunk(keys[0], item_span(box, cb, self.chunks))[box.relative_to(cb)]
        out = np.empty(box.shape, dtype=self.dtype)

        def put(k: Key) -> None:
            cb = self.box(k)
            inter = cb.intersect(box)
            out[inter.relative_to(box)] = chunk(k, item_span(inter, cb, self.chunks))[
                inter.relative_to(cb)]

        each(put, keys, len(keys) * int(np.prod(self.chunks)) * self.dtype.itemsize)
        return out

    def part(self, key: Key) -> PartChunk:
        """Chunk ``key`` to decode block by block, as its cells are asked for."""
        return PartChunk(self, key)

    def _map(self, key: Key, span: tuple[int, int] | None = None) -> Any:
        """Chunk ``key``'s Blosc frame from the store (None: an empty file; missing, or not
        matching its checksum: DamagedError); of a store that reads by range, only what
        decoding the items ``span`` needs (:meth:`ChunkStore.frame_part`)."""
        try:
            if span is not None:
                return self.store.frame_part(key, self.crc, span, self.dtype.itemsize)
            return self.store.frame(key, self.crc)
        except FileNotFoundError:
            raise missing_chunk(self.path, key) from None
        except ChecksumError as e:
            raise self._damaged(key, e) from None

    def _damaged(self, key: Key, e: BaseException) -> DamagedError:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return DamagedError(f"array {array_name(self.path)!r} chunk {'.'.join(map(str, key))} "
                            f"cannot be read: {msg}; run 'subzero verify' on this run")

    # -- writing ---------------------------------------------------------------------------
    def level_for(self, block: np.ndarray) -> int | None:
        """0 (store raw) or None (the array's level) for ``block``
        (:meth:`ChunkCodec.level_for <subzero.engine.codec.ChunkCodec.level_for>`)."""
        return self.chunk_codec.level_for(block)

    def codec_at(self, level: int) -> Any:
        """The array's Blosc compressor and shuffle at compression ``level`` (0: stored raw
        in Blosc's frame). Any Blosc reader, zarr's too, decodes a chunk whatever its
        level, which its header records, so chunks of several levels mix in one array."""
        return self.chunk_codec.at_level(level)

    def write(self, key: Key, block: np.ndarray, level: int | None = None,
              base: Path | None = None, span: tuple[int, int] | None = None,
              whole: Callable[[], np.ndarray] | None = None,
              direct: list[Any] | None = None) -> None:
        """Write chunk ``key`` whole.

        Parameters
        ----------
        key
            The chunk.
        block
            Its cells inside the array.
        level
            The Blosc level (None: the array's own, the bytes zarr writes; a replay writes
            at 1, or 0 where Blosc barely shrinks the chunk, far quicker to encode than
            zarr's 5).
        base, span
            A chunk file and the items (C order within the chunk) where ``block`` may
            differ from it: ``base``'s Blosc blocks, those holding the span compressed
            again (:meth:`ChunkCodec.spliced <subzero.engine.codec.ChunkCodec.spliced>`).
        whole
            Where ``block`` holds only the span's blocks' cells (a :class:`PartChunk`'s),
            a function giving it whole, called before it is encoded other than spliced.
        direct
            A list: the file is written past the page cache where the store can and it
            is large enough (:meth:`ChunkStore.write_direct`), the write's future
            appended to it.

        Raises
        ------
        StoreError
            ``block`` is not the chunk's shape.
        OSError
            The write failed; the chunk is as it was.
        """
        box = self.box(key)
        block = np.asarray(block)
        if block.shape != box.shape:
            raise StoreError(f"chunk {key} of {array_name(self.path)!r} has shape "
                             f"{box.shape}; got a block of shape {block.shape}")
        parts, frame = None, None
        try:
            if base is not None and span is not None:
                try:
                    frame = map_frame(base, self.crc)
                except (OSError, ValueError):  # a damaged base: the chunk is encoded whole
                    frame = None
                if frame is not None:
                    parts = self.chunk_codec.spliced(frame, block, span)
            if parts is None:
                parts = self.chunk_codec.encode(block if whole is None else whole(), level)
            if self.crc:
                parts = [*parts, checksum(parts)]
            if direct is None:
                self.store.write(key, parts)
            else:
                fut = self.store.write_direct(key, parts)
                if fut is not None:
                    direct.append(fut)
        finally:
            parts = None  # the memory map's views, before it closes
            release(frame)
