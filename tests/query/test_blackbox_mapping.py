"""Black box with mapping functions: an operator that supports ``MAP`` but not ``FULL``.

Under ``--strategy blackbox`` a query step of such an operator is answered with its exact
mapping functions (not by re-executing it, which traced every cell of a tile as depending
on every cell the tile read), and re-executing it in tracing mode reports the pairs of its
mapping functions (:meth:`subzero.operator.Operator.trace_mapped`). An operator without
``MAP`` still re-executes as before.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from scipy import ndimage

from operators import UDF, Affine, stencil
from subzero.cells import Box, dilate, size_of
from subzero.chunking import Chunking, task_grid
from subzero.engine.reexec import reexecute
from subzero.engine.runner import run_workflow
from subzero.engine.runs import load_run
from subzero.frontier import mask_from_linear
from subzero.modes import Mode
from subzero.query import QueryExecutor
from subzero.query.executor import MAPPED_NOTE
from subzero.runtime import ChunkContext, TaskContext
from subzero.testing import bind
from subzero.workflow import Workflow

SHAPE = (40, 30)


class MappedMax(UDF):
    """The maximum of each cell's 3 x 3 box (clipped at the border): exact mapping
    functions (the box), and no tracing of its own."""

    n_inputs = 1
    parallelism = stencil(1)

    def supported_modes(self):
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx, x):
        return ndimage.maximum_filter(x, size=3, mode="nearest")[ctx.chunk.interior(0)]

    def map_b(self, f, i):
        return dilate(f, 1)

    def map_f(self, f, i):
        return dilate(f, 1)


class LinearMappedMax(MappedMax):
    """:class:`MappedMax` mapping linear indices only: its mask form must not be used."""

    def map_b(self, f, i):
        raise AssertionError("trace_mapped used map_b where map_b_lin is given")

    def map_b_lin(self, out_lin, i):
        return np.flatnonzero(dilate(mask_from_linear(out_lin, self.out_shape), 1)
                              ).astype(np.uint64)


class OpaqueMax(MappedMax):
    """:class:`MappedMax` declaring no lineage at all (black box only)."""

    def supported_modes(self):
        return frozenset({Mode.BLACKBOX})


def make_sky(shape, seed):
    return np.random.default_rng(seed).normal(100.0, 5.0, shape)


def build() -> Workflow:
    wf = Workflow("mapped", "an operator with mapping functions and no tracing")
    wf.input("sky", SHAPE, "float64", source=partial(make_sky, SHAPE, 3))
    wf.add("calib", Affine(scale=2.0), "sky")
    wf.add("boxmax", MappedMax(), "calib")
    wf.add("opaque", OpaqueMax(), "calib")
    return wf


@pytest.fixture(scope="module")
def blackbox_run(tmp_path_factory):
    home = tmp_path_factory.mktemp("bbmap")
    res = run_workflow(build(), home, strategy="blackbox", chunking=Chunking(split=2),
                       where="driver")
    run = load_run(home, res.run)
    assert run.strategies("boxmax")[0].name == "blackbox"
    return run


@pytest.fixture
def qx(blackbox_run):
    q = QueryExecutor(blackbox_run, where="driver", log=False)
    yield q
    q.close()


def _box_cells(center, radius=1, shape=SHAPE):
    lo = [max(0, c - radius) for c in center]
    hi = [min(n, c + radius + 1) for c, n in zip(center, shape)]
    return sorted(map(list, Box(tuple(lo), tuple(hi)).coords().tolist()))


def _refuse_to_run(self, ctx, *blocks):
    raise AssertionError("the operator ran: a mapped black-box step must not execute it")


@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_a_one_cell_query_returns_the_mapping_cells_not_a_tile(qx, direction, monkeypatch):
    monkeypatch.setattr(MappedMax, "run", _refuse_to_run)
    if direction == "backward":
        res = qx.backward([(7, 9)], "boxmax", path=[("boxmax", 0)])
    else:
        res = qx.forward([(7, 9)], "calib", path=[("boxmax", 0)])
    assert sorted(res.coords.tolist()) == _box_cells((7, 9))
    (step,) = res.steps
    assert step.method == "map" and step.note == MAPPED_NOTE
    assert step.in_count == 1 and step.out_count == 9


def test_a_corner_cell_maps_to_its_clipped_box(qx):
    res = qx.backward([(0, 0)], "boxmax", path=[("boxmax", 0)])
    assert sorted(res.coords.tolist()) == [[0, 0], [0, 1], [1, 0], [1, 1]]


def test_a_path_through_a_mapped_step_and_a_reexecuted_one(qx):
    res = qx.backward([(20, 15)], "boxmax", to="sky")
    assert sorted(res.coords.tolist()) == _box_cells((20, 15))
    methods = {s.operator: s.method for s in res.steps}
    assert methods == {"boxmax": "map", "calib": "reexec"}


def test_forced_reexec_also_answers_with_the_mapping_functions(qx):
    res = qx.backward([(7, 9)], "boxmax", path=[("boxmax", 0)], method="reexec")
    assert res.count == 9 and res.steps[0].method == "map"


def test_an_operator_without_map_still_reexecutes_its_tile(qx):
    res = qx.backward([(7, 9)], "opaque", path=[("opaque", 0)])
    (step,) = res.steps
    assert step.method == "reexec" and step.note == ""
    # every cell the tile read: the chunk 0:20, 0:15 and its halo
    assert res.count == size_of(Box((0, 0), (21, 16)).shape)


def _traced(op, box):
    """The pairs ``op.trace_mapped`` reports for output block ``box``: per output cell
    (linear index), its input cells."""
    in_box = op.input_box(box, 0)
    ch = ChunkContext((0,), box, (in_box,), op.out_shape, op.in_shapes)
    ctx = TaskContext(ch, frozenset({Mode.FULL}), op.name)
    op.trace_mapped(ctx)
    pairs = ctx.full_pairs()
    assert ctx.capture_s > 0
    return {int(o): set(pairs.ins[0].row(k).tolist())
            for k, o in enumerate(pairs.out.values.tolist())}


def _brute(op, cells):
    """Per output cell, its input cells by ``map_b`` of a one-cell mask."""
    return {int(o): set(np.flatnonzero(MappedMax.map_b(op, mask_from_linear([o], op.out_shape),
                                                       0)).tolist())
            for o in cells}


@pytest.mark.parametrize("cls", [MappedMax, LinearMappedMax])
def test_trace_mapped_pairs_equal_map_b_for_every_cell(cls):
    op = bind(cls(), np.zeros((7, 5)))
    got: dict[int, set[int]] = {}
    for _, box in task_grid(op, (3, 2)):
        mine = _traced(op, box)
        assert sorted(mine) == box.linear(op.out_shape).tolist()
        got.update(mine)
    assert got == _brute(op, range(size_of(op.out_shape)))


def test_reexecution_in_tracing_mode_reports_the_mapping_pairs(blackbox_run):
    op = blackbox_run.op("boxmax")
    results = reexecute(blackbox_run, "boxmax", where="driver")
    got: dict[int, set[int]] = {}
    for res in results:
        full = res["full"]
        assert len(full) == size_of(Box.full(op.out_shape).shape) // len(results)
        got.update({int(o): set(full.ins[0].row(k).tolist())
                    for k, o in enumerate(full.out.values.tolist())})
    assert got == _brute(op, range(size_of(op.out_shape)))


def test_reexecution_of_an_operator_without_map_is_still_all_to_all(blackbox_run):
    results = reexecute(blackbox_run, "opaque", chunks=[(0, 0)], where="driver")
    (full,) = [res["full"] for res in results]
    assert len(full) == 1  # one pair: the chunk's cells on every cell it read
    assert full.out.values.size == 20 * 15 and full.ins[0].values.size == 21 * 16
