"""benchmarks/compare.py: figures keyed by name, best run per side, speed-ups read upside down."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from compare import best, compare, flatten  # noqa: E402


def doc(median_s, speedup, noise):
    return {"summary": {"bq_speedup_mean": speedup},
            "one_step": [{"strategy": "full-one-bwd", "frontier": "1", "median_s": median_s,
                          "times": [noise, median_s]}]}


def test_figures_are_keyed_by_their_names_and_raw_samples_are_not_compared():
    flat = flatten(doc(0.002, 300.0, 9.0))
    assert flat["one_step[full-one-bwd/frontier=1].median_s"] == 0.002
    res = compare(flat, flatten(doc(0.002, 300.0, 1.0)))
    assert res["figures"] == 2 and res["worse"] == 0 and res["better"] == 0


def test_slower_medians_and_smaller_speedups_count_as_worse_and_the_best_run_is_kept():
    old = flatten(doc(0.002, 300.0, 0.0))
    slow = flatten(doc(0.003, 200.0, 0.0))
    res = compare(old, slow)
    assert res["worse"] == 2 and res["median_new_over_old"] == 1.5
    # a second, faster run of the new side settles it
    res = compare(old, best([slow, flatten(doc(0.0021, 310.0, 0.0))]))
    assert res["worse"] == 0 and res["better"] == 0
