"""The chunk codec (subzero.engine.codec) without any I/O: cells to bytes and back, a
patched chunk spliced into its old frame, blocks decoded on their own."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subzero.engine.codec import (
    ChecksumError, ChunkCodec, PartDecoder, blosc_blocks, checksum, check_frame,
    without_checksum)


def _codec(chunks=(64, 37), dtype="<f8", shuffle=1, blocksize=4096, level=5) -> ChunkCodec:
    return ChunkCodec(chunks, np.dtype(dtype), 0,
                      numcodecs.Blosc("lz4", level, shuffle, blocksize=blocksize))


def _bytes(parts) -> bytes:
    return b"".join(bytes(memoryview(p).cast("B")) for p in parts)


def _image(shape, dtype="<f8", seed=0) -> np.ndarray:
    """Compressible cells (rounded, as a calibrated image's)."""
    rng = np.random.default_rng(seed)
    return np.abs(rng.normal(size=shape) * 50).round().astype(dtype)


@pytest.mark.parametrize("dtype", ["<f8", "<f4", "<i8", "<u2", "u1", "bool"])
@pytest.mark.parametrize("level", [None, 0, 1])
@pytest.mark.parametrize("rows", [64, 23])  # a whole chunk, an edge chunk
def test_a_chunk_encoded_to_bytes_decodes_to_its_cells(dtype, level, rows):
    codec = _codec(dtype=dtype)
    block = _image((rows, 37), dtype)
    frame = _bytes(codec.encode(block, level))
    full = codec.decode(frame)
    assert np.array_equal(full[:rows], block)
    assert (full[rows:] == 0).all()  # an edge chunk is padded with the fill value


def test_a_chunk_stored_raw_is_its_bytes_after_a_header():
    codec = _codec()
    block = _image((64, 37))
    parts = codec.encode(block, 0)
    frame = _bytes(parts)
    assert frame[2] & 0x02 and frame[16:] == block.tobytes()
    assert frame == bytes(codec.at_level(0).encode(block))  # what Blosc itself writes


def test_noise_is_stored_raw_and_an_image_that_shrinks_is_not():
    codec = _codec(chunks=(1024, 1024))
    noise = np.random.default_rng(1).normal(size=(1024, 1024))
    assert codec.level_for(noise) == 0
    assert codec.level_for(np.zeros((1024, 1024))) is None
    assert codec.level_for(np.zeros((4, 4))) is None  # too small to judge


@settings(max_examples=40, deadline=None)
@given(lo=st.integers(0, 64 * 37 - 1), length=st.integers(1, 900),
       shuffle=st.sampled_from([0, 1, 2]), rows=st.sampled_from([64, 50]),
       seed=st.integers(0, 1000))
def test_a_spliced_chunk_decodes_as_the_chunk_encoded_whole(lo, length, shuffle, rows, seed):
    """Splicing the blocks of a patch into the old frame gives the bytes of a frame that
    decodes to the patched chunk, as encoding the patched chunk whole does."""
    codec = _codec(shuffle=shuffle)
    old = _image((rows, 37), seed=seed)
    frame = _bytes(codec.encode(old))
    hi = min(rows * 37, lo + length)
    if lo >= hi:
        return
    new = old.copy().reshape(-1)
    new[lo:hi] = -np.arange(hi - lo)
    new = new.reshape(old.shape)
    parts = codec.spliced(frame, new, (lo, hi))
    whole = codec.decode(_bytes(codec.encode(new)))
    if parts is None:  # a bit shuffle's last, shorter block: encoded whole instead
        assert shuffle == 2
        return
    assert np.array_equal(codec.decode(_bytes(parts)), whole)


def test_a_frame_stored_raw_is_not_spliced():
    codec = _codec()
    frame = _bytes(codec.encode(_image((64, 37)), 0))
    assert codec.spliced(frame, _image((64, 37)), (0, 10)) is None


@settings(max_examples=30, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 64 * 37 - 1), st.integers(1, 1500)),
                      min_size=1, max_size=3),
       level=st.sampled_from([None, 0]), rows=st.sampled_from([64, 50]))
def test_blocks_decoded_on_their_own_equal_the_chunk_decoded_whole(spans, level, rows):
    codec = _codec()
    frame = _bytes(codec.encode(_image((rows, 37)), level))
    whole = codec.decode(frame).reshape(-1)
    part = PartDecoder(codec)
    layout = blosc_blocks(frame, 8)
    for lo, length in spans:
        hi = min(whole.size, lo + length)
        part.decode(frame, (lo, hi))
        assert part.decoded((lo, hi))
        assert np.array_equal(part.full.reshape(-1)[lo:hi], whole[lo:hi])
    if layout is not None and len(layout[1]) > 3 and len(spans) == 1 and spans[0][1] < 100:
        assert not part.whole  # a few blocks, not the chunk
    part.decode(frame, None)
    assert part.whole and np.array_equal(part.full.reshape(-1), whole)


def test_a_frame_of_another_chunk_is_refused():
    codec = _codec()
    other = _bytes(_codec(chunks=(32, 37)).encode(_image((32, 37))))
    with pytest.raises(ValueError, match="expected"):
        codec.decode(other)
    with pytest.raises(ValueError, match="expected"):
        check_frame(other[:-1], len(other))


def test_the_checksum_is_checked_and_cut():
    frame = b"some frame"
    assert bytes(without_checksum(frame + checksum([frame]))) == frame
    assert without_checksum(b"") is None
    with pytest.raises(ChecksumError, match="fewer than a checksum"):
        without_checksum(b"abc")
    with pytest.raises(ChecksumError, match="do not match"):
        without_checksum(b"X" + frame[1:] + checksum([frame]))
