"""A throwaway S3 API server for the tests: moto's server mode on 127.0.0.1, stopped by
its PID.

Tests use its fixture by name (``tests/conftest.py`` registers it)::

    def test_something(s3_server):
        url = s3_server.url(s3_server.make_bucket("mine"), "home")
        store = ObjectStore(url, env=s3_server.env)

``s3_server`` accepts any credentials. ``s3_auth_server`` checks them: moto's IAM
authentication, switched on after the few requests that make an IAM user allowed to use
S3 (``INITIAL_NO_AUTH_ACTION_COUNT``); its ``env`` holds that user's keys, and a wrong key
or secret is refused with 403, as AWS refuses it.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: how long the server may take to answer, and to stop
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
REGION = "us-east-1"
#: the keys of a server that accepts any (moto's defaults)
DUMMY_KEY, DUMMY_SECRET = "testing-key", "testing-secret"
#: the AWS requests that make the IAM user of a server checking credentials (the user,
#: its policy, its access key): moto checks every request after these
_SETUP_REQUESTS = 3


@dataclass
class S3Server:
    """A running throwaway S3 API server.

    Attributes
    ----------
    host : str
        Always ``127.0.0.1``.
    port : int
        The TCP port it listens on.
    key_id, secret : str
        Credentials it accepts.
    auth : bool
        Whether it refuses other credentials.
    process : subprocess.Popen
        The server's process (stopped by its PID).
    """

    host: str
    port: int
    key_id: str
    secret: str
    auth: bool
    process: subprocess.Popen

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The AWS variables that reach this server (credentials, region, endpoint, plain
        http allowed)."""
        return {"AWS_ACCESS_KEY_ID": self.key_id, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true"}

    def client(self, service: str = "s3") -> Any:
        """A boto3 client of ``service`` on this server, with its credentials."""
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=self.key_id, aws_secret_access_key=self.secret)

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (nothing if it exists); its name."""
        s3 = self.client()
        try:
            s3.create_bucket(Bucket=name)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        return name

    def url(self, bucket: str, prefix: str = "") -> str:
        """``s3://bucket/prefix``."""
        return f"s3://{bucket}/{prefix.strip('/')}".rstrip("/")


def _free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command() -> list[str]:
    """moto's server program beside this interpreter, else its module."""
    exe = Path(sys.executable).parent / "moto_server"
    return [str(exe)] if os.access(exe, os.X_OK) else [sys.executable, "-m", "moto.server"]


def _answers(endpoint: str) -> bool:
    """Whether the server at ``endpoint`` answers (moto's own API, not an AWS request)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy
    try:
        with opener.open(f"{endpoint}/moto-api/", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def start_s3(auth: bool = False) -> S3Server:
    """Start moto's S3 API server on a free port of 127.0.0.1 and wait until it answers.

    Parameters
    ----------
    auth
        Check credentials: an IAM user allowed to use S3 is made, its keys the server's.

    Returns
    -------
    S3Server
        The running server.

    Raises
    ------
    RuntimeError
        The server did not answer in time (its output is in the message).
    """
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if auth:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(_SETUP_REQUESTS)
    log = tempfile.TemporaryFile()  # the server's output, shown if it does not start
    process = subprocess.Popen([*_command(), "-H", "127.0.0.1", "-p", str(port)], env=env,
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    server = S3Server("127.0.0.1", port, DUMMY_KEY, DUMMY_SECRET, auth, process)
    atexit.register(stop_s3, server)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(server.endpoint):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_s3(server)
            log.seek(0)
            out = log.read().decode(errors="replace")
            log.close()
            raise RuntimeError(f"moto's S3 server did not answer on port {port}: "
                               f"{out.strip()[-2000:]}")
        time.sleep(0.1)
    log.close()  # the server keeps writing to its own descriptor of the file
    if auth:
        iam = server.client("iam")
        iam.create_user(UserName="subzero-test")
        iam.put_user_policy(UserName="subzero-test", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17",
             "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="subzero-test")["AccessKey"]
        server.key_id, server.secret = key["AccessKeyId"], key["SecretAccessKey"]
    return server


def stop_pid(pid: int, timeout: float = STOP_TIMEOUT_S) -> None:
    """Stop the process ``pid`` started here: SIGTERM, then SIGKILL if it lingers."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child, or already reaped
            done = pid if not _alive(pid) else 0
        if done == pid:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_s3(server: S3Server) -> None:
    """Stop ``server`` by its PID. Stopping it again does nothing."""
    p = server.process
    if p.poll() is None:
        stop_pid(p.pid)
    p.poll()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """An S3 API server accepting any credentials, for the whole test session."""
    server = start_s3()
    try:
        yield server
    finally:
        stop_s3(server)


@pytest.fixture(scope="session")
def s3_auth_server() -> Iterator[S3Server]:
    """An S3 API server that refuses credentials other than its ``env``'s."""
    server = start_s3(auth=True)
    try:
        yield server
    finally:
        stop_s3(server)
