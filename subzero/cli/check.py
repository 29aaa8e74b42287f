"""``subzero check-lineage OPERATOR``: is an operator's declared lineage right?

Exit status: 0 when every checked mode is sound, 1 when some sampled output cell changed
although only input cells outside its declared lineage were changed, 2 on bad input (an
unknown operator, a class that is not an operator, unreadable inputs...).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from subzero.api import check_lineage
from subzero.cells import parse_shape
from subzero.cli.common import CliError, emit_json, parse_assignments, table
from subzero.lineagecheck import LineageCheck

EXIT_UNSOUND = 1


def _param_value(text: str) -> Any:
    """A --param value: JSON when it parses (numbers, lists, true), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _load_input(path: str) -> np.ndarray:
    p = Path(path)
    if p.suffix != ".npy":
        raise CliError(f"--input {path!r}: expected a .npy file")
    if not p.is_file():
        raise CliError(f"--input {path!r}: no such file")
    try:
        return np.load(p, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise CliError(f"--input {path!r}: not a readable .npy file ({e})") from None


def _positive(flag: str, value: int) -> int:
    if value < 1:
        raise CliError(f"{flag} {value}: expected a positive integer")
    return value


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = parse_shape([int(v) for v in text.lower().split("x")], "--shape")
    except ValueError:
        raise CliError(f"--shape {text!r}: expected sizes like 32x32") from None
    if not shape or min(shape) < 1:
        raise CliError(f"--shape {text!r}: expected positive sizes like 32x32")
    return shape


def _cells(text: str) -> list[tuple[int, ...]]:
    """--cells "r,c;r,c": output cells to check."""
    try:
        out = [tuple(int(v) for v in part.split(",")) for part in text.split(";") if part.strip()]
    except ValueError:
        raise CliError(f"--cells {text!r}: expected cells like \"3,4;10,2\"") from None
    if not out:
        raise CliError(f"--cells {text!r}: expected cells like \"3,4;10,2\"")
    return out


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def summary_rows(rep: LineageCheck) -> list[list[Any]]:
    """One table row per mode: sound, disagreements, declared vs influential, tightness."""
    rows = []
    for m in rep.modes:
        w = m.widest
        rows.append([m.mode.value, "yes" if m.sound else "NO", len(m.cells), len(m.unsound),
                     m.disagreements, m.declared, m.influential, _fmt(m.tightness),
                     "" if w is None else f"{w.declared}/{w.influential}"])
    return rows


def cmd_check(args: argparse.Namespace) -> int:
    params = {k: _param_value(v) for k, v in parse_assignments(args.param, "--param").items()}
    inputs = [_load_input(p) for p in args.input] if args.input else None
    shape = _shape(args.shape) if args.shape else None
    if inputs is not None and shape is not None:
        raise CliError("give --input files or --shape, not both")
    cells = None
    if args.cells:
        if inputs is None:
            raise CliError("--cells needs --input files (the cells are of their output)")
        cells = args.cells
    rep = check_lineage(args.operator, inputs=inputs, samples=_positive("--samples", args.samples),
                        seed=args.seed, params=params or None, modes=args.mode or None,
                        shape=shape, split=_positive("--chunks", args.chunks), rtol=args.rtol,
                        cells=None if cells is None else _cells(cells))
    if args.json:
        emit_json(rep.to_json())
    else:
        lines = rep.lines()
        print(lines[0])
        if rep.modes:
            print(table(summary_rows(rep), ["mode", "sound", "cells", "unsound",
                                            "disagree", "declared", "influential",
                                            "tightness", "widest decl/infl"]))
        for line in lines[1:]:
            if line.startswith("    "):
                print(line.strip())
        if not rep.modes:
            print(lines[1].strip())
    return 0 if rep.sound else EXIT_UNSOUND


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "check-lineage", parents=[common],
        help="check an operator's declared lineage by perturbation (exit 1 when unsound)",
        description="Run an operator on small inputs, sample output cells (random, chunk "
        "borders, edges, rare values, payload cells), change every input cell outside each "
        "cell's declared backward lineage and re-run: a changed output is unsound. Also "
        "compares forward with backward lineage and measures tightness (declared cells "
        "against the cells whose change alone changes the output). Exit 0 sound, 1 "
        "unsound, 2 bad input.")
    s.add_argument("operator", help="a built-in (MedianFilter), a shipped UDF "
                   "(CosmicRayDetect) or module:Class")
    s.add_argument("--param", action="append", metavar="K=V",
                   help="constructor argument (JSON value, else a string); repeatable")
    s.add_argument("--input", action="append", metavar="F.npy",
                   help="an input array, in order; repeatable (default: generated)")
    s.add_argument("--shape", help="shape of generated inputs for an operator without a "
                   "default, e.g. 32x32")
    s.add_argument("--samples", type=int, default=24, help="output cells per mode (24)")
    s.add_argument("--cells", metavar='"r,c;r,c"',
                   help="check these output cells instead of sampled ones (with --input)")
    s.add_argument("--seed", type=int, default=0, help="sampling and perturbation seed (0)")
    s.add_argument("--mode", action="append", choices=["MAP", "FULL", "PAY", "COMP"],
                   help="check only this mode; repeatable (default: every supported one)")
    s.add_argument("--chunks", type=int, default=2, metavar="N",
                   help="run the operator as N chunks per axis (2)")
    s.add_argument("--rtol", type=float, default=0.0,
                   help="relative tolerance for float outputs (0: bit for bit)")
    s.set_defaults(func=cmd_check)
