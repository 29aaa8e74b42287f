"""The explorer never stalls, against a running `subzero serve`: tiles and listings answer
while slow queries hold every query worker; a query past its time limit is answered 503,
naming the step it reached, and stops; a query whose client disconnects stops before its
next step; a request body nested too deep is one 400 line."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from subzero.query.paths import dag_steps
from subzero.serve.app import MAX_DEPTH, json_depth
from subzero.serve.explorer import default_targets
from tests.serve.conftest import Server, wait_for

#: a slow query: every cell of clust but the last rows, back to each workflow input, by
#: re-execution (every step re-runs an operator over the whole image)
SLOW = ("/api/runs/{run}/query?direction=backward&from=clust&box=0:1900,0:513"
        "&method=reexec")


def _slow(run) -> str:
    return SLOW.format(run=run.id)


def _total_steps(run) -> int:
    """The steps the slow query walks when nothing stops it."""
    wf = run.workflow
    return sum(len(dag_steps(wf, "backward", "clust", t))
               for t in default_targets(run, "backward", "clust"))


def _send(server: Server, path: str) -> socket.socket:
    """A GET sent on a connection of its own, its answer not read (close it to leave)."""
    host, port = server.url.split("//")[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=60)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    return s


def _status(server: Server) -> dict:
    status, doc = server.json("/api/status")
    assert status == 200
    return doc


def _running(server: Server, n: int, steps: int = 0) -> dict:
    """/api/status once ``n`` queries run and each has done at least ``steps`` steps."""
    def ready():
        doc = _status(server)
        busy = [q for q in doc["queries"] if q["state"] == "running" and q["cut"] is None
                and q["steps_done"] >= steps]
        return doc if len(busy) == n else None
    return wait_for(ready, timeout=120, what=f"{n} queries running")


def _idle(server: Server) -> dict:
    return wait_for(lambda: (lambda d: d if not d["queries"] else None)(_status(server)),
                    timeout=120, what="no query under way")


pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def busy(astro_home):
    """A server of its own (its status counts only this module's queries), two query
    workers, the default time limit."""
    home, _ = astro_home
    s = Server(home, "--query-workers", "2")
    yield s
    s.stop()


def test_tiles_and_listings_answer_while_slow_queries_hold_every_worker(busy, astro_home):
    _, run = astro_home
    socks = [_send(busy, _slow(run)) for _ in range(2)]
    try:
        _running(busy, 2)
        tile_status, png, _ = busy.get(f"/api/runs/{run.id}/arrays/exp1/tiles/0/0/0.png")
        runs_status, runs = busy.json("/api/runs")
        info_status, info = busy.json(f"/api/runs/{run.id}")
        paths_status, _ = busy.json(f"/api/runs/{run.id}/paths?direction=backward&from=clust"
                                    "&to=exp1")
        # answered while both queries still run: nothing waited for them
        still = _status(busy)
        assert [q["state"] for q in still["queries"]] == ["running", "running"]
        assert all(q["cut"] is None for q in still["queries"])
        assert tile_status == 200 and png[:4] == b"\x89PNG"
        assert runs_status == 200 and [r["id"] for r in runs] == [run.id]
        assert info_status == 200 and info["run"] == run.id
        assert paths_status == 200
        assert still["query_workers"] == 2 and still["query_timeout_s"] == 30
    finally:
        for s in socks:
            s.close()
    done = _idle(busy)
    assert done["cancelled"] >= 2 and done["answered"] == 0


def test_a_client_that_disconnects_stops_its_query_before_the_next_step(busy, astro_home):
    _, run = astro_home
    before = _status(busy)["cancelled"]
    sock = _send(busy, _slow(run))
    try:
        _running(busy, 1, steps=1)  # under way: a step done, the next one running
    finally:
        sock.close()
    # the server sees the client go: the query is called off; the step under way, at most,
    # runs to its end
    called_off = wait_for(lambda: [q for q in _status(busy)["queries"]
                                   if q["cut"] == "client gone"], what="the query called off")
    seen, seen_done = called_off[0]["reached"], called_off[0]["steps_done"]
    doc = _idle(busy)
    last = doc["recent"][-1]
    assert doc["cancelled"] == before + 1 and last["outcome"] == "cancelled"
    stop = last["stopped_at"]
    assert stop["step"] == last["steps_done"] + 1
    if stop["target"] == seen["target"]:
        assert seen_done <= last["steps_done"] <= seen_done + 1
    else:  # the step under way was the last toward its target: the next target's walk
        assert last["steps_done"] == 0  # stopped before its first step
    assert last["steps_done"] < _total_steps(run)
    assert busy.alive()


def test_a_query_past_its_time_limit_is_answered_with_the_step_it_reached(astro_home):
    home, run = astro_home
    s = Server(home, "--query-timeout", "1", "--query-workers", "1")
    try:
        # the worker loads the run on its first query (which the limit may cut)
        s.json(f"/api/runs/{run.id}/named/BQ1")
        _idle(s)
        status, doc = s.json(_slow(run))
        assert status == 503 and doc["cut"] == "time limit" and doc["limit_s"] == 1
        msg = doc["error"]
        assert "\n" not in msg and "time limit of 1 s" in msg and "--query-timeout" in msg
        reached = doc["reached"]
        assert reached["operator"] in run.workflow.nodes and reached["step"] >= 1
        assert f"step {reached['step']}" in msg and repr(reached["operator"]) in msg
        assert len(doc["steps"]) == reached["step"] - 1
        # the query stops (before its next step), its worker free again
        last = _idle(s)["recent"][-1]
        assert last["outcome"] == "cut" and last["steps_done"] < _total_steps(run)

        # two at once on one worker: one runs until it is cut, the other waits its whole
        # time for the worker and says so
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(s.json(_slow(run))))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(status for status, _ in answers) == [503, 503]
        waited = [doc for _, doc in answers if doc["reached"] is None]
        ran = [doc for _, doc in answers if doc["reached"] is not None]
        assert len(waited) == len(ran) == 1
        assert "waited all that time for a query worker" in waited[0]["error"]
        assert ran[0]["reached"]["step"] >= 1
        doc = _idle(s)
        assert doc["cut"] >= 3
        # tiles were never held up, and the server still answers queries it can finish
        assert s.get(f"/api/runs/{run.id}/arrays/exp1/tiles/0/0/0.png")[0] == 200
        assert s.json(f"/api/runs/{run.id}/query?direction=backward&from=rmcr&cells=5,5"
                      "&to=exp1")[0] == 200
    finally:
        s.stop()


def test_a_body_nested_deeper_than_the_limit_is_one_400_line(server, astro_home):
    _, run = astro_home
    path = f"/api/runs/{run.id}/query"
    headers = {"Content-Type": "application/json"}
    for depth in (100_000, MAX_DEPTH + 1):
        body = b"[" * depth + b"]" * depth
        status, raw, _ = server.get(path, headers=headers, data=body)
        msg = json.loads(raw)["error"]
        assert status == 400 and f"{depth:,} levels" in msg and str(MAX_DEPTH) in msg, msg
        assert "\n" not in msg
    # as deep as allowed: the query's own fields beside a field nested to the limit
    fields = {"direction": "backward", "from": "rmcr", "cells": [[5, 5]], "to": "exp1"}
    deep = json.dumps({**fields, "note": json.loads("[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))})
    assert json_depth(deep.encode()) == MAX_DEPTH
    status, raw, _ = server.get(path, headers=headers, data=deep.encode())
    assert status == 200, raw[:300]
    # brackets inside strings are text, not nesting
    text = json.dumps({**fields, "note": "[{" * 1000 + '\\"[' * 100})
    status, raw, _ = server.get(path, headers=headers, data=text.encode())
    assert status == 200, raw[:300]
    assert server.alive()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab'),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(alphabet='[]{}"\\ab'), inner, max_size=3),
                    max_leaves=30)


def _depth(v) -> int:
    if isinstance(v, list):
        return 1 + max(map(_depth, v), default=0)
    if isinstance(v, dict):
        return 1 + max(map(_depth, v.values()), default=0)
    return 0


@given(JSON, st.booleans())
@settings(max_examples=300, deadline=None)
def test_json_depth_is_the_nesting_of_any_json_text(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert json_depth(text) == _depth(value)
