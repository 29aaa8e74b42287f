"""Fault injection on real processes and real files: a Python worker killed mid-task under
the default master, shards and array chunks damaged under a finished run, and the disk
budget measured on the files themselves."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from encoders.lookup import ShardReader
from subzero.cli import main
from subzero.engine.verify import verify_run
from subzero.errors import DamagedError
from subzero.query.stored import ShardReaders
from tests.conftest import ROOT

pytestmark = pytest.mark.spark


# -- a worker killed mid-task ---------------------------------------------------------------

KILL_RUN = ["astronomy", "--strategy", "full-one", "--param", "shape=1200x513",
            "--param", "data=generated", "--chunks", "4", "--where", "spark"]


def _leftovers(home: Path) -> list[Path]:
    return sorted(home.glob("runs/*/lineage/*/*/.tmp.*")) + sorted(
        home.glob("runs/*/lineage/*/*/.old.*"))


def _kill_a_writer(proc: subprocess.Popen, home: Path, timeout: float = 300.0
                   ) -> tuple[int, str] | None:
    """SIGKILL the Python worker writing a shard, seen by its temporary directory (named
    ``.tmp.<chunk>.<attempt>.<host>.<pid>.<uuid>``), while the run goes on. Returns the
    pid and the directory of a writer killed mid-write (the directory still there after
    the kill: it never published), or None if the run ended first."""
    end = time.monotonic() + timeout
    tried: set[int] = set()
    while proc.poll() is None and time.monotonic() < end:
        for tmp in home.glob("runs/*/lineage/*/*/.tmp.*"):
            pid = int(tmp.name.split(".")[-2])
            if pid in tried or pid == os.getpid():
                continue
            tried.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            time.sleep(0.05)
            if tmp.exists():
                return pid, tmp.name
            if len(tried) >= 5:
                return None
        time.sleep(0.002)
    return None


def _rows(home: Path, rid: str = "r1") -> list[dict]:
    db = sqlite3.connect(home / "catalog.sqlite")
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute(
            "SELECT * FROM shards WHERE run = ? ORDER BY op, strategy, chunk", (rid,))]
    finally:
        db.close()


@pytest.mark.slow
def test_run_survives_a_python_worker_killed_mid_shard(spark, tmp_path, record_property):
    """Default master (``local[*,4]``): the killed task runs again, the run completes, and
    only the successful attempt's shards remain, each once, whole, equal to a run that
    was never disturbed."""
    home = tmp_path / "killed"
    env = dict(os.environ)
    env.pop("SUBZERO_SPARK_MASTER", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, "-m", "subzero.cli", "run", *KILL_RUN,
                             "--home", str(home), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        killed = _kill_a_writer(proc, home)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    record_property("killed", killed)
    assert killed is not None, "the run ended before a writer could be killed mid-shard"
    assert proc.returncode == 0, err
    assert "starting Spark (local[*,4])" in err
    doc = json.loads(out)
    assert doc["run"] == "r1"
    # nothing half-written or set aside remains, and every shard on disk is cataloged once
    assert _leftovers(home) == []
    rows = _rows(home)
    on_disk = sorted(str(p.relative_to(home)) for p in home.glob("runs/r1/lineage/*/*/*"))
    assert sorted(r["path"] for r in rows) == on_disk
    assert max(r["attempt"] for r in rows) >= 1  # the killed task's retry published
    report = verify_run(home, "r1")
    assert report.ok, [p.line() for p in report.problems]
    assert report.unchecksummed == 0
    # the same as an undisturbed run: every array, every shard's pairs, a query's answer
    from subzero.api import Home

    ref_home = tmp_path / "undisturbed"
    ref = Home(ref_home).run("astronomy", strategy="full-one", shape="1200x513",
                             data="generated", split=(4,), quiet=True)
    got = Home(home).get("r1")
    assert sorted(got.arrays) == sorted(ref.arrays)
    for name in ref.arrays:
        np.testing.assert_array_equal(got.array(name), ref.array(name), err_msg=name)
    key = [(r["op"], r["strategy"], r["chunk"], r["pairs"]) for r in rows]
    assert key == [(r["op"], r["strategy"], r["chunk"], r["pairs"]) for r in _rows(ref_home)]
    a, b = got.named_query("BQ3", "stored"), ref.named_query("BQ3", "stored")
    np.testing.assert_array_equal(a.mask, b.mask)


# -- damaged files under a finished run ------------------------------------------------------


@pytest.fixture(scope="module")
def finished(spark, tmp_path_factory):
    from subzero.api import Home

    home = tmp_path_factory.mktemp("faults") / "home"
    run = Home(home).run("astronomy", strategy="subzero", shape="96x64", quiet=True)
    answer = run.named_query("BQ3", "stored")
    return home, answer.mask.copy()


@pytest.fixture
def damaged(finished, tmp_path):
    home, mask = finished
    h = tmp_path / "home"
    shutil.copytree(home, h)
    return h, mask


def _clust_shard(home: Path) -> Path:
    rows = [r for r in _rows(home) if r["op"] == "clust"]
    assert len(rows) == 1, rows
    return home / rows[0]["path"]


def _query(home: Path, capsys, *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["query", "r1", "--named", "BQ3", "--home", str(home), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_garbage_page_auto_reexecutes_and_says_so(damaged, capsys, tmp_path):
    home, want = damaged
    with open(_clust_shard(home) / "data.mdb", "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(4096))
    mask = tmp_path / "m.npy"
    code, out, err = _query(home, capsys, "--out", str(mask), "--json")
    assert code == 0 and err == ""
    np.testing.assert_array_equal(np.load(mask), want)  # the same answer as intact
    steps = {s["operator"]: s for s in json.loads(out)["steps"]}
    assert steps["clust"]["method"] == "reexec"
    note = steps["clust"]["note"]
    assert "'clust'" in note and "comp-one-bwd" in note and "chunk 0.0" in note
    assert "subzero verify r1" in note
    code, out, _ = _query(home, capsys)
    assert code == 0 and "note: clust: damaged lineage shard of operator 'clust'" in out


def test_garbage_page_with_method_stored_is_one_line(damaged, capsys):
    home, _ = damaged
    with open(_clust_shard(home) / "data.mdb", "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(4096))
    code, out, err = _query(home, capsys, "--method", "stored")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert ("damaged lineage shard of operator 'clust', strategy comp-one-bwd, chunk 0.0"
            in lines[0])
    assert "subzero verify r1" in lines[0] and "internal error" not in err


def test_a_decoder_bug_on_an_intact_shard_is_not_called_damage(damaged, capsys, monkeypatch):
    """A decoding error (KeyError, ValueError, IndexError) on a shard whose files still
    match their checksum is a bug: it is raised, not hidden as damage behind a
    re-execution; the same error on a shard that no longer matches is damage."""
    home, _ = damaged

    def decoder_bug(self, *args, **kwargs):
        raise KeyError("cells_v2")

    for name in ("backward", "forward", "payload_pairs"):
        monkeypatch.setattr(ShardReader, name, decoder_bug)
    code, out, err = _query(home, capsys)
    assert code != 0 and "cells_v2" in err, (out, err)
    assert "damaged lineage shard" not in out + err
    # the same error once the shard's files no longer match (damaged after it was opened
    # and checked): damage
    rows = [r for r in _rows(home) if r["op"] == "clust"]
    reader = ShardReaders(str(home)).reader(rows[0])
    with pytest.raises(KeyError, match="cells_v2"):
        reader.payload_pairs(None)
    with open(_clust_shard(home) / "data.mdb", "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(4096))
    with pytest.raises(DamagedError, match="'clust'.*KeyError: 'cells_v2'"):
        reader.payload_pairs(None)


@pytest.mark.parametrize("damage", ["remove", "truncate"])
def test_missing_or_cut_shard_falls_back_under_auto(damaged, capsys, damage):
    home, want = damaged
    shard = _clust_shard(home)
    if damage == "remove":
        shutil.rmtree(shard)
    else:
        with open(shard / "data.mdb", "r+b") as f:
            f.truncate(4096)
    code, out, err = _query(home, capsys, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["count"] == int(want.sum())
    clust = next(s for s in doc["steps"] if s["operator"] == "clust")
    assert clust["method"] == "reexec" and "chunk 0.0" in clust["note"]


def test_missing_array_chunk_is_named_in_one_line(damaged, capsys, tmp_path):
    """Re-execution of ``clust`` reads ``rmcr``; its missing chunk is named (never read as
    zeros); --method auto reads the stored lineage instead; export names it too."""
    home, want = damaged
    (home / "runs" / "r1" / "arrays" / "rmcr.zarr" / "c" / "0" / "0").unlink()
    code, _, err = _query(home, capsys, "--method", "reexec")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "array 'rmcr' chunk 0.0 is missing" in lines[0] and "subzero verify" in lines[0]
    capsys.readouterr()
    assert main(["export", "r1", "rmcr", str(tmp_path / "x.npy"), "--home", str(home)]) == 2
    assert "array 'rmcr' chunk 0.0 is missing" in capsys.readouterr().err
    # auto: stored lineage answers the step that re-execution cannot
    mask = tmp_path / "m.npy"
    code, _, err = _query(home, capsys, "--out", str(mask))
    assert code == 0, err
    np.testing.assert_array_equal(np.load(mask), want)


def test_a_stored_read_switched_to_a_damaged_reexecution_reads_on(damaged, capsys, tmp_path,
                                                                   monkeypatch):
    """Stored lineage that outruns its budget switches to re-execution; when that finds an
    array chunk missing, --method auto reads the stored lineage to the end instead of
    failing (and says so), whatever the machine's speed made the budget."""
    from subzero.query.executor import QueryExecutor

    home, want = damaged
    (home / "runs" / "r1" / "arrays" / "rmcr.zarr" / "c" / "0" / "0").unlink()
    real = QueryExecutor._stored
    timed_out = []

    def slow(self, op, i, backward, f, s, deadline):
        if op.name == "clust" and deadline is not None:
            timed_out.append(op.name)
            return None  # the budget ran out before the shards answered
        return real(self, op, i, backward, f, s, deadline)

    monkeypatch.setattr(QueryExecutor, "_stored", slow)
    mask = tmp_path / "m.npy"
    code, out, err = _query(home, capsys, "--out", str(mask), "--json")
    assert code == 0 and err == "", err
    np.testing.assert_array_equal(np.load(mask), want)
    assert timed_out == ["clust"]
    clust = next(s for s in json.loads(out)["steps"] if s["operator"] == "clust")
    assert clust["method"].startswith("stored:")
    assert "array 'rmcr' chunk 0.0 is missing" in clust["note"]
    assert "read stored lineage to the end instead" in clust["note"]
    code, _, err = _query(home, capsys, "--method", "stored")  # no budget: nothing to switch
    assert code == 0, err


def test_auto_reexecution_that_finds_an_array_chunk_missing_reads_stored_lineage(
        damaged, capsys, tmp_path, monkeypatch):
    """When --method auto chooses re-execution and a chunk it reads is missing, the task's
    error reaches the query as damage (not as any user error), and the stored lineage
    answers instead."""
    from subzero.query.choice import MethodChoice

    home, want = damaged
    (home / "runs" / "r1" / "arrays" / "rmcr.zarr" / "c" / "0" / "0").unlink()
    real = MethodChoice.choose

    def reexec_clust(self, op, i, backward, f, method):
        if op.name == "clust" and method == "auto":
            return ("reexec", None), None
        return real(self, op, i, backward, f, method)

    monkeypatch.setattr(MethodChoice, "choose", reexec_clust)
    mask = tmp_path / "m.npy"
    code, out, err = _query(home, capsys, "--out", str(mask), "--json")
    assert code == 0 and err == "", err
    np.testing.assert_array_equal(np.load(mask), want)
    clust = next(s for s in json.loads(out)["steps"] if s["operator"] == "clust")
    assert clust["method"].startswith("stored:")
    assert "read stored lineage instead" in clust["note"]


def test_truncated_array_chunk_is_named_in_one_line(damaged, capsys, tmp_path):
    home, _ = damaged
    chunk = home / "runs" / "r1" / "arrays" / "rmcr.zarr" / "c" / "0" / "0"
    chunk.write_bytes(chunk.read_bytes()[:16])
    capsys.readouterr()
    assert main(["export", "r1", "rmcr", str(tmp_path / "x.npy"), "--home", str(home)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "array 'rmcr' chunk 0.0 cannot be read" in lines[0], lines
    assert not (tmp_path / "x.npy").exists()


# -- the disk budget on the files themselves --------------------------------------------------


def _du(path: Path, *flags: str) -> int:
    out = subprocess.run(["du", "-s", *flags, str(path)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[0])


@pytest.mark.parametrize("budget", [300_000, 712_704])
def test_max_disk_bounds_the_bytes_on_disk(spark, tmp_path, budget):
    """``--max-disk`` bounds what the lineage folder takes by ``du`` (apparent bytes,
    folders included, and allocated blocks), not only the catalog's logical bytes."""
    from subzero.api import Home

    home = tmp_path / "home"
    run = Home(home).run("astronomy", strategy="full-one", shape="300x200", max_disk=budget,
                         quiet=True)
    lineage = home / "runs" / run.id / "lineage"
    kept = [o for o in run.result.operators if o["lineage_bytes"]]
    dropped = [o for o in run.result.operators if "over the disk budget" in o.get("note", "")]
    assert kept and dropped  # the budget binds, and something fits
    if lineage.exists():
        assert _du(lineage, "-b") <= budget
        assert _du(lineage, "-B1") <= budget
    assert verify_run(home, run.id).ok
