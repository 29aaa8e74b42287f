"""A home in S3-compatible object storage with a PostgreSQL catalog, end to end on real
servers on 127.0.0.1 (moto's S3 API server and PostgreSQL): runs write their arrays and
shards as objects, readers in other processes with an empty cache get the same answers as
a local home, the objects of attempts that lost are gone, and bad input is one line."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from subzero.engine import homeconfig
from tests.conftest import run_cli

QUERY = ("query", "latest", "backward", "--from", "bright", "--cells", "3,4;10,10;40,7",
         "--to", "image", "--json")


@pytest.fixture(autouse=True)
def _no_request(monkeypatch):
    monkeypatch.delenv("SUBZERO_CATALOG", raising=False)
    monkeypatch.setattr(homeconfig, "_requested", None)
    monkeypatch.setattr(homeconfig, "_per_home", {})


@pytest.fixture
def remote(s3_server, postgres_server, tmp_path):
    """A fresh bucket and database, and the environment a process reaches them with
    (its own cache folder: ``env(cache)``)."""
    name = uuid.uuid4().hex[:12]
    bucket = s3_server.make_bucket(f"b-{name}")
    db = postgres_server.create_database(f"d_{name}")

    def env(cache: str = "cache") -> dict[str, str]:
        return {**s3_server.env, "PGPASSWORD": postgres_server.password,
                "SUBZERO_CACHE": str(tmp_path / cache), "SUBZERO_CATALOG": ""}

    class Remote:
        url = s3_server.url(bucket, "lab/home")
        catalog = postgres_server.url(db, password=False)
    Remote.env = staticmethod(env)
    Remote.bucket = bucket
    Remote.objects = staticmethod(lambda prefix="lab/home/": sorted(
        o["Key"] for o in s3_server.client().list_objects_v2(
            Bucket=bucket, Prefix=prefix).get("Contents", [])))
    return Remote


#: stored lineage for every kind of shard: FULL both ways, and the compressed encoding
PLAN = {"calibrate": ["full-one-bwd", "full-one-fwd"], "smooth": ["full-compact-bwd"],
        "background": ["full-many-bwd"], "residual": ["full-one-bwd"],
        "bright": ["full-one-bwd", "full-many-fwd"]}


def _run(remote, *args, cache="cache"):
    return run_cli("run", "example", "--home", remote.url, *args, env=remote.env(cache))


@pytest.fixture
def plan(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PLAN))
    return str(path)


@pytest.mark.parametrize("where", ["driver", "spark"])
def test_a_run_in_object_storage_answers_as_a_local_home(remote, tmp_path, where, plan):
    p = _run(remote, "--catalog", remote.catalog, "--plan", plan, "--where", where)
    assert p.returncode == 0, p.stderr
    keys = remote.objects()
    assert "lab/home/home.json" in keys and "lab/home/runs/r1/manifest.json" in keys
    assert any(k.startswith("lab/home/runs/r1/arrays/bright.zarr/c/") for k in keys)
    shard_keys = [k for k in keys if "/lineage/" in k]
    # each shard's objects are under a folder of the attempt that wrote it
    assert shard_keys and all(re.fullmatch(r"a[0-9]+-[0-9a-f]{8}", k.rsplit("/", 2)[-2])
                              for k in shard_keys)
    # every shard object is under an attempt folder the catalog names: none of a loser
    import psycopg

    with psycopg.connect(remote.catalog, password=__import__("os").environ.get(
            "PGPASSWORD", remote.env()["PGPASSWORD"])) as conn:
        rows = [r[0] for r in conn.execute("SELECT path FROM shards WHERE run = 'r1'")]
    assert rows and {k.rsplit("/", 1)[0] for k in shard_keys} == {f"lab/home/{r}"
                                                                  for r in rows}
    # the same run in a local home, for the answers
    local = tmp_path / "local"
    assert run_cli("run", "example", "--home", str(local), "--plan", plan).returncode == 0
    want = json.loads(run_cli(*QUERY, "--home", str(local)).stdout)
    # another process with an empty cache finds the catalog from the home's URL alone
    got = run_cli(*QUERY, "--home", remote.url, env=remote.env("other-cache"))
    assert got.returncode == 0, got.stderr
    got = json.loads(got.stdout)
    assert got["count"] == want["count"] > 0
    for kind in ("method", "count"):
        assert got.get(kind) == want.get(kind)
    assert (tmp_path / "other-cache").is_dir()
    v = run_cli("verify", "latest", "--home", remote.url, "--json",
                env=remote.env("verify-cache"))
    assert v.returncode == 0 and json.loads(v.stdout)["ok"], v.stdout + v.stderr


def test_removing_a_run_deletes_its_objects(remote, plan):
    assert _run(remote, "--catalog", remote.catalog, "--plan", plan).returncode == 0
    assert _run(remote, "--strategy", "blackbox").returncode == 0
    assert any(k.startswith("lab/home/runs/r1/") for k in remote.objects())
    p = run_cli("rm", "r1", "--home", remote.url, env=remote.env())
    assert p.returncode == 0, p.stderr
    assert not any(k.startswith("lab/home/runs/r1/") for k in remote.objects())
    assert any(k.startswith("lab/home/runs/r2/") for k in remote.objects())
    runs = json.loads(run_cli("runs", "--home", remote.url, "--json",
                              env=remote.env("c2")).stdout)
    assert [r["run"] for r in runs] == ["r2"]


def test_an_object_store_home_needs_a_postgresql_catalog(remote):
    p = _run(remote)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "needs a PostgreSQL catalog" in p.stderr
    assert remote.objects() == []


@pytest.mark.parametrize("bad", ["bucket", "endpoint", "credentials"])
def test_a_bad_object_store_is_one_line_within_10_s_and_nothing_is_written(
        remote, s3_auth_server, bad):
    env = remote.env()
    url = remote.url
    if bad == "bucket":
        url = "s3://no-such-bucket-anywhere/home"
    elif bad == "endpoint":
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
    else:  # a server that checks keys (moto's IAM), given a wrong secret
        bucket = s3_auth_server.make_bucket("checked")
        url = s3_auth_server.url(bucket, "lab/home")
        env.update(s3_auth_server.env, AWS_SECRET_ACCESS_KEY="wrong-secret")
    t0 = time.perf_counter()
    p = run_cli("run", "example", "--home", url, "--catalog", remote.catalog, env=env)
    assert time.perf_counter() - t0 < 10 + 8  # the CLI's own start-up besides
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "wrong-secret" not in p.stderr and "Traceback" not in p.stderr
    assert {"bucket": "does not exist", "endpoint": "cannot reach",
            "credentials": "refused the credentials"}[bad] in p.stderr
    assert remote.objects() == []
    import psycopg

    with psycopg.connect(remote.catalog, password=remote.env()["PGPASSWORD"]) as conn:
        assert conn.execute("SELECT to_regclass('runs')").fetchone()[0] is None or \
            conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_a_killed_driver_leaves_a_failed_run_whose_objects_gc_removes(remote, plan):
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, **remote.env(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "subzero.cli", "run", "example", "--home", remote.url,
         "--catalog", remote.catalog, "--plan", plan, "--param", "shape=3000x2000",
         "--where", "driver"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if any("/arrays/" in k for k in remote.objects("lab/home/runs/r1/")):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before its driver could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert remote.objects("lab/home/runs/r1/")
    runs = json.loads(run_cli("runs", "--home", remote.url, "--json",
                              env=remote.env("c2")).stdout)
    assert [(r["run"], r["status"]) for r in runs] == [("r1", "failed")]
    p = run_cli("gc", "--failed", "--home", remote.url, env=remote.env("c2"))
    assert p.returncode == 0, p.stderr
    assert remote.objects("lab/home/runs/") == []


def test_gc_sweeps_shard_objects_no_row_names(remote, plan, s3_server):
    assert _run(remote, "--catalog", remote.catalog, "--plan", plan).returncode == 0
    keys = [k for k in remote.objects("lab/home/runs/r1/lineage/")]
    stray = keys[0].rsplit("/", 2)[0] + "/a7-0123abcd/data.mdb"  # an attempt that lost
    s3_server.client().put_object(Bucket=remote.bucket, Key=stray, Body=b"x")
    p = run_cli("gc", "--home", remote.url, env=remote.env())
    assert p.returncode == 0, p.stderr
    assert remote.objects("lab/home/runs/r1/lineage/") == keys


def test_a_reading_command_on_an_empty_bucket_names_the_url(remote):
    p = run_cli("runs", "--home", remote.url, env=remote.env())
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert f"no SubZero home at {remote.url} " in p.stderr
    assert remote.objects() == []
