"""The optimizer end to end on real runs: the statistics pass against real numbers, plans
written by ``subzero optimize`` and applied by ``subzero run``, the enforced disk budget,
and the query log as workload."""

import json

import numpy as np
import pytest

import workflows
from optimizer.calibration import Calibration
from optimizer.plan import optimize, plan_from_catalog
from optimizer.stats import load_profiles, statistics_pass
from subzero.api import Run
from subzero.chunking import Chunking
from subzero.cli import main
from subzero.cli.runs import load_plan_file
from subzero.engine.catalog import Catalog
from subzero.engine.runner import run_workflow
from subzero.engine.runs import load_run
from subzero.errors import SubZeroError
from subzero.modes import Mode, Strategy
from tests.query.udfs import flare_workflow

pytestmark = pytest.mark.spark

SHAPE = "300x200"

try:
    import encoders.lookup  # noqa: F401

    HAVE_ENCODERS = True
except ImportError:  # pragma: no cover - before the encoders landed
    HAVE_ENCODERS = False
needs_encoders = pytest.mark.skipif(not HAVE_ENCODERS, reason="encoders not installed")


def example():
    return workflows.build("example", shape=SHAPE)


@pytest.fixture(scope="module")
def home(spark, tmp_path_factory):
    """A home with one black-box run of the example workflow (the statistics run)."""
    h = tmp_path_factory.mktemp("opt") / "home"
    res = run_workflow(example(), h, strategy="blackbox", spark=spark)
    statistics_pass(h, res.run, probe="all")  # mapping operators' disk is checked below
    return h, res.run


def _op_rows(h, rid):
    cat = Catalog(h / "catalog.sqlite")
    try:
        return cat.op_stats(rid), cat.shards(rid), cat.operators(rid), cat.run(rid)
    finally:
        cat.close()


def test_the_statistics_pass_estimates_real_lineage_within_a_small_factor(home, spark):
    h, base = home
    prof = load_profiles(h, base)
    plan = {"smooth": ["full-one-bwd"], "residual": ["full-many-fwd"], "bright": ["map"]}
    res = run_workflow(example(), h, plan=plan, spark=spark)
    stats, shards, _, _ = _op_rows(h, res.run)
    for op, strategy in (("smooth", "full-one-bwd"), ("residual", "full-many-fwd")):
        est, real = prof[op].modes[Mode.FULL], stats[op]
        assert est.pairs == pytest.approx(real["pairs"], rel=0.25)
        assert est.out_cells == pytest.approx(real["out_cells"], rel=0.25)
        assert est.in_cells == pytest.approx(real["in_cells"], rel=0.25)
        assert est.capture_task_s > 0
        if HAVE_ENCODERS:
            from optimizer.costs import CostModel

            disk = sum(r["data_bytes"] + r["index_bytes"] for r in shards
                       if r["op"] == op and r["strategy"] == strategy)
            pred = CostModel().disk(prof[op], Strategy.parse(strategy))
            assert disk / 2 <= pred <= disk * 2, (op, pred, disk)
    # the 3x3 stencil reads about 9 cells per output cell, the subtraction 2
    assert prof["smooth"].modes[Mode.FULL].fanin == pytest.approx(9, rel=0.1)
    assert prof["residual"].modes[Mode.FULL].fanin == pytest.approx(2, rel=0.01)


def test_optimize_writes_a_plan_that_run_applies(home, spark, tmp_path, capsys):
    h, base = home
    out = tmp_path / "plan.json"
    rc = main(["optimize", "--home", str(h), "--workflow", "example", "--param",
               f"shape={SHAPE}", "--max-disk", "50MB", "--pin", "smooth=full-one-bwd",
               "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "smooth" in text and "full-one-bwd" in text and "plan written to" in text
    doc = json.loads(out.read_text())
    assert doc["plan"]["smooth"] == ["map", "full-one-bwd"]
    assert doc["plan"]["calibrate"] == ["map"] and doc["max_disk"] == 50_000_000
    assert doc["run"] in (base, "r2") and doc["predicted"]["smooth"]["disk"] > 0
    plan, budget = load_plan_file(str(out))
    res = run_workflow(example(), h, plan=plan, max_disk=budget, spark=spark)
    _, shards, ops, _ = _op_rows(h, res.run)
    assert ops["smooth"]["strategies"] == ["map", "full-one-bwd"]
    if HAVE_ENCODERS:
        assert any(r["op"] == "smooth" for r in shards)
        assert res.lineage_bytes <= budget


@needs_encoders
def test_the_enforced_budget_holds_when_true_lineage_exceeds_the_prediction(spark, tmp_path):
    h = tmp_path / "home"
    run_workflow(example(), h, strategy="blackbox", spark=spark)
    # a calibration that badly underestimates, no probes and no earlier shards: the plan
    # looks tiny
    cheap = Calibration.default()
    for target in cheap.encoders.values():
        for name in target:
            target[name] = {"shard": 1.0}
    res = optimize(example(), h, max_disk=1000, pins={"smooth": ["full-one-bwd"]},
                   calibration=cheap, sample=False)
    assert res.totals["disk"] <= 1000
    run = run_workflow(example(), h, plan=res.plan, max_disk=res.max_disk, spark=spark)
    stats, shards, ops, info = _op_rows(h, run.run)
    assert info["lineage_bytes"] <= 1000 and run.lineage_bytes <= 1000
    assert ops["smooth"]["strategies"] == ["map"]
    assert "over the disk budget" in stats["smooth"]["note"]
    assert not [r for r in shards if r["op"] == "smooth"]
    # the lineage is still answered (by the mapping function)
    got = Run(load_run(h, run.run)).backward([(5, 5)], start="smooth", path=[("smooth", 0)])
    assert got.count == 9


def test_an_infeasible_budget_names_the_smallest_one_or_falls_back(home, capsys):
    h, base = home
    args = ["optimize", "--home", str(h), "--run", base, "--max-disk", "1KB", "--pin",
            "smooth=full-one-bwd"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "smallest feasible --max-disk is" in err and "--fallback" in err
    assert len(err.strip().splitlines()) == 1
    assert main(args + ["--fallback", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["solver"]["status"] == "fallback"
    assert set(map(tuple, doc["plan"].values())) == {("map",)}


@pytest.mark.parametrize("args, msg", [
    (["--max-disk", "1MB"], "exactly one of --workflow"),
    (["--run", "r999", "--max-disk", "1MB"], "unknown run"),
    (["--workflow", "example", "--param", "shape=7x7", "--max-disk", "1MB"],
     "no complete run of workflow 'example' with these parameters"),
    (["--run", "latest", "--max-disk", "lots"], "bad --max-disk"),
    (["--run", "latest", "--max-disk", "1MB", "--pin", "smooth"], "OPERATOR=STRATEGY"),
    (["--run", "latest", "--max-disk", "1MB", "--pin", "nope=map"], "no operator 'nope'"),
    (["--run", "latest", "--max-disk", "1MB", "--pin", "smooth=pay-one-bwd"],
     "does not support mode PAY"),
    (["--run", "latest", "--max-disk", "1MB", "--max-runtime", "0.5"], ">= 1"),
    (["--run", "latest", "--max-disk", "1MB", "--workload", "/nonexistent.json"],
     "does not exist"),
])
def test_bad_optimize_arguments_fail_in_one_line(home, capsys, args, msg):
    h, _ = home
    assert main(["optimize", "--home", str(h), *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1


def test_strategy_optimized_plans_from_the_catalog(home, spark, capsys):
    h, _ = home
    plan = plan_from_catalog(example(), h)
    assert set(plan) == {"calibrate", "smooth", "background", "residual", "bright"}
    assert all(v == ["map"] for v in plan.values())  # mapping operators keep their maps
    rc = main(["run", "example", "--param", f"shape={SHAPE}", "--strategy", "optimized",
               "--home", str(h), "--json"])
    assert rc == 0
    ran = json.loads(capsys.readouterr().out)
    assert {tuple(o["strategies"]) for o in ran["operators"]} == {("map",)}
    with pytest.raises(SubZeroError, match="run it once first"):
        plan_from_catalog(example(), h.parent / "empty-home")


def test_the_query_log_steers_the_udf_towards_the_queried_direction(spark, tmp_path):
    h = tmp_path / "home"
    # large enough that re-executing a tile (which queries now measure) clearly costs more
    # than a stored lookup, so the workload's direction decides
    wf = flare_workflow(shape=(400, 320))
    res = run_workflow(wf, h, strategy="blackbox", spark=spark, chunking=Chunking(split=2))
    run = Run(load_run(h, res.run))
    for k in range(3):  # forward queries from the flare input, logged
        run.forward([(10 * k + 3, 7)], start="lin", path=[("flare", 0)])
    fwd = optimize(wf, h, max_disk=10**9)
    assert fwd.workload.p("flare", "forward") == 1.0
    assert any(s.endswith("-fwd") for s in fwd.plan["flare"]), fwd.plan
    assert fwd.plan["lin"] == ["map"]
    for k in range(9):  # now mostly backward
        run.backward([(10 * k + 3, 7)], start="flare", path=[("flare", 0)])
    mixed = optimize(wf, h, max_disk=10**9)
    assert any(s.endswith("-bwd") for s in mixed.plan["flare"]), mixed.plan
    nothing = optimize(wf, h, max_disk=0)
    assert nothing.plan["flare"] == ["blackbox"]
    assert np.isclose(nothing.totals["disk"], 0)
