"""Every stored strategy passes the conformance suite (tests/encoders/conformance.py)."""

from tests.encoders.conformance import EncodingConformance


class TestFullOneBackward(EncodingConformance):
    strategy = "full-one-bwd"


class TestFullOneForward(EncodingConformance):
    strategy = "full-one-fwd"


class TestFullManyBackward(EncodingConformance):
    strategy = "full-many-bwd"


class TestFullManyForward(EncodingConformance):
    strategy = "full-many-fwd"


class TestPayOne(EncodingConformance):
    strategy = "pay-one-bwd"


class TestPayMany(EncodingConformance):
    strategy = "pay-many-bwd"


class TestCompositeOne(EncodingConformance):
    strategy = "comp-one-bwd"


class TestCompositeMany(EncodingConformance):
    strategy = "comp-many-bwd"


class TestFullCompactBackward(EncodingConformance):
    strategy = "full-compact-bwd"


class TestFullCompactForward(EncodingConformance):
    strategy = "full-compact-fwd"
