"""Arrays' chunk files, the home's layout and chunking policies (the catalog's own
tests are in tests/engine/test_catalog.py)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subzero.cells import Box
from subzero.chunking import Chunking, chunk_grid
from subzero import pools
from subzero.engine import arrays, chunkstore, codec, layout
from subzero.errors import DamagedError, StoreError


def test_arrays_are_never_overwritten(tmp_path):
    p = tmp_path / "a.zarr"
    arrays.write_array(p, np.arange(12.0).reshape(3, 4), (2, 4))
    with pytest.raises(StoreError, match="already exists .* \\(no overwrite\\)"):
        arrays.create_array(p, (3, 4), "f8", (2, 4))
    assert arrays.read_box(p, Box((1, 1), (3, 3))).tolist() == [[5.0, 6.0], [9.0, 10.0]]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_chunk_files_read_any_box_as_zarr_does(tmp_path_factory, seed):
    """ChunkFiles.read_box (chunks decoded without zarr) equals zarr's read of the same
    box, for boxes inside one chunk, across several and at the edge chunks."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 30, 2))
    chunks = tuple(int(rng.integers(1, n + 1)) for n in shape)
    dtype = rng.choice(["f8", "i4", "u2", "bool"])
    data = (rng.random(shape) * 1000).astype(dtype)
    p = tmp_path_factory.mktemp("cf") / "a.zarr"
    arrays.write_array(p, data, chunks)
    files = chunkstore.ChunkFiles.open(p)
    assert files is not None
    for _ in range(5):
        lo = [int(rng.integers(0, n)) for n in shape]
        hi = [int(rng.integers(a + 1, n + 1)) for a, n in zip(lo, shape)]
        box = Box(tuple(lo), tuple(hi))
        got = files.read_box(box)
        assert got.dtype == data.dtype and np.array_equal(got, _zarr_read(p, box))
    assert np.array_equal(files.read_box(Box.full(shape)), data)


def _zarr_read(path, box):
    return np.asarray(arrays.open_array(path)[box.slices])


def _zarr_write(path, box, block):
    arrays.open_array(path, "r+")[box.slices] = block


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "uint16", "bool"])
def test_task_blocks_go_to_their_chunk_files_as_zarr_writes_them(tmp_path, dtype):
    """write_block of one whole chunk (what a task writes) skips zarr: the chunk file is
    byte for byte zarr's, edge chunks included; other blocks go through zarr; read_box
    (direct) equals zarr's read of any box."""
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(29, 17)) * 100).astype(dtype)
    for name in ("a", "b"):
        arrays.create_array(tmp_path / f"{name}.zarr", x.shape, x.dtype, (10, 8))
    files = arrays.direct_files(tmp_path / "a.zarr")
    assert files is not None
    for k in files.keys():
        box = files.box(k)
        assert files.key_of(box) == k
        arrays.write_block(tmp_path / "a.zarr", box, x[box.slices])
        _zarr_write(tmp_path / "b.zarr", box, x[box.slices])
    for k in files.keys():
        assert files.file(k).read_bytes() == arrays.chunk_file(tmp_path / "b.zarr", k).read_bytes()
    assert not list((tmp_path / "a.zarr").rglob("*.tmp"))
    for _ in range(20):
        lo = [int(rng.integers(0, n)) for n in x.shape]
        hi = [int(rng.integers(a + 1, n + 1)) for a, n in zip(lo, x.shape)]
        box = Box(tuple(lo), tuple(hi))
        got = arrays.read_box(tmp_path / "a.zarr", box)
        assert got.dtype == x.dtype and np.array_equal(got, _zarr_read(tmp_path / "b.zarr", box))
    # a block of whole chunks (a global operator's whole array, or a run of chunks) goes
    # to their files too, each as zarr writes it
    for block in (Box.full(x.shape), Box((10, 0), (29, 16)), Box((0, 8), (10, 17))):
        arrays.create_array(tmp_path / "c.zarr", x.shape, x.dtype, (10, 8))
        arrays.write_block(tmp_path / "c.zarr", block, x[block.slices])
        wrote = sorted(p.relative_to(tmp_path / "c.zarr" / "c")
                       for p in (tmp_path / "c.zarr" / "c").rglob("*") if p.is_file())
        assert wrote == sorted(Path(*map(str, k)) for k in files.keys(block))
        for k in files.keys(block):
            assert (arrays.chunk_file(tmp_path / "c.zarr", k).read_bytes()
                    == arrays.chunk_file(tmp_path / "b.zarr", k).read_bytes())
        shutil.rmtree(tmp_path / "c.zarr")
    # a block that is not whole chunks (part of one, or of two) goes through zarr
    part = Box((2, 3), (12, 9))
    assert files.key_of(part) is None and files.key_of(Box((0, 0), (10, 16))) is None
    assert files.whole_chunks(part) is None and files.whole_chunks(Box((0, 0), (10, 12))) is None
    arrays.write_block(tmp_path / "a.zarr", part, np.zeros(part.shape, dtype=dtype))
    want = x.copy()
    want[part.slices] = 0
    assert np.array_equal(arrays.read_box(tmp_path / "a.zarr", Box.full(x.shape)), want)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_noisy_task_block_is_stored_raw_and_a_smooth_one_compressed(tmp_path, dtype):
    """A chunk Blosc would shrink by less than RAW_BELOW (noise) is stored raw (Blosc's
    level-0 frame, which zarr reads); one that compresses well is zarr's own bytes."""
    rng = np.random.default_rng(5)
    shape, chunks = (3000, 700), (1500, 700)
    noisy = (1000 + 30 * rng.standard_normal(shape)).astype(dtype)
    smooth = np.broadcast_to(np.arange(shape[1], dtype=dtype) % 7, shape).copy()
    for name, x in (("noisy", noisy), ("smooth", smooth)):
        arrays.create_array(tmp_path / f"{name}.zarr", shape, dtype, chunks)
        arrays.create_array(tmp_path / f"{name}-z.zarr", shape, dtype, chunks)
        files = arrays.direct_files(tmp_path / f"{name}.zarr")
        for k in files.keys():
            box = files.box(k)
            arrays.write_block(tmp_path / f"{name}.zarr", box, x[box.slices])
            _zarr_write(tmp_path / f"{name}-z.zarr", box, x[box.slices])
        full = Box.full(shape)
        assert np.array_equal(_zarr_read(tmp_path / f"{name}.zarr", full), x)
        assert np.array_equal(arrays.read_box(tmp_path / f"{name}.zarr", full), x)
        for k in files.keys():
            got = files.file(k).read_bytes()
            zarrs = arrays.chunk_file(tmp_path / f"{name}-z.zarr", k).read_bytes()
            if name == "smooth":
                assert got == zarrs and len(got) * arrays.RAW_BELOW < x[box.slices].nbytes
            else:
                assert len(zarrs) * arrays.RAW_BELOW > x[box.slices].nbytes  # it is noise
                # memcpyed, then its checksum
                assert got[2] & 0x02 and len(got) == 16 + x[box.slices].nbytes + codec.CHECKSUM


@pytest.mark.parametrize("noise", [0.0, 30.0])
def test_thin_boxes_read_directly_equal_zarrs(tmp_path, noise):
    """Boxes that need a small part of a chunk (a halo's rows, a corner) decode only the
    Blosc blocks holding them, chunks stored raw (noise) or compressed alike, and read
    what zarr reads."""
    rng = np.random.default_rng(11)
    shape, chunks = (2500, 700), (1000, 700)
    x = (np.arange(shape[1]) % 13 + noise * rng.standard_normal(shape)).astype("f8")
    p = tmp_path / "a.zarr"
    arrays.create_array(p, shape, x.dtype, chunks)
    files = arrays.direct_files(p)
    for k in files.keys():
        arrays.write_block(p, files.box(k), x[files.box(k).slices])
    boxes = [Box((995, 0), (1005, 700)), Box((0, 0), (3, 700)), Box((2497, 690), (2500, 700)),
             Box((1990, 10), (2010, 20)), Box((400, 0), (1600, 700))]
    for _ in range(20):
        a = int(rng.integers(0, shape[0] - 1))
        c = int(rng.integers(0, shape[1] - 1))
        boxes.append(Box((a, c), (min(shape[0], a + int(rng.integers(1, 40))),
                                  min(shape[1], c + int(rng.integers(1, 700))))))
    for box in boxes:
        assert np.array_equal(arrays.read_box(p, box), _zarr_read(p, box)), box
        assert np.array_equal(arrays.read_box(p, box), x[box.slices]), box
    # a box reaching beyond the array is a bad request, named as such (not damage)
    with pytest.raises(StoreError, match=r"not inside array 'a' of shape \(2500, 700\)"):
        arrays.read_box(p, Box((2400, 600), (2600, 800)))


def test_chunk_files_killed_writers_left_are_removed_and_chunks_kept(tmp_path):
    p = tmp_path / "a.zarr"
    arrays.write_array(p, np.arange(20.0).reshape(4, 5), (2, 5))
    files = arrays.direct_files(p)
    stray = [files.file((1, 0)).with_name(".0.123-456.tmp"),
             files.file((0, 0)).with_name("0.3f2a.partial")]
    for f in stray:
        f.write_bytes(b"half a chunk")
    assert arrays.remove_leftovers(p) == 2 and not any(f.exists() for f in stray)
    assert np.array_equal(arrays.read_box(p, Box.full((4, 5))), np.arange(20.0).reshape(4, 5))
    assert arrays.remove_leftovers(p) == 0 and arrays.remove_leftovers(tmp_path / "no") == 0


def test_direct_chunk_io_only_where_every_chunk_is_written(tmp_path):
    """Arrays without the all-chunks mark (a missing chunk is fill values there) and text
    arrays are read through zarr; a missing chunk of a marked one is damage, named; an
    array made again at the same path is seen anew."""
    arrays.write_array(tmp_path / "t.zarr", np.array([["a", "bc"]]), (1, 2))
    assert arrays.direct_files(tmp_path / "t.zarr") is None
    assert arrays.direct_files(tmp_path / "none.zarr") is None
    p = tmp_path / "a.zarr"
    arrays.write_array(p, np.arange(20.0).reshape(4, 5), (2, 5))
    assert arrays.direct_files(p) is not None
    arrays.chunk_file(p, (1, 0)).unlink()
    with pytest.raises(DamagedError, match=r"array 'a' chunk 1\.0 is missing"):
        arrays.read_box(p, Box((1, 0), (3, 2)))
    meta = json.loads((p / "zarr.json").read_text())
    del meta["attributes"][arrays.ALL_CHUNKS]
    (p / "zarr.json").write_text(json.dumps(meta))
    assert arrays.direct_files(p) is None
    assert arrays.read_box(p, Box((1, 0), (3, 2))).tolist() == [[5.0, 6.0], [0.0, 0.0]]
    import shutil
    shutil.rmtree(p)
    arrays.write_array(p, np.arange(6).reshape(2, 3), (1, 3))
    assert arrays.direct_files(p).shape == (2, 3)
    assert arrays.read_box(p, Box((1, 1), (2, 3))).tolist() == [[4, 5]]


def test_string_arrays_roundtrip(tmp_path):
    p = tmp_path / "s.zarr"
    data = np.array([["Y", "NA"], ["c1", "L"]])
    arrays.write_array(p, data, (1, 2))
    assert arrays.read_array(p).tolist() == data.tolist()


def test_home_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBZERO_HOME", str(tmp_path / "h"))
    assert layout.resolve_home(None) == (tmp_path / "h").resolve()
    assert layout.resolve_home(tmp_path / "x") == (tmp_path / "x").resolve()
    monkeypatch.delenv("SUBZERO_HOME")
    assert layout.resolve_home(None).name == "subzero-home"


def test_chunking_policies():
    assert Chunking(split=7).chunk_shape((13, 9)) == (2, 2)
    assert Chunking(chunks=(500, 513)).chunk_shape((2001, 513)) == (500, 513)
    assert Chunking().chunk_shape((2001, 513)) == (2001, 513)
    assert Chunking(tasks=4).chunk_shape((2001, 513)) == (501, 513)
    assert Chunking(max_cells=1000).chunk_shape((100, 100)) == (10, 100)
    assert Chunking().chunk_shape((2001, 513), global_=True) == (2001, 513)
    assert len(chunk_grid((13, 9), (2, 2))) == 7 * 5
    assert Chunking.parse("4x2") == Chunking(split=(4, 2))
    with pytest.raises(Exception, match="bad chunking"):
        Chunking.parse("a,b")


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "uint16", "uint8", "bool"])
def test_chunk_files_read_what_zarr_wrote_and_write_the_same_bytes(tmp_path, dtype):
    """Direct chunk I/O (a replay's) against zarr: every chunk reads back equal, edge chunks
    included, and a chunk written directly is byte for byte the file zarr writes."""
    rng = np.random.default_rng(7)
    x = (rng.normal(size=(37, 23)) * 100).astype(dtype)
    arrays.write_array(tmp_path / "a.zarr", x, (10, 8))
    files = chunkstore.ChunkFiles.open(tmp_path / "a.zarr")
    assert files is not None and files.keys() == [(i, j) for i in range(4) for j in range(3)]
    got = np.zeros_like(x)
    for k in files.keys():
        got[files.box(k).slices] = files.read(k)
    assert np.array_equal(got, x)
    arrays.create_array(tmp_path / "b.zarr", x.shape, x.dtype, (10, 8))
    other = chunkstore.ChunkFiles.open(tmp_path / "b.zarr")
    for k in other.keys():
        other.write(k, x[other.box(k).slices])
    for k in files.keys():
        assert other.file(k).read_bytes() == files.file(k).read_bytes(), k
    assert np.array_equal(arrays.read_array(tmp_path / "b.zarr"), x)
    assert files.keys(Box((9, 7), (11, 17))) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_chunk_files_refuse_what_they_cannot_vouch_for_and_name_damage(tmp_path):
    arrays.write_array(tmp_path / "t.zarr", np.array([["a", "bc"]]), (1, 2))
    assert chunkstore.ChunkFiles.open(tmp_path / "t.zarr") is None  # text: zarr's business
    assert chunkstore.ChunkFiles.open(tmp_path / "none.zarr") is None
    arrays.write_array(tmp_path / "n.zarr", np.zeros((2, 2)), (1, 2))
    meta = json.loads((tmp_path / "n.zarr" / "zarr.json").read_text())
    meta["fill_value"] = "NaN"  # a fill written as text
    (tmp_path / "n.zarr" / "zarr.json").write_text(json.dumps(meta))
    assert chunkstore.ChunkFiles.open(tmp_path / "n.zarr") is None
    arrays.write_array(tmp_path / "a.zarr", np.arange(20.0).reshape(4, 5), (2, 5))
    files = chunkstore.ChunkFiles.open(tmp_path / "a.zarr")
    files.file((1, 0)).unlink()
    with pytest.raises(DamagedError, match=r"array 'a' chunk 1\.0 is missing"):
        files.read((1, 0))
    files.file((0, 0)).write_bytes(b"garbage")
    with pytest.raises(DamagedError, match=r"array 'a' chunk 0\.0 cannot be read"):
        files.read((0, 0))
    files.file((0, 0)).write_bytes(b"")
    with pytest.raises(DamagedError, match=r"array 'a' chunk 0\.0 cannot be read"):
        files.read((0, 0))
    small = files.codec.encode(np.arange(9.0))  # a smaller chunk's, with its checksum
    files.file((0, 0)).write_bytes(small + codec.checksum([small]))
    with pytest.raises(DamagedError, match=r"chunk 0\.0 cannot be read: it decodes to 72 "):
        files.read((0, 0))
    good = files.codec.encode(np.arange(10.0))  # the right size, a byte changed after
    files.file((0, 0)).write_bytes(good[:-1] + bytes([good[-1] ^ 1]) + codec.checksum([good]))
    with pytest.raises(DamagedError, match=r"chunk 0\.0 cannot be read: its bytes do not "
                       "match the checksum"):
        files.read((0, 0))
    with pytest.raises(StoreError, match="shape"):
        files.write((0, 0), np.zeros((3, 5)))


def test_a_chunk_written_over_a_hard_link_leaves_the_linked_file_alone(tmp_path):
    """A replay links the parent's chunk files into the derived run: writing a chunk
    renames a new file over the link, never writes through it."""
    x = np.arange(20.0).reshape(4, 5)
    arrays.write_array(tmp_path / "a.zarr", x, (2, 5))
    (tmp_path / "b.zarr").mkdir()
    meta = (tmp_path / "a.zarr" / "zarr.json").read_bytes()
    (tmp_path / "b.zarr" / "zarr.json").write_bytes(meta)
    src = chunkstore.ChunkFiles.open(tmp_path / "a.zarr")
    for k in src.keys():
        target = arrays.chunk_file(tmp_path / "b.zarr", k)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(src.file(k), target)
    dst = chunkstore.ChunkFiles.open(tmp_path / "b.zarr")
    dst.write((1, 0), np.full((2, 5), -1.0))
    assert np.array_equal(arrays.read_array(tmp_path / "a.zarr"), x)
    assert dst.file((0, 0)).stat().st_ino == src.file((0, 0)).stat().st_ino
    assert dst.file((1, 0)).stat().st_ino != src.file((1, 0)).stat().st_ino
    assert np.array_equal(arrays.read_array(tmp_path / "b.zarr")[2:], np.full((2, 5), -1.0))


@pytest.mark.parametrize("dtype", ["float64", "uint16", "bool"])
def test_chunks_written_at_other_levels_mix_with_zarrs_and_read_back_equal(tmp_path, dtype):
    """A replay writes its chunks at Blosc level 1 or 0 (raw): the same compressor and
    shuffle, so zarr and the chunk files read them, beside chunks zarr wrote at the
    array's level."""
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(30, 20)) * 1000).astype(dtype)
    if dtype == "bool":
        x = rng.random((30, 20)) > 0.5
    arrays.write_array(tmp_path / "a.zarr", x, (10, 20))
    files = chunkstore.ChunkFiles.open(tmp_path / "a.zarr")
    y = x.copy()
    y[10:20] = x[0:10]
    for level in (1, 0):
        files.write((1, 0), y[10:20], level=level)
        assert np.array_equal(files.read((1, 0)), y[10:20])
        assert np.array_equal(arrays.read_array(tmp_path / "a.zarr"), y)
        conf = files.codec_at(level).get_config()
        assert conf["clevel"] == level
        assert {k: conf[k] for k in ("cname", "shuffle")} == {
            k: files.codec.get_config()[k] for k in ("cname", "shuffle")}
    assert files.file((1, 0)).stat().st_size > y[10:20].nbytes  # level 0: stored raw


@pytest.mark.parametrize("dtype", ["float64", "int64", "uint16", "bool"])
def test_a_chunk_stored_raw_is_the_bytes_blosc_writes_at_level_0(tmp_path, dtype):
    """Level 0 is written as Blosc's header and the block's own bytes (and the fill for
    an edge chunk's missing rows), never encoded: byte for byte Blosc's own encoding."""
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(25, 7)) * 1000).astype(dtype)
    arrays.write_array(tmp_path / "a.zarr", x, (10, 7))
    files = chunkstore.ChunkFiles.open(tmp_path / "a.zarr")
    for k in files.keys():  # (2, 0) is an edge chunk: 5 of 10 rows
        block = x[files.box(k).slices]
        files.write(k, block, level=0)
        full = np.full(files.chunks, files.fill, dtype=files.dtype)
        full[: block.shape[0]] = block
        frame = files.codec_at(0).encode(full)
        assert files.file(k).read_bytes() == frame + codec.checksum([frame]), k
        assert np.array_equal(files.read(k), block)
    assert np.array_equal(arrays.read_array(tmp_path / "a.zarr"), x)
    files.write((0, 0), x[0:10][:, ::-1], level=0)  # not contiguous: encoded instead
    assert np.array_equal(files.read((0, 0)), x[0:10][:, ::-1])


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(["float64", "int64", "uint16", "bool", "float32"]),
       shuffle=st.sampled_from(["bitshuffle", "shuffle", "noshuffle"]),
       rows=st.integers(1, 40), row=st.integers(0, 200), seed=st.integers(0, 2**16))
def test_a_chunk_spliced_into_its_base_decodes_as_the_patched_chunk(
        tmp_path_factory, dtype, shuffle, rows, row, seed):
    """A chunk that differs from its base file in a span is written as the base's Blosc
    blocks with those holding the span compressed again: zarr and the chunk files read
    the patched chunk, edge chunks and the last, shorter block included; where splicing
    does not apply (a frame or a block Blosc stores raw, the last block after a bit
    shuffle), the chunk is encoded whole."""
    import zarr

    tmp = tmp_path_factory.mktemp("splice")
    rng = np.random.default_rng(seed)
    shape, chunks = (300, 37), (256, 37)  # chunk 1 is an edge chunk (44 of 256 rows)
    x = np.abs(rng.normal(size=shape) * 50).round().astype(dtype)
    zarr.create_array(tmp / "a.zarr", shape=shape, chunks=chunks, dtype=dtype,
                      compressors=[zarr.codecs.BloscCodec(cname="lz4", clevel=5,
                                                          shuffle=shuffle, blocksize=4096)])
    zarr.open_array(tmp / "a.zarr", mode="r+")[:] = x
    files = chunkstore.ChunkFiles.open(tmp / "a.zarr")
    key = (0, 0) if row < 256 else (1, 0)
    cb = files.box(key)
    lo = min(row % 256, cb.shape[0] - 1)
    hi = min(lo + rows, cb.shape[0])
    y = x.copy()
    y[cb.lo[0] + lo: cb.lo[0] + hi, 3:30] = (rng.normal(size=(hi - lo, 27)) * 9).astype(dtype)
    base = tmp / "base"
    base.write_bytes(files.file(key).read_bytes())
    frame = base.read_bytes()
    parts = files.chunk_codec.spliced(frame, np.ascontiguousarray(y[cb.slices]),
                                      (lo * 37, hi * 37))
    if parts is not None:  # None where it does not apply: the write encodes it whole
        out = np.empty(files.chunks, dtype=files.dtype)
        files.codec.decode(b"".join(bytes(p) for p in parts), out=out)
        assert np.array_equal(out[:cb.shape[0]], y[cb.slices])
    files.write(key, np.ascontiguousarray(y[cb.slices]), base=base, span=(lo * 37, hi * 37))
    assert np.array_equal(files.read(key), y[cb.slices])
    assert np.array_equal(arrays.read_array(tmp / "a.zarr"), y)


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(["float64", "int64", "uint16", "bool", "float32"]),
       shuffle=st.sampled_from(["bitshuffle", "shuffle", "noshuffle"]),
       level=st.sampled_from([0, 1, 5]), edge=st.booleans(),
       spans=st.lists(st.tuples(st.integers(0, 256 * 37 - 1), st.integers(1, 3000)),
                      min_size=1, max_size=3),
       seed=st.integers(0, 2**16))
def test_a_chunk_decoded_block_by_block_holds_what_a_whole_read_does(
        tmp_path_factory, dtype, shuffle, level, edge, spans, seed):
    """PartChunk decodes only the Blosc blocks holding the items asked for (the last,
    shorter block alone too, raw frames by copy), and what it has decoded equals a whole
    read, span after span and at the end."""
    import zarr

    tmp = tmp_path_factory.mktemp("part")
    rng = np.random.default_rng(seed)
    shape, chunks = (300, 37), (256, 37)  # chunk 1 is an edge chunk (44 of 256 rows)
    x = np.abs(rng.normal(size=shape) * 50).round().astype(dtype)
    zarr.create_array(tmp / "a.zarr", shape=shape, chunks=chunks, dtype=dtype,
                      compressors=[zarr.codecs.BloscCodec(cname="lz4", clevel=level,
                                                          shuffle=shuffle, blocksize=4096)])
    zarr.open_array(tmp / "a.zarr", mode="r+")[:] = x
    files = chunkstore.ChunkFiles.open(tmp / "a.zarr")
    key = (1, 0) if edge else (0, 0)
    whole = np.empty(chunks, dtype=files.dtype).reshape(-1)
    files.codec.decode(files.file(key).read_bytes(), out=whole)
    part = files.part(key)
    n = whole.size
    layout = codec.blosc_blocks(files.file(key).read_bytes(), files.dtype.itemsize)
    for i, (lo, length) in enumerate(spans):
        hi = min(n, lo + length)
        part.get((lo, hi))
        assert np.array_equal(part.full.reshape(-1)[lo:hi], whole[lo:hi])
        if i == 0 and layout is not None:
            per = layout[0] // files.dtype.itemsize
            touched = (hi - 1) // per - lo // per + 1
            assert part.whole == (touched == len(layout[1]))  # blocks, not the chunk
    assert np.array_equal(part.get(), files.read(key))


def test_a_patched_chunk_decoded_block_by_block_keeps_its_patch(tmp_path):
    """Cells patched in decoded blocks survive the rest being decoded, and a write that
    cannot splice (a bit shuffle's last, shorter block) writes the patched chunk whole."""
    import zarr

    rng = np.random.default_rng(3)
    x = rng.normal(600, 30, size=(1200, 513)).round() / 1.7
    zarr.create_array(tmp_path / "a.zarr", shape=x.shape, chunks=(1001, 513), dtype="float64",
                      compressors=[zarr.codecs.BloscCodec(cname="lz4", clevel=5,
                                                          shuffle="bitshuffle")])
    zarr.open_array(tmp_path / "a.zarr", mode="r+")[:] = x
    files = chunkstore.ChunkFiles.open(tmp_path / "a.zarr")
    base = tmp_path / "base"
    base.write_bytes(files.file((0, 0)).read_bytes())
    part = files.part((0, 0))
    span = (996 * 513, 1001 * 513)
    part.get(span)[996:1001, 250:260] = 0.0
    assert not part.whole
    y = x.copy()
    y[996:1001, 250:260] = 0.0
    assert files.chunk_codec.spliced(base.read_bytes(), part.array, span) is None  # encoded whole
    files.write((0, 0), part.array, level=1, base=base, span=span, whole=part.get)
    assert part.whole
    assert np.array_equal(arrays.read_array(tmp_path / "a.zarr"), y)


def test_a_chunk_stored_raw_is_not_spliced_but_written_whole(tmp_path):
    x = np.arange(2000.0).reshape(40, 50)
    arrays.write_array(tmp_path / "a.zarr", x, (20, 50))
    files = chunkstore.ChunkFiles.open(tmp_path / "a.zarr")
    files.write((0, 0), x[:20], level=0)  # now raw (Blosc's memcpy flag): no blocks
    base = tmp_path / "base"
    base.write_bytes(files.file((0, 0)).read_bytes())
    assert files.chunk_codec.spliced(base.read_bytes(), x[:20], (0, 50)) is None
    y = x.copy()
    y[2, 3] = -1.0
    files.write((0, 0), y[:20], base=base, span=(103, 104))
    assert np.array_equal(arrays.read_array(tmp_path / "a.zarr"), y)


@pytest.mark.parametrize("shuffle", ["shuffle", "bitshuffle"])
def test_a_patch_of_a_calibrated_image_is_spliced_not_encoded_whole(tmp_path, shuffle):
    """On image-like data a patch inside a chunk is spliced (one block compressed again),
    the last, shorter block too after a byte shuffle; the result reads back right."""
    import zarr

    rng = np.random.default_rng(11)
    x = (rng.normal(600, 30, size=(1200, 513)).round() / 1.7)
    zarr.create_array(tmp_path / "a.zarr", shape=x.shape, chunks=(1001, 513), dtype="float64",
                      compressors=[zarr.codecs.BloscCodec(cname="lz4", clevel=5,
                                                          shuffle=shuffle)])
    zarr.open_array(tmp_path / "a.zarr", mode="r+")[:] = x
    files = chunkstore.ChunkFiles.open(tmp_path / "a.zarr")
    frame = files.file((0, 0)).read_bytes()
    for lo, hi, spliced in [(500, 510, True), (996, 1001, shuffle == "shuffle")]:
        y = x.copy()
        y[lo:hi, 250:260] = 0.0
        block = np.ascontiguousarray(y[:1001])
        parts = files.chunk_codec.spliced(frame, block, (lo * 513, hi * 513))
        assert (parts is not None) == spliced, (lo, hi)
        if parts is not None:
            out = np.empty(files.chunks)
            files.codec.decode(b"".join(bytes(p) for p in parts), out=out)
            assert np.array_equal(out, block)


def test_a_chunk_write_that_fails_leaves_the_old_chunk_and_no_stray_file(tmp_path, monkeypatch):
    """A write that fails midway (a full disk) leaves the chunk file as it was and no
    temporary file beside it."""
    import builtins

    x = np.arange(40.0).reshape(4, 10)
    arrays.write_array(tmp_path / "a.zarr", x, (2, 10))
    files = chunkstore.ChunkFiles.open(tmp_path / "a.zarr")
    before = files.file((0, 0)).read_bytes()
    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, part):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(builtins, "open", lambda p, mode="r", *a, **k: (
        Full(real_open(p, mode, *a, **k)) if "w" in mode else real_open(p, mode, *a, **k)))
    with pytest.raises(OSError, match="No space"):
        files.write((0, 0), -x[:2], level=0)
    monkeypatch.undo()
    assert files.file((0, 0)).read_bytes() == before
    assert sorted(p.name for p in files.file((0, 0)).parent.iterdir()) == ["0"]


def test_large_blocks_of_many_chunks_are_read_and_written_on_threads_alike(tmp_path,
                                                                           monkeypatch):
    import threading

    x = np.random.default_rng(8).normal(size=(40, 30))
    arrays.create_array(tmp_path / "z.zarr", x.shape, x.dtype, (10, 8))
    arrays.write_block(tmp_path / "z.zarr", Box.full(x.shape), x)  # small: in turn
    monkeypatch.setattr(pools, "PARALLEL_BYTES", 0)  # every block of many chunks: threads
    arrays.create_array(tmp_path / "t.zarr", x.shape, x.dtype, (10, 8))
    arrays.write_block(tmp_path / "t.zarr", Box.full(x.shape), x)
    files = arrays.direct_files(tmp_path / "t.zarr")
    for k in files.keys():
        assert (files.file(k).read_bytes()
                == arrays.chunk_file(tmp_path / "z.zarr", k).read_bytes())
    for box in (Box.full(x.shape), Box((3, 5), (37, 29))):
        assert np.array_equal(arrays.read_box(tmp_path / "t.zarr", box), x[box.slices])
    seen, ended = [], []

    def fn(k):
        seen.append(threading.current_thread().name)
        if k == 2:
            raise ValueError("chunk 2 is bad")
        ended.append(k)

    with pytest.raises(ValueError, match="chunk 2 is bad"):
        pools.each(fn, list(range(6)), 1 << 30)
    assert sorted(ended) == [0, 1, 3, 4, 5]  # the others ran to the end
    assert all(n.startswith("subzero-chunks") for n in seen)


def test_a_noisy_block_cut_into_column_chunks_is_stored_raw_chunk_by_chunk(tmp_path):
    """A global operator's whole noisy array, chunked across its columns: each chunk is a
    view of the block, judged and stored raw like a task's own chunk."""
    rng = np.random.default_rng(9)
    x = 1000 + 30 * rng.standard_normal((1200, 1400))
    arrays.create_array(tmp_path / "n.zarr", x.shape, x.dtype, (1200, 700))
    arrays.write_block(tmp_path / "n.zarr", Box.full(x.shape), x)
    files = arrays.direct_files(tmp_path / "n.zarr")
    assert files.keys() == [(0, 0), (0, 1)]
    for k in files.keys():
        got = files.file(k).read_bytes()
        # raw, memcpyed, then its checksum
        assert got[2] & 0x02 and len(got) == 16 + 1200 * 700 * 8 + codec.CHECKSUM
    assert np.array_equal(arrays.read_box(tmp_path / "n.zarr", Box.full(x.shape)), x)


def test_chunk_threads_never_wait_on_their_own_pool(monkeypatch):
    """each() called from a chunk thread runs in turn: with every pool thread waiting on
    work queued behind it, it would wait forever."""
    import threading

    monkeypatch.setattr(pools, "PARALLEL_BYTES", 0)
    done = []

    def inner(k):
        done.append(k)

    def outer(k):
        pools.each(inner, [(k, j) for j in range(3)], 1 << 30)

    t = threading.Thread(target=pools.each, args=(outer, list(range(8)), 1 << 30),
                         daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive() and sorted(done) == [(k, j) for k in range(8) for j in range(3)]


@pytest.mark.parametrize("dtype", ["bool", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
                                   "f2", "f4", "f8"])
@pytest.mark.parametrize("shape, chunks", [((7, 5), (3, 5)), ((), ()), ((10,), (4,)),
                                           ((3, 4, 5), (2, 2, 5))])
def test_numeric_arrays_are_created_with_the_metadata_zarr_writes(tmp_path, dtype, shape,
                                                                  chunks):
    """create_array writes a numeric array's zarr.json itself (no zarr import): the very
    bytes zarr writes for the same arguments, and zarr reads and writes the array."""
    import zarr

    mine, theirs = tmp_path / "a.zarr", tmp_path / "b.zarr"
    arrays.create_array(mine, shape, dtype, chunks)
    zarr.create_array(
        store=str(theirs), shape=shape, chunks=chunks, dtype=np.dtype(dtype), fill_value=0,
        overwrite=False, config={"write_empty_chunks": True},
        compressors=[zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle=arrays.SHUFFLE),
                     zarr.codecs.Crc32cCodec()],
        attributes={arrays.ALL_CHUNKS: True})
    assert (mine / "zarr.json").read_bytes() == (theirs / "zarr.json").read_bytes()
    assert sorted(p.name for p in mine.iterdir()) == ["zarr.json"]  # no temporary left
    x = (np.arange(int(np.prod(shape))).reshape(shape) % 3).astype(dtype)
    arrays.write_block(mine, Box.full(shape), x)
    assert np.array_equal(zarr.open_array(str(mine))[...], x)
    with pytest.raises(StoreError, match="already exists"):
        arrays.create_array(mine, shape, dtype, chunks)


def test_creating_a_numeric_array_needs_no_zarr(tmp_path):
    code = ("import sys; from subzero.engine import arrays; "
            f"arrays.create_array({str(tmp_path / 'a.zarr')!r}, (4, 3), 'f8', (2, 3)); "
            "print('zarr' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False"]


@pytest.mark.parametrize("dtype", ["U5", "c16", ">f8"])
def test_other_arrays_are_created_by_zarr(tmp_path, dtype):
    assert arrays.array_metadata((4,), np.dtype(dtype), (2,)) is None
    arrays.create_array(tmp_path / "t.zarr", (4,), dtype, (2,))
    assert arrays.open_array(tmp_path / "t.zarr").shape == (4,)
