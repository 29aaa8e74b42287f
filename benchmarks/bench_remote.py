#!/usr/bin/env python
"""Remote home: a run and its queries on S3 (moto) with a PostgreSQL catalog, against a
local home with SQLite, with every object-store request counted on the wire.

    python benchmarks/bench_remote.py [--quick] [--out FILE.json] [--scales 1,16]
        [--base 2001x513] [--repeat N] [--query-repeat N] [--latency-ms 30,100]
        [--bandwidth-mbs 90]

Configurations: the astronomy workflow at the cell factors of ``--scales`` (default 1 and
16), in ``bench_scale``'s notion: factor F is the exposure shape ``(R k, C k)`` with
``k = sqrt(F)`` (16x is ``8004x2052``), one CCD. Both homes run the workflow's default
strategy (``subzero``):

- (a) ``local``: a home folder on this machine, its SQLite catalog;
- (b) ``s3``: ``s3://bucket/<prefix>`` on moto's S3 server (``tests/servers/s3.py``) and
  a PostgreSQL database of its own (``tests/servers/postgres.py``), both on 127.0.0.1,
  with an empty ``$SUBZERO_CACHE`` per process.

Requests are counted on the wire, not in a process: runs upload from Spark's worker
processes as well as the driver. The benchmark starts :class:`CountingProxy`, a threaded
HTTP/1.1 reverse proxy on 127.0.0.1 in front of moto, and gives every process
``AWS_ENDPOINT_URL`` pointing at it. It forwards each request unchanged (keep-alive,
chunked request bodies de-chunked), and records for each its kind (:func:`classify`:
``GET``, ``RANGE`` a ranged GET, ``PUT``, ``LIST``, ``DELETE`` one key or a batch of
them, ``HEAD``, ``POST`` starting or completing a multipart upload; the kinds
:class:`subzero.engine.objectstore.TransferStats` counts), its S3 operation, the body
bytes each way, and when it started and ended. Its own ``/__proxy__/mark`` path (never
forwarded) tells a process how many requests have ended so far, so a query process counts
its phases exactly.

Measured, for each configuration:

- runs: every run a fresh CLI subprocess (``python -m subzero.cli run astronomy --json``),
  the two homes alternating (which goes first alternates too) ``--repeat`` times: the
  medians of ``runtime_s`` and wall time, and of each S3 run's requests by kind and bytes
  up and down (they hardly vary between runs; each run's are under ``times``);
- queries BQ0-BQ4 and FQ0 on each home's first run, each in fresh processes of its own
  (a cold query is the first of its process: one process per query, so that a query never
  finds shards an earlier one fetched): ``first`` (a new process, an empty cache),
  ``second`` (another new process, another empty cache: the same figures again, what a
  second user on another machine pays) and ``warm_cache`` (a new process on the
  ``first`` process's cache: what is left once the shards are local). In each process:
  opening the run (``open``), choosing the query's cells (``cells``: done once per run
  and kept in the catalog, so only the ``first`` process chooses), the cold query (the
  first call, ``cold_s``) and ``--query-repeat`` calls after it (``warm_s``, the median);
  the requests and bytes of each phase.

What a real store would add (``latency_models``): a local emulator answers in well under
a millisecond, so its times say little; the request and byte counts are what carry. For
each model (a per-request latency from ``--latency-ms``, one bandwidth per stream from
``--bandwidth-mbs``), every query and run gets ``added_s = critical_path x latency +
bytes / bandwidth``, where ``critical_path`` is the number of requests that happened one
after another: the longest chain of requests each starting after the one before it ended
(:func:`critical_path`, from the proxy's start and end times). Requests that overlap are
independent and cost one latency between them; requests one after another each cost one.
A cold query fetches its shards one at a time (``subzero.query.executor`` opens a step's
readers in a list, and :func:`subzero.engine.datastore.shard_folder` downloads a shard's
files one after another), so for a query the chain is every request. For a run the bytes
term counts one stream (parallel uploads divide it) and its latency term ignores that a
real run would overlap requests with computing: an estimate, not a bound.

The PostgreSQL catalog's round trips are not counted (it is on 127.0.0.1 in both this
benchmark and, usually, not in production): the figures are the object store's.

``--quick`` (a 250 x 64 exposure, one factor, one repeat, three query repeats) writes
only where ``--out`` says. The full run's figures are medians of alternating repeats on
a shared 2-core machine; its load lands in the runtimes all the same.
"""

from __future__ import annotations

import argparse
import bisect
import http.client
import http.server
import json
import math
import os
import shutil
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, emit, parser, positive_int

WORKFLOW = "astronomy"
STRATEGY = "subzero"
HOMES = ("local", "s3")
QUERIES = ("BQ0", "BQ1", "BQ2", "BQ3", "BQ4", "FQ0")
#: the query processes: a new process with an empty cache, a second one with another
#: empty cache, and one on the first one's cache
PROCESSES = ("first", "second", "warm_cache")
KINDS = ("GET", "RANGE", "PUT", "LIST", "DELETE", "HEAD", "POST")
BASE = (2001, 513)
QUICK_BASE = (250, 64)
RESULTS = ROOT / "benchmarks" / "results"
#: the proxy's own path (a bucket name cannot start with ``_``): never forwarded
CONTROL = "/__proxy__/"
#: request headers the proxy does not pass on (hop by hop, or answered by the proxy)
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
        "trailer", "upgrade", "expect", "content-length"}
#: per-request latencies of the default models, milliseconds: the AWS whitepaper
#: "Optimizing Amazon S3 performance" speaks of median latencies "in the tens of
#: milliseconds" for small requests in a region; 100 ms is the figure often quoted as
#: S3's baseline first-byte latency
LATENCIES_MS = (30.0, 100.0)
BANDWIDTH_MBS = 90.0


class BenchError(Exception):
    """A run or a query process that failed (its last line of stderr)."""


# ---------------------------------------------------------------------------------------
# counting requests on the wire
# ---------------------------------------------------------------------------------------


def classify(method: str, target: str, ranged: bool = False,
             copy: bool = False) -> tuple[str, str]:
    """The kind and S3 operation of a path-style request ``method target``.

    >>> classify("GET", "/b/?list-type=2&prefix=h%2F")
    ('LIST', 'ListObjectsV2')
    >>> classify("GET", "/b/h/runs/r1/manifest.json", ranged=True)
    ('RANGE', 'GetObject')
    >>> classify("POST", "/b/?delete")
    ('DELETE', 'DeleteObjects')
    >>> classify("POST", "/b/h/big?uploads"), classify("PUT", "/b/h/big?partNumber=1&uploadId=x")
    (('POST', 'CreateMultipartUpload'), ('PUT', 'UploadPart'))
    >>> classify("HEAD", "/b/h/a.zarr/zarr.json")
    ('HEAD', 'HeadObject')
    """
    path, _, qs = target.partition("?")
    q = parse_qs(qs, keep_blank_values=True)
    key = path.lstrip("/").partition("/")[2]
    method = method.upper()
    if method == "GET":
        if not key:
            if "uploads" in q:
                return "LIST", "ListMultipartUploads"
            return "LIST", "ListObjectsV2" if q.get("list-type") == ["2"] else "ListObjects"
        if "uploadId" in q:
            return "LIST", "ListParts"
        return ("RANGE" if ranged else "GET"), "GetObject"
    if method == "HEAD":
        return "HEAD", "HeadObject" if key else "HeadBucket"
    if method == "PUT":
        if "partNumber" in q:
            return "PUT", "UploadPart"
        if not key:
            return "PUT", "CreateBucket"
        return "PUT", "CopyObject" if copy else "PutObject"
    if method == "POST":
        if "delete" in q:
            return "DELETE", "DeleteObjects"
        if "uploads" in q:
            return "POST", "CreateMultipartUpload"
        if "uploadId" in q:
            return "POST", "CompleteMultipartUpload"
        return "POST", "PostObject"
    if method == "DELETE":
        if "uploadId" in q:
            return "DELETE", "AbortMultipartUpload"
        return "DELETE", "DeleteObject" if key else "DeleteBucket"
    return method, method


@dataclass(frozen=True)
class Request:
    """One request the proxy forwarded."""

    start: float
    end: float
    kind: str
    op: str
    up: int  # request body bytes
    down: int  # response body bytes
    status: int


def critical_path(events: Sequence[Request]) -> int:
    """The number of requests on the longest chain of requests each starting after the
    previous one ended: what a per-request latency is paid for, requests that overlap
    paying it once between them.

    >>> R = lambda s, e: Request(s, e, "GET", "GetObject", 0, 0, 200)
    >>> critical_path([R(0, 1), R(1, 2), R(2, 3)])  # one after another
    3
    >>> critical_path([R(0, 1), R(0.5, 1.5), R(0.2, 0.9)])  # all at once
    1
    >>> critical_path([R(0, 1), R(0, 1), R(2, 3), R(2.5, 4), R(4, 5)])
    3
    >>> critical_path([])
    0
    """
    ordered = sorted(events, key=lambda e: e.end)
    ends: list[float] = []
    best: list[int] = []  # best[i]: the longest chain ending with ordered[i], as a prefix max
    for e in ordered:
        i = bisect.bisect_right(ends, e.start)
        length = (best[i - 1] if i else 0) + 1
        ends.append(e.end)
        best.append(max(length, best[-1] if best else 0))
    return best[-1] if best else 0


def max_in_flight(events: Sequence[Request]) -> int:
    """The most requests open at once.

    >>> R = lambda s, e: Request(s, e, "GET", "GetObject", 0, 0, 200)
    >>> max_in_flight([R(0, 2), R(1, 3), R(2.5, 4)]), max_in_flight([])
    (2, 0)
    """
    points = sorted([(e.start, 1) for e in events] + [(e.end, -1) for e in events],
                    key=lambda p: (p[0], p[1]))
    n = top = 0
    for _, d in points:
        n += d
        top = max(top, n)
    return top


def summarize(events: Sequence[Request]) -> dict[str, Any]:
    """Requests by kind and by S3 operation, bytes each way, errors (4xx, 5xx: a HEAD of
    a missing key is one) by operation and status, the critical path, the most requests
    in flight and the time spent in them on this machine."""
    kinds: dict[str, int] = {}
    ops: dict[str, int] = {}
    errors: dict[str, int] = {}
    for e in events:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
        ops[e.op] = ops.get(e.op, 0) + 1
        if e.status >= 400:
            errors[f"{e.op} {e.status}"] = errors.get(f"{e.op} {e.status}", 0) + 1
    return {"requests": len(events),
            "by_kind": {k: kinds.get(k, 0) for k in (*KINDS, *sorted(set(kinds) - set(KINDS)))},
            "by_operation": dict(sorted(ops.items())),
            "bytes_up": sum(e.up for e in events), "bytes_down": sum(e.down for e in events),
            "errors": sum(errors.values()), "errors_by_operation": dict(sorted(errors.items())),
            "critical_path": critical_path(events), "max_in_flight": max_in_flight(events),
            # the time the proxy spent on them (moto's time and its own), summed
            "request_s": sum(e.end - e.start for e in events)}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients use it
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith(CONTROL):
            self._control()
        else:
            self._forward()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _control(self) -> None:
        body = json.dumps({"events": self.server.proxy.count()}).encode()
        self.send_response_only(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline(65537).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _forward(self) -> None:
        t0 = time.perf_counter()
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        status, reason, out_headers, data = self.server.proxy.upstream(
            self.command, self.path, body, headers)
        # counted before the client has its answer: a request the client saw answered is
        # always in the count (the end time leaves out the last bytes' way back)
        names = {k.lower() for k in self.headers}
        kind, op = classify(self.command, self.path, ranged="range" in names,
                            copy="x-amz-copy-source" in names)
        self.server.proxy.record(Request(t0, time.perf_counter(), kind, op, len(body),
                                         0 if self.command == "HEAD" else len(data), status))
        self.send_response_only(status, reason)
        for k, v in out_headers:
            if k.lower() not in _HOP:
                self.send_header(k, v)
        if self.command == "HEAD":  # the object's length, no body
            length = {k.lower(): v for k, v in out_headers}.get("content-length")
            if length is not None:
                self.send_header("Content-Length", length)
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD" and data:
            self.wfile.write(data)
        self.wfile.flush()


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: CountingProxy


class CountingProxy:
    """A threaded HTTP/1.1 reverse proxy on 127.0.0.1 in front of an S3 endpoint that
    counts every request it forwards (:class:`Request`).

    Parameters
    ----------
    upstream
        The endpoint, ``http://host:port``.

    Examples
    --------
    >>> proxy = CountingProxy("http://127.0.0.1:9").start()
    >>> proxy.endpoint.startswith("http://127.0.0.1:"), proxy.count()
    (True, 0)
    >>> proxy.stop()
    """

    def __init__(self, upstream: str) -> None:
        u = urlsplit(upstream)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self._events: list[Request] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._server: _Server | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the AWS_ENDPOINT_URL that goes through the proxy."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> CountingProxy:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        threading.Thread(target=self._server.serve_forever, name="counting-proxy",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def upstream(self, method: str, target: str, body: bytes, headers: dict[str, str]
                 ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """Forward one request on this thread's keep-alive connection (a new one once if
        the old one was closed by the server)."""
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPConnection(self.host, self.port,
                                                                     timeout=120)
            try:
                conn.request(method, target, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                return resp.status, resp.reason, resp.getheaders(), data
            except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def record(self, event: Request) -> None:
        with self._lock:
            self._events.append(event)

    def count(self) -> int:
        """Requests recorded so far (a mark: :meth:`since`)."""
        with self._lock:
            return len(self._events)

    def since(self, start: int, stop: int | None = None) -> list[Request]:
        """The requests recorded between marks ``start`` and ``stop`` (now)."""
        with self._lock:
            return self._events[start:stop]


def proxy_mark(endpoint: str) -> int:
    """The proxy's mark (requests ended so far), asked over HTTP by another process."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{endpoint}{CONTROL}mark", timeout=10) as r:
        return int(json.loads(r.read())["events"])


# ---------------------------------------------------------------------------------------
# configurations, servers, homes
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """The astronomy workflow at cell factor ``factor`` (``bench_scale``'s notion: the
    exposure's shape grows by ``sqrt(factor)`` on each axis)."""

    factor: int
    base: tuple[int, int]

    @property
    def k(self) -> int:
        return math.isqrt(self.factor)

    @property
    def name(self) -> str:
        return f"{self.factor}x"

    @property
    def shape(self) -> tuple[int, int]:
        return self.base[0] * self.k, self.base[1] * self.k

    def params(self) -> dict[str, str]:
        return {"shape": f"{self.shape[0]}x{self.shape[1]}"}


def parse_scales(text: str) -> list[int]:
    """Cell factors ``1,16``: each a perfect square (the shape grows by its root per
    axis, as ``bench_scale`` builds 16x from 4 x 4).

    >>> parse_scales("1,16")
    [1, 16]
    >>> parse_scales("2")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: a scale is a cell factor that is a perfect square (1, 4, 16, 64); got 2 instead.
    """
    out = []
    for v in text.split(","):
        if not v.strip():
            continue
        try:
            f = int(v)
        except ValueError:
            f = 0
        if f < 1 or math.isqrt(f) ** 2 != f:
            raise argparse.ArgumentTypeError(
                f"a scale is a cell factor that is a perfect square (1, 4, 16, 64); got {v} "
                "instead.")
        out.append(f)
    if not out:
        raise argparse.ArgumentTypeError(f"expected scales such as 1,16; got {text!r} instead.")
    return out


@dataclass
class Remote:
    """The servers of the S3 home: moto behind the counting proxy, and PostgreSQL."""

    s3: Any
    pg: Any
    proxy: CountingProxy
    bucket: str
    tmp: Path
    _made: list[str] = field(default_factory=list)

    def env(self, cache: Path) -> dict[str, str]:
        """A process's environment for the S3 home: AWS variables through the proxy, the
        catalog's password, its own cache folder."""
        return {**self.s3.env, "AWS_ENDPOINT_URL": self.proxy.endpoint,
                "PGPASSWORD": self.pg.password, "SUBZERO_CACHE": str(cache)}

    def new_home(self, label: str) -> tuple[str, str]:
        """A fresh prefix of the bucket and a fresh database: (home URL, catalog URL)."""
        name = f"{label}-{uuid.uuid4().hex[:8]}".lower()
        db = self.pg.create_database("d_" + name.replace("-", "_"))
        self._made.append(name)
        return self.s3.url(self.bucket, name), self.pg.url(db, password=False)

    def drop(self, url: str) -> None:
        """Delete a home's objects (straight at moto: not counted) to keep its memory."""
        prefix = url.split("/", 3)[3].rstrip("/") + "/"
        client = self.s3.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                     Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            for i in range(0, len(keys), 1000):
                client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys[i:i + 1000]})


def start_remote(tmp: Path) -> Remote:
    """Start PostgreSQL, moto and the counting proxy (stop them with :func:`stop_remote`)."""
    from tests.servers.postgres import start_postgres
    from tests.servers.s3 import start_s3

    pg = start_postgres()
    try:
        s3 = start_s3()
    except BaseException:
        from tests.servers.postgres import stop_postgres

        stop_postgres(pg)
        raise
    proxy = CountingProxy(s3.endpoint).start()
    bucket = s3.make_bucket(f"bench-remote-{uuid.uuid4().hex[:8]}")
    return Remote(s3, pg, proxy, bucket, tmp)


def stop_remote(remote: Remote) -> None:
    from tests.servers.postgres import stop_postgres
    from tests.servers.s3 import stop_s3

    remote.proxy.stop()
    stop_s3(remote.s3)
    stop_postgres(remote.pg)


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k not in ("SUBZERO_CATALOG", "SUBZERO_CACHE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _last_line(stderr: str, code: int) -> str:
    lines = stderr.strip().splitlines() or [f"exit code {code}"]
    return lines[-1]


# ---------------------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------------------


def cli_run(cfg: Config, home: str, env: dict[str, str], catalog: str | None = None
            ) -> dict[str, Any]:
    """One ``subzero run`` in a fresh process: its JSON's figures and its wall time."""
    cmd = [sys.executable, "-m", "subzero.cli", "run", WORKFLOW, "--home", home,
           "--strategy", STRATEGY, "--json"]
    for k, v in cfg.params().items():
        cmd += ["--param", f"{k}={v}"]
    if catalog:
        cmd += ["--catalog", catalog]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=_child_env(env),
                       stdin=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise BenchError(f"run on {home} failed (exit {p.returncode}): "
                         f"{_last_line(p.stderr, p.returncode)}")
    doc = json.loads(p.stdout)
    return {"run": doc["run"], "runtime_s": float(doc["runtime_s"]), "wall_s": wall,
            "input_bytes": int(doc["input_bytes"]), "lineage_bytes": int(doc["lineage_bytes"]),
            "where": (doc.get("placement") or {}).get("where", "spark")}


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a home's runs (request counts too), each run under ``times``."""
    out: dict[str, Any] = {k: statistics.median(r[k] for r in runs)
                           for k in ("runtime_s", "wall_s")}
    out.update(input_bytes=runs[-1]["input_bytes"], lineage_bytes=runs[-1]["lineage_bytes"],
               where=sorted({r["where"] for r in runs}))
    wire = [r["wire"] for r in runs if "wire" in r]
    if wire:
        out["wire"] = {
            "requests": statistics.median(w["requests"] for w in wire),
            "by_kind": {k: statistics.median(w["by_kind"].get(k, 0) for w in wire)
                        for k in wire[0]["by_kind"]},
            **{group: {k: statistics.median(w[group].get(k, 0) for w in wire)
                       for k in sorted({o for w in wire for o in w[group]})}
               for group in ("by_operation", "errors_by_operation")},
            **{k: statistics.median(w[k] for w in wire)
               for k in ("bytes_up", "bytes_down", "errors", "critical_path",
                         "max_in_flight", "request_s")}}
    out["times"] = runs
    return out


# ---------------------------------------------------------------------------------------
# queries: one fresh process per query
# ---------------------------------------------------------------------------------------


def query_child(spec: dict[str, Any]) -> dict[str, Any]:
    """What ``--query-child`` prints: one named query in this fresh process, with the
    proxy's marks around each phase (None for a local home)."""
    endpoint = spec.get("proxy")

    def mark() -> int | None:
        return proxy_mark(endpoint) if endpoint else None

    t0 = time.perf_counter()
    import subzero  # noqa: F401 - one OpenBLAS thread, as in the runs
    from subzero.api import Home

    start_s = time.perf_counter() - t0
    marks = [mark()]
    t1 = time.perf_counter()
    run = Home(spec["home"]).get(spec["run"])
    run.query_executor(log=False)  # the benchmark's queries stay out of the workload log
    open_s = time.perf_counter() - t1
    marks.append(mark())
    t1 = time.perf_counter()
    cells = run.named_query_cells(spec["query"])
    cells_s = time.perf_counter() - t1
    marks.append(mark())
    t1 = time.perf_counter()
    res = run.named_query(spec["query"], cells=cells)
    cold = time.perf_counter() - t1
    marks.append(mark())
    times = []
    for _ in range(spec["repeat"]):
        t1 = time.perf_counter()
        run.named_query(spec["query"], cells=cells)
        times.append(time.perf_counter() - t1)
    marks.append(mark())
    run.query_executor().close()
    return {"start_s": start_s, "open_s": open_s, "cells_s": cells_s,
            "cold_s": cold, "warm_s": statistics.median(times) if times else None,
            "warm_times": times, "count": int(res.count),
            "methods": [f"{s.operator}:{s.method}" for s in res.steps], "marks": marks}


def query_process(home: str, rid: str, query: str, repeat: int, env: dict[str, str],
                  remote: Remote | None) -> dict[str, Any]:
    """One query in a fresh process; its phases' requests from the proxy's marks."""
    spec = {"home": home, "run": rid, "query": query, "repeat": repeat,
            "proxy": remote.proxy.endpoint if remote else None}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--query-child", json.dumps(spec)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=_child_env(env),
                       stdin=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise BenchError(f"query {query} on {home} failed (exit {p.returncode}): "
                         f"{_last_line(p.stderr, p.returncode)}")
    got = json.loads(p.stdout.strip().splitlines()[-1])
    marks = got.pop("marks")
    got["wall_s"] = wall
    if remote is not None:
        phases = ("open", "cells", "cold", "warm")
        got["wire"] = {ph: summarize(remote.proxy.since(marks[i], marks[i + 1]))
                       for i, ph in enumerate(phases)}
    return got


# ---------------------------------------------------------------------------------------
# what a real store would add
# ---------------------------------------------------------------------------------------


def added_s(wire: dict[str, Any], latency_s: float, bandwidth: float) -> float:
    """``critical_path x latency + bytes / bandwidth`` (bytes both ways, one stream)."""
    return (wire["critical_path"] * latency_s
            + (wire["bytes_up"] + wire["bytes_down"]) / bandwidth)


def latency_models(rows: list[dict[str, Any]], latencies_ms: Sequence[float],
                   bandwidth_mbs: float) -> list[dict[str, Any]]:
    """For each per-request latency: the time each S3 run (median wire figures) and each
    cold query (the ``first`` process: opening the run, then the query) would add."""
    out = []
    bw = bandwidth_mbs * 1e6
    for ms in latencies_ms:
        lat = ms / 1e3
        model: dict[str, Any] = {"latency_ms": ms, "bandwidth_mbs": bandwidth_mbs,
                                 "runs": [], "queries": []}
        for row in rows:
            wire = row["runs"]["s3"].get("wire")
            if wire:
                model["runs"].append({"scale": row["name"], "requests": wire["requests"],
                                      "critical_path": wire["critical_path"],
                                      "bytes": wire["bytes_up"] + wire["bytes_down"],
                                      "added_s": added_s(wire, lat, bw),
                                      "measured_runtime_s": row["runs"]["s3"]["runtime_s"]})
            for q in row["queries"]:
                first = (q.get("s3") or {}).get("first")
                if not first or "wire" not in first:
                    continue
                cold, opened = first["wire"]["cold"], first["wire"]["open"]
                model["queries"].append({
                    "scale": row["name"], "query": q["query"],
                    "requests": cold["requests"], "critical_path": cold["critical_path"],
                    "bytes": cold["bytes_up"] + cold["bytes_down"],
                    "added_s": added_s(cold, lat, bw),
                    "open_requests": opened["requests"],
                    "open_added_s": added_s(opened, lat, bw),
                    "measured_cold_s": first["cold_s"]})
        out.append(model)
    return out


# ---------------------------------------------------------------------------------------
# one configuration
# ---------------------------------------------------------------------------------------


def measure(cfg: Config, remote: Remote, tmp: Path, repeat: int, query_repeat: int,
            log: Callable[[str], None]) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {h: [] for h in HOMES}
    kept: dict[str, tuple[str, str, dict[str, str]]] = {}  # home -> (path/url, run, env)
    made: list[tuple[str, str]] = []  # (kind, path or url) to clean
    try:
        for rep in range(repeat):
            for which in (HOMES if rep % 2 == 0 else HOMES[::-1]):
                if which == "local":
                    home = str(tmp / f"{cfg.name}-local-{rep}")
                    env = {"SUBZERO_CACHE": str(tmp / f"{cfg.name}-local-cache-{rep}")}
                    r = cli_run(cfg, home, env)
                else:
                    home, catalog = remote.new_home(f"{cfg.name}-{rep}")
                    env = remote.env(tmp / f"{cfg.name}-s3-cache-{rep}")
                    mark = remote.proxy.count()
                    r = cli_run(cfg, home, env, catalog)
                    r["wire"] = summarize(remote.proxy.since(mark))
                made.append((which, home))
                runs[which].append(r)
                wire = r.get("wire")
                log(f"{cfg.name} {which} #{rep}: runtime {r['runtime_s']:.2f} s, wall "
                    f"{r['wall_s']:.2f} s ({r['where']})" + (
                        f", {wire['requests']} requests, {wire['bytes_up']:,} B up, "
                        f"{wire['bytes_down']:,} B down" if wire else ""))
                if which not in kept:
                    kept[which] = (home, r["run"], env)
                elif which == "s3":
                    remote.drop(home)  # moto holds objects in memory
        queries = []
        for q in QUERIES:
            row: dict[str, Any] = {"query": q}
            for which in HOMES:
                home, rid, _ = kept[which]
                per: dict[str, Any] = {}
                first_cache = tmp / f"{cfg.name}-{which}-{q}-cache-first"
                for proc in PROCESSES:
                    cache = first_cache if proc in ("first", "warm_cache") else \
                        tmp / f"{cfg.name}-{which}-{q}-cache-{proc}"
                    env = remote.env(cache) if which == "s3" else {"SUBZERO_CACHE": str(cache)}
                    try:
                        per[proc] = query_process(home, rid, q, query_repeat, env,
                                                  remote if which == "s3" else None)
                    except BenchError as e:
                        per[proc] = {"error": str(e)}
                        log(f"{cfg.name} {which} {q} {proc}: {e}")
                        continue
                    got = per[proc]
                    wire = (got.get("wire") or {}).get("cold")
                    log(f"{cfg.name} {which} {q} {proc}: cold {got['cold_s'] * 1e3:.1f} ms, "
                        f"warm {got['warm_s'] * 1e3:.2f} ms" + (
                            f", {wire['requests']} requests, {wire['bytes_down']:,} B down"
                            if wire else ""))
                row[which] = per
            queries.append(row)
    finally:
        for which, home in made:
            if which == "s3":
                remote.drop(home)
            else:
                shutil.rmtree(home, ignore_errors=True)
    return {"name": cfg.name, "factor": cfg.factor, "shape": list(cfg.shape),
            "cells": cfg.shape[0] * cfg.shape[1], "repeat": repeat,
            "runs": {h: summarize_runs(runs[h]) for h in HOMES},
            "s3_over_local_runtime": (statistics.median(r["runtime_s"] for r in runs["s3"])
                                      / statistics.median(r["runtime_s"] for r in runs["local"])),
            "queries": queries}


# ---------------------------------------------------------------------------------------
# flat tables for the performance page
# ---------------------------------------------------------------------------------------


def run_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per configuration and home: the run's medians and its S3 requests."""
    out = []
    for row in rows:
        for which in HOMES:
            r = row["runs"][which]
            w = r.get("wire") or {}
            kinds = w.get("by_kind") or {}
            out.append({"scale": row["name"], "home": which, "runtime_s": r["runtime_s"],
                        "wall_s": r["wall_s"], "requests": w.get("requests"),
                        "PUT": kinds.get("PUT"), "GET": kinds.get("GET"),
                        "LIST": kinds.get("LIST"), "bytes_up": w.get("bytes_up"),
                        "bytes_down": w.get("bytes_down")})
    return out


def query_table(rows: list[dict[str, Any]], model: dict[str, Any] | None
                ) -> list[dict[str, Any]]:
    """One record per configuration, home and query: cold and warm latency of the first
    process, the second's cold latency, and for S3 the cold query's requests, bytes and
    the time the first latency model adds."""
    added = {(m["scale"], m["query"]): m["added_s"] for m in (model or {}).get("queries", [])}
    out = []
    for row in rows:
        for q in row["queries"]:
            for which in HOMES:
                per = q.get(which) or {}
                first, second = per.get("first") or {}, per.get("second") or {}
                cold = (first.get("wire") or {}).get("cold") or {}
                out.append({"scale": row["name"], "query": q["query"], "home": which,
                            "cold_ms": _ms(first.get("cold_s")),
                            "warm_ms": _ms(first.get("warm_s")),
                            "second_cold_ms": _ms(second.get("cold_s")),
                            "requests": cold.get("requests"),
                            "bytes_down": cold.get("bytes_down"),
                            "added_ms": _ms(added.get((row["name"], q["query"])))
                            if which == "s3" else None})
    return out


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3


# ---------------------------------------------------------------------------------------


def _floats(text: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        vals = []
    if not vals or min(vals) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive numbers such as 30,100; got "
                                         f"{text!r} instead.")
    return vals


def _shape(text: str) -> tuple[int, int]:
    try:
        r, c = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shape RxC; got {text!r} instead.") \
            from None
    return r, c


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--scales", type=parse_scales,
                   help="cell factors, perfect squares (default 1,16; --quick 1)")
    p.add_argument("--base", type=_shape, help="the 1x exposure shape RxC (default 2001x513; "
                   "--quick 250x64)")
    p.add_argument("--repeat", type=positive_int,
                   help="runs per home and configuration (default 3; --quick 1)")
    p.add_argument("--query-repeat", type=positive_int,
                   help="warm calls per query process (default 10; --quick 3)")
    p.add_argument("--latency-ms", type=_floats, default=list(LATENCIES_MS),
                   help="per-request latencies of the models, ms (default 30,100)")
    p.add_argument("--bandwidth-mbs", type=float, default=BANDWIDTH_MBS,
                   help="bandwidth of one stream in the models, MB/s (default 90)")
    p.add_argument("--query-child", help=argparse.SUPPRESS)  # query_process's
    args = p.parse_args(argv)
    if args.query_child:
        print(json.dumps(query_child(json.loads(args.query_child))))
        return
    quick = args.quick
    repeat = args.repeat or (1 if quick else 3)
    query_repeat = args.query_repeat or (3 if quick else 10)
    base = args.base or (QUICK_BASE if quick else BASE)
    configs = [Config(f, base) for f in (args.scales or ([1] if quick else [1, 16]))]
    out = args.out or (None if quick else str(RESULTS / "remote.json"))

    def log(msg: str) -> None:
        print(f"[remote] {msg}", file=sys.stderr, flush=True)

    given = list(sys.argv[1:] if argv is None else argv)
    command = " ".join(["python benchmarks/bench_remote.py", *given])
    t_start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="sz-bench-remote-"))
    remote = start_remote(tmp)
    rows, skipped = [], []
    try:
        for cfg in configs:
            try:
                rows.append(measure(cfg, remote, tmp, repeat, query_repeat, log))
            except BenchError as e:
                log(f"{cfg.name}: skipped: {e}")
                skipped.append({"name": cfg.name, "reason": str(e)})
    finally:
        stop_remote(remote)
        shutil.rmtree(tmp, ignore_errors=True)
    models = latency_models(rows, args.latency_ms, args.bandwidth_mbs)
    doc = {
        "benchmark": "remote", "command": command, "workflow": WORKFLOW,
        "strategy": STRATEGY, "quick": quick, "base": list(base), "repeat": repeat,
        "query_repeat": query_repeat,
        "homes": {"local": "a home folder, SQLite catalog",
                  "s3": "moto's S3 server behind the counting proxy, PostgreSQL catalog, "
                        "both on 127.0.0.1; an empty $SUBZERO_CACHE per process"},
        "model": {
            "added_s": "critical_path x latency + (bytes up + bytes down) / bandwidth",
            "critical_path": "the longest chain of requests each starting after the one "
                             "before it ended (from the proxy's start and end times); a cold "
                             "query fetches its shards one after another, so its chain is "
                             "every request",
            "runs": "bytes as one stream and no overlap with computing: an estimate",
            "latency_source": "AWS whitepaper 'Optimizing Amazon S3 performance': median "
                              "latencies in the tens of milliseconds for small requests; "
                              "100 ms as often quoted for S3's first-byte latency",
            "bandwidth_mbs": args.bandwidth_mbs},
        "run_summary": run_table(rows),
        "query_summary": query_table(rows, models[0] if models else None),
        "configurations": rows, "latency_models": models, "skipped": skipped,
        "total_s": time.perf_counter() - t_start}
    emit(doc, out)


if __name__ == "__main__":
    main()
