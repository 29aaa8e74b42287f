"""Byte sizes as people write them (``100MB``, ``1.5G``, ``20 MiB``) and back.

>>> parse_size("100MB"), parse_size("1.5k"), parse_size(2048)
(100000000, 1500, 2048)
>>> human_bytes(1500)
'1.5 KB'
"""

from __future__ import annotations

import re

from subzero.errors import SubZeroError

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def parse_size(text: str | int | float, what: str = "size") -> int:
    """Bytes from ``"100MB"``-style text (decimal units; ``MiB`` for binary ones)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise SubZeroError(f"{what} must be non-negative. Got {text}.")
        return int(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise SubZeroError(f"bad {what} {text!r}; expected a number with an optional unit like "
                           "'100MB', '1.5G' or '512KiB'")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def human_bytes(n: float | None) -> str:
    """Decimal units, like :func:`parse_size` (``10MB`` reads back as ``10.0 MB``)."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
