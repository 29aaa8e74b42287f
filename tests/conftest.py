"""Shared fixtures: one local[2] SparkSession for the whole test session, fresh homes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# the test servers (PostgreSQL, S3), registered here once: a session fixture imported into
# several test modules would start a server per module
from tests.servers.postgres import postgres_server  # noqa: E402,F401
from tests.servers.s3 import s3_auth_server, s3_server  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SUBZERO_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory):
    """Every JVM the tests start (this process's, the CLI subprocesses') keeps its scratch
    (``spark-*``, ``blockmgr-*``) in the session's temporary folder, not the system's:
    the tests that kill a run or its JVM on purpose left theirs in /tmp."""
    old = os.environ.get("SPARK_LOCAL_DIRS")
    os.environ["SPARK_LOCAL_DIRS"] = str(tmp_path_factory.mktemp("spark-scratch"))
    yield
    if old is None:
        os.environ.pop("SPARK_LOCAL_DIRS", None)
    else:
        os.environ["SPARK_LOCAL_DIRS"] = old


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The one SparkSession of the test process (local[2], quiet)."""
    from subzero.engine.spark import get_spark, stop_spark

    # Spark's Python workers must import test-only operators (tests.*) by reference
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    session = get_spark("local[2]", tmp_path_factory.mktemp("spark-logs"))
    yield session
    stop_spark()


@pytest.fixture(scope="session")
def subzero_cache(tmp_path_factory):
    """One ``$SUBZERO_CACHE`` for the tests that ship the real virtualenv: it is packed
    once (its archive is cached under ``envs/``) for all of them."""
    return tmp_path_factory.mktemp("subzero-cache")


@pytest.fixture
def home(tmp_path):
    """A fresh SubZero home directory."""
    return tmp_path / "home"


@pytest.fixture(scope="session")
def shared_data():
    """../shared/data (or $SUBZERO_DATA) when present, else skip."""
    if not SHARED_DATA.exists():
        pytest.skip(f"real data not available at {SHARED_DATA}")
    return SHARED_DATA


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, cwd=None):
    """Run the CLI in a subprocess (in folder ``cwd``, the project on its ``PYTHONPATH``
    so that test-only modules import from anywhere); returns CompletedProcess (text)."""
    import subprocess

    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "subzero.cli", *args], capture_output=True,
                          text=True, env=e, timeout=timeout, cwd=cwd)


def assert_same_runs(home, a: str, b: str, wf) -> None:
    """Runs ``a`` and ``b`` of ``wf`` in ``home`` wrote the same arrays (dtype and cells)
    and the same shards (operator, strategy, chunk, pairs and bytes)."""
    import numpy as np

    from subzero.engine.homeconfig import open_catalog
    from subzero.engine.runs import load_run

    ra, rb = load_run(home, a), load_run(home, b)
    for name in [*wf.inputs, *wf.order]:
        x, y = ra.array(name), rb.array(name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    cat = open_catalog(Path(home))
    try:
        def rows(rid):
            return sorted((s["op"], s["strategy"], s["chunk"], s["pairs"], s["data_bytes"])
                          for s in cat.shards(rid))
        assert rows(a) == rows(b)
    finally:
        cat.close()
