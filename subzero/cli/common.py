"""What every command shares: the one-line error, tables, JSON, and the text forms of
cells, paths and ``NAME=VALUE`` options."""

from __future__ import annotations

import argparse
import json
from typing import Any, Sequence

import numpy as np

from subzero.errors import CellError, QueryError, SubZeroError
from subzero.jsonio import json_default

EXIT_USAGE = 2


class CliError(SubZeroError):
    """A bad command-line value."""


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one-line :class:`CliError` s."""

    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise CliError(f"{self.prog}: {message}")


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def parse_assignments(items: Sequence[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for it in items or []:
        if "=" not in it or not it.split("=", 1)[0].strip():
            raise CliError(f"{what} {it!r}: expected NAME=VALUE")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def emit_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=_json_default))


def _json_default(o: Any) -> Any:
    try:
        return json_default(o)
    except TypeError:
        return str(o)


def parse_path(text: str) -> list[tuple[str, int]]:
    """CLI form ``op:idx,op:idx,...`` (``op`` alone means input 0)."""
    out = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        name, _, idx = part.partition(":")
        try:
            out.append((name.strip(), int(idx) if idx.strip() else 0))
        except ValueError:
            raise QueryError(f"bad path step {part!r}; expected operator:input_index") from None
    if not out:
        raise QueryError(f"bad path {text!r}; expected op:idx,op:idx,...")
    return out


def parse_cells_text(text: str, shape: Sequence[int]) -> np.ndarray:
    """CLI form ``"r,c;r,c"`` -> ``(n, ndim)`` coordinates."""
    rows = []
    for part in [p.strip() for p in text.split(";") if p.strip()]:
        try:
            rows.append([int(v) for v in part.split(",")])
        except ValueError:
            raise CellError(f"bad cell {part!r}; expected integers like 'r,c'") from None
    if not rows:
        raise CellError(f"no cells in {text!r}; expected 'r,c;r,c'")
    if any(len(r) != len(shape) for r in rows):
        bad = next(r for r in rows if len(r) != len(shape))
        raise CellError(f"cell {tuple(bad)} has {len(bad)} coordinates; the array "
                        f"{tuple(shape)} has {len(shape)} axes")
    return np.asarray(rows, dtype=np.int64)
