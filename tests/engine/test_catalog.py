"""The catalog (subzero.engine.catalog): runs, shards, statistics and the query log over
one SQLite file, each concern a class of its own over the backend. The behaviours both
backends share run on both in test_catalog_postgres.py."""

import inspect
import subprocess
import sys

import pytest

from subzero.engine.catalog import (Catalog, CatalogBackend, QueryLog,
                                    RunContents, Runs, Shards, SQLiteBackend, Statistics,
                                    contents, querylog, runs, shards, statistics)


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

