"""Parameter parsing shared by the built-ins."""

import numpy as np
import pytest

from operators.parse import (parse_axes, parse_dtype, parse_permutation, parse_slices,
                             slices_text)
from subzero.cells import Box
from subzero.errors import ShapeError, WorkflowError


@pytest.mark.parametrize("spec, want", [
    ("0:1, 0:1", (slice(0, 1), slice(0, 1))),
    ("0:56, 4:", (slice(0, 56), slice(4, None))),
    (":, 0", (slice(None), slice(0, 1))),
    ("-1, ::2", (slice(-1, None), slice(None, None, 2))),
    ([slice(1, 3), (0, 4, 2), 5], (slice(1, 3), slice(0, 4, 2), slice(5, 6))),
    (Box((1, 2), (3, 4)), (slice(1, 3), slice(2, 4))),
    (slice(0, 2), (slice(0, 2),)),
])
def test_parse_slices_forms(spec, want):
    assert parse_slices(spec, "t") == want
    assert parse_slices(slices_text(want), "t") == want  # the canonical text reads back


def test_parse_dtype_maps_unsized_strings_to_stringdtype():
    for spec in (str, "U", "str", "T"):
        assert parse_dtype(spec, "t") == np.dtypes.StringDType()
    assert parse_dtype("<U4", "t") == np.dtype("<U4")
    with pytest.raises(WorkflowError, match="t: 'float65' is not a numpy dtype"):
        parse_dtype("float65", "t")


def test_parse_axes_and_permutations():
    assert parse_axes(None, 3, "t") == (0, 1, 2)
    assert parse_axes(-1, 3, "t") == (2,)
    assert parse_axes([2, 0], 3, "t") == (0, 2)
    assert parse_permutation(None, 3, "t") == (2, 1, 0)
    assert parse_permutation((-1, 0, 1), 3, "t") == (2, 0, 1)
    with pytest.raises(ShapeError, match="t: axis True is out of range"):
        parse_axes(True, 3, "t")
    with pytest.raises(ShapeError, match=r"t: axes \[0, 1\] are not a permutation of the 3"):
        parse_permutation((0, 1), 3, "t")
