import pytest

import encoders
from encoders.registry import encoding_for
from subzero.engine.layout import shard_spec
from subzero.errors import ModeError
from subzero.modes import STRATEGIES, Direction, Strategy

from encoders.sink import make_sink


@pytest.mark.parametrize("name", sorted(n for n, s in STRATEGIES.items() if s.stored))
def test_every_stored_strategy_has_its_encoding_and_an_lmdb_sink(name, tmp_path):
    s = Strategy.parse(name)
    enc = encoding_for(s)
    assert enc.name == s.encoding and enc.direction is s.direction
    sink = make_sink(shard_spec(tmp_path, "r", "op", s, (0,), None, (2,), ((2,),)))
    assert isinstance(sink, encoders.ShardSink)


def test_payload_encodings_cannot_be_forward_optimized():
    with pytest.raises(ModeError, match="PayOne cannot be fwd-optimized"):
        encoders.PayOne(Direction.FORWARD)


def test_strategies_that_store_nothing_have_no_encoding():
    with pytest.raises(ModeError, match="stores nothing"):
        encoding_for("map")


@pytest.mark.parametrize("cls, many, into_mask", [
    (encoders.FullOne, False, True),
    (encoders.FullMany, True, False),
    (encoders.PayOne, False, False),
    (encoders.PayMany, True, False),
])
def test_encodings_declare_their_capabilities(cls, many, into_mask):
    # many: a matched lookup probes an R-tree over the key sets' boxes; into_mask: a large
    # answer is decoded straight into the caller's flat bool mask (the into= argument)
    assert (cls.many, cls.into_mask) == (many, into_mask)
    assert type(cls.many) is bool and type(cls.into_mask) is bool
