"""The size model (encoders.sizes, with its default coefficients) ranks encodings the way
the paper's Figure 8 does."""

from types import SimpleNamespace

import pytest

from encoders.sizes import ENCODED, disk_bytes, features, predict
from optimizer.calibration import Calibration

N = 100_000  # output cells with lineage, each in one pair


def lineage(pairs, fanin, payload=0.0):
    """Statistics of ``N`` output cells in ``pairs`` pairs (fan-out ``N / pairs``), each
    pair reading ``fanin`` input cells of its own (disjoint input sets, as in a
    block-to-cell reduction) or carrying ``payload`` bytes."""
    return SimpleNamespace(pairs=pairs, out_cells=N, out_distinct=N, in_cells=pairs * fanin,
                           in_distinct=pairs * fanin, payload_bytes=pairs * payload,
                           payload_cell_bytes=N * payload)


def disk(strategy, stats):
    return disk_bytes(None, strategy, features(stats, strategy, shards=1))


def test_fullone_wins_at_low_fanout_and_fullmany_at_high_fanout():
    fanout_1, fanout_100 = lineage(N, 10), lineage(N // 100, 10)
    assert disk("full-one-bwd", fanout_1) < disk("full-many-bwd", fanout_1)
    assert disk("full-many-bwd", fanout_100) < disk("full-one-bwd", fanout_100)


def test_forward_fullone_grows_with_fanin():
    assert disk("full-one-fwd", lineage(N, 100)) > 5 * disk("full-one-fwd", lineage(N, 10))


def test_payload_size_drives_payone_not_fanin():
    assert disk("pay-one-bwd", lineage(N, 10, 4.0)) == disk("pay-one-bwd", lineage(N, 100, 4.0))
    assert disk("pay-one-bwd", lineage(N, 10, 400.0)) > disk("pay-one-bwd", lineage(N, 10, 4.0))


@pytest.mark.parametrize("strategy", [*ENCODED, "comp-one-bwd", "comp-many-bwd"])
def test_estimates_are_positive(strategy):
    f = features(lineage(N, 10, 40.0), strategy, shards=1)
    assert disk_bytes(None, strategy, f) > 0
    assert predict(None, strategy, "store_s", f) > 0


def test_the_optimizer_calibration_predicts_with_the_same_model():
    cal = Calibration.default()
    f = features(lineage(N // 10, 10), "full-many-fwd", shards=3)
    for target in ("data_bytes", "index_bytes", "store_s"):
        assert cal.predict("full-many-fwd", target, f) == predict(None, "full-many-fwd",
                                                                  target, f)
    cal.encoders["pay-one-bwd"]["data_bytes"] = {"key": 2.0}
    f = features(lineage(N, 0, 4.0), "comp-one-bwd", shards=1)
    assert cal.predict("comp-one-bwd", "data_bytes", f) == 2.0 * N
    assert predict(cal.encoders, "comp-one-bwd", "data_bytes", f) == 2.0 * N
