"""The benchmarks' shared plots draw every strategy, stored lineage or not."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _common import grouped_log_bars, overhead_bars  # noqa: E402


def test_overhead_and_query_plots_are_written(tmp_path):
    rows = [{"strategy": "blackbox", "runtime_s": 1.0, "lineage_bytes": 0},
            {"strategy": "subzero", "runtime_s": 1.1, "lineage_bytes": 270_000}]
    overhead_bars(tmp_path / "png" / "overhead.png", rows, "overhead")
    grouped_log_bars(tmp_path / "png" / "queries.png", ["BQ0", "FQ0"],
                     [("blackbox", [0.7, 0.03]), ("subzero", [0.0025, 0.0003])], "queries")
    for name in ("overhead.png", "queries.png"):
        png = (tmp_path / "png" / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5000
