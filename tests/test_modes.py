import pytest

from subzero.errors import ModeError
from subzero.modes import (STRATEGIES, Direction, Mode, Strategy, capture_modes, parse_modes)


def test_strategy_names_roundtrip():
    for name, s in STRATEGIES.items():
        assert Strategy.parse(name) == s and s.name == name
    assert len([s for s in STRATEGIES.values() if s.stored]) == 10


def test_full_compact_strategies_parse_in_both_directions():
    assert Strategy.parse("full-compact-bwd") == Strategy(Mode.FULL, "FullCompact",
                                                          Direction.BACKWARD)
    assert Strategy.parse("full-compact-fwd").direction is Direction.FORWARD
    with pytest.raises(ModeError, match="cannot use encoding"):
        Strategy(Mode.PAY, "FullCompact", Direction.BACKWARD)


def test_payload_encodings_are_backward_only_and_modes_match_encodings():
    with pytest.raises(ModeError, match="backward only"):
        Strategy(Mode.PAY, "PayOne", Direction.FORWARD)
    with pytest.raises(ModeError, match="cannot use encoding"):
        Strategy(Mode.FULL, "PayOne", Direction.BACKWARD)
    with pytest.raises(ModeError, match="unknown strategy 'nope'"):
        Strategy.parse("nope")
    with pytest.raises(ModeError, match="unknown lineage mode"):
        parse_modes(["FULL", "SOME"])


def test_capture_modes():
    assert capture_modes([Strategy.parse("map")]) == {Mode.BLACKBOX}
    assert capture_modes([Strategy.parse("full-one-bwd"), Strategy.parse("pay-one-bwd")]) == {
        Mode.FULL, Mode.PAY}
    with pytest.raises(ModeError, match="PAY and COMP"):
        capture_modes([Strategy.parse("comp-one-bwd"), Strategy.parse("pay-one-bwd")])
