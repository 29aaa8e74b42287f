"""Which catalog a home uses (subzero.engine.homeconfig): SQLite homes as before, and the
checks every command makes before it opens another catalog. The PostgreSQL homes
themselves are tested against a real server in test_postgres_home.py."""

from __future__ import annotations

import json
import time

import pytest

from subzero.engine import homeconfig, layout
from subzero.engine.homeconfig import (
    HomeConfig, catalog_url, check_catalog_url, home_exists, open_catalog, read_config,
    without_password)
from subzero.errors import CatalogError
from tests.conftest import run_cli


@pytest.fixture(autouse=True)
def _no_request(monkeypatch):
    """No catalog asked for by the environment or an earlier test."""
    monkeypatch.delenv("SUBZERO_CATALOG", raising=False)
    monkeypatch.setattr(homeconfig, "_requested", None)
    monkeypatch.setattr(homeconfig, "_per_home", {})


def test_an_sqlite_home_has_no_configuration_and_opens_as_before(tmp_path):
    home = tmp_path / "home"
    cat = open_catalog(home, create=True)
    try:
        rid = cat.create_run("example", params={}, strategy="blackbox", plan={})
    finally:
        cat.close()
    assert rid == "r1"
    assert layout.catalog_path(home).is_file()
    assert read_config(home) is None and home_exists(home)
    cat = open_catalog(home)
    try:
        assert [r["id"] for r in cat.runs()] == ["r1"]
    finally:
        cat.close()


def test_a_reading_command_never_makes_a_home(tmp_path):
    with pytest.raises(CatalogError, match="no SubZero home at"):
        open_catalog(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


@pytest.mark.parametrize("url", ["mysql://db/x", "postgresql://host-only", "postgresql:///db",
                                 "catalog.sqlite"])
def test_a_catalog_url_of_no_known_kind_is_refused(url):
    with pytest.raises(CatalogError, match="expected postgresql://USER@HOST:PORT/DATABASE"):
        check_catalog_url(url)


def test_a_password_never_reaches_a_message_or_the_configuration(tmp_path):
    url = "postgresql://me:s3cret@127.0.0.1:1/db"
    assert "s3cret" not in without_password(url)
    assert without_password(url) == "postgresql://me@127.0.0.1:1/db"
    with pytest.raises(CatalogError) as e:
        check_catalog_url("mysql://me:s3cret@host/db")
    assert "s3cret" not in str(e.value)


def test_an_sqlite_home_refuses_another_catalog_and_is_left_as_it_was(tmp_path):
    home = tmp_path / "home"
    open_catalog(home, create=True).close()
    before = sorted(p.name for p in home.iterdir())
    with pytest.raises(CatalogError, match="has its own SQLite catalog"):
        catalog_url(home, "postgresql://me:pw@127.0.0.1:1/db")
    p = run_cli("runs", "--home", str(home), "--catalog", "postgresql://me:pw@127.0.0.1:1/db")
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "has its own SQLite catalog" in p.stderr
    assert "pw@" not in p.stderr
    assert sorted(p.name for p in home.iterdir()) == before


def test_a_home_configured_for_one_catalog_refuses_another(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    homeconfig._write_config(home, HomeConfig(id="abc", catalog="postgresql://a@h:1/one"))
    assert catalog_url(home) == "postgresql://a@h:1/one"
    assert catalog_url(home, "postgresql://a:pw@h:1/one") == "postgresql://a:pw@h:1/one"
    with pytest.raises(CatalogError, match="uses the catalog postgresql://a@h:1/one, not "
                                           "postgresql://a@h:1/two"):
        catalog_url(home, "postgresql://a@h:1/two")


@pytest.mark.parametrize("text, msg", [
    ("{", "cannot be read"),
    ('{"id": 3, "catalog": "sqlite"}', "is not a SubZero home's configuration"),
    ('{"version": 9, "id": "a", "catalog": "sqlite"}', "has version 9; this SubZero reads"),
    ('{"id": "a", "catalog": "oracle://x/y"}', "expected postgresql://"),
])
def test_a_bad_configuration_is_one_line_on_the_command_line(tmp_path, text, msg):
    home = tmp_path / "home"
    home.mkdir()
    (home / "home.json").write_text(text)
    p = run_cli("runs", "--home", str(home))
    assert p.returncode == 2 and msg in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_an_unknown_catalog_kind_on_the_command_line_is_exit_2(tmp_path):
    t0 = time.perf_counter()
    p = run_cli("run", "example", "--home", str(tmp_path / "h"), "--catalog", "mysql://x/y")
    assert p.returncode == 2 and "expected postgresql://" in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1
    assert not (tmp_path / "h").exists() or not any((tmp_path / "h").iterdir())
    assert time.perf_counter() - t0 < 30


def test_the_configuration_file_is_json_without_secrets(tmp_path):
    home = tmp_path / "home"
    homeconfig._write_config(home, HomeConfig(id="x1", catalog="postgresql://me@h:5/db"))
    doc = json.loads((home / "home.json").read_text())
    assert doc == {"version": 1, "id": "x1", "catalog": "postgresql://me@h:5/db"}
    assert not list(home.glob(".*.tmp"))
