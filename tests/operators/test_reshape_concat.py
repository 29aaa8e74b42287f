"""Reshape (C order) and Concatenate (n inputs along an axis)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from operators import Concatenate, Reshape
from operators.geometry import bbox_of_box_in
from subzero.cells import Box
from subzero.errors import ShapeError, WorkflowError
from subzero.testing import bind, run_chunked

S = np.dtypes.StringDType()


def test_reshape_lineage_keeps_linear_indices():
    x = np.arange(12).reshape(3, 4)
    op = bind(Reshape((2, -1)), x)
    assert op.out_shape == (2, 6) and op.params() == {"shape": [2, -1]}
    f = np.zeros((2, 6), bool)
    f[1, 0] = True  # linear 6 = input (1, 2)
    assert np.argwhere(op.map_b(f, 0)).tolist() == [[1, 2]]
    # output row 1 (linear 6..11) wraps input rows 1 and 2: the block is their bounding box
    assert op.input_box(Box((1, 0), (2, 6)), 0) == Box((1, 0), (3, 4))
    out, _, _ = run_chunked(op, [x], 2)
    assert out.tolist() == x.reshape(2, 6).tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_bbox_of_box_in_equals_brute_force(out_shape, data):
    size = int(np.prod(out_shape))
    # an input shape with the same size: split the size's factors over up to 3 axes
    in_shape = [1] * data.draw(st.integers(1, 3))
    rest, f = size, 2
    while rest > 1:
        while rest % f == 0:
            in_shape[data.draw(st.integers(0, len(in_shape) - 1))] *= f
            rest //= f
        f += 1
    lo = [data.draw(st.integers(0, n - 1)) for n in out_shape]
    hi = [data.draw(st.integers(a + 1, n)) for a, n in zip(lo, out_shape)]
    box = Box(tuple(lo), tuple(hi))
    coords = np.stack(np.unravel_index(box.linear(out_shape).astype(np.intp), in_shape), 1)
    want = Box(tuple(coords.min(0)), tuple(coords.max(0) + 1))
    assert bbox_of_box_in(box, out_shape, tuple(in_shape)) == want


@pytest.mark.parametrize("shape, match", [
    ((5, 3), r"'r' \(Reshape\): cannot reshape \(3, 4\) \(size 12\) to \(5, 3\)"),
    ((5, -1), r"cannot reshape \(3, 4\) \(size 12\) to \(5, -1\)"),
    ((0, -1), r"cannot reshape"),
])
def test_reshape_size_mismatch(shape, match):
    with pytest.raises(ShapeError, match=match):
        Reshape(shape).bind("r", [(3, 4)], ["f8"])


def test_reshape_parameter_errors():
    with pytest.raises(WorkflowError, match=r"at most one -1. Got \(-1, -1\)"):
        Reshape((-1, -1))
    with pytest.raises(WorkflowError, match="Reshape: shape must be a sequence of ints"):
        Reshape("ab")


def test_concatenate_segments_and_entire_array_flag():
    a, b = np.array([[1, 2]]), np.array([[3, 4], [5, 6]])
    op = bind(Concatenate(0), a, b)
    out, _, _ = run_chunked(op, [a, b], 2)
    assert out.tolist() == [[1, 2], [3, 4], [5, 6]]
    # the whole of b reaches only rows 1..2: the entire-array shortcut must not apply
    assert not op.all_to_all(0) and not op.all_to_all(1)
    assert op.map_f(np.ones((2, 2), bool), 1).tolist() == [[False, False], [True, True],
                                                           [True, True]]
    f = np.zeros((3, 2), bool)
    f[0, 1] = True
    assert op.map_b(f, 0).tolist() == [[False, True]] and not op.map_b(f, 1).any()
    # a chunk of rows 0..1 reads row 0 of a and row 0 of b; rows 1..2 read nothing of a
    assert op.input_box(Box((0, 0), (2, 2)), 1) == Box((0, 0), (1, 2))
    assert op.input_box(Box((1, 0), (3, 2)), 0).is_empty()


def test_concatenate_single_input_is_all_to_all():
    op = bind(Concatenate(1), np.zeros((2, 3)))
    assert op.all_to_all(0) and op.out_shape == (2, 3)


def test_concatenate_mixes_string_kinds_into_stringdtype():
    a, b = np.array([["x"]]), np.array([["yy"]], dtype=S)
    op = bind(Concatenate(1), a, b)
    assert op.out_dtype == S
    out, _, _ = run_chunked(op, [a, b], 2)
    assert out.tolist() == [["x", "yy"]]
    assert bind(Concatenate(0), np.array(["a"]), np.array(["bcd"])).out_dtype == np.dtype("<U3")


@pytest.mark.parametrize("shapes, dtypes, err, match", [
    ([(2, 3), (2, 4)], ["f8", "f8"], ShapeError,
     r"'c' \(Concatenate\): input shapes \(2, 3\), \(2, 4\) differ on an axis other than 0"),
    ([(2, 3), (2,)], ["f8", "f8"], ShapeError, "differ on an axis other than 0"),
    ([(), ()], ["f8", "f8"], ShapeError, "cannot concatenate 0-d arrays"),
    ([(2, 3), (2, 3)], ["<U1", "f8"], WorkflowError, "cannot concatenate strings with numbers"),
])
def test_concatenate_bad_inputs(shapes, dtypes, err, match):
    with pytest.raises(err, match=match):
        Concatenate(0).bind("c", shapes, dtypes)


def test_concatenate_bad_axis():
    with pytest.raises(ShapeError, match=r"'c' \(Concatenate\): axis 2 is out of range for "
                                         "2-d input"):
        Concatenate(2).bind("c", [(2, 3), (2, 3)], ["f8", "f8"])
    with pytest.raises(WorkflowError, match="Concatenate: axis must be an int. Got 'rows'"):
        Concatenate("rows")
    with pytest.raises(ShapeError, match="needs at least one input"):
        Concatenate(0).bind("c", [], [])
