"""Stencil built-ins: parameter and dtype errors (their lineage runs in test_library.py)."""

import numpy as np
import pytest

from operators import Convolve, MedianFilter
from subzero.errors import ShapeError, WorkflowError


def test_convolve_rejects_non_numeric_weights_and_rank_mismatch():
    with pytest.raises(WorkflowError, match=r"Convolve: kernel weights must be numbers. Got "
                                            r"\[\['a'\]\]"):
        Convolve([["a"]])
    with pytest.raises(ShapeError, match=r"'c': kernel of rank 2 on an array of shape \(5,\)"):
        Convolve(np.ones((3, 3))).bind("c", [(5,)], ["f8"])


@pytest.mark.parametrize("make", [lambda: Convolve(np.ones(3)), lambda: MedianFilter(1)])
def test_stencils_reject_string_inputs_at_bind(make):
    with pytest.raises(WorkflowError, match=r"'s' \((Convolve|MedianFilter)\): needs a "
                                            "real-valued input. Got <U2"):
        make().bind("s", [(5,)], ["<U2"])


def test_a_radius_wider_than_the_input_is_refused_at_bind_naming_it():
    """A halo larger than the input reaches no further cell, only costs memory (a median
    filter's footprint): refused when bound, naming the radius, the axis and the limit."""
    assert MedianFilter(5).bind("m", [(5, 9)], ["f8"]).radius == (5,)  # as wide as axis 0
    with pytest.raises(ShapeError, match=r"'m' \(MedianFilter\): radius 10 on axis 1 of an "
                                         r"input of shape \(5, 9\); expected a radius of at "
                                         r"most 9"):
        MedianFilter((1, 10)).bind("m", [(5, 9)], ["f8"])
    with pytest.raises(ShapeError, match="radius 100000000 on axis 0"):
        MedianFilter(100_000_000, "wrap").bind("m", [(5, 9)], ["f8"])
