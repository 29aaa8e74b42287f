"""Reductions: global and per axis, kept / dropped / broadcast axes, MeanBroadcast."""

import numpy as np
import pytest

from operators import GLOBAL, MeanBroadcast, Reduce
from subzero.cells import Box
from subzero.errors import ShapeError, WorkflowError
from subzero.modes import Mode
from subzero.operator import BLOCKWISE
from subzero.testing import bind, run_chunked

X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


def test_cumodds_each_patient_depends_on_its_row():
    op = bind(Reduce("sum", axis=1), X)
    assert op.out_shape == (2, 1) and op.parallelism is BLOCKWISE
    out, _, _ = run_chunked(op, [X], 2)
    assert out.tolist() == [[6.0], [15.0]]
    f = np.array([[False], [True]])
    assert op.map_b(f, 0).tolist() == [[False] * 3, [True] * 3]
    fi = np.zeros(X.shape, bool)
    fi[0, 2] = True
    assert op.map_f(fi, 0).tolist() == [[True], [False]]
    # a chunk of row 1 reads all of row 1
    assert op.input_box(Box((1, 0), (2, 1)), 0) == Box((1, 0), (2, 3))


def test_meanoverscan_is_all_to_one_and_global():
    one = np.array([[7.0]])
    op = bind(Reduce("mean"), one)
    assert op.out_shape == (1, 1) and op.parallelism is GLOBAL and op.all_to_all(0)
    out, pairs, _ = run_chunked(op, [one], 1, (Mode.FULL,))
    assert out.tolist() == [[7.0]] and len(pairs) == 1


def test_bgmean_broadcasts_the_global_mean_and_keeps_its_old_interface():
    op = bind(MeanBroadcast(), X)
    assert op.params() == {} and op.parallelism is GLOBAL and op.out_dtype == np.float64
    out, pairs, _ = run_chunked(op, [X], 2, (Mode.FULL,))
    assert np.array_equal(out, np.full(X.shape, 3.5))
    assert len(pairs) == 1 and pairs.in_cells == 6 and pairs.out_cells == 6  # one region pair
    f = np.zeros(X.shape, bool)
    f[1, 1] = True
    assert op.map_b(f, 0).all() and op.map_f(f, 0).all()


def test_dropping_axes_and_a_0d_global_result():
    op = bind(Reduce("max", axis=0, keepdims=False), X)
    assert op.out_shape == (3,)
    f = np.array([False, True, False])
    assert op.map_b(f, 0).tolist() == [[False, True, False]] * 2
    scalar = bind(Reduce("sum", keepdims=False), X)
    assert scalar.out_shape == ()
    out, _, _ = run_chunked(scalar, [X], 1)
    assert float(out) == 21.0


def test_broadcast_per_axis_splits_along_the_kept_axis():
    op = bind(Reduce("min", axis=0, broadcast=True), X)
    assert op.out_shape == X.shape and op.parallelism is BLOCKWISE
    assert op.input_box(Box((1, 1), (2, 3)), 0) == Box((0, 1), (2, 3))
    out, _, _ = run_chunked(op, [X], 2)
    assert out.tolist() == [[1.0, 2.0, 3.0]] * 2


def test_multi_axis_reduction_is_bit_identical_for_every_chunking():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 30, 5)) * 1e3
    op = bind(Reduce("mean", axis=(0, 2)), x)
    outs = [run_chunked(op, [x], split)[0] for split in (1, 2, 3, 7)]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    assert np.allclose(outs[0], x.mean(axis=(0, 2), keepdims=True), rtol=1e-13, atol=0)


def test_dtype_is_the_accumulator_and_output():
    u = np.full((2, 2), 60000, dtype=np.uint16)
    op = bind(Reduce("sum", dtype="float64"), u)
    assert op.out_dtype == np.float64
    assert run_chunked(op, [u])[0].tolist() == [[240000.0]]
    assert bind(Reduce("max", axis=1, dtype="float32"), u).out_dtype == np.float32


@pytest.mark.parametrize("make, match", [
    (lambda: Reduce("average"), "Reduce: unknown reduction 'average'; expected one of all, any"),
    (lambda: Reduce("sum", keepdims=False, broadcast=True), "cannot be combined with keepdims"),
    (lambda: Reduce("sum", dtype="bogus"), "Reduce: 'bogus' is not a numpy dtype"),
])
def test_bad_parameters(make, match):
    with pytest.raises(WorkflowError, match=match):
        make()


@pytest.mark.parametrize("make, dtype, err, match", [
    (lambda: Reduce("sum", axis=2), "f8", ShapeError,
     r"'r' \(Reduce\): axis 2 is out of range for 2-d input"),
    (lambda: Reduce("sum", axis=(1, -1)), "f8", ShapeError, r"repeated axis in \(1, -1\)"),
    (lambda: Reduce("sum", axis="rows"), "f8", WorkflowError, "axis must be an int. Got 'rows'"),
    (lambda: Reduce("mean"), "<U3", WorkflowError,
     r"'r' \(Reduce\): cannot compute 'mean' of <U3"),
    (lambda: MeanBroadcast(axis=-3), "f8", ShapeError, r"\(MeanBroadcast\): axis -3 is out"),
])
def test_bad_axes_and_dtypes_at_bind(make, dtype, err, match):
    with pytest.raises(err, match=match):
        make().bind("r", [(2, 3)], [dtype])
