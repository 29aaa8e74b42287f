"""No silent waits: a run says on stderr where its inputs come from, that Spark is starting,
how far it is, and when its strategy stores nothing; stdout keeps only the table or the
JSON; ``quiet`` silences the Python API."""

import json

import pytest

import workflows
from subzero.api import Home
from subzero import display
from subzero.display import Lines, RunDisplay
from subzero.engine import runner, spark as engine_spark
from subzero.engine.runner import _say_inputs, _say_stores_nothing
from subzero.errors import SparkError
from tests.conftest import run_cli


def test_line_progress_says_how_many_operators_are_done():
    said = []
    bar = Lines(3, said.append, every=0.0)
    for name in ("a", "b", "c"):
        bar.set_description(name)
        bar.update(1)
    bar.close()
    # the last operator is not announced: the run's own summary follows at once
    assert said[0].startswith("1/3 operators done (a; ") and said[1].startswith("2/3")
    assert len(said) == 2
    quiet = []
    slow = Lines(3, quiet.append, every=3600.0)
    slow.update(1)
    assert quiet == []


def test_the_display_draws_what_the_runner_reports(monkeypatch):
    monkeypatch.setattr(display, "PROGRESS_EVERY_S", 0.0)
    said = []
    with RunDisplay(said.append) as shown:
        shown.notify("input x: generated")
        for done, name in enumerate(("", "a", "b", "c")):
            shown.progress(name, done, 3)
    assert said[0] == "input x: generated"
    assert [line.split(" (")[0] for line in said[1:]] == ["1/3 operators done",
                                                          "2/3 operators done"]
    assert said[1].startswith("1/3 operators done (a; ")


def test_inputs_are_said_one_line_each_and_constants_in_one():
    origins = {f"e{k}": {"kind": "workflow", "description": f"generated, seed {k}"}
               for k in range(8)}
    origins["mask"] = {"kind": "workflow", "description": "constant", "auxiliary": True}
    said = []
    _say_inputs(origins, said.append)
    assert said[0] == "input e0: generated, seed 0"
    assert said[runner.SAY_INPUTS] == ("... and 2 more inputs (0 from files; 'subzero show "
                                       "RUN' lists them)")
    assert said[-1] == "constant inputs of the workflow: mask"


@pytest.mark.parametrize("workflow, params, strategy, says", [
    ("example", {"shape": "8x8"}, "full-one", True),
    ("example", {"shape": "8x8"}, "pay-many", True),
    ("example", {"shape": "8x8"}, "subzero", False),  # mapping functions: its purpose
    ("example", {"shape": "8x8"}, "blackbox", False),
    ("astronomy", {"shape": "64x48"}, "full-one", False),  # its UDFs store Full lineage
])
def test_a_strategy_that_stores_nothing_says_so(workflow, params, strategy, says):
    wf = workflows.build(workflow, **params)
    said = []
    _say_stores_nothing(wf, strategy, wf.plan(strategy), said.append)
    assert bool(said) == says
    if says:
        assert said[0].startswith(f"strategy {strategy} stores no lineage for workflow "
                                  f"'{workflow}'")


def test_spark_start_is_announced_only_once_the_master_is_checked(monkeypatch, tmp_path):
    # as if this process ran no Spark yet (the shared session comes back afterwards)
    monkeypatch.setattr(engine_spark, "_session", None)
    monkeypatch.setattr(engine_spark, "_master", None)
    said = []
    with pytest.raises(SparkError, match="bad Spark master"):
        engine_spark.get_spark("locl", tmp_path, notify=said.append)
    assert said == []

    def no_jvm(*args, **kwargs):
        raise RuntimeError("no JVM in this test")

    import pyspark.java_gateway

    monkeypatch.setattr(pyspark.java_gateway, "launch_gateway", no_jvm)
    with pytest.raises(SparkError, match="no JVM in this test"):
        engine_spark.get_spark("local[1]", tmp_path, notify=said.append)
    assert said == ["starting Spark (local[1])..."]


def test_cli_run_talks_on_stderr_and_keeps_json_stdout_clean(tmp_path):
    p = run_cli("run", "example", "--param", "shape=40x30", "--strategy", "full-one",
                "--master", "local[1]", "--where", "spark", "--home", str(tmp_path / "h"),
                "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)  # nothing but the JSON on stdout
    assert doc["lineage_bytes"] == 0
    lines = p.stderr.strip().splitlines()
    assert "subzero: starting Spark (local[1])..." in lines, p.stderr
    assert any(line.startswith("subzero: input image: ") for line in lines)
    assert any(line.startswith("subzero: strategy full-one stores no lineage for workflow "
                               "'example'") for line in lines)


@pytest.mark.spark
def test_python_api_run_talks_unless_quiet(spark, home, capsys, monkeypatch):
    monkeypatch.setattr(display, "PROGRESS_EVERY_S", 0.0)
    Home(home).run("example", strategy="full-one", shape="40x30", chunks="2")
    out, err = capsys.readouterr()
    assert out == ""
    assert "subzero: input image: " in err
    assert "subzero: strategy full-one stores no lineage" in err
    assert "operators done" in err  # stderr is not a terminal: lines, not a bar
    Home(home).run("example", strategy="full-one", shape="40x30", quiet=True)
    assert capsys.readouterr() == ("", "")
    monkeypatch.setenv("SUBZERO_QUIET", "1")
    Home(home).run("example", shape="40x30")
    assert capsys.readouterr().err == ""
