"""The explorer's JSON API against a running `subzero serve`: answers equal the Python API's,
tiles are PNG, downloads hold the mask, bad requests get one clear 4xx line, nothing is
written to the stored run, and the server survives all of it."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from subzero.cells import Box
from subzero.engine.arrays import read_array, read_box
from subzero.serve.explorer import STRETCH_CELLS, grey, rle, stretch, unrle, view_shape
from tests.serve.conftest import ROOT, Server

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@given(st.lists(st.integers(0, 499), max_size=200))
@settings(max_examples=200, deadline=None)
def test_rle_round_trips_any_set_of_cells(cells):
    lin = np.unique(np.asarray(cells, dtype=np.uint64))
    runs = rle(lin)
    assert (runs[1::2] > 0).all() if len(runs) else True
    np.testing.assert_array_equal(np.flatnonzero(unrle(runs, 500)), lin.astype(np.int64))


@pytest.mark.parametrize("shape, view", [((), (1, 1)), ((7,), (1, 7)), ((3, 4), (3, 4)),
                                         ((2, 3, 4), (6, 4))])
def test_view_shape_is_rows_by_last_axis(shape, view):
    assert view_shape(shape) == view


def _tree_digest(path: Path) -> str:
    """Every file of a run's folder (names, sizes, contents)."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(path)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_runs_and_run_info(server, astro_home):
    _, run = astro_home
    status, runs = server.json("/api/runs")
    assert status == 200 and [r["id"] for r in runs] == [run.id]
    status, info = server.json(f"/api/runs/{run.id}")
    assert status == 200 and info["workflow"] == "astronomy"
    assert {a["name"] for a in info["arrays"]} == set(run.arrays)
    ops = {o["name"]: o for o in info["operators"]}
    assert ops["clust"]["strategies"] and ops["clust"]["lineage_bytes"] > 0
    assert ops["clust"]["inputs"] == ["rmcr"] and ops["clust"]["runtime_s"] > 0
    assert info["inputs"][:2] == ["exp1", "exp2"] and info["outputs"] == ["clust"]
    assert [q["name"] for q in info["named"]] == list(run.workflow.queries)
    assert server.json("/api/runs/latest")[1]["run"] == run.id


def test_tiles_are_png_of_the_array(server, astro_home):
    _, run = astro_home
    status, png, headers = server.get(f"/api/runs/{run.id}/arrays/exp1/tiles/0/0/0.png")
    assert status == 200 and headers["content-type"] == "image/png"
    from PIL import Image

    img = Image.open(io.BytesIO(png))
    h, w = run.shape("exp1")
    assert img.size == (min(256, w), min(256, h)) and img.mode == "L"
    path = run.loaded.array_path("exp1")
    data = read_array(path)
    if data.size <= STRETCH_CELLS:  # the contrast: from the array, or its centred box
        sample = data
    else:
        side = int(np.sqrt(STRETCH_CELLS))
        lo = tuple(max(0, (n - side) // 2) for n in data.shape)
        sample = read_box(path, Box(lo, tuple(min(n, a + side) for a, n in zip(lo, data.shape))))
    lo_hi = stretch(sample)
    pixels = np.asarray(img)
    np.testing.assert_array_equal(pixels, grey(data[:256, :256], *lo_hi))
    assert pixels.std() > 5  # a stretched image, not a flat one
    status, png, _ = server.get(f"/api/runs/{run.id}/arrays/exp1/tiles/3/0/0.png")
    coarse = np.asarray(Image.open(io.BytesIO(png)))
    assert coarse.shape == (-(-h // 8), -(-w // 8))  # one tile, 8x coarser
    np.testing.assert_array_equal(coarse, grey(data[::8, ::8][:256, :256], *lo_hi))


@pytest.mark.parametrize("name", ["BQ0", "BQ1", "BQ4", "FQ0"])
def test_named_queries_answer_as_the_python_api(server, astro_home, name):
    _, run = astro_home
    expected = run.named_query(name)
    status, doc = server.json(f"/api/runs/{run.id}/named/{name}")
    assert status == 200 and doc["named"] == name
    res = doc["results"][0]
    assert res["array"] == expected.array and res["count"] == expected.count
    mask = unrle(res["mask"]["runs"], int(np.prod(res["shape"]))).reshape(res["shape"])
    np.testing.assert_array_equal(mask, expected.mask)
    assert [s["operator"] for s in res["steps"]] == [s.operator for s in expected.steps]
    # every array along the path has its mask; the start holds the query's cells
    assert set(res["along"]) >= {s["reached"] for s in res["steps"]}


def test_cells_and_boxes_forward_and_backward(server, astro_home):
    _, run = astro_home
    status, doc = server.json(f"/api/runs/{run.id}/query?direction=backward&from=rmcr"
                              "&cells=100,100;101,101&to=exp1")
    assert status == 200
    assert doc["results"][0]["count"] == run.backward([(100, 100), (101, 101)], "rmcr",
                                                      to="exp1").count
    status, doc = server.json(f"/api/runs/{run.id}/query", body={
        "direction": "backward", "from": "rmcr", "cells": [[100, 100], [101, 101]], "to": "exp1"})
    assert status == 200 and doc["results"][0]["count"] == run.backward(
        [(100, 100), (101, 101)], "rmcr", to="exp1").count
    body = {"direction": "forward", "from": "exp1", "box": "50:60,50:60", "to": "rmcr"}
    status, doc = server.json(f"/api/runs/{run.id}/query", body=body)
    assert status == 200 and doc["results"][0]["count"] == run.forward(
        np.argwhere(np.ones((10, 10), bool)) + 50, "exp1", to="rmcr").count
    # no target: backward to the workflow's inputs, one result each
    status, doc = server.json(f"/api/runs/{run.id}/query?direction=backward&from=sumexp"
                              "&cells=5,5")
    assert status == 200 and {r["array"] for r in doc["results"]} >= {"exp1", "exp2"}


def test_paths_one_by_one_and_a_query_along_one(server, astro_home):
    _, run = astro_home
    status, doc = server.json(f"/api/runs/{run.id}/paths?direction=backward&from=clust&to=exp1")
    assert status == 200 and len(doc["paths"]) >= 2
    assert doc["truncated"] is False
    lengths = [len(p["steps"]) for p in doc["paths"]]
    assert lengths == sorted(lengths)
    union = run.backward([(100, 100)], "clust", to="exp1", scope="all").mask
    masks = []
    for p in doc["paths"]:
        assert p["through"][-1] == "exp1" and len(p["through"]) == len(p["steps"])
        text = ",".join(f"{op}:{i}" for op, i in p["steps"])
        status, ans = server.json(f"/api/runs/{run.id}/query?direction=backward&from=clust"
                                  f"&cells=100,100&path={text}")
        assert status == 200
        res = ans["results"][0]
        mask = unrle(res["mask"]["runs"], int(np.prod(res["shape"]))).reshape(res["shape"])
        np.testing.assert_array_equal(mask, run.backward(
            [(100, 100)], "clust", path=[tuple(s) for s in p["steps"]]).mask)
        masks.append(mask)
    # lineage distributes over unions: the paths one by one make up the answer to=exp1
    np.testing.assert_array_equal(np.logical_or.reduce(masks), union)


def test_simple_paths_come_shortest_first(astro_home):
    from subzero.query.paths import simple_paths

    _, run = astro_home
    wf = run.workflow
    every = simple_paths(wf, "backward", "clust", "exp1", limit=10_000)
    assert len({tuple(p) for p in every}) == len(every) >= 5
    shortest = sorted(len(p) for p in every)[:5]
    assert [len(p) for p in simple_paths(wf, "backward", "clust", "exp1", limit=5)] == shortest
    assert [len(p) for p in every] == sorted(len(p) for p in every)


def test_downloads_hold_the_mask(server, astro_home):
    _, run = astro_home
    expected = run.named_query("BQ1").mask
    status, raw, headers = server.get(f"/api/runs/{run.id}/named/BQ1.npy")
    assert status == 200 and "attachment" in headers["content-disposition"]
    np.testing.assert_array_equal(np.load(io.BytesIO(raw)), expected)
    status, raw, _ = server.get(f"/api/runs/{run.id}/query.fits?direction=backward&from=rmcr"
                                "&cells=100,100&to=exp1")
    from astropy.io import fits

    got = fits.getdata(io.BytesIO(raw))
    np.testing.assert_array_equal(got.astype(bool),
                                  run.backward([(100, 100)], "rmcr", to="exp1").mask)


BAD = [
    ("/api/runs/r999", 404, "r999"),
    ("/api/runs/..%2f..%2fetc", 404, "etc"),
    ("/api/runs/r1%2f..", 404, ""),
    ("/api/runs/{run}/arrays/nosuch/tiles/0/0/0.png", 404, "nosuch"),
    ("/api/runs/{run}/arrays/..%2fcatalog.sqlite/tiles/0/0/0.png", 404, "catalog.sqlite"),
    ("/api/runs/{run}/arrays/exp1/tiles/0/99/0.png", 400, "(99, 0)"),
    ("/api/runs/{run}/arrays/exp1/tiles/40/0/0.png", 400, "zoom 40"),
    ("/api/runs/{run}/query?direction=sideways&from=exp1&cells=1,1", 400, "sideways"),
    ("/api/runs/{run}/query?direction=backward&from=nosuch&cells=1,1", 404, "nosuch"),
    ("/api/runs/{run}/query?direction=backward&from=clust&cells=99999,1&to=exp1", 400,
     "(99999, 1)"),
    ("/api/runs/{run}/query?direction=backward&from=clust&cells=-1,1&to=exp1", 400, "(-1, 1)"),
    ("/api/runs/{run}/query?direction=backward&from=clust&cells=a,b&to=exp1", 400, "'a,b'"),
    ("/api/runs/{run}/query?direction=backward&from=clust&cells=1,2,3&to=exp1", 400, "1, 2, 3"),
    ("/api/runs/{run}/query?direction=backward&from=clust&cells=1,1&to=nosuch", 404, "nosuch"),
    ("/api/runs/{run}/query?direction=backward&from=clust&box=0:5&to=exp1", 400, "0:5"),
    ("/api/runs/{run}/query?direction=backward&from=clust&box=5:2,0:3&to=exp1", 400, "5:2"),
    ("/api/runs/{run}/query?direction=backward&from=clust&box=0:9999,0:9999&to=exp1", 400,
     "0:9999"),
    ("/api/runs/{run}/query?direction=backward&from=clust&to=exp1", 400, "cells"),
    ("/api/runs/{run}/query?direction=backward&from=clust&cells=1,1&path=clust", 400, "clust"),
    ("/api/runs/{run}/query?direction=backward&from=exp1&cells=1,1", 400, "exp1"),
    ("/api/runs/{run}/query?direction=backward&from=clust&cells=1,1&to=exp1&method=magic", 400,
     "magic"),
    ("/api/runs/{run}/named/BQ99", 404, "BQ99"),
    ("/api/runs/{run}/named/BQ1.zip", 400, "zip"),
    ("/api/runs/{run}/query.npy?direction=backward&from=clust&cells=1,1", 400, "target"),
    ("/api/runs/{run}/paths?direction=backward&from=exp1&to=clust", 400, "no path"),
    ("/api/runs/{run}/paths?direction=backward&from=clust&to=nosuch", 404, "nosuch"),
    ("/api/runs/{run}/paths?direction=backward&from=clust", 400, "to: required"),
    ("/api/runs/{run}/paths?direction=backward&to=exp1", 400, "from: required"),
    ("/api/runs/{run}/query?direction=backward&cells=1,1&to=exp1", 400, "from: required"),
    ("/api/runs/{run}/query?direction=backward&from=clust&cells=1,1&path=clust:x", 400,
     "clust:x"),
    ("/nosuch/page", 404, "/nosuch/page"),
    ("/static/..%2f..%2fapi.py", 404, ""),
]


def test_bad_requests_get_one_line_and_change_nothing(server, astro_home):
    home, run = astro_home
    run_dir = home / "runs" / run.id
    assert run_dir.is_dir()
    before = _tree_digest(run_dir)
    for path, code, word in BAD:
        status, raw, headers = server.get(path.format(run=run.id))
        assert status == code, (path, status, raw[:200])
        if headers.get("content-type", "").startswith("application/json"):
            msg = json.loads(raw)["error"]
            assert "\n" not in msg and word in msg, (path, msg)
        else:
            assert path.startswith("/static"), (path, headers)
    # cells as a JSON list: ragged, not integers, outside the array
    for cells, word in [([[1, 2], [3]], "integer coordinates"), ([[1.5, 2]], "integer"),
                        ([[1, 99999]], "(1, 99999)"), ([[2 ** 70, 1]], "integer"),
                        ([[True, 1]], "integer"), ([[True, False]], "integer")]:
        status, raw, _ = server.get(f"/api/runs/{run.id}/query", data=json.dumps(
            {"direction": "backward", "from": "clust", "to": "exp1", "cells": cells}).encode(),
            headers={"Content-Type": "application/json"})
        assert status == 400 and word in json.loads(raw)["error"], raw[:200]
    # fields of the wrong JSON type: a list for a name, a boolean for an input index
    for fields, word in [({"to": ["exp1"]}, "to ['exp1']: expected a string"),
                         ({"from": 7}, "from 7: expected a string"),
                         ({"to": None, "path": [["clust", False]]}, "path"),
                         ({"method": ["auto"]}, "method")]:
        body = {"direction": "backward", "from": "clust", "to": "exp1", "cells": [[1, 1]],
                **fields}
        status, doc = server.json(f"/api/runs/{run.id}/query", body=body)
        assert status == 400 and word in doc["error"], (fields, doc)
    # text cells are counted once parsed: 1,000,000 with a trailing ';' are not too many
    # (the last is outside the array, so the query stops there), 1,000,001 are
    for text, code, word in [("1,1;" * 999_999 + "99999,1;", 400, "(99999, 1)"),
                             ("1,1;" * 1_000_001, 413, "1,000,001 cells")]:
        status, doc = server.json(f"/api/runs/{run.id}/query", body={
            "direction": "backward", "from": "clust", "to": "exp1", "cells": text})
        assert status == code and word in doc["error"], (code, doc["error"][:200])
    # a body that is not JSON by its type
    status, raw, _ = server.get(f"/api/runs/{run.id}/query", data=b'{"direction": "x"}',
                                headers={"Content-Type": "text/plain"})
    assert status == 415 and "application/json" in json.loads(raw)["error"]
    # a malformed body, a body that is not an object, a huge body, cells over the limit
    for body, code, word in [(b"{not json", 400, "not JSON"), (b"[1, 2]", 400, "object"),
                             (json.dumps({"direction": "backward", "from": "clust", "to":
                                          "exp1", "cells": [[1, 1]] * 1_000_001}).encode(),
                              413, "1,000,000")]:
        status, raw, _ = server.get(f"/api/runs/{run.id}/query", data=body,
                                    headers={"Content-Type": "application/json"})
        assert status == code and word in json.loads(raw)["error"], raw[:200]
    # a body announced larger than the limit is refused before it is read
    host, port = server.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", f"/api/runs/{run.id}/query")
    conn.putheader("Content-Length", str(17 << 20))
    conn.putheader("Content-Type", "application/json")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413 and "bytes" in json.loads(resp.read())["error"]
    conn.close()
    # ... and one sent in chunks (no length announced) is cut off at the limit
    assert _chunked_post(server, f"/api/runs/{run.id}/query", 17 << 20) == 413
    status, raw, _ = server.get("/api/runs", headers={"Host": "attacker.example"})
    assert status == 400 and "attacker.example" in json.loads(raw)["error"]
    assert server.alive()
    assert server.json("/api/runs/latest")[0] == 200  # still answering
    after = _tree_digest(run_dir)
    assert before == after


def _chunked_post(server, path: str, total: int) -> int:
    """POST ``total`` bytes of JSON-ish text in 1 MB chunks (Transfer-Encoding: chunked):
    the status answered (the server may stop reading once it has answered)."""
    host, port = server.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.putrequest("POST", path)
    conn.putheader("Transfer-Encoding", "chunked")
    conn.putheader("Content-Type", "application/json")
    conn.endheaders()
    piece = b" " * (1 << 20)
    try:
        for _ in range(-(-total // len(piece))):
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed before reading it all
    try:
        resp = conn.getresponse()
        status = resp.status
        assert "at most" in json.loads(resp.read())["error"]
    finally:
        conn.close()
    return status


def test_damaged_chunks_give_one_line_at_every_zoom(astro_home, tmp_path):
    home, run = astro_home
    # a copy of the home (array files linked, not copied; the catalog copied): the files
    # damaged below are replaced, never written through
    copy = tmp_path / "home"
    shutil.copytree(home, copy, copy_function=lambda a, b: (
        shutil.copy2(a, b) if "catalog" in Path(a).name else os.link(a, b)))
    rel = run.loaded.array_path("exp1").relative_to(home)
    garbled = copy / rel / "c" / "0" / "0"
    assert garbled.is_file()
    garbled.unlink()
    garbled.write_bytes(b"not a blosc chunk" * 10)
    missing = copy / run.loaded.array_path("exp2").relative_to(home) / "c" / "0" / "0"
    missing.unlink()
    s = Server(copy)
    try:
        for name, word in [("exp1", "cannot be read"), ("exp2", "is missing")]:
            for z in (0, 1, 3):
                status, raw, _ = s.get(f"/api/runs/{run.id}/arrays/{name}/tiles/{z}/0/0.png")
                assert 400 <= status < 500, (name, z, status, raw[:300])
                msg = json.loads(raw)["error"]
                assert f"array {name!r}" in msg and word in msg and "subzero verify" in msg
                assert "\n" not in msg
        assert s.alive() and s.json("/api/runs")[0] == 200
    finally:
        s.stop()
    assert (home / rel / "c" / "0" / "0").read_bytes() != garbled.read_bytes()


def _serve(home, *args, env=None):
    return subprocess.run([sys.executable, "-m", "subzero.cli", "serve", "--home", str(home),
                           *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_a_port_in_use_is_one_line_and_exit_2(astro_home):
    home, _ = astro_home
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = _serve(home, "--port", str(port))
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "already in use" in p.stderr and str(port) in p.stderr


@pytest.mark.parametrize("args, env, word", [
    (["--host", "0.0.0.0"], None, "--token"), (["--port", "70000"], None, "70000"),
    (["--port", "x"], None, "'x'"), (["--token", "a b&c"], None, "--token: a token may"),
    (["--token", "t\u00f6ken"], None, "letters, digits and . _ ~ -"),
    ([], {"SUBZERO_TOKEN": "x?y=1"}, "$SUBZERO_TOKEN: a token may"),
    (["--query-timeout", "0"], None, "--query-timeout 0: expected a number of seconds"),
    (["--query-timeout", "nan"], None, "--query-timeout nan"),
    (["--query-timeout", "soon"], None, "'soon'"),
    (["--query-workers", "0"], None, "--query-workers 0: expected a whole number >= 1")])
def test_bad_serve_options_are_one_line_and_exit_2(astro_home, args, env, word):
    home, _ = astro_home
    p = _serve(home, "--port", "0", *args, env=env)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and word in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_home_without_runs_is_one_line_and_exit_2(tmp_path):
    p = _serve(tmp_path / "empty", "--port", "0")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no SubZero home" in p.stderr
    assert not (tmp_path / "empty").exists()  # nothing created


def test_beyond_loopback_every_request_carries_the_token(astro_home):
    home, run = astro_home
    s = Server(home, "--host", "0.0.0.0", env={"SUBZERO_TOKEN": "s3cret-token"})
    try:
        assert s.get("/api/runs")[0] == 401
        assert s.get("/")[0] == 401
        assert s.get("/api/runs", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert s.get("/api/runs", headers={"Authorization": "Bearer s3cret-token"})[0] == 200
        status, _, headers = s.get("/?token=s3cret-token")
        assert status == 200 and "subzero_token=s3cret-token" in headers.get("set-cookie", "")
        assert s.get("/api/runs", headers={"Cookie": "subzero_token=s3cret-token"})[0] == 200
        # a page asked for with the right header but a wrong, non-ASCII ?token: no cookie
        status, _, headers = s.get("/?token=t%C3%B6ken",
                                   headers={"Authorization": "Bearer s3cret-token"})
        assert status == 200 and "set-cookie" not in {k.lower() for k in headers}
        assert s.get("/api/runs?token=t%C3%B6ken")[0] == 401
    finally:
        s.stop()


def test_the_listening_socket_names_tcp_so_answers_are_not_delayed():
    # asyncio sets TCP_NODELAY only on sockets whose protocol is IPPROTO_TCP: a socket made
    # with protocol 0 made every answer on a kept-alive connection wait ~40 ms (Nagle)
    from subzero.cli.serve import bind

    s = bind("127.0.0.1", 0)
    try:
        assert s.proto == socket.IPPROTO_TCP and s.getsockname()[1] > 0
    finally:
        s.close()
