"""What every command shares: the one-line error, tables, JSON, and the text forms of
cells, paths and ``NAME=VALUE`` options."""

from __future__ import annotations

import argparse
import json
import re
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
    """CLI form ``op:index,op:index,...``: each step names an operator and which of its
    inputs the path goes through (0 for the first). A step without ``:index`` is refused
    rather than guessed, since guessing input 0 of a binary operator traces the wrong branch.

    >>> parse_path("clust:0,rmcr:0")
    [('clust', 0), ('rmcr', 0)]
    """
    out = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        name, colon, idx = (s.strip() for s in part.partition(":"))
        if not colon or not name or not re.fullmatch(r"\d+", idx):
            raise QueryError(f"--path step {part!r}: expected op:index, an operator and the "
                             f"input it goes through (e.g. {name or 'op'}:0)")
        out.append((name, int(idx)))
    if not out:
        raise QueryError(f"--path {text!r}: expected op:index,op:index,...")
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
