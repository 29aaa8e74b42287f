"""One SparkSession per process, started quietly.

The master is ``local[*,4]`` (every core; a failed task, e.g. a crashed Python worker, is
tried up to 4 times) unless ``--master`` or ``$SUBZERO_SPARK_MASTER`` says otherwise; a
master given explicitly is used as given (``local[2]`` tries each task once, as Spark does).
A malformed master is a :class:`SparkError` naming it and the forms expected. A
``spark://`` master must take a TCP connection within 5 s (checked before any JVM starts),
accept the application within ``$SUBZERO_REGISTER_WAIT`` seconds (default 20) and give it an
executor within ``$SUBZERO_EXECUTOR_WAIT``
seconds (default 20); otherwise :class:`SparkError` says so in one line naming the URL.

Jobs are scheduled FAIR (``fairscheduler.xml`` next to this module: the ``default`` pool
shares the cores between jobs that several driver threads submit at once). On a cluster,
executors run tasks with this process's Python (``spark.pyspark.python``) and its
``PYTHONPATH``, and a task is tried up to 4 times. The JVM's own output (log4j, warnings)
goes to ``<home>/logs/spark.log`` so the user's terminal shows SubZero's output only. Java 17
or newer is checked first, with a clear error. The Python workers' daemon is pyspark's, run
by :mod:`subzero.engine.daemon` so that it imports the installed pyspark (cached bytecode)
rather than Spark's source-only zip, whose modules Python compiles anew in every fresh
session.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from subzero.errors import SparkError

DEFAULT_MASTER = "local[*,4]"
#: the Python workers' daemon: pyspark's, importing the installed pyspark (see the module)
DAEMON_MODULE = "subzero.engine.daemon"
MIN_JAVA = 17
#: tries per task on a cluster master (``local[N,F]`` says it for local masters)
CLUSTER_MAX_FAILURES = 4
#: seconds to wait for a ``spark://`` master's first executor ($SUBZERO_EXECUTOR_WAIT)
EXECUTOR_WAIT_S = 20.0
#: seconds to wait for a ``spark://`` master to accept the application
#: ($SUBZERO_REGISTER_WAIT; not tied to the executor wait: a live master on a busy machine
#: may take several seconds to accept, and that is not the missing worker it must name)
REGISTER_WAIT_S = 20.0
#: more seconds for that when the conf ships archives (``spark.archives``, e.g. a packed
#: Python environment): before it registers, the driver copies and unpacks each one
ARCHIVES_WAIT_S = 300.0
#: seconds to wait for a TCP connection to a ``spark://`` master before starting the JVM
CONNECT_TIMEOUT_S = 5.0
MASTER_FORMS = ("local, local[N], local[N,F] (N threads or *, F tries per task), "
                "spark://HOST:PORT, yarn or k8s://URL")

_LOCAL = re.compile(r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?")
_HOSTPORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")

_lock = threading.Lock()
_session: Any = None


class Session:
    """The process's Spark session as SubZero uses it: the ``SparkContext`` at once, and
    pyspark's SQL ``SparkSession`` on the same context only when first asked for (building
    it loads Spark SQL in the JVM, which takes a while, and a run never uses it)."""

    def __init__(self, sc: Any) -> None:
        self.sparkContext = sc
        self._sql: Any = None

    @property
    def sql(self) -> Any:
        """pyspark's ``SparkSession`` on this context (built on first use)."""
        if self._sql is None:
            # pyspark's SQL module only when a caller asks for it
            from pyspark.sql import SparkSession

            self._sql = SparkSession(self.sparkContext)
        return self._sql

    def stop(self) -> None:
        if self._sql is not None:
            self._sql.stop()
        else:
            self.sparkContext.stop()
_master: str | None = None


def resolve_master(master: str | None = None) -> str:
    return master or os.environ.get("SUBZERO_SPARK_MASTER") or DEFAULT_MASTER


def standalone_hosts(master: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs of a ``spark://`` master (several for a standby setup:
    ``spark://h1:7077,h2:7077``); raise :class:`SparkError` if one is malformed.

    >>> standalone_hosts("spark://127.0.0.1:7077")
    [('127.0.0.1', 7077)]
    """
    out = []
    for part in master[len("spark://"):].split(","):
        m = _HOSTPORT.fullmatch(part.strip())
        if not m or not 0 < int(m.group(2)) < 65536:
            raise SparkError(f"bad Spark master {master!r}: {part.strip()!r} is not HOST:PORT; "
                             f"expected {MASTER_FORMS}")
        out.append((m.group(1).strip("[]"), int(m.group(2))))
    return out


def check_master(master: str) -> str:
    """``master`` if it has one of the forms Spark accepts, else :class:`SparkError` naming
    it and the expected forms.

    >>> check_master("local[*,4]")
    'local[*,4]'
    >>> check_master("localhost:7077")
    Traceback (most recent call last):
    ...
    subzero.errors.SparkError: bad Spark master 'localhost:7077'; expected local, ...
    """
    m = master.strip()
    if _LOCAL.fullmatch(m) or m == "yarn" or (m.startswith("k8s://") and len(m) > 6):
        return m
    if m.startswith("spark://"):
        standalone_hosts(m)
        return m
    raise SparkError(f"bad Spark master {master!r}; expected {MASTER_FORMS}")


def local_cores(master: str) -> int | None:
    """The tasks a local master runs at once (its default parallelism: ``local`` 1,
    ``local[N]`` N, ``local[*]`` this machine's cores), None for a cluster master.

    >>> local_cores("local[3,4]"), local_cores("local"), local_cores("spark://h:7077")
    (3, 1, None)
    """
    m = _LOCAL.fullmatch(master.strip())
    if not m:
        return None
    n = m.group(2)
    if n is None:
        return 1
    if n == "*":
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            return os.cpu_count() or 1
    return int(n)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_reachable(master: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`SparkError` (one line, naming the URL) unless some host of a
    ``spark://`` master accepts a TCP connection within ``timeout`` seconds."""
    reasons = []
    for host, port in standalone_hosts(master):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except TimeoutError:
            reasons.append(f"{host}:{port}: no answer within {timeout:g} s")
        except OSError as e:
            reasons.append(f"{host}:{port}: {e.strerror or e}")
    raise SparkError(f"Spark master {master} is unreachable ({'; '.join(reasons)}); is the "
                     "cluster running? (python -m subzero.engine.cluster start starts one)")


def java_binary() -> str | None:
    """The ``java`` Spark will start: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")


def java_version() -> int:
    """Major version of the ``java`` Spark will use; raise :class:`SparkError` if absent."""
    java = java_binary()
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


def _wait(var: str, default: float) -> float:
    """Seconds from environment variable ``var`` (``default`` when unset)."""
    try:
        return float(os.environ.get(var, default))
    except ValueError:
        raise SparkError(f"{var}={os.environ[var]!r}: expected a number of seconds") from None


def _executor_wait() -> float:
    return _wait("SUBZERO_EXECUTOR_WAIT", EXECUTOR_WAIT_S)


def executor_count(sc: Any) -> int:
    """Executors registered with ``sc`` (the driver's own block manager not counted)."""
    n = int(sc._jsc.sc().getExecutorMemoryStatus().size())
    return n if sc.master.startswith("local") else max(0, n - 1)


def _wait_for_executor(sc: Any, master: str, log: Path) -> None:
    wait = _executor_wait()
    deadline = time.monotonic() + wait
    while executor_count(sc) < 1:
        if time.monotonic() > deadline:
            sc.stop()
            raise SparkError(
                f"Spark master {master} gave no executor within {wait:g} s: it has no live "
                f"worker with enough free cores and memory (see {log})")
        time.sleep(0.1)


def _start_context(context_cls: Any, conf: Any, gateway: Any, master: str, log: Path) -> Any:
    """``SparkContext(conf, gateway)``, within a bounded time for a ``spark://`` master.

    Spark's standalone client blocks the constructor until the master accepts the
    application, retrying for a minute if it never answers (a port that is not a Spark
    master, a master that is stuck); past ``$SUBZERO_REGISTER_WAIT`` (20) seconds the
    gateway JVM is killed, which ends the wait, and :class:`SparkError` names the master.
    """
    if not master.startswith("spark://"):
        return context_cls(conf=conf, gateway=gateway)
    wait = _wait("SUBZERO_REGISTER_WAIT", REGISTER_WAIT_S)
    if conf.get("spark.archives"):  # the constructor first copies and unpacks them here
        wait += ARCHIVES_WAIT_S
    expired = threading.Event()

    def give_up() -> None:
        expired.set()
        gateway.proc.kill()  # the JVM: the blocked constructor then fails at once

    timer = threading.Timer(wait, give_up)
    timer.daemon = True
    timer.start()
    try:
        return context_cls(conf=conf, gateway=gateway)
    except Exception:
        if not expired.is_set():
            raise
        # the dead gateway must not be reused by the next attempt in this process
        with context_cls._lock:
            context_cls._gateway = context_cls._jvm = context_cls._active_spark_context = None
        raise SparkError(f"Spark master {master} did not accept the application within "
                         f"{wait:g} s: is it a Spark master? (see {log})") from None
    finally:
        timer.cancel()


#: the driver JVM compiles with its quick compiler only (C1): a run's JVM does little work
#: of its own (the Python workers compute), and the optimizing compiler's threads took the
#: cores from the run while it started (see benchmarks/bench_astronomy.py and
#: benchmarks/bench_scale.py). Executors elsewhere (a cluster's, long-lived) keep the
#: JVM's default.
DRIVER_JIT = "-XX:TieredStopAtLevel=1"
#: where the driver's class-data-sharing archive lives (see :func:`class_archive_options`)
CACHE_ENV = "SUBZERO_CACHE"
#: an archive whose JVM never said it was written (killed while dumping) is removed once
#: this old (seconds); younger, it may still be being written
ARCHIVE_SETTLE_S = 30.0
#: what the writing JVM logs once the archive is whole (JDK 13+, ``-Xlog:cds+dynamic``)
ARCHIVE_WRITTEN = "Written dynamic archive"


def class_archive_options(cache: Path | None = None) -> str:
    """JVM options mapping Spark's classes from a class-data-sharing archive (AppCDS):
    the driver JVM's start loads some 7,000 of them from the archive instead of parsing
    them from Spark's jars, which shortens ``launch_gateway`` and so the start of every
    fresh session (see benchmarks/bench_executor.py).

    The archive (about 70 MB) lives in ``$SUBZERO_CACHE`` (default ``~/.cache/subzero``),
    named by what it depends on: pyspark's version and jars, and the ``java`` binary. The
    first JVM without one writes one as it exits (to a name of its own, with a log of the
    dump beside it); a later start takes it once its log says it was written whole, and
    removes one whose JVM died while writing it. A stale archive is ignored by the JVM,
    quietly. ``SUBZERO_CACHE=""`` turns this off.
    """
    if cache is None:
        where = os.environ.get(CACHE_ENV, str(Path.home() / ".cache" / "subzero"))
        if not where:
            return ""
        cache = Path(where)
    try:
        import hashlib

        import pyspark

        java = java_binary()
        java_file = Path(java).resolve() if java else None
        jars = Path(pyspark.__file__).resolve().parent / "jars"
        stamp = java_file.stat() if java_file else None
        key = hashlib.sha1(repr((pyspark.__version__, str(jars), str(java_file),
                                 stamp and (stamp.st_size, stamp.st_mtime_ns))).encode())
        archive = cache / f"spark-{pyspark.__version__}-{key.hexdigest()[:12]}.jsa"
        quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a stale archive: not a word
        now, writing = time.time(), False
        for log in sorted(cache.glob(f"{archive.stem}.*.log")):  # one per JVM asked to write
            made = log.with_suffix(".jsa")
            pid = log.name[len(archive.stem) + 1:-len(".log")]
            if ARCHIVE_WRITTEN in log.read_text(errors="replace") and made.is_file():
                if not archive.is_file():
                    os.replace(made, archive)  # written whole as its JVM exited
            elif _alive(pid) or now - log.stat().st_mtime < ARCHIVE_SETTLE_S:
                writing = True  # its process runs, or its JVM may still be dumping
                continue
            made.unlink(missing_ok=True)  # another whole one, or its JVM died dumping
            log.unlink(missing_ok=True)
        if archive.is_file():
            return f"-XX:SharedArchiveFile={archive} {quiet}"
        if writing:
            return ""  # one is being written: start as before, and write no other
        cache.mkdir(parents=True, exist_ok=True)
        mine = archive.with_suffix(f".{os.getpid()}.jsa")
        return (f"-XX:ArchiveClassesAtExit={mine} {quiet} "
                f"-Xlog:cds+dynamic=info:file={mine.with_suffix('.log')}")
    except (OSError, ImportError, ValueError):
        return ""  # no cache to write: start as before


def _alive(pid: str) -> bool:
    """Whether process ``pid`` (as text) still runs."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, OverflowError, ProcessLookupError):
        return False
    except PermissionError:  # another user's
        return True
    return True


def _conf(want: str) -> Any:
    # pyspark (and its JVM) only when a session is first needed
    from pyspark import SparkConf

    here = Path(__file__).parent
    log4j = here / "log4j2.properties"
    java_opts = (f"-Dlog4j.configurationFile=file:{log4j} "
                 f"-Dlog4j2.configurationFile=file:{log4j}")
    conf = (
        SparkConf()
        .setMaster(want)
        .setAppName("subzero")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.driver.extraJavaOptions",
             f"{java_opts} {DRIVER_JIT} {class_archive_options()}".strip())
        .set("spark.executor.extraJavaOptions", java_opts)
        .set("spark.driver.memory", os.environ.get("SUBZERO_DRIVER_MEMORY", "2g"))
        .set("spark.python.worker.reuse", "true")
        .set("spark.python.daemon.module", DAEMON_MODULE)
        .set("spark.sql.execution.arrow.pyspark.enabled", "false")
        .set("spark.scheduler.mode", "FAIR")
        .set("spark.scheduler.allocation.file", (here / "fairscheduler.xml").as_uri())
        # Spark's tasks run numpy kernels side by side (PySpark gives each worker
        # OMP_NUM_THREADS = task cpus); OpenBLAS's own thread pools beside them only spin.
        # One BLAS thread per Python worker, unless the driver's environment says otherwise;
        # set on the workers only, so the driver's environment stays as the user left it.
        .set("spark.executorEnv.OPENBLAS_NUM_THREADS",
             os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    )
    if not want.startswith("local"):
        python = os.environ["PYSPARK_PYTHON"]
        conf.set("spark.pyspark.python", python)
        conf.set("spark.executorEnv.PYSPARK_PYTHON", python)
        conf.set("spark.task.maxFailures", str(CLUSTER_MAX_FAILURES))
        if os.environ.get("PYTHONPATH"):  # executors import what the driver imports
            conf.set("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    return conf


def get_spark(master: str | None = None, log_dir: str | os.PathLike | None = None,
              notify: Callable[[str], None] | None = None,
              conf: Mapping[str, str] | None = None) -> Any:
    """The process's Spark :class:`Session`, started on first use.

    ``conf``, when given, is set on the session's ``SparkConf`` over SubZero's own settings
    (e.g. :func:`subzero.engine.shipenv.ship_conf`); its ``spark.pyspark.python``, if any,
    is also the Python that executors start for this session's tasks (pyspark otherwise
    takes ``$PYSPARK_PYTHON``). Ignored when the session runs already.

    A second call with a different master returns the running session (one session per
    process) and says so on stderr. ``notify(line)``, when given, hears
    ``"starting Spark (MASTER)..."`` once the master is known to be well formed and
    reachable, just before the JVM starts (several seconds of waiting otherwise silent).
    """
    global _session, _master
    want = check_master(resolve_master(master))
    with _lock:
        if _session is not None:
            if master is not None and want != _master:
                print(f"subzero: Spark already runs with master {_master}; ignoring {want}",
                      file=sys.stderr)
            return _session
        java_version()
        if want.startswith("spark://"):
            check_reachable(want)
        if notify is not None:
            notify(f"starting Spark ({want})...")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if want.startswith("local") or (want.startswith("spark://") and all(
                _is_loopback(h) for h, _ in standalone_hosts(want))):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # pyspark (and its JVM) only when a session is first needed
        from pyspark import SparkContext
        from pyspark.java_gateway import launch_gateway

        log_dir = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "subzero-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        spark_conf = _conf(want)
        for key, value in (conf or {}).items():
            spark_conf.set(key, value)
        log_path = log_dir / "spark.log"
        log = open(log_path, "ab")
        try:
            gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": log, "stderr": log})
            sc = _start_context(SparkContext, spark_conf, gateway, want, log_path)
        except SparkError:
            raise
        except Exception as e:  # noqa: BLE001 - report Spark's start failure in one line
            raise SparkError(
                f"Spark could not start with master {want!r}: {str(e).splitlines()[0]} "
                f"(see {log_path})"
            ) from None
        finally:
            log.close()
        sc.setLogLevel("ERROR")
        if conf and "spark.pyspark.python" in conf:  # what pyspark's tasks will start
            sc.pythonExec = conf["spark.pyspark.python"]
        if want.startswith("spark://"):
            _wait_for_executor(sc, want, log_path)
        _session = Session(sc)
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


#: user code shipped to this process's session so far: (session id, folder, top name)
_SHIPPED: set[tuple[int, str, str]] = set()


def ship_user_code(spark: Any, records: Any) -> None:
    """Ship the workflow's modules that come from no installed distribution (a user's
    ``pipeline.py``, a package on ``PYTHONPATH``) to the session's executors
    (``SparkContext.addPyFile``), so that their Python workers import the operators' classes
    as the driver did; with them, every module the driver imported from the same folders
    (the helpers a pipeline imports). A folder the executors already have on their
    ``PYTHONPATH`` is not shipped. ``records``: :class:`~subzero.codeid.ModuleRecord`."""
    sc = spark.sparkContext
    # the executors' PYTHONPATH: the driver's, unless the session's conf says otherwise
    # (a shipped environment's executors get none of the driver's paths)
    executor_path = sc.getConf().get("spark.executorEnv.PYTHONPATH",
                                     os.environ.get("PYTHONPATH", ""))
    on_path = {os.path.realpath(p) for p in executor_path.split(os.pathsep) if p}
    roots = {os.path.realpath(r.root) for r in records
             if r.distribution is None and r.root is not None}
    for root in sorted(roots - on_path):
        for top in sorted(_imported_from(root)):
            key = (id(sc), root, top)
            if key in _SHIPPED:
                continue
            _SHIPPED.add(key)
            single = Path(root) / f"{top}.py"
            sc.addPyFile(str(single) if single.is_file() else _zip_package(root, top))


def _imported_from(root: str) -> set[str]:
    """The top-level names of the modules this process imported from folder ``root``."""
    out = set()
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not f:
            continue
        rel = os.path.relpath(os.path.realpath(f), root)
        if not rel.startswith(os.pardir) and rel.split(os.sep)[0].removesuffix(".py") == \
                name.split(".")[0]:
            out.add(name.split(".")[0])
    return out


def _zip_package(root: str, top: str) -> str:
    """Package ``top`` of folder ``root`` as a zip in a temporary folder (removed when
    this process exits)."""
    import zipfile

    folder = Path(tempfile.mkdtemp(prefix="subzero-code-"))
    atexit.register(shutil.rmtree, folder, True)
    archive = folder / f"{top}.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted((Path(root) / top).rglob("*.py")):
            z.write(f, f.relative_to(root).as_posix())
    return str(archive)
