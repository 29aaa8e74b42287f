"""Where(cond, a, b) and MaskReplace (the astronomy badpixrm)."""

import numpy as np
import pytest

from operators import MaskReplace, Where
from subzero.errors import WorkflowError
from subzero.testing import bind, run_chunked

S = np.dtypes.StringDType()


def test_badpixrm_replaces_zero_and_masked_pixels_with_90():
    img = np.array([[0, 5], [7, 8]], dtype=np.uint16)
    sat = np.array([[0, 0], [1, 0]], dtype=np.uint16)
    op = bind(MaskReplace(90.0, bad_values=[0]), img, sat)
    assert op.out_dtype == np.float64  # uint16 widened by the float constant, like numpy
    out, _, _ = run_chunked(op, [img, sat], 2)
    assert out.tolist() == [[90.0, 5.0], [90.0, 8.0]]


def test_mask_replace_keeps_float32_and_ignores_zero_without_bad_values():
    img = np.array([0.0, 3.0], dtype=np.float32)
    op = bind(MaskReplace(-1.0), img, np.array([False, True]))
    assert op.out_dtype == np.float32
    out, _, _ = run_chunked(op, [img, np.array([False, True])], 1)
    assert out.tolist() == [0.0, -1.0]


def test_where_broadcasts_a_constant_else_branch():
    cond = np.array([[True, False], [False, True]])
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    op = bind(Where(), cond, a, np.array([[0.0]]))
    out, _, _ = run_chunked(op, [cond, a, np.array([[0.0]])], 2)
    assert out.tolist() == [[1.0, 0.0], [0.0, 4.0]]
    f = np.zeros((2, 2), bool)
    f[1, 0] = True
    # coordinate lineage: every input at the same cell, the 1x1 input at its single cell
    assert op.map_b(f, 0).tolist() == [[False, False], [True, False]]
    assert op.map_b(f, 2).tolist() == [[True]]
    assert op.map_f(np.ones((1, 1), bool), 2).all()


def test_where_merges_fixed_and_variable_width_strings():
    op = bind(Where(), np.array([True, False]), np.array(["x", "y"]),
              np.array(["-"], dtype=S))
    assert op.out_dtype == S
    out, _, _ = run_chunked(op, [np.array([True, False]), np.array(["x", "y"]),
                                 np.array(["-"], dtype=S)], 2)
    assert out.tolist() == ["x", "-"]


@pytest.mark.parametrize("dtypes, match", [
    (["<U1", "f8", "f8"], (r"'w' \(Where\): the condition \(input 0\) must be boolean or "
                           r"numeric. Got <U1")),
    (["?", "<U1", "f8"], r"'w' \(Where\): cannot merge strings with numbers"),
])
def test_where_rejects_bad_dtypes(dtypes, match):
    with pytest.raises(WorkflowError, match=match):
        Where().bind("w", [(2,), (2,), (2,)], dtypes)


def test_mask_replace_rejects_bad_parameters_and_dtypes():
    with pytest.raises(WorkflowError, match="MaskReplace: value must be a number. Got 'x'"):
        MaskReplace("x")
    with pytest.raises(WorkflowError, match=r"bad_values must be numbers. Got \['a'\]"):
        MaskReplace(1.0, bad_values=["a"])
    with pytest.raises(WorkflowError, match=r"'b' \(MaskReplace\): the image \(input 0\) must "
                                            "be numeric. Got <U1"):
        MaskReplace().bind("b", [(2,), (2,)], ["<U1", "?"])
    with pytest.raises(WorkflowError, match=r"the mask \(input 1\) must be boolean or numeric"):
        MaskReplace().bind("b", [(2,), (2,)], ["f8", "<U1"])
