"""Shipping the driver's virtualenv to executors (subzero.engine.shipenv): the archive is
cached by content and written whole; unpacked as Spark unpacks it, its Python imports the
project from the archive (not the driver's checkout, not an editable hook); a Spark
standalone cluster's executors, given ship_conf, run their tasks with the archive's Python
and the archive's subzero, and still get a user's own modules; a process outside a venv is
refused in one line.

The fast tests pack a small venv made here (``python -m venv`` plus a tiny package); the
cluster test packs the real .venv (pyspark's jars left out) and is marked slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from subzero.engine import shipenv
from subzero.engine.shipenv import (EXECUTOR_PYTHON, check_environment, packed_environment,
                                    ship_conf)
from subzero.errors import ShipEnvError

ROOT = Path(__file__).resolve().parents[2]


def _fake_venv(where: Path, version: str = "1.0") -> Path:
    """A venv without pip holding package ``tinypkg`` (with its dist-info) and an editable
    hook, like pip's, that would put the project's checkout on ``sys.path``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    _install_tiny(where, version)
    site = next(where.glob("lib/python*/site-packages"))
    (site / "__editable__.hooked-0.1.pth").write_text(
        "import __editable___hooked_0_1_finder; __editable___hooked_0_1_finder.install()\n")
    (site / "__editable___hooked_0_1_finder.py").write_text(
        f"def install():\n    import sys\n    sys.path.insert(0, {str(ROOT)!r})\n")
    return where


def _install_tiny(venv: Path, version: str) -> None:
    """(Re)install ``tinypkg`` at ``version`` in ``venv``: its module and its dist-info."""
    site = next(venv.glob("lib/python*/site-packages"))
    for old in site.glob("tinypkg-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    (site / "tinypkg").mkdir(exist_ok=True)
    (site / "tinypkg" / "__init__.py").write_text(f"VERSION = {version!r}\n")
    dist = site / f"tinypkg-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tinypkg\nVersion: {version}\n")
    (dist / "RECORD").write_text(f"tinypkg/__init__.py,,\ntinypkg-{version}.dist-info/RECORD,,\n")


@pytest.fixture
def fake_venv(tmp_path):
    return _fake_venv(tmp_path / "venv")


def _unpack(archive: Path, work: Path) -> Path:
    """Unpack ``archive`` as Spark does with ``#environment``: into ``work/environment``."""
    env = work / "environment"
    env.mkdir(parents=True)
    with tarfile.open(archive) as t:
        t.extractall(env, filter="tar")
    return env


def test_packing_twice_reuses_the_archive(fake_venv, tmp_path):
    heard: list[str] = []
    first = packed_environment(tmp_path / "cache", prefix=fake_venv, notify=heard.append)
    stamp = first.stat().st_mtime_ns
    again = packed_environment(tmp_path / "cache", prefix=fake_venv, notify=heard.append)
    assert again == first and first.stat().st_mtime_ns == stamp
    assert len(heard) == 1 and heard[0].startswith("packing the Python environment")
    assert first.name.startswith("subzero-env-py3.") and first.name.endswith(".tar.gz")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [first.name]  # no temp


def test_a_changed_environment_gets_a_new_archive_and_old_ones_are_pruned(fake_venv,
                                                                         tmp_path):
    cache = tmp_path / "cache"
    made = [packed_environment(cache, prefix=fake_venv)]
    for version in ("2.0", "3.0", "4.0"):
        _install_tiny(fake_venv, version)
        made.append(packed_environment(cache, prefix=fake_venv))
    assert len(set(made)) == 4
    # the newest few stay, the oldest goes; the one just made is always among them
    assert sorted(cache.glob("*.tar.gz")) == sorted(made[-shipenv.KEEP:])
    with tarfile.open(made[-1]) as t:
        init = t.extractfile(next(m for m in t.getmembers()
                                  if m.name.endswith("site-packages/tinypkg/__init__.py")))
        assert init.read() == b"VERSION = '4.0'\n"


def test_the_unpacked_archive_imports_the_project_from_itself(fake_venv, tmp_path):
    archive = packed_environment(tmp_path / "cache", prefix=fake_venv)
    with tarfile.open(archive) as t:
        names = t.getnames()
    assert not [n for n in names if "__editable__" in n]  # the hooks into the checkout
    project = [n for n in names if "/site-packages/subzero/" in n]
    assert project and not [n for n in project if n.endswith(".pyc")]  # the checkout's cache
    work = tmp_path / "work"  # the executor's working directory, outside the checkout
    env = _unpack(archive, work)
    probe = ("import json, sys, tinypkg, subzero, subzero.engine.shipenv; "
             "print(json.dumps([sys.prefix, tinypkg.__file__, subzero.__file__, sys.path]))")
    out = subprocess.run(
        [str(work / EXECUTOR_PYTHON), "-c", probe], cwd=work, capture_output=True, text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
             "PYTHONPATH": str(tmp_path / "nothing-here")}, timeout=60)
    assert out.returncode == 0, out.stderr
    prefix, tiny, sub, path = json.loads(out.stdout)
    assert Path(prefix) == env
    assert Path(tiny).is_relative_to(env) and Path(sub).is_relative_to(env)
    assert not [p for p in path if p.startswith(str(ROOT))]
    package = Path(sub).parent
    for data in ("engine/log4j2.properties", "engine/fairscheduler.xml"):  # package data
        assert (package / data).read_bytes() == (ROOT / "subzero" / data).read_bytes()
    assert list((package / "query").glob("*.json")) and any((package / "serve" / "static")
                                                             .iterdir())


def test_a_killed_pack_leaves_no_archive_under_its_name(fake_venv, tmp_path, monkeypatch):
    cache = tmp_path / "cache"

    def dies(venv, out):
        out.write_bytes(b"half an archive")
        raise KeyboardInterrupt

    monkeypatch.setattr(shipenv, "_pack", dies)
    with pytest.raises(KeyboardInterrupt):
        packed_environment(cache, prefix=fake_venv)
    assert list(cache.iterdir()) == []
    # a temporary archive of a pack whose process is gone (SIGKILL) goes at the next pack
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (cache / f".subzero-env-{gone}.tmp").write_bytes(b"half")
    monkeypatch.undo()
    archive = packed_environment(cache, prefix=fake_venv)
    assert list(cache.iterdir()) == [archive]
    with tarfile.open(archive) as t:
        assert "pyvenv.cfg" in t.getnames()


def test_a_folder_that_is_no_venv_is_refused_in_one_line(tmp_path):
    with pytest.raises(ShipEnvError) as e:
        packed_environment(tmp_path / "cache", prefix=tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and f"{tmp_path} is not a virtualenv" in msg and "pyvenv.cfg" in msg
    assert not (tmp_path / "cache").exists()


def test_an_interpreter_outside_a_venv_is_refused_in_one_line(tmp_path):
    base = getattr(sys, "_base_executable", None)
    if not base or sys.base_prefix == sys.prefix:
        pytest.skip("the tests do not run in a venv")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from subzero.engine.shipenv import packed_environment; "
            "packed_environment(sys.argv[2])")
    out = subprocess.run([base, "-c", code, str(ROOT), str(tmp_path / "cache")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 1
    assert last.startswith("subzero.errors.ShipEnvError: cannot ship the Python environment: ")
    assert "is not a virtualenv" in last and "sys.prefix of" in last


def test_ship_conf_runs_the_archives_python_on_executors_only(fake_venv, tmp_path):
    archive = packed_environment(tmp_path / "cache", prefix=fake_venv)
    conf = ship_conf(archive)
    assert conf["spark.archives"] == f"{archive.resolve()}#environment"
    assert conf["spark.pyspark.python"] == conf["spark.executorEnv.PYSPARK_PYTHON"] \
        == "./environment/bin/python"
    assert conf["spark.pyspark.driver.python"] == sys.executable
    assert conf["spark.executorEnv.PYTHONPATH"] == ""  # none of the driver's paths
    with pytest.raises(ShipEnvError, match="no environment archive at"):
        ship_conf(tmp_path / "missing.tar.gz")
    assert ship_conf(archive, master="spark://head:7077") == conf
    with pytest.raises(ShipEnvError, match="needs a cluster master .* not 'local\\[2\\]'"):
        ship_conf(archive, master="local[2]")


def test_check_environment_names_the_base_interpreter(fake_venv):
    line = check_environment(fake_venv)
    cfg = dict(l.split(" = ", 1) for l in (fake_venv / "pyvenv.cfg").read_text().splitlines()
               if " = " in l)
    base = Path(os.readlink(fake_venv / "bin" / os.readlink(fake_venv / "bin" / "python")))
    assert "\n" not in line and f"Python {cfg['version']} at {base}" in line
    assert base.is_absolute() and base.exists() and f"home = {cfg['home']}" in line


DRIVER = """
import json, sys
from subzero import codeid
from subzero.engine.shipenv import probe_executors, ship_conf
from subzero.engine.spark import get_spark, ship_user_code, stop_spark

master, archive, logs = sys.argv[1:4]
spark = get_spark(master, logs, conf=ship_conf(archive, master))
try:
    import usermod  # on the driver's PYTHONPATH only
    ship_user_code(spark, [codeid.record("usermod")])
    user = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("usermod").where())
    print(json.dumps({"probe": probe_executors(spark), "user": user.collect()}))
finally:
    stop_spark()
"""


@pytest.mark.slow
@pytest.mark.cluster
def test_cluster_executors_run_the_shipped_environment(tmp_path, monkeypatch, subzero_cache):
    """The real .venv packed (once a session), a one-worker standalone cluster whose worker has the
    checkout on its PYTHONPATH (which must not reach the executors), a driver subprocess
    started with ship_conf: every task runs the archive's python, subzero and pyspark."""
    from subzero.engine.cluster import start_cluster

    archive = packed_environment(subzero_cache / "envs")
    user = tmp_path / "usercode"
    user.mkdir()
    (user / "usermod.py").write_text("def where():\n    return __file__\n")
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(user), SUBZERO_EXECUTOR_WAIT="120", SUBZERO_REGISTER_WAIT="60")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    with start_cluster(tmp_path / "cluster", workers=1, cores=1, memory="1g") as cl:
        out = subprocess.run([sys.executable, str(tmp_path / "driver.py"), cl.master_url,
                              str(archive), str(tmp_path / "logs")], capture_output=True,
                             text=True, cwd=tmp_path, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(doc["probe"]) == 2
    for task in doc["probe"]:
        env_dir = Path(task["cwd"]) / "environment"
        assert Path(task["cwd"]).is_relative_to(tmp_path / "cluster" / "work")
        assert task["python"] == str(env_dir / "bin" / "python")
        for module in ("subzero", "pyspark"):
            assert Path(task[module]).is_relative_to(env_dir), task
        site = Path(task["pyspark"]).parents[1]
        assert not (site / "pyspark" / "jars").exists()  # left out: the cluster's JVM
        assert not list(site.glob("__editable__*"))
    assert Path(doc["user"][0]).name == "usermod.py"
    assert not Path(doc["user"][0]).is_relative_to(user)  # shipped, not read from there


def test_ship_env_with_a_local_master_is_one_line_before_anything_is_packed(tmp_path):
    from tests.conftest import run_cli

    t0 = time.perf_counter()
    p = run_cli("run", "example", "--home", str(tmp_path / "h"), "--ship-env", "--master",
                "local[2]", env={"SUBZERO_CACHE": str(tmp_path / "cache")})
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "needs a cluster master" in p.stderr and "'local[2]'" in p.stderr
    assert not (tmp_path / "cache").exists()  # nothing packed
    assert time.perf_counter() - t0 < 30
