import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from subzero.cells import (Box, Ragged, as_linear, cells_where, dilate, parse_cells, to_coords,
                           unique)
from subzero.errors import CellError
from subzero.frontier import frontier, mask_from_linear


def test_as_linear_accepts_coords_linear_box_slices_mask_and_tuple():
    shape = (3, 4)
    expect = np.array([1, 11], dtype=np.uint64)
    assert as_linear(np.array([[0, 1], [2, 3]]), shape).tolist() == expect.tolist()
    assert as_linear([(0, 1), (2, 3)], shape).tolist() == expect.tolist()
    assert as_linear(np.array([1, 11], dtype=np.uint64), shape).tolist() == [1, 11]
    assert as_linear((2, 3), shape).tolist() == [11]
    assert as_linear(Box((1, 1), (3, 3)), shape).tolist() == [5, 6, 9, 10]
    assert as_linear((slice(1, 3), slice(1, 3)), shape).tolist() == [5, 6, 9, 10]
    m = np.zeros(shape, bool)
    m[0, 1] = m[2, 3] = True
    assert as_linear(m, shape).tolist() == [1, 11]
    assert as_linear([], shape).size == 0


@pytest.mark.parametrize("bad, msg", [
    (np.array([[0, 4]]), r"cell \(0, 4\) is outside the array shape \(3, 4\)"),
    (np.array([[-1, 0]]), r"cell \(-1, 0\) is outside"),
    (np.array([12]), "linear index 12 is outside"),
    (np.array([[0, 1, 2]]), "3 columns"),
    (np.zeros((2, 2), bool), "mask has shape"),
    (np.array([0.5]), "expected integer coordinates"),
    (Box((0, 0), (4, 1)), "outside the array shape"),
])
def test_as_linear_rejects_bad_cells_naming_them(bad, msg):
    with pytest.raises(CellError, match=msg):
        as_linear(bad, (3, 4))


def test_box_parse_and_errors():
    assert Box.parse("0:10, 5:7", (100, 100)) == Box((0, 5), (10, 7))
    assert Box.parse("3,:", (5, 6)) == Box((3, 0), (4, 6))
    with pytest.raises(CellError, match="outside 0:5"):
        Box.parse("0:6,0:1", (5, 6))
    with pytest.raises(CellError, match="has 1 axes; expected 2"):
        Box.parse("0:1", (5, 6))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3).flatmap(
    lambda shp: st.tuples(st.just(tuple(shp)),
                          st.lists(st.tuples(*[st.integers(0, n) for n in shp]), min_size=2,
                                   max_size=2))))
def test_box_linear_matches_brute_force(args):
    shape, (a, b) = args
    lo = tuple(min(x, y) for x, y in zip(a, b))
    hi = tuple(max(x, y) for x, y in zip(a, b))
    box = Box(lo, hi)
    brute = sorted(int(np.ravel_multi_index(c, shape)) for c in np.ndindex(*shape)
                   if all(l <= v < h for v, l, h in zip(c, lo, hi)))
    assert box.linear(shape).tolist() == brute
    assert len(box.coords()) == box.size


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(bool, hnp.array_shapes(min_dims=1, max_dims=3, max_side=7)),
       st.integers(0, 3), st.booleans())
def test_dilate_is_box_dilation(mask, r, wrap):
    got = dilate(mask, r, wrap=wrap)
    expect = np.zeros_like(mask)
    for c in np.argwhere(mask):
        for off in np.ndindex(*([2 * r + 1] * mask.ndim)):
            t = np.array(c) + np.array(off) - r
            if wrap:
                t %= mask.shape
            elif ((t < 0) | (t >= mask.shape)).any():
                continue
            expect[tuple(t)] = True
    assert np.array_equal(got, expect)
    assert got.dtype == bool


def test_frontier_and_coords_roundtrip():
    f = frontier((4, 5), [(1, 2), (3, 4)])
    assert f.sum() == 2
    lin = as_linear(f, (4, 5))
    assert to_coords(lin, (4, 5)).tolist() == [[1, 2], [3, 4]]
    assert np.array_equal(mask_from_linear(lin, (4, 5)), f)


def test_ragged_take_concat_and_any_in():
    r = Ragged.from_rows([np.array([1, 2]), np.array([], np.uint64), np.array([7, 8, 9])])
    assert r.lengths.tolist() == [2, 0, 3]
    t = r.take(np.array([2, 0]))
    assert [x.tolist() for x in t.rows()] == [[7, 8, 9], [1, 2]]
    c = Ragged.concat([r, t])
    assert len(c) == 5 and c.row(3).tolist() == [7, 8, 9]
    mask = np.zeros(10, bool)
    mask[8] = True
    assert r.any_in(mask).tolist() == [False, False, True]
    assert r.row_ids().tolist() == [0, 0, 2, 2, 2]


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.uint64, st.integers(0, 50), elements=st.integers(0, 20)))
def test_unique_matches_numpy(values):
    assert unique(values).tolist() == np.unique(values).tolist()


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_over_is_numpy_any(data):
    from subzero.cells import any_over

    shape = tuple(data.draw(st.lists(st.integers(1, 70), min_size=1, max_size=3)))
    density = data.draw(st.sampled_from([0.0, 0.01, 0.3, 1.0]))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    m = rng.random(shape) < density
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    for keep in (True, False):
        want = m.any(axis=tuple(axes), keepdims=keep)
        got = any_over(m, axes, keepdims=keep)
        assert got.shape == want.shape and (got == want).all()


def test_frontier_keeps_sparse_and_dense_forms_consistent():
    from subzero.frontier import Frontier, start_frontier

    shape = (40, 50)
    rng = np.random.default_rng(3)
    for n_a, n_b in ((3, 4), (3, 900), (900, 1500)):
        a = np.unique(rng.integers(0, 2000, n_a)).astype(np.uint64)
        b = np.unique(rng.integers(0, 2000, n_b)).astype(np.uint64)
        want = np.union1d(a, b)
        forms = [lambda x: Frontier(shape, lin=x),
                 lambda x: Frontier(shape, mask=Frontier(shape, lin=x).mask.copy())]
        for fa in forms:
            for fb in forms:
                u = fa(a).union(fb(b))
                assert u.n == len(want) and (u.lin == want).all()
                assert np.flatnonzero(u.mask).tolist() == want.tolist()
    f = start_frontier(shape, [(1, 2), (1, 2), (0, 5)])
    assert f.lin.tolist() == [5, 52] and f.meets(Box((1, 0), (2, 3)))
    assert not f.meets(Box((2, 0), (40, 50)))


@given(st.lists(st.tuples(st.integers(-10**12, 10**12), st.integers(-10**12, 10**12)),
                min_size=1, max_size=50), st.sampled_from([";", " ; ", ";\t"]))
def test_parse_cells_reads_what_was_written(cells, sep):
    text = sep.join(f"{r}, {c}" for r, c in cells)
    assert parse_cells(text, (3, 3)).tolist() == [list(c) for c in cells]


@pytest.mark.parametrize("text, words", [("1,x", "bad cell '1,x'"), ("", "no cells"),
                                         ("1,2,3", "has 3 coordinates"),
                                         (f"{2 ** 64},1", "out of range"), (";;", "no cells"),
                                         ("1 2,3", "bad cell '1 2,3'"),  # not 12
                                         ("4,5;1 ,2 3", "bad cell '1,2 3'")])
def test_parse_cells_names_the_bad_cell(text, words):
    with pytest.raises(CellError, match=re.escape(words)):
        parse_cells(text, (3, 3))


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(bool, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9)))
def test_cells_where_is_argwhere(mask):
    got = cells_where(mask)
    assert got.dtype == np.int64 and got.shape == (int(mask.sum()), mask.ndim)
    assert np.array_equal(got, np.argwhere(mask))
