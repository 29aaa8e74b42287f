"""One SparkSession per process, started quietly.

The master is ``local[*]`` unless ``--master`` or ``$SUBZERO_SPARK_MASTER`` says otherwise.
The JVM's own output (log4j, warnings) goes to ``<home>/logs/spark.log`` so the user's
terminal shows SubZero's output only. Java 17 or newer is checked first, with a clear error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from subzero.errors import SparkError

DEFAULT_MASTER = "local[*]"
MIN_JAVA = 17

_lock = threading.Lock()
_session: Any = None
_master: str | None = None


def resolve_master(master: str | None = None) -> str:
    return master or os.environ.get("SUBZERO_SPARK_MASTER") or DEFAULT_MASTER


def java_version() -> int:
    """Major version of the ``java`` Spark will use; raise :class:`SparkError` if absent."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise SparkError(
            f"Java {MIN_JAVA}+ is required to run Spark and no 'java' was found; install it "
            "(Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SparkError(f"could not run {java} -version: {e}") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        raise SparkError(f"could not read the Java version from {java} -version")
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0" style
        major = int(m.group(2))
    if major < MIN_JAVA:
        raise SparkError(
            f"Java {MIN_JAVA}+ is required to run Spark; {java} is Java {major} "
            "(Debian: apt-get install openjdk-17-jre-headless, then set JAVA_HOME)"
        )
    return major


def get_spark(master: str | None = None, log_dir: str | os.PathLike | None = None) -> Any:
    """The process's SparkSession, started on first use.

    A second call with a different master returns the running session (one session per
    process) and says so on stderr.
    """
    global _session, _master
    want = resolve_master(master)
    with _lock:
        if _session is not None:
            if master is not None and want != _master:
                print(f"subzero: Spark already runs with master {_master}; ignoring {want}",
                      file=sys.stderr)
            return _session
        java_version()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if want.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # pyspark (and its JVM) only when a session is first needed
        from pyspark import SparkConf, SparkContext
        from pyspark.java_gateway import launch_gateway
        from pyspark.sql import SparkSession

        log_dir = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "subzero-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log4j = Path(__file__).with_name("log4j2.properties")
        java_opts = (f"-Dlog4j.configurationFile=file:{log4j} "
                     f"-Dlog4j2.configurationFile=file:{log4j}")
        conf = (
            SparkConf()
            .setMaster(want)
            .setAppName("subzero")
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.driver.extraJavaOptions", java_opts)
            .set("spark.executor.extraJavaOptions", java_opts)
            .set("spark.driver.memory", os.environ.get("SUBZERO_DRIVER_MEMORY", "2g"))
            .set("spark.python.worker.reuse", "true")
            .set("spark.sql.execution.arrow.pyspark.enabled", "false")
        )
        log = open(log_dir / "spark.log", "ab")
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
            sc = SparkContext(conf=conf, gateway=gateway)
        except Exception as e:  # noqa: BLE001 - report Spark's start failure in one line
            raise SparkError(
                f"Spark could not start with master {want!r}: {str(e).splitlines()[0]} "
                f"(see {log_dir / 'spark.log'})"
            ) from None
        finally:
            log.close()
        sc.setLogLevel("ERROR")
        _session = SparkSession(sc)
        _master = want
        return _session


def active_session() -> Any:
    """The running session, or None (never starts one)."""
    return _session


def stop_spark() -> None:
    global _session, _master
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
            _master = None
