"""Spark masters: the forms accepted, one-line errors for a malformed or unreachable master
(before any JVM starts), a bounded wait for one that does not answer, and the default local
master retrying a task whose Python worker crashed."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from subzero.engine.catalog import Catalog
from subzero.engine.runs import load_run
from subzero.engine.spark import DEFAULT_MASTER, check_master, resolve_master
from subzero.errors import SparkError
from tests.conftest import ROOT, run_cli


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_line_error(p: subprocess.CompletedProcess, *names: str) -> str:
    assert p.returncode == 2, p.stderr
    # what the run was doing when it failed ("starting Spark (URL)...") may come first
    lines = [ln for ln in p.stderr.strip().splitlines()
             if not ln.startswith("subzero: starting Spark (")]
    assert len(lines) == 1 and lines[0].startswith("subzero: error: "), p.stderr
    for n in names:
        assert n in lines[0]
    return lines[0]


@pytest.mark.parametrize("master", ["local", "local[1]", "local[*]", "local[2,3]", "local[*,4]",
                                    "spark://127.0.0.1:7077", "spark://a.example:7077,b:7078",
                                    "yarn", "k8s://https://10.0.0.1:6443"])
def test_accepted_master_forms(master):
    assert check_master(master) == master


@pytest.mark.parametrize("master", ["locl", "local[0]", "local[2,0]", "local[x]", "local[2]x",
                                    "spark://host", "spark://host:port", "spark://:7077",
                                    "spark://h:99999", "127.0.0.1:7077", "k8s://",
                                    "mesos://h:5050"])
def test_malformed_master_names_the_value_and_the_forms(master):
    with pytest.raises(SparkError) as e:
        check_master(master)
    msg = str(e.value)
    assert repr(master) in msg and "spark://HOST:PORT" in msg and "local[N,F]" in msg
    assert "\n" not in msg


def test_default_master_retries_failed_tasks(monkeypatch):
    monkeypatch.delenv("SUBZERO_SPARK_MASTER", raising=False)
    assert resolve_master() == DEFAULT_MASTER == "local[*,4]"
    assert resolve_master("local[2]") == "local[2]"  # a master given is used as given
    monkeypatch.setenv("SUBZERO_SPARK_MASTER", "local[3]")
    assert resolve_master() == "local[3]"


def test_cli_malformed_master_exits_2_with_one_line(tmp_path):
    p = run_cli("run", "example", "--param", "shape=20x10", "--home", str(tmp_path / "h"),
                "--master", "spark:/127.0.0.1", timeout=120)
    _one_line_error(p, "'spark:/127.0.0.1'", "spark://HOST:PORT")


def test_cli_unreachable_master_exits_2_within_30_s_naming_the_url(tmp_path):
    url = f"spark://127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    p = run_cli("run", "example", "--param", "shape=20x10", "--home", str(tmp_path / "h"),
                "--master", url, timeout=120)
    elapsed = time.monotonic() - t0
    line = _one_line_error(p, url, "unreachable")
    assert "starting Spark" not in p.stderr  # refused before any JVM starts
    assert elapsed < 30, (elapsed, line)
    assert not (tmp_path / "h" / "catalog.sqlite").exists()  # failed before any run began


@pytest.mark.slow
def test_cli_master_that_never_answers_fails_in_bounded_time(tmp_path):
    """A port that takes connections but is no Spark master: Spark's client would retry for
    a minute; the start is abandoned after the registration wait, in one line."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns = []

    def accept():
        while True:
            try:
                conns.append(srv.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    url = f"spark://127.0.0.1:{srv.getsockname()[1]}"
    try:
        t0 = time.monotonic()
        p = run_cli("run", "example", "--param", "shape=20x10", "--home", str(tmp_path / "h"),
                    "--master", url, env={"SUBZERO_REGISTER_WAIT": "5"}, timeout=120)
        elapsed = time.monotonic() - t0
    finally:
        srv.close()
        for c in conns:
            c.close()
    _one_line_error(p, url, "did not accept the application")
    assert elapsed < 60, elapsed  # a JVM start (seconds on a busy machine) plus 5 s


CRASH_UDF = textwrap.dedent('''
    import os

    from operators import UDF


    class CrashOnce(UDF):
        """Doubles its input; its first task to run kills its own Python worker."""

        n_inputs = 1

        def __init__(self, marker):
            super().__init__()
            self.marker = marker

        def run(self, ctx, x):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return x * 2.0
            os.close(fd)
            os._exit(1)  # the Python worker dies mid-task, as on a segfault or OOM kill
''')

# the operator lives in a module beside the script (a class in __main__ cannot be recorded);
# that module belongs to no distribution, so the run ships it to Spark's workers
CRASH_ONCE = textwrap.dedent('''
    import json, sys

    import numpy as np

    from crash_udf import CrashOnce
    from subzero.engine.runner import run_workflow
    from subzero.workflow import Workflow


    wf = Workflow("crash-once")
    wf.input("a", (64, 48), source=lambda: np.arange(3072, dtype="float64").reshape(64, 48))
    wf.add("twice", CrashOnce(sys.argv[2]), "a")  # 3072 cells: a Spark stage, not the driver
    res = run_workflow(wf, home=sys.argv[1], where="spark")  # Spark tasks, not the driver
    print(json.dumps({"run": res.run}))
''')


@pytest.mark.slow
def test_default_local_master_retries_a_crashed_python_task(tmp_path):
    script = tmp_path / "crash_once.py"
    script.write_text(CRASH_ONCE)
    (tmp_path / "crash_udf.py").write_text(CRASH_UDF)
    marker, home = tmp_path / "crashed", tmp_path / "h"
    env = {k: v for k, v in os.environ.items() if k != "SUBZERO_SPARK_MASTER"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    p = subprocess.run([sys.executable, str(script), str(home), str(marker)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert marker.exists()  # the first attempt did crash
    assert "WARN TaskSetManager: Lost task" in (home / "logs" / "spark.log").read_text()
    rid = json.loads(p.stdout.strip().splitlines()[-1])["run"]
    cat = Catalog(home / "catalog.sqlite")
    try:
        rec = cat.run(rid)
    finally:
        cat.close()
    assert rec["status"] == "complete" and rec["master"] == "local[*,4]"
    expect = 2.0 * np.arange(3072, dtype="float64").reshape(64, 48)
    assert np.array_equal(load_run(home, rid).array("twice"), expect)


def test_the_drivers_class_archive_is_taken_only_once_written_whole(tmp_path, monkeypatch):
    """No archive: the JVM is asked to write one as it exits, under a name of its own and
    with a log of the dump; while that process runs no other JVM writes one; an archive
    whose log says it was written whole is taken (and every later start maps it), one
    whose JVM died while dumping is removed; an empty $SUBZERO_CACHE turns it off."""
    import os
    import time
    from pathlib import Path

    from subzero.engine import spark

    def opt(got: str, name: str) -> Path:
        return Path(got.split(f"{name}=")[1].split()[0])

    first = spark.class_archive_options(tmp_path)
    assert "-Xlog:cds=off" in first
    mine, log = opt(first, "-XX:ArchiveClassesAtExit"), opt(first, "-Xlog:cds+dynamic=info:file")
    assert mine.parent == tmp_path and mine.name.endswith(f".{os.getpid()}.jsa")
    assert log == mine.with_suffix(".log")
    log.write_text("[info][cds,dynamic] Copying 8 klasses\n")  # as the JVM would, running
    mine.write_bytes(b"half")
    assert spark.class_archive_options(tmp_path) == ""  # its process runs: being written

    dead = 2 ** 40  # no such process
    old = time.time() - 2 * spark.ARCHIVE_SETTLE_S
    killed = tmp_path / mine.name.replace(f".{os.getpid()}.", f".{dead}.")
    killed.write_bytes(b"half")
    killed.with_suffix(".log").write_text("Copying 8 klasses\n")
    for f in (killed, killed.with_suffix(".log")):
        os.utime(f, (old, old))
    whole = tmp_path / mine.name.replace(f".{os.getpid()}.", f".{dead + 1}.")
    whole.write_bytes(b"archive")
    whole.with_suffix(".log").write_text(f"{spark.ARCHIVE_WRITTEN} 0x8 - 0x9\n")
    log.unlink()
    mine.unlink()  # (its process has finished: nothing of it left)
    got = spark.class_archive_options(tmp_path)
    final = opt(got, "-XX:SharedArchiveFile")
    assert final.read_bytes() == b"archive" and sorted(tmp_path.iterdir()) == [final]
    assert spark.class_archive_options(tmp_path) == got
    monkeypatch.setenv("SUBZERO_CACHE", "")
    assert spark.class_archive_options() == ""


def test_the_daemon_moves_only_the_installed_pysparks_zips_behind_the_packages(tmp_path):
    from subzero.engine.daemon import installed_first

    pkg = tmp_path / "site-packages" / "pyspark"
    (pkg / "python" / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "daemon.py").write_text("")
    shipped = [str(pkg / "python" / "lib" / "pyspark.zip"),
               str(pkg / "python" / "lib" / "py4j-0.10.9.9-src.zip")]
    other = str(tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip")  # SPARK_HOME's
    path = [*shipped, other, str(tmp_path / "project"), str(tmp_path / "site-packages")]
    assert installed_first(path) == [other, str(tmp_path / "project"),
                                     str(tmp_path / "site-packages"), *shipped]
    assert installed_first([other, "/usr/lib/python3.11"]) == [other, "/usr/lib/python3.11"]


def _worker_pyspark(_):
    import sys

    import pyspark

    zips = [i for i, p in enumerate(sys.path) if p.endswith("pyspark.zip")]
    return pyspark.__file__, zips, len(sys.path)


def test_workers_import_the_installed_pyspark_not_sparks_zip(spark):
    import pyspark

    files = spark.sparkContext.parallelize(range(2), 2).map(_worker_pyspark).collect()
    for file, zips, n in files:
        assert file == pyspark.__file__  # the package, with cached bytecode: not the zip
        assert zips and min(zips) >= n - 2  # Spark's zips are still there, last


def _large_block_mapping(_):
    import numpy as np

    a = np.ones(100 << 17)  # 100 MB: over glibc's largest default mmap threshold (32 MB)
    addr = a.ctypes.data
    with open("/proc/self/maps") as f:
        for line in f:
            span, *rest = line.split()
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= addr < hi:
                return rest[-1] if len(rest) == 5 else ""
    return None


def test_workers_keep_freed_memory_for_their_next_arrays(spark):
    """Spark's Python workers serve large blocks from their heap (where a freed block stays
    for the next task's arrays) instead of mapping each anew and faulting its pages in."""
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("no /proc")
    got = spark.sparkContext.parallelize(range(2), 2).map(_large_block_mapping).collect()
    assert got == ["[heap]", "[heap]"]


_KEPT: list = []


def _freeze_count_then_keep(_job) -> tuple[int, int]:
    """In a worker: its pid and how many objects were frozen when the task started; then
    10,000 new objects kept alive for the worker's next task."""
    import gc

    count = gc.get_freeze_count()
    _KEPT.append([[k] for k in range(10_000)])
    return os.getpid(), count


def test_a_workers_task_starts_with_what_earlier_tasks_left_frozen(spark):
    """pyspark's daemon runs a full collection after every task: the objects alive at a
    task's start (what earlier tasks imported and kept) are frozen, so it walks only what
    the task made (not frozen once after the first task: later tasks' imports, scipy's for
    the cosmic rays, were walked after every task, 5.5% of the workers' samples at 64x)."""
    from subzero.engine.tasks import _run

    seen: dict[int, list[int]] = {}
    for _ in range(4):
        for pid, count in _run(_freeze_count_then_keep, [0, 1], spark, "freeze"):
            seen.setdefault(pid, []).append(count)
    again = {pid: counts for pid, counts in seen.items() if len(counts) > 1}
    assert again, seen  # the workers are reused
    for counts in again.values():  # each task froze the previous one's 10,000 lists
        assert all(b - a >= 10_000 for a, b in zip(counts, counts[1:])), counts


def test_keep_worker_memory_is_glibcs_mallopt_and_can_be_turned_off(monkeypatch):
    from subzero.engine.heap import keep_worker_memory

    monkeypatch.setenv("SUBZERO_WORKER_MALLOC", "default")
    assert keep_worker_memory() is False
    code = ("from subzero.engine.heap import keep_worker_memory as k; import sys;"
            "sys.path.insert(0, '.');"
            "from tests.engine.test_spark_master import _large_block_mapping as m;"
            "print(m(0)); print(k()); print(m(0))")
    env = {k: v for k, v in os.environ.items() if k != "SUBZERO_WORKER_MALLOC"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.split("\n")
    assert out[:3] == ["", "True", "[heap]"]  # a fresh mapping before, the heap after
