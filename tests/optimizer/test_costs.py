"""The cost model on hand-made operator profiles."""

import pytest

from encoders.sizes import features
from optimizer.calibration import Calibration
from optimizer.costs import CostModel, summarize
from optimizer.stats import Measured, ModeStats, OpProfile, Probe
from subzero.modes import (BLACKBOX, FULL_MANY_BWD, FULL_MANY_FWD, FULL_ONE_BWD, FULL_ONE_FWD,
                           MAP, PAY_MANY_BWD, PAY_ONE_BWD, Mode, Strategy)
from subzero.query.costs import QueryCosts

N = 100 * 100


def profile(fanin=9.0, pairs=N, out=N, tasks=2, measured=None, probes=None, pay=None,
            supported=(Mode.FULL,), runtime=1.0, capture=0.4):
    modes = {Mode.FULL: ModeStats(pairs, out, out * fanin, out, out, 0, 0, capture,
                                  (out * fanin,))}
    if pay is not None:
        modes[Mode.PAY] = pay
    return OpProfile("f", "udf", frozenset({*supported, Mode.BLACKBOX}), (100, 100),
                     ((100, 100),), (50, 100), tasks, runtime, 2 * runtime, 2.0, modes=modes,
                     measured=measured or {}, probes=probes or {})


def test_features_swap_keys_and_values_with_the_direction():
    ms = ModeStats(pairs=10, out_cells=20, in_cells=90, out_distinct=20, in_distinct=40)
    bwd = features(ms, Strategy.parse("full-one-bwd"), 3)
    fwd = features(ms, Strategy.parse("full-one-fwd"), 3)
    assert (bwd["key"], bwd["key_distinct"], bwd["value"]) == (20, 20, 90)
    assert (fwd["key"], fwd["key_distinct"], fwd["value"]) == (90, 40, 20)
    assert bwd["shard"] == 3 and bwd["pair"] == 10


def test_disk_grows_with_fanin_and_nothing_stored_costs_nothing():
    cm = CostModel(Calibration.default())
    small, big = profile(fanin=1), profile(fanin=49)
    for s in (FULL_ONE_BWD, FULL_MANY_BWD, FULL_ONE_FWD, FULL_MANY_FWD):
        assert 0 < cm.disk(small, s) < cm.disk(big, s)
    assert cm.disk(big, BLACKBOX) == cm.disk(big, MAP) == 0


def test_measured_bytes_win_over_probes_and_probes_over_the_model():
    cal = Calibration.default()
    cm = CostModel(cal)
    fixed = (cal.predict("full-one-bwd", "data_bytes", {"shard": 1})
             + cal.predict("full-one-bwd", "index_bytes", {"shard": 1}))
    # the probe wrote 2 shards holding a quarter of the output: 2 * fixed + 1000 bytes
    probe = Probe(bytes=2 * fixed + 1000, store_task_s=0.1, shards=2, cells=N / 4)
    p = profile(probes={"full-one-bwd": probe})
    assert cm.disk(p, FULL_ONE_BWD) == pytest.approx(2 * fixed + 4000)
    assert cm.estimate(p, FULL_ONE_BWD).source == "probe"
    m = profile(probes={"full-one-bwd": probe},
                measured={"full-one-bwd": Measured("r1", 12345, 0.5, 2)})
    assert cm.disk(m, FULL_ONE_BWD) == 12345
    assert cm.store_s(m, FULL_ONE_BWD) == pytest.approx(0.5 / 2)  # 2 tasks at once
    assert cm.estimate(m, FULL_ONE_BWD).source == "measured"


def test_probes_that_fill_no_page_scale_what_they_hold():
    """Grouped or sparse lineage may leave every probed shard at its first pages: the file
    bytes then say nothing of growth, the logical bytes do (times file bytes per logical
    byte, calibrated per encoding)."""
    cal = Calibration.default()
    cal.file_per_logical["full-many-bwd"] = 1.5
    cm = CostModel(cal)
    fixed = (cal.predict("full-many-bwd", "data_bytes", {"shard": 1})
             + cal.predict("full-many-bwd", "index_bytes", {"shard": 1}))
    probe = Probe(bytes=2 * fixed, store_task_s=0.1, shards=2, cells=N / 4, logical=800)
    p = profile(probes={"full-many-bwd": probe, "full-one-bwd": probe})
    tasks = p.tasks
    assert cm.disk(p, FULL_MANY_BWD) == pytest.approx(tasks * fixed + 1.5 * 800 * 4)
    # a *One probe past its first pages keeps scaling its file bytes
    one_fixed = cal.predict("full-one-bwd", "data_bytes", {"shard": 1})
    big = Probe(bytes=2 * one_fixed + 90000, store_task_s=0.1, shards=2, cells=N / 4,
                logical=800)
    assert cm.disk(profile(probes={"full-one-bwd": big}), FULL_ONE_BWD) == \
        pytest.approx(tasks * one_fixed + 360000)


def test_capture_is_per_mode_and_divided_by_parallel_tasks():
    cm = CostModel(Calibration.default())
    p = profile(capture=0.4)
    assert cm.capture_s(p, Mode.FULL) == pytest.approx(0.2)
    both = cm.runtime_with(p, [FULL_ONE_BWD, FULL_ONE_FWD])
    assert both == pytest.approx(1.0 + 0.2 + cm.store_s(p, FULL_ONE_BWD)
                                 + cm.store_s(p, FULL_ONE_FWD))


def test_matched_lookups_beat_scans_and_nothing_costs_more_than_reexecution():
    q = QueryCosts(trace_factor=4.0)
    cm = CostModel(Calibration.default(), q)
    p = profile(pairs=N, runtime=5.0)
    matched = cm.query_cost(p, FULL_ONE_BWD, "backward", 10)
    scan = cm.query_cost(p, FULL_ONE_BWD, "forward", 10)
    reexec = cm.query_cost(p, BLACKBOX, "backward", 10)
    assert matched < scan <= reexec
    assert cm.query_cost(p, FULL_ONE_FWD, "forward", 10) == pytest.approx(matched)
    # a huge mismatched scan is capped by re-execution (the executor switches)
    big = profile(pairs=10**9, runtime=0.01)
    assert cm.query_cost(big, FULL_ONE_BWD, "forward", 10) == pytest.approx(
        cm.reexec_cost(big, 10))


def test_reexecution_cost_grows_with_the_query_size():
    cm = CostModel(Calibration.default())
    p = OpProfile("f", "udf", frozenset({Mode.FULL}), (2000, 500), ((2000, 500),),
                  (500, 500), 4, 2.0, 4.0, 2.0)
    costs = [cm.reexec_cost(p, n) for n in (1, 10, 1000, 10**6)]
    assert costs == sorted(costs) and costs[0] < costs[-1]


def test_payload_strategies_answer_backward_and_scan_forward():
    pay = ModeStats(pairs=N, out_cells=N, out_distinct=N, payload_bytes=N, payload_cell_bytes=N,
                    capture_task_s=0.1)
    cm = CostModel(Calibration.default(), QueryCosts(trace_factor=50.0))
    p = profile(pay=pay, supported=(Mode.FULL, Mode.PAY), runtime=10.0)
    assert cm.query_cost(p, PAY_ONE_BWD, "backward", 10) < cm.query_cost(
        p, PAY_ONE_BWD, "forward", 10)
    assert cm.disk(p, PAY_MANY_BWD) > 0


def test_summarize_takes_the_best_strategy_per_direction():
    cm = CostModel(Calibration.default())
    p = profile(runtime=5.0)
    sizes = {"backward": [(1.0, 10)], "forward": [(1.0, 10)]}
    one = summarize(cm, p, [FULL_ONE_BWD], sizes)
    both = summarize(cm, p, [FULL_ONE_BWD, FULL_ONE_FWD], sizes)
    assert both["q_backward"] == pytest.approx(one["q_backward"])
    assert both["q_forward"] < one["q_forward"]
    assert both["disk"] == pytest.approx(one["disk"] + cm.disk(p, FULL_ONE_FWD))


def test_an_operator_mapping_payloads_in_one_call_pays_one_group_not_one_per_payload():
    """A query maps a step's payloads with one ``map_p_rows`` call when the operator has
    it (the cosmic-ray detector): its stored lineage is not charged a ``map_p`` call per
    distinct payload (at 64x that made re-execution look cheaper for 250 cells)."""
    from dataclasses import replace

    from workflows.astro_udfs import CosmicRayDetect, StarDetect

    assert CosmicRayDetect().batches_payloads()
    assert not StarDetect().batches_payloads()  # star payloads vary in width
    pay = ModeStats(pairs=N, out_cells=N, out_distinct=N, payload_bytes=N, payload_cell_bytes=N,
                    capture_task_s=0.1)
    cm = CostModel(Calibration.default(), QueryCosts(trace_factor=1e6))
    p = profile(pay=pay, supported=(Mode.FULL, Mode.PAY), runtime=10.0)
    per_group = cm.query_cost(p, PAY_ONE_BWD, "backward", 250)
    batched = cm.query_cost(replace(p, batch_payloads=True), PAY_ONE_BWD, "backward", 250)
    c = cm.query
    assert per_group - batched == pytest.approx(249 * c.payload_per_group)
