"""Query scope (issue 42): a query given a target lists the steps through a whole-input
dependency (a global mean) instead of following them, so that its answer is the local
lineage; ``scope="all"`` follows them too. On a small generated astronomy run."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from operators import (AllToAllOperator, Binary, Convolve, MeanBroadcast, Reduce, Subarray,
                       udf)
from subzero import Home
from subzero.cli import main
from subzero.errors import QueryError
from subzero.query.paths import simple_paths
from subzero.serve.explorer import Explorer
from tests.serve.conftest import Server
from workflows.astro_udfs import StarDetect
from workflows.genomics_udfs import Model, Validate

SHAPE = (200, 160)
CELLS = SHAPE[0] * SHAPE[1]
#: the whole-input steps between clust and exp1: the background mean, the overscan mean
GLOBAL_STEPS = {("bgmean1", 0), ("meanoverscan1", 0)}
ANSWER = re.compile(r"lineage of \S+ in \S+ \([\d, ]+\): ([\d,]+) cells?")


@pytest.fixture(scope="module")
def astro(tmp_path_factory):
    """``(home, run, star)``: a small generated astronomy run and one star pixel of clust
    away from the image's edges."""
    home = tmp_path_factory.mktemp("scope") / "home"
    run = Home(home).run("astronomy", quiet=True, shape=f"{SHAPE[0]}x{SHAPE[1]}",
                         data="generated")
    labels = run.array("clust")
    inner = np.zeros_like(labels, dtype=bool)
    inner[20:-20, 20:-20] = True
    stars = np.argwhere((labels > 0) & inner)
    assert len(stars), "the generated run has no star away from the edges"
    return home, run, tuple(int(v) for v in stars[len(stars) // 2])


def _mask(run, direction, star, start, paths):
    """The union of the answers along ``paths``, one path at a time."""
    masks = [getattr(run, direction)([star], start, path=p).mask for p in paths]
    return np.logical_or.reduce(masks)


def _cli(capsys, *args):
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- whole_input ---------------------------------------------------------------------------

class _Inverse(AllToAllOperator):
    """A stand-in for a global operator (a matrix inverse)."""

    def compute(self, ctx, x):
        return x


@udf.whole_array
def _fitted(x):
    """A model fitted on the whole array."""
    return x - x.mean()


@udf.blackbox
def _opaque(x):
    return x


WHOLE = [
    (MeanBroadcast(), [(4, 3)], 0, True),
    (MeanBroadcast(axis=0), [(4, 3)], 0, False),
    (Reduce("sum"), [(4, 3)], 0, True),
    (Reduce("max", axis=1), [(4, 3)], 0, False),
    (Reduce("max", axis=1), [(1, 3)], 0, True),  # the one kept line is the whole input
    (Binary("add"), [(4, 3), (4, 3)], 0, False),
    (Binary("subtract"), [(4, 3), (1, 1)], 1, False),
    (Convolve(np.ones((3, 3))), [(8, 8)], 0, False),
    (Subarray("0:1, 0:1"), [(4, 3)], 0, False),
    (_Inverse(), [(3, 3)], 0, True),
    (_fitted(), [(4, 3)], 0, True),
    (_opaque(), [(4, 3)], 0, False),
]


@pytest.mark.parametrize("op, shapes, i, whole", WHOLE,
                         ids=[f"{type(o).__name__}-{s}-{i}" for o, s, i, _ in WHOLE])
def test_whole_input_is_true_only_where_every_output_cell_reads_the_whole_input(
        op, shapes, i, whole):
    bound = op.bind("op", shapes, ["f8"] * len(shapes))
    assert bound.whole_input(i) is whole


def test_whole_input_is_not_the_entire_array_flag():
    add = Binary("add").bind("a", [(4, 3), (4, 3)], ["f8", "f8"])
    assert add.all_to_all(0) and not add.whole_input(0)


def test_shipped_udfs_whole_input():
    # validate's counts read every prediction, but one column of transpose; the model reads
    # whole columns, not the whole arrays; star detection is local
    assert Validate().whole_input(0) and not Validate().whole_input(1)
    assert not any(Model().whole_input(i) for i in range(3))
    assert not StarDetect().whole_input(0)


# -- the executor ----------------------------------------------------------------------------

def test_backward_local_scope_is_the_star_and_lists_the_means(astro):
    _, run, star = astro
    res = run.backward([star], "clust", to="exp1")
    assert res.scope == "local"
    every = simple_paths(run.workflow, "backward", "clust", "exp1", limit=10_000)
    local = [p for p in every if not GLOBAL_STEPS & set(p)]
    assert 0 < len(local) < len(every)
    np.testing.assert_array_equal(res.mask, _mask(run, "backward", star, "clust", local))
    assert 9 <= res.count < 0.05 * CELLS
    deps = {g.operator: g for g in res.global_deps}
    assert set(deps) == {"bgmean1", "meanoverscan1"}
    assert (deps["bgmean1"].input, deps["bgmean1"].array, deps["bgmean1"].cells) == (
        0, "flatcorrect1", CELLS)
    assert deps["bgmean1"].kind == "MeanBroadcast" and "mean" in deps["bgmean1"].description
    assert (deps["meanoverscan1"].array, deps["meanoverscan1"].cells) == ("overscanimg1", 1)
    assert not any(s.operator in deps for s in res.steps)
    assert not any(s.is_global for s in res.steps)


def test_backward_scope_all_is_the_whole_exposure(astro):
    _, run, star = astro
    res = run.backward([star], "clust", to="exp1", scope="all")
    assert res.scope == "all" and res.count == CELLS and res.global_deps == []
    assert {(s.operator, s.input) for s in res.steps if s.is_global} == GLOBAL_STEPS
    every = simple_paths(run.workflow, "backward", "clust", "exp1", limit=10_000)
    np.testing.assert_array_equal(res.mask, _mask(run, "backward", star, "clust", every))


def test_forward_stops_at_the_global_means(astro):
    _, run, _ = astro
    res = run.forward([(50, 50)], "exp1", to="clust")
    assert [(g.operator, g.array, g.cells) for g in res.global_deps] == [
        ("bgmean1", "bgmean1", CELLS)]
    assert 0 < res.count < 0.05 * CELLS
    assert run.forward([(50, 50)], "exp1", to="clust", scope="all").count == CELLS
    corner = run.forward([(0, 0)], "exp1", to="rmoverscan1")
    assert [(g.operator, g.array, g.cells) for g in corner.global_deps] == [
        ("meanoverscan1", "meanoverscan1", 1)]
    assert corner.count == 1


def test_an_explicit_path_through_a_global_step_is_taken_and_marked(astro):
    _, run, star = astro
    path = [("clust", 0), ("rmcr", 0), ("sumexp", 0), ("rmbg1", 1), ("bgmean1", 0)]
    res = run.backward([star], "clust", path=path)
    assert res.count == CELLS and res.global_deps == []
    assert [s.is_global for s in res.steps] == [False] * 4 + [True]


def test_json_has_the_scope_and_the_global_dependencies(astro):
    _, run, star = astro
    doc = run.backward([star], "clust", to="exp1").to_json()
    assert doc["scope"] == "local"
    assert {g["operator"] for g in doc["global"]} == {"bgmean1", "meanoverscan1"}
    assert set(doc["global"][0]) >= {"operator", "input", "array", "cells", "description"}
    assert all(s["global"] is False for s in doc["steps"])
    with pytest.raises(QueryError, match="scope 'wide': expected local or all"):
        run.backward([star], "clust", to="exp1", scope="wide")


def test_named_queries_follow_their_paths_in_either_scope(astro):
    _, run, _ = astro
    for name in ("BQ3", "FQ0"):
        local, every = run.named_query(name), run.named_query(name, scope="all")
        assert local.global_deps == [] and np.array_equal(local.mask, every.mask)
    # FQ0 goes through the overscan mean on purpose: it is subtracted from every pixel
    fq0 = run.named_query("FQ0")
    assert fq0.count == CELLS and fq0.steps[-2].operator == "meanoverscan1"
    assert fq0.steps[-2].is_global


# -- the command line ----------------------------------------------------------------------

def test_cli_prints_a_line_per_global_dependency(astro, capsys):
    home, run, star = astro
    args = ["query", "--home", str(home), run.id, "backward", "--from", "clust", "--cells",
            f"{star[0]},{star[1]}", "--to", "exp1"]
    code, out, _ = _cli(capsys, *args)
    assert code == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("and ")]
    assert lines[0].startswith(f"and bgmean1 (MeanBroadcast: ") and lines[0].endswith(
        f"every one of the {CELLS:,} cells of flatcorrect1 — add --scope all to include them")
    assert lines[1].startswith("and meanoverscan1 (Reduce: ") and "one cell of overscanimg1" \
        in lines[1]
    local = int(ANSWER.search(out).group(1).replace(",", ""))
    assert local == run.backward([star], "clust", to="exp1").count
    code, out, _ = _cli(capsys, *args, "--scope", "all")
    assert code == 0 and int(ANSWER.search(out).group(1).replace(",", "")) == CELLS
    assert not [ln for ln in out.splitlines() if ln.startswith("and ")]
    code, out, _ = _cli(capsys, *args, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["scope"] == "local" and len(doc["global"]) == 2


def test_cli_refuses_a_bad_scope_in_one_line(astro, capsys):
    home, run, _ = astro
    code, out, err = _cli(capsys, "query", "--home", str(home), run.id, "backward", "--from",
                          "clust", "--cells", "1,1", "--to", "exp1", "--scope", "bogus")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'bogus'" in err


# -- the explorer --------------------------------------------------------------------------

def test_paths_are_labelled_marked_global_and_counted(astro):
    home, run, star = astro
    ex = Explorer(home)
    try:
        doc = ex.paths(run.id, {"direction": "backward", "from": "clust", "to": "exp1",
                                "cells": f"{star[0]},{star[1]}"})
    finally:
        ex.close()
    paths = doc["paths"]
    assert len(paths) >= 4 and doc["truncated"] is False
    labels = [p["label"] for p in paths]
    assert len(set(labels)) == len(labels)
    for p in paths:
        steps = [tuple(s) for s in p["steps"]]
        assert p["global"] is bool(GLOBAL_STEPS & set(steps))
        assert ("bgmean1 (global)" in p["label"]) is (("bgmean1", 0) in steps)
        assert p["label"].startswith("via ")
        assert p["count"] == run.backward([star], "clust", path=steps).count
        assert len(p["through"]) == len(steps)
    # the paths past the background mean reach the whole exposure (the overscan pixel
    # only, past the overscan mean too), the others the star
    kinds = {p["count"] for p in paths if {tuple(s) for s in p["steps"]} & GLOBAL_STEPS
             == {("bgmean1", 0)}}
    assert kinds == {CELLS}
    assert max(p["count"] for p in paths if not p["global"]) < 0.05 * CELLS
    ex = Explorer(home)
    try:
        bare = ex.paths(run.id, {"direction": "backward", "from": "clust", "to": "exp1"})
    finally:
        ex.close()
    assert all("count" not in p for p in bare["paths"])


def test_explorer_query_passes_the_scope(astro):
    home, run, star = astro
    spec = {"direction": "backward", "from": "clust", "cells": [list(star)], "to": "exp1"}
    ex = Explorer(home)
    try:
        local = ex.query(run.id, spec)["results"][0]
        every = ex.query(run.id, {**spec, "scope": "all"})["results"][0]
        with pytest.raises(QueryError, match="scope 'bogus': expected local or all"):
            ex.query(run.id, {**spec, "scope": "bogus"})
    finally:
        ex.close()
    assert local["scope"] == "local" and local["mask"]["count"] == local["count"]
    assert local["count"] == run.backward([star], "clust", to="exp1").count
    assert {g["operator"] for g in local["global"]} == {"bgmean1", "meanoverscan1"}
    assert every["scope"] == "all" and every["count"] == CELLS and every["global"] == []
    assert any(s["global"] for s in every["steps"])


def test_the_http_api_takes_the_scope(astro):
    home, run, star = astro
    server = Server(home)
    try:
        base = (f"/api/runs/{run.id}/query?direction=backward&from=clust"
                f"&cells={star[0]},{star[1]}&to=exp1")
        status, doc = server.json(base + "&scope=all")
        assert status == 200 and doc["results"][0]["count"] == CELLS
        status, doc = server.json(base + "&scope=bogus")
        assert status == 400 and "'bogus'" in json.dumps(doc)
        status, doc = server.json(f"/api/runs/{run.id}/paths?direction=backward&from=clust"
                                  f"&to=exp1&box={star[0]}:{star[0] + 1},{star[1]}:{star[1] + 1}")
        assert status == 200 and all("label" in p and "count" in p for p in doc["paths"])
    finally:
        server.stop()
