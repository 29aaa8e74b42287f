"""The registry from encoding names (and strategies) to :class:`~encoders.base.Encoding`
classes. ``encoders/__init__.py`` fills it; nothing else should.

>>> from subzero.modes import Strategy
>>> import encoders
>>> type(encoding_for(Strategy.parse("comp-many-bwd"))).__name__
'PayMany'
"""

from __future__ import annotations

from typing import Any

from encoders.base import Encoding
from subzero.errors import ModeError
from subzero.modes import Direction, Strategy

_ENCODINGS: dict[str, type[Encoding]] = {}


def register(cls: type[Encoding]) -> type[Encoding]:
    """Register an encoding class under its ``name``."""
    _ENCODINGS[cls.name] = cls
    return cls


def encodings() -> dict[str, type[Encoding]]:
    return dict(_ENCODINGS)


def encoding_class(name: str) -> type[Encoding]:
    try:
        return _ENCODINGS[name]
    except KeyError:
        raise ModeError(f"unknown encoding {name!r}; expected one of "
                        f"{', '.join(sorted(_ENCODINGS))}") from None


def encoding_for(strategy: Strategy | str, **options: Any) -> Encoding:
    """The encoding instance (bound to its direction) that stores ``strategy``."""
    s = Strategy.parse(strategy)
    if not s.stored:
        raise ModeError(f"strategy {s.name} stores nothing, so it has no encoding")
    return encoding_class(s.encoding)(Direction(s.direction), **options)
