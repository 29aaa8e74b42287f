"""The plain-Python path for lookups of a few cells decodes exactly what the vectorized
codec does (the lookups themselves are checked on every encoding by the conformance suite,
on both paths)."""

import numpy as np
from hypothesis import given, settings, strategies as st

from encoders.formats import codec
from encoders.formats.codec import add_anchors, decode_sets
from encoders.formats.varint import varint_encode
from encoders.layouts import cellindex, fewcells
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


class _Heap:
    """A shard with only a record heap (all :func:`fewcells.union` reads)."""

    def __init__(self, records: list[bytes]) -> None:
        lens = np.array([len(r) for r in records], dtype=np.int64)
        self.heap, self.refs = cellindex.build_heap(
            np.frombuffer(b"".join(records), np.uint8), np.r_[0, np.cumsum(lens)])

    def blob(self, name: str) -> np.ndarray:
        return self.heap


def _list_record(cells: list[int]) -> bytes:
    """One absolute delta list, as FullOne stores a forward record."""
    tok = [(len(cells) << 2) | codec.LIST, cells[0]] + [b - a - 1 for a, b in
                                                         zip(cells, cells[1:])]
    return varint_encode(np.array(tok, dtype=np.uint64))[0].tobytes()


def test_union_declines_what_is_too_large_for_plain_python(monkeypatch):
    short, long_ = _list_record([3, 5, 9]), _list_record(list(range(0, 4000, 2)))
    h = _Heap([short, long_])
    assert cellindex.record_span(memoryview(h.heap), int(h.refs[1]))[1] == len(long_)
    small = [(0, int(h.refs[0]))]
    assert fewcells.union(h, "heap", small, 0, [(10_000,)]).tolist() == [3, 5, 9]
    # a record over MAX_RECORD bytes: left to the vectorized path
    assert len(long_) > fewcells.MAX_RECORD
    assert fewcells.union(h, "heap", small + [(1, int(h.refs[1]))], 0, [(10_000,)]) is None
    # records adding up to more bytes than MAX_CELLS: declined before decoding any
    monkeypatch.setattr(fewcells, "MAX_CELLS", len(short) - 1)
    assert fewcells.union(h, "heap", small, 0, [(10_000,)]) is None
    monkeypatch.setattr(fewcells, "MAX_CELLS", len(short))
    assert fewcells.union(h, "heap", small, 0, [(10_000,)]) is not None


def test_touching_keeps_the_cells_inside_the_key_space():
    space = {"count": 4, "lin": [12, 34], "lo": [1, 2], "hi": [4, 5]}  # rows 1-3, cols 2-4
    q = [0, 12, 13, 15, 22, 30, 34, 35, 99]
    assert fewcells.touching(q, space, (10, 10)) == [12, 13, 22, 34]
    assert fewcells.touching(q, {"count": 0}, (10, 10)) == []
    assert fewcells.touching([3, 7], {"count": 2, "lin": [3, 5]}, (10,)) == [3]


@settings(max_examples=80, deadline=None)
@given(st.data(), st.sampled_from([(0, 4), (0, 5), (8, 12)]))
def test_two_byte_find_agrees_with_a_scan(data, layout):
    """A run's item by its two-byte low part: the item whose low part it is, never a match
    straddling items or inside a ref or key (refs drawn to hold the same bytes)."""
    kp, w = layout
    lows = sorted(data.draw(st.sets(st.integers(0, 0xFFFF), max_size=40)))
    items = []
    for v in lows:
        key = data.draw(st.binary(min_size=kp, max_size=kp))
        ref = data.draw(st.one_of(st.binary(min_size=w - kp - 2, max_size=w - kp - 2),
                                  st.sampled_from(lows or [0]).map(
                                      lambda x: (x.to_bytes(2, "big") * w)[:w - kp - 2])))
        items.append(key + v.to_bytes(2, "big") + ref)
    buf = b"".join(items)
    for v in set(lows) | set(data.draw(st.lists(st.integers(0, 0xFFFF), max_size=10))):
        want = lows.index(v) if v in lows else -1
        assert fewcells._find_two_byte(buf, w, kp, v) == want


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_payload_sections_decode_like_the_vectorized_reader(data):
    """Records of payload sections (a count, the lengths, the bytes), each with its cells:
    the plain-Python rows are :func:`read_section`'s and ``take_rows``' exactly."""
    from encoders.formats.csr import take_rows
    from encoders.formats.payloads import join_bytes, read_section
    from encoders.formats.varint import varint_decode

    n = data.draw(st.integers(1, 6))
    pays = [data.draw(st.lists(st.binary(max_size=200), max_size=4)) for _ in range(n)]
    cells = [sorted(data.draw(st.sets(st.integers(0, 1 << 40), min_size=1, max_size=5)))
             for _ in range(n)]
    tok = [t for p in pays for t in [len(p)] + [len(x) for x in p]]
    toff = np.r_[0, np.cumsum([1 + len(p) for p in pays])].astype(np.int64)
    raw = b"".join(x for p in pays for x in p)
    raw_off = np.r_[0, np.cumsum([sum(map(len, p)) for p in pays])].astype(np.int64)
    body, boff = join_bytes(np.array(tok, dtype=np.uint64), toff,
                            (np.frombuffer(raw, np.uint8), raw_off))
    recs = [body[boff[k]:boff[k + 1]].tobytes() for k in range(n)]
    h = _Heap(recs)
    assert fewcells.records(h.heap, [int(r) for r in h.refs]) == recs
    (cv, co), (pv, po) = fewcells.payload_rows(cells, recs)
    stops = np.zeros(len(body), dtype=bool)
    nz = np.diff(boff) > 0
    stops[boff[1:][nz] - 1] = True
    t, ends = varint_decode(body, stops)
    m, want = read_section(body, t, ends, np.searchsorted(ends, boff, side="left")[:-1])
    assert pv.tolist() == want.values.tolist() and po.tolist() == want.offsets.tolist()
    flat = np.array([c for cs in cells for c in cs], dtype=np.uint64)
    coff = np.r_[0, np.cumsum([len(cs) for cs in cells])].astype(np.int64)
    wv, wo = take_rows(flat, coff, np.repeat(np.arange(n), m))
    assert cv.tolist() == wv.tolist() and co.tolist() == wo.tolist()
    # a record too long for plain Python is left to the vectorized path
    assert fewcells.payload_rows([[1]], [bytes([1, 0x80, 0x10]) + bytes(2048)]) is None


def test_a_garbled_payload_record_is_an_error_not_a_short_payload():
    """A record whose payload bytes are cut short, or run on past its payloads, raises
    (a query names the shard damaged) instead of answering with a truncated payload."""
    import pytest

    good = bytes([1, 3]) + b"abc"  # one payload of 3 bytes
    assert fewcells.payload_rows([[7]], [good])[1][0].tobytes() == b"abc"
    for bad in (good[:-1], good + b"x"):
        with pytest.raises(ValueError, match="payload record of"):
            fewcells.payload_rows([[7]], [bad])
    with pytest.raises(IndexError):  # a length missing: the varints run out
        fewcells.payload_rows([[7]], [bytes([2, 3])])
