"""Lineage queries: every method gives the same cells; properties; soundness; errors."""

import json

import numpy as np
import pytest

from subzero.api import Run
from subzero.cells import Box
from subzero.chunking import Chunking
from subzero.engine.runner import run_workflow
from subzero.engine.runs import load_run
from subzero.errors import CellError, QueryError
from subzero.frontier import frontier
from subzero.query import QueryExecutor
from subzero.testing import assert_sound_by_perturbation
from tests.query.udfs import flare_workflow
from workflows import example

pytestmark = pytest.mark.spark
SHAPE = (40, 31)


@pytest.fixture(scope="module")
def homes(spark, tmp_path_factory):
    """Runs of the example and the flare workflow under several strategies."""
    home = tmp_path_factory.mktemp("qhome")
    runs = {}
    for strategy in ("subzero", "blackbox"):
        r = run_workflow(example.build(shape=SHAPE, seed=5), home, strategy=strategy,
                         chunking=Chunking(split=3), spark=spark)
        runs[("example", strategy)] = r.run
    for strategy in ("subzero", "blackbox"):
        r = run_workflow(flare_workflow(), home, strategy=strategy,
                         chunking=Chunking(split=2), spark=spark)
        runs[("flares", strategy)] = r.run
    return home, runs


def qx(homes, wf, strategy, **kw):
    home, runs = homes
    return QueryExecutor(load_run(home, runs[(wf, strategy)]), **kw)


EXAMPLE_QUERIES = [
    ("backward", "bright", [(3, 4), (39, 30)], dict(path=[("bright", 0), ("residual", 0),
                                                          ("smooth", 0), ("calibrate", 0)])),
    ("backward", "bright", Box((10, 10), (13, 12)), dict(to="image")),
    ("backward", "smooth", [(0, 0)], dict(to="image")),
    ("forward", "image", [(5, 5)], dict(to="bright")),
    ("forward", "image", [(20, 7), (0, 30)], dict(path=[("calibrate", 0), ("smooth", 0)])),
    ("forward", "threshold", [(0, 0)], dict(to="bright")),
]


@pytest.mark.parametrize("direction, start, cells, how", EXAMPLE_QUERIES)
def test_example_map_and_reexec_agree(homes, direction, start, cells, how):
    a = qx(homes, "example", "subzero")
    b = qx(homes, "example", "blackbox")
    r_map = a.query(direction, cells, start, how.get("path"), how.get("to"))
    r_re = b.query(direction, cells, start, how.get("path"), how.get("to"))
    r_re2 = a.query(direction, cells, start, how.get("path"), how.get("to"), method="reexec")
    assert r_map.count > 0
    assert np.array_equal(r_map.mask, r_re.mask)
    assert np.array_equal(r_map.mask, r_re2.mask)
    used = {s.method for s in r_re.steps}
    assert "map" not in used and used & {"reexec", "entire-array"}
    assert {s.method for s in r_map.steps} <= {"map", "entire-array", "empty"}


def test_path_result_is_the_3x3_neighbourhood(homes):
    q = qx(homes, "example", "subzero")
    r = q.backward([(10, 10)], "bright", path=[("bright", 0), ("residual", 0), ("smooth", 0),
                                                ("calibrate", 0)])
    assert r.array == "image" and r.shape == SHAPE
    assert r.coords.tolist() == [[i, j] for i in (9, 10, 11) for j in (9, 10, 11)]
    assert [s.method for s in r.steps] == ["map"] * 4
    assert r.to_json()["cells"][0] == [9, 9]


def test_entire_array_optimization_and_full_frontier(homes):
    q = qx(homes, "example", "subzero")
    r = q.backward([(0, 0)], "bright", to="image", scope="all")  # through the global mean
    assert r.count == SHAPE[0] * SHAPE[1]
    assert "entire-array" in {s.method for s in r.steps}
    full = np.ones(SHAPE, bool)
    r = q.backward(full, "background", path=[("background", 0)])
    assert r.mask.all() and r.steps[0].method == "entire-array"


FLARE_QUERIES = [
    ("backward", "flare", None, dict(path=[("flare", 0), ("lin", 0)])),
    ("backward", "resid", [(4, 4), (20, 20)], dict(path=[("resid", 0), ("blur", 0), ("flare", 0)])),
    ("forward", "lin", None, dict(path=[("flare", 0)])),
    ("forward", "sky", [(0, 0), (29, 23), (15, 12)], dict(to="blur")),
]


def _flared_cells(homes):
    home, runs = homes
    run = Run(load_run(home, runs[("flares", "subzero")]))
    lin = run.array("lin")
    return np.argwhere(lin > 3.0)


@pytest.mark.parametrize("direction, start, cells, how", FLARE_QUERIES)
def test_composite_udf_map_comp_and_reexec_agree(homes, direction, start, cells, how):
    if cells is None:  # include flared pixels and plain ones
        flared = _flared_cells(homes)
        cells = np.concatenate([flared[:3], [[1, 1], [2, 20]]])
    a = qx(homes, "flares", "subzero")  # flare: comp-one-bwd
    b = qx(homes, "flares", "blackbox")
    r1 = a.query(direction, cells, start, how.get("path"), how.get("to"))
    r2 = b.query(direction, cells, start, how.get("path"), how.get("to"))
    r3 = a.query(direction, cells, start, how.get("path"), how.get("to"), method="reexec")
    assert np.array_equal(r1.mask, r2.mask) and np.array_equal(r1.mask, r3.mask)
    if any(s.operator == "flare" for s in r1.steps):
        assert any(s.method.startswith("stored:comp") for s in r1.steps if s.operator == "flare")


def test_forward_of_backward_contains_the_cells(homes):
    rng = np.random.default_rng(0)
    for wf, strategy in (("example", "subzero"), ("flares", "subzero")):
        q = qx(homes, wf, strategy)
        run = q.run
        for op_name in run.workflow.order:
            op = run.op(op_name)
            for i in range(len(op.in_shapes)):
                n = int(np.prod(op.out_shape))
                c = frontier(op.out_shape, rng.choice(n, size=min(5, n), replace=False)
                             .astype(np.uint64))
                back, _ = q.step(op_name, i, "backward", c)
                if not back.any():
                    continue
                fwd, _ = q.step(op_name, i, "forward", back)
                assert (fwd | ~c).all(), f"{op_name}:{i}"


def test_backward_of_full_frontier_through_all_to_all_is_full_input(homes):
    q = qx(homes, "example", "blackbox")
    op = q.run.op("background")
    assert op.all_to_all(0)
    res, step = q.step("background", 0, "backward", np.ones(SHAPE, bool))
    assert res.all() and step.method == "entire-array"


@pytest.mark.parametrize("wf, strategy", [("example", "subzero"), ("example", "blackbox"),
                                          ("flares", "subzero"), ("flares", "blackbox")])
def test_each_operator_is_sound_by_perturbation(homes, wf, strategy):
    """Change every input cell outside the reported backward lineage of C, re-run the
    operator: its outputs at C do not change."""
    q = qx(homes, wf, strategy)
    run = q.run
    rng = np.random.default_rng(1)
    inputs_of = {n: [Run(run).array(s) for s in run.workflow.nodes[n].inputs]
                 for n in run.workflow.order}
    for op_name in run.workflow.order:
        op = run.op(op_name)
        n = int(np.prod(op.out_shape))
        picks = [rng.choice(n, size=min(4, n), replace=False).astype(np.uint64)]
        if op_name == "flare":
            flared = np.ravel_multi_index(tuple(_flared_cells(homes)[:2].T), op.out_shape)
            picks.append(flared.astype(np.uint64))
        for cells in picks:
            def backward(f, i, _op=op_name):
                return q.step(_op, i, "backward", f)[0]

            assert_sound_by_perturbation(op, inputs_of[op_name], cells, backward=backward,
                                         trials=2, split=2)


@pytest.mark.parametrize("kw, err, msg", [
    (dict(path=[("bright", 0), ("smooth", 0)]), QueryError, "impossible path at step 2"),
    (dict(path=[("nope", 0)]), QueryError, "operator 'nope' is not in run"),
    (dict(path=[("bright", 4)]), QueryError, "has 2 input\\(s\\); input index 4"),
    (dict(path=[("smooth", 0)]), QueryError, "path starts at 'smooth', cells are in 'bright'"),
    (dict(to="threshold", cells=[(99, 0)]), CellError, "outside the array shape"),
    (dict(to="nowhere"), QueryError, "has no array 'nowhere'"),
    (dict(path=[("bright", 0)], to="image"), QueryError, "either a path or a target"),
])
def test_query_errors(homes, kw, err, msg):
    q = qx(homes, "example", "subzero")
    cells = kw.pop("cells", [(1, 1)])
    with pytest.raises(err, match=msg):
        q.backward(cells, "bright", kw.get("path"), kw.get("to"))


def test_no_path_between_arrays(homes):
    q = qx(homes, "example", "subzero")
    with pytest.raises(QueryError, match="no path from 'smooth' back to 'threshold'"):
        q.backward([(1, 1)], "smooth", to="threshold")
    with pytest.raises(QueryError, match="no path from 'bright' forward to 'image'"):
        q.forward([(1, 1)], "bright", to="image")


def test_queries_are_logged(homes):
    home, runs = homes
    q = qx(homes, "example", "subzero")
    from subzero.engine.catalog import Catalog

    before = len(Catalog(home / "catalog.sqlite").query_log(q.run.id))
    q.forward([(2, 2)], "image", to="bright")
    log = Catalog(home / "catalog.sqlite").query_log(q.run.id)
    assert len(log) == before + 1
    entry = log[-1]
    assert entry["direction"] == "forward" and entry["start"] == "image"
    assert entry["target"] == "bright" and entry["in_count"] == 1 and entry["out_count"] > 0
    assert ["calibrate", 0] in entry["path"]


def test_reexecution_touches_only_needed_tiles(homes):
    q = qx(homes, "example", "blackbox", tile_cells=64)
    op = q.run.op("smooth")
    f = frontier(SHAPE, [(0, 0)])
    tiles, cells = q.tiles(op, 0, True, f)
    assert len(tiles) == 1 and cells <= 64
    tiles_all, _ = q.tiles(op, 0, True, np.ones(SHAPE, bool))
    assert len(tiles_all) > 10


def test_cli_query_json_png_and_out(homes, tmp_path, capsys):
    from subzero.cli import main

    home, runs = homes
    rid = runs[("example", "subzero")]
    png, out = tmp_path / "q.png", tmp_path / "m.npy"
    assert main(["query", rid, "backward", "--from", "bright", "--cells", "3,4;5,6",
                 "--path", "bright:0,residual:0,smooth:0,calibrate:0", "--home", str(home),
                 "--json", "--png", str(png), "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"run", "direction", "array", "shape", "count", "elapsed_s", "steps",
                        "cells", "scope", "global"}
    assert doc["array"] == "image" and doc["count"] == 17 and len(doc["cells"]) == 17
    assert doc["scope"] == "local" and doc["global"] == []
    assert set(doc["steps"][0]) >= {"operator", "method", "in_count", "out_count", "elapsed_s",
                                    "global"}
    assert png.stat().st_size > 1000 and np.load(out).sum() == 17
    assert main(["query", rid, "forward", "--from", "image", "--box", "0:2,0:2", "--to",
                 "bright", "--home", str(home)]) == 0
    assert "forward lineage of image in bright" in capsys.readouterr().out
    for args, msg in ([["backward", "--from", "bright", "--cells", "1,1"], "exactly one of --to"],
                      [["backward", "--from", "bright", "--cells", "1,x", "--to", "image"],
                       "bad cell '1,x'"],
                      [["sideways"], "invalid choice"],
                      [["backward", "--from", "bright", "--box", "0:99,0:1", "--to", "image"],
                       "outside 0:40"]):
        assert main(["query", rid, *args, "--home", str(home)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], err


def test_query_time_optimizer_switches_from_slow_stored_lineage(spark, tmp_path):
    """Stored lineage that costs more than re-execution is abandoned mid-read (VII-A)."""
    from subzero.query.costs import QueryCosts

    res = run_workflow(example.build(shape=SHAPE, seed=5), tmp_path,
                       plan={"smooth": ["full-one-fwd"]}, chunking=Chunking(split=2),
                       spark=spark)
    run = load_run(tmp_path, res.run)
    cells = [(3, 3), (20, 20)]
    # costs that make the mismatched (forward-keyed) scan look free and re-execution
    # instantaneous: the scan is chosen, then abandoned at once for re-execution
    cheap_scan = QueryCosts(scan_per_pair=0.0, scan_per_cell=0.0, shard_fixed=0.0,
                            shard_open=0.0, decode_per_cell=0.0,
                            reexec_fixed_driver=1e-9, trace_factor=0.0, reexec_per_cell=0.0)
    q = QueryExecutor(run, costs=cheap_scan, min_switch_s=0.0, log=False)
    r, step = q.step("smooth", 0, "backward", frontier(SHAPE, cells))
    assert step.method == "reexec" and "switched from stored:full-one-fwd" in step.note
    # without the optimizer's deadline the stored (mismatched) lineage answers, identically
    q2 = QueryExecutor(run, log=False)
    r2, step2 = q2.step("smooth", 0, "backward", frontier(SHAPE, cells), method="stored")
    assert step2.method == "stored:full-one-fwd"
    assert np.array_equal(r, r2)
    # matched direction forward: stored lineage is the cheapest and is used
    r3, step3 = q2.step("smooth", 0, "forward", frontier(SHAPE, cells))
    assert step3.method == "stored:full-one-fwd"
    assert np.array_equal(r3, run.op("smooth").map_f(frontier(SHAPE, cells), 0))


FULL_STRATEGIES = ("full-one-bwd", "full-one-fwd", "full-many-bwd", "full-many-fwd",
                   "full-compact-bwd", "full-compact-fwd")
PAYLOAD_STRATEGIES = ("pay-one-bwd", "pay-many-bwd", "comp-one-bwd", "comp-many-bwd")


@pytest.fixture(scope="module")
def encoded_runs(spark, tmp_path_factory):
    """One run per stored strategy: `smooth` of the example and `flare` of the flare
    workflow each keep their lineage in that strategy only."""
    home = tmp_path_factory.mktemp("encoded")
    runs = {}
    for s in FULL_STRATEGIES:
        runs[("example", s)] = run_workflow(
            example.build(shape=SHAPE, seed=5), home, plan={"smooth": [s]},
            chunking=Chunking(split=3), spark=spark).run
    for s in FULL_STRATEGIES + PAYLOAD_STRATEGIES:
        runs[("flares", s)] = run_workflow(flare_workflow(), home, plan={"flare": [s]},
                                           chunking=Chunking(split=2), spark=spark).run
    return home, runs


@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_every_encoding_in_both_directions_gives_the_same_cells(homes, encoded_runs,
                                                                direction):
    home, runs = encoded_runs
    rng = np.random.default_rng(3)
    for wf, op_name, strategies in (("example", "smooth", FULL_STRATEGIES),
                                    ("flares", "flare", FULL_STRATEGIES + PAYLOAD_STRATEGIES)):
        reference = qx(homes, wf, "blackbox")  # re-execution: the ground truth
        op = reference.run.op(op_name)
        shape = op.out_shape if direction == "backward" else op.in_shapes[0]
        cells = [frontier(shape, rng.choice(int(np.prod(shape)), size=k, replace=False)
                          .astype(np.uint64)) for k in (1, 7, 40)]
        if op_name == "flare":  # include flared pixels (those with payloads)
            cells.append(frontier(shape, _flared_cells(homes)[:4]))
        for f in cells:
            want, _ = reference.step(op_name, 0, direction, f, method="reexec")
            for s in strategies:
                q = QueryExecutor(load_run(home, runs[(wf, s)]), log=False)
                got, step = q.step(op_name, 0, direction, f, method="stored")
                assert step.method == f"stored:{s}", (s, step.method)
                assert np.array_equal(got, want), (wf, s, direction, int(f.sum()))


@pytest.mark.parametrize("shape,tile", [((2001, 513), (251, 129)), ((37,), (5,)),
                                        ((7, 9, 11), (2, 4, 3)), ((10, 10), (10, 10))])
def test_touched_tiles_are_the_grid_tiles_holding_a_frontier_cell(shape, tile):
    from subzero.chunking import chunk_grid
    from subzero.query.reexec import touched_boxes

    rng = np.random.default_rng(len(shape))
    for density in (0.0, 1e-4, 0.01, 0.5):
        mask = rng.random(shape) < density
        expected = [b for _, b in chunk_grid(shape, tile) if mask[b.slices].any()]
        assert touched_boxes(mask, tile) == expected


def test_a_payload_step_decodes_its_shards_records_together(homes, encoded_runs,
                                                            monkeypatch):
    """A backward payload step over several shards asks each for the frontier's cells in
    its output chunk and decodes all their records in one pass: the same pairs, in the
    same order, as each shard's ``payload_pairs`` one after the other. A decoding error
    in the joint pass reads the shards one by one again, where an intact shard's error is
    raised as it is (a bug, not damage)."""
    import subzero.query.stored as stored
    from encoders.layouts import fewcells
    from encoders.pay_one import PayOne
    from subzero.frontier import Frontier

    home, runs = encoded_runs
    flared = _flared_cells(homes)
    for s in ("pay-one-bwd", "comp-one-bwd"):
        q = QueryExecutor(load_run(home, runs[("flares", s)]), log=False)
        readers = [q.readers.reader(row) for row in q.choice.shards[("flare", s)]]
        assert len(readers) > 1 and all(isinstance(r.encoding, PayOne) for r in readers)
        shape = q.run.op("flare").out_shape
        lin = np.unique(np.concatenate([
            np.ravel_multi_index(tuple(flared.T), shape),
            np.random.default_rng(1).choice(int(np.prod(shape)), 30, replace=False)]))
        f = Frontier(shape, lin=lin.astype(np.uint64))
        assert f.sparse
        together = stored._payload_pairs(readers, f.lin, f, None)
        with monkeypatch.context() as m:
            m.setattr(stored, "_payload_pairs_together", lambda *a: NotImplemented)
            alone = stored._payload_pairs(readers, f.lin, f, None)
        with monkeypatch.context() as m:  # each shard's few cells found by numpy instead
            m.setattr(fewcells, "FEW_CELLS", -1)
            vectorized = stored._payload_pairs(readers, f.lin, f, None)
        assert together is not None and len(together) > 0
        for other in (alone, vectorized):
            for a, b in ((together.out, other.out), (together.payload, other.payload)):
                assert a.values.tolist() == b.values.tolist()
                assert a.offsets.tolist() == b.offsets.tolist()
        with monkeypatch.context() as m:
            def broken(found):
                raise ValueError("bad section")
            m.setattr(PayOne, "pairs_from_records", staticmethod(broken))
            with pytest.raises(ValueError, match="bad section"):
                stored._payload_pairs(readers, f.lin, f, None)


def test_a_stored_step_is_costed_by_the_shards_its_frontier_meets(homes, encoded_runs):
    """A sparse backward frontier reads only the shards of the output chunks it meets, so
    the choice counts those (a few start cells in a 64x image meet 9 of 16 shards; with
    all of them counted, re-execution looked cheaper and took longer)."""
    from subzero.frontier import Frontier
    from subzero.query.costs import QueryCosts

    home, runs = encoded_runs
    run = load_run(home, runs[("example", "full-one-bwd")])
    n_shards = len(QueryExecutor(run, log=False).choice.shards[("smooth", "full-one-bwd")])
    assert n_shards >= 4
    # a shard read costs 1 ms, re-execution 2.5 ms: stored wins only if one shard is counted
    costs = QueryCosts(shard_fixed=1e-3, shard_open=0.0, lookup_per_cell=0.0,
                       decode_per_cell=0.0, reexec_fixed_driver=2.5e-3, trace_factor=0.0,
                       reexec_per_cell=0.0)
    q = QueryExecutor(run, costs=costs, log=False)

    def sparse(mask):  # as a query's few start cells are: linear indices
        return Frontier(SHAPE, lin=np.flatnonzero(mask).astype(np.uint64))

    op = run.op("smooth")
    one = frontier(SHAPE, [(0, 0), (1, 1)])
    corners = frontier(SHAPE, [(0, 0), (0, SHAPE[1] - 1), (SHAPE[0] - 1, 0),
                               (SHAPE[0] - 1, SHAPE[1] - 1)])
    assert q.choice._chunks_met(op, True, sparse(one)) == 1
    assert q.choice._chunks_met(op, True, sparse(corners)) == 4
    assert q.choice._chunks_met(op, False, sparse(one)) is None  # forward: every shard may be read
    dense = frontier(SHAPE, [(y, x) for y in range(SHAPE[0]) for x in range(SHAPE[1])])
    assert q.choice._chunks_met(op, True, sparse(dense)) is None
    r1, s1 = q.step("smooth", 0, "backward", sparse(one))
    assert s1.method == "stored:full-one-bwd"
    r4, s4 = q.step("smooth", 0, "backward", sparse(corners))
    assert s4.method == "reexec"
    assert np.array_equal(r1, run.op("smooth").map_b(one, 0))
    assert np.array_equal(r4, run.op("smooth").map_b(corners, 0))


def test_a_payload_step_of_an_operator_with_map_p_rows_is_costed_as_one_call(
        encoded_runs, monkeypatch):
    """The choice charges stored payload lineage one ``map_p`` call per distinct payload
    it may meet, but one call in all when the operator maps payloads in a batch."""
    home, runs = encoded_runs
    run = load_run(home, runs[("flares", "comp-one-bwd")])
    q = QueryExecutor(run, log=False)
    op = run.op("flare")
    options = q.choice.methods("flare")
    facts = q.choice._option_facts(op, 0, True, options)
    records = [args[6] for (kind, _), _, args in facts if kind == "stored"]
    assert records and records[0] > 1
    monkeypatch.setattr(type(op), "batches_payloads", lambda self: True)
    q2 = QueryExecutor(run, log=False)
    facts = q2.choice._option_facts(op, 0, True, q2.choice.methods("flare"))
    assert [args[6] for (kind, _), _, args in facts if kind == "stored"] == [1]
