"""Lineage modes, encodings, directions and storage strategies (paper Table I, VI-B).

A *strategy* is how one operator keeps its lineage for one run: a mode, and for the stored
modes an encoding and a direction. Strategies have short names used on the command line,
in plans and in the catalog:

====================  ====================================================================
name                  meaning
====================  ====================================================================
``blackbox``          nothing stored; queries re-execute the operator in tracing mode
``map``               nothing stored; queries apply the operator's mapping functions
``full-one-bwd``      Full lineage, FullOne encoding, keyed by output cells (backward)
``full-one-fwd``      Full lineage, FullOne encoding, keyed by input cells (forward)
``full-many-bwd``     Full lineage, FullMany encoding (+ R-tree), backward
``full-many-fwd``     Full lineage, FullMany encoding (+ R-tree), forward
``full-compact-bwd``  Full lineage, FullCompact encoding (regular runs + residue), backward
``full-compact-fwd``  Full lineage, FullCompact encoding (regular runs + residue), forward
``pay-one-bwd``       Payload lineage, PayOne encoding (payloads are only ever backward)
``pay-many-bwd``      Payload lineage, PayMany encoding (+ R-tree)
``comp-one-bwd``      Composite: mapping default, PayOne payloads for the exceptions
``comp-many-bwd``     Composite: mapping default, PayMany payloads for the exceptions
====================  ====================================================================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

from subzero.errors import ModeError


class Mode(str, enum.Enum):
    """What an operator can produce (paper Table I)."""

    FULL = "FULL"
    MAP = "MAP"
    PAY = "PAY"
    COMP = "COMP"
    BLACKBOX = "BLACKBOX"

    def __str__(self) -> str:
        return self.value


class Direction(str, enum.Enum):
    """Which side of a region pair is the storage key."""

    BACKWARD = "bwd"  # key = output cells: fast backward queries
    FORWARD = "fwd"  # key = input cells: fast forward queries

    def __str__(self) -> str:
        return self.value


ENCODINGS = ("FullOne", "FullMany", "FullCompact", "PayOne", "PayMany")
_ENC_SLUG = {"FullOne": "one", "FullMany": "many", "FullCompact": "compact", "PayOne": "one",
             "PayMany": "many"}


@dataclass(frozen=True, order=True)
class Strategy:
    """One way to keep an operator's lineage: mode, and encoding + direction when stored.

    >>> Strategy.parse("full-one-bwd")
    Strategy(mode=<Mode.FULL: 'FULL'>, encoding='FullOne', direction=<Direction.BACKWARD: 'bwd'>)
    >>> Strategy.parse("comp-one-bwd").stored
    True
    """

    mode: Mode
    encoding: str | None = None
    direction: Direction | None = None

    def __post_init__(self) -> None:
        if self.mode in (Mode.MAP, Mode.BLACKBOX):
            if self.encoding is not None or self.direction is not None:
                raise ModeError(f"mode {self.mode} stores nothing and takes no encoding")
            return
        if self.encoding not in ENCODINGS:
            raise ModeError(f"unknown encoding {self.encoding!r}; expected one of {ENCODINGS}")
        if self.direction is None:
            raise ModeError(f"strategy {self.mode}/{self.encoding} needs a direction")
        full = self.encoding.startswith("Full")
        if (self.mode is Mode.FULL) != full:
            raise ModeError(f"mode {self.mode} cannot use encoding {self.encoding}")
        if not full and self.direction is not Direction.BACKWARD:
            raise ModeError(
                f"{self.encoding} stores payloads keyed by output cells: it is backward only"
            )

    @property
    def stored(self) -> bool:
        """Whether the strategy writes lineage to disk during a run."""
        return self.mode in (Mode.FULL, Mode.PAY, Mode.COMP)

    @cached_property
    def name(self) -> str:
        if not self.stored:
            return self.mode.value.lower()
        prefix = {Mode.FULL: "full", Mode.PAY: "pay", Mode.COMP: "comp"}[self.mode]
        return f"{prefix}-{_ENC_SLUG[self.encoding]}-{self.direction.value}"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, text: str) -> "Strategy":
        if isinstance(text, Strategy):
            return text
        key = str(text).strip().lower()
        if key in STRATEGIES:
            return STRATEGIES[key]
        raise ModeError(
            f"unknown strategy {text!r}; expected one of {', '.join(sorted(STRATEGIES))}"
        )


BLACKBOX = Strategy(Mode.BLACKBOX)
MAP = Strategy(Mode.MAP)
FULL_ONE_BWD = Strategy(Mode.FULL, "FullOne", Direction.BACKWARD)
FULL_ONE_FWD = Strategy(Mode.FULL, "FullOne", Direction.FORWARD)
FULL_MANY_BWD = Strategy(Mode.FULL, "FullMany", Direction.BACKWARD)
FULL_MANY_FWD = Strategy(Mode.FULL, "FullMany", Direction.FORWARD)
FULL_COMPACT_BWD = Strategy(Mode.FULL, "FullCompact", Direction.BACKWARD)
FULL_COMPACT_FWD = Strategy(Mode.FULL, "FullCompact", Direction.FORWARD)
PAY_ONE_BWD = Strategy(Mode.PAY, "PayOne", Direction.BACKWARD)
PAY_MANY_BWD = Strategy(Mode.PAY, "PayMany", Direction.BACKWARD)
COMP_ONE_BWD = Strategy(Mode.COMP, "PayOne", Direction.BACKWARD)
COMP_MANY_BWD = Strategy(Mode.COMP, "PayMany", Direction.BACKWARD)

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        BLACKBOX,
        MAP,
        FULL_ONE_BWD,
        FULL_ONE_FWD,
        FULL_MANY_BWD,
        FULL_MANY_FWD,
        FULL_COMPACT_BWD,
        FULL_COMPACT_FWD,
        PAY_ONE_BWD,
        PAY_MANY_BWD,
        COMP_ONE_BWD,
        COMP_MANY_BWD,
    )
}


def parse_modes(modes: Iterable[Mode | str]) -> frozenset[Mode]:
    out = set()
    for m in modes:
        try:
            out.add(m if isinstance(m, Mode) else Mode(str(m).upper()))
        except ValueError:
            raise ModeError(
                f"unknown lineage mode {m!r}; expected one of {[x.value for x in Mode]}"
            ) from None
    return frozenset(out)


def capture_modes(strategies: Iterable[Strategy]) -> frozenset[Mode]:
    """The modes an operator must run with to feed ``strategies`` (BLACKBOX if none)."""
    modes = {s.mode for s in strategies if s.stored}
    if Mode.PAY in modes and Mode.COMP in modes:
        raise ModeError("an operator cannot store PAY and COMP lineage in the same run")
    return frozenset(modes) if modes else frozenset({Mode.BLACKBOX})
