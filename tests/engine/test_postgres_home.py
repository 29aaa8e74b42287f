"""A home whose catalog is PostgreSQL, end to end on a real server on 127.0.0.1: runs and
queries from several processes, the configuration written once in the home, and every
kind of bad catalog refused in one line with nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from subzero.engine import homeconfig
from tests.conftest import ROOT, run_cli

QUERY = ("query", "latest", "backward", "--from", "bright", "--cells", "3,4;10,10", "--to", "image",
         "--json")


@pytest.fixture(autouse=True)
def _no_request(monkeypatch):
    monkeypatch.delenv("SUBZERO_CATALOG", raising=False)
    monkeypatch.setattr(homeconfig, "_requested", None)
    monkeypatch.setattr(homeconfig, "_per_home", {})


def _env(server) -> dict[str, str]:
    """A process that knows the catalog's password the usual way (libpq's PGPASSWORD)."""
    return {"PGPASSWORD": server.password, "SUBZERO_CATALOG": ""}


def _cells(p: subprocess.CompletedProcess) -> list:
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    return sorted(map(tuple, doc["cells"])) if "cells" in doc else doc


def test_a_home_with_a_postgresql_catalog_runs_and_answers_from_other_processes(
        postgres_server, tmp_path):
    db = postgres_server.create_database("home_e2e")
    url = postgres_server.url(db)
    home, local = tmp_path / "pg-home", tmp_path / "sqlite-home"
    p = run_cli("run", "example", "--home", str(home), "--catalog", url, "--strategy",
                "full-one", env={"PGPASSWORD": ""})
    assert p.returncode == 0, p.stderr
    # the home names its catalog, without the password; there is no SQLite file
    conf = json.loads((home / "home.json").read_text())
    assert conf["catalog"] == postgres_server.url(db, password=False)
    assert postgres_server.password not in (home / "home.json").read_text()
    assert not (home / "catalog.sqlite").exists()
    # the same run in an SQLite home, for the answers
    assert run_cli("run", "example", "--home", str(local), "--strategy",
                   "full-one").returncode == 0

    # another process finds the catalog from the home alone (the password from PGPASSWORD)
    runs = run_cli("runs", "--home", str(home), "--json", env=_env(postgres_server))
    assert runs.returncode == 0, runs.stderr
    assert [(r["run"], r["status"]) for r in json.loads(runs.stdout)] == [("r1", "complete")]
    got = run_cli(*QUERY, "--home", str(home), env=_env(postgres_server))
    want = run_cli(*QUERY, "--home", str(local))
    assert got.returncode == 0 and want.returncode == 0, got.stderr + want.stderr
    a, b = json.loads(got.stdout), json.loads(want.stdout)
    assert a["count"] == b["count"] > 0
    # the query was logged in PostgreSQL (a reader of a shared catalog records its queries)
    import psycopg

    with psycopg.connect(url) as conn:
        n = conn.execute("SELECT COUNT(*) FROM query_log").fetchone()[0]
        owner = conn.execute("SELECT value FROM meta WHERE key = 'home'").fetchone()[0]
    assert n >= 1 and owner == conf["id"]


def test_runs_from_two_processes_at_once_share_one_catalog(postgres_server, tmp_path):
    db = postgres_server.create_database("home_two")
    home = tmp_path / "home"
    # made once, then two runs at once from two processes
    assert run_cli("run", "example", "--home", str(home), "--catalog",
                   postgres_server.url(db)).returncode == 0
    e = {**__import__("os").environ, "PGPASSWORD": postgres_server.password,
         "PYTHONPATH": str(ROOT), "SUBZERO_CATALOG": ""}
    procs = [subprocess.Popen([sys.executable, "-m", "subzero.cli", "run", "example", "--home",
                               str(home), "--strategy", s], env=e, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for s in ("full-one", "blackbox")]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    runs = json.loads(run_cli("runs", "--home", str(home), "--json",
                              env=_env(postgres_server)).stdout)
    assert sorted(r["run"] for r in runs) == ["r1", "r2", "r3"]
    assert {r["status"] for r in runs} == {"complete"}
    # removing a run removes its rows and its files
    assert run_cli("rm", "r2", "--home", str(home),
                   env=_env(postgres_server)).returncode == 0
    runs = json.loads(run_cli("runs", "--home", str(home), "--json",
                              env=_env(postgres_server)).stdout)
    assert sorted(r["run"] for r in runs) == ["r1", "r3"]
    assert not (home / "runs" / "r2").exists()


def test_the_python_api_opens_a_postgresql_home(postgres_server, tmp_path, spark):
    from subzero.api import Home

    db = postgres_server.create_database("home_api")
    h = Home(tmp_path / "home", catalog=postgres_server.url(db))
    run = h.run("example", strategy="full-one", quiet=True, where="driver")
    res = run.backward(np.array([[3, 4]]), "bright", to="image")
    assert res.count > 0
    assert [r["id"] for r in h.runs()] == [run.id]
    assert (tmp_path / "home" / "home.json").is_file()


def test_a_catalog_belongs_to_one_home(postgres_server, tmp_path):
    db = postgres_server.create_database("home_owned")
    url = postgres_server.url(db)
    assert run_cli("run", "example", "--home", str(tmp_path / "a"), "--catalog",
                   url).returncode == 0
    p = run_cli("run", "example", "--home", str(tmp_path / "b"), "--catalog", url)
    assert p.returncode == 2 and "belongs to another SubZero home" in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and postgres_server.password not in p.stderr
    assert not (tmp_path / "b" / "home.json").exists()


@pytest.mark.parametrize("bad", ["password", "port", "database"])
def test_a_bad_catalog_is_one_line_within_10_s_and_nothing_is_written(
        postgres_server, tmp_path, bad):
    s = postgres_server
    url = {"password": f"postgresql://{s.user}:wrong@{s.host}:{s.port}/postgres",
           "port": f"postgresql://{s.user}:{s.password}@127.0.0.1:9/postgres",
           "database": s.url("no_such_database")}[bad]
    home = tmp_path / "home"
    t0 = time.perf_counter()
    p = run_cli("runs", "--home", str(home), "--catalog", url)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    p = run_cli("run", "example", "--home", str(home), "--catalog", url,
                env={"PGPASSWORD": ""})
    assert time.perf_counter() - t0 < 2 * 10 + 10  # two commands, each within 10 s
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("subzero: error: ")
    assert "wrong" not in p.stderr and s.password not in p.stderr
    assert not (home / "home.json").exists() and not (home / "runs").exists()
