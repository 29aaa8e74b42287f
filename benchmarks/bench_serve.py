#!/usr/bin/env python
"""The explorer's latency end to end: HTTP queries against a running ``subzero serve``, and
the same questions through one-shot CLI processes.

    python benchmarks/bench_serve.py [--quick] [--out FILE.json] [--home DIR] [--queries 200]
        [--cli-queries N] [--slow-queries 4] [--tile-rounds 4]
    subzero bench serve [--quick] [--out FILE.json]

The run: the astronomy workflow on the real LSST exposures (``../shared/data`` or
``$SUBZERO_DATA``; generated ones when they are not there, and the JSON says so), strategy
``subzero``, in a fresh home (or the newest astronomy run of ``--home``).

HTTP: ``subzero serve --port 0`` on that home, as a subprocess; one client connection kept
alive (as a browser does). ``--queries`` (default 200) queries, in a fixed random order,
mixing: the named queries BQ0-BQ4 and FQ0; one random pixel and one random 10 x 10 box of
``rmcr`` backward to ``exp1``; one random pixel and one random 10 x 10 box of ``exp1``
forward to ``rmcr`` (the targets reach through the calibration chains and the cosmic-ray
steps, which this strategy maps or stores). Each is timed from sending the request to having
the whole answer parsed (client side); ``server_s`` is what the executor itself reported.
Queries whose steps were all mapped or read from stored lineage (no re-execution) are the
``stored_or_mapped`` set, the one the targets are about. Tiles: every tile of ``exp1`` at
zoom 0 and 2, and of ``clust`` at zoom 0, each fetched once (the server keeps no tile
cache: each is read from zarr, stretched and PNG-encoded per request).

Tiles beside slow queries: the same tiles, ``--tile-rounds`` times over (default 4), first
with nothing else to do (``quiet``), then while ``--slow-queries`` clients (default 4, each
on a connection of its own) send one slow query after another (``busy``: at least as many
rounds, and on until as many slow answers as clients came back meanwhile): every cell of
``clust`` but its last rows, ``method=reexec``, back to ``exp1`` (each step re-runs an
operator over the whole image). The server runs queries on a bounded pool of its own
(``subzero serve --query-workers``, default 2), so the others wait their turn; the tiles
are measured once the query workers are busy. Reported: tile median and p95 in both
phases, and the slow queries' answers (status counts, wall times).

CLI: the same workload (its first ``--cli-queries``, default all), each query one
``python -m subzero.cli query ... --json`` process, timed whole (start to exit).

Browser: headless Chromium (Selenium; skipped, and the JSON says why, without it) opens
the page on the run ``--page-loads`` times (default 5; browser cache off, so each load
fetches its tiles) and records ``window.__firstImageMs``, the page's ``performance.now()``
when its first tile is drawn (from the start of navigation); then opens ``clust``, backward
to ``exp1``, and clicks ``--clicks`` star pixels (default 10), recording
``window.__lastAnswerMs``, from the click to the answer's overlay drawn in the right pane.
On the run above and, when that run is the real exposures, on a generated run as well
(``browser`` by data).

Output: JSON printed and written to ``benchmarks/results/serve.json`` (``--out``
elsewhere; ``--quick``: 40 HTTP and 20 CLI queries, one tile round, never over the
committed file), with a ``targets`` block: HTTP median <= 50 ms and p95 <= 150 ms (stored
and mapped queries), a tile of a 2001 x 513 array <= 100 ms (median and p95 of the tiles),
tile p95 <= 100 ms while the slow queries run, CLI wall <= 0.5 s (median of each of
BQ0-BQ4).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import ROOT, emit, parser

import numpy as np

DATA = Path(os.environ.get("SUBZERO_DATA", ROOT.parent / "shared" / "data"))
EXPOSURES = ("imsim_85408556_R23_S11_C04_E000.fits", "imsim_85408556_R23_S11_C04_E001.fits")
NAMED = ("BQ0", "BQ1", "BQ2", "BQ3", "BQ4", "FQ0")
#: the slow query of the tiles-beside-slow-queries phase (see the module docstring)
SLOW = ("/api/runs/{run}/query?direction=backward&from=clust&box=0:1900,0:513&to=exp1"
        "&method=reexec")


def p95(xs: list[float]) -> float:
    return float(np.percentile(xs, 95)) if xs else float("nan")


def summary(xs: list[float]) -> dict:
    return {"n": len(xs), "median_ms": statistics.median(xs) * 1000 if xs else None,
            "p95_ms": p95(xs) * 1000 if xs else None, "max_ms": max(xs) * 1000 if xs else None}


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "subzero.cli", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          cwd=ROOT, timeout=900)


def make_run(home: Path) -> tuple[str, str]:
    """A fresh astronomy run in ``home``: the real exposures when present."""
    args = ["run", "astronomy", "--home", str(home), "--strategy", "subzero", "--json"]
    real = all((DATA / "lsst" / f).exists() for f in EXPOSURES)
    if real:
        args += ["--input", f"exp1={DATA / 'lsst' / EXPOSURES[0]}",
                 "--input", f"exp2={DATA / 'lsst' / EXPOSURES[1]}"]
    p = cli(*args)
    if p.returncode != 0:
        sys.exit(f"bench_serve: the run failed: {p.stderr.strip()}")
    return json.loads(p.stdout)["run"], "real LSST exposures" if real else "generated exposures"


class Client:
    def __init__(self, url: str) -> None:
        host, port = url.split("//")[1].rstrip("/").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=300)

    def get(self, path: str) -> tuple[int, bytes, float]:
        t0 = time.perf_counter()
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        body = r.read()
        return r.status, body, time.perf_counter() - t0


def start_server(home: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "subzero.cli", "serve", "--home", str(home),
                             "--port", "0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stderr.readline()
    if " at http" not in line:
        proc.kill()
        sys.exit(f"bench_serve: subzero serve did not start: {line.strip()}")
    return proc, line.split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")


def tile_paths(rid: str, shape: tuple[int, int]) -> list[str]:
    """Every tile of ``exp1`` at zoom 0 and 2, and of ``clust`` at zoom 0."""
    out = []
    for name, z in (("exp1", 0), ("exp1", 2), ("clust", 0)):
        span = 256 << z
        for ty in range(-(-shape[0] // span)):
            for tx in range(-(-shape[1] // span)):
                out.append(f"/api/runs/{rid}/arrays/{name}/tiles/{z}/{ty}/{tx}.png")
    return out


def fetch_tiles(client: "Client", paths: list[str], rounds: int) -> list[float]:
    walls = []
    for _ in range(rounds):
        for path in paths:
            status, body, wall = client.get(path)
            if status != 200 or body[:4] != b"\x89PNG":
                sys.exit(f"bench_serve: {path} answered {status}: {body[:200]!r}")
            walls.append(wall)
    return walls


def tiles_beside_slow_queries(url: str, rid: str, shape: tuple[int, int], clients: int,
                              rounds: int) -> dict:
    """Tile latencies alone, then while ``clients`` clients send slow queries one after
    another (see the module docstring)."""
    paths = tile_paths(rid, shape)
    tiles = Client(url)
    fetch_tiles(tiles, paths, 1)  # warm: each tile thread's run and contrast
    quiet = fetch_tiles(tiles, paths, rounds)
    stop = threading.Event()
    answers: list[tuple[int, float, dict]] = []

    def ask() -> None:
        c = Client(url)
        while not stop.is_set():
            status, body, wall = c.get(SLOW.format(run=rid))
            answers.append((status, wall, json.loads(body)))

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    probe = Client(url)
    while True:  # measure once the query workers are busy
        doc = json.loads(probe.get("/api/status")[1])
        running = sum(q["state"] == "running" for q in doc["queries"])
        if running >= min(clients, doc["query_workers"]):
            break
        time.sleep(0.05)
    t0 = time.perf_counter()
    before, busy, done = len(answers), [], 0
    # at least ``rounds`` rounds, and on until each client has had about one answer: the
    # tiles meet the queries at every stage (steps, switching, their answers)
    while done < rounds or len(answers) - before < clients:
        busy += fetch_tiles(tiles, paths, 1)
        done += 1
    busy_s = time.perf_counter() - t0
    during = len(answers) - before
    doc = json.loads(Client(url).get("/api/status")[1])  # (the probe's, idle, may be closed)
    stop.set()
    for t in threads:
        t.join()
    bad = [(status, a) for status, _, a in answers if status not in (200, 503)]
    if bad:
        sys.exit(f"bench_serve: a slow query answered {bad[0][0]}: {bad[0][1]}")
    statuses = [status for status, _, _ in answers]
    return {
        "slow_query": SLOW.format(run=rid), "slow_clients": clients,
        "query_workers": doc["query_workers"], "query_timeout_s": doc["query_timeout_s"],
        "tile_rounds": {"quiet": rounds, "busy": done},
        "quiet": summary(quiet), "busy": summary(busy), "busy_phase_s": busy_s,
        "slow_answers": {"n": len(answers), "during_tiles": during,
                         "ok": statuses.count(200), "cut": statuses.count(503),
                         "wall": summary([w for _, w, _ in answers]),
                         "server_s_median": statistics.median(
                             a["elapsed_s"] for s, _, a in answers if s == 200)
                         if 200 in statuses else None},
    }


def in_browser(url: str, home: Path, rid: str, loads: int, clicks: int) -> dict:
    """Page load to the first drawn tile, and click to the drawn answer, in headless
    Chromium (see the module docstring)."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver_bin = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (Path(chromium).exists() and Path(driver_bin).exists()):
        return {"skipped": f"no headless browser ({chromium}, {driver_bin})"}
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By
    except ImportError as e:
        return {"skipped": f"no selenium ({e})"}
    from subzero.api import Home

    clust = np.asarray(Home(home).get(rid).array("clust"))
    stars = np.argwhere(clust > 0)
    rng = random.Random(11)
    cells = [tuple(int(v) for v in stars[rng.randrange(len(stars))]) for _ in range(clicks)]
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1000"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(driver_bin), options=opts)

    def until(script: str, timeout: float = 60.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = d.execute_script(script)
            if got is not None:
                return got
            time.sleep(0.01)
        raise RuntimeError(f"bench_serve: the page did not answer {script!r}")

    first, answers = [], []
    try:
        d.execute_cdp_cmd("Network.enable", {})
        d.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
        for _ in range(loads):
            d.get("about:blank")
            d.get(f"{url}/#run={rid}&left=clust")
            first.append(until("return window.__firstImageMs") / 1000)
        d.execute_script("document.getElementById('direction-backward').click();"
                         "const t = document.getElementById('target-select');"
                         "t.value = 'exp1'; t.dispatchEvent(new Event('change'));")
        viewer = d.find_element(By.ID, "viewer")
        for r, c in cells:
            d.execute_script("window.__lastAnswerMs = undefined;"
                             "window.subzero.centerOn(arguments[0], arguments[1], 4)", r, c)
            off = d.execute_script("return window.subzero.cellOffset(arguments[0], "
                                   "arguments[1])", r, c)
            ActionChains(d).move_to_element_with_offset(viewer, round(off["dx"]),
                                                        round(off["dy"])).click().perform()
            answers.append(until("return window.__lastAnswerMs") / 1000)
    finally:
        d.quit()
    return {"run": rid, "first_image": summary(first), "click_to_answer": summary(answers)}


def workload(n: int, shape: tuple[int, int], seed: int = 7) -> list[tuple[str, dict]]:
    """``n`` (kind, fields) queries in a fixed random order."""
    rng = random.Random(seed)
    h, w = shape
    kinds = [*(f"named:{q}" for q in NAMED), "bwd-pixel", "bwd-box", "fwd-pixel", "fwd-box"]
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        r, c = rng.randrange(h - 10), rng.randrange(w - 10)
        if kind.startswith("named:"):
            spec = {"named": kind[6:]}
        else:
            spec = {"direction": "backward", "from": "rmcr", "to": "exp1"} \
                if kind.startswith("bwd") else {"direction": "forward", "from": "exp1", "to": "rmcr"}
            if kind.endswith("pixel"):
                spec["cells"] = f"{r},{c}"
            else:
                spec["box"] = f"{r}:{r + 10},{c}:{c + 10}"
        out.append((kind, spec))
    rng.shuffle(out)
    return out


def http_path(rid: str, spec: dict) -> str:
    if "named" in spec:
        return f"/api/runs/{rid}/named/{spec['named']}"
    return f"/api/runs/{rid}/query?" + "&".join(f"{k}={v}" for k, v in spec.items())


def cli_argv(rid: str, spec: dict) -> list[str]:
    if "named" in spec:
        return ["query", rid, "--named", spec["named"]]
    cells = ["--cells", spec["cells"]] if "cells" in spec else ["--box", spec["box"]]
    return ["query", rid, spec["direction"], "--from", spec["from"], *cells, "--to", spec["to"]]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--home", help="use the newest astronomy run of this home")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--cli-queries", type=int, default=None,
                   help="how many of the workload's queries run through the CLI (default: all)")
    p.add_argument("--slow-queries", type=int, default=4,
                   help="clients sending slow queries while tiles are measured (default 4)")
    p.add_argument("--tile-rounds", type=int, default=4,
                   help="times every tile is fetched in each phase of that (default 4)")
    p.add_argument("--page-loads", type=int, default=5, help="page loads timed (default 5)")
    p.add_argument("--clicks", type=int, default=10, help="clicks timed (default 10)")
    args = p.parse_args()
    n_queries = 40 if args.quick else args.queries
    n_cli = 20 if args.quick else (args.cli_queries or n_queries)
    out = args.out or (None if args.quick else str(ROOT / "benchmarks/results/serve.json"))

    tmp = None
    if args.home:
        home = Path(args.home)
        listing = json.loads(cli("runs", "--home", str(home), "--json").stdout or "[]")
        runs = [r for r in listing if r["workflow"] == "astronomy" and r["status"] == "complete"]
        if not runs:
            sys.exit(f"bench_serve: no complete astronomy run in {home}")
        rid, data = runs[-1]["run"], "the newest astronomy run of --home"
    else:
        tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
        home = tmp / "home"
        rid, data = make_run(home)
    browser_runs = {data: rid}
    if data == "real LSST exposures":  # the fixtures' kind of run too, beside the real one
        p = cli("run", "astronomy", "--home", str(home), "--strategy", "subzero", "--json")
        if p.returncode == 0:
            browser_runs["generated exposures"] = json.loads(p.stdout)["run"]
    proc, url = start_server(home)
    try:
        client = Client(url)
        status, body, _ = client.get(f"/api/runs/{rid}")
        info = json.loads(body)
        shape = tuple(next(a["shape"] for a in info["arrays"] if a["name"] == "exp1"))
        for q in NAMED:  # warm: the run's readers open, the first query's imports
            client.get(f"/api/runs/{rid}/named/{q}")
        rows = []
        for kind, spec in workload(n_queries, shape):
            path = http_path(rid, spec)
            status, body, wall = client.get(path)
            doc = json.loads(body)
            if status != 200:
                sys.exit(f"bench_serve: {path} answered {status}: {doc}")
            methods = {s["method"].split(":")[0] for r in doc["results"] for s in r["steps"]}
            rows.append({"kind": kind, "wall_s": wall, "server_s": doc["elapsed_s"],
                         "count": sum(r["count"] for r in doc["results"]),
                         "bytes": len(body), "methods": sorted(methods)})
        tiles = fetch_tiles(client, tile_paths(rid, shape), 1)
        beside = tiles_beside_slow_queries(url, rid, shape, args.slow_queries,
                                           1 if args.quick else args.tile_rounds)
        loads, clicks = (2, 4) if args.quick else (args.page_loads, args.clicks)
        page = {kind: in_browser(url, home, r, loads, clicks)
                for kind, r in browser_runs.items()}
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    cli_rows: dict[str, list[float]] = {}
    for kind, spec in workload(n_cli, shape):  # the same workload, one process per query
        argv = cli_argv(rid, spec)
        t0 = time.perf_counter()
        res = cli(*argv, "--home", str(home), "--json")
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            sys.exit(f"bench_serve: CLI {' '.join(argv)} failed: {res.stderr.strip()}")
        cli_rows.setdefault(kind, []).append(wall)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)

    quick = [r for r in rows if "reexec" not in r["methods"]]
    by_kind = {k: summary([r["wall_s"] for r in rows if r["kind"] == k])
               for k in dict.fromkeys(r["kind"] for r in rows)}
    http_sm = summary([r["wall_s"] for r in quick])
    tile_s = summary(tiles)
    cli_s = {q: summary(v) for q, v in cli_rows.items()}
    cli_s["all"] = summary([t for v in cli_rows.values() for t in v])
    bq = [f"named:{q}" for q in NAMED[:5]]
    cli_bq = max(cli_s[q]["median_ms"] for q in bq if q in cli_s) / 1000
    doc = {
        "benchmark": "serve",
        "data": data, "run": rid, "shape": list(shape), "queries": n_queries,
        "http": {"all": summary([r["wall_s"] for r in rows]), "stored_or_mapped": http_sm,
                 "server_side_median_ms": statistics.median(r["server_s"] for r in rows) * 1000,
                 "reexec_queries": len(rows) - len(quick), "by_kind": by_kind,
                 "median_answer_bytes": statistics.median(r["bytes"] for r in rows)},
        "tiles": tile_s,
        "tiles_beside_slow_queries": beside,
        "cli": cli_s,
        "browser": page,
        "targets": {
            "http_median_ms<=50": {"value": http_sm["median_ms"], "met": http_sm["median_ms"] <= 50},
            "http_p95_ms<=150": {"value": http_sm["p95_ms"], "met": http_sm["p95_ms"] <= 150},
            "tile_ms<=100": {"value": [tile_s["median_ms"], tile_s["p95_ms"]],
                             "met": tile_s["p95_ms"] <= 100},
            "tile_p95_ms<=100_beside_slow_queries": {
                "value": beside["busy"]["p95_ms"], "met": beside["busy"]["p95_ms"] <= 100,
                "slow_clients": beside["slow_clients"]},
            "cli_BQ0-4_wall_s<=0.5": {"value": cli_bq, "met": cli_bq <= 0.5,
                                       "per_query_median_s": {q: cli_s[q]["median_ms"] / 1000
                                                              for q in bq if q in cli_s}},
        },
    }
    emit(doc, out)


if __name__ == "__main__":
    main()
