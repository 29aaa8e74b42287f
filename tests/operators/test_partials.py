"""A global reduction from its input's chunks: numpy's pairwise summation tree cut at the
chunks' boundaries rebuilds the bits of one ``np.sum`` (and so of ``np.mean``), and every
combining :class:`Reduce` gives what :func:`reduce` gives on the whole input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from operators import Binary, MeanBroadcast, Reduce
from operators.partials import BLOCK, combine_sums, cover, sum_partial
from operators.reductions import reduce
from subzero.cells import Box
from subzero.chunking import chunk_grid
from subzero.modes import Mode
from subzero.runtime import ChunkContext, TaskContext


def _same(a, b) -> bool:
    """Equal values of one dtype and shape, -0.0 apart from 0.0 (a NaN equals a NaN: its
    sign bit says which operand an addition took it from, nothing more)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    number = ~np.isnan(a)
    return bool(np.array_equal(a, b, equal_nan=True)
                and np.array_equal(np.signbit(a)[number], np.signbit(b)[number]))


def _cuts(n: int, data) -> list[tuple[int, int]]:
    inner = sorted(set(data.draw(st.lists(st.integers(1, max(1, n - 1)), max_size=12))))
    edges = [0, *[c for c in inner if 0 < c < n], n]
    return list(zip(edges[:-1], edges[1:]))


_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.floats(-1e3, 1e3), st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, np.nan, np.inf]))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf, as np.sum says
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_partial_sums_of_any_cut_rebuild_numpys_bits(data):
    n = data.draw(st.one_of(st.integers(1, 40), st.integers(100, 3000)))
    x = data.draw(hnp.arrays(np.float64, n, elements=_floats))
    parts = [sum_partial(x[a:b], a, n) for a, b in _cuts(n, data)]
    assert _same(combine_sums(parts, n), np.sum(x))


@pytest.mark.parametrize("shape,rows", [((3001, 1031), 7), ((2001, 513), 1001), ((65, 4), 1),
                                        ((1, 300), 1), ((9, 1), 2)])
def test_row_chunks_of_an_image_give_its_sum_and_mean(shape, rows):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 9, shape)
    w = shape[1]
    parts = [sum_partial(x[b.slices].reshape(-1), b.lo[0] * w, x.size)
             for _, b in chunk_grid(shape, (rows, w))]
    total = combine_sums(parts, x.size)
    assert _same(total, np.sum(x))
    assert _same(np.asarray(total / x.size), np.asarray(np.mean(x)))


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 5000), data=st.data())
def test_cover_splits_a_range_into_whole_nodes_and_crossing_leaves(n, data):
    lo = data.draw(st.integers(0, n - 1))
    hi = data.draw(st.integers(lo + 1, n))
    inside, crossing = cover(lo, hi, n)
    cells = np.zeros(n, dtype=np.int64)
    for s, m in inside:
        assert lo <= s and s + m <= hi
        cells[s:s + m] += 1
    for s, m in crossing:
        assert m <= BLOCK and (s < lo < s + m or s < hi < s + m)
        cells[max(s, lo):min(s + m, hi)] += 1
    assert (cells[lo:hi] == 1).all() and not cells[:lo].any() and not cells[hi:].any()
    assert len(crossing) <= 2


def test_a_missing_chunk_is_an_error_not_a_wrong_sum():
    x = np.arange(1000.0)
    parts = [sum_partial(x[a:b], a, 1000) for a, b in [(0, 300), (300, 700), (700, 1000)]]
    with pytest.raises(ValueError, match="not all in the parts"):
        combine_sums([parts[0], parts[2]], 1000)
    with pytest.raises(ValueError, match="not all in the parts"):
        combine_sums(parts[:2], 1000)  # the last leaves are missing


CASES = [("sum", "f8"), ("mean", "f8"), ("min", "f8"), ("max", "f8"), ("min", "u2"),
         ("max", "i4"), ("any", "b1"), ("all", "b1"), ("sum", "i4"), ("sum", "u1"),
         ("sum", "b1"), ("max", "f4")]


@pytest.mark.parametrize("func,dtype", CASES)
@pytest.mark.parametrize("keepdims", [True, False])
def test_reduce_combines_to_the_whole_array_reduction(func, dtype, keepdims):
    rng = np.random.default_rng(7)
    for h, w, rows in [(97, 31, 10), (5, 2000, 2), (40, 7, 40), (300, 300, 299)]:
        x = (rng.standard_normal((h, w)) * 1e3).astype(dtype)
        if dtype == "f8":
            x[rng.integers(h), rng.integers(w)] = np.nan if func in ("min", "max") else -0.0
        op = Reduce(func, keepdims=keepdims).bind("r", [(h, w)], [x.dtype])
        assert op.combines((rows, w))
        parts = [(b, op.partial(x[b.slices], b)) for _, b in chunk_grid((h, w), (rows, w))]
        got = op.combine(parts)
        want = np.asarray(reduce(x, func, None, keepdims)).astype(op.out_dtype)
        assert _same(got, want), (func, dtype, h, w)


def test_mean_broadcast_writes_its_chunks_from_the_combined_mean():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 20)) * 1e6
    op = MeanBroadcast().bind("bg", [x.shape], [x.dtype])
    parts = [(b, op.partial(x[b.slices], b)) for _, b in chunk_grid(x.shape, (7, 20))]
    mean = op.combine(parts)
    whole = op.kernel(x)
    for idx, box in chunk_grid(x.shape, (7, 20)):
        ctx = TaskContext(ChunkContext(idx, box, (Box.full(x.shape),), x.shape, (x.shape,)),
                          frozenset({Mode.MAP}), "bg")
        assert _same(op.run_combined(ctx, mean), whole[box.slices])


@pytest.mark.parametrize("op,dtype,chunks", [
    (Reduce("sum"), "f4", (2, 6)),  # a float32 sum: numpy's tree is not the float64 one
    (Reduce("mean"), "i4", (2, 6)),  # an integer mean sums in float64 through buffers
    (Reduce("sum", dtype="float64"), "i2", (2, 6)),
    (Reduce("median"), "f8", (2, 6)),
    (Reduce("std"), "f8", (2, 6)),
    (Reduce("sum"), "f8", (2, 3)),  # chunks that are not whole rows
    (Reduce("sum", axis=1), "f8", (2, 6)),  # not global
])
def test_what_does_not_combine(op, dtype, chunks):
    assert not op.bind("r", [(4, 6)], [dtype]).combines(chunks)


def test_operators_do_not_combine_unless_they_say_so():
    assert not Binary("add").bind("b", [(4, 6), (4, 6)], ["f8", "f8"]).combines((2, 6))


@pytest.mark.parametrize("func,dtype", [("sum", "f8"), ("max", "f8"), ("sum", "i4"),
                                        ("any", "b1")])
def test_a_missing_or_repeated_chunk_is_an_error_not_a_wrong_reduction(func, dtype):
    """Whatever the combining (the tree or any order), the partials must cover every row
    once: a repeated chunk would count twice in an integer sum, a missing one drop out of a
    maximum, both silently."""
    x = (np.arange(40 * 6).reshape(40, 6) % 7).astype(dtype)
    op = Reduce(func).bind("r", [x.shape], [x.dtype])
    parts = [(b, op.partial(x[b.slices], b)) for _, b in chunk_grid(x.shape, (10, 6))]
    assert _same(op.combine(parts[::-1]), reduce(x, func).astype(op.out_dtype))  # any order
    with pytest.raises(ValueError, match=r"'r': partials of rows 10..19 and 10..19 overlap"):
        op.combine([*parts, parts[1]])
    with pytest.raises(ValueError, match=r"'r': no partial for row 20 of its input"):
        op.combine(parts[:2] + parts[3:])
    with pytest.raises(ValueError, match=r"'r': no partial for row 30 of its input"):
        op.combine(parts[:3])
