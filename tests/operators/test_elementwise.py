"""Elementwise built-ins: ufuncs with arrays or a constant, casts, logistic, classifier."""

import numpy as np
import pytest

from operators import Affine, Binary, Cast, Classify, Copy, Logistic, Scalar, Unary
from subzero.errors import WorkflowError
from subzero.testing import bind, run_chunked

S = np.dtypes.StringDType()


def test_aliases_name_the_same_ufuncs():
    a, b = np.array([1.0, 5.0]), np.array([3.0, 3.0])
    assert Binary(">").kernel(a, b).tolist() == [False, True]
    assert Binary("ge").kernel(a, b).tolist() == [False, True]
    assert Binary("and").kernel(a > 2, b > 2).tolist() == [False, True]
    assert Unary("-").kernel(a).tolist() == [-1.0, -5.0]
    assert Unary("not").kernel(np.array([True])).tolist() == [False]


def test_scalar_constant_follows_numpy_python_scalar_rules():
    x32 = np.array([[1.5, 2.0]], dtype=np.float32)
    op = bind(Scalar("multiply", 2.0), x32)
    assert op.out_dtype == np.float32
    out, _, _ = run_chunked(op, [x32], 2)
    assert out.tolist() == [[3.0, 4.0]]
    assert bind(Scalar("subtract", 1, left=True), np.zeros(3, np.int16)).out_dtype == np.int16
    assert Scalar("subtract", 1.0, left=True).kernel(np.array([0.25])).tolist() == [0.75]
    assert Scalar("greater", 0.5).kernel(np.array([0.5, 0.6])).tolist() == [False, True]


def test_scalar_compares_strings_of_both_kinds():
    for arr in (np.array(["NA", "Y"]), np.array(["NA", "Y"], dtype=S)):
        op = bind(Scalar("equal", "NA"), arr)
        assert op.out_dtype == bool
        out, _, _ = run_chunked(op, [arr], 1)
        assert out.tolist() == [True, False]


def test_classify_is_strictly_above_and_nan_is_below():
    x = np.array([[0.5, 0.5000001], [np.nan, 1.0]])
    op = bind(Classify(), x)
    assert op.out_dtype == S
    out, _, _ = run_chunked(op, [x], 2)
    assert out.tolist() == [["N", "Y"], ["N", "Y"]]
    assert Classify(threshold=0, labels=["neg", "pos"]).kernel(np.array([-1, 0, 1])).tolist() \
        == ["neg", "neg", "pos"]


def test_logistic_dtype_and_no_overflow():
    assert bind(Logistic(), np.zeros(2, np.int64)).out_dtype == np.float64
    assert bind(Logistic(), np.zeros(2, np.float32)).out_dtype == np.float32
    with np.errstate(all="raise"):
        out = Logistic().kernel(np.array([-1000.0, 0.0, 1000.0]))
    assert out.tolist() == [0.0, 0.5, 1.0]


def test_cast_to_strings_and_copy_of_fixed_width_strings():
    op = bind(Cast(str), np.array([1, 20]))
    assert op.out_dtype == S and op.params() == {"dtype": "T"}
    assert Cast(**op.params()).params() == op.params()  # plain data round-trips
    out, _, _ = run_chunked(op, [np.array([1, 20])], 2)
    assert out.tolist() == ["1", "20"]
    u = np.array([["ab", "c"]])
    cp = bind(Copy(), u)
    assert cp.out_dtype == u.dtype and cp.params() == {}
    out, _, _ = run_chunked(cp, [u], 2)
    assert out.tolist() == [["ab", "c"]] and out.dtype == u.dtype


def test_affine_keeps_its_parameters():
    op = Affine(scale=0.5, offset=-1.0)
    assert op.params() == {"scale": 0.5, "offset": -1.0}
    assert op.kernel(np.array([4], dtype=np.uint16)).tolist() == [1.0]


@pytest.mark.parametrize("make, match", [
    (lambda: Unary("add"), "Unary: 'add' is not a unary numpy ufunc"),
    (lambda: Binary("sqrt"), "Binary: 'sqrt' is not a binary numpy ufunc"),
    (lambda: Binary("bogus"), "'bogus' is not a binary"),
    (lambda: Scalar("add", [1, 2]), (r"Scalar\('add'\): constant must be a number or a string. "
                                     r"Got \[1, 2\]")),
    (lambda: Affine("two"), "Affine: scale and offset must be numbers. Got 'two'"),
    (lambda: Cast("bogus"), "Cast: 'bogus' is not a numpy dtype"),
    (lambda: Classify([0.5, 0.2], ["a", "b", "c"]), "strictly increasing.*0.5, 0.2"),
    (lambda: Classify(0.5, ["only"]), "1 threshold.* need 2 labels. Got 1"),
    (lambda: Classify(0.5, "NY"), "labels must be a sequence of strings. Got 'NY'"),
    (lambda: Classify("high"), "thresholds must be numbers. Got 'high'"),
])
def test_bad_parameters_raise_naming_the_value(make, match):
    with pytest.raises(WorkflowError, match=match):
        make()


@pytest.mark.parametrize("make, dtype, match", [
    (lambda: Unary("isnan"), "<U2", r"'op' \(Unary\): ufunc 'isnan' does not apply to <U2"),
    (lambda: Classify(), "<U2", r"'op' \(Classify\): needs a real-valued input. Got <U2"),
    (lambda: Logistic(), S, r"'op' \(Logistic\): needs a real-valued input"),
    (lambda: Affine(), "<U2", r"'op' \(Affine\): needs a numeric input"),
    (lambda: Scalar("subtract", "x"), "f8", r"'op' \(Scalar\): ufunc 'subtract'"),
])
def test_unsupported_input_dtypes_fail_at_bind_naming_the_operator(make, dtype, match):
    with pytest.raises(WorkflowError, match=match):
        make().bind("op", [(2, 2)], [dtype])


def test_cast_of_unparsable_strings_is_a_user_error():
    op = bind(Cast("float64"), np.array(["1.5", "NA"]))
    with pytest.raises(WorkflowError, match=r"'op' \(Cast\): cannot cast to float64"):
        run_chunked(op, [np.array(["1.5", "NA"])], 1)
