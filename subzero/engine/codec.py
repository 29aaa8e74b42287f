"""The chunk codec: a numeric chunk's cells to the bytes of its file and back, without I/O.

A chunk file of an array :mod:`subzero.engine.arrays` creates is the chunk's cells (C
order, little endian, an edge chunk padded with the fill value) through the array's Blosc
codec, then the CRC-32C of those bytes (zarr's ``crc32c`` codec): exactly what zarr writes
and reads. This module holds what turns cells into those bytes and back:

- Blosc frame parsing (:func:`blosc_sizes`, :func:`blosc_blocks`): a frame's header and
  the offsets of its blocks, which Blosc compresses each on its own;
- the checksum (:func:`checksum`, :data:`CHECKSUM`, :class:`ChecksumError`);
- :class:`ChunkCodec`, one array's codec: it chooses a chunk's level (stored raw where
  Blosc barely shrinks it, :data:`RAW_BELOW`), encodes a chunk to the pieces of its frame,
  splices a patched chunk's blocks into its old frame, and decodes;
- :class:`PartDecoder`: a chunk decoded block by block, as its cells are asked for.

Every function takes bytes (any buffer: ``bytes``, a memory map) and returns bytes or
arrays; reading and writing them is :mod:`subzero.engine.chunkstore`'s business.

>>> import numcodecs
>>> codec = ChunkCodec((4, 3), np.dtype("<f8"), 0.0, numcodecs.Blosc("lz4", 5, 1))
>>> frame = b"".join(bytes(p) for p in codec.encode(np.arange(6.0).reshape(2, 3)))
>>> codec.decode(frame)[:2].tolist()
[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from subzero import settings

__all__ = ["CHECKSUM", "ChecksumError", "checksum", "blosc_sizes", "blosc_blocks",
           "check_frame", "ChunkCodec", "PartDecoder", "preload", "RAW_BELOW",
           "SAMPLE_PIECES", "SAMPLE_BYTES"]

#: a chunk is stored raw (Blosc level 0: its header, then its bytes) when Blosc would shrink
#: it by less than this factor: noisy floats (an image after its background is removed)
#: cost far more time to compress and decompress than the disk they save, while images
#: that shrink well (a flat-corrected exposure) cost about as much either way, so
#: compressing pays there. Where the balance lies depends on the cores' speed against the
#: disk's. Any Blosc reader (zarr too) decodes both.
RAW_BELOW = settings.define(
    "RAW_BELOW", 2.0, float,
    "A chunk that Blosc would shrink by less than this factor is stored raw: compressing "
    "noise costs more time than the disk it saves.",
    benchmark="benchmarks/bench_astronomy.py", module=__name__)
#: a chunk's compression is judged on this many pieces of this many bytes, spread over it:
#: enough to tell noise from an image that shrinks, a small part of the chunk's encoding
SAMPLE_PIECES = settings.define(
    "RAW_SAMPLE_PIECES", 4, int,
    "Pieces of a chunk compressed to judge whether it is stored raw (RAW_BELOW).",
    benchmark="benchmarks/bench_astronomy.py", module=__name__)
SAMPLE_BYTES = settings.define(
    "RAW_SAMPLE_BYTES", 1 << 18, settings.size,
    "Bytes of each piece compressed to judge whether a chunk is stored raw (RAW_BELOW).",
    benchmark="benchmarks/bench_astronomy.py", module=__name__)

#: bytes of the CRC-32C (little endian) that ends a chunk file of an array whose codecs end
#: with zarr's ``crc32c``
CHECKSUM = 4
#: Blosc's header flag of a frame stored raw (no blocks of its own)
_MEMCPYED = 0x02
#: Blosc's header flag of a frame whose blocks are compressed unsplit
_NOSPLIT = 0x10


def preload() -> None:
    """Load what reading and writing chunks load on first use.

    numcodecs, with its registry of codecs, and Blosc's first encoding, for the lock it
    makes: a run calls this before its clock starts, as it imports its kernels' modules
    (setup, not the run's work).

    Examples
    --------
    >>> preload()
    """
    import numcodecs

    numcodecs.Blosc("lz4", 5, 1).encode(np.zeros(1))


class ChecksumError(ValueError):
    """A chunk file whose bytes do not match the checksum it ends with."""


def checksum(parts: Sequence[Any]) -> bytes:
    """The CRC-32C of the concatenated ``parts``, as zarr's ``crc32c`` codec appends it.

    Parameters
    ----------
    parts
        Buffers (bytes, memory views, memory maps), checksummed one after the other.

    Returns
    -------
    bytes
        The :data:`CHECKSUM` bytes of the CRC-32C, little endian.

    Examples
    --------
    >>> checksum([b"123456789"]).hex()  # the CRC-32C check value, e3069283, little endian
    '839206e3'
    """
    import google_crc32c  # zarr's own dependency for its crc32c codec

    crc = 0
    for p in parts:
        crc = google_crc32c.extend(crc, np.frombuffer(p, dtype=np.uint8))
    return int(crc).to_bytes(CHECKSUM, "little")


def without_checksum(data: Any) -> Any:
    """The Blosc frame of the chunk file ``data`` (its bytes), its checksum checked and cut.

    Parameters
    ----------
    data
        The whole file: the frame, then its :data:`CHECKSUM` bytes.

    Returns
    -------
    memoryview or None
        The frame, a view of ``data`` (None: an empty file).

    Raises
    ------
    ChecksumError
        The file is shorter than a checksum, or its bytes do not match it.

    Examples
    --------
    >>> bytes(without_checksum(b"abc" + checksum([b"abc"])))
    b'abc'
    """
    n = len(data) - CHECKSUM
    if n <= 0:
        if len(data):
            raise ChecksumError(f"it holds {len(data)} bytes, fewer than a checksum")
        return None
    view = memoryview(data).cast("B")
    if checksum([view[:n]]) != bytes(view[n:]):
        raise ChecksumError("its bytes do not match the checksum written with them")
    return view[:n]


def blosc_sizes(frame: Any) -> tuple[int, int, int]:
    """A Blosc frame's (decoded bytes, block size, encoded bytes).

    They are little endian at bytes 4, 8 and 12 of its 16-byte header; -1 each for a frame
    shorter than that.

    Examples
    --------
    >>> import numcodecs; f = numcodecs.Blosc("lz4", 5, 1).encode(np.zeros(10))
    >>> blosc_sizes(f)[0], blosc_sizes(f)[2] == len(f), blosc_sizes(b"x")
    (80, True, (-1, -1, -1))
    """
    if len(frame) < 16:
        return -1, -1, -1
    return tuple(int.from_bytes(frame[i:i + 4], "little") for i in (4, 8, 12))  # type: ignore


def blosc_blocks(frame: Any, itemsize: int) -> tuple[int, np.ndarray, np.ndarray] | None:
    """A compressed Blosc frame's block size and each block's (start, end) byte offsets.

    None where it has no blocks of its own (stored raw, flag 0x02) or its header or
    offsets do not hold together. A block ends where the next stored one starts (threads
    may store blocks out of order).

    Examples
    --------
    >>> import numcodecs
    >>> f = numcodecs.Blosc("lz4", 1, 1, blocksize=512).encode(np.arange(1500.0))
    >>> bsize, starts, ends = blosc_blocks(f, 8)
    >>> bsize, len(starts), int(ends.max()) == len(f)
    (512, 24, True)
    """
    if len(frame) < 16:
        return None
    nbytes, bsize, cbytes = blosc_sizes(frame)
    if (frame[2] & _MEMCPYED or frame[3] != itemsize or cbytes != len(frame) or bsize <= 0
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


def check_frame(frame: Any, nbytes: int) -> None:
    """Refuse a frame whose Blosc header does not give a chunk of ``nbytes`` bytes.

    Raises
    ------
    ValueError
        The frame is empty (None), shorter than its header says, or of another chunk.

    Examples
    --------
    >>> check_frame(None, 8)
    Traceback (most recent call last):
    ...
    ValueError: it decodes to -1 bytes; expected 8
    """
    size, _, encoded = blosc_sizes(frame) if frame else (-1, -1, -1)
    if size != nbytes or encoded != len(frame):
        raise ValueError(f"it decodes to {size} bytes; expected {nbytes}")


class ChunkCodec:
    """The codec of one numeric array's chunks: cells to a Blosc frame and back.

    Parameters
    ----------
    chunks
        The chunk shape.
    dtype
        The cells' dtype, little endian.
    fill
        The fill value an edge chunk is padded with beyond the array.
    blosc
        The array's ``numcodecs.Blosc`` (compressor, level, shuffle, block size), as its
        ``zarr.json`` names it.

    Notes
    -----
    Any Blosc reader, zarr's too, decodes a frame whatever its level, which its header
    records, so chunks of several levels (:meth:`at_level`) mix in one array. The Blosc
    codecs it derives are made once and kept; :meth:`spliced` keeps a buffer per thread.
    """

    def __init__(self, chunks: tuple[int, ...], dtype: np.dtype, fill: Any, blosc: Any) -> None:
        self.chunks, self.dtype, self.fill, self.blosc = chunks, np.dtype(dtype), fill, blosc
        self.nbytes = int(np.prod(chunks)) * self.dtype.itemsize
        self._levels: dict[int, Any] = {}
        self._block_codecs: dict[int, Any] = {}  # by block size: see _block_body
        self._raw_header: bytes | None = None
        self._scratch = threading.local()  # per thread: see _pair

    # -- choosing --------------------------------------------------------------------------
    def level_for(self, block: np.ndarray) -> int | None:
        """The level to store ``block`` (a chunk's cells) at.

        Returns
        -------
        int or None
            0 (store raw) for a block that Blosc would shrink by less than
            :data:`RAW_BELOW`, judged on :data:`SAMPLE_PIECES` pieces spread over it (a
            small part of a large chunk's encoding time); None (the array's own level)
            otherwise, and for blocks too small for the sample to pay.
        """
        flat = np.asarray(block)
        if flat.dtype != self.dtype or not flat.flags.c_contiguous:
            return None
        flat = flat.reshape(-1)
        piece = max(1, SAMPLE_BYTES // self.dtype.itemsize)
        if flat.size < 2 * piece * SAMPLE_PIECES:
            return None
        starts = np.linspace(0, flat.size - piece, SAMPLE_PIECES).astype(np.int64)
        packed = sum(len(self.blosc.encode(flat[a:a + piece])) for a in starts)
        return 0 if packed * RAW_BELOW > piece * SAMPLE_PIECES * self.dtype.itemsize else None

    def at_level(self, level: int) -> Any:
        """The array's Blosc compressor and shuffle at compression ``level`` (0: stored raw
        in Blosc's frame)."""
        got = self._levels.get(level)
        if got is None:
            got = self._levels[level] = self._codec(level, self.blosc.get_config()["blocksize"])
        return got

    def _codec(self, level: int, blocksize: int) -> Any:
        """A Blosc codec with the array's compressor and shuffle."""
        import numcodecs

        conf = self.blosc.get_config()
        return numcodecs.Blosc(cname=conf["cname"], clevel=int(level), shuffle=conf["shuffle"],
                               blocksize=int(blocksize))

    # -- encoding --------------------------------------------------------------------------
    def encode(self, block: np.ndarray, level: int | None = None) -> list[Any]:
        """The Blosc frame of a chunk whose cells inside the array are ``block``.

        Parameters
        ----------
        block
            The chunk's cells inside the array (an edge chunk's are fewer than
            :attr:`chunks`; the rest hold the fill value).
        level
            The Blosc level (None: the array's own). At 0 the frame is the block's own
            bytes after a header, without a copy where that applies (:meth:`raw_parts`).

        Returns
        -------
        list
            The frame's pieces, to be written one after the other (views of ``block``
            among them).
        """
        parts = self.raw_parts(block) if level == 0 else None
        if parts is not None:
            return parts
        if block.shape != self.chunks:  # an edge chunk: zarr pads with the fill value
            full = np.full(self.chunks, self.fill, dtype=self.dtype)
            full[tuple(slice(0, n) for n in block.shape)] = block
        else:
            full = np.ascontiguousarray(block, dtype=self.dtype)
        return [(self.blosc if level is None else self.at_level(level)).encode(full)]

    def raw_parts(self, block: np.ndarray) -> list[Any] | None:
        """The frame of a chunk stored raw (Blosc level 0), as pieces, without a copy.

        Blosc's 16-byte header (the same for every chunk of the array: it holds sizes and
        flags only), the block's bytes, the fill value for the rows an edge chunk lacks.
        None where that does not apply (cut along a later axis, a block of another dtype or
        not contiguous): :meth:`encode` it then.
        """
        header = self._raw_header
        if header is None:
            probe = self.at_level(0).encode(np.zeros(self.chunks, dtype=self.dtype))
            header = self._raw_header = (
                bytes(probe[:16]) if len(probe) == 16 + self.nbytes else b"")
        if (not header or block.dtype != self.dtype or not block.flags.c_contiguous
                or block.shape[1:] != self.chunks[1:]):
            return None
        parts: list[Any] = [header, memoryview(block).cast("B")]
        missing = self.chunks[0] - block.shape[0]
        if missing:
            parts.append(np.full((missing,) + self.chunks[1:], self.fill,
                                 dtype=self.dtype).tobytes())
        return parts

    def spliced(self, frame: Any, block: np.ndarray, span: tuple[int, int]
                ) -> list[Any] | None:
        """The frame of a chunk that differs from ``frame`` only in the items ``span``.

        ``frame``'s Blosc blocks, with those holding the span compressed again from
        ``block`` (the chunk's cells inside the array). Blosc compresses each block on its
        own, so a block is compressed alone, as the block at the same place in a chunk of
        one (or, for the last, shorter block, two) blocks with the frame's block size and
        flags, and put in place of the old one: a small patch costs one of a chunk's blocks
        instead of the whole chunk.

        Parameters
        ----------
        frame
            The old chunk's Blosc frame (its bytes, without the checksum).
        block
            The new chunk's cells inside the array.
        span
            The items (C order, a range within the chunk) where ``block`` may differ.

        Returns
        -------
        list or None
            The new frame's pieces (views of ``frame`` among them), or None where splicing
            does not pay or apply (the last, shorter block after a bit shuffle, which Blosc
            compresses unsplit, slowly; a frame stored raw or of other sizes; an edge chunk
            cut along a later axis; another dtype): :meth:`encode` the chunk then.
        """
        isz = self.dtype.itemsize
        n = int(np.prod(self.chunks))
        if (len(frame) < 16 or block.dtype != self.dtype or not block.flags.c_contiguous
                or block.shape[1:] != self.chunks[1:]):
            return None
        flags, typesize = frame[2], frame[3]
        nbytes, bsize, cbytes = blosc_sizes(frame)
        if (flags & _MEMCPYED or typesize != isz or nbytes != n * isz or cbytes != len(frame)
                or bsize <= 0 or bsize % isz):
            return None
        nblocks, per = -(-nbytes // bsize), bsize // isz
        starts = np.frombuffer(frame, dtype="<i4", count=nblocks, offset=16).astype(np.int64)
        ends = np.append(starts[1:], cbytes)
        if starts[0] != 16 + 4 * nblocks or np.any(ends < starts):
            return None
        flat, have = block.reshape(-1), block.size
        new: dict[int, Any] = {}
        bitshuffle = self.blosc.get_config()["shuffle"] == 2
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
        known = self._block_codecs
        isz = self.dtype.itemsize
        level = min(1, int(self.blosc.get_config()["clevel"]))
        tries = [known[bsize]] if bsize in known else [
            self._codec(level, want) for want in dict.fromkeys((bsize // isz, bsize))]
        for codec in tries:
            enc = codec.encode(data)
            size, got_bsize, _ = blosc_sizes(enc)
            if (len(enc) >= 16 + 4 * count and enc[2] == flags and enc[3] == isz
                    and got_bsize == bsize and size == data.nbytes):
                known[bsize] = codec
                at = 16 + 4 * (count - 1)
                return enc[int.from_bytes(enc[at:at + 4], "little"):]
        return None

    # -- decoding --------------------------------------------------------------------------
    def decode(self, frame: Any, out: np.ndarray | None = None) -> np.ndarray:
        """The whole chunk (:attr:`chunks`, padded as stored) that ``frame`` holds.

        Parameters
        ----------
        frame
            A Blosc frame of this array's chunk (any buffer; a memory map is not copied).
        out
            Where to decode it (a C-contiguous array of the chunk's shape and dtype).

        Raises
        ------
        ValueError
            ``frame`` is empty (None) or not a frame of a chunk of this array.
        """
        full = np.empty(self.chunks, dtype=self.dtype) if out is None else out
        check_frame(frame, full.nbytes)
        self.blosc.decode(frame, out=full)
        return full


class PartDecoder:
    """A chunk decoded block by block from its frame, as its cells are asked for.

    Blosc compresses each block of a chunk on its own, so the cells of a small box cost
    the one or two blocks holding them rather than the whole chunk. A run of blocks is
    decoded as a Blosc frame of those blocks alone: the chunk's header with the run's
    sizes, their offsets, their bytes. The last block, when shorter and alone, is a frame of
    its own size marked unsplit (Blosc compresses a frame's last, shorter block unsplit). A
    frame without blocks of its own (stored raw) is copied from; one that is neither is
    decoded whole.

    Parameters
    ----------
    codec
        The array's codec.

    Attributes
    ----------
    full : numpy.ndarray
        The chunk (its whole shape); cells of blocks not yet decoded hold garbage.
    whole : bool
        Whether every block is decoded.

    Notes
    -----
    Not safe for several threads deciding at once: the caller holds a lock around
    :meth:`decode` (:meth:`decoded` may be asked without it).

    Examples
    --------
    >>> import numcodecs
    >>> blosc = numcodecs.Blosc("lz4", 5, 1, blocksize=1 << 16)
    >>> codec = ChunkCodec((100_000,), np.dtype("<f8"), 0.0, blosc)
    >>> frame = codec.encode(np.arange(100_000.0))[0]
    >>> part = PartDecoder(codec)
    >>> part.decode(frame, (10_000, 10_002)); part.full[10_000:10_002].tolist(), part.whole
    ([10000.0, 10001.0], False)
    >>> part.decode(frame, None); part.whole, float(part.full[-1])
    (True, 99999.0)
    """

    def __init__(self, codec: ChunkCodec) -> None:
        self.codec = codec
        self.full = np.empty(codec.chunks, dtype=codec.dtype)
        self.nbytes = self.full.nbytes
        self._bytes = self.full.reshape(-1).view(np.uint8)
        self._done: list[bool] | None = None  # per block: decoded (None: none yet)
        self._per = 0  # items per block
        self.whole = False

    def decoded(self, span: tuple[int, int]) -> bool:
        """Whether the items ``span`` (C order within the chunk) are decoded."""
        return self.whole or (self._done is not None and all(self._blocks(span)))

    def _blocks(self, span: tuple[int, int]) -> list[bool]:
        """Whether each block holding the items ``span`` is decoded."""
        assert self._done is not None
        per = self._per
        return self._done[span[0] // per:(max(span[1], span[0] + 1) - 1) // per + 1]

    def decode(self, frame: Any, span: tuple[int, int] | None) -> None:
        """Decode the blocks of ``frame`` holding the items ``span`` (None: all the rest).

        Parameters
        ----------
        frame
            The chunk's Blosc frame (the same bytes at every call).
        span
            The items (C order within the chunk) to decode, or None.

        Raises
        ------
        ValueError, RuntimeError, TypeError, IndexError
            ``frame`` is not a frame of this chunk (Blosc's own errors among them).
        """
        if self.whole:
            return
        codec = self.codec
        check_frame(frame, self.nbytes)
        isz = codec.dtype.itemsize
        raw = frame[2] & _MEMCPYED
        got = None if raw else blosc_blocks(frame, isz)
        bsize = got[0] if got is not None else blosc_sizes(frame)[1]
        if ((span is None and self._done is None) or (got is None and not raw)
                or bsize <= 0 or bsize % isz):  # (the same frame: nothing decoded yet)
            codec.blosc.decode(frame, out=self.full)
            self.whole = True
            return
        nblocks = -(-self.nbytes // bsize)
        if self._done is None:
            self._per = bsize // isz  # before _done: decoded() reads both unlocked
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
            self._run(frame, todo[a], todo[z - 1] + 1, bsize, got)
            a = z
        if all(self._done):
            self.whole = True

    def _run(self, frame: Any, a: int, z: int, bsize: int,
             got: tuple[int, np.ndarray, np.ndarray] | None) -> None:
        """Decode blocks ``a`` to ``z - 1`` into the chunk."""
        assert self._done is not None
        nblocks = len(self._done)
        lo, hi = a * bsize, min(z * bsize, self.nbytes)
        if got is None:  # stored raw: the items as they are
            self._bytes[lo:hi] = np.frombuffer(frame, np.uint8, hi - lo, 16 + lo)
            self._done[a:z] = [True] * (z - a)
            return
        _, starts, ends = got
        if a == 0 and z == nblocks:
            self.codec.blosc.decode(frame, out=self.full)
            self._done[:] = [True] * nblocks
            return
        head = bytes(frame[:4])
        size = bsize
        if z - a == 1 and hi - lo < bsize:
            # the shorter last block alone: a frame of that one block, of its size, marked
            # unsplit, as Blosc decodes a frame's last, shorter block
            head, size = head[:2] + bytes([head[2] | _NOSPLIT]) + head[3:], hi - lo
        view = memoryview(frame)
        bodies = [view[int(starts[b]):int(ends[b])] for b in range(a, z)]
        first = 16 + 4 * len(bodies)
        sizes = np.array([len(b) for b in bodies], dtype=np.int64)
        offsets = first + np.concatenate([[0], np.cumsum(sizes[:-1])])
        sub = b"".join([head, (hi - lo).to_bytes(4, "little"), size.to_bytes(4, "little"),
                        int(first + sizes.sum()).to_bytes(4, "little"),
                        offsets.astype("<i4").tobytes(), *bodies])
        del bodies, view
        self.codec.blosc.decode(sub, out=self._bytes[lo:hi])
        self._done[a:z] = [True] * (z - a)
