"""``subzero rm`` and ``subzero gc``: removing runs of a real home (small runs made in this
process, a what-if replay derived from one of them, a run that failed), refusals, and
removals killed at every step then run again."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import workflows
from subzero.api import Home
from subzero.chunking import Chunking
from subzero.cli.main import main
from subzero.engine import capacity, remove, runner
from subzero.engine.catalog import Catalog
from subzero.engine.remove import TRASH_PREFIX, collect_garbage, remove_runs
from subzero.engine.runner import run_workflow
from subzero.engine.verify import verify_run
from subzero.errors import StoreError, SubZeroError
from tests.conftest import ROOT

#: the template home's runs: r1 astronomy (lineage shards), r2 a replay of r1 (its shard
#: rows name r1's shards, its unchanged arrays link to r1's), r3 example, r4 astronomy
#: failed half-way (its folder left), r5 example
ASTRO = {"shape": "48x32"}
SPLIT = Chunking(split=(2, 2))


def _run(home: Path, name: str, **params) -> str:
    wf = workflows.build(name, **params)
    return run_workflow(wf, home, strategy="subzero", chunking=SPLIT, where="driver").run


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("gc") / "home"
    assert _run(home, "astronomy", **ASTRO) == "r1"
    assert Home(home).get("r1").replay("exp1", [(3, 3)], value=0, quiet=True).id == "r2"
    assert _run(home, "example", shape="24x16") == "r3"
    with pytest.MonkeyPatch.context() as mp:  # the run stops as it ends: its folder stays
        def fail(*_a, **_k):
            raise RuntimeError("lost the executors")
        mp.setattr(runner, "_finish", fail)
        with pytest.raises(RuntimeError):
            _run(home, "astronomy", **ASTRO)
    assert _run(home, "example", shape="24x16") == "r5"
    assert _status(home) == {"r1": "complete", "r2": "complete", "r3": "complete",
                             "r4": "failed", "r5": "complete"}
    return home


@pytest.fixture
def home(template, tmp_path) -> Path:
    """A copy of the template home (hard and symbolic links kept as they are)."""
    h = tmp_path / "home"
    subprocess.run(["cp", "-a", str(template), str(h)], check=True)
    return h


def _status(home: Path) -> dict[str, str]:
    db = sqlite3.connect(home / "catalog.sqlite")
    try:
        return dict(db.execute("SELECT id, status FROM runs ORDER BY seq"))
    finally:
        db.close()


def _rows(home: Path, rid: str) -> dict[str, int]:
    """Rows of run ``rid`` in every catalog table that has a ``run`` column, and in runs."""
    db = sqlite3.connect(home / "catalog.sqlite")
    try:
        out = {"runs": db.execute("SELECT COUNT(*) FROM runs WHERE id = ?", (rid,)).fetchone()[0]}
        for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            if t != "query_log" and "run" in {c[1] for c in db.execute(f"PRAGMA table_info({t})")}:
                out[t] = db.execute(f"SELECT COUNT(*) FROM {t} WHERE run = ?", (rid,)).fetchone()[0]
        return out
    finally:
        db.close()


def _digest(path: Path) -> dict[str, str]:
    """Every entry under ``path`` (following no link): a file's SHA-256, a link's target."""
    out = {}
    for root, dirs, files in os.walk(path):
        for f in [*files, *(d for d in dirs if os.path.islink(os.path.join(root, d)))]:
            p = Path(root, f)
            out[str(p.relative_to(path))] = (f"-> {os.readlink(p)}" if p.is_symlink() else
                                             hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _catalog_dump(home: Path) -> list:
    db = sqlite3.connect(home / "catalog.sqlite")
    try:
        return list(db.iterdump())
    finally:
        db.close()


def _blocks(path: Path) -> int:
    """Disk bytes of every entry under ``path`` and of itself (no link followed)."""
    total = os.lstat(path).st_blocks * 512
    for root, dirs, files in os.walk(path):
        for f in [*files, *dirs]:
            total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _problems(home: Path, rid: str) -> list[str]:
    return [p.line() for p in verify_run(home, rid).problems]


def _assert_consistent(home: Path, template_problems: dict[str, list[str]]) -> None:
    """Every run the catalog lists verifies as it did before any removal (the failed one
    has its own problems), nothing of a removed run is left in the catalog or on disk, and
    every derived run's parent is listed."""
    listed = _status(home)
    for rid in listed:
        assert _problems(home, rid) == template_problems[rid], rid
    for rid in set(template_problems) - set(listed):
        assert not any(_rows(home, rid).values()), rid
    assert sorted(os.listdir(home / "runs")) == sorted(listed)
    db = sqlite3.connect(home / "catalog.sqlite")
    try:
        parents = [p for (p,) in db.execute("SELECT parent FROM runs WHERE parent IS NOT NULL")]
        assert db.execute("SELECT COUNT(*) FROM removed_runs WHERE done IS NULL").fetchone()[0] == 0
    finally:
        db.close()
    assert set(parents) <= set(listed)


@pytest.fixture(scope="module")
def template_problems(template) -> dict[str, list[str]]:
    return {rid: _problems(template, rid) for rid in _status(template)}


# -- rm ------------------------------------------------------------------------------------
def test_rm_removes_a_plain_run_and_says_what_it_freed(home, capsys, template_problems):
    folder = home / "runs" / "r3"
    blocks = _blocks(folder)
    assert any(_rows(home, "r3").values())
    code, out, err = _cli(capsys, "rm", "r3", "--home", str(home), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [(r["run"], r["workflow"], r["status"]) for r in doc["removed"]] == [
        ("r3", "example", "complete")]
    assert doc["removed"][0]["bytes"] == doc["bytes"] == blocks and not doc["dry_run"]
    assert not folder.exists() and not any(_rows(home, "r3").values())
    _assert_consistent(home, template_problems)
    code, out, err = _cli(capsys, "show", "r3", "--home", str(home))
    assert code == 2 and "unknown run 'r3'" in err
    db = sqlite3.connect(home / "catalog.sqlite")
    assert db.execute("SELECT id, workflow, status, bytes FROM removed_runs").fetchall() == [
        ("r3", "example", "complete", blocks)]
    db.close()
    code, out, err = _cli(capsys, "rm", "r5", "--home", str(home))  # the text form
    assert code == 0, err
    assert out.splitlines()[2].split()[:3] == ["r5", "example", "complete"]
    assert out.splitlines()[-1].startswith("freed ") and "removing 1 run" in out


def test_a_parent_is_refused_then_removed_with_its_derived_run(home, capsys,
                                                                 template_problems):
    before, rows = _digest(home / "runs"), _catalog_dump(home)
    code, out, err = _cli(capsys, "rm", "r1", "--home", str(home))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("subzero: error: run r1 is needed by "
                                                   "derived run r2")
    assert "--with-derived" in err
    assert _digest(home / "runs") == before and _catalog_dump(home) == rows
    code, out, err = _cli(capsys, "rm", "r1", "--with-derived", "--home", str(home), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [(r["run"], r["why"]) for r in doc["removed"]] == [("r2", "derived from r1"),
                                                               ("r1", "named")]
    assert all(r["bytes"] > 0 for r in doc["removed"])
    assert _status(home) == {"r3": "complete", "r4": "failed", "r5": "complete"}
    _assert_consistent(home, template_problems)


def test_removing_the_derived_run_keeps_its_parent_whole(home, capsys, template_problems):
    parent = _digest(home / "runs" / "r1")
    derived = home / "runs" / "r2"
    apparent = _blocks(derived)
    code, out, err = _cli(capsys, "rm", "r2", "--home", str(home), "--json")
    assert code == 0, err
    freed = json.loads(out)["bytes"]
    # its chunk files and manifest are hard links to r1's: removing them frees nothing
    assert 0 < freed < apparent
    assert _digest(home / "runs" / "r1") == parent
    assert verify_run(home, "r1").ok
    assert Home(home).get("r1").array("cr2").shape == (48, 32)
    _assert_consistent(home, template_problems)


def test_rm_finishes_a_removal_and_a_run_removed_before_is_no_error(home, capsys):
    assert remove_runs(home, ["r3"]).removed[0].run == "r3"
    report = remove_runs(home, ["r3"])
    assert [(r.run, r.bytes, r.why) for r in report.removed] == [("r3", 0, "removed before")]


def test_a_running_run_is_refused_naming_it(home, capsys):
    cat = Catalog(home / "catalog.sqlite")
    try:
        rid = cat.create_run("example", {}, "subzero", {})  # this process: alive
        derived = cat.create_derived_run("r3", {"kind": "replay"})
    finally:
        cat.close()
    for argv, words in (([rid], f"run {rid} is running (pid {os.getpid()})"),
                        (["r3", "--with-derived"], f"run {derived} is running")):
        code, out, err = _cli(capsys, "rm", *argv, "--home", str(home))
        assert code == 2 and err.count("\n") == 1 and words in err, err
    code, out, err = _cli(capsys, "rm", "r3", "--home", str(home))
    assert code == 2 and f"needed by derived run {derived}" in err
    report = collect_garbage(home, older_than=0)  # every run but the running ones
    assert [r.run for r in report.removed] == ["r5", "r4", "r2", "r1"]
    assert [k.run for k in report.kept] == ["r3"] and derived in report.kept[0].why
    assert set(_status(home)) == {"r3", rid, derived}


# -- gc ------------------------------------------------------------------------------------
def test_gc_failed_removes_the_failed_run_only(home, capsys, template_problems):
    code, out, err = _cli(capsys, "gc", "--failed", "--home", str(home), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [(r["run"], r["status"], r["why"]) for r in doc["removed"]] == [
        ("r4", "failed", "failed")]
    assert set(_status(home)) == {"r1", "r2", "r3", "r5"}
    _assert_consistent(home, template_problems)


def test_gc_failed_removes_a_failed_replay_and_leaves_its_parent_whole(home, monkeypatch,
                                                                       template_problems):
    import subzero.replay.runner as rp

    def fail(*_a, **_k):
        raise RuntimeError("lost the executors")

    parent = _digest(home / "runs" / "r1")
    monkeypatch.setattr(rp, "_finish", fail)
    with pytest.raises(RuntimeError):
        Home(home).get("r1").replay("exp1", [(40, 30)], value=0, quiet=True)
    monkeypatch.undo()
    assert _status(home)["r6"] == "failed" and (home / "runs" / "r6").is_dir()
    report = collect_garbage(home, failed=True)
    assert [r.run for r in report.removed] == ["r6", "r4"]
    assert _digest(home / "runs" / "r1") == parent
    _assert_consistent(home, template_problems)


def test_the_python_api_names_a_bad_criterion(home):
    for kw, words in (({"keep_last": -1}, "keep last -1"), ({"keep_last": 1.5}, "keep last 1.5"),
                      ({"older_than": -60}, "older than -60"),
                      ({"older_than": "30d"}, "older than '30d'")):
        with pytest.raises(SubZeroError, match=words):
            collect_garbage(home, **kw)
    assert len(_status(home)) == 5


def test_gc_keep_last_keeps_the_newest_complete_runs_of_each_workflow(home, capsys,
                                                                     template_problems):
    code, out, err = _cli(capsys, "gc", "--keep-last", "2", "--home", str(home), "--json")
    assert code == 0, err
    doc = json.loads(out)
    # astronomy: r2 and r1 are its two newest complete runs; example: r5 and r3
    assert [r["run"] for r in doc["removed"]] == ["r4"] and doc["kept"] == []
    code, out, err = _cli(capsys, "gc", "--keep-last", "1", "--home", str(home), "--json")
    doc = json.loads(out)
    assert [r["run"] for r in doc["removed"]] == ["r3"]
    assert [k["run"] for k in doc["kept"]] == ["r1"] and "r2" in doc["kept"][0]["why"]
    assert set(_status(home)) == {"r1", "r2", "r5"}
    _assert_consistent(home, template_problems)
    code, out, err = _cli(capsys, "gc", "--keep-last", "0", "--home", str(home))
    assert code == 0 and _status(home) == {}
    assert os.listdir(home / "runs") == []


def test_gc_older_than_counts_back_from_when_each_run_started(home, capsys,
                                                            template_problems):
    day = 86400
    db = sqlite3.connect(home / "catalog.sqlite")
    with db:  # r3 started 40 days ago, r4 (failed) 31 days ago, r5 10 days ago
        for rid, age in (("r3", 40), ("r4", 31), ("r5", 10)):
            db.execute("UPDATE runs SET started = ? WHERE id = ?", (time.time() - age * day, rid))
    db.close()
    code, out, err = _cli(capsys, "gc", "--older-than", "35d", "--failed", "--home", str(home),
                          "--json")
    assert code == 0 and json.loads(out)["removed"] == []  # the failed run is 31 days old
    code, out, err = _cli(capsys, "gc", "--older-than", "30d", "--home", str(home), "--json")
    doc = json.loads(out)
    assert [(r["run"], r["why"]) for r in doc["removed"]] == [
        ("r4", "started 31d ago"), ("r3", "started 40d ago")]
    assert set(_status(home)) == {"r1", "r2", "r5"}
    _assert_consistent(home, template_problems)


def test_gc_dry_run_changes_nothing_and_says_what_gc_frees(home, capsys):
    before, rows = _digest(home / "runs"), _catalog_dump(home)
    code, out, err = _cli(capsys, "gc", "--keep-last", "0", "--dry-run", "--home", str(home),
                          "--json")
    assert code == 0, err
    dry = json.loads(out)
    assert _digest(home / "runs") == before and _catalog_dump(home) == rows
    assert dry["dry_run"] and [r["run"] for r in dry["removed"]] == ["r5", "r4", "r3", "r2",
                                                                      "r1"]
    code, out, err = _cli(capsys, "gc", "--keep-last", "0", "--home", str(home), "--json")
    real = json.loads(out)
    assert [(r["run"], r["bytes"]) for r in real["removed"]] == [
        (r["run"], r["bytes"]) for r in dry["removed"]]
    code, out, err = _cli(capsys, "gc", "--failed", "--dry-run", "--home", str(home))
    assert out.startswith("dry run: nothing to remove")


def test_gc_without_criteria_removes_no_run(home, capsys):
    code, out, err = _cli(capsys, "gc", "--home", str(home))
    assert code == 0 and "nothing to remove" in out and "--failed" in out
    assert len(_status(home)) == 5


@pytest.mark.parametrize("argv,words", [
    (("rm", "r9"), "unknown run 'r9'"),
    (("rm",), "the following arguments are required: RUN"),
    (("gc", "--older-than", "30x"), "--older-than '30x': expected a number and a unit"),
    (("gc", "--older-than", "-3d"), "--older-than '-3d': expected a number and a unit"),
    (("gc", "--keep-last", "-1"), "--keep-last '-1': expected a whole number of runs"),
    (("gc", "--keep-last", "two"), "--keep-last 'two': expected a whole number of runs"),
])
def test_bad_arguments_are_one_line_and_change_nothing(home, capsys, argv, words):
    before = _catalog_dump(home)
    code, out, err = _cli(capsys, *argv, "--home", str(home))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("subzero: error: ") and words in err, err
    assert _catalog_dump(home) == before


def test_a_missing_home_is_one_line_and_not_made(tmp_path, capsys):
    code, out, err = _cli(capsys, "gc", "--failed", "--home", str(tmp_path / "none"))
    assert code == 2 and "no SubZero home" in err and not (tmp_path / "none").exists()


# -- killed at any point -------------------------------------------------------------------
_KILLED = """
import os, signal, sys, time
import subzero.engine.remove as rm

at, pause, calls = int(sys.argv[2]), float(sys.argv[3]), [0]
def reached(step, run):
    calls[0] += 1
    if calls[0] == at:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(pause)
rm._reached = reached
print("go", flush=True)
rm.remove_runs(sys.argv[1], ["r1", "r4"], with_derived=True)
"""


def _steps(home: Path, monkeypatch) -> list[tuple[str, str]]:
    """The points a removal of r1 (with r2) and r4 passes, in order."""
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(remove, "_reached", lambda step, run: seen.append((step, run)))
    remove_runs(home, ["r1", "r4"], with_derived=True)
    monkeypatch.undo()
    return seen


def _killed(home: Path, at: int, pause: float = 0.0, delay: float | None = None) -> float:
    """Remove r1 (with r2) and r4 of ``home`` in a process killed (SIGKILL) at the
    ``at``-th step, or ``delay`` seconds after it started removing; ``pause`` seconds at
    each step. Returns the seconds from its start to its end."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-c", _KILLED, str(home), str(at), str(pause)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline() == "go\n", p.stderr.read()
        t0 = time.perf_counter()
        if delay is not None:
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
        p.wait(timeout=120)
        took = time.perf_counter() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode in (0, -signal.SIGKILL), p.stderr.read()
    return took


@pytest.mark.slow
def test_a_removal_killed_at_each_step_is_finished_by_the_next(template, tmp_path,
                                                               template_problems, monkeypatch):
    probe = tmp_path / "probe"
    subprocess.run(["cp", "-a", str(template), str(probe)], check=True)
    steps = _steps(probe, monkeypatch)
    assert [s for s in steps if s[0] != "unlink"] == [
        (step, rid) for rid in ("r4", "r2", "r1") for step in ("rows", "renamed", "done")]
    # every step but the unlinks, and the first, a middle and the last unlink of each run
    unlinks = {}
    for i, (step, rid) in enumerate(steps, 1):
        if step == "unlink":
            unlinks.setdefault(rid, []).append(i)
    points = [i for i, (step, _) in enumerate(steps, 1) if step != "unlink"]
    for ii in unlinks.values():
        points += [ii[0], ii[len(ii) // 2], ii[-1]]
    for k, at in enumerate(sorted(points)):
        home = tmp_path / f"h{k}"
        subprocess.run(["cp", "-a", str(template), str(home)], check=True)
        _killed(home, at)
        listed = set(_status(home))
        for rid in listed:  # a reader sees each run whole, or not at all
            assert _problems(home, rid) == template_problems[rid], (at, steps[at - 1], rid)
        assert {"r3", "r5"} <= listed and ("r2" not in listed or "r1" in listed), at
        remove_runs(home, ["r1", "r4"], with_derived=True)  # again: finishes the job
        assert _status(home) == {"r3": "complete", "r5": "complete"}, at
        _assert_consistent(home, template_problems)
        assert not [n for n in os.listdir(home / "runs") if n.startswith(TRASH_PREFIX)]


@pytest.mark.slow
def test_a_removal_killed_after_a_random_delay_is_finished_by_gc(template, tmp_path,
                                                                 template_problems):
    rng = random.Random(40)
    whole = tmp_path / "whole"  # how long the removal takes, a pause at each step
    subprocess.run(["cp", "-a", str(template), str(whole)], check=True)
    took = _killed(whole, 0, pause=0.001)
    assert set(_status(whole)) == {"r3", "r5"}
    for k in range(6):
        home = tmp_path / f"h{k}"
        subprocess.run(["cp", "-a", str(template), str(home)], check=True)
        _killed(home, 0, pause=0.001, delay=rng.uniform(0.0, took))
        for rid in _status(home):
            assert _problems(home, rid) == template_problems[rid], (k, rid)
        code = main(["gc", "--home", str(home)])  # no criterion: finishes what was begun
        assert code == 0
        left = set(_status(home))
        assert {"r3", "r5"} <= left and ("r2" not in left or "r1" in left)
        _assert_consistent(home, template_problems)


def test_the_next_run_finishes_an_interrupted_removal_first(home, monkeypatch):
    class Killed(BaseException):
        pass

    def stop(step, run):
        if step == "rows":
            raise Killed

    monkeypatch.setattr(remove, "_reached", stop)
    with pytest.raises(Killed):
        remove_runs(home, ["r5"])
    monkeypatch.undo()
    assert "r5" not in _status(home) and (home / "runs" / "r5").is_dir()  # left behind
    new = _run(home, "example", shape="24x16")  # r5 again while ids follow the runs left
    assert verify_run(home, new).ok
    assert sorted(os.listdir(home / "runs")) == sorted(_status(home))
    db = sqlite3.connect(home / "catalog.sqlite")
    assert db.execute("SELECT id, done IS NOT NULL FROM removed_runs").fetchall() == [
        ("r5", 1)]
    db.close()


def test_a_version_5_catalog_gains_the_removed_runs_table(home, capsys):
    db = sqlite3.connect(home / "catalog.sqlite")
    with db:  # as SubZero left it before removals existed
        db.execute("DROP TABLE removed_runs")
        db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    db.close()
    code, out, err = _cli(capsys, "rm", "r3", "--home", str(home))
    assert code == 0, err
    cat = Catalog(home / "catalog.sqlite")
    try:
        assert cat.schema_version == 6
        assert [r[0] for r in cat.db.execute("SELECT id FROM removed_runs")] == ["r3"]
    finally:
        cat.close()


# -- the free-space check ------------------------------------------------------------------
def test_a_failed_runs_folder_does_not_count_against_the_free_space_check(home, monkeypatch):
    wf = workflows.build("example", shape="24x16").validate()
    need = capacity.array_bytes(wf)
    failed = _blocks(home / "runs" / "r4")
    notes: list[str] = []
    # the disk lacks more than the failed run holds: refused, and the failed run is kept
    monkeypatch.setattr(capacity, "free_disk", lambda h: need - failed - 1)
    with pytest.raises(StoreError, match="would store up to .* of arrays; the home") as e:
        capacity.check_fits(wf, home, notify=notes.append)
    assert "\n" not in str(e.value) and "subzero gc" in str(e.value)
    assert "r4" in _status(home) and notes == []
    # it lacks less: the failed run's folder is its space, removed for it
    monkeypatch.setattr(capacity, "free_disk", lambda h: need - failed // 2)
    capacity.check_fits(wf, home, notify=notes.append)
    assert "r4" not in _status(home) and not (home / "runs" / "r4").exists()
    assert len(notes) == 1 and notes[0].startswith("removed run r4 (astronomy, failed)")
    monkeypatch.undo()
    res = run_workflow(wf, home, chunking=SPLIT, where="driver")
    assert res.run == "r6" and verify_run(home, "r6").ok
