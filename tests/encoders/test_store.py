"""Publishing shards: atomic, replaced on retry, nothing left by a killed or failing writer."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lmdb
import numpy as np
import pytest

from encoders import store
from encoders.lookup import open_shard
from subzero.cells import Ragged
from subzero.lineage import PairBatch
from subzero.testing import brute_backward, brute_forward
from tests.encoders.conformance import brute_payload, read_payload, to_format1, write_shard

ROOT = Path(__file__).resolve().parents[2]


def stencil_pairs(n: int, shift: int = 0) -> PairBatch:
    """Cell k of a 1-d array of n depends on cells k and k+1 (+ shift, clipped)."""
    cells = np.arange(n, dtype=np.uint64)
    ins = [np.unique(np.minimum([k + shift, k + 1 + shift], n - 1)) for k in range(n)]
    return PairBatch(Ragged.from_singletons(cells), ins=(Ragged.from_rows(ins),))


def strategy_dir(home) -> Path:
    return Path(home) / "runs" / "r1" / "lineage" / "op" / "full-one-bwd"


def test_retried_task_replaces_the_earlier_shard(tmp_path):
    first = write_shard(tmp_path, "full-one-bwd", stencil_pairs(50), (50,), [(50,)])
    again = write_shard(tmp_path, "full-one-bwd", stencil_pairs(50, shift=3), (50,), [(50,)],
                        attempt=1)
    assert first["path"] == again["path"] and again["attempt"] == 1
    assert sorted(p.name for p in strategy_dir(tmp_path).iterdir()) == ["0"]
    with open_shard(again["path"]) as r:
        assert r.meta["attempt"] == 1
        assert r.backward(np.array([0], np.uint64), 0).tolist() == [3, 4]


@pytest.mark.parametrize("strategy", ["full-one-bwd", "full-many-bwd"])
def test_a_shard_records_its_files_and_the_checksum_of_what_it_published(tmp_path, strategy):
    """The checksum a writer records (meta.json's CRC from the bytes it wrote, the others'
    read back) is the published directory's; meta.json lists every other file's size."""
    stats = write_shard(tmp_path, strategy, stencil_pairs(300), (300,), [(300,)])
    path = Path(stats["path"])
    assert stats["checksum"] == store.shard_checksum(path)
    assert store.check_shard_files(path, stats["checksum"]) is None
    meta = json.loads((path / "meta.json").read_text())
    on_disk = {f.name: f.stat().st_size for f in path.iterdir() if f.name != "meta.json"}
    assert meta["files"] == on_disk and "data.mdb" in on_disk
    assert stats["data_bytes"] == on_disk["data.mdb"]
    assert stats["index_bytes"] == sum(n for f, n in on_disk.items() if f.startswith("rtree_"))
    assert (stats["index_bytes"] > 0) == (strategy == "full-many-bwd")


def test_an_earlier_attempt_never_replaces_a_later_one(tmp_path):
    write_shard(tmp_path, "full-one-bwd", stencil_pairs(10, shift=2), (10,), [(10,)],
                attempt=2)
    late = write_shard(tmp_path, "full-one-bwd", stencil_pairs(10), (10,), [(10,)], attempt=1)
    assert late["attempt"] == 2  # the stats of the shard that stayed
    with open_shard(late["path"]) as r:
        assert r.backward(np.array([0], np.uint64), 0).tolist() == [2, 3]
    assert sorted(p.name for p in strategy_dir(tmp_path).iterdir()) == ["0"]


def test_exception_inside_the_transaction_publishes_nothing(tmp_path, monkeypatch):
    def boom(keys):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(store, "_key_bytes", boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_shard(tmp_path, "full-one-bwd", stencil_pairs(20), (20,), [(20,)])
    assert list(strategy_dir(tmp_path).iterdir()) == []  # no shard, no temporary left


def test_map_grows_instead_of_failing(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "_estimate_map", lambda enc: 64 * 1024)
    grew = []
    real_open = lmdb.open

    def spy(path, **kw):
        if not kw.get("readonly"):
            grew.append(kw["map_size"])
        return real_open(path, **kw)

    monkeypatch.setattr(store.lmdb, "open", spy)
    st = write_shard(tmp_path, "full-one-bwd", stencil_pairs(20000), (20000,), [(20000,)])
    assert len(grew) > 1 and grew[-1] > grew[0]
    with open_shard(st["path"]) as r:
        assert r.backward(np.array([19999], np.uint64), 0).tolist() == [19999]


KILLER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    import numpy as np
    from encoders import store
    from tests.encoders.conformance import write_shard
    from tests.encoders.test_store import stencil_pairs
    real = store._key_bytes
    def die(keys):
        out = real(keys)
        os.kill(os.getpid(), signal.SIGKILL)  # in the middle of the write transaction
    store._key_bytes = die
    write_shard({home!r}, "full-one-bwd", stencil_pairs(1000), (1000,), [(1000,)])
""")


def test_writer_killed_mid_write_leaves_nothing_published(tmp_path):
    proc = subprocess.run([sys.executable, "-c", KILLER.format(root=str(ROOT),
                                                               home=str(tmp_path))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = list(strategy_dir(tmp_path).iterdir())
    assert [p.name for p in left if not p.name.startswith(".tmp.")] == []
    assert len(left) == 1  # the dead writer's temporary directory, never read
    # the retried task publishes its shard and clears the dead writer's leftovers
    st = write_shard(tmp_path, "full-one-bwd", stencil_pairs(1000), (1000,), [(1000,)],
                     attempt=1)
    assert sorted(p.name for p in strategy_dir(tmp_path).iterdir()) == ["0"]
    assert json.loads((Path(st["path"]) / "meta.json").read_text())["attempt"] == 1


def test_readers_open_read_only_without_locks(tmp_path):
    st = write_shard(tmp_path, "full-one-bwd", stencil_pairs(30), (30,), [(30,)])
    shard = Path(st["path"])
    assert sorted(p.name for p in shard.iterdir()) == ["data.mdb", "meta.json"]
    os.chmod(shard / "data.mdb", 0o444)
    with open_shard(shard) as r:
        assert r.backward(np.array([5], np.uint64), 0).tolist() == [5, 6]
    assert not (shard / "lock.mdb").exists()


def test_not_a_shard_is_a_one_line_error(tmp_path):
    from subzero.errors import StoreError

    with pytest.raises(StoreError, match="is not a lineage shard"):
        open_shard(tmp_path)


def test_live_writers_temporaries_are_left_alone(tmp_path):
    d = strategy_dir(tmp_path)
    d.mkdir(parents=True)
    live = d / f".tmp.0.0.{store._host()}.{os.getpid()}.abcd1234"  # this process: alive
    dead = d / f".tmp.0.0.{store._host()}.999999999.abcd1234"
    other_host = d / ".tmp.0.0.elsewhere.999999999.abcd1234"
    for p in (live, dead, other_host):
        p.mkdir()
    write_shard(tmp_path, "full-one-bwd", stencil_pairs(5), (5,), [(5,)])
    assert sorted(p.name for p in d.iterdir()) == sorted(["0", live.name, other_host.name])


def test_a_zombie_writer_counts_as_dead_and_its_leftovers_are_swept(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        for _ in range(200):  # exited but not reaped: a zombie
            stat = Path(f"/proc/{child.pid}/stat").read_text()
            if stat.rsplit(")", 1)[-1].split()[0] == "Z":
                break
            time.sleep(0.01)
        assert not store._pid_alive(child.pid)
    finally:
        child.wait()
    assert store._pid_alive(os.getpid())
    strat = tmp_path / "op" / "full-one-bwd"
    (strat / "0.0").mkdir(parents=True)
    (strat / ".tmp.0.1.1.host.99.abc").mkdir()
    (strat / ".tmp.0.1.1.host.99.abc" / "data.mdb").write_bytes(b"half")
    (strat / ".old.0.0.host.98.def").mkdir()
    assert store.remove_unpublished(strat) == 2
    assert [p.name for p in strat.iterdir()] == ["0.0"]
    assert store.remove_unpublished(tmp_path / "missing") == 0


STRATEGIES = ["full-one-bwd", "full-one-fwd", "full-many-bwd", "full-many-fwd", "pay-one-bwd",
              "pay-many-bwd", "comp-one-bwd", "comp-many-bwd"]


def layout_pairs(payload: bool) -> tuple[PairBatch, tuple, list]:
    """Pairs of a 40 x 30 output (and a 20 x 15 second input for full lineage) from a
    fixed seed: overlapping regions, payloads from a small vocabulary."""
    rng = np.random.default_rng(7)
    out_shape, in_shapes = (40, 30), [(40, 30), (20, 15)]
    n = 300

    def regions(size: int, most: int) -> Ragged:
        return Ragged.from_rows([np.unique(rng.integers(0, size, rng.integers(1, most)))
                                 .astype(np.uint64) for _ in range(n)])

    out = regions(1200, 6)
    if not payload:
        return PairBatch(out, ins=tuple(regions(int(np.prod(s)), 9) for s in in_shapes)), \
            out_shape, in_shapes
    vocab = [b"", b"\x01", bytes(range(20))] + [rng.bytes(40) for _ in range(60)]
    pays = [np.frombuffer(vocab[i], np.uint8) for i in rng.integers(0, len(vocab), n)]
    return PairBatch(out, payload=Ragged.from_rows(pays, np.uint8)), out_shape, in_shapes[:1]


def _main_keys(path) -> list[bytes]:
    env = lmdb.open(str(path), readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return list(txn.cursor().iternext(keys=True, values=False))
    finally:
        env.close()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_format1_shards_read_the_same(tmp_path, strategy):
    """A shard written by format 1 (blobs in a named database ``blobs``, as users' stored
    runs hold) reads exactly as the format 2 shard of the same pairs (blobs in the main
    database, a page smaller): every blob, lookup, payload scan and what verify reads."""
    from subzero.engine.verify import read_whole_shard

    payload = strategy.startswith(("pay", "comp"))
    one = "-one-" in strategy  # FullOne/PayOne: a cell index and a record heap blob
    pairs, out_shape, in_shapes = layout_pairs(payload)
    st = write_shard(tmp_path / "home", strategy, pairs, out_shape, in_shapes)
    new, old = Path(st["path"]), tmp_path / "old"
    shutil.copytree(new, old)
    to_format1(old)
    assert json.loads((new / "meta.json").read_text())["format"] == store.FORMAT == 2
    assert json.loads((old / "meta.json").read_text())["format"] == 1
    assert (b"blobs" in _main_keys(old)) == one and b"blobs" not in _main_keys(new)
    assert (b"blob:heap" in _main_keys(new)) == one
    grew = (old / "data.mdb").stat().st_size - (new / "data.mdb").stat().st_size
    assert grew == (4096 if one else 0)

    q_out = [np.arange(1200, dtype=np.uint64), np.arange(0, 1200, 7, dtype=np.uint64),
             np.array([5], np.uint64), np.empty(0, np.uint64)]
    with open_shard(new) as a, open_shard(old) as b:
        assert a.data.blob_names() == b.data.blob_names() == (["heap"] if one else [])
        for name in a.data.blob_names():
            assert a.data.blob(name).tobytes() == b.data.blob(name).tobytes()
            assert len(a.data.blob(name)) == a.meta["heap_bytes"] > 0
        assert len(a.data.blob("missing")) == len(b.data.blob("missing")) == 0
        for r in (a, b):
            if payload:
                for q in q_out:
                    assert read_payload(r.payload_pairs(q)) == brute_payload(pairs, q)
                assert read_payload(r.payload_pairs(None)) == brute_payload(pairs, None)
                continue
            for i, s in enumerate(in_shapes):
                q_in = np.arange(0, int(np.prod(s)), 3, dtype=np.uint64)
                for q in q_out:
                    assert set(r.backward(q, i).tolist()) == brute_backward(pairs, q, i)
                assert set(r.forward(q_in, i).tolist()) == brute_forward(pairs, q_in, i)
    assert read_whole_shard(old) == read_whole_shard(new) > 0


def test_names_of_blobs_are_no_table_names(tmp_path):
    from encoders.base import EncodedShard, Table

    for name in (store.BLOBS, "blob:x"):
        enc = EncodedShard(tables=[Table(name, np.zeros(1, np.uint64),
                                         items=np.zeros((1, 2), np.uint8))])
        with pytest.raises(ValueError, match="reserved for blobs"):
            store._write_lmdb(tmp_path, enc)


def test_a_shard_records_its_pairs_digest_and_same_pairs_write_nothing(tmp_path):
    """The digest of the stored pairs is in the statistics and meta.json, the same for the
    same pairs however they were split into writes; a sink told that digest (a replay
    whose recomputed lineage came out as the parent's) publishes nothing."""
    from encoders.sink import make_sink
    from subzero.cells import Box
    from subzero.engine.layout import shard_spec
    from subzero.modes import Strategy

    first = write_shard(tmp_path / "a", "full-one-bwd", stencil_pairs(40), (40,), [(40,)])
    split = write_shard(tmp_path / "b", "full-one-bwd", stencil_pairs(40), (40,), [(40,)],
                        parts=3)
    other = write_shard(tmp_path / "c", "full-one-bwd", stencil_pairs(40, shift=1), (40,),
                        [(40,)])
    assert first["digest"] == split["digest"] != other["digest"]
    assert store.read_meta(first["path"])["stats"]["digest"] == first["digest"]
    spec = shard_spec(tmp_path / "d", "r1", "op", Strategy.parse("full-one-bwd"), (0,),
                      Box.full((40,)), (40,), ((40,),), 0)
    sink = make_sink(spec)
    sink.write(stencil_pairs(40))
    assert sink.close(same_as=first["digest"]) == {"digest": first["digest"], "same": True}
    assert not (tmp_path / "d").exists()  # nothing published, not even a folder
    sink = make_sink(spec)
    sink.write(stencil_pairs(40))
    again = sink.close(same_as=other["digest"])  # different pairs: written
    assert again["digest"] == first["digest"] and Path(again["path"]).is_dir()
