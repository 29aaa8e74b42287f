"""Workloads from sample queries, files and the query log."""

import json

import numpy as np
import pytest

from operators import Affine, Binary, Convolve
from optimizer.stats import ModeStats, OpProfile
from optimizer.workload import (Workload, WorkloadError, everything, from_file, from_queries,
                                from_query_log)
from subzero.engine.catalog import Catalog
from subzero.modes import Mode
from subzero.workflow import Workflow


@pytest.fixture
def wf():
    w = Workflow("tiny")
    w.input("img", (20, 10), "float64", source=lambda: np.zeros((20, 10)))
    w.input("t", (1, 1), "float64", source=lambda: np.zeros((1, 1)))
    w.add("a", Affine(2.0), "img")
    w.add("s", Convolve(np.ones((3, 3))), "a")
    w.add("d", Binary("subtract"), "s", "a")
    w.add("g", Binary("greater"), "d", "t")
    return w.validate()


def test_probability_is_traversals_per_query():
    w = Workload(total=4.0)
    w.add("s", "backward", 1.0, 10)
    w.add("s", "backward", 2.0, 50)
    assert w.p("s", "backward") == pytest.approx(0.75)
    assert w.sizes("s", "backward") == [(0.25, 10), (0.5, 50)]
    assert w.p("s", "forward") == 0 and w.p("zzz", "backward") == 0


def test_everything_queries_each_operator_both_ways():
    w = everything(["a", "b"])
    assert {w.p(o, d) for o in "ab" for d in ("backward", "forward")} == {1.0}


def test_a_path_query_counts_each_step_once_with_its_weight(wf):
    w = from_queries([{"direction": "backward", "path": [["g", 0], ["d", 0], ["s", 0]],
                       "cells": 4, "weight": 3},
                      {"direction": "forward", "path": [["a", 0]], "cells": 1}], wf)
    assert w.total == 4
    assert w.p("g", "backward") == pytest.approx(0.75)
    assert w.p("s", "backward") == pytest.approx(0.75)
    assert w.p("a", "backward") == 0 and w.p("a", "forward") == pytest.approx(0.25)
    assert w.sizes("g", "backward") == [(0.75, 4)]


def test_a_target_query_visits_every_operator_between(wf):
    w = from_queries([{"direction": "backward", "from": "g", "to": "img", "cells": 2}], wf)
    visited = {o for (o, d) in w.traversals}
    assert visited == {"g", "d", "s", "a"}
    # "d" reads "a" directly and through "s": a is traversed once per input path into it
    assert w.p("a", "backward") == pytest.approx(1.0)
    fwd = from_queries([{"direction": "forward", "from": "img", "to": "s", "box": "0:2,0:2"}],
                       wf)
    assert {o for (o, d) in fwd.traversals} == {"a", "s"}
    assert fwd.sizes("a", "forward") == [(1.0, 4)]


def test_frontier_sizes_grow_with_the_sampled_fanin(wf):
    prof = OpProfile("s", "builtin", frozenset({Mode.FULL}), (20, 10), ((20, 10),), (20, 10),
                     1, 0.1, 0.1, 1.0,
                     modes={Mode.FULL: ModeStats(200, 200, 1800, 200, 200, in_by_input=(1800,))})
    w = from_queries([{"direction": "backward", "path": [["s", 0], ["a", 0]], "cells": 2}], wf,
                     {"s": prof})
    assert w.sizes("a", "backward") == [(1.0, 18)]  # 2 cells x fan-in 9


@pytest.mark.parametrize("bad, match", [
    ({"direction": "sideways", "path": [["a", 0]]}, "direction"),
    ({"direction": "backward", "path": [["nope", 0]]}, "no input 0 of operator 'nope'"),
    ({"direction": "backward", "from": "img", "to": "g"}, "no backward path"),
    ({"direction": "backward", "from": "g", "to": "zzz"}, "'to' must name an array"),
    ({"direction": "backward", "path": [["a", 0]], "weight": -1}, "non-negative"),
    ({"direction": "backward", "path": [["a", 0]], "weight": float("nan")}, "Got nan"),
    ({"direction": "backward", "path": [["a", 0]], "weight": float("inf")}, "Got inf"),
    ({"direction": "backward", "path": [["a", 0]], "weight": "-inf"}, "Got '-inf'"),
    ({"direction": "backward", "path": [["a", 0]], "weight": True}, "Got True"),
    ({"direction": "backward", "path": [["a", 0]], "cells": float("nan")}, "finite count"),
    ({"named": "BQ9"}, "no named query"),
])
def test_bad_queries_say_what_is_wrong(wf, bad, match):
    with pytest.raises(WorkloadError, match=match):
        from_queries([bad], wf)


def test_workload_files(tmp_path, wf):
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"queries": [{"direction": "forward", "path": [["a", 0]]}]}))
    assert from_file(p, wf).p("a", "forward") == 1.0
    p.write_text("{nope")
    with pytest.raises(WorkloadError, match="not valid JSON"):
        from_file(p, wf)
    with pytest.raises(WorkloadError, match="does not exist"):
        from_file(tmp_path / "missing.json", wf)
    p.write_text("[" * 100_000 + "]" * 100_000)  # Python's parser would run out of stack
    with pytest.raises(WorkloadError, match="nested 100,000 levels deep; expected at most 64"):
        from_file(p, wf)


def test_weights_whose_sum_overflows_are_refused(wf):
    q = {"direction": "backward", "path": [["a", 0]], "weight": 1e308}
    with pytest.raises(WorkloadError, match="add up to inf"):
        from_queries([q, q], wf)


def test_the_query_log_of_the_workflow_is_the_workload(tmp_path):
    cat = Catalog(tmp_path / "catalog.sqlite")
    mine = cat.create_run("tiny", {}, "blackbox", {})
    other = cat.create_run("other", {}, "blackbox", {})
    steps = [{"operator": "g", "input": 0, "in_count": 5}, {"operator": "d", "input": 0,
                                                            "in_count": 7}]
    cat.log_query(mine, "backward", "g", "s", [["g", 0], ["d", 0]], 5, 7, 0.1, steps)
    cat.log_query(mine, "forward", "img", "a", [["a", 0]], 3, 3, 0.1,
                  [{"operator": "a", "input": 0, "in_count": 3}])
    cat.log_query(other, "backward", "x", "y", [["g", 0]], 1, 1, 0.1,
                  [{"operator": "g", "input": 0, "in_count": 1}])
    w = from_query_log(cat, "tiny")
    assert w.total == 2
    assert w.p("g", "backward") == pytest.approx(0.5)
    assert w.sizes("d", "backward") == [(0.5, 7)]
    assert w.p("a", "forward") == pytest.approx(0.5)
    assert from_query_log(cat, "nothing").empty
