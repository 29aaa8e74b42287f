"""Lineage stored through the Spark executor answers like the operators' own mappings."""

import numpy as np
import pytest

from encoders.lookup import open_shard
from subzero.cells import as_linear, to_coords
from subzero.chunking import Chunking
from subzero.engine.catalog import Catalog
from subzero.engine.runner import run_workflow
from subzero.engine.runs import load_run
from subzero.frontier import Frontier, mask_from_linear
from subzero.lineage import PairBatch
from subzero.modes import Mode
from subzero.query.stored import read_full
from subzero.testing import payload_backward, run_chunked
from subzero.workflow import Workflow
from tests.encoders.udfs import Spots
from workflows import example

pytestmark = pytest.mark.spark
SHAPE = (23, 17)
PLAN = {"smooth": ["full-one-bwd", "full-many-fwd"], "residual": ["full-one-fwd"]}


def frontiers(shape, rng):
    """A few cells, a box, a random tenth, everything."""
    size = int(np.prod(shape))
    f = [mask_from_linear(rng.integers(0, size, 3), shape)]
    box = np.zeros(shape, dtype=bool)
    box[2:6, 3:9] = True
    f.append(box)
    f.append(rng.random(shape) < 0.1)
    f.append(np.ones(shape, dtype=bool))
    return f


@pytest.fixture(scope="module")
def example_run(spark, tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    res = run_workflow(example.build(shape=SHAPE, seed=2), home, plan=PLAN, spark=spark,
                       chunking=Chunking(split=2))
    return home, res.run


def test_catalog_records_one_shard_per_chunk_and_strategy(example_run):
    home, rid = example_run
    cat = Catalog(home / "catalog.sqlite")
    rows = cat.shards(rid)
    cat.close()
    got = sorted({(r["op"], r["strategy"]) for r in rows})
    assert got == [("residual", "full-one-fwd"), ("smooth", "full-many-fwd"),
                   ("smooth", "full-one-bwd")]
    assert len(rows) == 12  # 2 x 2 chunks each
    for r in rows:
        assert (home / r["path"]).is_dir() and r["attempt"] == 0
        assert r["data_bytes"] > 0 and r["fanout"] == 1.0 and r["encode_s"] >= 0
        assert (r["index_bytes"] > 0) == ("many" in r["strategy"])
        assert r["path"].endswith(f"{r['strategy']}/{r['chunk']}")
    smooth = [r for r in rows if r["strategy"] == "full-one-bwd"]
    assert sum(r["pairs"] for r in smooth) == SHAPE[0] * SHAPE[1]
    # a 3x3 stencil: 9 input cells per pixel inside, 4 in a corner
    assert all(4 < r["fanin"] < 9 for r in smooth)
    assert [r["fanin"] for r in rows if r["op"] == "residual"] == [2.0] * 4


@pytest.mark.parametrize("op_name,strategy", [("smooth", "full-one-bwd"),
                                              ("smooth", "full-many-fwd"),
                                              ("residual", "full-one-fwd")])
def test_stored_lineage_equals_the_mapping_functions(example_run, op_name, strategy):
    home, rid = example_run
    run = load_run(home, rid)
    op = run.op(op_name)
    cat = Catalog(home / "catalog.sqlite")
    readers = [open_shard(home / r["path"]) for r in cat.shards(rid, op_name, strategy)]
    cat.close()
    rng = np.random.default_rng(0)
    for i, in_shape in enumerate(op.in_shapes):
        for f in frontiers(op.out_shape, rng):  # the union the query executor reads
            got = read_full(readers, Frontier(f.shape, mask=f), i, True, in_shape, None)
            assert got.lin.tolist() == np.flatnonzero(op.map_b(f, i)).tolist()
        for f in frontiers(in_shape, rng):
            got = read_full(readers, Frontier(f.shape, mask=f), i, False, op.out_shape, None)
            assert got.lin.tolist() == np.flatnonzero(op.map_f(f, i)).tolist()
    for r in readers:
        r.close()


def spots_workflow(shape=(20, 14), seed=4):
    rng = np.random.default_rng(seed)
    img = rng.normal(0.0, 1.0, shape)
    wf = Workflow("spots")
    wf.input("sky", shape, "float64", source=lambda: img)
    wf.add("spots", Spots(threshold=1.5, radius=1), "sky")
    return wf, img


@pytest.mark.parametrize("strategy", ["pay-one-bwd", "pay-many-bwd"])
def test_payload_udf_lineage_round_trips_through_the_store(spark, home, strategy):
    wf, img = spots_workflow()
    res = run_workflow(wf, home, plan={"spots": [strategy]}, spark=spark,
                       chunking=Chunking(split=2))
    run = load_run(home, res.run)
    op = run.op("spots")
    cat = Catalog(home / "catalog.sqlite")
    rows = cat.shards(res.run, "spots", strategy)
    cat.close()
    assert len(rows) == 4 and all(r["pairs"] > 0 and r["in_cells"] == 0 for r in rows)
    readers = [open_shard(home / r["path"]) for r in rows]
    _, _, pairs = run_chunked(op, [img], 2, (Mode.PAY,))
    rng = np.random.default_rng(1)
    for f in frontiers(op.out_shape, rng):
        q = np.flatnonzero(f).astype(np.uint64)
        stored = PairBatch.concat([r.payload_pairs(q) for r in readers])
        got = np.zeros(op.in_shapes[0], dtype=bool)
        for k in range(len(stored)):
            cells = to_coords(stored.out.row(k), op.out_shape)
            got.reshape(-1)[as_linear(op.map_p(cells, stored.payload_bytes(k), 0),
                                      op.in_shapes[0]).astype(np.intp)] = True
        assert set(stored.out.values.tolist()) == set(q.tolist())  # PAY covers every cell
        assert np.array_equal(got, payload_backward(op, pairs, f, 0, default=False))
    everything = PairBatch.concat([r.payload_pairs(None) for r in readers])
    assert sorted(everything.out.values.tolist()) == list(range(int(np.prod(op.out_shape))))
