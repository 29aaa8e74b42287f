"""Objects that remember their constructor's arguments (what a run's manifest records).

An operator (and any object a workflow passes as an operator's parameter) is written into
a run's manifest as its class and the arguments it was constructed with
(:mod:`subzero.manifest`), and rebuilt from them by later commands.
"""

from __future__ import annotations

from typing import Any


class Recorded:
    """Remembers the arguments an instance was constructed with, so that the manifest
    can write the instance as its class and arguments and rebuild it later.

    >>> class Scale(Recorded):
    ...     def __init__(self, factor=1.0):
    ...         self.factor = factor
    >>> Scale(2.0).init_args
    ((2.0,), {})
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        self = super().__new__(cls)
        self.__dict__["_init_args"] = (args, kwargs)
        return self

    @property
    def init_args(self) -> tuple[tuple, dict]:
        """The positional and keyword arguments the instance was constructed with."""
        return self.__dict__.get("_init_args", ((), {}))
