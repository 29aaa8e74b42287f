import numpy as np
from hypothesis import given, settings, strategies as st

from encoders.formats import codec
from encoders.formats.codec import add_anchors, decode_sets, set_tokens
from subzero.cells import Box, Ragged
from tests.encoders.strategies import cell_sets, shapes


def test_full_rectangles_become_boxes_and_others_delta_lists():
    shape = (5, 6)
    box = Box((1, 2), (4, 5)).linear(shape)
    holes = box[:-1]
    r = Ragged.from_rows([box, holes, np.array([7], np.uint64), np.empty(0, np.uint64)])
    tok, off = set_tokens(r.values, r.offsets, shape)
    kinds = (tok[off[:-1]] & np.uint64(3)).tolist()
    assert kinds == [codec.BOX, codec.LIST, codec.LIST, codec.LIST]
    assert tok[off[0]:off[1]].tolist() == [codec.BOX, 1, 2, 3, 3]
    assert tok[off[2]:off[3]].tolist() == [(1 << 2) | codec.LIST, 7]


def test_delta_lists_store_gaps_minus_one():
    r = Ragged.from_rows([np.array([4, 5, 9], np.uint64)])
    tok, _ = set_tokens(r.values, r.offsets, (100,), boxes=False)
    assert tok.tolist() == [(3 << 2) | codec.LIST, 4, 0, 3]


def test_relative_sets_of_translated_boxes_are_identical():
    shape = (10, 10)
    a = Box((1, 1), (4, 4)).linear(shape)       # around cell (2, 2) = 22
    b = Box((5, 6), (8, 9)).linear(shape)       # around cell (6, 7) = 67
    clipped = Box((0, 0), (2, 2)).linear(shape)  # around (0, 0): clipped, so different
    r = Ragged.from_rows([a, b, clipped])
    tok, off = set_tokens(r.values, r.offsets, shape, np.array([22, 67, 0], np.uint64))
    rows = [tok[off[k]:off[k + 1]].tolist() for k in range(3)]
    assert rows[0] == rows[1] != rows[2]


def drawn_sets(data, shape, relative, max_sets=8):
    """Random canonical cell sets, an anchor each, and their token streams."""
    rows = data.draw(st.lists(cell_sets(shape), min_size=1, max_size=max_sets))
    r = Ragged.from_rows([np.unique(x) for x in rows])
    size = int(np.prod(shape))
    anchors = np.asarray(data.draw(st.lists(st.integers(0, size - 1), min_size=len(r),
                                            max_size=len(r))), dtype=np.uint64)
    tok, off = set_tokens(r.values, r.offsets, shape, anchors if relative else None)
    return r, anchors, tok, off


@settings(max_examples=60, deadline=None)
@given(st.data(), shapes, st.booleans())
def test_sets_round_trip_absolute_and_relative(data, shape, relative):
    r, anchors, tok, off = drawn_sets(data, shape, relative)
    vals, offs, rel, nxt = decode_sets(tok, off[:-1], shape)
    assert (nxt == off[1:]).all() and rel.tolist() == [relative] * len(r)
    assert (offs == r.offsets).all()
    assert (add_anchors(vals, offs, rel, anchors) == r.values).all()


@settings(max_examples=60, deadline=None)
@given(st.data(), shapes, st.sampled_from(["lists", "relative", "boxes", "empty"]))
def test_scatter_lists_sets_exactly_the_decoded_cells(data, shape, kind):
    from encoders.formats.varint import varint_encode

    size = int(np.prod(shape))
    rows = data.draw(st.lists(cell_sets(shape), min_size=1, max_size=6))
    rows = [np.unique(x) for x in rows if len(x)] or [np.array([0], np.uint64)]
    if kind == "empty":
        rows.append(np.empty(0, np.uint64))
    r = Ragged.from_rows(rows)
    anchors = np.zeros(len(r), np.uint64) if kind == "relative" else None
    tok, off = set_tokens(r.values, r.offsets, shape, anchors, boxes=kind == "boxes")
    b, blen = varint_encode(tok)
    # one record per set: its tokens' bytes
    ends = np.cumsum(blen)
    boff = np.r_[0, ends[off[1:] - 1]].astype(np.int64)
    into = np.zeros(size, dtype=bool)
    done = codec.scatter_lists(b, boff, into)
    kinds = tok[off[:-1]] & np.uint64(3)
    plain = (kinds == codec.LIST).all() and (np.diff(r.offsets) > 0).all()
    assert done == plain
    if done:
        assert np.flatnonzero(into).tolist() == np.unique(r.values).tolist()
    else:
        assert not into.any()  # left untouched for the general path
