"""The sparse mapping functions (``map_b_lin`` / ``map_f_lin``: a few cells as linear
indices, in time proportional to the cells) agree with the mask ones for every operator
that has them, for any set of cells; the all-to-all answer is built only when asked."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import Binary, Cast, Copy, MaskReplace, Subarray, Transpose
from subzero.frontier import Frontier, mask_from_linear
from workflows.astro_udfs import astronomy_udfs

SHAPE = (9, 7)
UDFS = astronomy_udfs()


def _ops():
    yield Cast("float64").bind("cast", [SHAPE], ["u2"])
    yield Copy().bind("copy", [SHAPE], ["f8"])
    yield MaskReplace(90.0, bad_values=[0]).bind("mr", [SHAPE, SHAPE], ["f8", "u1"])
    yield Binary("subtract").bind("bin", [SHAPE, (1, 1)], ["f8", "f8"])  # broadcast input
    yield Binary("add").bind("row", [SHAPE, (1, 7)], ["f8", "f8"])
    yield Binary("add").bind("vec", [SHAPE, (7,)], ["f8", "f8"])
    yield Subarray("0:1, 0:1").bind("corner", [SHAPE], ["f8"])
    yield Subarray("1:8:3, 2::2").bind("strided", [SHAPE], ["f8"])
    yield Subarray("2:, :5", axes=(1, 0)).bind("swap", [SHAPE], ["f8"])
    yield Transpose((1, 0)).bind("t", [SHAPE], ["f8"])
    yield UDFS["cr1"].bind("cr1", [SHAPE], ["f8"])
    yield UDFS["rmcr"].bind("rmcr", [SHAPE, SHAPE], ["f8", "bool"])
    yield UDFS["clust"].bind("clust", [SHAPE], ["f8"])


OPS = list(_ops())


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_sparse_mapping_equals_the_mask_mapping(op, data):
    for i, in_shape in enumerate(op.in_shapes):
        out_size, in_size = int(np.prod(op.out_shape)), int(np.prod(in_shape))
        lin = np.array(sorted(data.draw(st.sets(st.integers(0, out_size - 1), max_size=12))),
                       dtype=np.uint64)
        got = op.map_b_lin(lin, i)
        if got is not None:
            want = np.flatnonzero(op.map_b(mask_from_linear(lin, op.out_shape), i))
            assert np.array_equal(np.asarray(got, np.int64), want), (op.name, i, lin)
        lin = np.array(sorted(data.draw(st.sets(st.integers(0, in_size - 1), max_size=12))),
                       dtype=np.uint64)
        got = op.map_f_lin(lin, i)
        if got is not None:
            want = np.flatnonzero(op.map_f(mask_from_linear(lin, in_shape), i))
            assert np.array_equal(np.asarray(got, np.int64), want), (op.name, i, lin)


def test_the_library_gives_sparse_forms_where_it_is_cheap():
    have = {op.name for op in OPS if op.map_b_lin(np.array([0], np.uint64), 0) is not None}
    assert have == {op.name for op in OPS}
    bcast = OPS[3]
    assert bcast.map_f_lin(np.array([0], np.uint64), 1) is None  # reaches every cell


def test_everything_frontier_is_lazy_and_exact():
    f = Frontier.everything((3, 4))
    assert f.n == 12 and f.full and not f.sparse
    assert f.union(Frontier((3, 4), lin=np.array([1], np.uint64))) is f
    assert f.mask.all() and f.lin.tolist() == list(range(12))
