import numpy as np
import pytest

from encoders.formats import csr


def test_interleave_concatenates_rows_part_by_part():
    v, o = csr.interleave([(np.array([1, 2, 3]), np.array([0, 2, 2, 3])),
                           (np.array([7, 8]), np.array([0, 0, 1, 2]))])
    assert v.tolist() == [1, 2, 7, 3, 8] and o.tolist() == [0, 2, 3, 5]


def test_take_rows_ragged_and_fixed_width():
    v, o = csr.take_rows(np.arange(6), np.array([0, 1, 3, 6]), np.array([2, 0, 2]))
    assert v.tolist() == [3, 4, 5, 0, 3, 4, 5] and o.tolist() == [0, 3, 4, 7]
    v, o = csr.take_rows(np.arange(6), np.array([0, 2, 4, 6]), np.array([1, 1]))
    assert v.tolist() == [2, 3, 2, 3] and o.tolist() == [0, 2, 4]


def test_union_by_owner_merges_sorted_unique():
    vals, off = csr.union_by_owner(np.array([5, 1, 5, 2, 9], np.uint64),
                                   np.array([0, 0, 0, 2, 2]), 3)
    assert off.tolist() == [0, 2, 2, 4] and vals.tolist() == [1, 5, 2, 9]


def test_canonical_rows_sorts_and_dedups_within_rows_only():
    v, o = csr.canonical_rows(np.array([3, 1, 3, 1], np.uint64), np.array([0, 3, 4]))
    assert v.tolist() == [1, 3, 1] and o.tolist() == [0, 2, 3]


def test_segment_sums_and_any_handle_empty_rows():
    o = np.array([0, 2, 2, 5])
    assert csr.segment_sum_u64(np.arange(5, dtype=np.uint64), o).tolist() == [1, 0, 9]
    assert csr.segment_any(np.array([0, 0, 1, 0, 0], bool), o).tolist() == [False, False,
                                                                            True]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_uniq_matches_numpy(n):
    x = np.random.default_rng(n).integers(0, 4, n * 3).astype(np.uint64)
    assert csr.uniq(x).tolist() == np.unique(x).tolist()
    u, inv, first = csr.uniq_inverse(x)
    assert (u[inv] == x).all() and (x[first] == u).all()


@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_compact_ids_is_uniq_inverse(n):
    """Marking the ids seen gives the distinct values and inverse a sort gives."""
    rng = np.random.default_rng(n)
    for bound in (1, 5, 1000):
        x = rng.integers(0, bound, n)
        u, inv = csr.compact_ids(x, bound)
        want_u, want_inv, _ = csr.uniq_inverse(x)
        assert u.tolist() == want_u.tolist() and inv.tolist() == want_inv.tolist()
