"""Object storage (subzero.engine.objectstore) against moto's S3 server on 127.0.0.1: the
objects API and its request counts, the chunk store conformance suite and the local
layout mirrored, arrays read and written through ChunkFiles, shards uploaded and fetched
into a cache, and the one-line errors of a wrong endpoint, bucket or credentials."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from encoders.lookup import open_shard
from encoders.store import shard_checksum
from subzero.cells import Box
from subzero.engine.arrays import array_metadata, write_array
from subzero.engine.chunkstore import ChunkStore, LocalChunkStore
from subzero.engine.objectstore import (
    PART_BYTES, ObjectStore, S3ChunkStore, ShardCache, open_files, parse_digest, parse_url,
    upload_shard)
from subzero.errors import DamagedError, StoreError
from tests.encoders.conformance import write_shard
from tests.encoders.test_layouts import per_pixel_box
from tests.engine.test_chunkstore import DATA, KEYS, ChunkStoreTests

BUCKET = "subzero-objects"


@pytest.fixture(scope="module")
def bucket(s3_server):
    return s3_server.make_bucket(BUCKET)


def fresh_store(server, bucket: str) -> ObjectStore:
    """A store under a prefix of its own (tests share the bucket)."""
    return ObjectStore(server.url(bucket, f"t/{uuid.uuid4().hex[:12]}"), env=server.env)


@pytest.fixture
def objects(s3_server, bucket):
    return fresh_store(s3_server, bucket)


def one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert text and "\n" not in text, text
    return text


# -- objects --------------------------------------------------------------------------------
def test_objects_round_trip_and_every_request_is_counted(objects):
    objects.put("a/b", b"hello world")
    objects.put("a/c/d", memoryview(b"xyz"))
    objects.put("ab", b"")
    assert objects.get("a/b") == b"hello world"
    assert objects.get_range("a/b", 6, 11) == b"world"
    assert objects.get_range("a/b", 6, 100) == b"world"  # the object ends
    assert objects.get_range("a/b", 50, 60) == b"" == objects.get_range("ab", 0, 4)
    assert objects.list() == ["a/b", "a/c/d", "ab"]
    assert objects.list("a") == ["a/b", "a/c/d"]  # a folder: not "ab"
    assert objects.exists("ab") and not objects.exists("a")
    assert objects.stats.snapshot() == {
        "requests": {"GET": 1, "HEAD": 2, "LIST": 2, "PUT": 3, "RANGE": 4},
        "bytes_up": 14, "bytes_down": 21}
    assert objects.delete_prefix("a") == 2
    objects.delete("ab")
    objects.delete("never-there")
    assert objects.list() == []


def test_a_missing_object_is_not_found(objects, tmp_path):
    for call in (lambda: objects.get("nope"), lambda: objects.get_range("nope", 0, 4),
                 lambda: objects.get_range("nope", 3, 3),
                 lambda: objects.get_file("nope", tmp_path / "f")):
        with pytest.raises(FileNotFoundError):
            call()
    assert list(tmp_path.iterdir()) == []  # no file, no temporary


def test_a_large_file_goes_up_in_parts_and_comes_down_whole(objects, tmp_path):
    src = tmp_path / "big"
    data = np.random.default_rng(1).integers(0, 256, PART_BYTES + 1000, np.uint8).tobytes()
    src.write_bytes(data)
    assert objects.put_file("big", src) == len(data)
    assert objects.stats.snapshot()["requests"] == {"POST": 2, "PUT": 2}
    dst = tmp_path / "out" / "big"
    dst.parent.mkdir()
    dst.write_bytes(b"old")
    assert objects.get_file("big", dst) == len(data)
    assert dst.read_bytes() == data
    assert [p.name for p in dst.parent.iterdir()] == ["big"]
    assert objects.stats.bytes_up == objects.stats.bytes_down == len(data)


def test_a_store_pickles_without_its_client_and_never_shows_the_secret(
        s3_server, bucket):
    store = fresh_store(s3_server, bucket)
    store.put("k", b"v")
    again = pickle.loads(pickle.dumps(store))
    assert again.get("k") == b"v" and again.stats.requests == 1
    assert s3_server.secret not in repr(store)


def test_urls_and_digests_are_parsed_with_the_bad_value_named():
    assert parse_url("s3://bkt/a/b/") == ("bkt", "a/b")
    for bad in ("/local/home", "s3:///x", "gs://bkt/x", "s3://B_ad/x"):
        with pytest.raises(StoreError, match="s3://bucket/prefix|not an S3 bucket"):
            parse_url(bad)
    for bad in ("crc32:", "md5:x=00000000", "crc32:../x=00000000", "crc32:a=xyz"):
        with pytest.raises(StoreError, match="Got|got"):
            parse_digest(bad)


# -- chunk stores ---------------------------------------------------------------------------
class TestS3ChunkStore(ChunkStoreTests):
    """The chunk store conformance suite (tests/engine/test_chunkstore.py) over S3."""

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _server(cls, s3_server, bucket):
        cls.server = s3_server

    def make_store(self, root: Path) -> ChunkStore:
        return S3ChunkStore(fresh_store(self.server, BUCKET), root.name)

    # the suite's property test again, as a function of this class's own: Hypothesis
    # refuses one test function run by two classes (its differing_executors check)
    @settings(max_examples=25, deadline=None)
    @given(ops=st.lists(st.one_of(st.tuples(st.just("write"), KEYS, DATA),
                                  st.tuples(st.just("delete"), KEYS, st.just(b""))),
                        max_size=20))
    def test_the_store_behaves_as_a_dict(self, tmp_path_factory, ops):
        ChunkStoreTests.test_the_store_behaves_as_a_dict.hypothesis.inner_test(
            self, tmp_path_factory, ops)


@pytest.fixture(params=["local", "s3"])
def any_store(request, tmp_path, s3_server, bucket):
    if request.param == "local":
        return LocalChunkStore(tmp_path / "a.zarr")
    return S3ChunkStore(fresh_store(s3_server, bucket), "runs/r1/a.zarr")


def test_an_empty_chunk_is_stored_and_read_as_empty(any_store):
    any_store.write((0, 0), [b""])
    assert any_store.read((0, 0)) == b"" == any_store.read_range((0, 0), 0, 10)
    assert any_store.list_keys() == [(0, 0)]


def test_a_write_failing_midway_leaves_the_old_chunk(any_store):
    any_store.write((1, 2), [b"old"])

    class Broken:
        def __buffer__(self, flags):
            raise OSError(28, "No space left on device")

    with pytest.raises((OSError, TypeError)):
        any_store.write((1, 2), [b"half of it", Broken()])
    assert any_store.read((1, 2)) == b"old"
    assert any_store.list_keys() == [(1, 2)]


def test_a_0d_arrays_one_chunk_is_listed(any_store):
    any_store.write((), [b"scalar"])
    assert any_store.list_keys() == [()]
    assert any_store.read(()) == b"scalar"


def test_a_range_read_moves_fewer_bytes_than_a_whole_read(objects):
    store = S3ChunkStore(objects, "a.zarr")
    store.write((0,), [bytes(4096)])
    objects.stats.reset()
    assert len(store.read_range((0,), 100, 164)) == 64
    ranged = objects.stats.bytes_down
    store.read((0,))
    assert ranged == 64 and objects.stats.bytes_down - ranged == 4096
    assert objects.stats.snapshot()["requests"] == {"GET": 1, "RANGE": 1}


#: the chunks of an array of 1 to 3 dimensions: contents by chunk key
ND_CHUNKS = st.integers(1, 3).flatmap(lambda n: st.dictionaries(
    st.tuples(*[st.integers(0, 12)] * n), st.binary(max_size=40), max_size=8))


@settings(max_examples=15, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(chunks=ND_CHUNKS)
def test_the_objects_mirror_the_local_files(
        s3_server, bucket, tmp_path_factory, chunks):
    root = tmp_path_factory.mktemp("mirror") / "x.zarr"
    local = LocalChunkStore(root)
    objects = fresh_store(s3_server, bucket)
    remote = S3ChunkStore(objects, "x.zarr")
    for key, data in chunks.items():
        local.write(key, [data])
        remote.write(key, [data])
    files = sorted(p.relative_to(root.parent).as_posix() for p in root.rglob("*")
                   if p.is_file())
    assert objects.list() == files
    assert remote.list_keys() == local.list_keys() == sorted(chunks)
    for key in chunks:
        assert remote.read(key) == local.read(key)


# -- arrays ---------------------------------------------------------------------------------
def test_chunk_files_over_s3_write_and_read_an_array_as_zarr_does(objects, tmp_path):
    data = np.random.default_rng(0).normal(size=(10, 7))
    chunks = (4, 3)
    root = "runs/r1/x.zarr"
    objects.put(f"{root}/zarr.json", json.dumps(array_metadata(data.shape, data.dtype, chunks)
                                                ).encode())
    files = open_files(objects, root)
    assert files is not None and files.shape == data.shape and files.crc
    for key in files.keys():  # (ChunkFiles.keys: the chunk grid)
        files.write(key, data[files.box(key).slices])
    local = tmp_path / "x.zarr"
    write_array(local, data, chunks)  # the same array on the local file system
    keys = LocalChunkStore(local).list_keys()
    assert files.store.list_keys() == keys and len(keys) == 9
    for key in keys:
        assert files.store.read(key) == LocalChunkStore(local).read(key)  # zarr's bytes
    again = open_files(objects, root)  # a reader of its own
    assert np.array_equal(again.read_box(Box.full(data.shape)), data)
    for lo, hi in [((0, 0), (1, 1)), ((3, 2), (9, 7)), ((4, 3), (8, 6))]:
        assert np.array_equal(again.read_box(Box(lo, hi)), data[lo[0]:hi[0], lo[1]:hi[1]])


def test_a_few_cells_of_a_chunk_are_read_by_range(objects):
    """A box needing a small part of a chunk moves its Blosc header and the blocks holding
    it, not the chunk; the values are the array's."""
    data = np.round(np.random.default_rng(1).normal(size=(512, 512)), 1)  # compresses
    root = "runs/r1/big.zarr"
    doc = array_metadata(data.shape, data.dtype, data.shape)
    doc["codecs"][-2]["configuration"]["blocksize"] = 1 << 14  # many blocks per chunk
    objects.put(f"{root}/zarr.json", json.dumps(doc).encode())
    files = open_files(objects, root)
    (key,) = files.keys()
    files.write(key, data)
    whole = len(objects.get(files.store.name(key)))
    reader = open_files(objects, root)
    objects.stats.reset()
    got = reader.read_box(Box((100, 10), (102, 30)))
    assert np.array_equal(got, data[100:102, 10:30])
    moved = objects.stats.snapshot()
    assert moved["bytes_down"] < whole / 4, (moved, whole)
    assert moved["requests"]["RANGE"] >= 2
    # the rest of the chunk, asked for later, decodes as the array's values too
    assert np.array_equal(reader.read_box(Box((0, 0), (512, 512))), data)


def test_a_missing_or_damaged_chunk_in_s3_is_named(objects):
    root = "y.zarr"
    objects.put(f"{root}/zarr.json", json.dumps(array_metadata((4,), np.dtype("i4"), (2,))
                                                ).encode())
    files = open_files(objects, root)
    files.write((0,), np.arange(2, dtype="i4"))
    with pytest.raises(DamagedError, match=r"array 'y' chunk 1 is missing") as e:
        files.read((1,))
    one_line(e)
    good = objects.get(f"{root}/c/0")
    objects.put(f"{root}/c/0", bytes([good[0] ^ 1]) + good[1:])
    with pytest.raises(DamagedError, match=r"array 'y' chunk 0 cannot be read.*checksum"):
        files.read((0,))


# -- shards ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """A real published shard: a 3x3 box stencil's lineage on a 12x12 array."""
    shape = (12, 12)
    st_ = write_shard(tmp_path_factory.mktemp("home"), "full-one-bwd",
                      per_pixel_box(shape, 1), shape, [shape])
    return Path(st_["path"]), st_["checksum"]


def lineage(path: Path) -> list[list[int]]:
    cells = np.array([0, 13, 77, 143], np.uint64)
    with open_shard(path) as r:
        return [sorted(r.backward(cells[i:i + 1], 0).tolist()) for i in range(len(cells))] + [
            sorted(r.forward(cells, 0).tolist())]


def test_a_shard_uploaded_and_fetched_reads_the_same_lineage(objects, shard, tmp_path):
    local, digest = shard
    desc = upload_shard(objects, local, "runs/r1/lineage/op/s/0.0/a1")
    assert desc["checksum"] == digest == shard_checksum(local)
    assert desc["keys"][-1] == "runs/r1/lineage/op/s/0.0/a1/meta.json"  # last: complete
    assert desc["files"] == {p.name: p.stat().st_size for p in local.iterdir()}
    assert objects.list("runs/r1/lineage/op/s/0.0/a1") == sorted(desc["keys"])
    objects.stats.reset()
    cache = ShardCache(tmp_path / "cache")
    got = cache.fetch(objects, desc["prefix"], digest)
    assert objects.stats.bytes_down == desc["bytes"]
    assert got.parent == cache.root and list(cache) == [got]
    assert lineage(got) == lineage(local)
    assert lineage(got)[0] == [0, 1, 12, 13]  # cell 0's 2x2 corner of the stencil
    objects.stats.reset()
    assert cache.fetch(objects, desc["prefix"], digest) == got
    assert ShardCache(tmp_path / "cache").fetch(objects, desc["prefix"], digest) == got
    assert objects.stats.requests == 0  # cached: nothing downloaded


@pytest.mark.parametrize("damage", ["tampered", "missing"])
def test_a_damaged_shard_is_one_line_and_leaves_nothing_cached(objects, shard, tmp_path,
                                                              damage):
    local, digest = shard
    desc = upload_shard(objects, local, "lin/a2")
    if damage == "tampered":
        data = bytearray(objects.get("lin/a2/data.mdb"))
        data[len(data) // 2] ^= 0xFF
        objects.put("lin/a2/data.mdb", bytes(data))
        want = r"lin/a2/ is damaged: file data.mdb does not match its checksum"
    else:
        objects.delete("lin/a2/meta.json")
        want = r"lin/a2/ is damaged: file meta.json missing"
    cache = ShardCache(tmp_path / "cache")
    with pytest.raises(DamagedError, match=want) as e:
        cache.fetch(objects, desc["prefix"], digest)
    assert "subzero verify" in one_line(e)
    assert list((tmp_path / "cache").iterdir()) == []


def test_threads_fetching_one_shard_download_it_once(objects, shard, tmp_path):
    local, digest = shard
    desc = upload_shard(objects, local, "lin/a3")
    objects.stats.reset()
    cache = ShardCache(tmp_path / "cache")
    got: list[Path] = []
    threads = [threading.Thread(target=lambda: got.append(
        cache.fetch(objects, desc["prefix"], digest))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and len(got) == 4
    assert objects.stats.snapshot()["requests"] == {"GET": len(desc["files"])}


_FETCH = ("import sys; from subzero.engine.objectstore import ObjectStore, ShardCache; "
          "print(ShardCache(sys.argv[2]).fetch(ObjectStore(sys.argv[1]), sys.argv[3], "
          "sys.argv[4]))")


def test_two_processes_fetching_one_shard_both_succeed(
        s3_server, objects, shard, tmp_path):
    local, digest = shard
    desc = upload_shard(objects, local, "lin/a4")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
           **s3_server.env}
    cache = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-c", _FETCH, objects.url, str(cache),
                               desc["prefix"], digest], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1
    assert [p.name for p in cache.iterdir()] == [Path(paths.pop()).name]  # no temporary
    assert lineage(ShardCache(cache).folder(digest)) == lineage(local)


# -- bad input ------------------------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_endpoint_is_one_line_within_seconds(s3_server, bucket):
    port = _closed_port()
    env = dict(s3_server.env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    store = ObjectStore(s3_server.url(bucket, "h"), env=env)
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=rf"cannot reach the object store at "
                                         rf"http://127.0.0.1:{port} for s3://{bucket}/h") as e:
        store.check()
    assert time.monotonic() - t0 < 10
    one_line(e)
    with pytest.raises(StoreError, match="cannot reach"):
        store.get("x")  # a request, not only the check, says so
    assert time.monotonic() - t0 < 10


def test_an_endpoint_that_never_answers_is_one_line_within_seconds(s3_server, bucket):
    with socket.socket() as silent:  # accepts connections (the backlog), answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        env = dict(s3_server.env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{silent.getsockname()[1]}")
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="cannot reach the object store") as e:
            ObjectStore(s3_server.url(bucket, "h"), env=env).check()
        assert time.monotonic() - t0 < 10
    one_line(e)


def test_a_missing_bucket_is_one_line(s3_server):
    store = ObjectStore(s3_server.url("no-such-bucket", "h"), env=s3_server.env)
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=rf"bucket 'no-such-bucket' does not exist at "
                                         rf"{s3_server.endpoint} \(s3://no-such-bucket/h\)") as e:
        store.check()
    assert time.monotonic() - t0 < 10
    one_line(e)
    with pytest.raises(StoreError, match="does not exist"):
        store.list()


@pytest.mark.parametrize("wrong", ["secret", "key"])
def test_wrong_credentials_are_one_line_without_the_secret(s3_auth_server, wrong):
    server = s3_auth_server
    bucket = server.make_bucket("guarded")
    ObjectStore(server.url(bucket, "h"), env=server.env).check()  # the right ones pass
    env = dict(server.env, AWS_SECRET_ACCESS_KEY="not-the-secret-at-all") if wrong == "secret" \
        else dict(server.env, AWS_ACCESS_KEY_ID="AKIAUNKNOWNKEY000000")
    store = ObjectStore(server.url(bucket, "h"), env=env)
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=rf"at {server.endpoint} refused the credentials for "
                                         rf"s3://{bucket}/h") as e:
        store.check()
    assert time.monotonic() - t0 < 10
    text = one_line(e)
    assert ("SignatureDoesNotMatch" if wrong == "secret" else "InvalidAccessKeyId") in text
    assert env["AWS_SECRET_ACCESS_KEY"] not in text and server.secret not in text
    with pytest.raises(StoreError, match="refused the credentials"):
        store.put("x", b"y")


def test_plain_http_needs_aws_allow_http(s3_server, bucket):
    env = {k: v for k, v in s3_server.env.items() if k != "AWS_ALLOW_HTTP"}
    with pytest.raises(StoreError, match=r"plain http; set AWS_ALLOW_HTTP=true"):
        ObjectStore(s3_server.url(bucket), env=env)


def test_the_loser_of_a_publishing_race_drops_its_copy(objects, shard, tmp_path, monkeypatch):
    """Another process (here, another cache on the same folder) publishes the shard
    between this fetch's download and its rename: the rename fails, this copy is dropped,
    the other one is used."""
    from subzero.engine import objectstore

    local, digest = shard
    desc = upload_shard(objects, local, "lin/a5")
    real = objectstore.check_shard_files

    def meanwhile(path, checksum):
        monkeypatch.setattr(objectstore, "check_shard_files", real)
        other = ShardCache(tmp_path / "cache").fetch(objects, desc["prefix"], digest)
        (other / "winner").touch()  # to tell the copies apart
        return real(path, checksum)

    monkeypatch.setattr(objectstore, "check_shard_files", meanwhile)
    got = ShardCache(tmp_path / "cache").fetch(objects, desc["prefix"], digest)
    assert (got / "winner").exists()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [got.name]


def test_importing_the_engine_needs_no_obstore():
    code = ("import sys, subzero.engine, subzero.engine.chunkstore, "
            "subzero.engine.objectstore; print('obstore' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "False"
