"""Buffered ``ctx.lwrite``: per-call pairs converted in bulk equal, call for call, the pairs
``as_linear`` gives each call's cells, and equal the batch of one ``lwrite_pairs`` call."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from operators.base import box_neighbours
from subzero.cells import Box, Ragged, as_linear, size_of
from subzero.errors import CellError
from subzero.lineage import PairBatch
from subzero.modes import Mode
from subzero.runtime import ChunkContext, TaskContext


def make_ctx(out_shape, in_shapes, modes=(Mode.FULL,), limit=None):
    ch = ChunkContext(
        (0,) * len(out_shape), Box.full(out_shape), tuple(Box.full(s) for s in in_shapes),
        tuple(out_shape), tuple(tuple(s) for s in in_shapes),
    )
    ctx = TaskContext(ch, frozenset(modes), "blur")
    if limit is not None:
        ctx.buffer_limit = limit
    return ctx


def ref_cells(cells, shape) -> np.ndarray:
    """Brute force: the cells of one call, converted on their own."""
    if cells is None:
        return np.empty(0, dtype=np.uint64)
    if isinstance(cells, (int, np.integer)):
        cells = [cells]
    return as_linear(cells, shape)


def ref_full(calls, out_shape, in_shapes) -> PairBatch:
    out = Ragged.from_rows([ref_cells(c[0], out_shape) for c in calls])
    ins = tuple(Ragged.from_rows([ref_cells(c[1 + i], s) for c in calls])
                for i, s in enumerate(in_shapes))
    return PairBatch(out, ins=ins)


def assert_ragged_eq(got: Ragged, want: Ragged) -> None:
    assert got.values.dtype == want.values.dtype
    assert got.offsets.dtype == want.offsets.dtype
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.values, want.values)


def assert_batch_eq(got: PairBatch | None, want: PairBatch | None) -> None:
    assert (got is None) == (want is None)
    if got is None:
        return
    assert_ragged_eq(got.out, want.out)
    assert (got.ins is None) == (want.ins is None)
    if got.ins is not None:
        assert len(got.ins) == len(want.ins)
        for g, w in zip(got.ins, want.ins):
            assert_ragged_eq(g, w)
    if got.payload is not None:
        assert_ragged_eq(got.payload, want.payload)


# -- strategies: cell arguments in every form lwrite takes --------------------------------
shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


@st.composite
def coords(draw, shape):
    return tuple(draw(st.integers(0, n - 1)) for n in shape)


@st.composite
def boxes(draw, shape):
    if draw(st.integers(0, 5)) == 0:  # empty, anywhere (as_linear takes it as no cells)
        lo = tuple(draw(st.integers(-3, n + 3)) for n in shape)
        ax = draw(st.integers(0, len(shape) - 1))
        hi = tuple(v - draw(st.integers(0, 2)) if d == ax else v + draw(st.integers(-2, 3))
                   for d, v in enumerate(lo))
        return Box(lo, hi)
    lo = tuple(draw(st.integers(0, n - 1)) for n in shape)
    hi = tuple(draw(st.integers(v + 1, n)) for v, n in zip(lo, shape))
    return Box(lo, hi)


@st.composite
def cell_arg(draw, shape, none_ok):
    """One lwrite argument: the forms converted in bulk, and the others."""
    size = size_of(shape)
    form = draw(st.sampled_from(
        ["tuple", "list1", "int", "list_int", "box", "box", "none", "array", "many", "slices",
         "mask", "linear", "np_int", "np_tuple"]))
    if form == "tuple":
        return draw(coords(shape))
    if form == "list1":
        return [draw(coords(shape))]
    if form == "int":
        return draw(st.integers(0, size - 1))
    if form == "list_int":
        return [draw(st.integers(0, size - 1))]
    if form == "box":
        return draw(boxes(shape))
    if form == "none":
        return None if none_ok else draw(coords(shape))
    if form == "array":
        k = draw(st.integers(0, 3))
        return np.array([draw(coords(shape)) for _ in range(k)], dtype=np.int64).reshape(
            k, len(shape))
    if form == "many":
        return [draw(coords(shape)) for _ in range(draw(st.sampled_from([0, 2, 3])))]
    if form == "slices":
        b = draw(boxes(shape))
        return tuple(slice(max(lo, 0), max(hi, 0)) for lo, hi in zip(b.lo, b.hi))
    if form == "mask":
        flat = draw(st.lists(st.booleans(), min_size=size, max_size=size))
        return np.array(flat, dtype=bool).reshape(shape)
    if form == "linear":
        vals = draw(st.lists(st.integers(0, size - 1), max_size=4))
        return np.array(vals, dtype=draw(st.sampled_from([np.int64, np.uint64, np.int32])))
    if form == "np_int":
        return np.int64(draw(st.integers(0, size - 1)))
    return tuple(np.int64(v) for v in draw(coords(shape)))  # np_tuple: as_linear's rules


@st.composite
def full_calls(draw):
    out_shape = draw(shapes)
    in_shapes = draw(st.lists(shapes, min_size=1, max_size=2))
    n = draw(st.integers(0, 25))
    calls = [
        (draw(cell_arg(out_shape, False)),) + tuple(draw(cell_arg(s, True)) for s in in_shapes)
        for _ in range(n)
    ]
    return out_shape, in_shapes, calls


# -- results --------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(full_calls())
def test_buffered_calls_equal_each_call_converted_alone(case):
    out_shape, in_shapes, calls = case
    ctx = make_ctx(out_shape, in_shapes)
    for c in calls:
        ctx.lwrite(*c)
    want = ref_full(calls, out_shape, in_shapes) if calls else None
    assert_batch_eq(ctx.full_pairs(), want)
    assert_batch_eq(ctx.full_pairs(), want)  # reading again converts nothing twice


@settings(max_examples=60, deadline=None)
@given(full_calls(), st.integers(1, 7))
def test_converting_at_the_buffer_limit_gives_the_same_pairs(case, limit):
    out_shape, in_shapes, calls = case
    one, many = make_ctx(out_shape, in_shapes), make_ctx(out_shape, in_shapes, limit=limit)
    for c in calls:
        one.lwrite(*c)
        many.lwrite(*c)
    assert_batch_eq(many.full_pairs(), one.full_pairs())


@settings(max_examples=60, deadline=None)
@given(full_calls(), st.data())
def test_lwrite_pairs_between_lwrite_calls_keeps_call_order(case, data):
    out_shape, in_shapes, calls = case
    ctx = make_ctx(out_shape, in_shapes)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(calls)), max_size=3)))
    parts, at = [], 0
    for cut in cuts + [len(calls)]:
        for c in calls[at:cut]:
            ctx.lwrite(*c)
        if calls[at:cut]:
            parts.append(ref_full(calls[at:cut], out_shape, in_shapes))
        at = cut
        if cut < len(calls):  # one vectorized pair: output cell 0 <- input cell 0
            ctx.lwrite_pairs(np.zeros(1, np.uint64), *[np.zeros(1, np.uint64)] * len(in_shapes))
            one = Ragged.from_singletons(np.zeros(1, np.uint64))
            parts.append(PairBatch(one, ins=(one,) * len(in_shapes)))
    assert_batch_eq(ctx.full_pairs(), PairBatch.concat(parts))


def test_a_3x3_box_per_pixel_equals_one_lwrite_pairs_call():
    shape = (9, 7)
    R, C = shape
    for limit in (None, 5):
        ctx = make_ctx(shape, [shape], limit=limit)
        for r in range(R):
            for c in range(C):
                ctx.lwrite([(r, c)], Box((max(r - 1, 0), max(c - 1, 0)),
                                         (min(r + 2, R), min(c + 2, C))))
        vec = make_ctx(shape, [shape])
        pix = np.indices(shape).reshape(2, -1).T
        vec.lwrite_pairs(pix, box_neighbours(pix, (1, 1), shape))
        assert_batch_eq(ctx.full_pairs(), vec.full_pairs())


def test_boxes_of_very_different_shapes_keep_call_order():
    """A few large boxes among many one-cell boxes (converted per box shape)."""
    shape = (40, 30)
    calls = [(k % 30, Box((k % 39, 0), (k % 39 + 1, 30) if k % 7 == 0 else (k % 39 + 1, 1)))
             for k in range(200)]
    ctx = make_ctx(shape, [shape])
    for out, box in calls:
        ctx.lwrite(out, box)
    assert_batch_eq(ctx.full_pairs(), ref_full(calls, shape, [shape]))


@settings(max_examples=60, deadline=None)
@given(shapes, st.data())
def test_payload_calls_equal_each_call_converted_alone(shape, data):
    n = data.draw(st.integers(1, 20))
    outs = [data.draw(cell_arg(shape, False)) for _ in range(n)]
    pays = [data.draw(st.binary(max_size=4)) for _ in range(n)]
    kinds = [data.draw(st.sampled_from([bytes, bytearray, memoryview])) for _ in range(n)]
    ctx = make_ctx(shape, [shape], modes=(Mode.PAY,), limit=data.draw(st.sampled_from([None, 3])))
    for o, p, kind in zip(outs, pays, kinds):
        ctx.lwrite(o, payload=kind(p))
    want = PairBatch(Ragged.from_rows([ref_cells(o, shape) for o in outs]),
                     payload=Ragged.from_rows([np.frombuffer(p, np.uint8) for p in pays],
                                              np.uint8))
    assert_batch_eq(ctx.payload_pairs(), want)
    assert ctx.full_pairs() is None


def test_per_cell_payloads_equal_one_lwrite_pairs_call_and_keep_order():
    shape = (4, 5)
    cells = [(r, c) for r in range(4) for c in range(5)]
    ctx, vec = make_ctx(shape, [shape], (Mode.PAY,)), make_ctx(shape, [shape], (Mode.PAY,))
    for r, c in cells[:10]:
        ctx.lwrite([(r, c)], payload=bytes([r, c]))
    ctx.lwrite_pairs(np.array(cells[10:12]), payloads=b"zz")
    for r, c in cells[12:]:
        ctx.lwrite((r, c), payload=bytes([r, c]))
    vec.lwrite_pairs(np.array(cells[:10]), payloads=[bytes(rc) for rc in cells[:10]])
    vec.lwrite_pairs(np.array(cells[10:12]), payloads=[b"zz", b"zz"])
    vec.lwrite_pairs(np.array(cells[12:]), payloads=[bytes(rc) for rc in cells[12:]])
    assert_batch_eq(ctx.payload_pairs(), vec.payload_pairs())


def test_a_reused_list_or_array_does_not_change_recorded_cells():
    shape = (4, 4)
    ctx = make_ctx(shape, [shape])
    cell, arr = [(0, 0)], np.array([[1, 1]])
    ctx.lwrite(cell, arr)
    cell[0] = (3, 3)
    arr[0] = (2, 2)
    lin = np.array([5], np.uint64)
    ctx.lwrite(cell, lin)
    lin[0] = 6
    got = ctx.full_pairs()
    assert got.out.values.tolist() == [0, 15] and got.ins[0].values.tolist() == [5, 5]


def test_zero_dim_arrays_follow_as_linear():
    ctx = make_ctx((), [()])
    calls = [((), Box((), ())), (0, None), (Box((), ()), [0])]
    for c in calls:
        ctx.lwrite(*c)
    assert_batch_eq(ctx.full_pairs(), ref_full(calls, (), [()]))


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("out, inp, msg", [
    ([(4, 0)], None, r"lwrite\(blur\) output cells: cell \(4, 0\) is outside"),
    ((0, -1), None, r"lwrite\(blur\) output cells: cell \(0, -1\) is outside"),
    (16, None, r"lwrite\(blur\) output cells: linear index 16 is outside"),
    ([-1], None, r"lwrite\(blur\) output cells: linear index -1 is negative"),
    (Box((3, 3), (5, 4)), None, r"lwrite\(blur\) output cells: box 3:5,3:4 is outside"),
    ((0, 0), Box((-1, 0), (1, 1)), r"lwrite\(blur\) input 0 cells: box -1:1,0:1 is outside"),
    ((0, 0), [(0, 9)], r"lwrite\(blur\) input 0 cells: cell \(0, 9\) is outside"),
    ((0, 0), (2 ** 70, 0), r"too large|out of range|outside"),
])
def test_cells_outside_raise_when_converted_naming_op_and_cells(out, inp, msg):
    ctx = make_ctx((4, 4), [(4, 4)])
    ctx.lwrite((0, 0), (1, 1))
    ctx.lwrite(out, inp)
    ctx.lwrite((0, 1), (2, 2))
    with pytest.raises((CellError, OverflowError), match=msg):
        ctx.full_pairs()
    got = ctx.full_pairs()  # the refused call records nothing; the others are kept
    assert got.out.values.tolist() == [0, 1] and got.ins[0].values.tolist() == [5, 10]


def test_first_refused_call_is_reported_first():
    ctx = make_ctx((4, 4), [(4, 4)])
    ctx.lwrite((0, 0), (7, 0))
    ctx.lwrite((8, 0), (1, 1))
    with pytest.raises(CellError, match=r"input 0 cells: cell \(7, 0\)"):
        ctx.full_pairs()
    with pytest.raises(CellError, match=r"output cells: cell \(8, 0\)"):
        ctx.full_pairs()
    assert ctx.full_pairs() is None


def test_cells_outside_raise_at_the_buffer_limit_and_before_lwrite_pairs():
    ctx = make_ctx((4, 4), [(4, 4)], limit=2)
    ctx.lwrite((0, 0), (9, 9))
    ctx.lwrite((0, 0), (1, 1))
    with pytest.raises(CellError, match=r"lwrite\(blur\) input 0 cells: cell \(9, 9\)"):
        ctx.lwrite((0, 1), (1, 1))
    ctx.buffer_limit = 100
    ctx.lwrite([(5, 0)], None)
    with pytest.raises(CellError, match=r"lwrite\(blur\) output cells: cell \(5, 0\)"):
        ctx.lwrite_pairs(np.array([[0, 0]]), np.array([[0, 0]]))
    assert ctx.full_pairs().out.values.tolist() == [0, 1]


def test_payload_cells_outside_raise_when_converted():
    ctx = make_ctx((4, 4), [(4, 4)], modes=(Mode.PAY,))
    ctx.lwrite((0, 0), payload=b"a")
    ctx.lwrite((4, 4), payload=b"bb")
    ctx.lwrite((0, 1), payload=b"c")
    with pytest.raises(CellError, match=r"lwrite\(blur\) output cells: cell \(4, 4\)"):
        ctx.payload_pairs()
    got = ctx.payload_pairs()
    assert got.out.values.tolist() == [0, 1]
    assert [got.payload_bytes(k) for k in range(2)] == [b"a", b"c"]


@pytest.mark.parametrize("args, kwargs, msg", [
    (([(0, 0)],), {}, r"lwrite\(blur\): got cells for 0 inputs; the operator has 1"),
    (([(0, 0)], None, None), {}, r"lwrite\(blur\): got cells for 2 inputs"),
    (([(0, 0)], [(1, 1)]), {"payload": b"x"}, r"lwrite\(blur\): give input cells or a payload"),
    (((0.5, 1),), {"payload": b"x"}, r"lwrite\(blur\) output cells: expected integer"),
    (([(0, 0)], np.array([[0, 1, 2]])), {}, r"lwrite\(blur\) input 0 cells: .*3 columns"),
    (([(0, 0)], Box((0,), (1,))), {}, r"lwrite\(blur\) input 0 cells: box 0:1 has rank 1"),
    ((None, [(0, 0)]), {}, r"lwrite\(blur\) output cells: expected integer"),
])
def test_bad_calls_raise_at_the_call_and_record_nothing(args, kwargs, msg):
    ctx = make_ctx((4, 4), [(4, 4)], modes=(Mode.FULL, Mode.PAY))
    with pytest.raises(CellError, match=msg):
        ctx.lwrite(*args, **kwargs)
    assert ctx.full_pairs() is None and ctx.payload_pairs() is None


def test_a_refused_input_drops_the_calls_output_too():
    ctx = make_ctx((4, 4), [(4, 4), (3,)])
    with pytest.raises(CellError, match=r"input 1 cells"):
        ctx.lwrite((0, 0), Box((0, 0), (1, 1)), np.array([[0, 0]]))
    ctx.lwrite((1, 1), None, 2)
    got = ctx.full_pairs()
    assert got.out.values.tolist() == [5] and got.ins[1].values.tolist() == [2]
    assert got.ins[0].offsets.tolist() == [0, 0]


# -- Box construction -----------------------------------------------------------------------
@pytest.mark.parametrize("lo, hi", [
    ((1, 2), (3, 4)),
    ([1, 2], [3, 4]),
    ((np.int64(1), np.int32(2)), np.array([3, 4])),
    ((1.0, 2.9), (3, 4.2)),
    ((True, 2), (3, 4)),
])
def test_box_stores_python_int_tuples_whatever_it_is_given(lo, hi):
    b = Box(lo, hi)
    assert type(b.lo) is tuple and type(b.hi) is tuple
    assert all(type(v) is int for v in b.lo + b.hi)
    assert b.lo == tuple(int(v) for v in lo) and b.hi == tuple(int(v) for v in hi)


def test_box_stays_a_frozen_hashable_dataclass():
    b = Box((1, 2), (3, 4))
    assert b == Box([1, 2], np.array([3, 4])) and hash(b) == hash(Box([1, 2], [3, 4]))
    assert repr(b) == "Box(lo=(1, 2), hi=(3, 4))"
    assert dataclasses.replace(b, hi=(5, 5)) == Box((1, 2), (5, 5))
    assert pickle.loads(pickle.dumps(b)) == b
    assert [f.name for f in dataclasses.fields(Box)] == ["lo", "hi"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.lo = (0, 0)
    with pytest.raises(CellError, match="box corners differ in rank"):
        Box((1,), (2, 3))
    with pytest.raises(CellError, match="box corners differ in rank"):
        Box([1], (2, 3))
