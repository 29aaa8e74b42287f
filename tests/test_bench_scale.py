"""benchmarks/bench_scale.py: configurations, the numpy reference, slopes, honest targets,
and (slow) the quick benchmark end to end through ``subzero bench scale``."""

import doctest
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from subzero.testing import run_chunked

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_scale as bs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_configurations_share_the_1x_one_ccd_run():
    cfgs = bs.configurations((2001, 513), [1, 2, 4, 8], [1, 4, 16])
    assert [c.name for c in cfgs] == ["1x", "4x", "16x", "64x", "1x-ccds4", "1x-ccds16"]
    assert [c.factor for c in cfgs] == [1, 4, 16, 64, 4, 16]
    assert cfgs[3].shape == (16008, 4104) and cfgs[3].exposure_bytes == 16008 * 4104 * 2
    # ccds is passed only when above 1, so a workflow without it still runs the shapes
    assert cfgs[0].params() == {"shape": "2001x513"}
    assert cfgs[4].params() == {"shape": "2001x513", "ccds": "4"}


def test_reference_runs_every_kernel_on_whole_arrays_like_the_executor():
    cfg = bs.configurations((64, 48), [1], [1])[0]
    ref = bs.Reference(cfg)
    ref.measure()
    assert ref.keep == {"clust"} and ref.times[0] > 0
    # the same operators chunk by chunk (no Spark): the same final array
    wf, arrays = ref.wf, dict(ref.inputs)
    for name in wf.order:
        op = wf.ops[name]
        arrays[name], _, _ = run_chunked(op, [arrays[s] for s in wf.nodes[name].inputs],
                                         split=2)
    assert np.array_equal(arrays["clust"], ref.outputs["clust"])
    # intermediates are dropped after their last reader
    dropped = [n for names in ref.drop for n in names]
    assert sorted(dropped) == sorted([*wf.inputs, *wf.order])


def test_reference_in_a_fresh_process_times_generation_and_kernels_apart():
    cfg = bs.Config("small", 1, (120, 64), 1, 120 * 64)
    one = bs.reference_process(cfg)
    assert one["runtime_s"] > 0 and one["generate_s"] > 0 and one["cpu_s"] > 0
    assert (one["host_reclaimed_bytes"] is None) == (bs.host_reclaimed() is None)
    two = bs.summarize_references([one, {**one, "runtime_s": 3.0, "generate_s": 1.0}])
    assert two["times"] == [one["runtime_s"], 3.0] and len(two["runs"]) == 2
    assert math.isclose(two["with_inputs_s"],
                        (one["runtime_s"] + one["generate_s"] + 4.0) / 2)
    # a child that fails is a configuration that could not be measured, with its reason
    with pytest.raises(bs.BenchError, match="numpy reference failed .*shape must be"):
        bs.reference_process(bs.Config("tiny", 1, (4, 4), 1, 16))


@pytest.mark.parametrize("spark", [True, False])
def test_every_strategy_comes_after_the_same_runs_as_the_other(spark):
    """The place matters on this machine (a run right after the Spark run is quicker): over
    every even count of repeats, the black box and subzero each come after the same runs,
    and the fresh-process reference takes every place."""
    def seen(before, other):  # the other strategy's name as one word for both
        return sorted("the other" if b == other else str(b) for b in before)

    for n in (2, 4, 6, 8, 10, 12):
        got = bs.predecessors(n, spark)
        assert seen(got["blackbox"], "subzero") == seen(got["subzero"], "blackbox"), (n, got)
    eight = bs.predecessors(8)
    assert eight["blackbox"].count(bs.ON_SPARK) == eight["subzero"].count(bs.ON_SPARK) == 3
    assert {tuple(bs.repeat_order(r)).index(bs.NUMPY) for r in range(8)} == {0, 1, 2, 3}
    for r in range(12):
        order = bs.repeat_order(r)
        assert sorted(order) == sorted([*bs.STRATEGIES, bs.ON_SPARK, bs.NUMPY])


def test_slope_and_ccd_choice():
    assert math.isclose(bs.fit_slope([4, 16, 64], [1, 4, 16]), 1.0)
    assert math.isclose(bs.fit_slope([4, 16, 64], [3, 3, 3]), 0.0, abs_tol=1e-12)
    assert bs.fit_slope([4], [1]) is None and bs.fit_slope([4, 16], [1, None]) is None
    names = [f"c{k}.{q}" for k in range(1, 17) for q in bs.QUERIES]
    picks = bs.ccd_prefixes(names, 16)
    assert picks[0] == "c1." and len(picks) == 2 and picks[1] != "c1."
    assert bs.ccd_prefixes(names, 16) == picks  # seeded
    assert bs.ccd_prefixes(list(bs.QUERIES), 4) == [""]  # no prefixes: the plain names
    assert doctest.testmod(bs).failed == 0


def _row(name, k, ccds, bb, sz, npy, bq=0.002, fq=0.0003, rss=100e6, overhead=3.0):
    cells = 2001 * 513 * k * k * ccds
    queries = [{"query": q, "kind": q, "median_s": bq if q.startswith("BQ") else fq}
               for q in bs.QUERIES]
    return {"name": name, "k": k, "ccds": ccds, "cells": cells, "factor": k * k * ccds,
            "blackbox": {"runtime_s": bb}, "subzero": {"runtime_s": sz},
            "numpy": {"runtime_s": npy}, "executor_over_numpy": bb / npy,
            "subzero_over_blackbox": sz / bb, "lineage_over_input": 0.07,
            "driver_peak_rss": rss, "rss_over_exposure": rss / (2001 * 513 * k * k * 2),
            "cli_overhead_s": overhead, "queries": queries}


def test_targets_are_evaluated_from_the_figures():
    rows = [_row("1x", 1, 1, 4.0, 4.4, 1.0), _row("4x", 2, 1, 8.0, 8.0, 4.0),
            _row("16x", 4, 1, 20.0, 20.5, 16.0, bq=0.006),
            _row("64x", 8, 1, 80.0, 81.0, 64.0, rss=200e6, overhead=5.0),
            _row("1x-ccds4", 1, 4, 10.0, 10.0, 4.0, fq=0.002)]
    fitted = bs.slopes(rows)
    assert fitted["shape"]["factors"] == [4, 16, 64]
    assert fitted["ccds"]["factors"] == [1, 4]
    t = bs.targets(rows, fitted)
    assert set(t) == {key for key, _, _ in bs.TARGETS}
    assert t["executor_over_numpy_1x"] == {**t["executor_over_numpy_1x"], "value": 4.0,
                                           "met": True, "at": "1x"}
    assert t["executor_over_numpy_16x_plus"]["value"] == 1.25
    assert t["executor_over_numpy_16x_plus"]["at"] == "16x"
    assert "note" not in t["executor_over_numpy_16x_plus"]  # no in-process reference
    rows[2]["executor_over_numpy_in_process"] = 2.5
    rows[3]["executor_over_numpy_in_process"] = 2.0
    noted = bs.targets(rows, fitted)["executor_over_numpy_16x_plus"]
    assert noted["value"] == 1.25 and noted["met"] and "own process" in noted["note"]
    assert "2.50x" in noted["note"]
    assert t["subzero_over_blackbox"]["at"] == "1x" and not t["subzero_over_blackbox"]["met"]
    assert t["bq_median_s"]["value"] == 0.006 and not t["bq_median_s"]["met"]
    assert t["fq0_median_s"]["at"] == "1x-ccds4:FQ0" and not t["fq0_median_s"]["met"]
    assert t["runtime_slope"]["met"] and "note" not in t["runtime_slope"]
    assert t["driver_rss_over_exposure"]["at"] == "64x"
    assert math.isclose(t["driver_rss_over_exposure"]["value"], 200e6 / (16008 * 4104 * 2))
    assert t["driver_rss_over_exposure"]["met"] and not t["cli_overhead_s"]["met"]
    # nothing at 16x: not measured, not met
    small = bs.targets(rows[:2], bs.slopes(rows[:2]))
    assert small["executor_over_numpy_16x_plus"]["met"] is None
    assert "note" in small["runtime_slope"] and "note" in small["driver_rss_over_exposure"]


def _positive(d, keys):
    for k in keys:
        assert d[k] is not None and d[k] > 0, (k, d.get(k))


@pytest.mark.slow
def test_quick_benchmark_reports_every_configuration_and_the_targets(tmp_path):
    out, png = tmp_path / "scale.json", tmp_path / "png"
    p = subprocess.run([sys.executable, "-m", "subzero.cli", "bench", "scale", "--quick",
                        "--out", str(out), "--png", str(png)], cwd=ROOT,
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert json.loads(p.stdout) == doc
    assert doc["benchmark"] == "scale" and doc["quick"]
    rows = {r["name"]: r for r in doc["configurations"]}
    skipped = {s["name"]: s for s in doc["skipped"]}
    assert set(rows) | set(skipped) == {"1x", "4x", "1x-ccds2"}
    # only a CCD configuration may be skipped (a workflow without --param ccds), with why
    assert {"1x", "4x"} <= set(rows)
    for s in skipped.values():
        assert s["ccds"] > 1 and "ccds" in s["reason"]
    for r in rows.values():
        assert r["cells"] == r["shape"][0] * r["shape"][1] * r["ccds"]
        for strategy in ("blackbox", "subzero"):
            _positive(r[strategy], ("runtime_s", "wall_s", "input_bytes", "driver_peak_rss",
                                    "cli_peak_rss", "stages"))
            assert r[strategy]["wall_s"] > r[strategy]["runtime_s"]
        assert r["subzero"]["lineage_bytes"] > 0
        # a small run goes to the CLI's own process; the black box is then timed on Spark too
        assert r["blackbox"]["where"] in (["driver"], ["spark"])
        if r["blackbox"]["where"] == ["driver"]:
            assert r["blackbox_on_spark"]["where"] == ["spark"]
            assert r["spark_over_numpy"] > 0
        else:
            assert r["blackbox_on_spark"] is None
        # the reference in fresh processes (one per repeat, as the runs) and in this one
        _positive(r["numpy"], ("runtime_s", "generate_s", "cpu_s", "with_inputs_s"))
        assert len(r["numpy"]["runs"]) == r["repeat"] == len(r["blackbox"]["times"])
        assert r["numpy"]["with_inputs_s"] > r["numpy"]["runtime_s"]
        _positive(r["numpy_in_process"], ("runtime_s", "generate_s"))
        assert math.isclose(r["executor_over_numpy"],
                            r["blackbox"]["runtime_s"] / r["numpy"]["runtime_s"])
        assert math.isclose(r["executor_over_numpy_in_process"],
                            r["blackbox"]["runtime_s"] / r["numpy_in_process"]["runtime_s"])
        # what the machine handed back to its host during the runs: a count, or None on
        # a kernel that does not report (each run says its own)
        reported = bs.host_reclaimed() is not None
        for part in (r["blackbox"], r["subzero"], r["numpy"], r["numpy_in_process"]):
            got = part["host_reclaimed_bytes"]
            assert (got >= 0) if reported else got is None
        for run in r["blackbox"]["times"]:
            assert ("host_reclaimed_bytes" in run
                    and (run["host_reclaimed_bytes"] is None) != reported)
        _positive(r, ("executor_over_numpy", "subzero_over_blackbox", "lineage_over_input",
                      "rss_over_exposure", "cli_overhead_s"))
        assert r["matches_executor"] is True
        kinds = [q["kind"] for q in r["queries"]]
        assert kinds[:6] == list(bs.QUERIES)
        if r["ccds"] > 1:  # CCD 1's queries and another CCD's
            assert [q["ccd"] for q in r["queries"]][:1] == ["c1"] and len(kinds) == 12
        for q in r["queries"]:
            assert "error" not in q, q
            _positive(q, ("median_s", "p95_s", "first_s"))
            assert q["p95_s"] >= q["median_s"]
    assert set(doc["slopes"]) == {"shape", "ccds"}
    assert doc["slopes"]["shape"]["blackbox_runtime"] is not None
    assert set(doc["targets"]) == {key for key, _, _ in bs.TARGETS}
    for key, t in doc["targets"].items():
        assert {"limit", "value", "met", "at", "target"} <= set(t), key
        if t["value"] is None:
            assert t["met"] is None, key
        else:  # met says what the value says, whatever the value
            strict = key == "driver_rss_over_exposure"
            assert t["met"] == (t["value"] < t["limit"] if strict else t["value"] <= t["limit"])
    assert (png / "scale.png").read_bytes().startswith(b"\x89PNG")


def test_a_configuration_the_workflow_refuses_is_skipped_before_any_run(tmp_path):
    bad = bs.Config("tiny", 1, (4, 4), 1, 16)  # astronomy wants at least 8 x 8
    with pytest.raises(bs.BenchError, match="the workflow refuses .*shape must be"):
        bs.measure(bad, tmp_path, 1, 1, None, print)
    assert not list(tmp_path.iterdir())


def test_query_blocks_pool_their_times(monkeypatch):
    """Queries timed in blocks (one after each repeat) report the median and p95 of every
    block's times, the cold call of the first block, and a query that failed stays failed."""
    blocks = iter([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])

    def fake(run, name, repeat, first=True):
        if name == "BQ1":
            raise bs.SubZeroError("no star")
        times = next(blocks) if name == "BQ0" else [0.5] * repeat
        return {"median_s": float(np.median(times)), "p95_s": max(times), "times": times,
                "count": 3, "array": "a", "methods": [], **({"first_s": 9.0} if first else {})}

    class FakeRun:
        class workflow:
            queries = {q: None for q in bs.QUERIES}

    monkeypatch.setattr(bs, "time_query", fake)
    one = bs.time_queries(FakeRun(), 1, 3)
    both = bs.time_queries(FakeRun(), 1, 3, one)
    bq0 = both[0]
    assert bq0["times"] == [1.0, 2.0, 3.0, 10.0, 20.0, 30.0] and bq0["median_s"] == 6.5
    assert bq0["first_s"] == 9.0 and bq0["blocks"] == 2
    assert both[1]["error"] == "no star"


def test_host_reclaimed_reads_the_kernels_counter_in_bytes(tmp_path, monkeypatch):
    counter = tmp_path / "reported_kib"
    counter.write_text("1536\n")
    monkeypatch.setattr(bs, "REPORTED_KIB", counter)
    assert bs.host_reclaimed() == 1536 * 1024
    before = bs.host_reclaimed()
    counter.write_text("1600\n")
    assert bs._reclaimed_since(before) == 64 * 1024
    assert bs._reclaimed_since(None) is None
    monkeypatch.setattr(bs, "REPORTED_KIB", tmp_path / "absent")
    assert bs.host_reclaimed() is None and bs._reclaimed_since(before) is None
    assert bs._median_known([None, 4, 2, None, 9]) == 4 and bs._median_known([None]) is None


def test_retire_empties_a_home_and_keeps_its_inodes(tmp_path):
    """A measured home's files lose their bytes; its files and folders stay (no inode is
    freed between runs), for the benchmark's end to remove."""
    home = tmp_path / "h"
    (home / "runs" / "r1" / "lineage").mkdir(parents=True)
    (home / "catalog.sqlite").write_bytes(b"x" * 5000)
    (home / "runs" / "r1" / "lineage" / "data.mdb").write_bytes(b"y" * 7000)
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    bs.retire(home)
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before
    assert all(p.stat().st_size == 0 for p in home.rglob("*") if p.is_file())


@pytest.mark.parametrize("bad", ["0", "-2", "x"])
def test_a_repeat_that_is_not_a_positive_integer_exits_2_naming_it(bad, capsys):
    with pytest.raises(SystemExit) as e:
        bs.main(["--quick", "--repeat", bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"expected a positive integer, got {bad!r}" in err
