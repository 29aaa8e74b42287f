import numpy as np
import pytest

from encoders.formats import hashing
from encoders.formats.hashing import dedup_rows
from subzero.cells import Ragged


@pytest.mark.parametrize("rows,inverse,first", [
    ([[1, 2, 3], [1, 2, 3], [4, 5, 6]], [0, 0, 1], [0, 2]),       # one length: dense path
    ([[1, 2, 3], [1, 2, 3], [4], []], [0, 0, 1, 2], [0, 2, 3]),   # ragged
])
def test_dedup_rows_is_exact_even_when_hashes_collide(monkeypatch, rows, inverse, first):
    r = Ragged.from_rows(rows)
    inv, fst = dedup_rows(r.values, r.offsets)
    assert sorted(fst.tolist()) == first  # representatives, numbered by hash order
    assert [first.index(int(fst[k])) for k in inv] == inverse
    # every row hashing alike must still not merge different rows
    monkeypatch.setattr(hashing, "finish_hash", lambda h, n: np.zeros(len(n), np.uint64))
    inv, fst = dedup_rows(r.values, r.offsets)
    assert inv.tolist() == inverse and fst.tolist() == first


def test_dedup_rows_of_bytes_compares_whole_rows():
    rows = np.frombuffer(b"abcdefghij" * 3 + b"abcdefghiX", dtype=np.uint8)
    inv, first = dedup_rows(rows, np.arange(5) * 10)
    assert inv.tolist()[:3] == [inv[0]] * 3 and inv[3] != inv[0] and len(first) == 2


def test_shifted_sets_hash_like_their_relative_form():
    v = np.array([10, 11, 15, 20, 21, 25], dtype=np.uint64)
    o = np.array([0, 3, 6])
    h, psum = hashing.poly_hash(v, o)
    rel = h - np.array([10, 20], np.uint64) * psum  # both become {0, 1, 5}
    assert rel[0] == rel[1] and h[0] != h[1]
