"""What-if replay (``subzero replay``, ``Run.replay``): a derived run equals, bit for bit,
a full run of the workflow on the changed data; the parent is never modified; the derived
run answers lineage queries; bad input is one line and exit 2."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import workflows
from subzero import Box
from subzero.api import Home
from subzero.chunking import Chunking
from subzero.cli.main import main
from subzero.engine.catalog import Catalog
from subzero.engine.runner import run_workflow
from subzero.errors import ReplayError
from subzero.frontier import start_frontier
from subzero.replay import differs, replay_values
from subzero.workflow import Workflow
from tests.conftest import ROOT

# parent -> (build parameters, strategy, chunking); the workflow is the name before "-"
PARENTS = {
    "example": ({"shape": "160x96"}, "subzero", Chunking(split=(4, 2))),
    "astronomy": ({"shape": "160x96", "seed": 3}, "subzero", Chunking(split=(4, 2))),
    "genomics": ({"scale": 3, "patients": 40}, "full-one", None),
    # the table in 4 x 16 chunks (one chunk by default): its chunk borders
    "genomics-chunked": ({"scale": 3, "patients": 40}, "full-one", Chunking(chunks=(4, 16))),
}


def _digest(path: Path) -> dict[str, str]:
    """Every file under ``path`` (following no link) with its SHA-256."""
    out = {}
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = Path(root, f)
            out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def parents(spark, tmp_path_factory):
    """One parent run per built-in workflow, in one home (made on first use)."""
    home = tmp_path_factory.mktemp("replay-home")
    made: dict[str, object] = {}

    def get(name: str):
        if name not in made:
            params, strategy, chunking = PARENTS[name]
            wf = workflows.build(name.split("-")[0], **params)
            res = run_workflow(wf, home, strategy=strategy, spark=spark, chunking=chunking)
            made[name] = Home(home).get(res.run)
        return made[name]

    return get


def _reference(run, array: str, data: np.ndarray, home: Path, spark) -> dict[str, np.ndarray]:
    """A full run of ``run``'s workflow with ``array`` holding ``data`` (every other input
    as the run stored it; an intermediate ``array`` becomes an input, its producer is not
    run), with the run's strategy and chunking: every array it computes."""
    wf0 = run.workflow
    wf = Workflow(wf0.name, params=wf0.params)
    wf.plans = dict(wf0.plans)
    for name, spec in wf0.inputs.items():
        value = data if name == array else run.array(name)
        wf.input(name, spec.shape, spec.dtype, source=lambda v=value: v,
                 auxiliary=spec.auxiliary)
    if array in wf0.nodes:
        op = wf0.ops[array]
        wf.input(array, op.out_shape, op.out_dtype, source=lambda: data)
    for name in wf0.order:
        if name != array:
            wf.add(name, wf0.nodes[name].op, *wf0.nodes[name].inputs)
    info = run.loaded.info
    res = run_workflow(wf, home, strategy=info["strategy"], spark=spark,
                       chunking=Chunking.from_json(info["chunking"]))
    ref = Home(home).get(res.run)
    return {name: ref.array(name) for name in ref.arrays}


def _changed_input(run, array: str, cells, value) -> np.ndarray:
    data = run.array(array).copy()
    mask = start_frontier(data.shape, cells).mask
    data[mask] = value
    return data


# (workflow, array, cells, value, what the cells are)
CASES = [
    ("example", "image", Box((70, 40), (80, 50)), 60000, "middle"),
    ("example", "image", Box((36, 44), (44, 52)), 0, "chunk border"),
    ("example", "smooth", Box((10, 10), (12, 90)), 1e6, "global operator's input"),
    ("astronomy", "exp1", Box((75, 40), (85, 50)), 60000, "middle"),
    ("astronomy", "exp1", Box((38, 46), (42, 50)), 9000, "chunk border"),
    ("astronomy", "exp1", Box((0, 0), (2, 3)), 40000, "overscan corner"),
    ("astronomy", "flatcorrect2", Box((100, 10), (103, 13)), -50.0, "global operator's input"),
    ("astronomy", "rmcr", Box((60, 30), (66, 36)), 5000.0, "global operator's input"),
    ("genomics", "table", Box((3, 10), (6, 30)), "0.0", "middle"),
    ("genomics-chunked", "table", Box((3, 15), (5, 17)), "0.0", "chunk border"),
    ("genomics", "transpose", Box((0, 0), (120, 2)), "9.5", "global operator's input"),
]


@pytest.mark.slow
@pytest.mark.parametrize("wf_name,array,cells,value,where", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[4].replace(' ', '-')}" for c in CASES])
def test_replay_equals_a_full_run_on_the_changed_data(parents, spark, tmp_path, wf_name,
                                                      array, cells, value, where):
    run = parents(wf_name)
    if where == "chunk border":  # the cells do lie in more than one chunk
        corners = np.array([cells.lo, np.subtract(cells.hi, 1)])
        assert len({tuple(k) for k in corners // np.asarray(run.loaded.chunks(array))}) > 1
    before = _digest(run.home / "runs" / run.id)
    new = run.replay(array, cells, value=value, quiet=True)
    assert _digest(run.home / "runs" / run.id) == before  # the parent is untouched
    ref = _reference(run, array, _changed_input(run, array, cells, value), tmp_path / "ref",
                     spark)
    assert set(ref) == set(new.arrays)
    for name, want in ref.items():
        got = new.array(name)
        assert got.dtype == want.dtype, name
        assert not differs(got, want).any(), f"{name} differs from a full run ({where})"
    res = new.replayed
    for a in res.arrays[1:]:  # what it says changed is what did
        if a.changed is None:  # not compared: an intermediate recomputed whole
            assert a.recomputed == int(np.prod(a.shape)) and a.name not in res.outputs
            assert not new.workflow.ops[a.name].parallelism.kind == "global", a.name
            continue
        assert a.changed == int(differs(run.array(a.name), new.array(a.name)).sum()), a.name
        assert a.recomputed <= int(np.prod(a.shape))
    for name in res.outputs:
        assert res.array_result(name) is None or res.array_result(name).changed is not None
    assert res.recomputed_cells < res.full_cells
    cat = Catalog(run.home / "catalog.sqlite")
    try:
        info = cat.run(new.id)
    finally:
        cat.close()
    assert (info["status"], info["parent"]) == ("complete", run.id)
    assert info["derivation"]["array"] == array and info["derivation"]["kind"] == "replay"


@pytest.mark.slow
def test_arrays_computed_from_a_left_out_array_are_left_out_too(parents):
    """--to calibrate leaves smooth out; background, residual and bright are computed from
    it, so the derived run must not keep the parent's (stale) copies of them either; and a
    replay of that derived run that would need smooth is one clear line."""
    run = parents("example")
    new = run.replay("image", [(3, 3)], value=60000, to="calibrate", quiet=True)
    assert set(new.replayed.not_replayed) == {"smooth", "background", "residual", "bright"}
    assert set(new.arrays) == {"image", "threshold", "calibrate"}
    with pytest.raises(ReplayError, match="has no array 'smooth'"):
        new.replay("image", [(3, 3)], value=1, quiet=True)
    again = new.replay("image", [(4, 4)], value=1, to="calibrate", quiet=True)
    assert again.array("calibrate")[4, 4] != run.array("calibrate")[4, 4]


def test_a_bad_where_or_an_overflowing_value_is_one_line(parents):
    run = parents("example")
    with pytest.raises(ReplayError, match="where='bogus'"):
        run.replay("image", [(3, 3)], value=1, where="bogus", quiet=True)
    with pytest.raises(ReplayError, match="too large"):
        run.replay("calibrate", [(3, 3)], value="1e400", quiet=True)


@pytest.mark.slow
def test_replay_recomputes_only_the_tiles_the_change_reaches(parents):
    """A change that no global operator sees: only the tiles around it are recomputed, and
    arrays it does not reach are links to the parent's."""
    run = parents("example")
    new = run.replay("smooth", [(5, 5)], value=1e9, to="residual", quiet=True)
    res = new.replayed
    assert [a.name for a in res.arrays] == ["smooth", "background", "residual"]
    assert res.not_replayed == ["bright"]
    assert "bright" not in new.arrays
    # image, calibrate and smooth's producer are untouched: links to the parent's arrays
    link = new.home / "runs" / new.id / "arrays" / "calibrate.zarr"
    assert link.is_symlink() and link.resolve() == (
        run.home / "runs" / run.id / "arrays" / "calibrate.zarr").resolve()
    assert not (new.home / "runs" / new.id / "arrays" / "smooth.zarr").is_symlink()
    new2 = run.replay("image", [(5, 5)], value=0, to="smooth", quiet=True)
    got = {a.name: a for a in new2.replayed.arrays}
    assert got["calibrate"].recomputed == 1
    assert got["smooth"].recomputed == 9  # the 3x3 stencil's reach, not its chunk
    assert got["smooth"].tiles == 1 and got["smooth"].tiles_total == 8
    # a rewritten array: its chunks the change missed are the parent's files (hard links),
    # the one it rewrote a new file; the parent's chunk is as it was
    mine = new2.home / "runs" / new2.id / "arrays" / "smooth.zarr" / "c"
    theirs = run.home / "runs" / run.id / "arrays" / "smooth.zarr" / "c"
    files = sorted(p.relative_to(theirs) for p in theirs.rglob("*") if p.is_file())
    same = [f for f in files if (mine / f).stat().st_ino == (theirs / f).stat().st_ino]
    assert len(same) == len(files) - 1 and Path("0", "0") not in same
    assert not differs(run.array("smooth")[8:], new2.array("smooth")[8:]).any()


def test_a_chunk_whose_cells_did_not_change_is_the_parents_file(parents):
    """Cells set to the values they hold change nothing: the rewritten chunk is the
    parent's file (a hard link), and nothing downstream is recomputed."""
    run = parents("example")
    same = run.array("image")[5:7, 5:7]
    new = run.replay("image", Box((5, 5), (7, 7)), values=same, quiet=True)
    assert [(a.name, a.changed) for a in new.replayed.arrays] == [("image", 0)]
    mine = new.home / "runs" / new.id / "arrays" / "image.zarr" / "c" / "0" / "0"
    theirs = run.home / "runs" / run.id / "arrays" / "image.zarr" / "c" / "0" / "0"
    assert mine.stat().st_ino == theirs.stat().st_ino
    assert not differs(new.array("image"), run.array("image")).any()
    # the array's metadata is a file of its own (zarr rewrites it in place); the
    # manifest, written once, is shared
    runs = (mine.parents[4], theirs.parents[4])
    meta = [r / "arrays" / "image.zarr" / "zarr.json" for r in runs]
    assert meta[0].read_bytes() == meta[1].read_bytes()
    assert meta[0].stat().st_ino != meta[1].stat().st_ino
    man = [r / "manifest.json" for r in runs]
    assert man[0].stat().st_ino == man[1].stat().st_ino


@pytest.mark.slow
def test_derived_run_answers_lineage_queries(parents):
    """Backward lineage of a recomputed tile in the derived run: the UDF's stored lineage
    of the replayed chunks, and every changed output cell traces back to the set cells."""
    run = parents("astronomy")
    box = Box((75, 40), (85, 50))
    new = run.replay("exp1", box, value=60000, quiet=True)
    cat = Catalog(run.home / "catalog.sqlite")
    try:
        mine = cat.shards(new.id, "cr1")
        theirs = cat.shards(run.id, "cr1")
    finally:
        cat.close()
    assert mine and len(mine) == len(theirs)
    own = [r for r in mine if r["path"].startswith(f"runs/{new.id}/")]
    assert own, "the recomputed chunks of cr1 have their own shards"
    assert all(r["checksum"] for r in own)  # recorded as a run records them: verify checks them
    assert all(r["path"].startswith(f"runs/{run.id}/") for r in mine if r not in own)
    changed = differs(run.array("clust"), new.array("clust"))
    flags = differs(run.array("cr1"), new.array("cr1"))
    assert flags.any()
    res = new.backward(flags, start="cr1", path=[("cr1", 0)])
    assert res.count >= int(flags.sum())
    fwd = new.forward(box, start="exp1", to="rmoverscan1")
    assert fwd.mask[box.slices].all()
    if changed.any():
        back = new.backward(changed, start="clust", to="exp1")
        assert back.count > 0


@pytest.mark.slow
def test_a_recomputed_chunk_whose_lineage_came_out_the_same_shares_the_parents_shard(
        parents):
    """exp1 + 1 in a box: cr1, rmcr and clust are recomputed, but no flag, star or mask
    changes, so their recomputed lineage is the parent's: each shard is the parent's (its
    row, its files), nothing is written, and the derived run answers as the parent does.
    A change that flags cosmic rays writes shards of its own (see the test above)."""
    run = parents("astronomy")
    box = Box((75, 40), (85, 50))
    new = run.replay("exp1", box, values=run.array("exp1")[box.slices] + 1, quiet=True)
    got = {a.name: a for a in new.replayed.arrays}
    cat = Catalog(run.home / "catalog.sqlite")
    try:
        for op in ("cr1", "rmcr", "clust"):
            assert got[op].tiles > 0, op  # recomputed
            mine = {(r["strategy"], r["chunk"]): r for r in cat.shards(new.id, op)}
            theirs = {(r["strategy"], r["chunk"]): r for r in cat.shards(run.id, op)}
            assert mine.keys() == theirs.keys()
            for key, row in mine.items():
                assert {k: v for k, v in row.items() if k != "run"} == {
                    k: v for k, v in theirs[key].items() if k != "run"}, (op, key)
            assert not (run.home / "runs" / new.id / "lineage" / op).exists()
    finally:
        cat.close()
    flags = run.array("cr1") != 0
    assert flags.any() and np.array_equal(flags, new.array("cr1") != 0)
    want = run.backward(flags, start="cr1", path=[("cr1", 0)])
    have = new.backward(flags, start="cr1", path=[("cr1", 0)])
    assert np.array_equal(want.mask, have.mask)


def test_a_run_keeps_one_catalog_connection_for_its_replays_until_closed(parents):
    """Replays of one run share this thread's connection (closing the last one would
    checkpoint the catalog and sync the disk after every replay), which holds no
    transaction between replays: another connection writes meanwhile; close() releases
    it."""
    run = parents("example")
    first = run.replay("image", [(2, 2)], value=1, to="calibrate", quiet=True)
    cat, qx = run._replay_session()
    other = Catalog(run.home / "catalog.sqlite")
    try:
        other.set_array_bytes(first.id, {"image": 123})  # not locked out
    finally:
        other.close()
    second = run.replay("image", [(3, 3)], value=1, to="calibrate", quiet=True)
    assert run._replay_session() == (cat, qx)
    assert second.replayed.parent == run.id != second.id != first.id
    run.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        cat.db.execute("SELECT 1")
    assert run._replay_session()[0] is not cat  # a new one when replayed again
    run.close()


def test_replay_values_checks_the_dtype():
    assert replay_values("a", "float32", 3, nan=True).dtype == np.float32
    assert replay_values("a", "int16", 2, values=np.array([1, -2], np.int8)).tolist() == [1, -2]
    for kwargs, expect in [
        ({"value": "1.5"}, "--set '1.5': array a holds uint16"),
        ({"value": "70000"}, "expected an integer from 0 to 65535"),
        ({"value": "x"}, "--set 'x'"),
        ({"nan": True}, "--nan: array a holds uint16"),
        ({"values": np.array([1.0, 2.0])}, "--values of dtype float64 cannot go into array a"),
        ({"values": np.array([1, 2, 3])}, "--values holds 3 values"),
        ({"values": np.array([1, 70000])}, "--values holds 70000"),
        ({}, "give exactly one of"),
    ]:
        with pytest.raises(ReplayError, match=expect.replace("(", r"\(").replace("'", "'")):
            replay_values("a", "uint16", 2, **kwargs)
    with pytest.raises(ReplayError, match="expected a number"):
        replay_values("a", "float64", 1, value="abc")


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_cli_replay_and_runs_show_the_derived_run(parents, capsys):
    run = parents("example")
    home = str(run.home)
    code, out, err = _cli(capsys, "replay", run.id, "--home", home, "--from", "image",
                          "--cells", "70,40;71,41", "--set", "65000", "--to", "bright")
    assert code == 0, err
    assert f"replay of run {run.id} (example), 2 cells of image set to 65000" in out
    assert "output bright:" in out and "a full re-run computes" in out
    new = out.split()[1].rstrip(":")
    code, out, err = _cli(capsys, "runs", "--home", home)
    line = next(ln for ln in out.splitlines() if ln.startswith(new + " "))
    assert f" {run.id} " in line and "replay: 2 cells of image" in line
    code, out, _ = _cli(capsys, "show", new, "--home", home)
    assert f"derived from run {run.id}: replay: 2 cells of image set to 65000" in out
    code, out, _ = _cli(capsys, "runs", "--home", home, "--json")
    row = next(r for r in json.loads(out) if r["run"] == new)
    assert row["parent"] == run.id and row["derivation"]["cells"] == 2
    np.save(Path(home) / "vals.npy", np.array([1.0, 2.0, 3.0]))
    code, out, err = _cli(capsys, "replay", run.id, "--home", home, "--from", "calibrate",
                          "--box", "0:1,0:3", "--values", str(Path(home) / "vals.npy"),
                          "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["parent"] == run.id and doc["arrays"][0]["changed"] == 3
    assert Home(home).get(doc["run"]).array("calibrate")[0, :3].tolist() == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_cli_bad_input_is_one_line_and_exit_2(parents, capsys, tmp_path):
    run = parents("example")
    home = str(run.home)
    cat = Catalog(run.home / "catalog.sqlite")
    try:
        failed = cat.create_run("example", {}, "subzero", {})
        cat.finish_run(failed, "failed", error="boom")
        running = cat.create_run("example", {}, "subzero", {})
        n_runs = len(cat.runs())
    finally:
        cat.close()
    np.save(tmp_path / "f.npy", np.array([1.5]))
    base = ("replay", run.id, "--home", home)
    cases = [
        ((*base, "--from", "image", "--cells", "1,1", "--set", "1.5"),
         "--set '1.5': array image holds uint16"),
        ((*base, "--from", "image", "--cells", "1,1", "--values", str(tmp_path / "f.npy")),
         "--values of dtype float64 cannot go into array image of dtype uint16"),
        ((*base, "--from", "image", "--cells", "1,1", "--nan"), "--nan: array image"),
        ((*base, "--from", "image", "--cells", "500,1", "--set", "3"), "500"),
        ((*base, "--from", "image", "--box", "0:5,90:200", "--set", "3"), "200"),
        ((*base, "--from", "nosuch", "--cells", "1,1", "--set", "3"), "'nosuch'"),
        ((*base, "--from", "image", "--cells", "1,1", "--set", "3", "--to", "nosuch"),
         "'nosuch'"),
        ((*base, "--from", "smooth", "--cells", "1,1", "--set", "3", "--to", "calibrate"),
         "--to calibrate"),
        (("replay", failed, "--home", home, "--from", "image", "--cells", "1,1", "--set", "3"),
         f"run {failed} is failed (boom)"),
        (("replay", running, "--home", home, "--from", "image", "--cells", "1,1", "--set", "3"),
         f"run {running} is running"),
        ((*base, "--from", "image", "--cells", "1,1"), "give exactly one of --set"),
        ((*base, "--from", "image", "--cells", "1,1", "--set", "3", "--nan"),
         "give exactly one of --set"),
    ]
    for argv, expect in cases:
        code, out, err = _cli(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert err.startswith("subzero: error: ") and len(err.strip().splitlines()) == 1, err
        assert expect in err, (expect, err)
    cat = Catalog(run.home / "catalog.sqlite")
    try:
        assert len(cat.runs()) == n_runs  # no bad input left a derived run behind
        cat.finish_run(running, "failed", error="test")
    finally:
        cat.close()


_KILLED = """
import sys, time
import subzero.replay.runner as rp
from subzero.api import Home

real = rp._recompute
def slow(d, name, *a, **k):
    out = real(d, name, *a, **k)
    print("recomputed", name, d.rid, flush=True)
    time.sleep(60)
    return out
rp._recompute = slow
Home(sys.argv[1]).get(sys.argv[2]).replay("image", [(70, 40)], value=0, quiet=True)
"""


@pytest.mark.slow
def test_a_killed_replay_leaves_the_parent_untouched_and_the_derived_run_failed(parents):
    run = parents("example")
    before = _digest(run.home / "runs" / run.id)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-c", _KILLED, str(run.home), run.id],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stdout.readline()
        assert line.startswith("recomputed calibrate"), (line, p.stderr.read())
        derived = line.split()[2]
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert _digest(run.home / "runs" / run.id) == before
    cat = Catalog(run.home / "catalog.sqlite")  # opening reaps the dead process's run
    try:
        info = cat.run(derived)
    finally:
        cat.close()
    assert info["status"] == "failed" and info["parent"] == run.id
    assert Home(run.home).get(run.id).array("calibrate").shape == (160, 96)


@pytest.mark.slow
def test_a_replay_that_fails_marks_the_derived_run_failed(parents, monkeypatch):
    import subzero.replay.runner as rp

    run = parents("example")
    before = _digest(run.home / "runs" / run.id)

    def broken(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(rp, "_recompute", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        run.replay("image", [(1, 1)], value=0, quiet=True)
    cat = Catalog(run.home / "catalog.sqlite")
    try:
        last = cat.runs()[-1]
    finally:
        cat.close()
    assert (last["status"], last["parent"]) == ("failed", run.id)
    assert "disk full" in last["error"]
    assert _digest(run.home / "runs" / run.id) == before


@pytest.mark.slow
def test_replay_on_spark_equals_replay_on_the_driver(parents, monkeypatch):
    """Tiles recomputed as Spark tasks (they write their blocks themselves) give the same
    derived run as tiles recomputed here (blocks passed in memory, written in the
    background, an operator's tiles on two threads at once)."""
    import subzero.replay.runner as rp

    monkeypatch.setattr(rp, "COMPUTE", 2)  # every operator with 2+ tiles on threads
    monkeypatch.setattr(rp, "THREAD_CELLS", 1)
    run = parents("astronomy")
    box = Box((38, 46), (42, 50))
    here = run.replay("exp1", box, value=9000, where="driver", quiet=True)
    there = run.replay("exp1", box, value=9000, where="spark", quiet=True)
    assert here.arrays == there.arrays
    for name in here.arrays:
        assert not differs(here.array(name), there.array(name)).any(), name
    assert ([(a.name, a.changed, a.tiles) for a in here.replayed.arrays]
            == [(a.name, a.changed, a.tiles) for a in there.replayed.arrays])


@pytest.mark.slow
def test_a_derived_run_replays_again(parents, spark, tmp_path):
    """A derived run is a run: replaying it again (two changes, one after the other) equals
    a full run with both changes, and leaves the first derived run's files as they were."""
    run = parents("example")
    first = run.replay("image", Box((70, 40), (80, 50)), value=60000, quiet=True)
    before = _digest(first.home / "runs" / first.id)
    second = first.replay("image", Box((120, 90), (125, 96)), value=0, quiet=True)
    assert _digest(first.home / "runs" / first.id) == before
    data = _changed_input(run, "image", Box((70, 40), (80, 50)), 60000)
    data[120:125, 90:96] = 0
    ref = _reference(run, "image", data, tmp_path / "ref", spark)
    for name, want in ref.items():
        assert not differs(second.array(name), want).any(), name
    cat = Catalog(run.home / "catalog.sqlite")
    try:
        assert cat.run(second.id)["parent"] == first.id
        assert cat.derived_runs(run.id)[-1] == first.id
    finally:
        cat.close()


@pytest.mark.slow
def test_noisy_intermediates_recomputed_whole_go_uncompared_unless_asked(parents, capsys):
    """After a changed mean everything downstream is recomputed whole. Of those arrays, the
    ones with noisy values (stored raw) that are neither a global operator's output nor an
    output are not compared with the parent's (changed None, every cell passed on); masks,
    global operators' outputs and the outputs are. ``compare_all`` compares them all: the
    same arrays, bit for bit, and exact counts everywhere."""
    run = parents("astronomy")
    box = Box((75, 40), (85, 50))
    lazy = run.replay("exp1", box, value=60000, quiet=True)
    exact = run.replay("exp1", box, value=60000, quiet=True, compare_all=True)
    ops = run.workflow.ops
    skipped = [a.name for a in lazy.replayed.arrays if a.changed is None]
    assert skipped, "no array went uncompared"
    for name in skipped:
        a = lazy.replayed.array_result(name)
        assert a.recomputed == int(np.prod(a.shape)) and a.cells is None
        assert ops[name].parallelism.kind != "global" and name not in lazy.replayed.outputs
        assert a.to_json()["compared"] is False
    assert lazy.replayed.array_result("cr1").changed is not None  # a mask compresses
    assert lazy.replayed.array_result("bgmean1").changed is not None  # global
    assert lazy.replayed.array_result("clust").changed is not None  # global, an output
    assert lazy.arrays == exact.arrays
    for name in lazy.arrays:
        assert not differs(lazy.array(name), exact.array(name)).any(), name
    for a in exact.replayed.arrays[1:]:
        assert a.changed == int(differs(run.array(a.name), exact.array(a.name)).sum()), a.name
        if a.name not in skipped:
            assert lazy.replayed.array_result(a.name).changed == a.changed, a.name
    # the CLI shows them as '-' and says why; --compare-all counts them
    args = ["replay", run.id, "--home", str(run.home), "--from", "exp1", "--box",
            "75:85,40:50", "--set", "60000"]
    code, out, err = _cli(capsys, *args)
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split()[:1] == [skipped[0]])
    assert row.split()[2] == "-" and "--compare-all counts them" in out
    code, out, err = _cli(capsys, *args, "--compare-all")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split()[:1] == [skipped[0]])
    assert row.split()[2] == str(exact.replayed.array_result(skipped[0]).changed)
    assert "--compare-all counts them" not in out


@pytest.mark.slow
@pytest.mark.parametrize("lean_by", ["no chunk held", "zarr only"])
def test_a_replay_holding_no_chunk_or_reading_through_zarr_gives_the_same_run(
        parents, monkeypatch, lean_by):
    """A replay that holds no decoded chunk (every read decodes again), or that reads and
    writes every array through zarr (arrays its chunk files cannot handle): the same
    derived run as the default."""
    from subzero.engine import cowstore

    run = parents("example")
    box = Box((36, 44), (44, 52))
    held = run.replay("image", box, value=0, quiet=True)
    if lean_by == "no chunk held":
        monkeypatch.setattr(cowstore, "CACHE_BYTES", 0)
    else:
        monkeypatch.setattr(cowstore.ChunkFiles, "open", classmethod(lambda cls, p: None))
    lean = run.replay("image", box, value=0, quiet=True)
    assert held.arrays == lean.arrays
    for name in held.arrays:
        assert not differs(held.array(name), lean.array(name)).any(), name
    assert ([(a.name, a.changed) for a in held.replayed.arrays]
            == [(a.name, a.changed) for a in lean.replayed.arrays])


def test_keep_freed_memory_raises_the_thresholds_and_sets_glibcs_own_after(monkeypatch):
    """The replay's heap setting: both thresholds raised inside the block, the trim
    threshold back to glibc's adaptive maximum after it (also when the block raises), and
    nothing at all where there is no glibc."""
    from subzero.engine import heap

    calls = []

    class FakeLibc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(heap, "_libc", FakeLibc())
    with pytest.raises(KeyError):
        with heap.keep_freed_memory():
            assert calls == [(heap.M_MMAP_THRESHOLD, 32 << 20), (heap.M_TRIM_THRESHOLD, 1 << 30)]
            raise KeyError("boom")
    assert calls[2:] == [(heap.M_MMAP_THRESHOLD, 32 << 20), (heap.M_TRIM_THRESHOLD, 64 << 20)]
    calls.clear()
    with heap.keep_freed_memory(1 << 30):  # a run in the driver's own process: a worker's
        assert calls == [(heap.M_MMAP_THRESHOLD, 1 << 30), (heap.M_TRIM_THRESHOLD, 1 << 30)]
    assert calls[2:] == [(heap.M_MMAP_THRESHOLD, 32 << 20), (heap.M_TRIM_THRESHOLD, 64 << 20)]
    monkeypatch.setattr(heap, "_libc", False)
    with heap.keep_freed_memory():
        pass
    assert len(calls) == 4


def test_what_a_replay_foresees_to_read_follows_the_change_not_run_order():
    """Chunks are decoded ahead for what the changed cells can reach: near them along
    the calibration chain, whole after a global operator that reads it, and nothing of
    the 1 x 1 overscan cut or of what only its mean reaches (the change may miss it)."""
    from subzero.replay.plan import foreseen, needed

    wf = workflows.build("astronomy", shape="160x96").validate()
    got = foreseen(wf, "exp1", needed(wf, "exp1", ["clust"]))
    assert [n for n in got if n.endswith("1")] == [
        "linearity1", "addmaskattr1", "badpixrm1", "rmoverscan1", "biascorrect1",
        "darkcorrect1", "flatcorrect1", "bgmean1", "rmbg1", "cr1"]
    assert not any(got[n] for n in ("linearity1", "rmoverscan1", "flatcorrect1"))
    assert all(got[n] for n in ("bgmean1", "rmbg1", "cr1", "sumexp", "rmcr", "clust"))
    assert "meanoverscan1" not in got and "overscanimg1" not in got
    assert not any(n.endswith("2") for n in got)  # the other exposure's chain is not reached
    # from the overscan's mean itself everything after it is reached whole
    got = foreseen(wf, "meanoverscan1", needed(wf, "meanoverscan1", None))
    assert got["rmoverscan1"] is True and got["clust"] is True


def test_the_replays_io_threads_read_first_in_step_order_and_the_caller_can_help():
    """Reads run before writes, an earlier step's read first; help() runs what is queued
    in the calling thread, and so does a caller waiting on result() (what is ranked no
    later than the work it waits for); shutting down with cancel_futures cancels what
    never ran."""
    import threading

    from subzero.engine.cowstore import READ, WRITE
    from subzero.pools import PriorityPool

    pool = PriorityPool(1, "subzero-test-io")
    gate, done = threading.Event(), []
    pool.submit((READ, -1), gate.wait)  # keeps the one thread busy while work queues
    futs = [pool.submit((WRITE, 0), done.append, "write a"),
            pool.submit((READ, 7), done.append, "read 7"),
            pool.submit((WRITE, 0), done.append, "write b"),
            pool.submit((READ, 2), done.append, "read 2")]
    gate.set()
    for f in futs:
        f.result(timeout=10)
    assert done == ["read 2", "read 7", "write a", "write b"]
    gate.clear()
    busy = threading.Event()
    pool.submit((READ, -1), lambda: (busy.set(), gate.wait()))
    assert busy.wait(timeout=10)  # the pool's thread holds it: help() must not
    mine = pool.submit((WRITE, 0), lambda: threading.current_thread().name)
    left = pool.submit((WRITE, 0), done.append, "helped")
    got = []
    helper = threading.Thread(target=lambda: (pool.help(), got.append(mine.result())))
    helper.start()
    helper.join(timeout=10)
    assert got == [helper.name] and done[-1] == "helped"
    # waiting for a result, the caller runs queued work (here the very work it waits for,
    # and what was queued before it) while the pool's thread is held
    queued = pool.submit((READ, 0), lambda: threading.current_thread().name)
    awaited = pool.submit((WRITE, 0), lambda: threading.current_thread().name)
    assert pool.result(awaited) == threading.current_thread().name
    assert queued.result(timeout=1) == threading.current_thread().name
    # but no work ranked after the awaited one: a later step's read is left queued
    later = pool.submit((READ, 9), lambda: threading.current_thread().name)
    early = pool.submit((READ, 3), lambda: threading.current_thread().name)
    assert pool.result(early) == threading.current_thread().name
    assert not later.done()
    assert pool.result(later) == threading.current_thread().name  # its own turn
    pending = pool.submit((WRITE, 0), done.append, "cancelled")
    pool.shutdown(wait=False, cancel_futures=True)
    gate.set()
    pool.shutdown(wait=True)
    assert pending.cancelled() and "cancelled" not in done
