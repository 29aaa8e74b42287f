"""The size/cost model ranks encodings the way the paper's Figure 8 does."""

import pytest

from encoders.registry import encoding_for

N = 100_000


def disk(strategy, pairs, fanin, payload=0.0):
    return encoding_for(strategy).estimate(pairs, N, fanin, payload).disk_bytes


def test_fullone_wins_at_low_fanout_and_fullmany_at_high_fanout():
    assert disk("full-one-bwd", N, 10) < disk("full-many-bwd", N, 10)        # fanout 1
    assert disk("full-many-bwd", N // 100, 10) < disk("full-one-bwd", N // 100, 10)


def test_forward_fullone_grows_with_fanin():
    assert disk("full-one-fwd", N, 100) > 5 * disk("full-one-fwd", N, 10)


def test_payload_size_drives_payone_not_fanin():
    assert disk("pay-one-bwd", N, 10, 4.0) == disk("pay-one-bwd", N, 100, 4.0)
    assert disk("pay-one-bwd", N, 10, 400.0) > disk("pay-one-bwd", N, 10, 4.0)


@pytest.mark.parametrize("strategy", ["full-one-bwd", "full-many-fwd", "pay-many-bwd"])
def test_estimates_are_positive_and_lookups_cost_more_for_more_cells(strategy):
    e = encoding_for(strategy).estimate(N, N, 10, 40.0)
    assert e.disk_bytes > 0 and e.write_s > 0 and e.scan_s > e.lookup_fixed_s
    assert e.lookup_fixed_s + 1000 * e.lookup_per_cell_s > e.lookup_fixed_s
