"""MatMul: out[i, j] depends on row i of a and column j of b."""

import numpy as np
import pytest

from operators import MatMul
from subzero.cells import Box
from subzero.errors import ShapeError, WorkflowError
from subzero.modes import Mode
from subzero.testing import bind, full_backward, run_chunked

A = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
B = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 3.0]])


def test_output_cell_depends_on_its_row_and_column():
    op = bind(MatMul(), A, B)
    out, pairs, _ = run_chunked(op, [A, B], 2, (Mode.FULL,))
    assert out.tolist() == (A @ B).tolist()
    f = np.zeros((3, 3), bool)
    f[2, 1] = True
    assert np.argwhere(op.map_b(f, 0)).tolist() == [[2, 0], [2, 1]]
    assert np.argwhere(op.map_b(f, 1)).tolist() == [[0, 1], [1, 1]]
    assert np.array_equal(full_backward(pairs, f, 0, A.shape), op.map_b(f, 0))
    fa = np.zeros(A.shape, bool)
    fa[0, 1] = True  # one cell of a row of a reaches that whole output row
    assert op.map_f(fa, 0).tolist() == [[True] * 3, [False] * 3, [False] * 3]
    assert op.input_box(Box((1, 2), (3, 3)), 0) == Box((1, 0), (3, 2))
    assert op.input_box(Box((1, 2), (3, 3)), 1) == Box((0, 2), (2, 3))
    assert op.all_to_all(0) and op.all_to_all(1)


@pytest.mark.parametrize("shapes, dtypes, err, match", [
    ([(3, 2), (3, 2)], ["f8", "f8"], ShapeError,
     r"'mm' \(MatMul\): cannot multiply \(3, 2\) by \(3, 2\); expected 2-d \(n, k\) and \(k, m\)"),
    ([(3,), (3, 2)], ["f8", "f8"], ShapeError, r"cannot multiply \(3,\) by \(3, 2\)"),
    ([(3, 2), (2, 2)], ["<U1", "f8"], WorkflowError, "cannot multiply <U1 by float64 matrices"),
])
def test_bad_shapes_and_dtypes(shapes, dtypes, err, match):
    with pytest.raises(err, match=match):
        MatMul().bind("mm", shapes, dtypes)
