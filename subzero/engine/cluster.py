"""A Spark standalone cluster on this machine, from the Spark that the pyspark package ships.

::

    python -m subzero.engine.cluster start [--dir DIR] [--workers 2] [--cores 1] [--memory 2g]
    python -m subzero.engine.cluster status [--dir DIR] [--json]
    python -m subzero.engine.cluster stop [--dir DIR]

``start`` launches one master and ``--workers`` workers on 127.0.0.1 (free ports), each with
``bin/spark-class`` of the pyspark package (``SPARK_HOME`` set to it), waits until the master
lists every worker as alive (its web UI's ``/json/``), and prints the master URL
(``spark://127.0.0.1:PORT``) on stdout: pass it to ``subzero run --master``. Everything lives
under ``DIR`` (default ``./subzero-cluster``): ``cluster.json`` (ports, PIDs and their start
times), ``logs/master.log`` and ``logs/worker-<i>.log`` (the JVMs' output),
``work/worker-<i>/`` (the executors' directories), ``local/`` (the daemons' and executors'
scratch, ``SPARK_LOCAL_DIRS``). Workers run Python tasks with this
interpreter (``PYSPARK_PYTHON``).

Each daemon is started in a session of its own; ``spark-class`` ``exec`` s its JVM, so the
recorded PID is the JVM's, and the executors a worker launches and their Python workers
(pyspark's daemon moves them to a process group of their own, not out of the session) are
in its session. ``stop`` ends exactly those sessions: the processes of each recorded
session that started no earlier than its leader, never anything else (a PID reused since
is left alone).

From Python (the tests)::

    with start_cluster(tmp / "cluster", workers=2) as cl:
        cl.master_url            # 'spark://127.0.0.1:40123'
        cl.kill_worker(0)        # SIGKILL worker 0's JVM (group=True: all its processes)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from subzero.engine.spark import java_version
from subzero.errors import SparkError, SubZeroError

DEFAULT_DIR = "subzero-cluster"
STATE = "cluster.json"
HOST = "127.0.0.1"
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_MEMORY = re.compile(r"[1-9]\d*[mMgG]")


class ClusterError(SubZeroError):
    """The cluster could not be started, or a bad option was given."""


# -- processes ----------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The start time of live process ``pid`` (clock ticks since boot on Linux, else
    ``ps``'s text), or None if there is none (or only a zombie): a PID plus its start time
    names one process for good (PIDs are reused)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] in "ZX" else fields[19]  # state; starttime (field 22)
    except FileNotFoundError:
        return None
    except OSError:
        pass
    try:
        out = subprocess.run(["ps", "-o", "stat=,lstart=", "-p", str(pid)],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    stat, _, start = out.stdout.strip().partition(" ")
    return None if not stat or stat.startswith("Z") else start.strip()


def _session_members(sid: int, start: str) -> list[int]:
    """On Linux: the live processes of session ``sid`` that started no earlier than
    ``start`` (the session leader's start time as recorded), the leader included.

    Linux does not reuse a PID while a process still has it as its session ID, so a live
    process with PID ``sid`` and another start time means the session is gone: none."""
    try:
        lead = Path(f"/proc/{sid}/stat").read_text().rsplit(")", 1)[1].split()
        if lead[0] not in "ZX" and lead[19] != start:
            return []
    except FileNotFoundError:
        pass
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command: state ppid pgrp session ... starttime (field 22 of stat)
        if int(fields[3]) == sid and fields[0] not in "ZX" and int(fields[19]) >= int(start):
            out.append(int(d.name))
    return out


@dataclass
class Proc:
    """One daemon the cluster started: its JVM's PID (a session leader) and start time."""

    role: str  # "master" or "worker-<i>"
    pid: int
    start: str
    log: str
    port: int = 0
    webui_port: int = 0

    def alive(self) -> bool:
        popen = getattr(self, "_popen", None)
        if popen is not None:
            popen.poll()  # started by this process: collect it once it has exited
        return _start_time(self.pid) == self.start

    def members(self) -> list[int]:
        """Its live processes: the JVM and whatever it launched (executors, Python)."""
        if Path("/proc/self/stat").exists():
            try:
                return _session_members(self.pid, self.start)
            except (ValueError, IndexError):
                pass
        return [self.pid] if self.alive() else []

    def signal(self, sig: int, group: bool = True) -> list[int]:
        """Send ``sig`` to its JVM (and with ``group`` to everything it launched); returns
        the PIDs signalled."""
        pids = self.members() if group else ([self.pid] if self.alive() else [])
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        self.reap()
        return pids

    def reap(self) -> None:
        """Collect the JVM's exit status if this process started it (no zombie left)."""
        popen = getattr(self, "_popen", None)
        if popen is not None:
            popen.poll()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _pyspark_home() -> Path:
    # find_spec locates the pyspark package without importing it (no JVM, no py4j)
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError("the pyspark package is not installed in this Python "
                           f"({sys.executable})")
    home = Path(next(iter(spec.submodule_search_locations)))
    if not (home / "bin" / "spark-class").exists():
        raise ClusterError(f"{home} has no bin/spark-class: this pyspark ships no Spark")
    return home


def _env(spark_home: Path, work: Path) -> dict[str, str]:
    """The daemons' environment: everything they write under the cluster's folder, their
    scratch too (``SPARK_LOCAL_DIRS``: the executors' ``spark-*`` folders, which an
    executor killed with its worker would otherwise leave in the system's temp folder)."""
    local = work.parent / "local"
    local.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(SPARK_HOME=str(spark_home), SPARK_LOCAL_IP=HOST,
               PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
               SPARK_WORKER_DIR=str(work), SPARK_LOG_DIR=str(work.parent / "logs"),
               SPARK_LOCAL_DIRS=str(local))
    env.pop("SPARK_CONF_DIR", None)  # the bundled defaults, not a user's cluster config
    return env


def _launch(role: str, args: Sequence[str], env: dict[str, str], logs: Path) -> Proc:
    log = logs / f"{role}.log"
    with open(log, "ab") as f:
        p = subprocess.Popen([str(Path(env["SPARK_HOME"]) / "bin" / "spark-class"), *args],
                             stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                             env=env, start_new_session=True)
    start = None
    for _ in range(100):  # the start time of a process just forked is there at once
        start = _start_time(p.pid)
        if start:
            break
        time.sleep(0.01)
    if start is None:
        raise ClusterError(f"{role} exited at once; see {log}")
    proc = Proc(role, p.pid, start, str(log))
    proc._popen = p  # type: ignore[attr-defined]  # reaped by stop() in this process
    return proc


def _tail(path: str, lines: int = 5) -> str:
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    errs = [t for t in text if "ERROR" in t or "Exception" in t]
    return " | ".join((errs or text)[-lines:])


# -- the cluster --------------------------------------------------------------------------


@dataclass
class Cluster:
    """A running standalone cluster (see the module docstring)."""

    dir: str
    master_url: str
    webui_url: str
    master: Proc
    workers: list[Proc] = field(default_factory=list)
    cores: int = 1
    memory: str = "2g"

    @property
    def worker_pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    @property
    def state_path(self) -> Path:
        return Path(self.dir) / STATE

    def save(self) -> None:
        doc = {"dir": self.dir, "master_url": self.master_url, "webui_url": self.webui_url,
               "cores": self.cores, "memory": self.memory,
               "master": _proc_doc(self.master), "workers": [_proc_doc(w) for w in self.workers]}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2))
        tmp.replace(self.state_path)

    @classmethod
    def load(cls, dir: str | os.PathLike) -> "Cluster | None":
        path = Path(dir) / STATE
        try:
            doc = json.loads(path.read_text())
            return cls(doc["dir"], doc["master_url"], doc["webui_url"], Proc(**doc["master"]),
                       [Proc(**w) for w in doc["workers"]], doc.get("cores", 1),
                       doc.get("memory", "2g"))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as e:
            raise ClusterError(f"{path}: not a cluster state file ({e})") from None

    def procs(self) -> list[Proc]:
        return [*self.workers, self.master]

    def info(self) -> dict[str, Any] | None:
        """The master's view (its web UI's JSON: workers, their state, applications), or
        None if it does not answer."""
        try:
            with urllib.request.urlopen(self.webui_url.rstrip("/") + "/json/", timeout=5) as r:
                return json.loads(r.read().decode())
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def alive_workers(self) -> int:
        info = self.info() or {}
        return sum(1 for w in info.get("workers", []) if w.get("state") == "ALIVE")

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until the master answers and lists every worker as alive; ClusterError (naming
        the log) if a daemon exits or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while True:
            for p in self.procs():
                if not p.alive():
                    raise ClusterError(f"Spark {p.role} exited while starting: "
                                       f"{_tail(p.log) or 'no output'} (see {p.log})")
            if self.alive_workers() >= len(self.workers):
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"the Spark cluster was not up within {timeout:g} s "
                                   f"(see {Path(self.dir) / 'logs'})")
            time.sleep(0.25)

    def kill_worker(self, i: int, group: bool = False) -> list[int]:
        """SIGKILL worker ``i``'s JVM (with ``group``: its executors and Python workers
        too, as when its machine dies); returns the PIDs killed."""
        return self.workers[i].signal(signal.SIGKILL, group=group)

    def stop(self, grace: float = STOP_GRACE_S) -> list[int]:
        """End every process this cluster started (SIGTERM, then SIGKILL after ``grace``
        seconds), workers first; remove the state file. Returns the PIDs signalled."""
        hit: list[int] = []
        for p in self.procs():
            hit += p.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(p.members() for p in self.procs()) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.1)
        for p in self.procs():
            hit += p.signal(signal.SIGKILL)
        self._reap()
        self.state_path.unlink(missing_ok=True)
        return sorted(set(hit))

    def _reap(self) -> None:
        for p in self.procs():
            p.reap()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _proc_doc(p: Proc) -> dict[str, Any]:
    return asdict(p)


def start_cluster(dir: str | os.PathLike = DEFAULT_DIR, workers: int = 2, cores: int = 1,
                  memory: str = "2g", timeout: float = START_TIMEOUT_S,
                  separate_scratch: bool = False) -> Cluster:
    """Start a master and ``workers`` workers on 127.0.0.1 and wait until every worker has
    registered; returns the :class:`Cluster` (a context manager that stops it). A cluster
    that does not come up is stopped again and raises :class:`ClusterError`.

    ``separate_scratch`` gives each worker a scratch folder of its own
    (``local/worker-N``), as workers on separate machines have: nothing one worker writes
    there is seen by another."""
    if workers < 1 or cores < 1:
        raise ClusterError(f"--workers {workers} --cores {cores}: expected positive integers")
    if not _MEMORY.fullmatch(memory):
        raise ClusterError(f"--memory {memory!r}: expected a size like 512m or 2g")
    d = Path(dir).expanduser().resolve()
    old = Cluster.load(d)
    if old is not None and any(p.alive() for p in old.procs()):
        raise ClusterError(f"a cluster started from {d} still runs ({old.master_url}); "
                           "stop it first")
    java_version()
    spark_home = _pyspark_home()
    (d / "logs").mkdir(parents=True, exist_ok=True)
    (d / "work").mkdir(exist_ok=True)
    env = _env(spark_home, d / "work")
    port, webui = _free_port(), _free_port()
    master = _launch("master", [MASTER_CLASS, "--host", HOST, "--port", str(port),
                                "--webui-port", str(webui)], env, d / "logs")
    master.port, master.webui_port = port, webui
    cl = Cluster(str(d), f"spark://{HOST}:{port}", f"http://{HOST}:{webui}", master, [],
                 cores, memory)
    try:
        cl.save()
        for i in range(workers):
            wport, wweb = _free_port(), _free_port()
            wenv = env
            if separate_scratch:
                scratch = d / "local" / f"worker-{i}"
                scratch.mkdir(parents=True, exist_ok=True)
                wenv = dict(env, SPARK_LOCAL_DIRS=str(scratch))
            w = _launch(f"worker-{i}", [
                WORKER_CLASS, "--host", HOST, "--port", str(wport), "--webui-port", str(wweb),
                "--cores", str(cores), "--memory", memory,
                "--work-dir", str(d / "work" / f"worker-{i}"), cl.master_url], wenv,
                d / "logs")
            w.port, w.webui_port = wport, wweb
            cl.workers.append(w)
            cl.save()
        cl.wait_ready(timeout)
    except BaseException:
        cl.stop(grace=2.0)
        raise
    return cl


# -- the command line ---------------------------------------------------------------------


def _status(cl: Cluster) -> dict[str, Any]:
    info = cl.info()
    by_port = {int(w.get("port", 0)): w for w in (info or {}).get("workers", [])}
    return {
        "master_url": cl.master_url, "webui_url": cl.webui_url,
        "master": {"pid": cl.master.pid, "alive": cl.master.alive(),
                   "status": (info or {}).get("status")},
        "workers": [{"pid": w.pid, "alive": w.alive(), "port": w.port,
                     "state": by_port.get(w.port, {}).get("state")} for w in cl.workers],
        "applications": [a.get("name") for a in (info or {}).get("activeapps", [])],
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m subzero.engine.cluster",
                                description="A Spark standalone cluster on 127.0.0.1.")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--dir", default=DEFAULT_DIR,
                   help=f"state, logs and work directories (default ./{DEFAULT_DIR})")
    p.add_argument("--workers", type=int, default=2, help="workers to start (default 2)")
    p.add_argument("--cores", type=int, default=1, help="cores per worker (default 1)")
    p.add_argument("--memory", default="2g", help="memory per worker (default 2g)")
    p.add_argument("--timeout", type=float, default=START_TIMEOUT_S,
                   help=f"seconds to wait for the workers (default {START_TIMEOUT_S:g})")
    p.add_argument("--json", action="store_true", help="status: print JSON")
    args = p.parse_args(argv)
    try:
        if args.action == "start":
            cl = start_cluster(args.dir, args.workers, args.cores, args.memory, args.timeout)
            print(cl.master_url)
            return 0
        cl = Cluster.load(Path(args.dir).expanduser().resolve())
        if cl is None:
            print(f"no cluster started from {Path(args.dir).resolve()}", file=sys.stderr)
            return 1
        if args.action == "stop":
            pids = cl.stop()
            print(f"stopped {cl.master_url} ({len(pids)} processes)")
            return 0
        st = _status(cl)
        if args.json:
            print(json.dumps(st, indent=2))
        else:
            print(f"master {st['master_url']} (pid {cl.master.pid}, "
                  f"{'up' if st['master']['alive'] else 'down'}), web UI {st['webui_url']}")
            for i, w in enumerate(st["workers"]):
                print(f"worker-{i} pid {w['pid']} {'up' if w['alive'] else 'down'}"
                      f"{', ' + w['state'] if w['state'] else ''}")
        return 0 if st["master"]["alive"] else 1
    except (SparkError, SubZeroError) as e:
        print(f"subzero: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
