"""Workflow specs: every invalid spec gets its own clear error naming the culprit."""

import numpy as np
import pytest

from operators import Affine, Binary, Convolve, MeanBroadcast, UDF
from subzero.errors import ModeError, ShapeError, StoreError, WorkflowError
from subzero.modes import Mode, Strategy
from subzero.workflow import Workflow


def small():
    wf = Workflow("w")
    wf.input("a", (4, 5))
    wf.input("b", (4, 5))
    return wf


def test_declaration_order_does_not_matter_and_order_is_topological():
    wf = small()
    wf.add("z", Binary("add"), "y", "a")
    wf.add("y", Affine(2.0), "b")
    assert wf.validate().order == ["y", "z"]
    assert wf.array_shape("z") == (4, 5)
    assert wf.consumers("a") == [("z", 1)]


def test_unknown_input_is_named():
    wf = small()
    wf.add("x", Affine(), "nope")
    with pytest.raises(WorkflowError, match="operator 'x' reads unknown array 'nope'"):
        wf.validate()


def test_cycle_is_named():
    wf = small()
    wf.add("p", Binary("add"), "a", "q")
    wf.add("q", Affine(), "p")
    wf.add("r", Affine(), "a")
    with pytest.raises(WorkflowError, match="cycle through operator\\(s\\) p, q"):
        wf.validate()


def test_duplicate_names_are_refused():
    wf = small()
    wf.add("x", Affine(), "a")
    with pytest.raises(WorkflowError, match="duplicate name 'x'"):
        wf.add("x", Affine(), "b")
    with pytest.raises(WorkflowError, match="duplicate name 'a'"):
        wf.input("a", (1,))


def test_shape_mismatch_is_named():
    wf = small()
    wf.input("c", (3, 5))
    wf.add("s", Binary("add"), "a", "c")
    with pytest.raises(ShapeError, match=r"operator 's'.*\(4, 5\), \(3, 5\) do not match"):
        wf.validate()


def test_bad_names_and_bad_operators():
    wf = small()
    with pytest.raises(StoreError, match="'a b' is not valid"):
        wf.input("a b", (1,))
    with pytest.raises(WorkflowError, match="must be an operators.Operator"):
        wf.add("f", lambda x: x, "a")
    with pytest.raises(WorkflowError, match="has no operators"):
        small().validate()


class _PayOnly(UDF):
    n_inputs = 1

    def supported_modes(self):
        return frozenset({Mode.PAY, Mode.BLACKBOX})

    def run(self, ctx, x):
        return x


def test_unsupported_modes_are_named():
    wf = small()
    wf.add("u", _PayOnly(), "a")
    wf.add("m", MeanBroadcast(), "u")
    with pytest.raises(ModeError, match="operator 'u' does not support mode FULL"):
        wf.plan({"u": ["full-one-bwd"]})
    with pytest.raises(ModeError, match="operator 'u' does not support mode MAP"):
        wf.plan({"u": ["map"]})
    with pytest.raises(WorkflowError, match="plan names operator 'zz'"):
        wf.plan({"zz": ["map"]})
    with pytest.raises(ModeError, match="unknown strategy 'fastest'"):
        wf.plan("fastest")


def test_generic_plans_follow_paper_table_ii():
    wf = small()
    wf.add("u", _PayOnly(), "a")
    wf.add("c", Convolve(np.ones((3, 3))), "u")
    p = wf.plan("subzero")
    assert p == {"u": [Strategy.parse("pay-one-bwd")], "c": [Strategy.parse("map")]}
    assert wf.plan("blackbox") == {"u": [Strategy.parse("blackbox")],
                                   "c": [Strategy.parse("blackbox")]}
    assert wf.plan("full-one")["u"] == [Strategy.parse("blackbox")]  # no FULL support
    assert wf.plan({"u": ["pay-many-bwd"]})["c"] == [Strategy.parse("map")]
