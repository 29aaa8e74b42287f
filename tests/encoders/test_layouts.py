"""Layout choices that the conformance suite cannot see: sharing, relative sets, merging."""

import numpy as np
import pytest

from encoders.lookup import open_shard
from operators.base import box_neighbours
from subzero.cells import Ragged, dilate, to_coords
from subzero.frontier import mask_from_linear
from subzero.lineage import PairBatch
from tests.encoders.conformance import write_shard


def per_pixel_box(shape, radius):
    cells = np.arange(int(np.prod(shape)), dtype=np.uint64)
    ins = box_neighbours(to_coords(cells, shape), (radius,) * len(shape), shape)
    return PairBatch(Ragged.from_singletons(cells), ins=(ins,))


@pytest.mark.parametrize("strategy", ["full-one-bwd", "full-one-fwd"])
def test_identity_lineage_is_one_shared_record(tmp_path, strategy):
    cells = np.arange(1000, dtype=np.uint64)
    pairs = PairBatch(Ragged.from_singletons(cells), ins=(Ragged.from_singletons(cells),))
    st = write_shard(tmp_path, strategy, pairs, (1000,), [(1000,)])
    assert st["records"] == 1
    with open_shard(st["path"]) as r:
        q = np.array([0, 17, 999], np.uint64)
        assert r.backward(q, 0).tolist() == r.forward(q, 0).tolist() == [0, 17, 999]


@pytest.mark.parametrize("strategy", ["full-one-bwd", "full-one-fwd"])
def test_stencil_boxes_share_records_and_stay_exact_at_borders(tmp_path, strategy):
    shape = (20, 20)
    st = write_shard(tmp_path, strategy, per_pixel_box(shape, 1), shape, [shape])
    # interior, 4 edges, 4 corners: 9 translated families of clipped 3x3 boxes
    assert st["records"] == 9
    rng = np.random.default_rng(0)
    with open_shard(st["path"]) as r:
        assert r.meta["relative"] == {"k" if strategy.endswith("bwd") else "k0": [True]}
        for n in (1, 5, 60):
            q = np.unique(rng.integers(0, 400, n)).astype(np.uint64)
            exp = np.flatnonzero(dilate(mask_from_linear(q, shape), 1)).tolist()
            assert r.backward(q, 0).tolist() == exp
            assert r.forward(q, 0).tolist() == exp


def test_relative_never_stores_every_box_but_answers_the_same(tmp_path):
    from encoders.full_one import FullOne
    from encoders.store import ShardWriter
    from subzero.cells import Box
    from subzero.engine.layout import shard_spec
    from subzero.modes import Strategy

    shape = (12, 12)
    pairs = per_pixel_box(shape, 1)
    spec = shard_spec(tmp_path, "r1", "op", Strategy.parse("full-one-bwd"), (0,),
                     Box.full(shape), shape, (shape,), 0)
    enc = FullOne("bwd", relative="never").encode(pairs, spec)
    st = ShardWriter(spec).write(enc, {})
    assert enc.meta["records"] == 144 and enc.meta["relative"] == {"k": [False]}
    with open_shard(st["path"]) as r:
        q = np.array([0, 13, 143], np.uint64)
        exp = np.flatnonzero(dilate(mask_from_linear(q, shape), 1)).tolist()
        assert r.backward(q, 0).tolist() == exp


def test_high_fanout_pairs_share_one_absolute_record(tmp_path):
    # 100 output cells all depending on the same 50 input cells: one record, not 100
    pairs = PairBatch(Ragged.from_rows([np.arange(100)]),
                      ins=(Ragged.from_rows([np.arange(0, 500, 10)]),))
    st = write_shard(tmp_path, "full-one-bwd", pairs, (100,), [(500,)])
    assert st["records"] == 1
    pairs = PairBatch(Ragged.from_rows([np.arange(100)]),
                      ins=(Ragged.from_rows([np.arange(0, 100, 3)]),))
    st = write_shard(tmp_path / "b", "full-one-bwd", pairs, (100,), [(100,)])
    with open_shard(st["path"]) as r:
        assert r.meta["relative"] == {"k": [False]}  # relative would need 100 records
        assert r.meta["records"] == 1


def test_payloads_are_shared_and_colliding_cells_keep_both(tmp_path):
    out = Ragged.from_rows([[0], [1], [2], [2]])
    pay = Ragged.from_rows([np.frombuffer(p, np.uint8) for p in (b"r3", b"r3", b"r3", b"x")],
                           np.uint8)
    st = write_shard(tmp_path, "pay-one-bwd", PairBatch(out, payload=pay), (3,), [(3,)])
    assert st["records"] == 2  # [r3] shared by cells 0 and 1 (and 2 has [r3, x])
    with open_shard(st["path"]) as r:
        b = r.payload_pairs(np.array([1, 2], np.uint64))
        got = sorted((tuple(b.out.row(k).tolist()), b.payload_bytes(k)) for k in range(len(b)))
        assert got == [((1,), b"r3"), ((2,), b"r3"), ((2,), b"x")]


@pytest.mark.parametrize("strategy", ["full-many-bwd", "pay-many-bwd"])
def test_many_merges_pairs_with_identical_key_sets(tmp_path, strategy):
    out = Ragged.from_rows([[0, 1], [0, 1], [5]])
    if strategy.startswith("pay"):
        pairs = PairBatch(out, payload=Ragged.from_rows(
            [np.frombuffer(p, np.uint8) for p in (b"a", b"b", b"a")], np.uint8))
    else:
        pairs = PairBatch(out, ins=(Ragged.from_rows([[3], [4], [5]]),))
    st = write_shard(tmp_path, strategy, pairs, (6,), [(6,)])
    assert st["records"] == 2
    with open_shard(st["path"]) as r:
        if strategy.startswith("pay"):
            b = r.payload_pairs(np.array([1], np.uint64))
            assert sorted(b.payload_bytes(k) for k in range(len(b))) == [b"a", b"b"]
        else:
            assert r.backward(np.array([1], np.uint64), 0).tolist() == [3, 4]


def test_lookup_reads_only_the_runs_it_needs(tmp_path, monkeypatch):
    from encoders.store import LmdbShard

    pairs = per_pixel_box((64, 64), 1)
    st = write_shard(tmp_path, "full-one-bwd", pairs, (64, 64), [(64, 64)])
    asked = []
    real = LmdbShard.items

    def spy(self, table, keys):
        asked.append(len(keys))
        return real(self, table, keys)

    runs = []
    real_run = LmdbShard.run_items

    def spy_run(self, table, key):
        runs.append(key)
        return real_run(self, table, key)

    monkeypatch.setattr(LmdbShard, "items", spy)
    monkeypatch.setattr(LmdbShard, "run_items", spy_run)
    with open_shard(st["path"]) as r:
        r.backward(np.array([0, 1, 2, 300, 4095], np.uint64), 0)
        # a few cells (plain-Python path): one read per run
        assert runs == [0, 256, 3840] and asked == []
        many = np.r_[0:100, 300, 4095].astype(np.uint64)
        r.backward(many, 0)
    assert asked == [3]  # cells 0-99 share a 256-cell run; 300 and 4095 one each


def test_lookup_into_a_mask_of_the_wrong_size_is_refused(tmp_path):
    from encoders.lookup import QueryError

    pairs = per_pixel_box((8, 8), 1)
    st = write_shard(tmp_path, "full-one-bwd", pairs, (8, 8), [(8, 8)])
    with open_shard(st["path"]) as r:
        with pytest.raises(QueryError, match="flat bool array of 64 cells"):
            r.backward(np.array([0], np.uint64), 0, into=np.zeros(63, bool))
        with pytest.raises(QueryError, match="got int64"):
            r.forward(np.array([0], np.uint64), 0, into=np.zeros(64, np.int64))
        into = np.zeros(64, bool)
        got = r.backward(np.arange(64, dtype=np.uint64), 0, into=into)
        assert got is None and into.all()  # a large answer lands in the mask


@pytest.mark.parametrize("seed", range(4))
def test_touches_is_the_brute_force_test_with_or_without_coordinates(seed):
    """A key space (linear range and box of its keys) meets sorted query cells exactly when
    one of them lies in both; given the cells' coordinates, the same answer."""
    from encoders.layouts.keyspace import coords, lin_range_box, touches

    rng = np.random.default_rng(seed)
    for _ in range(500):
        shape = tuple(int(n) for n in rng.integers(1, 25, 2))
        size = shape[0] * shape[1]
        q = np.unique(rng.integers(0, size, int(rng.integers(0, 9)))).astype(np.uint64)
        keys = np.unique(rng.integers(0, size, int(rng.integers(0, 6)))).astype(np.uint64)
        space = lin_range_box(keys, shape)
        want = False
        if len(keys) and len(q):
            c = coords(q, shape)
            in_box = ((c >= space["lo"]) & (c < space["hi"])).all(axis=1)
            want = bool((in_box & (q >= keys.min()) & (q <= keys.max())).any())
        assert touches(q, space, shape) == want
        assert touches(q, space, shape, coords(q, shape)) == want


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("bits", [8, 10, 12, 16])
@pytest.mark.parametrize("strategy", ["full-one-bwd", "full-one-fwd", "pay-one-bwd"])
def test_every_run_length_answers_as_brute_force(tmp_path, monkeypatch, strategy, bits,
                                                 packed):
    """Sparse key cells (a cosmic-ray mask's shape) in runs of 2**bits cells: lookups of a
    few cells (plain Python), of many (numpy), and whole scans give the brute-force answer,
    whether a run is one packed entry or (as shards written before) LMDB duplicates."""
    from dataclasses import replace

    from encoders.layouts import cellindex

    monkeypatch.setattr(cellindex, "choose_bits", lambda keys, w: bits)
    index_table = cellindex.index_table
    monkeypatch.setattr(cellindex, "index_table",
                        lambda *a, **k: replace(index_table(*a, **k), packed=packed))
    shape = (300, 400)
    n = shape[0] * shape[1]
    rng = np.random.default_rng(bits)
    keys = np.unique(rng.integers(0, n, 900)).astype(np.uint64)
    vals = [np.unique(rng.integers(0, n, 1 + k % 3)) for k in range(len(keys))]
    if strategy.startswith("pay"):
        pay = Ragged.from_rows([np.frombuffer(b"p%d" % (k % 7), np.uint8)
                                for k in range(len(keys))], np.uint8)
        pairs = PairBatch(Ragged.from_singletons(keys), payload=pay)
    else:
        pairs = PairBatch(Ragged.from_singletons(keys), ins=(Ragged.from_rows(vals),))
    st = write_shard(tmp_path, strategy, pairs, shape, [shape])
    table = "k0" if strategy == "full-one-fwd" else "k"
    with open_shard(st["path"]) as r:
        assert r.meta.get("bucket_bits", {}).get(table, 8) == bits
        assert r.meta["tables"][table] == ("packed" if packed else "dupfixed")
        key_cells = keys if table == "k" else np.unique(np.concatenate(vals)).astype(np.uint64)
        runs = len(np.unique(key_cells >> np.uint64(bits)))
        assert r.meta["lmdb"][table]["entries"] == (runs if packed else len(key_cells))
        q_few = np.unique(np.r_[keys[::60], rng.integers(0, n, 20)]).astype(np.uint64)
        q_many = np.unique(np.r_[keys[::3], rng.integers(0, n, 500)]).astype(np.uint64)
        for q in (q_few, q_many):
            assert len(q) <= 64 or q is q_many
            if strategy == "pay-one-bwd":
                b = r.payload_pairs(q)
                got = sorted((int(c), b.payload_bytes(k)) for k in range(len(b))
                             for c in b.out.row(k).tolist())
                hit = np.isin(keys, q)
                exp = sorted((int(c), b"p%d" % (k % 7))
                             for k, c in enumerate(keys) if hit[k])
                assert got == exp
                continue
            fwd = {}
            for k, v in zip(keys.tolist(), vals):
                for c in v.tolist():
                    fwd.setdefault(c, set()).add(k)
            bwd_exp = sorted({c for k, v in zip(keys.tolist(), vals) if k in set(q.tolist())
                              for c in v.tolist()})
            fwd_exp = sorted({k for c in q.tolist() for k in fwd.get(c, ())})
            assert r.backward(q, 0).tolist() == bwd_exp
            assert r.forward(q, 0).tolist() == fwd_exp
        if strategy == "pay-one-bwd":  # a whole scan
            b = r.payload_pairs(None)
            got = sorted(c for k in range(len(b)) for c in b.out.row(k).tolist())
            assert got == keys.tolist()


def test_sparse_keys_take_longer_runs_and_fewer_bytes(tmp_path):
    """A chunk's few thousand scattered key cells are stored in longer runs (fewer LMDB
    bytes); a dense key set keeps 256-cell runs; no longer run holds over MAX_RUN_ITEMS."""
    from encoders.layouts import cellindex

    rng = np.random.default_rng(0)
    sparse = np.unique(rng.integers(0, 1 << 20, 5000)).astype(np.uint64)
    bits = cellindex.choose_bits(sparse, 2)
    assert bits > 8
    assert cellindex._run_counts(sparse, bits).max() <= cellindex.MAX_RUN_ITEMS
    dense = np.arange(1 << 16, dtype=np.uint64)
    assert cellindex.choose_bits(dense, 2) == 8
    clumped = np.arange(1 << 14, dtype=np.uint64) * 4  # every 4th cell: 64 items a run
    assert cellindex._run_counts(clumped, cellindex.choose_bits(clumped, 1)).max() <= 1024
    shape = (1024, 1024)
    pairs = PairBatch(Ragged.from_singletons(sparse), ins=(Ragged.from_singletons(sparse),))
    sizes = {}
    for b in (8, bits):
        from unittest import mock
        with mock.patch.object(cellindex, "choose_bits", lambda keys, w, b=b: b):
            st = write_shard(tmp_path / str(b), "full-one-bwd", pairs, shape, [shape])
        sizes[b] = st["data_bytes"]
    assert sizes[bits] < 0.75 * sizes[8]


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_lin_range_box_is_the_coordinates_range(ndim):
    """A key space's range and box are those of the keys' coordinates (any order, repeats,
    one row or several, every dimension up to 4)."""
    from encoders.layouts.keyspace import coords, lin_range_box

    rng = np.random.default_rng(ndim)
    for _ in range(300):
        shape = tuple(int(n) for n in rng.integers(1, 9, ndim))
        size = int(np.prod(shape))
        lo = int(rng.integers(0, size))
        hi = lo + 1 + int(rng.integers(0, size - lo))
        keys = rng.integers(lo, hi, int(rng.integers(1, 12))).astype(np.uint64)
        c = coords(keys, shape)[:, :ndim]
        want = {"count": len(keys), "lin": [int(keys.min()), int(keys.max())],
                "lo": c.min(axis=0).tolist(), "hi": (c.max(axis=0) + 1).tolist()}
        assert lin_range_box(keys, shape) == want
    assert lin_range_box(np.zeros(0, np.uint64), (3, 4)) == {"count": 0}


@pytest.mark.parametrize("seed", range(6))
def test_group_keys_is_the_union_per_key(seed):
    """Every key cell gets the union of the value sets of the pairs holding it, whether
    the keys come sorted and distinct (a mask's cells, taken as they are), unsorted,
    colliding, or sorted with a cell twice in a row."""
    from encoders.layouts.pairs import group_keys

    rng = np.random.default_rng(seed)
    for kind in ("sorted", "shuffled", "colliding", "sorted repeats"):
        n = int(rng.integers(1, 40))
        if kind == "colliding":
            rows = [np.unique(rng.integers(0, 30, int(rng.integers(1, 5)))) for _ in range(n)]
        elif kind == "sorted repeats":  # in order, but a cell in two pairs in a row
            rows = [np.array([c]) for c in np.sort(rng.integers(0, 8, n + 1))]
            n += 1
        else:
            cells = np.sort(rng.choice(1000, n, replace=False))
            rows = [np.array([c]) for c in (cells if kind == "sorted" else rng.permutation(cells))]
        vals = [np.unique(rng.integers(0, 50, int(rng.integers(1, 4)))) for _ in range(n)]
        key_side = Ragged.from_rows([r.astype(np.uint64) for r in rows], np.uint64)
        g = group_keys(key_side, [Ragged.from_rows([v.astype(np.uint64) for v in vals],
                                                   np.uint64)])
        want: dict[int, set] = {}
        for r, v in zip(rows, vals):
            for c in r.tolist():
                want.setdefault(c, set()).update(v.tolist())
        assert g.keys.tolist() == sorted(want)
        got = g.values[0]
        for k, src in zip(g.keys.tolist(), g.src.tolist()):
            assert set(got.values[got.offsets[src]:got.offsets[src + 1]].tolist()) == want[k]
        assert g.collisions == sum(1 for k in want if sum(k in r for r in rows) > 1)
