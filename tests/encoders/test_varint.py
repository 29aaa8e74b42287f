import numpy as np
from hypothesis import given, strategies as st

from encoders.formats.varint import (read_prefix_varint, unzigzag, varint_decode, varint_encode,
                                     zigzag)

u64 = st.integers(0, (1 << 64) - 1)


@given(st.lists(u64, max_size=50))
def test_varints_round_trip(values):
    v = np.asarray(values, dtype=np.uint64)
    b, lens = varint_encode(v)
    assert len(b) == lens.sum()
    got, ends = varint_decode(b)
    assert got.tolist() == values
    assert (ends == np.cumsum(lens) - 1).all()


def test_varint_bytes_are_leb128():
    b, _ = varint_encode(np.array([0, 127, 128, 300], dtype=np.uint64))
    assert b.tolist() == [0, 127, 0x80, 1, 0xAC, 2]


def test_varint_decode_stops_force_record_ends():
    # 0x81 continues into the next byte unless a stop ends the record there
    buf = np.array([0x81, 0x05], dtype=np.uint8)
    assert varint_decode(buf)[0].tolist() == [1 + (5 << 7)]
    assert varint_decode(buf, np.array([True, False]))[0].tolist() == [1, 5]


def test_read_prefix_varint_at_offsets():
    b, _ = varint_encode(np.array([300, 5, 1 << 40], dtype=np.uint64))
    vals, lens = read_prefix_varint(b, np.array([0, 2, 3]))
    assert vals.tolist() == [300, 5, 1 << 40] and lens.tolist() == [2, 1, 6]


@given(st.lists(st.integers(-(1 << 62), 1 << 62), max_size=30))
def test_zigzag_round_trip_and_small_codes(values):
    v = np.asarray(values, dtype=np.int64)
    assert unzigzag(zigzag(v)).tolist() == values
    assert zigzag(np.array([0, -1, 1, -2])).tolist() == [0, 1, 2, 3]
