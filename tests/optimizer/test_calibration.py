"""Calibration files, the encoder fit, and measuring through registered sinks."""

import json

import numpy as np
import pytest

import encoders.sink
from optimizer import calibrate as cb
from optimizer.calibration import (ENCODED, FEATURES, Calibration, CalibrationError,
                                   load_calibration, model_key)
from subzero.lineage import LineageSink
from subzero.query.costs import QueryCosts, load_costs


def test_comp_strategies_use_the_payload_sinks_models():
    assert model_key("comp-one-bwd") == "pay-one-bwd"
    assert model_key("full-many-fwd") == "full-many-fwd"
    with pytest.raises(CalibrationError, match="stores nothing"):
        model_key("map")


def test_files_round_trip_and_keep_the_query_costs_field_names(tmp_path):
    cal = Calibration.default()
    cal.query = QueryCosts(shard_fixed=0.5, trace_factor=7.0)
    cal.encoders["full-one-bwd"]["data_bytes"] = {"shard": 100.0, "key": 3.0}
    cal.file_per_logical["full-many-fwd"] = 1.25
    path = cal.save(tmp_path / "c.json")
    doc = json.loads(path.read_text())
    assert set(doc["query"]) == set(QueryCosts().to_json())
    back = load_calibration(path)
    assert back.query.shard_fixed == 0.5
    assert back.logical_factor("full-many-fwd") == 1.25
    assert back.logical_factor("comp-many-bwd") == back.logical_factor("pay-many-bwd") > 0
    assert back.predict("full-one-bwd", "data_bytes", {"shard": 2, "key": 10}) == 230.0
    # the lead's query executor reads the same file
    assert load_costs(path).trace_factor == 7.0


def test_bad_files_are_reported(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"file_per_logical": {"full-many-bwd": "abc"}}))
    with pytest.raises(CalibrationError, match="'abc'; expected numbers"):
        load_calibration(p)
    p.write_text("[1, 2")
    with pytest.raises(CalibrationError, match="not valid JSON"):
        load_calibration(p)
    with pytest.raises(CalibrationError, match="does not exist"):
        load_calibration(tmp_path / "nope.json")


def test_the_committed_calibration_is_complete():
    cal = load_calibration()
    assert set(ENCODED) <= set(cal.encoders)
    assert all(v > 0 for v in cal.query.to_json().values())


def test_the_fit_recovers_a_linear_sink():
    rng = np.random.default_rng(0)
    true = {"shard": 4096.0, "pair": 20.0, "key": 3.0, "value": 1.5}
    rows = []
    for _ in range(12):
        f = {k: float(rng.integers(1, 10**5)) for k in FEATURES}
        f["shard"] = 1.0
        rows.append({"strategy": "full-one-bwd", "features": f,
                     "data_bytes": sum(true.get(k, 0) * v for k, v in f.items()),
                     "index_bytes": 0.0, "store_s": 1e-3 + 1e-7 * f["key"]})
    enc, fit = cb.fit_encoders(rows)
    got = enc["full-one-bwd"]["data_bytes"]
    for k, v in true.items():
        assert got.get(k, 0.0) == pytest.approx(v, rel=1e-3)
    assert fit["full-one-bwd"]["data_bytes"] < 1e-6
    assert enc["full-one-bwd"]["index_bytes"] == {}


class CountingSink(LineageSink):
    """A stand-in sink: 8 bytes per cell on either side plus a 1000-byte header."""

    def __init__(self, spec):
        self.spec, self.n = spec, 0

    def write(self, batch):
        self.n += batch.out_cells + (batch.in_cells if batch.ins else len(batch.payload.values))

    def close(self):
        return {"data_bytes": 1000 + 8 * self.n, "index_bytes": 0, "path": None}


def test_synthetic_lineage_goes_through_the_registered_sinks(monkeypatch, tmp_path):
    monkeypatch.setattr(encoders.sink, "ShardSink", CountingSink)
    rows = cb.measure_encoders(tmp_path, quick=True)
    assert {r["strategy"] for r in rows} == set(ENCODED)
    enc, fit = cb.fit_encoders(rows)
    # bytes = 1000 per shard + 8 per key + 8 per value cell: the fit finds it
    d = enc["full-one-bwd"]["data_bytes"]
    assert d["shard"] == pytest.approx(1000, rel=0.01)
    assert fit["full-one-bwd"]["data_bytes"] < 0.01
    for r in rows:
        assert r["data_bytes"] > 1000


def test_synthetic_cases_cover_fanin_and_fanout():
    cases = cb.synthetic_cases(quick=True)
    stats = [cb.mode_stats(p) for _, _, p in cases]
    fanins = {round(s.fanin) for s in stats if s.in_cells}
    fanouts = {round(s.out_cells / s.pairs) for s in stats if s.pairs}
    assert {0, 1, 9} <= fanins and max(fanins) >= 40  # 0: block-to-cell
    assert {1, 16, 256} <= fanouts
    assert any(s.payload_bytes for s in stats)
