"""``subzero serve``: the web explorer on one home (see :mod:`subzero.serve`)."""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import socket
import sys
from typing import Any

from subzero.cli.common import CliError, add_changed_code_flag
from subzero import serve
from subzero.engine import layout
from subzero.serve import QUERY_TIMEOUT_S, QUERY_WORKERS

LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: what a token may hold: it travels as is in the printed URL, a header and a cookie
TOKEN = re.compile(r"[A-Za-z0-9._~-]+")
#: how long a stopping server lets the requests under way finish before it cuts them (a
#: query may otherwise run to its time limit)
GRACE_S = 5


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a port in use is one clear line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise CliError(f"--host {host!r}: not an address this machine can bind") from None
    family, kind, proto, _, addr = infos[0]
    # with its protocol named (IPPROTO_TCP), so that asyncio sets TCP_NODELAY on each
    # connection: without it a kept-alive connection waits on Nagle's algorithm for every
    # answer
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise CliError(f"port {port} on {host} is already in use; choose another with "
                           "--port N (or --port 0 for any free port)") from None
        raise CliError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(128)
    return sock


def cmd_serve(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port {args.port}: expected a port number 0..65535")
    token = args.token or os.environ.get("SUBZERO_TOKEN") or None
    if token is not None and not TOKEN.fullmatch(token):
        where = "--token" if args.token else "$SUBZERO_TOKEN"
        raise CliError(f"{where}: a token may hold only letters, digits and . _ ~ - (it "
                       "travels unencoded in the URL, a header and a cookie); choose another")
    if not (math.isfinite(args.query_timeout) and args.query_timeout > 0):
        raise CliError(f"--query-timeout {args.query_timeout:g}: expected a number of seconds "
                       "> 0")
    if args.query_workers < 1:
        raise CliError(f"--query-workers {args.query_workers}: expected a whole number >= 1")
    loopback = args.host in LOOPBACK
    if not loopback and not token:
        raise CliError(f"--host {args.host}: serving beyond this machine needs a token "
                       "(--token TOKEN or $SUBZERO_TOKEN), which every request must carry")
    app = serve.create_app(args.home, token=token, loopback=loopback,
                           allow_changed_code=args.allow_changed_code,
                           query_timeout=args.query_timeout, query_workers=args.query_workers)
    sock = bind(args.host, args.port)
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    home = layout.resolve_home(args.home)
    print(f"subzero: serving {home} at {url} (Ctrl-C stops)", file=sys.stderr, flush=True)
    _run(app, sock)
    return 0


def _run(app: Any, sock: socket.socket) -> None:
    import uvicorn  # the ASGI server only for `subzero serve`

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=GRACE_S)
    uvicorn.Server(config).run(sockets=[sock])


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("serve", parents=[common],
                       help="the web explorer: click a pixel, see its lineage")
    s.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; another needs --token)")
    s.add_argument("--token", default=None,
                   help="a secret every request must carry (default $SUBZERO_TOKEN)")
    s.add_argument("--query-timeout", type=float, default=QUERY_TIMEOUT_S, metavar="SECONDS",
                   help=f"each query's time limit, its wait for a worker included (default "
                        f"{QUERY_TIMEOUT_S:g}); a query past it is answered 503, naming the "
                        "step it reached, and stops")
    s.add_argument("--query-workers", type=int, default=QUERY_WORKERS, metavar="N",
                   help=f"queries run at once (default {QUERY_WORKERS}); more wait their turn "
                        "(tiles and listings have threads of their own)")
    add_changed_code_flag(s)
    s.set_defaults(func=cmd_serve)
