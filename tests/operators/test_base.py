"""The operator bases: mapping functions, tracing, halos, broadcasting."""

import numpy as np
import pytest

from operators import (Affine, Binary, CellMapping, Convolve, MappingOperator, MeanBroadcast,
                       MedianFilter, Unary, UDF)
from subzero.cells import Box
from subzero.errors import ShapeError, WorkflowError
from subzero.modes import Mode
from subzero.operator import GLOBAL
from subzero.testing import (assert_mapping_matches_trace, assert_sound_by_perturbation, bind,
                             run_chunked)

RNG = np.random.default_rng(1)
IMG = RNG.normal(100, 10, (13, 9))
ONE = np.array([[2.5]])


@pytest.mark.parametrize("split", [1, 2, 3, 7])
@pytest.mark.parametrize("boundary", ["reflect", "nearest", "mirror", "constant", "wrap"])
def test_convolve_equals_scipy_for_any_chunking(split, boundary):
    from scipy import ndimage

    k = RNG.normal(size=(3, 5))
    op = bind(Convolve(k, boundary), IMG)
    out, _, _ = run_chunked(op, [IMG], split)
    assert np.allclose(out, ndimage.convolve(IMG, k, mode=boundary), rtol=0, atol=1e-12)


def test_median_filter_halo_across_chunks():
    from scipy import ndimage

    op = bind(MedianFilter(2), IMG)
    out, _, _ = run_chunked(op, [IMG], 4)
    assert np.array_equal(out, ndimage.median_filter(IMG, size=5, mode="reflect"))


@pytest.mark.parametrize("make, inputs", [
    (lambda: Affine(2.0, 1.0), [IMG]),
    (lambda: Unary("sqrt"), [np.abs(IMG)]),
    (lambda: Binary("subtract"), [IMG, ONE]),
    (lambda: Binary("greater"), [IMG, IMG[::-1].copy()]),
    (lambda: Convolve(np.ones((3, 3))), [IMG]),
    (lambda: Convolve(np.ones((3, 3)), "wrap"), [IMG]),
    (lambda: MedianFilter((1, 2)), [IMG]),
    (lambda: MeanBroadcast(), [IMG]),
])
def test_mapping_functions_match_traced_pairs(make, inputs):
    op = bind(make(), *inputs)
    assert_mapping_matches_trace(op, inputs, split=3, max_cells=40)


@pytest.mark.parametrize("make, inputs", [
    (lambda: Binary("subtract"), [IMG, ONE]),
    (lambda: Convolve(np.ones((3, 3))), [IMG]),
    (lambda: MedianFilter(2, "nearest"), [IMG]),
    (lambda: Convolve(np.ones((3, 3)), "wrap"), [IMG]),
])
def test_builtin_lineage_is_sound_by_perturbation(make, inputs):
    op = bind(make(), *inputs)
    for cells in ([(0, 0)], [(6, 4), (12, 8)], Box((3, 3), (5, 6))):
        assert_sound_by_perturbation(op, inputs, cells, split=2)


def test_broadcast_input_maps_to_its_single_cell():
    op = bind(Binary("add"), IMG, ONE)
    f = np.zeros(IMG.shape, bool)
    assert not op.map_b(f, 1).any()
    f[4, 4] = True
    assert op.map_b(f, 1).tolist() == [[True]]
    assert op.map_f(np.ones((1, 1), bool), 1).all()
    assert op.input_box(Box((2, 0), (4, 9)), 1) == Box((0, 0), (1, 1))


def test_all_to_all_backward_is_whole_input():
    op = bind(MeanBroadcast(), IMG)
    assert op.parallelism is GLOBAL and op.all_to_all(0)
    f = np.zeros(IMG.shape, bool)
    f[0, 0] = True
    assert op.map_b(f, 0).all() and not op.map_b(np.zeros_like(f), 0).any()


def test_shape_and_parameter_errors_name_the_operator():
    with pytest.raises(ShapeError, match=r"'sub'.*\(13, 9\), \(4, 9\) do not match"):
        Binary("subtract").bind("sub", [(13, 9), (4, 9)], ["f8", "f8"])
    with pytest.raises(ShapeError, match="takes 2 input"):
        Binary("add").bind("x", [(3, 3)], ["f8"])
    with pytest.raises(WorkflowError, match="not a unary numpy ufunc"):
        Unary("add")
    with pytest.raises(ShapeError, match="odd sizes"):
        Convolve(np.ones((2, 2)))
    with pytest.raises(ShapeError, match="unknown boundary"):
        MedianFilter(1, "bogus")


class _Transpose(CellMapping, MappingOperator):
    """A transpose written in the paper's per-cell form, lifted by the adapter."""

    n_inputs = 1
    parallelism = GLOBAL

    def output_shape(self, s):
        return s[0][::-1]

    def compute(self, ctx, x):
        return x.T

    def map_b_cell(self, cell, i):
        return [cell[::-1]]

    def map_f_cell(self, cell, i):
        return [cell[::-1]]


def test_per_cell_adapter_lifts_paper_style_mapping_functions():
    op = bind(_Transpose(), IMG)
    out, _, _ = run_chunked(op, [IMG])
    assert np.array_equal(out, IMG.T)
    assert_mapping_matches_trace(op, [IMG], split=1, max_cells=30)
    f = np.zeros(op.out_shape, bool)
    f[2, 5] = True
    assert np.argwhere(op.map_b(f, 0)).tolist() == [[5, 2]]


class _Opaque(UDF):
    n_inputs = 1

    def run(self, ctx, x):
        return x * 2


def test_udf_without_lineage_api_is_traced_all_to_all_within_its_blocks():
    from subzero.runtime import ChunkContext, TaskContext

    op = bind(_Opaque(), IMG)
    assert op.supported_modes() == {Mode.BLACKBOX}
    ch = ChunkContext((0, 0), Box((0, 0), (4, 9)), (Box((0, 0), (4, 9)),), IMG.shape, (IMG.shape,))
    ctx = TaskContext(ch, frozenset({Mode.BLACKBOX}), op.name)
    op.run(ctx, IMG[:4])
    op.trace_all_to_all(ctx)
    p = ctx.full_pairs()
    assert len(p) == 1 and p.out_cells == 36 and p.in_cells == 36
