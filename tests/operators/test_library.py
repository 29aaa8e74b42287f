"""Conformance suite run by every built-in of the library (tests/operators/cases.py):
chunked execution equals numpy, mapping functions equal the traced region pairs, backward
lineage is sound by perturbation, all_to_all agrees with the mapping functions, and the
mapping functions return fresh bool frontiers of the right shape."""

import numpy as np
import pytest

from operators import MappingOperator
from subzero.cells import Box
from subzero.modes import Mode
from subzero.testing import (assert_mapping_matches_trace, assert_sound_by_perturbation, bind,
                             run_chunked)
from tests.operators.cases import CASES, Case

pytestmark = pytest.mark.parametrize("case", CASES, ids=str)


def same(got: np.ndarray, exp: np.ndarray) -> bool:
    exp = np.asarray(exp)
    if got.shape != exp.shape:
        return False
    if got.dtype.kind in "fc":
        return got.dtype == exp.dtype and np.array_equal(got, exp, equal_nan=True)
    return got.tolist() == exp.tolist()


@pytest.mark.parametrize("split", [1, 2, 7])
def test_chunked_execution_equals_numpy(case: Case, split):
    op = bind(case.make(), *case.inputs)
    out, _, _ = run_chunked(op, case.inputs, split)
    exp = case.reference(*case.inputs)
    assert same(out, exp), f"{case}: split {split} differs from numpy"
    assert out.dtype == op.out_dtype or (op.out_dtype.kind == "T" and out.dtype == object)


def test_supports_map_full_and_blackbox(case: Case):
    op = bind(case.make(), *case.inputs)
    assert isinstance(op, MappingOperator)
    assert op.supported_modes() == {Mode.MAP, Mode.FULL, Mode.BLACKBOX}
    assert isinstance(op.params(), dict)


def test_mapping_functions_equal_traced_pairs(case: Case):
    op = bind(case.make(), *case.inputs)
    assert_mapping_matches_trace(op, case.inputs, split=3, max_cells=40)


def _cell_sets(shape):
    size = int(np.prod(shape))
    rng = np.random.default_rng(size)
    half = Box((0,) * len(shape), (max(1, shape[0] // 2),) + tuple(shape[1:]))
    return [np.array([0]), np.array([size - 1]),
            rng.choice(size, size=min(3, size), replace=False), half]


def test_backward_lineage_is_sound_by_perturbation(case: Case):
    op = bind(case.make(), *case.inputs)
    for cells in _cell_sets(op.out_shape):
        assert_sound_by_perturbation(op, case.inputs, cells, split=2, trials=2)


def test_traced_lineage_is_sound_by_perturbation(case: Case):
    """The region pairs written in tracing mode (what Full strategies store and black-box
    re-execution reads) are sound too, not only the mapping functions."""
    from subzero.testing import full_backward

    op = bind(case.make(), *case.inputs)
    _, pairs, _ = run_chunked(op, case.inputs, 2, (Mode.FULL,))

    def traced(f, i):
        return full_backward(pairs, f, i, op.in_shapes[i])

    for cells in _cell_sets(op.out_shape)[:2]:
        assert_sound_by_perturbation(op, case.inputs, cells, backward=traced, trials=1)


def test_all_to_all_agrees_with_mapping_on_full_frontiers(case: Case):
    op = bind(case.make(), *case.inputs)
    for i, shape in enumerate(op.in_shapes):
        back_full = op.map_b(np.ones(op.out_shape, bool), i).all()
        fwd_full = op.map_f(np.ones(shape, bool), i).all()
        assert op.all_to_all(i) == (back_full and fwd_full), f"{case}: input {i}"


def test_mapping_returns_fresh_frontiers(case: Case):
    op = bind(case.make(), *case.inputs)
    rng = np.random.default_rng(3)
    for i, shape in enumerate(op.in_shapes):
        fo = rng.random(op.out_shape) < 0.3
        fi = rng.random(shape) < 0.3
        b, f = op.map_b(fo, i), op.map_f(fi, i)
        assert b.dtype == bool and b.shape == tuple(shape)
        assert f.dtype == bool and f.shape == tuple(op.out_shape)
        # callers mutate results in place: they must not alias the argument
        assert not np.shares_memory(b, fo) and not np.shares_memory(f, fi)
        assert b.flags.c_contiguous and b.flags.writeable and f.flags.writeable
        assert not op.map_b(np.zeros(op.out_shape, bool), i).any()
        assert not op.map_f(np.zeros(shape, bool), i).any()


def test_input_box_covers_the_backward_lineage_of_each_chunk(case: Case):
    """The block a task reads holds every input cell its output chunk depends on (the
    executor and forward re-execution both rely on it)."""
    from subzero.chunking import Chunking
    from subzero.chunking import task_grid

    op = bind(case.make(), *case.inputs)
    for _, box in task_grid(op, Chunking(split=3).chunk_shape(op.out_shape)):
        f = np.zeros(op.out_shape, bool)
        f[box.slices] = True
        for i, shape in enumerate(op.in_shapes):
            need = op.map_b(f, i)
            inside = np.zeros(shape, bool)
            inside[op.input_box(box, i).slices] = True
            assert not (need & ~inside).any(), f"{case}: chunk {box} input {i}"
