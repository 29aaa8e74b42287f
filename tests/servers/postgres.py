"""A throwaway PostgreSQL server for the tests: Debian's ``initdb`` and ``postgres`` in a
temporary folder, listening on 127.0.0.1 only, a superuser with a known password (scram),
stopped by its PID.

Tests use its fixture by name (``tests/conftest.py`` registers it)::

    def test_something(postgres_server):
        url = postgres_server.url(postgres_server.create_database("mine"))

Without PostgreSQL's programs (``make servers`` installs them) the tests that use it are
skipped.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest

#: the superuser the server is made with, and its password
USER = "subzero"
PASSWORD = "subzero-test-pw"
#: how long the server may take to accept connections, and to stop
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


@dataclass
class PostgresServer:
    """A running throwaway server: where it listens and how to log in.

    Attributes
    ----------
    host : str
        Always ``127.0.0.1``.
    port : int
        The TCP port it listens on.
    user, password : str
        Its superuser.
    folder : pathlib.Path
        The temporary folder holding its data, socket and log.
    process : subprocess.Popen
        The ``postgres`` process (stopped by its PID), or ``runuser`` running it.
    """

    host: str
    port: int
    user: str
    password: str
    folder: Path
    process: subprocess.Popen
    _made: set[str] = field(default_factory=set)
    #: ``process`` is ``runuser``, which does not pass a signal on: the server is signalled
    #: through the process group started with it (its own session)
    _via_group: bool = False

    def url(self, dbname: str = "postgres", password: bool = True) -> str:
        """The URL of database ``dbname`` on this server, with the password unless
        ``password`` is False."""
        auth = f"{quote(self.user)}:{quote(self.password)}" if password else quote(self.user)
        return f"postgresql://{auth}@{self.host}:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create an empty database ``name`` (dropped first if there is one); its name."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        self._made.add(name)
        return name


def _programs() -> tuple[str, str] | None:
    """The paths of ``initdb`` and ``postgres`` (Debian's newest, else on PATH), or None."""
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: [int(x) for x in p.split("/")[-2].split(".")
                                        if x.isdigit()], reverse=True):
        initdb, postgres = os.path.join(bindir, "initdb"), os.path.join(bindir, "postgres")
        if os.access(initdb, os.X_OK) and os.access(postgres, os.X_OK):
            return initdb, postgres
    initdb, postgres = shutil.which("initdb"), shutil.which("postgres")
    return (initdb, postgres) if initdb and postgres else None


def _as_server_user(cmd: list[str]) -> list[str]:
    """``cmd`` run as the ``postgres`` system user when this process is root (initdb
    refuses root), else as it is. ``setpriv`` executes the program in its own process,
    so that the PID Popen gives is the server's (``runuser`` stays in between, and does
    not pass a signal on)."""
    if os.geteuid() != 0:
        return cmd
    setpriv = shutil.which("setpriv")
    if setpriv:
        import pwd

        pw = pwd.getpwnam("postgres")
        return [setpriv, f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups",
                *cmd]
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--", *cmd]
    raise RuntimeError("running as root without setpriv or runuser: cannot start "
                       "PostgreSQL as the postgres user")


def _free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_postgres() -> PostgresServer:
    """Start a throwaway PostgreSQL server and wait until it accepts connections.

    Returns
    -------
    PostgresServer
        The running server.

    Raises
    ------
    FileNotFoundError
        No ``initdb`` and ``postgres`` here.
    RuntimeError
        ``initdb`` failed, or the server did not accept connections in time (its log
        is in the message).
    """
    import psycopg

    programs = _programs()
    if programs is None:
        raise FileNotFoundError("no initdb and postgres (Debian's postgresql; 'make servers')")
    initdb, postgres = programs
    # under /tmp, not pytest's tmp_path: that is private to root, and the server runs as
    # the postgres user when the tests run as root
    folder = Path(tempfile.mkdtemp(prefix="subzero-pg-", dir="/tmp"))
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    pwfile = folder / "pwfile"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        import pwd

        pw = pwd.getpwnam("postgres")
        for p in (folder, sockets, pwfile):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    try:
        done = subprocess.run(
            _as_server_user([initdb, "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
                             "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8",
                             "--no-sync"]),
            capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {(done.stderr or done.stdout).strip()}")
        pwfile.unlink()
        port = _free_port()
        with open(folder / "postgres.log", "wb") as log:
            process = subprocess.Popen(
                _as_server_user([postgres, "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
                                 "-k", str(sockets), "-c", "fsync=off",
                                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                                 "-c", "max_connections=100"]),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    server = PostgresServer("127.0.0.1", port, USER, PASSWORD, folder, process,
                            _via_group=os.path.basename(_as_server_user(["x"])[0]) == "runuser")
    atexit.register(stop_postgres, server)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            psycopg.connect(server.url(), connect_timeout=2).close()
            return server
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                text = (folder / "postgres.log").read_text(errors="replace").strip()
                stop_postgres(server)
                raise RuntimeError(f"PostgreSQL did not start on port {port}: "
                                   f"{text[-2000:]}") from None
            time.sleep(0.1)


def stop_postgres(server: PostgresServer) -> None:
    """Stop ``server`` (the process this module started, by its PID: a fast shutdown,
    killed if it lingers) and remove its folder. Stopping it again does nothing."""
    p = server.process
    kill = os.killpg if server._via_group else os.kill
    if p.poll() is None:
        try:
            kill(p.pid, signal.SIGINT)  # PostgreSQL's fast shutdown
            p.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill(p.pid, signal.SIGKILL)
            p.wait()
        except ProcessLookupError:
            pass
    shutil.rmtree(server.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL server for the test session (skipped where there is none)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install -e '.[remote]')")
    if _programs() is None:
        pytest.skip("no PostgreSQL server programs (initdb, postgres); 'make servers' "
                    "installs Debian's postgresql")
    server = start_postgres()
    try:
        yield server
    finally:
        # queries the test process logged are written at exit: write them while the
        # server still runs, rather than warn then that it is gone
        from subzero.engine.catalog.querylog import _flush_all_query_logs

        _flush_all_query_logs()
        stop_postgres(server)
