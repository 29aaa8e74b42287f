"""The web explorer's ASGI app (Starlette): a JSON API over one home and the page that uses it.

Routes (every answer JSON unless said otherwise; errors are ``{"error": "one line"}`` with a
4xx status, or 503 for a query cut at its time limit):

``GET /api/runs``                                  the home's runs (when each started,
                                                   its inputs and where they came from,
                                                   the run a replay derives from)
``GET /api/runs/{run}``                            operators (strategies, lineage bytes,
                                                   runtimes, descriptions), arrays (each
                                                   with its celestial WCS or null), named
                                                   queries
``GET /api/runs/{run}/arrays/{name}/tiles/{z}/{y}/{x}.png``
                                                   a 256-pixel tile at zoom ``z`` (PNG)
``GET|POST /api/runs/{run}/query``                 a lineage query (fields as query string
                                                   or a JSON body: direction, from, cells,
                                                   box or region (ds9 text), to or path,
                                                   method)
``GET /api/runs/{run}/paths``                      the paths between two arrays, one by one
                                                   (direction, from, to), to choose one
``GET /api/runs/{run}/named/{name}``               a named query
``GET /api/runs/{run}/query.{npy,fits,reg}``, ``/api/runs/{run}/named/{name}.{npy,fits,reg}``
                                                   the result mask to download (``reg``: a
                                                   ds9 region file)
``GET /api/runs/{run}/diff/{array}``               a replay's array against its parent
                                                   run's: the cells that changed
``GET /api/status``                                the queries under way and how the last
                                                   ones ended
``GET /``                                          the page (static files, no build step)

Two pools of worker threads touch the home: one answers tiles and listings, the other,
bounded (``query_workers``; more queries wait their turn), answers queries (``/query``,
``/named``, their downloads and ``/diff``), so a slow query never holds up a tile. Each
worker thread has its own :class:`Explorer` (a SQLite connection serves the thread that
made it); the event loop only parses, watches and answers.

Every query has a time limit (``query_timeout``, its wait for a worker included). Past it
the answer is 503 ``{"error": ..., "cut": "time limit", "reached": {...}, "steps": [...]}``
naming the step it was at, and the query stops before its next step; a query whose client
disconnects stops there too. (The executor walks a path one operator at a time: a step
under way runs to its end.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import itertools
import json
import math
import queue
import re
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Sequence

import numpy as np
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from subzero.errors import SubZeroError
from subzero.jsonio import json_default
from subzero.query.results import Step
from subzero.serve import QUERY_TIMEOUT_S, QUERY_WORKERS
from subzero.serve.explorer import Explorer, NotFound, TooLarge

STATIC = Path(__file__).with_name("static")
#: the largest request body the API reads (a query's cells)
MAX_BODY = 16 << 20
#: how deep a request body's JSON may nest (a query's fields need three levels)
MAX_DEPTH = 64
#: the threads answering tiles and listings
LIGHT_WORKERS = 2
#: how many finished queries /api/status describes
RECENT = 32
#: how long a stopping server waits for a query worker to finish the step it is in
CLOSE_WAIT_S = 10.0
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]
TOKEN_COOKIE = "subzero_token"

#: why a query was cut (:attr:`Ticket.reason`)
TIME_LIMIT, CLIENT_GONE, STOPPING = "time limit", "client gone", "server stopping"


def _render(content: Any) -> bytes:
    return json.dumps(content, default=json_default, separators=(",", ":")).encode()


class _JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return _render(content)


class Unsupported(SubZeroError):
    """A request body of a type other than JSON (HTTP 415)."""


class QueryCut(SubZeroError):
    """A query stopped before its end: past its time limit, its client gone, or the
    server stopping (:class:`Ticket`)."""


def _error(status: int, message: str) -> JSONResponse:
    return _JSON({"error": message}, status_code=status)


class Workers:
    """``n`` threads, each with its own :class:`Explorer`, taking calls in order of arrival.

    Parameters
    ----------
    name : the threads' name prefix.
    n : how many threads.
    make : makes one thread's explorer (called on that thread).

    Raises
    ------
    SubZeroError
        What making an explorer raised (no home at the path, a catalog it cannot open).

    Examples
    --------
    >>> pool = Workers("explorer", 2, lambda: Explorer(home))  # doctest: +SKIP
    >>> pool.submit(lambda ex: ex.runs()).result()             # doctest: +SKIP
    """

    def __init__(self, name: str, n: int, make: Callable[[], Explorer]) -> None:
        self.n = n
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        ready: list[Future] = []
        for k in range(n):
            made: Future = Future()
            t = threading.Thread(target=self._serve, args=(make, made), name=f"{name}-{k}",
                                 daemon=True)
            t.start()
            self._threads.append(t)
            ready.append(made)
        errors = [e for e in (f.exception() for f in ready) if e is not None]
        if errors:
            self.close()
            raise errors[0]

    def _serve(self, make: Callable[[], Explorer], made: Future) -> None:
        try:
            ex = make()
        except BaseException as e:  # noqa: BLE001 - raised on the thread that waits for it
            made.set_exception(e)
            return
        made.set_result(None)
        try:
            while (item := self._todo.get()) is not None:
                fut, fn = item
                if not fut.set_running_or_notify_cancel():
                    continue  # called off while it waited
                try:
                    fut.set_result(fn(ex))
                except BaseException as e:  # noqa: BLE001 - the caller gets it
                    fut.set_exception(e)
        finally:
            ex.close()

    def submit(self, fn: Callable[[Explorer], Any]) -> Future:
        """``fn(explorer)`` on the first free thread: its future."""
        fut: Future = Future()
        self._todo.put((fut, fn))
        return fut

    def close(self, wait_s: float | None = None) -> None:
        """Stop each thread once it is done with what it was given (closing its explorer
        there), waiting at most ``wait_s`` seconds for them all (None: as long as it
        takes). A thread still busy then is left to end with the process (a daemon)."""
        for _ in self._threads:
            self._todo.put(None)
        end = None if wait_s is None else time.monotonic() + wait_s
        for t in self._threads:
            t.join(None if end is None else max(0.0, end - time.monotonic()))


class Ticket:
    """One query on its way: its time limit, why it was called off (if it was), and the step
    it reached. A worker calls it before each step of the query's walk (the explorer's
    ``check``); it raises :class:`QueryCut` once the query is called off or past its limit.

    Parameters
    ----------
    number : the query's number in this server (for /api/status).
    limit_s : the query's time limit in seconds, from now.
    """

    def __init__(self, number: int, limit_s: float) -> None:
        self.number, self.limit_s = number, limit_s
        self.arrived = time.monotonic()
        self.deadline = self.arrived + limit_s
        self.started: float | None = None   # when a worker took it
        self.reason: str | None = None      # why it was called off
        # (target, (operator, input), steps done): set in one assignment, read on the loop
        self.progress: tuple[str | None, tuple[str, int], Sequence[Step]] | None = None

    def __call__(self, target: str | None, operator: str, i: int, done: Sequence[Step]
                 ) -> None:
        self.progress = (target, (operator, i), done)
        self.check()

    def check(self) -> None:
        """Raise :class:`QueryCut` if the query was called off or is past its limit."""
        if self.reason is None and time.monotonic() >= self.deadline:
            self.reason = TIME_LIMIT
        if self.reason is not None:
            raise QueryCut(self.message())

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args, check=self)`` on a worker, unless called off while it waited."""
        self.check()
        self.started = time.monotonic()
        return fn(*args, check=self)

    def cancel(self, reason: str) -> None:
        """Call the query off: it stops before its next step."""
        if self.reason is None:
            self.reason = reason

    def reached(self) -> dict[str, Any] | None:
        """The step the query was at (None before its first)."""
        if self.progress is None:
            return None
        target, (op, i), done = self.progress
        return {"step": len(done) + 1, "operator": op, "input": i, "target": target}

    def message(self) -> str:
        """One line: why and where the query stopped."""
        why = {TIME_LIMIT: f"at its time limit of {self.limit_s:g} s (subzero serve "
                           "--query-timeout)",
               CLIENT_GONE: "because its client disconnected",
               STOPPING: "because the server is stopping"}.get(self.reason or "", "")
        at = self.reached()
        if self.started is None:
            where = ("it waited all that time for a query worker (every one was busy with "
                     "other queries)" if self.reason == TIME_LIMIT else "before it started")
        elif at is None:
            where = "before its first step"
        else:
            toward = f" toward {at['target']!r}" if at["target"] else ""
            where = (f"it had done {at['step'] - 1} step(s) and was at step {at['step']} "
                     f"(operator {at['operator']!r}, input {at['input']}){toward}")
        return f"query cut {why}: {where}"

    def describe(self) -> dict[str, Any]:
        """The query for /api/status: waiting for a worker or running, since when, the step
        it reached and whether it was called off."""
        done = self.progress[2] if self.progress else ()
        return {"id": self.number, "state": "waiting" if self.started is None else "running",
                "for_s": time.monotonic() - self.arrived, "reached": self.reached(),
                "steps_done": len(done), "cut": self.reason}


class Service:
    """The two pools of explorers (see the module docstring) and the handlers that call them.

    Parameters
    ----------
    home : the home (as :class:`Explorer` takes it).
    allow_changed_code : run operators whose code changed since their run.
    query_timeout : each query's time limit in seconds (waiting included).
    query_workers : how many queries run at once.
    """

    def __init__(self, home: Any, allow_changed_code: bool = False,
                 query_timeout: float = QUERY_TIMEOUT_S, query_workers: int = QUERY_WORKERS
                 ) -> None:
        if not (isinstance(query_timeout, (int, float)) and math.isfinite(query_timeout)
                and query_timeout > 0):
            raise SubZeroError(f"query timeout {query_timeout!r}: expected a number of "
                               "seconds > 0")
        if not (isinstance(query_workers, int) and query_workers >= 1):
            raise SubZeroError(f"query workers {query_workers!r}: expected a whole number >= 1")
        self.query_timeout = float(query_timeout)
        make = functools.partial(Explorer, home, allow_changed_code)
        self.light = Workers("subzero-explorer", LIGHT_WORKERS, make)
        try:
            self.queries = Workers("subzero-query", query_workers, make)
        except BaseException:
            self.light.close()
            raise
        self._lock = threading.Lock()  # the tickets and counts: the loop and workers share
        self._numbers = itertools.count(1)
        self._tickets: dict[int, Ticket] = {}  # given to a worker, not finished
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self._counts = {"answered": 0, "refused": 0, "cut": 0, "cancelled": 0, "failed": 0}

    def close(self) -> None:
        """Call off the queries under way (each stops before its next step) and stop the
        workers: a query worker still in a step after :data:`CLOSE_WAIT_S` is left behind
        (a step re-executing a large operator may take long)."""
        with self._lock:
            for t in self._tickets.values():
                t.cancel(STOPPING)
        self.queries.close(CLOSE_WAIT_S)
        self.light.close()

    async def call(self, fn: Callable[[Explorer], Any]) -> Any:
        """``fn(explorer)`` on the tiles and listings pool."""
        return await asyncio.wrap_future(self.light.submit(fn))

    async def result(self, fn: Callable[[Explorer], Any]) -> tuple[Any, Response | None]:
        """``fn(explorer)`` on the tiles and listings pool: its value, or the error response
        for a bad request (unknown: 404, too large: 413, any other bad value: 400)."""
        try:
            return await self.call(fn), None
        except SubZeroError as e:
            return None, _refusal(e)

    async def answer(self, fn: Callable[[Explorer], Any]) -> Response:
        out, err = await self.result(fn)
        return err or _JSON(out)

    # -- queries ---------------------------------------------------------------------------
    async def query_result(self, request: Request, name: str, *args: Any,
                           then: Callable[[Any], Any] = lambda v: v
                           ) -> tuple[Any, Response | None]:
        """Explorer method ``name`` (a query) with ``args`` on the query pool, within its
        time limit and while its client stays: ``then`` of its value (``then`` runs on the
        worker too), or the error response (as :meth:`result`; 503 when cut at its time
        limit)."""
        with self._lock:
            ticket = Ticket(next(self._numbers), self.query_timeout)
            self._tickets[ticket.number] = ticket
        fut = self.queries.submit(lambda ex: then(ticket.run(getattr(ex, name), *args)))
        fut.add_done_callback(functools.partial(self._finished, ticket))
        waiter = asyncio.wrap_future(fut)
        waiter.add_done_callback(_retrieved)
        gone = asyncio.ensure_future(_disconnect(request))
        reason = STOPPING  # unless the wait below ends otherwise
        try:
            done, _ = await asyncio.wait({waiter, gone}, return_when=asyncio.FIRST_COMPLETED,
                                         timeout=max(0.0, ticket.deadline - time.monotonic()))
            reason = CLIENT_GONE if gone in done else TIME_LIMIT
        finally:
            gone.cancel()
            if not waiter.done():
                ticket.cancel(reason)
                fut.cancel()  # taken back if it still waits for a worker
        if waiter.done() and not waiter.cancelled():
            try:
                return waiter.result(), None
            except QueryCut:
                pass
            except SubZeroError as e:
                return None, _refusal(e)
        if ticket.reason == CLIENT_GONE:
            return None, Response(status_code=499)  # nobody reads it
        return None, self._cut(ticket)

    async def query(self, request: Request, name: str, *args: Any) -> Response:
        """A query's JSON answer (rendered on the worker: a large answer takes a while)."""
        body, err = await self.query_result(request, name, *args, then=_render)
        return err or Response(body, media_type="application/json")

    @staticmethod
    def _cut(ticket: Ticket) -> Response:
        done = ticket.progress[2] if ticket.progress else ()
        return _JSON({"error": ticket.message(), "cut": ticket.reason,
                      "limit_s": ticket.limit_s, "elapsed_s": time.monotonic() - ticket.arrived,
                      "reached": ticket.reached(), "steps": [s.to_json() for s in done]},
                     status_code=503)

    def _finished(self, ticket: Ticket, fut: Future) -> None:
        """A query's worker is done with it (or it was taken back before it started)."""
        if fut.cancelled():
            outcome = "cancelled" if ticket.reason != TIME_LIMIT else "cut"
        elif fut.exception() is None:
            outcome = "answered"
        elif isinstance(fut.exception(), QueryCut):
            outcome = "cut" if ticket.reason == TIME_LIMIT else "cancelled"
        elif isinstance(fut.exception(), SubZeroError):
            outcome = "refused"
        else:
            outcome = "failed"
        stopped = outcome in ("cut", "cancelled")
        doc = {"id": ticket.number, "outcome": outcome,
               "took_s": time.monotonic() - ticket.arrived,
               "steps_done": len(ticket.progress[2]) if stopped and ticket.progress else None,
               "stopped_at": ticket.reached() if stopped else None}
        with self._lock:
            self._tickets.pop(ticket.number, None)
            self._counts[outcome] += 1
            self._recent.append(doc)

    def status(self) -> dict[str, Any]:
        """What /api/status answers: the queries under way (running or waiting for a
        worker), the last ones finished (newest last) and how many ended each way."""
        with self._lock:
            tickets = sorted(self._tickets.values(), key=lambda t: t.number)
            recent, counts = list(self._recent), dict(self._counts)
        return {"query_workers": self.queries.n, "query_timeout_s": self.query_timeout,
                "queries": [t.describe() for t in tickets], "recent": recent, **counts}


def _refusal(e: SubZeroError) -> Response:
    """The error response for a bad request: unknown 404, too large 413, else 400."""
    if isinstance(e, NotFound):
        return _error(404, _line(e))
    if isinstance(e, TooLarge):
        return _error(413, _line(e))
    return _error(400, _line(e))


def _retrieved(fut: asyncio.Future) -> None:
    """Take a finished future's exception (a query whose answer nobody waits for any more
    would otherwise be logged as an error never retrieved)."""
    if not fut.cancelled():
        fut.exception()


async def _disconnect(request: Request) -> None:
    """Return once the client disconnects (the request's body is read by then: what the
    server receives next is the disconnection)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:500]


async def _spec(request: Request) -> dict[str, Any]:
    """A query's fields: the query string, merged with a JSON body (POST)."""
    spec: dict[str, Any] = dict(request.query_params)
    spec.pop("token", None)
    if request.method == "POST":
        length = request.headers.get("content-length") or "0"
        if not length.isdigit():
            raise SubZeroError(f"Content-Length {length[:40]!r}: expected a number of bytes")
        size = int(length)
        if size > MAX_BODY:
            raise TooLarge(f"request body of {size:,} bytes; at most {MAX_BODY:,}")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if (size or "transfer-encoding" in request.headers) and kind != "application/json":
            raise Unsupported(f"request body of type {kind[:80] or 'none'!r}: expected "
                              "Content-Type application/json")
        chunks, got = [], 0
        async for chunk in request.stream():  # never more than MAX_BODY, however it is sent
            got += len(chunk)
            if got > MAX_BODY:
                raise TooLarge(f"request body of more than {MAX_BODY:,} bytes; at most "
                               f"{MAX_BODY:,}")
            chunks.append(chunk)
        body = b"".join(chunks)
        if body:
            # (a body with few brackets cannot nest deep: only larger ones are scanned)
            opens = body.count(b"[") + body.count(b"{")
            depth = json_depth(body) if opens > MAX_DEPTH else 0
            if depth > MAX_DEPTH:
                raise SubZeroError(f"request body nests {depth:,} levels deep; expected a JSON "
                                   f"object of query fields, at most {MAX_DEPTH} levels deep")
            try:
                doc = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise SubZeroError(f"request body is not JSON ({e})") from None
            if not isinstance(doc, dict):
                raise SubZeroError("request body: expected a JSON object of query fields")
            spec.update(doc)
    return spec


#: bytes :func:`json_depth` looks at at once
_SCAN_BLOCK = 1 << 20
#: an escape in a JSON string: a backslash and the character after it
_ESCAPE = re.compile(rb"\\.", re.DOTALL)


def json_depth(text: bytes) -> int:
    """How deep JSON ``text`` nests arrays and objects (brackets inside strings do not
    count), without parsing it: ``json.loads`` recurses once per level, and a body nested
    deep enough exhausts the interpreter's stack. Text that is not JSON gets some number
    (the parser refuses it afterwards).

    >>> json_depth(b'{"cells": [[1, 2]], "to": "a[b"}')
    3
    """
    if b"\\" in text:
        text = _ESCAPE.sub(b"", text)  # an escaped quote is no quote
    depth = deepest = 0
    inside = False  # in a string, where the block starts
    for at in range(0, len(text), _SCAN_BLOCK):
        b = np.frombuffer(text, np.uint8, min(_SCAN_BLOCK, len(text) - at), at)
        c = b[(b == 0x22) | (b == 0x5B) | (b == 0x5D) | (b == 0x7B) | (b == 0x7D)]
        quote = c == 0x22
        odd = (np.cumsum(quote) % 2).astype(bool)  # an odd number of quotes so far
        outside = ~quote & (odd == inside)
        levels = depth + np.cumsum(np.where((c[outside] == 0x5B) | (c[outside] == 0x7B), 1, -1))
        if len(levels):
            deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
        inside ^= bool(odd[-1]) if len(odd) else False
    return deepest


def create_app(home: Any, token: str | None = None, loopback: bool = True,
               allow_changed_code: bool = False, query_timeout: float = QUERY_TIMEOUT_S,
               query_workers: int = QUERY_WORKERS) -> Starlette:
    """The explorer app on ``home``.

    Parameters
    ----------
    home : the home (a folder; None: ``$SUBZERO_HOME`` or ``./subzero-home``).
    token : with it, every request must carry it (header ``Authorization: Bearer TOKEN``,
        ``?token=TOKEN`` or the cookie the page sets).
    loopback : bound to loopback: only loopback host names are answered (no DNS
        rebinding).
    allow_changed_code : run operators whose code changed since their run (the page warns
        of them either way).
    query_timeout : each query's time limit in seconds, its wait for a worker included.
    query_workers : how many queries run at once; more wait their turn.

    Returns
    -------
    Starlette
        The ASGI app; its lifespan's end stops its worker threads.

    Raises
    ------
    SubZeroError
        No home at ``home``, or a bad ``query_timeout`` or ``query_workers``.
    """
    svc = Service(home, allow_changed_code, query_timeout, query_workers)

    async def runs(request: Request) -> Response:
        return await svc.answer(lambda ex: ex.runs())

    async def run_info(request: Request) -> Response:
        rid = request.path_params["run"]
        return await svc.answer(lambda ex: ex.run_info(rid))

    async def status(request: Request) -> Response:
        return _JSON(svc.status())

    async def tile(request: Request) -> Response:
        p = request.path_params
        data, err = await svc.result(
            lambda ex: ex.tile(p["run"], p["name"], p["z"], p["y"], p["x"]))
        # a finished run's arrays never change: the browser may keep its tiles
        return err or Response(data, media_type="image/png",
                               headers={"Cache-Control": "private, max-age=3600"})

    async def values(request: Request) -> Response:
        p = request.path_params
        return await svc.answer(lambda ex: ex.values(p["run"], p["name"], p["y"], p["x"]))

    async def query(request: Request) -> Response:
        try:
            spec = await _spec(request)
        except TooLarge as e:
            return _error(413, _line(e))
        except Unsupported as e:
            return _error(415, _line(e))
        except SubZeroError as e:
            return _error(400, _line(e))
        return await svc.query(request, "query", request.path_params["run"], spec)

    async def query_file(request: Request) -> Response:
        spec = dict(request.query_params)
        return await _file(svc, request, spec)

    async def paths(request: Request) -> Response:
        spec = dict(request.query_params)
        spec.pop("token", None)
        rid = request.path_params["run"]
        return await svc.answer(lambda ex: ex.paths(rid, spec))

    async def diff(request: Request) -> Response:
        p = request.path_params
        return await svc.query(request, "diff", p["run"], p["array"])

    async def named(request: Request) -> Response:
        method = request.query_params.get("method", "auto")
        return await svc.query(request, "named", request.path_params["run"],
                               request.path_params["name"], method)

    async def named_file(request: Request) -> Response:
        spec = {"named": request.path_params["name"],
                "method": request.query_params.get("method", "auto")}
        return await _file(svc, request, spec)

    async def index(request: Request) -> Response:
        resp = FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})
        given = request.query_params.get("token")
        if token and given and hmac.compare_digest(given.encode(), token.encode()):
            resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return resp

    routes = [
        Route("/", index),
        Route("/api/runs", runs),
        Route("/api/status", status),
        Route("/api/runs/{run}", run_info),
        Route("/api/runs/{run}/arrays/{name}/tiles/{z:int}/{y:int}/{x:int}.png", tile),
        Route("/api/runs/{run}/arrays/{name}/values/{y:int}/{x:int}", values),
        Route("/api/runs/{run}/query.{fmt}", query_file),
        Route("/api/runs/{run}/query", query, methods=["GET", "POST"]),
        Route("/api/runs/{run}/paths", paths),
        Route("/api/runs/{run}/diff/{array}", diff),
        Route("/api/runs/{run}/named/{name}.{fmt}", named_file),
        Route("/api/runs/{run}/named/{name}", named),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(_Guard, token=token, loopback=loopback)]
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        svc.close()

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={404: _not_found, 405: _not_allowed, 500: _internal})
    app.state.service = svc
    return app


async def _file(svc: Service, request: Request, spec: dict[str, Any]) -> Response:
    spec.pop("token", None)
    fmt = request.path_params["fmt"]
    out, err = await svc.query_result(request, "result_file", request.path_params["run"],
                                      spec, fmt)
    if err:
        return err
    data, name = out
    media = {"npy": "application/octet-stream", "reg": "text/plain; charset=utf-8"}.get(
        fmt, "application/fits")
    return Response(data, media_type=media,
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(404, f"no such page or API route: {request.url.path[:200]}")


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return _error(405, f"method {request.method} is not allowed on {request.url.path[:200]}")


async def _internal(request: Request, exc: Exception) -> Response:
    return _error(500, f"internal error: {type(exc).__name__}: {_line(exc)}")


class _Guard:
    """Refuse a request for a host name other than loopback's when bound to loopback (no
    DNS rebinding: 400) and, with a token, one that does not carry it (401)."""

    def __init__(self, app: Any, token: str | None, loopback: bool) -> None:
        self.app, self.token, self.loopback = app, token, loopback

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        resp = None
        host = request.url.hostname or ""
        if self.loopback and host not in LOOPBACK_HOSTS:
            resp = _error(400, f"host {host[:100]!r} is not this server's: it answers "
                               "127.0.0.1 and localhost only")
        elif self.token:
            auth = request.headers.get("authorization", "")
            given = (auth[7:] if auth.lower().startswith("bearer ") else None) \
                or request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                resp = _error(401, "this server needs its token: open the URL it printed "
                                   "(.../?token=...) or send 'Authorization: Bearer TOKEN'")
        await (resp or self.app)(scope, receive, send)
