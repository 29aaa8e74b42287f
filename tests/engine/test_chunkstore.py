"""Chunk stores (subzero.engine.chunkstore): a conformance suite every store passes against
a dict model, and what the local store adds (atomic writes, leftovers, memory-mapped
frames)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subzero.engine.chunkstore import ChunkStore, LocalChunkStore, chunk_file
from subzero.engine.codec import ChecksumError, checksum

KEYS = st.tuples(st.integers(0, 3), st.integers(0, 2))
DATA = st.binary(min_size=0, max_size=64)


class ChunkStoreTests:
    """What every :class:`ChunkStore` does; a subclass gives ``make_store(tmp_path)``."""

    def make_store(self, root: Path) -> ChunkStore:
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path) -> ChunkStore:
        return self.make_store(tmp_path / "a.zarr")

    def test_a_chunk_reads_back_as_written_from_its_parts(self, store):
        store.write((0, 1), [b"abc", memoryview(b"def"), np.arange(2, dtype="<u2")])
        assert store.read((0, 1)) == b"abcdef\x00\x00\x01\x00"

    def test_a_range_is_the_bytes_between_its_ends(self, store):
        store.write((2, 0), [bytes(range(100))])
        assert store.read_range((2, 0), 10, 14) == bytes([10, 11, 12, 13])
        assert store.read_range((2, 0), 95, 200) == bytes(range(95, 100))  # the file ends
        assert store.read_range((2, 0), 5, 5) == b""

    def test_a_write_replaces_the_chunk_whole(self, store):
        store.write((1, 1), [b"a much longer old chunk"])
        store.write((1, 1), [b"new"])
        assert store.read((1, 1)) == b"new"

    def test_a_missing_chunk_is_not_found(self, store):
        with pytest.raises(FileNotFoundError):
            store.read((9, 9))
        with pytest.raises(FileNotFoundError):
            store.read_range((9, 9), 0, 4)
        with pytest.raises(FileNotFoundError):
            store.frame((9, 9), crc=True)

    def test_listing_and_deleting(self, store):
        assert store.list_keys() == []
        for k in [(1, 0), (0, 2), (0, 0)]:
            store.write(k, [b"x"])
        assert store.list_keys() == [(0, 0), (0, 2), (1, 0)]
        store.delete((0, 2))
        store.delete((5, 5))  # not stored: nothing
        assert store.list_keys() == [(0, 0), (1, 0)]
        with pytest.raises(FileNotFoundError):
            store.read((0, 2))

    def test_a_frame_is_the_file_without_its_checked_checksum(self, store):
        frame = b"a blosc frame's bytes"
        store.write((0, 0), [frame, checksum([frame])])
        assert bytes(store.frame((0, 0), crc=True)) == frame
        assert bytes(store.frame((0, 0), crc=False)) == frame + checksum([frame])
        store.write((0, 1), [b"X" + frame[1:], checksum([frame])])
        with pytest.raises(ChecksumError, match="do not match"):
            store.frame((0, 1), crc=True)
        store.write((0, 2), [b""])
        assert store.frame((0, 2), crc=True) is None

    def test_a_direct_write_is_a_write(self, store):
        fut = store.write_direct((3, 0), [b"abc"])
        if fut is not None:
            fut.result()
        assert store.read((3, 0)) == b"abc"

    @settings(max_examples=25, deadline=None)
    @given(ops=st.lists(st.one_of(st.tuples(st.just("write"), KEYS, DATA),
                                  st.tuples(st.just("delete"), KEYS, st.just(b""))),
                        max_size=20))
    def test_the_store_behaves_as_a_dict(self, tmp_path_factory, ops):
        store = self.make_store(tmp_path_factory.mktemp("model") / "a.zarr")
        model: dict = {}
        for op, key, data in ops:
            if op == "write":
                store.write(key, [data[:3], data[3:]])
                model[key] = data
            else:
                store.delete(key)
                model.pop(key, None)
            assert store.list_keys() == sorted(model)
        for key, data in model.items():
            assert store.read(key) == data
            assert store.read_range(key, 1, 5) == data[1:5]


class TestLocalChunkStore(ChunkStoreTests):
    def make_store(self, root: Path) -> ChunkStore:
        return LocalChunkStore(root)

    def test_chunks_are_where_zarr_keeps_them(self, store):
        store.write((2, 1), [b"x"])
        assert chunk_file(store.root, (2, 1)) == store.root / "c" / "2" / "1"
        assert (store.root / "c" / "2" / "1").read_bytes() == b"x"

    def test_no_partial_chunk_is_ever_visible(self, store, monkeypatch):
        """Until the rename, the chunk is the old one and the temporary holds the whole new
        one; after it, the chunk is the new one."""
        store.write((0, 0), [b"old"])
        seen = []
        real = os.replace

        def spy(src, dst):
            seen.append((Path(dst).read_bytes(), Path(src).read_bytes()))
            real(src, dst)

        monkeypatch.setattr(os, "replace", spy)
        store.write((0, 0), [b"new ", b"chunk"])
        assert seen == [(b"old", b"new chunk")]
        assert store.read((0, 0)) == b"new chunk"

    def test_a_failed_write_leaves_the_old_chunk_and_no_temporary(self, store):
        store.write((0, 0), [b"old"])

        class Broken:
            def __buffer__(self, flags):
                raise OSError(28, "No space left on device")

        with pytest.raises((OSError, TypeError)):
            store.write((0, 0), [b"half of it", Broken()])
        assert store.read((0, 0)) == b"old"
        assert sorted(p.name for p in (store.root / "c" / "0").iterdir()) == ["0"]

    def test_a_writer_killed_before_the_rename_leaves_the_old_chunk(self, store):
        store.write((1, 0), [b"old"])
        code = ("import os, sys; from pathlib import Path; "
                "from subzero.engine.chunkstore import LocalChunkStore; "
                "os.replace = lambda a, b: os._exit(3); "
                "LocalChunkStore(Path(sys.argv[1])).write((1, 0), [b'new chunk'])")
        p = subprocess.run([sys.executable, "-c", code, str(store.root)])
        assert p.returncode == 3
        assert store.read((1, 0)) == b"old"
        assert store.list_keys() == [(1, 0)]  # the temporary is no chunk
        assert store.remove_leftovers() == 1
        assert sorted(p.name for p in (store.root / "c" / "1").iterdir()) == ["0"]

    def test_a_frame_is_memory_mapped(self, store):
        import mmap

        frame = b"0123456789"
        store.write((0, 0), [frame, checksum([frame])])
        got = store.frame((0, 0), crc=True)
        try:
            assert isinstance(got, mmap.mmap) and bytes(got) == frame
        finally:
            got.close()
