"""The Spark executor: output equals plain numpy for any chunking, the catalog records the
run, re-execution traces lineage, and a killed run leaves the catalog consistent."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from operators import UDF
from subzero.cells import Box
from subzero.chunking import Chunking
from subzero.engine import arrays, layout
from subzero.engine.catalog import Catalog
from subzero.engine.reexec import reexecute
from subzero.engine.runner import run_workflow
from subzero.engine.runs import load_run
from subzero.errors import StoreError, SubZeroError
from subzero.lineage import expand_pairs
from subzero.modes import Mode
from subzero.testing import run_chunked
from workflows import example

pytestmark = pytest.mark.spark
SHAPE = (61, 37)


@pytest.mark.parametrize("split", [1, 2, 7])
def test_example_equals_numpy_for_1_2_and_7_chunks_per_axis(spark, home, split):
    wf = example.build(shape=SHAPE, seed=3)
    res = run_workflow(wf, home, strategy="subzero", chunking=Chunking(split=split), spark=spark)
    run = load_run(home, res.run)
    ref = example.reference(example.generate_image(SHAPE, 3), np.full((1, 1), 200.0))
    for name, expect in ref.items():
        got = run.array(name)
        assert got.dtype == expect.dtype, name
        assert np.array_equal(got, expect), name  # bit-identical, halos included
    # chunked the way the tasks wrote it (a global operator's one task writes every chunk)
    arrays = run.arrays
    assert arrays["smooth"]["chunks"] == Chunking(split=split).chunk_shape(SHAPE)
    assert arrays["background"]["chunks"] == arrays["smooth"]["chunks"]


def test_catalog_contents_after_a_run(spark, home):
    wf = example.build(shape=SHAPE)
    res = run_workflow(wf, home, strategy="blackbox", chunking=Chunking(split=2), spark=spark)
    cat = Catalog(home / "catalog.sqlite")
    r = cat.run(res.run)
    assert r["status"] == "complete" and r["workflow"] == "example"
    assert r["params"] == {"shape": list(SHAPE), "seed": 0, "threshold": 200.0}
    assert r["runtime_s"] > 0 and r["input_bytes"] == SHAPE[0] * SHAPE[1] * 2 + 8
    assert r["plan"]["smooth"] == ["blackbox"]
    arrays = cat.arrays(res.run)
    assert set(arrays) == {"image", "threshold", "calibrate", "smooth", "background",
                           "residual", "bright"}
    assert arrays["bright"]["dtype"] == "bool" and arrays["bright"]["producer"] == "bright"
    ops = cat.operators(res.run)
    assert list(ops) == ["calibrate", "smooth", "background", "residual", "bright"]
    assert ops["smooth"]["parallelism"] == "stencil[1, 1]"
    assert ops["residual"]["inputs"] == ["smooth", "background"]
    assert set(ops["smooth"]["supported_modes"]) == {"MAP", "FULL", "BLACKBOX"}
    stats = cat.op_stats(res.run)
    assert stats["smooth"]["tasks"] == 4 and stats["background"]["tasks"] == 1
    assert all(s["runtime_s"] > 0 and s["runtime_nolineage_s"] <= s["runtime_s"]
               for s in stats.values())
    assert json.loads(json.dumps(res.to_json()))["operators"][1]["name"] == "smooth"


def test_run_directory_is_never_reused(spark, home):
    wf = example.build(shape=SHAPE)
    a = run_workflow(wf, home, spark=spark)
    b = run_workflow(wf, home, spark=spark)
    assert a.run != b.run
    with pytest.raises(StoreError, match="no overwrite"):
        arrays.create_array(layout.array_path(home, a.run, "smooth"), SHAPE, "f8", SHAPE)


def test_reexecution_traces_chosen_chunks_without_writing(spark, home):
    wf = example.build(shape=SHAPE)
    res = run_workflow(wf, home, chunking=Chunking(split=2), spark=spark)
    run = load_run(home, res.run)
    before = arrays.stored_bytes(layout.run_dir(home, res.run))
    got = reexecute(run, "smooth", chunks=[(1, 0)], where="driver")
    assert [r["chunk"] for r in got] == [(1, 0)]
    # the pairs are exactly the operator's own tracing of that chunk
    op = run.op("smooth")
    calib = arrays.read_array(run.array_path("calibrate"))
    _, full, _ = run_chunked(op, [calib], 2, (Mode.FULL,))
    box_cells = set(int(v) for v in got[0]["full"].out.values)
    want = {p for p in expand_pairs(full, 0) if p[0] in box_cells}
    assert expand_pairs(got[0]["full"], 0) == want
    on_spark = reexecute(run, "smooth", where="spark")
    assert sorted(r["chunk"] for r in on_spark) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert arrays.stored_bytes(layout.run_dir(home, res.run)) == before
    with pytest.raises(StoreError, match="has no chunk"):
        reexecute(run, "smooth", chunks=[(5, 5)])
    # any output box can be re-executed (queries re-run the tiles they touch)
    tile = reexecute(run, "smooth", boxes=[Box((3, 4), (5, 9))], where="driver")
    assert tile[0]["full"].out_cells == 10 and tile[0]["full"].in_cells == 10 * 9


class WrongBlock(UDF):
    """Returns a block of the wrong shape."""

    n_inputs = 1

    def run(self, ctx, x):
        return x[:1]


def test_failed_operator_marks_run_failed_with_one_line_error(spark, home):
    from subzero.workflow import Workflow

    Bad = WrongBlock
    wf = Workflow("bad")
    wf.input("a", (8, 8), source=lambda: np.zeros((8, 8)))
    wf.add("oops", Bad(), "a")
    with pytest.raises(SubZeroError, match="operator 'oops'.*returned a block of shape"):
        run_workflow(wf, home, spark=spark)
    r = Catalog(home / "catalog.sqlite").runs()[-1]
    assert r["status"] == "failed" and "oops" in r["error"]


def test_sigkill_mid_run_leaves_catalog_consistent_and_next_run_succeeds(home):
    env = dict(os.environ, SUBZERO_HOME=str(home), PYTHONUNBUFFERED="1")
    # as Spark jobs: long enough to be caught mid-run (in the driver it may end first)
    cmd = [sys.executable, "-m", "subzero.cli", "run", "example", "--param", "shape=1500x1500",
           "--chunks", "6", "--strategy", "full-one", "--master", "local[1]", "--where", "spark"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    db = home / "catalog.sqlite"
    deadline = time.time() + 120
    try:
        while time.time() < deadline:  # wait until the run is past its first operator
            if db.exists():
                cat = Catalog(db)
                try:
                    rows = cat.runs()
                    if rows and rows[-1]["status"] == "running" and cat.op_stats(rows[-1]["id"]):
                        break
                    if rows and rows[-1]["status"] != "running":
                        pytest.fail(f"run ended before it could be killed: {rows[-1]}")
                finally:
                    cat.close()
            time.sleep(0.05)
        else:
            pytest.fail("run never got going")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    cat = Catalog(db)
    r = cat.runs()[-1]
    assert r["status"] == "failed" and "interrupted" in r["error"]
    with pytest.raises(StoreError, match="failed"):
        load_run(home, r["id"])
    again = subprocess.run(
        [sys.executable, "-m", "subzero.cli", "run", "example", "--param", "shape=50x40",
         "--json", "--master", "local[1]"], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert Catalog(db).run(json.loads(again.stdout)["run"])["status"] == "complete"
