"""The plain-Python path for lookups of a few cells decodes exactly what the vectorized
codec does (the lookups themselves are checked on every encoding by the conformance suite,
on both paths)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from encoders import cellindex, fewcells
from encoders.codec import add_anchors, decode_sets
from encoders.varint import varint_encode
from tests.encoders.strategies import shapes
from tests.encoders.test_codec import drawn_sets


@settings(max_examples=60, deadline=None)
@given(st.data(), shapes, st.booleans())
def test_sets_decode_like_the_vectorized_codec(data, shape, relative):
    r, anchors, tok, off = drawn_sets(data, shape, relative, max_sets=6)
    vals, offs, rel, _ = decode_sets(tok, off[:-1], shape)
    want = add_anchors(vals, offs, rel, anchors)
    b, _ = varint_encode(tok)
    stream = fewcells.varints(b.tobytes())
    assert stream == tok.tolist()
    p = 0
    for k in range(len(r)):
        cells, is_rel, p = fewcells.decode_set(stream, p, shape)
        assert is_rel == relative
        got = [int(anchors[k]) + c for c in cells] if is_rel else cells
        assert got == want[offs[k]:offs[k + 1]].tolist()
        assert fewcells.skip_set(stream, off[k], len(shape)) == off[k + 1]


def test_records_are_read_up_to_the_size_limit():
    small, big = bytes(range(5)), bytes(fewcells.MAX_RECORD + 1)
    lens = np.array([len(small), len(big)], dtype=np.int64)
    heap, refs = cellindex.build_heap(np.frombuffer(small + big, np.uint8),
                                      np.r_[0, np.cumsum(lens)])
    view = memoryview(heap)
    assert fewcells.read_record(view, int(refs[0])) == small
    assert fewcells.read_record(view, int(refs[1])) is None  # the vectorized path reads it


def test_touching_keeps_the_cells_inside_the_key_space():
    space = {"count": 4, "lin": [12, 34], "lo": [1, 2], "hi": [4, 5]}  # rows 1-3, cols 2-4
    q = [0, 12, 13, 15, 22, 30, 34, 35, 99]
    assert fewcells.touching(q, space, (10, 10)) == [12, 13, 22, 34]
    assert fewcells.touching(q, {"count": 0}, (10, 10)) == []
    assert fewcells.touching([3, 7], {"count": 2, "lin": [3, 5]}, (10,)) == [3]
