"""Subarray (box offsets, strides, axis permutation) and Transpose."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from operators import Subarray, Transpose
from subzero.cells import Box
from subzero.errors import ShapeError, WorkflowError
from subzero.testing import assert_mapping_matches_trace, bind, run_chunked

S = np.dtypes.StringDType()
IMG = np.arange(30.0).reshape(6, 5)


def test_overscan_corner_maps_to_and_from_its_single_cell():
    op = bind(Subarray("0:1, 0:1"), IMG)
    assert op.out_shape == (1, 1) and not op.all_to_all(0)
    back = op.map_b(np.ones((1, 1), bool), 0)
    assert np.argwhere(back).tolist() == [[0, 0]]
    corner = np.zeros(IMG.shape, bool)
    corner[:3, :3] = True  # a corner block of the image reaches the overscan value
    assert op.map_f(corner, 0).tolist() == [[True]]
    away = np.zeros(IMG.shape, bool)
    away[2:, 2:] = True
    assert op.map_f(away, 0).tolist() == [[False]]


def test_strided_selection_input_box_and_lineage():
    op = bind(Subarray("1:6:2, 1:"), IMG)
    assert op.out_shape == (3, 4)
    # output rows 1..2 are input rows 3 and 5: the block is rows 3..5
    assert op.input_box(Box((1, 0), (3, 2)), 0) == Box((3, 1), (6, 3))
    f = np.zeros(op.out_shape, bool)
    f[2, 3] = True
    assert np.argwhere(op.map_b(f, 0)).tolist() == [[5, 4]]
    fi = np.zeros(IMG.shape, bool)
    fi[2, :] = True  # an unselected row reaches nothing
    assert not op.map_f(fi, 0).any()
    out, _, _ = run_chunked(op, [IMG], 2)
    assert out.tolist() == IMG[1:6:2, 1:].tolist()


def test_genomics_names_is_column_zero_as_a_row():
    table = np.array([[f"feat{i}", "desc", "t", "c", "Y", "N"] for i in range(4)], dtype=S)
    op = bind(Subarray(":, 0", axes=(1, 0)), table)
    assert op.out_shape == (1, 4)
    out, _, _ = run_chunked(op, [table], 2)
    assert out.tolist() == [["feat0", "feat1", "feat2", "feat3"]]
    # output (0, 2) is table cell (2, 0)
    f = np.zeros((1, 4), bool)
    f[0, 2] = True
    assert np.argwhere(op.map_b(f, 0)).tolist() == [[2, 0]]
    assert op.input_box(Box((0, 1), (1, 3)), 0) == Box((1, 0), (3, 1))


def test_transpose_defaults_to_reversing_axes():
    cube = np.arange(24).reshape(2, 3, 4)
    op = bind(Transpose(), cube)
    assert op.out_shape == (4, 3, 2) and op.all_to_all(0)
    assert op.params() == {"axes": None}
    out, _, _ = run_chunked(op, [cube], 2)
    assert np.array_equal(out, cube.T)
    f = np.zeros(op.out_shape, bool)
    f[3, 1, 0] = True
    assert np.argwhere(op.map_b(f, 0)).tolist() == [[0, 1, 3]]


def test_whole_selection_is_all_to_all_and_params_round_trip():
    op = bind(Subarray("0:6, :"), IMG)
    assert op.all_to_all(0)
    again = bind(Subarray(**op.params()), IMG)
    assert again.params() == op.params() == {"slices": "0:6,:", "axes": None}
    assert Subarray([slice(0, 1), (1, 3)]).params()["slices"] == "0:1,1:3"
    assert Subarray(Box((0, 1), (2, 3))).params()["slices"] == "0:2,1:3"


@pytest.mark.parametrize("slices, axes, match", [
    ("0:1", None, r"'s' \(Subarray\): 1 slice\(s\) '0:1' for a 2-d input of shape \(6, 5\)"),
    ("0:7, :", None, r"slice '0:7' on axis 0 is outside 0:6"),
    ("9, :", None, r"slice '9:10' on axis 0 is outside 0:6"),
    ("3:3, :", None, r"slice '3:3' on axis 0 selects no cells"),
    (":, -6:", None, r"slice '-6:' on axis 1 is outside 0:5"),
    (":, :", (0, 0), r"axes \[0, 0\] are not a permutation of the 2 input axes"),
    (":, :", (0, 2), r"axes \[0, 2\] are not a permutation"),
])
def test_subarray_shape_errors_name_the_operator_and_value(slices, axes, match):
    with pytest.raises(ShapeError, match=match):
        Subarray(slices, axes).bind("s", [(6, 5)], ["f8"])


@pytest.mark.parametrize("slices, match", [
    ("0:a, :", r"Subarray: bad slice '0:a' in '0:a, :'; expected 'start:stop\[:step\]'"),
    ("::0, :", "Subarray: slice step must be positive. Got 0"),
    ("::-1, :", "Subarray: slice step must be positive. Got -1"),
    ("0:1:2:3", "Subarray: bad slice '0:1:2:3'"),
    (3.5, "Subarray: expected slices like '0:1, 0:1'"),
    ([slice(0.5, 2)], "must have int bounds"),
    ([True], "bad slice True"),
])
def test_subarray_parameter_errors(slices, match):
    with pytest.raises(WorkflowError, match=match):
        Subarray(slices)


def test_transpose_errors():
    with pytest.raises(WorkflowError, match="Transpose: axes must be a sequence of ints"):
        Transpose("ab")
    with pytest.raises(ShapeError, match=r"'t' \(Transpose\): axes \[1\] are not a permutation "
                                         "of the 2 input axes"):
        Transpose((1,)).bind("t", [(2, 3)], ["f8"])


@st.composite
def selections(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    slices = []
    for n in shape:
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(a + 1, n))
        slices.append(slice(a, b, draw(st.integers(1, 3))))
    perm = draw(st.permutations(range(len(shape))))
    return shape, tuple(slices), tuple(perm), draw(st.integers(1, 4))


@settings(max_examples=40, deadline=None)
@given(selections())
def test_any_selection_and_permutation_equals_numpy_and_its_trace(sel):
    shape, slices, perm, split = sel
    x = np.arange(int(np.prod(shape))).reshape(shape)
    op = bind(Subarray(slices, axes=perm), x)
    out, _, _ = run_chunked(op, [x], split)
    assert np.array_equal(out, x[slices].transpose(perm))
    assert_mapping_matches_trace(op, [x], split=split, max_cells=10)
