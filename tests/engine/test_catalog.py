"""The catalog (subzero.engine.catalog): runs, shards, statistics and the query log over
one SQLite file, each concern a class of its own over the backend."""

import inspect
import subprocess
import sys

import numpy as np
import pytest

from subzero.engine.catalog import (SCHEMA_VERSION, Catalog, CatalogBackend, QueryLog,
                                    RunContents, Runs, Shards, SQLiteBackend, Statistics,
                                    contents, querylog, runs, shards, statistics)
from subzero.errors import CatalogError


def test_catalog_schema_version_and_runs(tmp_path):
    cat = Catalog(tmp_path / "c.sqlite")
    assert cat.schema_version == SCHEMA_VERSION
    r1 = cat.create_run("wf", {"a": 1}, "subzero", {"op": ["map"]})
    r2 = cat.create_run("wf", {}, "blackbox", {})
    assert (r1, r2) == ("r1", "r2")
    cat.finish_run(r1, "complete", runtime_s=1.5, input_bytes=10, lineage_bytes=0)
    assert cat.run("latest")["id"] == "r1"
    assert cat.run("r2")["status"] == "running"
    with pytest.raises(CatalogError, match="unknown run 'r9'"):
        cat.run("r9")
    cat.log_query("r1", "backward", "x", "y", [["x", 0]], 1, 5, 0.01, [])
    assert cat.query_log("r1")[0]["path"] == [["x", 0]]
    cat.db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    cat.close()
    with pytest.raises(CatalogError, match="schema version 99"):
        Catalog(tmp_path / "c.sqlite")


def test_a_transaction_inside_another_is_part_of_it(tmp_path):
    """A stage's rows go in one commit (the runner wraps an operator's records in one
    transaction, each record opening its own inside): all of them, or none."""
    cat = Catalog(tmp_path / "c.sqlite")
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
    other = Catalog(tmp_path / "c.sqlite")  # committed: another connection sees both
    assert sorted(r["strategy"] for r in other.statistics(rid)) == ["s", "t"]


def test_stale_running_run_of_a_dead_process_is_marked_failed(tmp_path):
    path = tmp_path / "c.sqlite"
    code = ("from subzero.engine.catalog import Catalog; import sys; "
            f"Catalog({str(path)!r}).create_run('wf', {{}}, None, {{}})")
    subprocess.run([sys.executable, "-c", code], check=True)
    cat = Catalog(path)  # the creating process is gone
    r = cat.run("r1")
    assert r["status"] == "failed" and "interrupted" in r["error"]
    mine = cat.create_run("wf", {}, None, {})
    assert cat.reap_stale_runs() == [] and cat.run(mine)["status"] == "running"


def test_logged_queries_are_written_in_batches_and_seen_by_every_reader(tmp_path, monkeypatch):
    monkeypatch.setattr(querylog, "LOG_BATCH", 3)
    path = tmp_path / "catalog.sqlite"
    a, b = Catalog(path), Catalog(path)

    def rows_on_disk() -> int:
        return b.db.execute("SELECT COUNT(*) FROM query_log").fetchone()[0]

    a.log_query("r1", "forward", "x", "y", [["y", 0]], 1, 2, 0.001, [{"method": "map"}])
    a.log_query("r1", "forward", "x", "y", [["y", 0]], 1, 2, 0.001, [])
    assert rows_on_disk() == 0  # waiting for the batch
    # another catalog object of the same file, in this process, reads them all
    log = b.query_log("r1")
    assert [q["steps"] for q in log] == [[{"method": "map"}], []] and rows_on_disk() == 2
    for _ in range(3):
        a.log_query("r1", "backward", "y", "x", [["y", 0]], 1, 1, 0.001, [])
    assert rows_on_disk() == 5  # a full batch is written at once
    a.log_query("r1", "backward", "y", "x", [["y", 0]], 1, 1, 0.001, [])
    a.close()  # closing writes the rest
    assert rows_on_disk() == 6
    b.close()


def test_queries_logged_by_a_process_are_written_when_it_exits(tmp_path):
    path = tmp_path / "catalog.sqlite"
    code = ("import sys; from subzero.engine.catalog import Catalog; "
            "c = Catalog(sys.argv[1]); "
            "c.log_query('r1', 'forward', 'x', 'y', [['y', 0]], 1, 2, 0.001, [])")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    assert len(Catalog(path).query_log("r1")) == 1


def test_the_catalog_is_every_concern_over_the_sqlite_backend(tmp_path):
    cat = Catalog(tmp_path / "c.sqlite")
    for concern in (Runs, RunContents, Shards, Statistics, QueryLog, SQLiteBackend):
        assert isinstance(cat, concern) and issubclass(concern, CatalogBackend)
    assert Catalog.__mro__.index(QueryLog) < Catalog.__mro__.index(SQLiteBackend)
    cat.close()


@pytest.mark.parametrize("module", [runs, contents, shards, statistics, querylog])
def test_the_concerns_leave_sqlite_to_the_backend(module):
    """What another database would need differently (the driver, REPLACE, PRAGMA, rowid)
    is the backend's: a concern's SQL is what SQLite and PostgreSQL share."""
    source = inspect.getsource(module)
    for word in ("sqlite3", "INSERT OR REPLACE", "PRAGMA", "rowid", "BEGIN"):
        assert word not in source, f"{module.__name__} says {word!r}"


def _shard(chunk, attempt=0, **more):
    return dict(op="a", strategy="PayOne", chunk=chunk, path=f"runs/r1/a/{chunk}",
                data_bytes=10, index_bytes=2, pairs=3, out_cells=4, in_cells=5, fanin=1.0,
                fanout=2.0, encode_s=0.1, attempt=attempt, **more)


def test_a_retried_shard_replaces_the_earlier_attempt(tmp_path):
    cat = Catalog(tmp_path / "c.sqlite")
    rid = cat.create_run("wf", {}, "subzero", {})
    cat.add_shards(rid, [_shard("0.0"), _shard("0.1", checksum="abc")])
    cat.add_shards(rid, [_shard("0.0", attempt=1)])
    cat.add_shards(rid, [])
    got = cat.shards(rid)
    assert [(s["chunk"], s["attempt"], s["checksum"]) for s in got] == [
        ("0.0", 1, None), ("0.1", 0, "abc")]
    assert cat.shards(rid, op="b") == [] and len(cat.shards(rid, "a", "PayOne")) == 2


def test_an_operator_profile_is_replaced_whole_and_costs_by_name(tmp_path):
    cat = Catalog(tmp_path / "c.sqlite")
    rid = cat.create_run("wf", {}, "subzero", {})
    cat.set_op_stats(rid, "a", status="complete", runtime_s=2.0, pairs=7)
    cat.set_op_stats(rid, "a", status="failed", note="boom")
    assert {k: v for k, v in cat.op_stats(rid)["a"].items() if v is not None} == {
        "run": rid, "op": "a", "status": "failed", "note": "boom"}
    cat.set_statistics(rid, "a", "PayOne", {"records": 3, "bytes": 10})
    cat.set_statistics(rid, "a", "PayOne", {"records": 4})
    assert sorted((r["key"], r["value"]) for r in cat.statistics(rid)) == [
        ("bytes", 10.0), ("records", 4.0)]
    assert cat.statistics() == cat.statistics(rid)


def test_a_derived_run_inherits_the_rows_asked_for_but_the_shards_skipped(tmp_path):
    cat = Catalog(tmp_path / "c.sqlite")
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
    with pytest.raises(CatalogError, match="unknown run 'r9'"):
        cat.create_derived_run("r9", {})


def test_named_cells_are_cached_per_run_and_name(tmp_path):
    cat = Catalog(tmp_path / "c.sqlite")
    assert cat.named_cells("r1", "stars") is None
    cat.set_named_cells("r1", {"stars": np.array([[1, 2], [3, 4]])})
    cat.set_named_cells("r1", {"stars": np.array([[5, 6]])})
    assert cat.named_cells("r1", "stars").tolist() == [[5, 6]]
    assert cat.named_cells("r2", "stars") is None
