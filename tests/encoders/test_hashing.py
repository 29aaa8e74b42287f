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


@pytest.mark.parametrize("width", [1, 3, 5, 8, 9, 12])
def test_dedup_rows_of_byte_rows_of_one_width_is_a_dict(width):
    """Rows of one width (up to 8 bytes: one word each; beyond: hashed) dedup as a dict
    of their bytes would: equal rows share an id, the representative is such a row."""
    rng = np.random.default_rng(width)
    m = rng.integers(0, 3, (400, width)).astype(np.uint8)  # few values: many repeats
    inv, first = dedup_rows(m.reshape(-1), np.arange(401) * width)
    ids: dict[bytes, int] = {}
    for k, row in enumerate(m):
        want = ids.setdefault(row.tobytes(), int(inv[k]))
        assert inv[k] == want and m[first[inv[k]]].tobytes() == row.tobytes()
    assert len(first) == len(ids)
