"""benchmarks/bench_compression.py: the Parquet baseline stores the pairs it is given, and a
tiny run measures every registered Full encoding beside it with answers checked."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="the test extra is not installed: pip install -e "
                                      "'.[test]'")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_compression as bc  # noqa: E402

from subzero.cells import Ragged  # noqa: E402
from subzero.lineage import PairBatch  # noqa: E402


def _expanded(pairs: PairBatch, i: int) -> set[tuple[int, int]]:
    """Every (output cell, input cell) of the region pairs, one pair at a time."""
    return {(int(o), int(v)) for k in range(len(pairs)) for o in pairs.out.row(k)
            for v in pairs.ins[i].row(k)}


def test_parquet_baseline_decodes_to_the_cell_pairs_of_every_workload(tmp_path):
    for w in bc.synthetic_workloads((9, 7), seed=3):
        _, paths = bc.write_parquet(tmp_path / w.operator, w.pairs)
        assert len(paths) == len(w.pairs.ins) == 1
        out, ins = bc.parquet_pairs(paths[0])
        assert out.dtype == np.uint32 and np.all(np.diff(out.astype(np.int64)) >= 0)
        assert set(zip(out.tolist(), ins.tolist())) == _expanded(w.pairs, 0), w.name
        assert len(out) == len(_expanded(w.pairs, 0))  # sorted, no duplicate row


def test_parquet_baseline_of_a_two_input_operator_answers_like_brute_force(tmp_path):
    # region pairs with several output cells, a repeated cell pair, and two inputs
    out = Ragged.from_rows([np.array([0, 1]), np.array([1]), np.array([5])])
    a = Ragged.from_rows([np.array([2, 3]), np.array([3]), np.array([0, 7])])
    b = Ragged.from_rows([np.array([4]), np.array([4, 5]), np.array([1])])
    pairs = PairBatch(out, ins=(a, b))
    _, paths = bc.write_parquet(tmp_path, pairs)
    assert [sorted(zip(*(c.tolist() for c in bc.parquet_pairs(p)))) for p in paths] == [
        sorted(_expanded(pairs, 0)), sorted(_expanded(pairs, 1))]
    reader = bc.ParquetReader(paths[1])
    for cells in (np.array([1], np.uint64), np.array([0, 5], np.uint64)):
        assert reader.backward(cells).tolist() == bc.brute(pairs, cells, 1, True,
                                                           (6, 8)).tolist()
        assert reader.forward(cells).tolist() == bc.brute(pairs, cells, 1, False,
                                                          (6, 8)).tolist()
    assert reader.forward(np.array([4], np.uint64)).tolist() == [0, 1]


def test_every_registered_full_encoding_is_measured_with_its_strategies():
    variants = bc.full_variants()
    names = {e for e, _, _ in variants}
    assert {"FullOne", "FullMany"} <= names and not any(e.startswith("Pay") for e in names)
    assert ("FullOne", "bwd", "full-one-bwd") in variants
    assert ("FullMany", "fwd", "full-many-fwd") in variants


def test_a_tiny_run_reports_every_encoding_beside_parquet(tmp_path):
    doc = bc.run(quick=True, repeat=1, groups=("synthetic",), shape=(12, 10))
    doc = json.loads(json.dumps(doc))  # what --out writes
    strategies = [s for _, _, s in bc.full_variants()] + ["parquet-zstd"]
    names = ["synthetic:" + n for n in ("cleaner", "stencil3x3", "stencil9x9", "rowsum",
                                        "transpose", "random")]
    assert [w["name"] for w in doc["workloads"]] == names
    assert [b["workload"] for b in doc["bytes"]] == names
    assert len(doc["rows"]) == len(names) * len(strategies)
    for w in names:
        mine = [r for r in doc["rows"] if r["workload"] == w]
        assert [r["strategy"] for r in mine] == strategies
        parquet = mine[-1]["disk_bytes"]
        for r in mine:
            assert r["name"] == f"{w}/{r['strategy']}"
            assert r["disk_bytes"] > 0 and r["write_s"] > 0
            assert r["ratio_to_parquet"] == pytest.approx(r["disk_bytes"] / parquet)
            assert r["ratio_to_input"] == pytest.approx(r["disk_bytes"] / r["input_bytes"])
            for side in ("backward", "forward"):
                for n in bc.QUERY_SIZES:
                    assert r[f"{side}_{n}_s"] > 0
                    asked, answered = r[f"{side}_{n}_cells"]
                    assert 1 <= asked <= n and answered >= 1
    for t in doc["targets"]:  # the targets, for FullCompact when it is registered
        assert t["strategy"].startswith("full-compact-") and isinstance(t["met"], bool)
    assert doc["compact_registered"] == ("FullCompact" in {e for e, _, _ in
                                                           bc.full_variants()})
    assert doc["command"].startswith("python benchmarks/bench_compression.py")


def test_the_plot_has_a_panel_per_group(tmp_path):
    rows = [{"workload": "synthetic:a", "strategy": s, "disk_bytes": b}
            for s, b in (("full-one-bwd", 4096), ("parquet-zstd", 900))]
    workloads = [{"name": "synthetic:a", "group": "synthetic", "input_bytes": 2000}]
    [png] = bc.plot(rows, workloads, str(tmp_path))
    assert Path(png).name == "compression.png" and Path(png).stat().st_size > 0


def test_an_encoding_that_fails_to_write_is_reported_and_the_others_measured(monkeypatch):
    write = bc.write_encoding

    def failing(home, strategy, w):
        if strategy == "full-many-fwd" and w.operator == "rowsum":
            raise MemoryError("Unable to allocate 31.3 GiB\nfor an array")
        return write(home, strategy, w)

    monkeypatch.setattr(bc, "write_encoding", failing)
    doc = bc.run(quick=True, repeat=1, groups=("synthetic",), shape=(8, 6))
    [bad] = [r for r in doc["rows"] if r.get("error")]
    assert bad["name"] == "synthetic:rowsum/full-many-fwd" and bad["disk_bytes"] is None
    assert bad["error"] == "MemoryError: Unable to allocate 31.3 GiB"
    rowsum = [r for r in doc["rows"] if r["workload"] == "synthetic:rowsum"]
    assert len(rowsum) == len(bc.full_variants()) + 1
    assert all(r["disk_bytes"] > 0 for r in rowsum if r is not bad)
