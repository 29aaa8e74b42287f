"""benchmarks/bench_remote.py: the counting proxy forwards an object store's requests
unchanged and counts them as the store does, and a quick run of the benchmark (a tiny
exposure, one repeat) writes every figure, with positive request and byte counts."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_remote as br

from tests.servers.postgres import _programs

pytest.importorskip("obstore", reason="the remote extra is not installed: pip install -e "
                                      "'.[remote]'")


def test_the_proxy_forwards_and_counts_what_the_object_store_counts(s3_server, tmp_path):
    from subzero.engine.objectstore import ObjectStore

    proxy = br.CountingProxy(s3_server.endpoint).start()
    try:
        bucket = s3_server.make_bucket("bench-remote-proxy")
        store = ObjectStore(s3_server.url(bucket, "h"),
                            env={**s3_server.env, "AWS_ENDPOINT_URL": proxy.endpoint})
        store.put("a/x", b"hello world")
        assert store.get("a/x") == b"hello world"
        assert store.get_range("a/x", 2, 7) == b"llo w"
        big = tmp_path / "big"
        big.write_bytes(bytes(range(256)) * (9 << 12))  # 9 MiB: a multipart upload of 2
        store.put_file("a/big", big)
        store.get_file("a/big", tmp_path / "back")
        assert (tmp_path / "back").read_bytes() == big.read_bytes()
        assert store.list("a") == ["a/big", "a/x"]
        assert store.exists("a/x") and not store.exists("a/none")
        store.delete_many(["a/x", "a/big"])
        assert store.list("a") == []
        assert br.proxy_mark(proxy.endpoint) == proxy.count()  # the mark is not counted
        got = br.summarize(proxy.since(0))
    finally:
        proxy.stop()
    want = store.stats.snapshot()
    assert {k: n for k, n in got["by_kind"].items() if n} == want["requests"]
    assert got["by_operation"]["UploadPart"] == 2 and got["errors_by_operation"] == {
        "HeadObject 404": 1}
    # on the wire: the payloads and the XML of lists, bulk deletes, multipart completions
    assert got["bytes_up"] >= want["bytes_up"] and got["bytes_down"] >= want["bytes_down"]
    assert 0 < got["critical_path"] <= got["requests"]


@pytest.mark.slow
def test_a_quick_run_writes_every_figure_with_positive_counts(tmp_path):
    if _programs() is None:
        pytest.skip("no PostgreSQL server programs (initdb, postgres)")
    out = tmp_path / "remote.json"
    br.main(["--quick", "--base", "200x64", "--query-repeat", "2", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "remote" and not doc["skipped"]
    for key in ("run_summary", "query_summary", "configurations", "latency_models", "model"):
        assert doc[key], key
    row = doc["configurations"][0]
    assert set(row["runs"]) == {"local", "s3"}
    wire = row["runs"]["s3"]["wire"]
    assert wire["requests"] > 0 and wire["by_kind"]["PUT"] > 0 and wire["by_kind"]["GET"] > 0
    assert wire["bytes_up"] > 0 and wire["bytes_down"] > 0
    assert 0 < wire["critical_path"] <= wire["requests"]
    assert "wire" not in row["runs"]["local"]
    assert [q["query"] for q in row["queries"]] == list(br.QUERIES)
    bq0 = row["queries"][0]["s3"]
    for proc in br.PROCESSES:
        assert bq0[proc]["cold_s"] > 0 and bq0[proc]["warm_s"] > 0, proc
    assert bq0["first"]["wire"]["cold"]["requests"] > 0
    assert bq0["first"]["wire"]["cold"]["bytes_down"] > 0
    assert bq0["warm_cache"]["wire"]["cold"]["requests"] < bq0["first"]["wire"]["cold"][
        "requests"]
    # a query answered from stored lineage (or mappings) asks nothing of the store when
    # repeated: its shards are in the cache; a re-execution reads its chunks again
    local_now = [(q["query"], proc) for q in row["queries"] for proc, r in q["s3"].items()
                 if not any(m.endswith(":reexec") for m in r["methods"])]
    assert local_now
    for q in row["queries"]:
        for proc, r in q["s3"].items():
            if (q["query"], proc) in local_now:
                assert r["wire"]["warm"]["requests"] == 0, (q["query"], proc)
    model = doc["latency_models"][0]
    assert model["latency_ms"] == 30 and model["runs"][0]["added_s"] > 0
    assert any(q["added_s"] > 0 for q in model["queries"])
