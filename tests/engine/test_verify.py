"""``subzero verify``: shard checksums recorded at publication, and a report of exactly what
is damaged (real files of a real run in a temporary home, damaged on purpose)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3

import pytest

from encoders.store import shard_checksum
from subzero.api import Home
from subzero.cli import main
from subzero.engine.verify import verify_run

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def intact(spark, tmp_path_factory):
    """A home with one astronomy run (subzero: comp shards for the cosmic-ray and star
    operators)."""
    from subzero.api import Home

    home = tmp_path_factory.mktemp("verify") / "home"
    Home(home).run("astronomy", strategy="subzero", shape="96x64", quiet=True)
    return home


@pytest.fixture
def home(intact, tmp_path):
    """A copy of the intact home, to damage."""
    h = tmp_path / "home"
    shutil.copytree(intact, h)
    return h


def _shards(home):
    db = sqlite3.connect(home / "catalog.sqlite")
    try:
        return [dict(zip(("op", "strategy", "chunk", "path", "checksum"), r)) for r in db.execute(
            "SELECT op, strategy, chunk, path, checksum FROM shards ORDER BY op, chunk")]
    finally:
        db.close()


def _verify(home, capsys, *extra):
    capsys.readouterr()
    code = main(["verify", "r1", "--home", str(home), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_every_shard_has_the_checksum_of_its_files(intact):
    rows = _shards(intact)
    assert rows, "the run stored no shard"
    for r in rows:
        assert r["checksum"] and r["checksum"].startswith("crc32:"), r
        assert shard_checksum(intact / r["path"]) == r["checksum"]
        assert "meta.json=" in r["checksum"]
        assert ("data.mdb=" in r["checksum"]) == (intact / r["path"] / "data.mdb").exists()


def test_intact_run_verifies_ok_reading_every_record(intact, capsys):
    code, doc = _verify(intact, capsys)
    assert code == 0 and doc["ok"] and doc["problems"] == []
    assert doc["shards"] == len(_shards(intact)) and doc["shards_without_checksum"] == 0
    assert doc["records"] > 0 and doc["arrays"] == 34 and doc["chunks"] >= 34
    capsys.readouterr()
    assert main(["verify", "latest", "--home", str(intact)]) == 0
    assert "ok, checked" in capsys.readouterr().out


def _with_data(home):
    """The shards that hold an LMDB environment (an empty shard is only its meta.json)."""
    return [r for r in _shards(home) if (home / r["path"] / "data.mdb").exists()]


def test_a_garbage_page_is_named_by_its_shard(home, capsys):
    row = _with_data(home)[0]
    data = home / row["path"] / "data.mdb"
    with open(data, "r+b") as f:  # one page of garbage in the middle of the environment
        f.seek(4096)
        f.write(os.urandom(4096))
    code, doc = _verify(home, capsys)
    assert code == 3 and not doc["ok"]
    assert [(p["kind"], p["what"]) for p in doc["problems"]] == [
        ("shard", f"{row['op']}/{row['strategy']}/{row['chunk']}")]
    assert "data.mdb does not match its checksum" in doc["problems"][0]["detail"]


@pytest.mark.parametrize("damage, words", [
    ("remove-shard", "missing"),
    ("truncate-data", "data.mdb"),
    ("remove-meta", "meta.json missing"),
    ("extra-file", "unexpected file"),
])
def test_each_kind_of_shard_damage_is_named(home, capsys, damage, words):
    row = _with_data(home)[-1]
    d = home / row["path"]
    if damage == "remove-shard":
        shutil.rmtree(d)
    elif damage == "truncate-data":
        with open(d / "data.mdb", "r+b") as f:
            f.truncate(os.path.getsize(d / "data.mdb") // 2)
    elif damage == "remove-meta":
        (d / "meta.json").unlink()
    else:
        (d / "stray.bin").write_bytes(b"x")
    code, doc = _verify(home, capsys)
    assert code == 3
    assert len(doc["problems"]) == 1, doc["problems"]
    p = doc["problems"][0]
    assert p["what"] == f"{row['op']}/{row['strategy']}/{row['chunk']}" and words in p["detail"]


def test_array_damage_is_named_by_array_and_chunk(home, capsys):
    arrays = home / "runs" / "r1" / "arrays"
    (arrays / "rmcr.zarr" / "c" / "0" / "0").unlink()
    cut = arrays / "clust.zarr" / "c" / "0" / "0"
    cut.write_bytes(cut.read_bytes()[:8])
    code, doc = _verify(home, capsys)
    assert code == 3
    got = {(p["kind"], p["what"]): p["detail"] for p in doc["problems"]}
    assert set(got) == {("array", "rmcr chunk 0.0"), ("array", "clust chunk 0.0")}
    assert got[("array", "rmcr chunk 0.0")].startswith("missing")
    assert got[("array", "clust chunk 0.0")].startswith("cannot be decoded")


def test_catalog_against_files(home, capsys):
    """Leftovers the catalog does not list, and a missing manifest, are reported."""
    strat = next((home / "runs" / "r1" / "lineage").glob("*/*"))
    (strat / ".tmp.9.9.0.host.1.abcd").mkdir()
    (home / "runs" / "r1" / "arrays" / "ghost.zarr").mkdir()
    (home / "runs" / "r1" / "manifest.json").unlink()
    code, doc = _verify(home, capsys)
    assert code == 3
    details = sorted(p["detail"] for p in doc["problems"])
    assert any("a writer's leftover" in d for d in details)
    assert any("does not list" in d for d in details)
    assert any("lost its manifest" in d for d in details)


def test_verify_changes_nothing(intact):
    before = {p: p.stat().st_mtime_ns for p in intact.rglob("*") if p.is_file()
              and not p.name.startswith("catalog.sqlite")}
    assert verify_run(intact, "r1").ok
    after = {p: p.stat().st_mtime_ns for p in intact.rglob("*") if p.is_file()
             and not p.name.startswith("catalog.sqlite")}
    assert before == after


def test_damaged_manifest_is_named_by_verify_and_queries(home, capsys):
    (home / "runs" / "r1" / "manifest.json").write_bytes(b'{"format": "garbage"}')
    code, doc = _verify(home, capsys)
    assert code == 3
    assert [p["what"] for p in doc["problems"]] == ["r1"]
    assert "manifest" in doc["problems"][0]["detail"]
    capsys.readouterr()
    assert main(["query", "r1", "--named", "BQ0", "--home", str(home)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "manifest" in lines[0] and "subzero verify r1" in lines[0]


def test_reading_commands_never_make_a_home(tmp_path, capsys):
    for argv in (["query", "r1", "--named", "BQ0"], ["export", "r1", "x", str(tmp_path / "x.npy")],
                 ["verify", "r1"], ["runs"], ["show", "r1"]):
        capsys.readouterr()
        assert main([*argv, "--home", str(tmp_path)]) == 2
        assert "no SubZero home" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    capsys.readouterr()
    assert main(["query", "r1", "--named", "BQ0", "--home", str(tmp_path / "none")]) == 2
    assert not (tmp_path / "none").exists()


def test_verify_after_queries_in_the_same_process(home):
    """Shards a query of this process holds open are read through its readers (LMDB
    refuses a second open in one process): verify finds them intact, and the queries
    still answer afterwards."""
    run = Home(home).get("r1")
    before = {q: run.named_query(q).count for q in ("BQ0", "BQ3", "FQ0")}
    report = verify_run(home, "r1")
    assert report.ok, [p.line() for p in report.problems]
    assert report.shards > 0 and report.records > 0
    assert {q: run.named_query(q).count for q in before} == before
