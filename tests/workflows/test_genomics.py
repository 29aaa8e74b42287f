"""The genomics workflow end to end: every strategy gives the same query answers."""

import numpy as np
import pytest

from optimizer.workload import from_queries
from subzero.api import Run
from subzero.engine.runner import run_workflow
from subzero.engine.runs import load_run
from subzero.errors import WorkflowError
from subzero.frontier import frontier
from subzero.query.paths import dag_steps
from workflows import genomics
from workflows.genomics_udfs import confusion

pytestmark = pytest.mark.spark
STRATEGIES = ("blackbox", "full-one", "full-many", "full-compact", "full-forw", "full-both",
              "pay-one", "pay-many", "pay-both")


def test_workflow_shape_plans_and_errors():
    wf = genomics.build(scale=2).validate()
    assert wf.order == ["names", "subsample", "transpose", "extract", "model", "predict",
                        "cumodds", "prob", "klass", "validate"]
    assert wf.array_shape("transpose")[0] == wf.params["patients"]
    assert sorted(wf.queries) == ["bad-hospital", "full", "high-likelihood", "relapse"]
    p = wf.plan("pay-both")
    assert [s.name for s in p["extract"]] == ["pay-one-bwd", "full-one-fwd"]
    assert [s.name for s in p["validate"]] == ["pay-one-bwd", "full-one-fwd"]
    assert [s.name for s in p["transpose"]] == ["map"]
    assert {s.name for n in ("extract", "model", "predict", "validate")
            for s in wf.plan("blackbox")[n]} == {"blackbox"}
    with pytest.raises(WorkflowError, match="scale must be an integer >= 1"):
        genomics.build(scale=0)
    with pytest.raises(WorkflowError, match="has no input 'tabel'"):
        genomics.build(inputs={"tabel": "x"})


def _answers(home, rid, method="auto"):
    run = Run(load_run(home, rid))
    return run, {name: run.named_query(name, method) for name in run.workflow.queries}


@pytest.mark.parametrize("data", ["generated", "real"])
def test_all_strategies_agree_on_every_named_query(spark, tmp_path, data, monkeypatch):
    if data == "real" and genomics.data_path() is None:
        pytest.skip("the real medulloblastoma table is not available")
    if data == "generated":  # even where the real table is present
        monkeypatch.setattr(genomics, "data_path", lambda: None)
    runs = {}
    for strategy in STRATEGIES:
        wf = genomics.build(scale=3, patients=40)
        res = run_workflow(wf, tmp_path, strategy=strategy, spark=spark)
        runs[strategy] = _answers(tmp_path, res.run)
    assert runs["blackbox"][0].workflow.params["data"] == ("file" if data == "real"
                                                            else "generated")
    (_, (base_run, base)), *rest = runs.items()
    for name, res in base.items():
        assert res.count > 0, name
        for strategy, (_, other) in rest:
            assert np.array_equal(res.mask, other[name].mask), (name, strategy)
    # the static (no query-time optimizer) choice gives the same cells too
    _, static = _answers(tmp_path, runs["pay-both"][0].id, method="stored")
    for name, res in static.items():
        assert np.array_equal(res.mask, base[name].mask), name
    # the model is useful: the confusion matrix agrees with a direct count
    run = runs["pay-one"][0]
    klass, truth = run.array("klass"), run.array("transpose")[:, run.workflow.ops[
        "validate"].truth_column]
    assert np.array_equal(run.array("validate"), confusion(klass[:, 0], truth))
    tp, fn, fp, tn = run.array("validate").ravel()
    assert (tp + tn) / (tp + fn + fp + tn) > 0.6
    # what `subzero run genomics` prints after the operator table
    import workflows

    (line,) = workflows.summary("genomics", run)
    acc = (tp + tn) / (tp + fn + fp + tn)
    assert f"training accuracy {acc:.3f} on {tp + fn + fp + tn:,} patients" in line


def test_a_workload_of_named_queries_counts_their_cells_from_a_loaded_run(spark, tmp_path,
                                                                          monkeypatch):
    """The optimizer's workload reads named-query cells from the engine's loaded run (it
    does not import the API): its first traversal holds the query's own cells."""
    monkeypatch.setattr(genomics, "data_path", lambda: None)
    res = run_workflow(genomics.build(scale=2, patients=30), tmp_path, strategy="blackbox",
                       spark=spark)
    loaded = load_run(tmp_path, res.run)
    for name in ("full", "relapse"):
        q = loaded.workflow.queries[name]
        want = int(frontier(loaded.workflow.array_shape(q.start),
                            Run(loaded).named_query_cells(name)).sum())
        w = from_queries([{"named": name}], loaded.workflow, run=loaded)
        first = dag_steps(loaded.workflow, q.direction, q.start, q.to)[0][0]
        assert want >= 1
        assert w.traversals[(first, q.direction)] == [(1.0, float(want))], name
