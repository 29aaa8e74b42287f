"""The catalog over PostgreSQL (subzero.engine.catalog.postgres): the catalog's behaviours
on both backends, many processes writing one database at once, schema versions and their
migrations, and bad URLs refused in one line."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from subzero.engine.catalog import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Catalog,
    CatalogBackend,
    QueryLog,
    RunContents,
    Runs,
    Shards,
    Statistics,
    querylog,
)
from subzero.errors import CatalogError
from tests.engine.test_catalog import _shard

_NAMES = itertools.count()


@dataclass
class Opener:
    """How to open the catalog under test, here and in another process."""

    kind: str
    target: str  # the SQLite file, or the database's URL
    home: Path

    def open(self):
        if self.kind == "sqlite":
            return Catalog(self.target)
        from subzero.engine.catalog import PostgresCatalog

        return PostgresCatalog(self.target, self.home)

    @property
    def source(self) -> str:
        """Python opening the catalog as ``c`` (for a subprocess)."""
        if self.kind == "sqlite":
            return f"from subzero.engine.catalog import Catalog; c = Catalog({self.target!r})"
        return ("from subzero.engine.catalog import PostgresCatalog; "
                f"c = PostgresCatalog({self.target!r}, {str(self.home)!r})")


def _fresh_database(server) -> str:
    """The URL of a new empty database on ``server``, whose locale orders text otherwise
    than SQLite does (English: "éclair" before "full" before "PayOne")."""
    import psycopg

    name = f"cat{os.getpid()}_{next(_NAMES)}"
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu "
                     "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
    return server.url(name)


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request, tmp_path):
    """The catalog of a fresh home, in SQLite or in a fresh PostgreSQL database; every
    catalog it opened is closed afterwards."""
    home = tmp_path / "home"
    if request.param == "sqlite":
        home.mkdir()
        made = Opener("sqlite", str(home / "catalog.sqlite"), home)
    else:
        made = Opener("postgres", _fresh_database(request.getfixturevalue("postgres_server")),
                      home)
    opened = []
    plain = made.open

    def tracked():
        cat = plain()
        opened.append(cat)
        return cat

    made.open = tracked
    yield made
    for cat in opened:
        cat.db.close()


# -- the catalog's behaviours, on both backends -----------------------------------------------
def test_catalog_schema_version_and_runs(opener):
    cat = opener.open()
    assert cat.schema_version == SCHEMA_VERSION and not cat.readonly and not cat.full
    r1 = cat.create_run("wf", {"a": 1}, "subzero", {"op": ["map"]})
    r2 = cat.create_run("wf", {}, "blackbox", {})
    assert (r1, r2) == ("r1", "r2")
    cat.finish_run(r1, "complete", runtime_s=1.5, input_bytes=10, lineage_bytes=0)
    latest = cat.run("latest")
    assert (latest["id"], latest["params"], latest["runtime_s"], latest["input_bytes"]) == (
        "r1", {"a": 1}, 1.5, 10)
    assert cat.run("latest:wf")["id"] == "r1" and cat.run("r2")["status"] == "running"
    assert [r["id"] for r in cat.runs()] == ["r1", "r2"]
    with pytest.raises(CatalogError, match="unknown run 'r9'"):
        cat.run("r9")
    with pytest.raises(CatalogError, match=f"no complete run of workflow 'other' in "
                                           f"{re.escape(str(opener.home))}"):
        cat.run("latest:other")
    cat.log_query("r1", "backward", "x", "y", [["x", 0]], 1, 5, 0.01, [])
    assert cat.query_log("r1")[0]["path"] == [["x", 0]]
    cat.db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    cat.close()
    with pytest.raises(CatalogError, match="schema version 99"):
        opener.open()


def test_a_transaction_inside_another_is_part_of_it(opener):
    cat = opener.open()
    rid = cat.create_run("wf", {}, "subzero", {})
    with pytest.raises(KeyError):
        with cat.tx():
            cat.set_statistics(rid, "op", "s", {"records": 3})
            assert cat.db.in_transaction
            raise KeyError("boom")
    assert cat.statistics(rid) == []  # the inner record went with the outer transaction
    with cat.tx():
        cat.set_statistics(rid, "op", "s", {"records": 3})
        cat.set_statistics(rid, "op", "t", {"records": 4})
        assert cat.db.in_transaction
    assert not cat.db.in_transaction
    other = opener.open()  # committed: another connection sees both
    assert sorted(r["strategy"] for r in other.statistics(rid)) == ["s", "t"]


def test_only_this_hosts_runs_of_dead_processes_are_marked_failed(opener):
    code = f"{opener.source}; c.create_run('wf', {{}}, None, {{}})"
    subprocess.run([sys.executable, "-c", code], check=True)
    cat = opener.open()  # the creating process is gone
    r = cat.run("r1")
    assert r["status"] == "failed" and "interrupted" in r["error"]
    with cat.tx() as db:  # a run of another host, whose process this host cannot see
        db.execute("INSERT INTO runs (id, seq, workflow, status, pid, host, started) "
                   "VALUES ('r2', 2, 'wf', 'running', NULL, 'another-host', 0)")
    mine = cat.create_run("wf", {}, None, {})
    assert cat.reap_stale_runs() == [] and cat.run(mine)["status"] == "running"
    assert cat.run("r2")["status"] == "running"


def test_logged_queries_are_written_in_batches_and_seen_by_every_reader(opener, monkeypatch):
    monkeypatch.setattr(querylog, "LOG_BATCH", 3)
    a, b = opener.open(), opener.open()

    def rows_written() -> int:
        return b.db.execute("SELECT COUNT(*) FROM query_log").fetchone()[0]

    a.log_query("r1", "forward", "x", "y", [["y", 0]], 1, 2, 0.001, [{"method": "map"}])
    a.log_query("r1", "forward", "x", "y", [["y", 0]], 1, 2, 0.001, [])
    assert rows_written() == 0  # waiting for the batch
    log = b.query_log("r1")
    assert [q["steps"] for q in log] == [[{"method": "map"}], []] and rows_written() == 2
    for _ in range(3):
        a.log_query("r1", "backward", "y", "x", [["y", 0]], 1, 1, 0.001, [])
    assert rows_written() == 5  # a full batch is written at once
    a.log_query("r1", "backward", "y", "x", [["y", 0]], 1, 1, 0.001, [])
    a.close()  # closing writes the rest
    assert rows_written() == 6
    ids = [q["id"] for q in b.query_log()]
    assert ids == sorted(ids) and len(set(ids)) == 6


def test_queries_logged_by_a_process_are_written_when_it_exits(opener):
    code = f"{opener.source}; c.log_query('r1', 'forward', 'x', 'y', [['y', 0]], 1, 2, 0.5, [])"
    subprocess.run([sys.executable, "-c", code], check=True)
    (q,) = opener.open().query_log("r1")
    assert (q["direction"], q["path"], q["elapsed_s"]) == ("forward", [["y", 0]], 0.5)


def test_a_retried_shard_replaces_the_earlier_attempt(opener):
    cat = opener.open()
    rid = cat.create_run("wf", {}, "subzero", {})
    cat.add_shards(rid, [_shard("0.0"), _shard("0.1", checksum="abc")])
    cat.add_shards(rid, [_shard("0.0", attempt=1)])
    cat.add_shards(rid, [_shard("0.1", attempt=2)])  # replaced whole: no checksum now
    cat.add_shards(rid, [])
    got = cat.shards(rid)
    assert [(s["chunk"], s["attempt"], s["checksum"]) for s in got] == [
        ("0.0", 1, None), ("0.1", 2, None)]
    assert cat.shards(rid, op="b") == [] and len(cat.shards(rid, "a", "PayOne")) == 2


def test_text_is_ordered_by_its_bytes_on_both_backends(opener):
    cat = opener.open()
    rid = cat.create_run("wf", {}, "subzero", {})
    cat.add_shards(rid, [{**_shard("0.0"), "strategy": s} for s in ("full_one_bwd", "PayOne",
                                                                     "Zeta", "éclair")])
    assert [s["strategy"] for s in cat.shards(rid)] == [
        "PayOne", "Zeta", "full_one_bwd", "éclair"]


def test_an_operator_profile_is_replaced_whole_and_costs_by_name(opener):
    cat = opener.open()
    rid = cat.create_run("wf", {}, "subzero", {})
    cat.set_op_stats(rid, "a", status="complete", runtime_s=2.0, pairs=7)
    cat.set_op_stats(rid, "a", status="failed", note="boom")
    assert {k: v for k, v in cat.op_stats(rid)["a"].items() if v is not None} == {
        "run": rid, "op": "a", "status": "failed", "note": "boom"}
    cat.set_statistics(rid, "a", "PayOne", {"records": 3, "bytes": 10})
    cat.set_statistics(rid, "a", "PayOne", {"records": np.int64(4)})
    assert sorted((r["key"], r["value"]) for r in cat.statistics(rid)) == [
        ("bytes", 10.0), ("records", 4.0)]
    assert sorted(cat.statistics(), key=str) == sorted(cat.statistics(rid), key=str)


def test_arrays_operators_and_origins_are_read_back(opener):
    cat = opener.open()
    rid = cat.create_run("wf", {}, "subzero", {})
    cat.add_array(rid, "x", (4, 4), "f8", (2, 2), None, 128, origin={"file": "x.npy"})
    cat.add_array(rid, "w", (4,), "f8", (2,), None, 32)
    cat.add_array(rid, "y", (4, 4), "f8", (2, 2), "a", 128)
    cat.set_array_bytes(rid, {"y": 99})
    cat.add_operator(rid, 0, "a", "Copy", "elementwise", {"k": 1}, ["x"], ["map"],
                     ["PayOne"], "blockwise")
    cat.set_operator_strategies(rid, "a", ["PayBoth"])
    cat.set_manifest(rid, "f" * 64, {"a": {"class": "Copy"}})
    arrays = cat.arrays(rid)
    assert (arrays["x"]["shape"], arrays["y"]["stored_bytes"]) == ((4, 4), 99)
    op = cat.operators(rid)["a"]
    assert (op["params"], op["strategies"], op["code"]) == (
        {"k": 1}, ["PayBoth"], {"class": "Copy"})
    assert cat.run(rid)["manifest"] == "f" * 64
    # inputs in the order they were recorded
    assert cat.input_origins(rid) == {rid: {"x": {"file": "x.npy"}, "w": None}}
    assert list(cat.input_origins()[rid]) == ["x", "w"]
    cat.finish_run(rid, "complete")
    assert cat.newest_with_array("y") == {"id": rid, "workflow": "wf"}
    assert cat.newest_with_array("nope") is None


def test_a_derived_run_inherits_the_rows_asked_for_but_the_shards_skipped(opener):
    cat = opener.open()
    parent = cat.create_run("wf", {"n": 1}, "subzero", {"a": ["map"]}, chunking=[2, 2])
    for name, producer in (("x", None), ("y", "a"), ("z", "b")):
        cat.add_array(parent, name, (4, 4), "f8", (2, 2), producer, 128)
    for k, name in enumerate("ab"):
        cat.add_operator(parent, k, name, "Copy", "elementwise", {}, ["x"], ["map"],
                         ["PayOne"], "blockwise")
        cat.set_op_stats(parent, name, status="complete")
        cat.set_statistics(parent, name, "PayOne", {"records": 1})
    cat.set_statistics(parent, "*", "run", {"records": 2})
    cat.add_shards(parent, [_shard("0.0"), _shard("0.1")])
    child = cat.create_derived_run(parent, {"changed": "b"})
    cat.inherit_rows(parent, child, ["x", "y"], ["a"], skip_shards=[("a", "0.1")])
    info = cat.run(child)
    assert (info["parent"], info["derivation"], info["params"], info["chunking"]) == (
        parent, {"changed": "b"}, {"n": 1}, [2, 2])
    assert sorted(cat.arrays(child)) == ["x", "y"] and list(cat.operators(child)) == ["a"]
    assert list(cat.op_stats(child)) == ["a"]
    assert sorted(r["op"] for r in cat.statistics(child)) == ["*", "a"]
    assert [s["chunk"] for s in cat.shards(child)] == ["0.0"]
    assert cat.derived_runs(parent) == [child]
    # no arrays asked for: none copied (an empty list of names)
    other = cat.create_derived_run(parent, {})
    cat.inherit_rows(parent, other, [], ["b"])
    assert cat.arrays(other) == {} and list(cat.operators(other)) == ["b"]
    with pytest.raises(CatalogError, match="unknown run 'r9'"):
        cat.create_derived_run("r9", {})


def test_named_cells_are_cached_per_run_and_name(opener):
    cat = opener.open()
    assert cat.named_cells("r1", "stars") is None
    cat.set_named_cells("r1", {"stars": np.array([[1, 2], [3, 4]])})
    cat.set_named_cells("r1", {"stars": np.array([[5, 6]])})
    assert cat.named_cells("r1", "stars").tolist() == [[5, 6]]
    assert cat.named_cells("r2", "stars") is None


# -- PostgreSQL only ---------------------------------------------------------------------------
def test_the_postgres_catalog_is_every_concern_with_the_catalogs_api():
    from subzero.engine.catalog import PostgresBackend, PostgresCatalog

    for concern in (Runs, RunContents, Shards, Statistics, QueryLog, PostgresBackend):
        assert issubclass(PostgresCatalog, concern) and issubclass(concern, CatalogBackend)
    assert PostgresCatalog.__mro__.index(QueryLog) < PostgresCatalog.__mro__.index(
        PostgresBackend)

    def public(cls):
        return {n for n in dir(cls) if not n.startswith("_")}

    assert public(PostgresCatalog) == public(Catalog)


def test_importing_the_catalog_does_not_import_psycopg():
    code = ("import sys, subzero.engine.catalog as c; assert 'psycopg' not in sys.modules; "
            "c.PostgresCatalog; assert 'psycopg' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def _worker(url: str, home: str, n: int, start, out) -> None:
    """One process of the concurrency test: open the catalog when every process is
    ready, then create, fill and finish ``n`` runs."""
    from subzero.engine.catalog import PostgresCatalog

    start.wait()
    cat = PostgresCatalog(url, home)
    made = []
    for i in range(n):
        rid = cat.create_run("wf", {"i": i}, "subzero", {})
        cat.add_shards(rid, [_shard(f"{i}.{k}") for k in range(3)])
        cat.log_query(rid, "backward", "y", "x", [["y", 0]], 1, 1, 0.001, [])
        cat.flush_query_log()
        cat.finish_run(rid, "complete", runtime_s=0.1)
        made.append(rid)
    cat.close()
    out.put((os.getpid(), made))


def test_many_processes_write_one_fresh_database_at_once(postgres_server, tmp_path):
    from subzero.engine.catalog import PostgresCatalog

    url, procs, n = _fresh_database(postgres_server), 4, 12
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(url, str(tmp_path), n, start, out))
               for _ in range(procs)]
    for w in workers:
        w.start()
    got, deadline = [], time.monotonic() + 60
    while len(got) < procs:
        try:
            got.append(out.get(timeout=0.5))
        except queue.Empty:
            failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            assert not failed, f"a writer failed (exit codes {failed})"
            assert time.monotonic() < deadline, "the writers did not finish"
    for w in workers:
        w.join(timeout=30)
        assert w.exitcode == 0
    made = [rid for _, rids in got for rid in rids]
    assert len(made) == len(set(made)) == procs * n  # every run id unique
    cat = PostgresCatalog(url, tmp_path)
    runs = cat.runs()
    assert sorted(r["id"] for r in runs) == sorted(made)
    assert sorted(r["seq"] for r in runs) == list(range(1, procs * n + 1))
    assert all(r["status"] == "complete" for r in runs)
    assert sum(len(cat.shards(rid)) for rid in made) == 3 * procs * n
    log = cat.query_log()
    assert sorted(q["run"] for q in log) == sorted(made)
    assert cat.schema_version == SCHEMA_VERSION
    assert cat.db.execute("SELECT COUNT(*) FROM meta").fetchone()[0] == 1
    cat.close()


def test_a_newer_catalog_is_refused_in_one_line_and_left_alone(postgres_server, tmp_path):
    from subzero.engine.catalog import PostgresCatalog

    url = _fresh_database(postgres_server)
    cat = PostgresCatalog(url, tmp_path)
    cat.db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                   (str(SCHEMA_VERSION + 1),))
    cat.db.execute("DROP TABLE removed_runs")  # what opening would create again
    with pytest.raises(CatalogError) as e:
        PostgresCatalog(url, tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and postgres_server.password not in msg
    assert f"schema version {SCHEMA_VERSION + 1}" in msg and "upgrade SubZero" in msg
    assert cat.db.execute("SELECT to_regclass('removed_runs')").fetchone()[0] is None
    assert cat.schema_version == SCHEMA_VERSION + 1
    cat.close()


def test_an_older_catalog_is_migrated_when_opened(postgres_server, tmp_path):
    from subzero.engine.catalog import PostgresCatalog

    url = _fresh_database(postgres_server)
    cat = PostgresCatalog(url, tmp_path)
    # a catalog of version 1: today's tables without what each migration added
    for v in sorted(MIGRATIONS, reverse=True):
        for stmt in MIGRATIONS[v]:
            added = re.fullmatch(r"ALTER TABLE (\w+) ADD COLUMN (\w+) .*", stmt)
            made = re.match(r"CREATE TABLE IF NOT EXISTS (\w+)", stmt)
            cat.db.execute(f"ALTER TABLE {added[1]} DROP COLUMN {added[2]}" if added
                           else f"DROP TABLE {made[1]}")
    cat.db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    cat.db.execute("INSERT INTO runs (id, seq, workflow, status, host, started) "
                   "VALUES ('r1', 1, 'old', 'complete', 'another-host', 0)")
    assert "manifest" not in cat._columns("runs")
    cat.close()
    cat = PostgresCatalog(url, tmp_path)
    assert cat.schema_version == SCHEMA_VERSION
    assert {"parent", "derivation", "placement", "manifest"} <= set(cat._columns("runs"))
    assert "checksum" in cat._columns("shards") and "origin" in cat._columns("arrays")
    old = cat.run("r1")
    assert (old["workflow"], old["manifest"]) == ("old", None)
    assert cat.create_run("wf", {}, None, {}) == "r2"
    cat.db.execute("SELECT COUNT(*) FROM removed_runs").fetchone()
    cat.close()


def test_a_role_that_cannot_write_reads_the_catalog(postgres_server, tmp_path):
    from subzero.engine.catalog import PostgresCatalog

    url = _fresh_database(postgres_server)
    cat = PostgresCatalog(url, tmp_path)
    rid = cat.create_run("wf", {}, None, {})
    cat.finish_run(rid, "complete")
    dbname = url.rsplit("/", 1)[1]
    role = f"reader{next(_NAMES)}"
    cat.db.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'r3ad'")
    cat.db.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    reader = PostgresCatalog(f"postgresql://{role}:r3ad@{postgres_server.host}:"
                             f"{postgres_server.port}/{dbname}", tmp_path)
    assert reader.readonly and reader.run("latest")["id"] == rid
    reader.log_query(rid, "forward", "x", "y", [], 1, 1, 0.1, [])  # skipped, not an error
    with pytest.raises(CatalogError, match="read-only"):
        reader.create_run("wf", {}, None, {})
    assert reader.query_log() == []
    reader.close()
    cat.close()
    # a fresh database this role may not create tables in: refused, nothing made
    empty = _fresh_database(postgres_server)
    with pytest.raises(CatalogError, match="has no tables yet and this role cannot create "
                                           "them") as e:
        PostgresCatalog(empty.replace(f"{postgres_server.user}:{postgres_server.password}",
                                      f"{role}:r3ad"), tmp_path)
    assert "\n" not in str(e.value) and "r3ad" not in str(e.value)


# -- bad input: one line, without the password, in time -------------------------------------
def _refused(url: str, password: str) -> str:
    """The message opening ``url`` fails with, checked to be quick, one line and
    without ``password``."""
    from subzero.engine.catalog import PostgresCatalog

    began = time.monotonic()
    with pytest.raises(CatalogError) as e:
        PostgresCatalog(url, "/nonexistent/home")
    assert time.monotonic() - began < 10
    msg = str(e.value)
    assert "\n" not in msg and password not in msg
    return msg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening_is_refused_in_one_line():
    port = _free_port()
    msg = _refused(f"postgresql://me:s3cret@127.0.0.1:{port}/lineage", "s3cret")
    assert f"postgresql://me@127.0.0.1:{port}/lineage" in msg
    assert f"expected a PostgreSQL server accepting connections at 127.0.0.1:{port}" in msg


def test_a_wrong_password_is_refused_in_one_line(postgres_server, monkeypatch):
    s = postgres_server
    url = f"postgresql://{s.user}:not-{s.password}@{s.host}:{s.port}/postgres"
    msg = _refused(url, f"not-{s.password}")
    assert "password authentication failed" in msg and s.url(password=False) in msg
    # the same from $PGPASSWORD, and the right one from there works
    monkeypatch.setenv("PGPASSWORD", "wrong-" + s.password)
    assert "password authentication failed" in _refused(s.url(password=False),
                                                        "wrong-" + s.password)
    monkeypatch.setenv("PGPASSWORD", s.password)
    from subzero.engine.catalog import PostgresCatalog

    PostgresCatalog(s.url(s.create_database(f"pw{next(_NAMES)}"), password=False),
                    "/nonexistent/home").close()


def test_a_missing_database_is_refused_in_one_line(postgres_server):
    msg = _refused(postgres_server.url("no_such_db"), postgres_server.password)
    assert 'database "no_such_db" does not exist' in msg and "expected an existing" in msg
    assert postgres_server.url("no_such_db", password=False) in msg


def test_a_server_that_is_not_postgresql_is_refused_in_one_line():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def answer() -> None:  # an HTTP server's answer to anything
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    try:
        msg = _refused(f"postgresql://me:s3cret@127.0.0.1:{port}/x", "s3cret")
    finally:
        listener.close()
    assert f"expected a PostgreSQL server accepting connections at 127.0.0.1:{port}" in msg
