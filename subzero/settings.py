"""Tuning settings: constants that depend on the machine, each with a documented default.

A setting is read from the environment variable ``SUBZERO_<NAME>`` when its module is
imported (a Spark worker imports it anew, with the executor's environment); when the
variable is unset, the default applies. A default may be a function of the machine (its
cores, its memory), evaluated then. The documentation's environment page lists every setting
defined here, with its default and the benchmark that shows why it is what it is.

>>> RAW = define("EXAMPLE_RAW_BELOW", 2.0, float, "compression ratio below which ...")
>>> RAW
2.0
>>> SETTINGS["EXAMPLE_RAW_BELOW"].variable
'SUBZERO_EXAMPLE_RAW_BELOW'
>>> _ = SETTINGS.pop("EXAMPLE_RAW_BELOW")
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from subzero.errors import SubZeroError
from subzero.sizes import parse_size

__all__ = ["Setting", "SettingError", "SETTINGS", "define", "cores", "memory", "size"]


class SettingError(SubZeroError, ValueError):
    """A ``SUBZERO_*`` tuning variable whose value cannot be read as its kind."""


def size(text: str) -> int:
    """A byte size as people write it (``16MB``, ``256MiB`` or a plain integer)."""
    return parse_size(text, "size")


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def memory() -> int:
    """This machine's physical memory in bytes (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 0


@dataclass(frozen=True)
class Setting:
    """One tuning setting.

    Parameters
    ----------
    name
        The name after ``SUBZERO_`` (``DIRECT_MIN_BYTES``).
    default
        The value when the variable is unset, or a function of no arguments that computes
        it from the machine.
    kind
        Converts the variable's text to the value (``int``, ``float``, :func:`size`).
    doc
        What the setting decides, and why its default is what it is.
    benchmark
        The benchmark whose results show the effect (``benchmarks/bench_scale.py``), or "".
    module
        The module that defines it.
    """

    name: str
    default: Any
    kind: Callable[[str], Any]
    doc: str
    benchmark: str = ""
    module: str = ""

    @property
    def variable(self) -> str:
        """The environment variable that sets it."""
        return f"SUBZERO_{self.name}"

    def default_value(self) -> Any:
        """The default on this machine."""
        return self.default() if callable(self.default) else self.default

    def describe_default(self) -> str:
        """The default as the documentation states it."""
        if callable(self.default):
            return (self.default.__doc__ or self.default.__name__).strip().splitlines()[0]
        if self.kind is size and isinstance(self.default, int):
            return _binary(self.default)
        return repr(self.default)

    def value(self) -> Any:
        """The value now: the environment variable's, else the default."""
        text = os.environ.get(self.variable, "").strip()
        if not text:
            return self.default_value()
        try:
            got = self.kind(text)
        except (ValueError, TypeError, SubZeroError):
            got = None
        if got is None or (isinstance(got, (int, float)) and got < 0):
            raise SettingError(f"{self.variable}={text!r} is not a valid value; expected "
                               f"{_expected(self.kind)}")
        return got


def _expected(kind: Callable[[str], Any]) -> str:
    return {int: "a non-negative integer", float: "a non-negative number",
            size: "a byte size such as 16MB or 256MiB"}.get(kind, kind.__name__)


def _binary(n: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k and n % (1 << k) == 0:
            return f"{n >> k} {unit}"
    return str(n)


#: every setting defined so far, by name
SETTINGS: dict[str, Setting] = {}


def define(name: str, default: Any, kind: Callable[[str], Any], doc: str,
           benchmark: str = "", module: str = "") -> Any:
    """Register a setting and return its value now (the variable's, else the default).

    Parameters
    ----------
    name, default, kind, doc, benchmark
        As in :class:`Setting`.
    module
        The defining module (its ``__name__``), shown in the documentation.

    Returns
    -------
    Any
        The value to use.

    Raises
    ------
    SettingError
        The variable is set to something ``kind`` cannot read.
    """
    s = Setting(name, default, kind, doc, benchmark, module)
    SETTINGS[name] = s
    return s.value()
