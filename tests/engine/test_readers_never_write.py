"""Readers never write: every kind of read leaves every file of a home as it was, for every
encoding and direction, a replay's shared shards included; a home on a read-only mount
answers every reading command."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from subzero.api import Home
from subzero.cli import main
from subzero.engine.runner import run_workflow
from subzero.engine.verify import verify_run
from tests.conftest import ROOT, run_cli
from tests.query.udfs import flare_workflow
from workflows import astronomy

#: every encoding, both directions, payloads and composite lineage
STRATEGIES = ("full-one", "full-many", "full-both", "pay-one", "pay-many", "comp-many",
              "subzero")


def digests(home: Path) -> dict[str, str]:
    """Every file of the home but the catalog (where a writable home logs its queries)."""
    out = {}
    for p in sorted(home.rglob("*")):
        if p.is_file() and not p.name.startswith("catalog.sqlite"):
            out[str(p.relative_to(home))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


#: per workflow: a query's (output array, cells, input array), and an operator to check
QUERY = {"flares": ("resid", [(5, 5), (20, 10)], "sky", "flare"),
         "astronomy": ("rmcr", [(40, 30), (41, 30)], "exp1", "cr1")}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("readers") / "home"
    runs = {}
    for s in STRATEGIES:
        runs[s] = run_workflow(flare_workflow(), h, strategy=s, where="driver").run
    # the astronomy workflow's stars and cosmic rays make R-trees that a closing reader
    # used to write back
    astro = astronomy.build(shape="400x200", data="generated")
    runs["astronomy"] = run_workflow(astro, h, strategy="full-many", where="driver").run
    parent = Home(h).get(runs["full-many"])
    derived = parent.replay("sky", [(3, 3), (10, 12)], value=50.0, quiet=True)
    runs["replayed"] = derived.id
    return h, runs


def _queries(h: Path, rid: str) -> None:
    run = Home(h).get(rid)
    out, cells, src, _ = QUERY[run.workflow.name]
    for method in ("stored", "reexec", "auto"):
        try:
            run.backward(cells, start=out, to=src, method=method)
            run.forward(cells[:1], start=src, to=out, method=method)
        except Exception as e:  # noqa: BLE001 - a method the run lacks is refused, not a write
            assert "--method" in str(e) or "stores no lineage" in str(e), e
    run.array(out)


def _explorer(h: Path, rid: str) -> None:
    from subzero.serve.explorer import Explorer

    ex = Explorer(h)
    try:
        ex.runs()
        ex.run_info(rid)
        out, cells, src, _ = QUERY[ex.run_info(rid)["workflow"]]
        ex.tile(rid, out, 0, 0, 0)
        ex.query(rid, {"direction": "backward", "from": out,
                       "cells": f"{cells[0][0]},{cells[0][1]}", "to": src})
    finally:
        ex.close()


@pytest.mark.parametrize("kind", ["queries", "verify", "explorer", "checker"])
def test_every_read_leaves_every_file_as_it_was(home, kind, capsys):
    h, runs = home
    before = digests(h)
    for s, rid in runs.items():
        if kind == "queries":
            _queries(h, rid)
        elif kind == "verify":
            assert verify_run(h, rid).ok, s
            assert verify_run(h, rid).ok, s  # twice: the first read changed nothing
        elif kind == "explorer":
            _explorer(h, rid)
        else:
            op = QUERY["astronomy" if s == "astronomy" else "flares"][3]
            assert main(["check-lineage", f"{rid}:{op}", "--samples", "2", "--home",
                         str(h)]) == 0
    assert digests(h) == before


def test_a_replay_reads_its_parent_without_writing_it(home):
    h, runs = home
    before = digests(h)
    new = Home(h).get(runs["pay-many"]).replay("sky", [(7, 7)], value=-3.0, quiet=True)
    after = digests(h)
    prefix = str(Path("runs") / new.id) + os.sep
    assert {k: v for k, v in after.items() if not k.startswith(prefix)} == before
    _queries(h, new.id)
    assert verify_run(h, new.id).ok and verify_run(h, runs["pay-many"]).ok


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, timeout=300)


@pytest.fixture
def read_only(home, tmp_path):
    """The home, bind-mounted read-only (skipped where this process cannot mount)."""
    h, runs = home
    target = tmp_path / "ro"
    target.mkdir()
    ok = subprocess.run(["mount", "--bind", str(h), str(target)], capture_output=True)
    if ok.returncode != 0:
        pytest.skip(f"cannot bind-mount here ({ok.stderr.decode().strip()[:80]})")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(target)],
                            capture_output=True)
        if ro.returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield target, runs, h
    finally:
        # lazily: readers of this process may still hold files of it open
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_a_home_on_a_read_only_mount_answers_every_reading_command(read_only):
    h, runs, source = read_only
    exported = Path(os.environ.get("TMPDIR", "/tmp")) / f"ro-{os.getpid()}.npy"
    with pytest.raises(OSError):
        (h / "probe").write_text("x")  # it is read-only
    rid = runs["full-many"]
    q = ("query", rid, "backward", "--from", "resid", "--cells", "5,5", "--to", "sky",
         "--home", str(h))
    astro = ("query", runs["astronomy"], "backward", "--from", "rmcr", "--cells", "40,30",
             "--to", "exp1", "--method", "stored", "--home", str(h))
    for args in (q, (*q[:-2], "--method", "stored", "--home", str(h)), astro,
                 ("query", runs["replayed"], "backward", "--from", "flare", "--cells", "3,3",
                  "--to", "sky", "--home", str(h)),
                 ("export", rid, "flare", str(exported), "--home", str(h)),
                 ("verify", rid, "--home", str(h)), ("show", rid, "--home", str(h)),
                 ("runs", "--home", str(h)),
                 ("check-lineage", f"{rid}:flare", "--samples", "2", "--home", str(h))):
        p = _cli(*args)
        assert p.returncode == 0, (args, p.stderr)
    notes = _cli(*q).stderr
    assert "read-only here" in notes and notes.count("\n") == 1  # said once
    one = _cli("replay", rid, "--from", "sky", "--cells", "1,1", "--set", "0", "--home",
               str(h))
    assert one.returncode == 2 and "read-only" in one.stderr
    assert len(one.stderr.strip().splitlines()) == 1
    _explorer(h, rid)
    cells = json.loads(_cli(*q, "--json").stdout)["count"]
    assert cells == Home(h).get(rid).backward([(5, 5)], start="resid", to="sky").count
    try:  # what the read-only home exported is the array the writable one holds
        assert np.array_equal(np.load(exported), Home(source).get(rid).array("flare"))
    finally:
        exported.unlink(missing_ok=True)


def test_another_users_home_answers_every_reading_command(home):
    """The home belongs to root, and the reader is user nobody: nothing can be written,
    and every reading command answers (skipped where this process cannot switch users)."""
    import shutil
    import tempfile

    h, runs = home
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to read the home as another user")
    base = Path(tempfile.mkdtemp(prefix="subzero-foreign-"))
    try:
        base.chmod(0o755)
        foreign = base / "home"
        shutil.copytree(h, foreign)
        subprocess.run(["chmod", "-R", "a+rX,go-w", str(foreign)], check=True)
        out = base / "out"
        out.mkdir()
        out.chmod(0o777)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = subprocess.run([*nobody, sys.executable, "-c", "print(1)"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            pytest.skip(f"user nobody cannot run this Python ({probe.stderr.strip()[:80]})")
        env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(out))
        rid = runs["full-many"]
        for args in (("query", rid, "backward", "--from", "resid", "--cells", "5,5", "--to",
                      "sky", "--home", str(foreign)),
                     ("query", runs["astronomy"], "backward", "--from", "rmcr", "--cells",
                      "40,30", "--to", "exp1", "--method", "stored", "--home", str(foreign)),
                     ("export", rid, "flare", str(out / "x.npy"), "--home", str(foreign)),
                     ("verify", rid, "--home", str(foreign)),
                     ("show", rid, "--home", str(foreign)), ("runs", "--home", str(foreign))):
            p = subprocess.run([*nobody, sys.executable, "-m", "subzero.cli", *args],
                               capture_output=True, text=True, env=env, timeout=300, cwd=out)
            assert p.returncode == 0, (args, p.stderr)
        assert digests(foreign) == digests(h)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_threads_asking_for_one_shard_share_one_reader(home, monkeypatch):
    """The explorer's query workers may ask for the same shard at once: one opens it,
    every one gets that reader (LMDB refuses a second open in one process)."""
    import threading
    import time

    from encoders import lookup
    from subzero.engine.catalog import Catalog

    h, runs = home
    cat = Catalog(h / "catalog.sqlite")
    try:
        row = next(r for r in cat.shards(runs["full-one"]))
    finally:
        cat.close()
    path = h / row["path"]
    lookup._SHARED.pop(lookup._shared_key(path), None)
    slow_open = lookup.open_shard

    def opening(p):
        time.sleep(0.05)  # a wide window for a second thread to ask meanwhile
        return slow_open(p)

    monkeypatch.setattr(lookup, "open_shard", opening)
    start, got, errors = threading.Barrier(6), [], []

    def ask():
        start.wait()
        try:
            got.append(lookup.shared_shard(path))
        except Exception as e:  # noqa: BLE001 - what the test looks for
            errors.append(e)

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 6 and all(r is got[0] for r in got)
