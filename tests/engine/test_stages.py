"""Fused stages and concurrent branches: the stage plan, and runs that write exactly what an
unfused, one-stage-at-a-time run writes (arrays, shards, query answers), for several
chunkings; inputs produced chunk by chunk from generators and files."""

import threading
import time

import numpy as np
import pytest

from operators import Binary, Cast, MeanBroadcast, Reduce, Scalar, Subarray
from operators.stencils import Convolve
from subzero.api import Run
from subzero.cells import Box
from subzero.chunking import Chunking
from subzero.engine import capacity, runner
from subzero.engine.capacity import check_fits
from subzero.engine.catalog import Catalog
from subzero.engine.inputs import FileBlocks, open_file, plan_inputs
from subzero.engine.runner import run_workflow
from subzero.engine.runs import load_run
from subzero.engine.stages import plan_stages
from subzero.errors import StoreError, SubZeroError, WorkflowError
from subzero.workflow import Workflow
from tests.conftest import assert_same_runs
from workflows import astronomy

pytestmark = pytest.mark.spark
SHAPE = (61, 37)


def _ramp(box: Box) -> np.ndarray:
    """A generator whose values depend only on the global cell position."""
    r = np.arange(box.lo[0], box.hi[0])[:, None]
    c = np.arange(box.lo[1], box.hi[1])[None, :]
    return ((r * 7919 + c * 104729) % 1000).astype(np.uint16)


def chain(shape=SHAPE) -> Workflow:
    wf = Workflow("chain")
    wf.input("x", shape, "uint16", blocks=_ramp)
    wf.input("y", shape, "uint16", blocks=_ramp)
    wf.add("f", Cast("float64"), "x")
    wf.add("g", Scalar("multiply", 2.0), "f")
    wf.add("h", Convolve(np.ones((3, 3)) / 9.0, boundary="reflect"), "g")
    wf.add("k", Binary("add"), "h", "y")
    wf.add("corner", Subarray("0:1, 0:1"), "k")
    wf.add("m", Reduce("mean", dtype="float64"), "corner")
    wf.add("d", Binary("subtract"), "k", "m")
    wf.add("bg", MeanBroadcast(), "d")
    wf.add("e", Binary("subtract"), "d", "bg")
    wf.validate()
    return wf


def _stage_names(wf, chunking):
    chunked = {n for n, s in wf.inputs.items() if s.blocks is not None}
    return [st.names for st in plan_stages(wf, chunked, chunking.chunk_shape)]


def test_plan_fuses_chains_and_ends_them_at_global_operators_and_wide_halos():
    wf = chain()
    # two chunks along rows: the stencil's halo (one row each side of 31) is computed again
    # in the task, so the stencil fuses
    assert _stage_names(wf, Chunking(split=(2, 1))) == [
        ["x", "f", "g", "h", "k"], ["y"], ["corner"], ["m"], ["d"], ["bg"], ["e"]]
    # 9 x 6 chunks: a halo of one cell all round adds 63% more cells; the stencil reads g
    # from zarr instead, in a stage of its own
    assert _stage_names(wf, Chunking(split=7)) == [
        ["x", "f", "g"], ["y"], ["h", "k"], ["corner"], ["m"], ["d"], ["bg"], ["e"]]


def test_plan_of_astronomy_is_a_dag_covering_every_step_once():
    wf = astronomy.build(shape=(64, 48))
    wf.validate()
    chunked = {n for n, s in wf.inputs.items() if s.blocks is not None}
    stages = plan_stages(wf, chunked, Chunking(split=(2, 1)).chunk_shape)
    names = [n for st in stages for n in st.names]
    assert sorted(names) == sorted([*chunked, *wf.order])
    assert len(stages) < len(wf.order)  # something fused
    where = {n: st.id for st in stages for n in st.names}
    for st in stages:  # every input of a step is in its stage or in a dependency
        for n in st.names:
            for src in (wf.nodes[n].inputs if n in wf.nodes else ()):
                assert src not in where or where[src] == st.id or where[src] in st.deps
    # acyclic: a topological order exists
    done: set[int] = set()
    while len(done) < len(stages):
        ready = [st.id for st in stages if st.id not in done and st.deps <= done]
        assert ready, "cycle between stages"
        done |= set(ready)
    # the two exposures' chains never share a stage until sumexp / maskexp
    for st in stages:
        exps = {n[-1] for n in st.names if n[-1] in "12" and not n.startswith("exp")}
        assert len(exps) <= 1 or {"sumexp", "maskexp"} & set(st.names), st.names


def _reduced_input(shape=SHAPE) -> Workflow:
    """Global reductions of a workflow input itself (its partials made by the input's
    tasks) and of an operator's output."""
    wf = Workflow("reduced")
    wf.input("x", shape, "uint16", blocks=_ramp)
    wf.add("top", Reduce("max"), "x")
    wf.add("total", Reduce("sum", keepdims=False), "x")
    wf.add("d", Binary("subtract"), "x", "top")
    wf.add("f", Cast("float64"), "d")
    wf.add("bg", MeanBroadcast(), "f")
    wf.add("e", Binary("subtract"), "f", "bg")
    wf.validate()
    return wf


def test_global_reductions_of_row_chunks_combine_from_partials():
    """A global mean, max or sum is computed from partials of its input's chunks when they
    are whole rows and it stores no lineage; it then starts a stage the next steps join."""
    wf, chunked = chain(), {"x", "y"}
    rows, tiles = Chunking(split=(2, 1)), Chunking(split=2)
    assert runner.combined_ops(wf, rows, wf.plan("subzero"), chunked) == {"m", "bg"}
    assert runner.combined_ops(wf, rows, wf.plan("blackbox"), chunked) == {"m", "bg"}
    assert runner.combined_ops(wf, tiles, wf.plan("subzero"), chunked) == {"m"}  # 1 x 1
    stored = wf.plan({"bg": ["full-one-bwd"], "m": ["map", "full-one-bwd"]})
    assert runner.combined_ops(wf, rows, stored, chunked) == set()  # one shard, not a chunk's
    assert runner.combined_ops(wf, rows, wf.plan("subzero"), {"y"}) == {"m", "bg"}
    plan = plan_stages(wf, chunked, rows.chunk_shape, combined={"m", "bg"})
    assert [st.names for st in plan] == [
        ["x", "f", "g", "h", "k"], ["y"], ["corner"], ["m"], ["d"], ["bg", "e"]]
    assert not any(st.global_ for st in plan)
    # an input the driver stores whole has no tasks to make partials
    ri = _reduced_input()
    assert runner.combined_ops(ri, rows, ri.plan("subzero"), {"x"}) == {"top", "total", "bg"}
    assert runner.combined_ops(ri, rows, ri.plan("subzero"), set()) == {"bg"}


@pytest.mark.parametrize("make,split,where", [
    (chain, (3, 1), "spark"), (chain, (5, 1), "driver"), (chain, 2, "driver"),
    (_reduced_input, (4, 1), "spark"), (_reduced_input, None, "driver"),
    (lambda: astronomy.build(shape=(64, 48), seed=2), None, "driver"),
])
def test_a_combined_run_writes_what_one_global_task_writes(spark, home, monkeypatch, make,
                                                           split, where):
    """The same bits as the global operators' one task reading their whole input."""
    wf = make()
    ch = Chunking(split=split) if split else Chunking()
    session = spark if where == "spark" else None
    combined = run_workflow(wf, home, strategy="subzero", chunking=ch, spark=session,
                            where=where)
    monkeypatch.setattr(runner, "combined_ops", lambda *a, **k: frozenset())
    whole = run_workflow(make(), home, strategy="subzero", chunking=ch, spark=session,
                         where=where)
    assert combined.stages <= whole.stages
    if split != 2:  # with whole rows the means' stages are gone or joined by the next step
        assert combined.stages < whole.stages
    assert_same_runs(home, combined.run, whole.run, wf)
    ra, rb = Run(load_run(home, combined.run)), Run(load_run(home, whole.run))
    for q in wf.queries:
        assert np.array_equal(ra.named_query(q).linear, rb.named_query(q).linear), q


@pytest.mark.parametrize("split", [1, 2, (5, 1), 7])
def test_fused_concurrent_run_writes_what_an_unfused_serial_run_writes(spark, home, split):
    wf = chain()
    ch = Chunking(split=split)
    fused = run_workflow(wf, home, strategy="full-one", chunking=ch, spark=spark)
    plain = run_workflow(wf, home, strategy="full-one", chunking=ch, spark=spark, fuse=False,
                         workers=1)
    assert fused.stages < plain.stages == len(wf.order) + 2
    assert_same_runs(home, fused.run, plain.run, wf)
    expect = _ramp(Box.full(SHAPE)).astype(np.float64) * 2.0
    assert np.array_equal(load_run(home, fused.run).array("g"), expect)
    # every operator has its catalog row and timings
    ops = load_run(home, fused.run).operators
    assert set(ops) == set(wf.order)
    assert [o["name"] for o in fused.operators] == wf.order
    assert all(o["runtime_s"] >= 0 for o in fused.operators)


@pytest.mark.parametrize("shape", [(64, 48), (240, 48)])
def test_astronomy_fused_and_concurrent_answers_every_named_query_as_unfused(spark, home,
                                                                             shape):
    wf = astronomy.build(shape=shape, seed=2)
    ch = Chunking(split=(3, 1))
    # the cosmic-ray stencils fuse with the halo computed again in the task: at 64 rows cr1
    # reads rmbg1 from zarr, at 240 rows (80-row chunks) rmbg1's halo is recomputed too
    _ = wf.validate()
    chunked = {n for n, spec in wf.inputs.items() if spec.blocks is not None}
    stage = next(st.names for st in plan_stages(wf, chunked, ch.chunk_shape)
                 if "cr1" in st.names)
    assert {"cr1", "maskexp", "rmcr"} <= set(stage)
    assert ("rmbg1" in stage) == (shape[0] == 240)
    fused = run_workflow(wf, home, strategy="subzero", chunking=ch, spark=spark)
    plain = run_workflow(astronomy.build(shape=shape, seed=2), home, strategy="subzero",
                         chunking=ch, spark=spark, fuse=False, workers=1)
    assert fused.concurrency >= 2  # the two exposures' chains ran side by side
    assert_same_runs(home, fused.run, plain.run, wf)
    ra, rb = Run(load_run(home, fused.run)), Run(load_run(home, plain.run))
    for q in wf.queries:
        a, b = ra.named_query(q), rb.named_query(q)
        assert np.array_equal(a.linear, b.linear), q


def test_npy_input_is_read_chunk_by_chunk(spark, home, tmp_path):
    data = _ramp(Box.full(SHAPE)).astype(">u2")  # big-endian on disk
    np.save(tmp_path / "x.npy", data)
    wf = chain()
    chunked, whole = plan_inputs(wf, {"x": str(tmp_path / "x.npy")})
    assert set(chunked) == {"x", "y"} and not whole
    res = run_workflow(chain(), home, inputs={"x": str(tmp_path / "x.npy")},
                       chunking=Chunking(split=3), spark=spark)
    got = load_run(home, res.run).array("x")
    assert got.dtype == np.uint16 and np.array_equal(got, data)


def test_fits_blocks_unscale_unsigned_counts(tmp_path):
    from astropy.io import fits

    data = (np.arange(40 * 30).reshape(40, 30) * 50 % 65536).astype(np.uint16)
    fits.PrimaryHDU(data).writeto(tmp_path / "e.fits")  # stored as int16 + BZERO 32768
    src = open_file(str(tmp_path / "e.fits"))
    assert src.kind == "fits" and src.bzero == 32768
    assert src.describe() == ((40, 30), np.dtype("uint16"))
    box = Box((3, 5), (17, 29))
    assert np.array_equal(src(box), data[box.slices]) and src(box).dtype == np.uint16
    floats = np.linspace(-1, 1, 12).reshape(3, 4)
    fits.PrimaryHDU(floats).writeto(tmp_path / "f.fits")
    assert np.array_equal(FileBlocks(str(tmp_path / "f.fits"), "fits")(Box.full((3, 4))),
                          floats)


def test_input_file_errors_are_one_line(tmp_path):
    wf = chain()
    with pytest.raises(StoreError, match="does not exist"):
        plan_inputs(wf, {"x": str(tmp_path / "nope.npy")})
    np.save(tmp_path / "bad.npy", np.zeros((5, 5)))
    with pytest.raises(WorkflowError, match=r"has shape \(5, 5\); workflow 'chain' expects"):
        plan_inputs(wf, {"x": str(tmp_path / "bad.npy")})
    (tmp_path / "junk.fits").write_text("not fits")
    with pytest.raises(SubZeroError, match="junk.fits"):
        plan_inputs(wf, {"x": str(tmp_path / "junk.fits")})


def test_a_run_too_large_for_the_disk_or_memory_fails_before_writing(tmp_path):
    huge = astronomy.build(shape=(400_000, 400_000))
    huge.validate()
    with pytest.raises(SubZeroError) as err:
        check_fits(huge, tmp_path / "home")
    msg = str(err.value)
    assert "shape=400000x400000" in msg and "free" in msg and "\n" not in msg
    assert not (tmp_path / "home").exists()


def test_a_global_operator_too_large_for_memory_is_named(tmp_path, monkeypatch):
    wf = astronomy.build(shape=(2001, 513))
    wf.validate()
    check_fits(wf, tmp_path / "home")  # fits this machine
    monkeypatch.setattr(capacity, "physical_memory", lambda: 40 * 2**20)  # a 40 MiB box
    with pytest.raises(WorkflowError) as err:
        check_fits(wf, tmp_path / "home")
    msg = str(err.value)
    # bgmean1 sees flatcorrect1 whole: 8.2 MB in, 8.2 MB out, x3 for its temporaries
    assert "operator 'bgmean1'" in msg and "49.3 MB" in msg
    assert "shape=2001x513" in msg and "memory" in msg and "\n" not in msg


def test_tiny_stages_run_on_the_driver_and_compute_the_same(spark, home, monkeypatch):
    # the 1 x 1 corner and its mean are too small to be worth a Spark job
    where = {}
    real = runner._run_stage_jobs

    def spy(spark_, jobs, label, **kw):
        where[label.split(": ", 1)[1]] = "driver" if spark_ is None else "spark"
        return real(spark_, jobs, label, **kw)

    monkeypatch.setattr(runner, "_run_stage_jobs", spy)
    res = run_workflow(chain(), home, chunking=Chunking(split=2), spark=spark)
    assert where["corner"] == where["m"] == "driver"
    assert where["d"] == where["bg"] == "spark", where  # whole-size stages: Spark jobs
    run = load_run(home, res.run)
    k = run.array("k")
    assert run.array("corner").tolist() == [[k[0, 0]]]
    assert np.array_equal(run.array("d"), k - k[0, 0])
    assert np.allclose(run.array("e"), run.array("d") - run.array("d").mean())


@pytest.mark.parametrize("param, names", [
    ("shape=400000x400000", "400000x400000"),  # 1.6e11 cells: no disk holds its arrays
    ("ccds=0", "ccds"), ("ccds=abc", "abc"), ("shape=0x5", "0x5"),
])
def test_cli_refuses_a_bad_or_oversized_scale_in_one_line(tmp_path, capsys, param, names):
    from subzero.cli.main import main

    assert main(["run", "astronomy", "--param", param, "--home", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0], err
    assert not (tmp_path / "h" / "runs").exists()


def test_driver_peak_rss_is_this_process_not_its_parents():
    import subprocess
    import sys

    big = np.ones(300 * 2**20, np.uint8)  # the parent's peak: over 300 MiB
    code = "from subzero.engine.runner import _peak_rss; print(_peak_rss())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert int(out) < 200 * 2**20, int(out) >> 20  # ru_maxrss would say over 300 MiB
    del big


def test_a_fused_step_stores_its_shards_while_the_next_step_runs(home, monkeypatch):
    """Each step of a fused task hands its pairs to the storing thread and the task goes
    on; the run records every step's shards, with their store time, as a serial store."""
    from subzero.engine import tasks

    seen = []
    real = tasks.store_shards

    def spy(job, full, pay, same_as=None):
        seen.append((job.op.name, threading.current_thread().name))
        return real(job, full, pay, same_as)

    monkeypatch.setattr(tasks, "store_shards", spy)
    wf = chain()
    stored = {n: ["full-one-bwd"] for n in wf.order}
    res = run_workflow(wf, home, plan=stored, chunking=Chunking(split=2), where="driver")
    fused = {n for st in _stage_names(wf, Chunking(split=2)) if len(st) > 1 for n in st
             if n in wf.order}
    assert fused and {op for op, _ in seen} == set(wf.order)
    assert all(th.startswith("subzero-store") for op, th in seen if op in fused), seen
    ops = {o["name"]: o for o in res.operators}
    assert all(ops[n]["lineage_bytes"] > 0 and ops[n]["lineage_s"] > 0 for n in wf.order)
    serial = run_workflow(chain(), home, plan=stored, chunking=Chunking(split=2),
                          where="driver", fuse=False, workers=1)
    assert_same_runs(home, res.run, serial.run, wf)


def test_a_store_that_fails_on_the_storing_thread_fails_the_run_naming_its_step(
        home, monkeypatch):
    from subzero.engine import tasks

    real = tasks.store_shards

    def broken(job, full, pay, same_as=None):
        if job.op.name == "g":
            raise OSError("disk full")
        return real(job, full, pay, same_as)

    monkeypatch.setattr(tasks, "store_shards", broken)
    with pytest.raises(RuntimeError, match=r"operator 'g' failed in chunk .*disk full"):
        run_workflow(chain(), home, plan={"g": ["full-one-bwd"]}, chunking=Chunking(split=2),
                     where="driver")
    r = Catalog(home / "catalog.sqlite").runs()[-1]
    assert r["status"] == "failed" and "'g'" in r["error"]


def test_in_the_driver_a_stage_s_dependents_start_while_its_lineage_is_stored(
        home, monkeypatch):
    """A run in the driver's own process does not wait for a stage's lineage stores before
    it starts the stages after it (the storing thread works on meanwhile); the stage is
    recorded, shards and all, once they are stored. Under a lineage budget it waits."""
    from subzero.engine import runner, tasks

    times = {}
    real_store, real_jobs = tasks.store_shards, runner._run_stage_jobs

    def slow_store(job, full, pay, same_as=None):
        if job.op.name == "k":
            time.sleep(0.3)
            times["k stored"] = time.perf_counter()
        return real_store(job, full, pay, same_as)

    def jobs(spark_, jobs_, label, **kw):
        times.setdefault(label.split(": ", 1)[1], time.perf_counter())
        return real_jobs(spark_, jobs_, label, **kw)

    monkeypatch.setattr(tasks, "store_shards", slow_store)
    monkeypatch.setattr(runner, "_run_stage_jobs", jobs)
    plan = {"k": ["full-one-bwd"]}
    res = run_workflow(chain(), home, plan=plan, chunking=Chunking(split=2), where="driver")
    assert times["corner"] < times["k stored"]
    assert {o["name"]: o for o in res.operators}["k"]["lineage_bytes"] > 0
    times.clear()
    run_workflow(chain(), home, plan=plan, chunking=Chunking(split=2), where="driver",
                 max_disk=1 << 30)
    assert times["corner"] > times["k stored"]


def test_a_failed_run_in_the_driver_leaves_no_lineage_being_stored(home, monkeypatch):
    """A run in the driver that fails while stores it has not settled are still running
    (here: recording the stage fails before it waits for them) ends only once they have
    ended, so nothing writes into its folder after it."""
    from subzero.engine import runner, tasks

    ended = {}
    real = tasks.store_shards

    def slow_store(job, full, pay, same_as=None):
        if job.op.name == "k":
            time.sleep(0.3)
        out = real(job, full, pay, same_as)
        ended[job.op.name] = time.perf_counter()
        return out

    def broken(results):
        if any(tasks._PENDING in res for chunk in results for res in chunk):
            raise OSError("catalog unwritable")

    monkeypatch.setattr(tasks, "store_shards", slow_store)
    monkeypatch.setattr(runner, "settle_deferred", broken)
    with pytest.raises(OSError, match="catalog unwritable"):
        run_workflow(chain(), home, plan={"k": ["full-one-bwd"]}, chunking=Chunking(split=2),
                     where="driver")
    failed_at = time.perf_counter()
    assert "k" in ended and ended["k"] < failed_at
