"""The astronomy workflow on a Spark standalone cluster whose two workers share nothing but
an S3 endpoint and a PostgreSQL catalog (each its own scratch folder, no home path, the
Python environment shipped with --ship-env), a worker killed mid-run: the arrays and every
named query equal a local run's, no object of an attempt that lost is left, and queries and
the explorer from other processes with empty caches answer the same."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

import workflows
from subzero.api import Home
from subzero.engine import homeconfig
from subzero.engine.cluster import start_cluster
from subzero.engine.runner import run_workflow
from tests.conftest import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.spark]

SHAPE = "1000x500"  # long enough that tasks are in flight when a worker dies
QUERIES = ["BQ0", "BQ1", "BQ2", "BQ3", "BQ4", "FQ0"]

EXPLORE = """
import json, sys
from subzero.serve.explorer import Explorer
ex = Explorer(sys.argv[1])
print(json.dumps({q: ex.named(sys.argv[2], q)["results"][0]["count"] for q in sys.argv[3:]}))
ex.close()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with start_cluster(tmp_path_factory.mktemp("cluster"), workers=2, cores=1, memory="1g",
                       separate_scratch=True) as cl:
        yield cl


def _objects(s3_server, bucket: str, prefix: str) -> list[str]:
    out, token = [], None
    s3 = s3_server.client()
    while True:
        kw = {"Bucket": bucket, "Prefix": prefix, **({"ContinuationToken": token} if token
                                                     else {})}
        page = s3.list_objects_v2(**kw)
        out += [o["Key"] for o in page.get("Contents", [])]
        token = page.get("NextContinuationToken")
        if not token:
            return out


def test_astronomy_on_a_cluster_that_shares_only_s3_and_postgresql(
        cluster, spark, s3_server, postgres_server, tmp_path, monkeypatch, subzero_cache):
    name = uuid.uuid4().hex[:10]
    bucket = s3_server.make_bucket(f"c-{name}")
    catalog = postgres_server.url(postgres_server.create_database(f"c_{name}"), password=False)
    url = s3_server.url(bucket, "home")
    driver_cache = subzero_cache  # the environment's archive is packed once per session
    env = {**os.environ, **s3_server.env, "PGPASSWORD": postgres_server.password,
           "SUBZERO_CACHE": str(driver_cache), "PYTHONPATH": str(ROOT), "SUBZERO_CATALOG": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "subzero.cli", "run", "astronomy", "--home", url, "--catalog",
         catalog, "--master", cluster.master_url, "--param", f"shape={SHAPE}", "--strategy",
         "full-one", "--ship-env", "--json"], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    trigger = None
    try:  # worker 0 dies once lineage objects arrive: tasks are in flight
        deadline = time.monotonic() + 900
        while trigger is None and proc.poll() is None and time.monotonic() < deadline:
            if any("/lineage/" in k for k in _objects(s3_server, bucket, "home/runs/")):
                trigger = "lineage objects written"
            time.sleep(0.2)
        assert trigger is not None, "the run ended before worker 0 could be killed"
        killed = cluster.kill_worker(0)
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed == [cluster.workers[0].pid]
    assert proc.returncode == 0, err[-3000:]
    rid = json.loads(out)["run"]
    assert cluster.alive_workers() == 1

    # the workers kept nothing in the driver's folder: arrays and shards are objects only
    (local_root,) = (driver_cache / "homes").glob(f"c-{name}-home-*")
    assert not list(local_root.glob("runs/*/lineage/**/data.mdb"))
    assert not list(local_root.glob("runs/*/arrays/*.zarr/c"))
    assert "Lost executor" in (local_root / "logs" / "spark.log").read_text()

    # every shard object is under the attempt folder its catalog row names: none of a loser
    keys = [k for k in _objects(s3_server, bucket, f"home/runs/{rid}/lineage/")]
    import psycopg

    with psycopg.connect(catalog, password=postgres_server.password) as conn:
        rows = [r[0] for r in conn.execute("SELECT path FROM shards WHERE run = %s", (rid,))]
    assert rows and {k.rsplit("/", 1)[0] for k in keys} == {f"home/{r}" for r in rows}
    assert all(re.fullmatch(r"a[0-9]+-[0-9a-f]{8}", r.rsplit("/", 1)[1]) for r in rows)

    # this process reads the home with an empty cache of its own
    for k, v in {**s3_server.env, "PGPASSWORD": postgres_server.password,
                 "SUBZERO_CACHE": str(tmp_path / "reader-cache")}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SUBZERO_CATALOG", raising=False)
    monkeypatch.setattr(homeconfig, "_per_home", {})
    local = run_workflow(workflows.build("astronomy", shape=SHAPE), tmp_path / "local",
                         strategy="full-one", spark=spark).run
    a, b = Home(url).get(rid), Home(tmp_path / "local").get(local)
    assert sorted(a.arrays) == sorted(b.arrays)
    for arr in a.arrays:
        x, y = a.array(arr), b.array(arr)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"), arr
    assert list(a.workflow.queries) == QUERIES
    want = {}
    for q in QUERIES:
        ra, rb = a.named_query(q), b.named_query(q)
        assert ra.array == rb.array and ra.count == rb.count > 0, q
        assert np.array_equal(ra.linear, rb.linear), q
        want[q] = rb.count

    # the explorer in another process, with an empty cache too, gives the same answers
    env["SUBZERO_CACHE"] = str(tmp_path / "explorer-cache")
    p = subprocess.run([sys.executable, "-c", EXPLORE, url, rid, *QUERIES], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == want
    assert any((tmp_path / "explorer-cache").rglob("data.mdb"))  # its shards came down
