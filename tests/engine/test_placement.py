"""Where a run executes: the placement model, and runs in the driver process that write what
Spark jobs write (arrays, shards, query answers), without starting Spark."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from operators.base import UDF
from operators.elementwise import Logistic
from operators.stencils import Convolve, MedianFilter
from subzero.api import Run
from subzero.chunking import Chunking
from subzero.engine import placement
from subzero.engine.placement import DRIVER_MAX_STAGE_CELLS, check_where, place
from subzero.engine.runner import run_workflow
from subzero.engine.runs import load_run
from subzero.engine.spark import local_cores
from subzero.errors import SubZeroError
from subzero.workflow import Workflow
from tests.conftest import ROOT, assert_same_runs, run_cli
from workflows import astronomy

SMALL = [1_000_000] * 17  # a 2001 x 513 exposure pair: 69 M cells over 17 stages


def test_a_small_run_on_a_local_master_goes_to_the_driver_a_large_one_to_spark():
    small = place("auto", SMALL, 13, 2, local=True, warm=False)
    assert small.where == "driver" and small.driver_s < small.spark_s
    assert "M cells" in small.why
    large = place("auto", [250_000_000] * 17, 13, 2, local=True, warm=False)
    assert large.where == "spark" and large.spark_s < large.driver_s


def test_a_warm_session_lowers_the_bar_for_the_driver():
    # the cold start is what makes the driver worth it for a mid-sized run: on two cores,
    # Spark's workers save what the driver's threads lose to the GIL; here that is its jobs'
    # cost plus half a cold start
    saved = 13 * placement.SPARK_JOB_S + placement.SPARK_FIRST_S / 2
    per_cell = placement.DRIVER_S_PER_CELL * (1 / placement.driver_speedup(2) - 1 / 2)
    cells = [int(saved / per_cell / 17)] * 17
    assert place("auto", cells, 13, 2, local=True, warm=False).where == "driver"
    assert place("auto", cells, 13, 2, local=True, warm=True).where == "spark"


def test_a_cluster_master_always_gets_spark_jobs_under_auto():
    p = place("auto", [10] * 3, 3, 2, local=False, warm=False)
    assert p.where == "spark" and "cluster" in p.why


def test_the_driver_never_runs_a_stage_larger_than_its_cap_under_auto():
    p = place("auto", [DRIVER_MAX_STAGE_CELLS + 1], 1, 1, local=True, warm=False)
    assert p.where == "spark" and f"{DRIVER_MAX_STAGE_CELLS:,}" in p.why


@pytest.mark.parametrize("where", ["spark", "driver"])
def test_an_explicit_where_is_obeyed(where):
    assert place(where, SMALL, 13, 2, local=True, warm=False).where == where
    assert place(where, [10**9], 1, 2, local=False, warm=True).where == where


def test_a_bad_where_is_one_line_naming_it():
    with pytest.raises(SubZeroError, match=r"where 'gpu': expected one of auto, spark, driver"):
        check_where("gpu")


@pytest.mark.parametrize("master, cores", [
    ("local", 1), ("local[3]", 3), ("local[2,4]", 2), ("local[*]", len(os.sched_getaffinity(0))),
    ("local[*,4]", len(os.sched_getaffinity(0))), ("spark://127.0.0.1:7077", None),
    ("yarn", None)])
def test_local_cores_is_the_parallelism_spark_gives_a_local_master(master, cores):
    assert local_cores(master) == cores


@pytest.mark.spark
def test_a_driver_run_writes_what_spark_jobs_write_and_answers_alike(spark, home):
    """The same workflow, chunking and strategy in the driver and as Spark jobs: every
    array, every shard's pairs and bytes, and every named query's answer are equal."""
    ch = Chunking(split=(3, 1))
    wf = astronomy.build(shape=(120, 48), seed=3)
    on_spark = run_workflow(wf, home, strategy="subzero", chunking=ch, spark=spark)
    here = run_workflow(astronomy.build(shape=(120, 48), seed=3), home, strategy="subzero",
                        chunking=ch, where="driver")
    assert on_spark.placement.where == "spark" and here.placement.where == "driver"
    assert_same_runs(home, on_spark.run, here.run, wf)
    assert any(o["lineage_bytes"] for o in here.operators)  # shards were compared
    qa, qb = Run(load_run(home, on_spark.run)), Run(load_run(home, here.run))
    for q in wf.queries:
        assert np.array_equal(qa.named_query(q).linear, qb.named_query(q).linear), q


@pytest.mark.spark
def test_a_session_handed_to_the_run_is_used(spark, home):
    res = run_workflow(astronomy.build(shape=(40, 24)), home, strategy="blackbox",
                       spark=spark)
    assert res.placement.where == "spark"


def test_the_cli_runs_a_small_workflow_in_its_own_process_without_starting_spark(tmp_path):
    home = tmp_path / "h"
    env = {k: v for k, v in os.environ.items() if k != "SUBZERO_SPARK_MASTER"}
    code = ("import sys, json; from subzero.cli.main import main; rc = main(['run', "
            "'astronomy', '--param', 'shape=200x64', '--home', sys.argv[1], '--json']); "
            "print(json.dumps(sorted(m for m in ('pyspark', 'zarr') "
            "if m in sys.modules)), file=sys.stderr); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True,
                       text=True, env=env, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert out["placement"]["where"] == "driver", out["placement"]
    assert "running in this process, not as Spark jobs" in p.stderr
    assert "starting Spark" not in p.stderr
    # no session (pyspark not even imported), and zarr was not needed to create the arrays
    assert json.loads(p.stderr.strip().splitlines()[-1]) == []
    assert not (home / "logs" / "spark.log").exists()
    run = load_run(home, out["run"])
    assert run.array("clust").shape == (200, 64)
    # the catalog keeps where the run executed, and `subzero show` says it
    shown = run_cli("show", out["run"], "--home", str(home))
    assert shown.returncode == 0, shown.stderr
    assert "executed in the driver's own process: " in shown.stdout
    shown = run_cli("show", out["run"], "--home", str(home), "--json")
    assert json.loads(shown.stdout)["run"]["placement"] == out["placement"]


@pytest.mark.slow
def test_the_cli_where_spark_forces_spark_jobs(tmp_path):
    p = run_cli("run", "astronomy", "--param", "shape=100x48", "--home", str(tmp_path / "h"),
                "--strategy", "blackbox", "--where", "spark", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["placement"]["where"] == "spark"
    assert "starting Spark" in p.stderr
    shown = run_cli("show", "latest", "--home", str(tmp_path / "h"))
    assert "executed as Spark jobs (local[*,4]): asked for spark" in shown.stdout


def test_the_cli_refuses_a_bad_where_in_one_line(tmp_path):
    p = run_cli("run", "example", "--home", str(tmp_path / "h"), "--where", "gpu")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "gpu" in lines[0] and "Traceback" not in p.stderr


def test_spark_jobs_counts_the_jobs_the_executor_batches():
    """Stages ready together on the same chunk grid share a job (the CCDs of a visit);
    global stages take one each; stages run on the driver take none."""
    from subzero.engine.runner import _stage_cells, combined_ops, spark_jobs
    from subzero.engine.stages import plan_stages

    def jobs(combine=False, **params):
        wf = astronomy.build(shape=(120, 48), **params)
        wf.validate()
        chunked = {n for n, spec in wf.inputs.items() if spec.blocks is not None}
        chunking = Chunking().with_tasks(2)
        both = combined_ops(wf, chunking, wf.plan("subzero"), chunked) if combine else set()
        stages = plan_stages(wf, chunked, chunking.chunk_shape, combined=both)
        return len(stages), spark_jobs(stages, [_stage_cells(wf, st, both) for st in stages])

    assert jobs() == (17, 8)
    n16, j16 = jobs(ccds=16)
    # the five batched jobs stay five; three global stages per CCD (two background
    # means, the star labels) take one each
    assert n16 == 212 and j16 == (8 - 3) + 3 * 16
    # the background means combined from their input's chunks: no global stage of their
    # own, their steps batched with the other CCDs'; the star labels one job per CCD
    assert jobs(combine=True) == (15, 6)
    assert jobs(combine=True, ccds=16) == (180, 5 + 16)


@pytest.mark.spark
def test_the_driver_runs_each_stage_as_its_own_group(spark, home, monkeypatch):
    """Stages ready at once batch into one Spark job, but not in the driver, where a
    batch's chunk would hold every stage's blocks at once (16 CCDs: 655 MB, not 150 MB)."""
    from subzero.engine import runner

    labels = {"driver": [], "spark": []}
    real = runner._run_stage_jobs

    def spy(spark_, jobs, label, **kw):
        if len(label.split(": ", 1)[1]) > 3:  # not the 1 x 1 overscans
            labels["driver" if spark_ is None else "spark"].append(label)
        return real(spark_, jobs, label, **kw)

    monkeypatch.setattr(runner, "_run_stage_jobs", spy)
    run_workflow(astronomy.build(shape=(120, 48), ccds=2), home, strategy="blackbox",
                 where="driver")
    assert labels["driver"] and not any(";" in lb for lb in labels["driver"])
    run_workflow(astronomy.build(shape=(120, 48), ccds=2), home, strategy="blackbox",
                 spark=spark)
    assert any(";" in lb for lb in labels["spark"])  # the two CCDs' stages together


@pytest.mark.spark
def test_a_run_without_a_session_handed_over_uses_and_records_the_running_one(
        spark, home, capsys):
    """With a session running, a run asked to use Spark uses that session and records its
    master, even when another one was asked for (one session per process, as it says)."""
    from subzero.engine.catalog import Catalog

    master = spark.sparkContext.master
    res = run_workflow(astronomy.build(shape=(40, 24)), home, strategy="blackbox",
                       where="spark", master="local[3]")
    assert res.placement.where == "spark"
    assert f"Spark already runs with master {master}; ignoring local[3]" in capsys.readouterr().err
    cat = Catalog(home / "catalog.sqlite")
    try:
        assert cat.run(res.run)["master"] == master
    finally:
        cat.close()



class _NeedsProbe(UDF):
    """1 where the probe module was imported before this task ran, else 0."""

    n_inputs = 1
    imports = ("tests._import_probe", "subzero_no_such_module")

    def output_dtype(self, in_dtypes):
        return np.dtype("int64")

    def run(self, ctx, x):
        return np.full(x.shape, int("tests._import_probe" in sys.modules), dtype=np.int64)


def test_a_driver_run_imports_its_kernels_modules_before_its_clock_starts(home):
    """A run in the driver imports what its operators declare in ``imports`` before it
    starts (Spark's workers import them in their first task); a module that does not
    import is left to the kernel: here the kernel does not need it and the run completes."""
    sys.modules.pop("tests._import_probe", None)
    wf = Workflow("probe")
    wf.input("a", (6, 4), source=lambda: np.zeros((6, 4)))
    wf.add("p", _NeedsProbe(), "a")
    res = run_workflow(wf, home, strategy="blackbox", where="driver")
    assert res.placement.where == "driver"
    assert np.array_equal(Run(load_run(home, res.run)).array("p"), np.ones((6, 4)))
    assert "subzero_no_such_module" not in sys.modules


_CLOCKED_IMPORTS = """
import sys
import numpy as np
from operators.elementwise import Unary
from subzero.engine import runner
from subzero.workflow import Workflow

# what the run imports while its clock runs: from its first step after the clock starts
# (writing the manifest) to its last (recording the run as finished)
seen = {}
save, finish = runner.write_manifest, runner._finish

def saving(*args):
    seen["start"] = set(sys.modules)
    return save(*args)

def finishing(*args):
    seen["end"] = set(sys.modules)
    return finish(*args)

runner.write_manifest, runner._finish = saving, finishing
wf = Workflow("w")
wf.input("a", (6, 4), source=lambda: np.ones((6, 4)))
wf.add("b", Unary("negative"), "a")
print("before:", "numcodecs" in sys.modules)
runner.run_workflow(wf, sys.argv[1], strategy="blackbox", where="driver")
print("during:", ",".join(sorted(seen["end"] - seen["start"])))
"""


def test_a_driver_run_loads_the_array_codecs_before_its_clock_starts(tmp_path):
    """Writing the first chunk loads numcodecs (26 ms) and makes Blosc's lock (7 ms more):
    a run does that before its clock starts, in a fresh process as the CLI's."""
    out = subprocess.run([sys.executable, "-c", _CLOCKED_IMPORTS, str(tmp_path / "h")],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "before: False" in out  # else this test would prove nothing
    during = out.split("during:", 1)[1].strip().split(",")
    assert not [m for m in during if m.startswith(("numcodecs", "multiprocessing"))], during


def test_the_slow_imports_of_the_shipped_kernels_are_declared():
    """Every shipped operator whose kernel imports scipy says so (a run in the driver would
    otherwise pay the import inside its clock, on the critical path)."""
    ops = astronomy.build(shape=(40, 24)).validate().ops
    assert ops["clust"].imports == ("scipy.ndimage",)
    assert Convolve(np.ones((3, 3))).imports == MedianFilter(1).imports == ("scipy.ndimage",)
    assert Logistic().imports == ("scipy.special",)


class _HeapProbe(UDF):
    """The bytes a block of ``mb`` MB adds to glibc's directly mapped blocks
    (``mallinfo2``'s ``hblkhd``) while the task runs: 0 when it comes from a heap."""

    n_inputs = 1

    def __init__(self, mb=48):
        super().__init__()
        self.mb = mb

    def output_dtype(self, in_dtypes):
        return np.dtype("int64")

    def run(self, ctx, x):
        return np.full(x.shape, _mapped_by(self.mb << 20), dtype=np.int64)


def _mapped_by(nbytes):
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
            .split())]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
    before = libc.mallinfo2().hblkhd
    block = np.ones(nbytes // 8)
    grown = libc.mallinfo2().hblkhd - before
    del block
    return int(grown)


_HEAP_SCRIPT = """
import sys, tempfile
import numpy as np
sys.path.insert(0, '.')
from subzero.engine.runner import run_workflow
from subzero.chunking import Chunking
from subzero.workflow import Workflow
from subzero.api import Run
from subzero.engine.runs import load_run
from tests.engine.test_placement import _HeapProbe, _mapped_by
home = tempfile.mkdtemp()
wf = Workflow('heap')
wf.input('a', (2, 2), source=lambda: np.zeros((2, 2)))
wf.add('p', _HeapProbe(), 'a')
wf.add('q', _HeapProbe(96), 'p')
# one task each, q after p: each probe alone in the process while it measures
res = run_workflow(wf, home, strategy='blackbox', where='driver', chunking=Chunking(split=1))
run = Run(load_run(home, res.run))
print(int(run.array('p')[0, 0]), int(run.array('q')[0, 0]), _mapped_by(48 << 20))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
@pytest.mark.parametrize("malloc", ["", "default"])
def test_a_driver_run_keeps_freed_memory_as_a_worker_does_while_it_runs(malloc):
    """In the driver's own process, a run's tasks take large blocks from the heap, as Spark's
    workers do (a fresh mapping is faulted in page by page), blocks larger than a thread's
    own arena can grow to (64 MB) too: the task threads share the main arena. After the
    run glibc's steady state is back (a 48 MB block is mapped again);
    ``SUBZERO_WORKER_MALLOC=default`` leaves glibc's own settings throughout."""
    env = {**os.environ, "SUBZERO_WORKER_MALLOC": malloc}
    out = subprocess.run([sys.executable, "-c", _HEAP_SCRIPT], capture_output=True, text=True,
                         env=env, cwd=ROOT, check=True).stdout.split()
    during, during_large, after = (int(v) for v in out)
    assert after >= 48 << 20
    if malloc == "":
        assert during == during_large == 0
    else:
        assert during >= 48 << 20 and during_large >= 96 << 20


class _Threads(UDF):
    """Each chunk's cells: 1 if its task ran on a task thread of the driver's pool."""

    n_inputs = 1
    names: set = set()

    def output_dtype(self, in_dtypes):
        return np.dtype("int64")

    def run(self, ctx, x):
        import threading
        import time

        name = threading.current_thread().name
        _Threads.names.add(name)
        time.sleep(0.05)  # both chunks in flight at once, when they run on two threads
        return np.full(x.shape, int(name.startswith("subzero-task")), dtype=np.int64)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: one task thread")
def test_a_stage_alone_in_the_driver_runs_its_chunks_on_every_core(home):
    """A stage with no other stage beside it (here the only one) runs its chunks on the
    driver's task threads, one per core, not one after the other on its stage's thread."""
    _Threads.names = set()
    wf = Workflow("threads")
    wf.input("a", (8, 4), source=lambda: np.zeros((8, 4)))
    wf.add("t", _Threads(), "a")
    res = run_workflow(wf, home, strategy="blackbox", where="driver", master="local[2]",
                       chunking=Chunking(split=(4, 1)))
    assert np.array_equal(Run(load_run(home, res.run)).array("t"), np.ones((8, 4)))
    assert len(_Threads.names) == 2, _Threads.names


@pytest.mark.parametrize("imports, expected", [("scipy.ndimage", ("scipy.ndimage",)),
                                               (["json"], ("json",))])
def test_imports_take_one_module_name_or_several(imports, expected):
    op = type("Op", (_NeedsProbe,), {"imports": imports})()
    assert op.bind("p", [(2, 2)], ["float64"]).imports == expected


@pytest.mark.parametrize("bad", [(1,), ("",), None])
def test_bad_imports_are_one_line_naming_the_operator_and_the_value(bad):
    from subzero.errors import WorkflowError

    op = type("Op", (_NeedsProbe,), {"imports": bad})()
    with pytest.raises(WorkflowError, match=r"operator 'p' \(Op\): imports must be module "
                       r"names .* got " + repr(bad).replace("(", r"\(").replace(")", r"\)")):
        op.bind("p", [(2, 2)], ["float64"])


class _Frozen(UDF):
    """Each cell: how many objects this process's garbage collector has frozen."""

    n_inputs = 1

    def output_dtype(self, in_dtypes):
        return np.dtype("int64")

    def run(self, ctx, x):
        import gc

        return np.full(x.shape, gc.get_freeze_count(), dtype=np.int64)


@pytest.mark.spark
def test_spark_workers_freeze_their_imports_and_the_driver_does_not(spark, home):
    """A Spark worker's first task freezes the objects its imports made (out of the garbage
    collector's full collections); a run in the driver's own process freezes nothing."""
    import gc

    wf = Workflow("freeze")  # a stage large enough for Spark's tasks
    wf.input("a", (64, 64), source=lambda: np.zeros((64, 64)))
    wf.add("f", _Frozen(), "a")
    res = run_workflow(wf, home, strategy="blackbox", spark=spark)
    assert Run(load_run(home, res.run)).array("f").min() > 10_000
    res = run_workflow(wf, home, strategy="blackbox", where="driver")
    assert Run(load_run(home, res.run)).array("f").max() == 0 == gc.get_freeze_count()


def test_default_chunking_gives_the_cores_to_a_visits_ccds():
    """Under the default chunking, a visit's CCDs (independent parts of one workflow) run
    one chunk per array once there are as many as cores; one CCD, or a part holding most
    of the cells beside a small one, still gets a chunk per core."""
    from operators.elementwise import Unary
    from subzero.engine.runner import default_tasks

    assert default_tasks(astronomy.build(shape=(40, 24)), 2) == 2
    assert default_tasks(astronomy.build(shape=(40, 24), ccds=2), 2) == 1
    assert default_tasks(astronomy.build(shape=(40, 24), ccds=4), 8) == 2
    wf = Workflow("uneven")
    wf.input("big", (100, 100))
    wf.input("small", (2, 2))
    wf.add("a", Unary("negative"), "big")
    wf.add("b", Unary("negative"), "small")
    assert [sorted(p) for p in wf.parts()] == [["a"], ["b"]]
    assert default_tasks(wf, 2) == 2
