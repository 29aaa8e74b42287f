"""The web explorer's ASGI app (Starlette): a JSON API over one home and the page that uses it.

Routes (every answer JSON unless said otherwise; errors are ``{"error": "one line"}`` with a
4xx status):

``GET /api/runs``                                  the home's runs
``GET /api/runs/{run}``                            operators (strategies, lineage bytes,
                                                   runtimes), arrays, named queries
``GET /api/runs/{run}/arrays/{name}/tiles/{z}/{y}/{x}.png``
                                                   a 256-pixel tile at zoom ``z`` (PNG)
``GET|POST /api/runs/{run}/query``                 a lineage query (fields as query string
                                                   or a JSON body: direction, from, cells or
                                                   box, to or path, method)
``GET /api/runs/{run}/paths``                      the paths between two arrays, one by one
                                                   (direction, from, to), to choose one
``GET /api/runs/{run}/named/{name}``               a named query
``GET /api/runs/{run}/query.{npy,fits}``, ``/api/runs/{run}/named/{name}.{npy,fits}``
                                                   the result mask to download
``GET /``                                          the page (static files, no build step)

Every call touching the home runs on one worker thread (:class:`Explorer` holds a SQLite
connection and warm shard readers); the event loop only parses and answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from subzero.errors import SubZeroError
from subzero.jsonio import json_default
from subzero.serve.explorer import Explorer, NotFound, TooLarge

STATIC = Path(__file__).with_name("static")
#: the largest request body the API reads (a query's cells)
MAX_BODY = 16 << 20
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]
TOKEN_COOKIE = "subzero_token"


class _JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, default=json_default, separators=(",", ":")).encode()


class Unsupported(SubZeroError):
    """A request body of a type other than JSON (HTTP 415)."""


def _error(status: int, message: str) -> JSONResponse:
    return _JSON({"error": message}, status_code=status)


class Service:
    """The explorer on its own thread, and the handlers that call it."""

    def __init__(self, home: Any, allow_changed_code: bool = False) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="subzero-explorer")
        # created on the worker thread: SQLite connections stay on the thread that made them
        self.explorer: Explorer = self.pool.submit(Explorer, home, allow_changed_code).result()

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.wrap_future(self.pool.submit(fn, *args))

    def close(self) -> None:
        self.pool.submit(self.explorer.close).result()
        self.pool.shutdown()

    async def result(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, Response | None]:
        """``fn(*args)`` on the worker thread: its value, or the error response for a bad
        request (unknown: 404, too large: 413, any other bad value: 400)."""
        try:
            return await self.call(fn, *args), None
        except NotFound as e:
            return None, _error(404, _line(e))
        except TooLarge as e:
            return None, _error(413, _line(e))
        except SubZeroError as e:
            return None, _error(400, _line(e))

    async def answer(self, fn: Callable[..., Any], *args: Any) -> Response:
        out, err = await self.result(fn, *args)
        return err or _JSON(out)


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
            try:
                doc = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise SubZeroError(f"request body is not JSON ({e})") from None
            if not isinstance(doc, dict):
                raise SubZeroError("request body: expected a JSON object of query fields")
            spec.update(doc)
    return spec


def create_app(home: Any, token: str | None = None, loopback: bool = True,
               allow_changed_code: bool = False) -> Starlette:
    """The explorer app on ``home``. With ``token``, every request must carry it (header
    ``Authorization: Bearer TOKEN``, ``?token=TOKEN`` or the cookie the page sets); bound to
    loopback, only loopback host names are answered (no DNS rebinding).
    ``allow_changed_code``: run operators whose code changed since their run (the page
    warns of them either way)."""
    svc = Service(home, allow_changed_code)
    ex = svc.explorer

    async def runs(request: Request) -> Response:
        return await svc.answer(ex.runs)

    async def run_info(request: Request) -> Response:
        return await svc.answer(ex.run_info, request.path_params["run"])

    async def tile(request: Request) -> Response:
        p = request.path_params
        data, err = await svc.result(ex.tile, p["run"], p["name"], p["z"], p["y"], p["x"])
        # a finished run's arrays never change: the browser may keep its tiles
        return err or Response(data, media_type="image/png",
                               headers={"Cache-Control": "private, max-age=3600"})

    async def query(request: Request) -> Response:
        try:
            spec = await _spec(request)
        except TooLarge as e:
            return _error(413, _line(e))
        except Unsupported as e:
            return _error(415, _line(e))
        except SubZeroError as e:
            return _error(400, _line(e))
        return await svc.answer(ex.query, request.path_params["run"], spec)

    async def query_file(request: Request) -> Response:
        spec = dict(request.query_params)
        return await _file(svc, request.path_params["run"], spec, request.path_params["fmt"])

    async def paths(request: Request) -> Response:
        spec = dict(request.query_params)
        spec.pop("token", None)
        return await svc.answer(ex.paths, request.path_params["run"], spec)

    async def named(request: Request) -> Response:
        method = request.query_params.get("method", "auto")
        return await svc.answer(ex.named, request.path_params["run"],
                                request.path_params["name"], method)

    async def named_file(request: Request) -> Response:
        spec = {"named": request.path_params["name"],
                "method": request.query_params.get("method", "auto")}
        return await _file(svc, request.path_params["run"], spec, request.path_params["fmt"])

    async def index(request: Request) -> Response:
        resp = FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})
        given = request.query_params.get("token")
        if token and given and hmac.compare_digest(given.encode(), token.encode()):
            resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return resp

    routes = [
        Route("/", index),
        Route("/api/runs", runs),
        Route("/api/runs/{run}", run_info),
        Route("/api/runs/{run}/arrays/{name}/tiles/{z:int}/{y:int}/{x:int}.png", tile),
        Route("/api/runs/{run}/query.{fmt}", query_file),
        Route("/api/runs/{run}/query", query, methods=["GET", "POST"]),
        Route("/api/runs/{run}/paths", paths),
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


async def _file(svc: Service, rid: str, spec: dict[str, Any], fmt: str) -> Response:
    spec.pop("token", None)
    out, err = await svc.result(svc.explorer.result_file, rid, spec, fmt)
    if err:
        return err
    data, name = out
    media = "application/octet-stream" if fmt == "npy" else "application/fits"
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
