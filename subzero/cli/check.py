"""``subzero check-lineage OPERATOR``: is an operator's declared lineage right?

``OPERATOR`` is a class (``MedianFilter``, ``module:Class``) or an operator of a run
(``RUN:OP``, e.g. ``r3:cr1`` or ``latest:cr1``).

A class is checked on ``--input`` files, on ``--shape`` random floats, or on its own kind
of data: a built-in's or shipped UDF's (:mod:`workflows.checkable`), or what the class's
``example_inputs(seed)`` returns (see :mod:`workflows.lies`).

A run's operator is checked as the run's manifest records it, on crops of the run's own
arrays around the sampled cells (:func:`subzero.lineagecheck.check_on_crops`; the report
says which crops), or on its whole arrays with ``--whole`` (or when it cannot be cropped:
a global operator). A run's operator whose code changed since the run is refused unless
``--allow-changed-code``.

Exit status: 0 when every checked mode is sound, 1 when some sampled output cell changed
although only input cells outside its declared lineage were changed (the last line names
the unsound cells), or when a mode could not be checked (more than a tenth of its runs on
changed inputs raised, or a run's arrays too large to check whole), 2 on bad input (an
unknown operator, a class that is not an operator, unreadable inputs...).
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from subzero.api import Home, check_lineage, say
from subzero.cells import Box, parse_cells, parse_shape
from subzero.cli.common import (CliError, add_changed_code_flag, emit_json, load_npy,
                                parse_assignments, table)
from subzero.engine.arrays import read_box
from subzero.errors import CellError, CodeError, SubZeroError
from subzero.jsonio import TooDeepError, loads_limited
from subzero.lineagecheck import LineageCheck, Read, check_on_crops
from workflows.checkable import resolve

EXIT_UNSOUND = 1
#: the most cells a generated input may have (--shape)
MAX_CELLS = 1 << 24


def _param_value(text: str, name: str = "") -> Any:
    """A --param value: JSON when it parses (numbers, lists, true), else the string; lists
    nested deeper than any parameter needs are refused, naming the parameter."""
    try:
        return loads_limited(text)
    except TooDeepError as e:
        raise CliError(f"--param {name}: its value's lists and objects are {e}") from None
    except ValueError:
        return text


def _load_input(path: str) -> np.ndarray:
    if Path(path).suffix != ".npy":
        raise CliError(f"--input {path!r}: expected a .npy file")
    arr = load_npy(path, "--input", "an input array")
    if arr.ndim == 0:
        raise CliError(f"--input {path} holds a 0-d array (a single value); expected an "
                       "array with at least one axis")
    if arr.size == 0:
        raise CliError(f"--input {path} holds no cells (shape {arr.shape}); expected an "
                       "array with at least one cell")
    return arr


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
    if math.prod(shape) > MAX_CELLS:
        raise CliError(f"--shape {text!r} has {math.prod(shape):,} cells; the checker runs "
                       f"the operator many times on small inputs: at most {MAX_CELLS:,}")
    return shape


def _cells(text: str) -> list[tuple[int, ...]]:
    """--cells "r,c;r,c": output cells to check (each with as many coordinates as the
    first; whether they lie in the output is checked once the operator is bound)."""
    parts = [p for p in text.split(";") if p.strip()]
    odd = [p for p in parts if p.count(",") != parts[0].count(",")]
    if odd:
        raise CliError(f"--cells {text!r}: cell {odd[0].strip()!r} has "
                       f"{odd[0].count(',') + 1} coordinates, the first has "
                       f"{parts[0].count(',') + 1}; expected cells like \"3,4;10,2\"")
    try:
        cells = parse_cells(text, (0,) * (parts[0].count(",") + 1 if parts else 1))
    except CellError as e:
        raise CliError(f"--cells {text!r}: {e}; expected cells like \"3,4;10,2\"") from None
    return [tuple(c) for c in cells.tolist()]


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_budget(text: str) -> float | None:
    """A ``--budget``: seconds from ``60``, ``60s``, ``5m`` or ``1h``; None for ``none``.

    >>> parse_budget("90s"), parse_budget("2m"), parse_budget("none")
    (90.0, 120.0, None)
    """
    t = str(text).strip().lower()
    if t in ("none", "off"):
        return None
    unit = _UNITS.get(t[-1:], None)
    number = t[:-1] if unit is not None else t
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise CliError(f"--budget {text!r}: expected a time like 60s, 5m or 1h, or none")
    return value


def _tolerance(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise CliError(f"--rtol {value}: expected a finite number >= 0")
    return value


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def summary_rows(rep: LineageCheck) -> list[list[Any]]:
    """One table row per mode: sound, disagreements, declared vs influential, tightness."""
    rows = []
    for m in rep.modes:
        w = m.widest
        said = "yes" if m.sound else "not checked" if m.verdict == "NOT CHECKED" else "NO"
        rows.append([m.mode.value, said, len(m.cells), len(m.unsound),
                     m.disagreements, m.declared, m.influential, _fmt(m.tightness),
                     "" if w is None else f"{w.declared}/{w.influential}"])
    return rows


#: ``RUN:OP``: a run id or ``latest[:WORKFLOW]``, then an operator of that run
RUN_OP = re.compile(r"^(r\d+|latest(?::[^:]+)?):([A-Za-z_][A-Za-z0-9_.-]*)$")


def _run_operator(args: argparse.Namespace, inputs: list | None, params: dict
                  ) -> tuple[Any, list | None, list[str], tuple[Read, tuple[int, ...]] | None]:
    """The operator ``RUN:OP`` names, rebuilt from the run's manifest; its inputs (given,
    or the run's whole arrays with ``--whole``); the warnings to print with the report;
    and, to check it on crops, a reader of the run's arrays and the output's chunk shape
    (None when checked on whole inputs)."""
    m = RUN_OP.match(args.operator)
    assert m is not None
    if params:
        raise CliError(f"--param does not apply to {args.operator}: a run's operator has "
                       "the parameters it ran with")
    run = Home(args.home).get(m.group(1), allow_changed_code=args.allow_changed_code)
    name = m.group(2)
    wf = run.workflow
    if name not in wf.nodes:
        raise CliError(f"run {run.id} has no operator {name!r} (operators: "
                       f"{', '.join(wf.order)})")
    if name in run.loaded.unavailable:
        raise CodeError(f"operator {name!r} of run {run.id} cannot run here: "
                        f"{run.loaded.unavailable[name]}")
    warn = []
    if name in run.loaded.changed_code:
        warn.append(f"warning: {name}: checked with code changed since run {run.id} "
                    f"({run.loaded.changed_code[name]}), not the code that ran")
    if inputs is not None or args.shape:
        return wf.nodes[name].op, inputs, warn, None
    sources = list(wf.nodes[name].inputs)
    if args.whole:
        return wf.nodes[name].op, [run.array(s) for s in sources], warn, None
    paths = {i: run.loaded.array_path(s) for i, s in enumerate(sources)}
    paths[None] = run.loaded.array_path(name)

    def read(i: int | None, box: Box) -> Any:
        return read_box(paths[i], box)

    return run.loaded.op(name), None, warn, (read, run.loaded.chunks(name))


def _example_inputs(operator: str, params: dict, seed: int) -> list | None:
    """The inputs a class gives as its own kind of data (``example_inputs(seed)``), or
    None when it has none (it is then checked on the inputs ``check_lineage`` makes)."""
    try:
        op = resolve(operator, params or None)
    except SubZeroError:
        return None  # check_lineage names the problem
    make = getattr(type(op), "example_inputs", None)
    if not callable(make):
        return None
    try:
        got = make(seed=seed)
        return [np.asarray(a) for a in got]
    except Exception as e:  # noqa: BLE001 - the user's generator, named in one line
        msg = str(e).splitlines()[0] if str(e) else ""
        raise CliError(f"operator {operator!r}: example_inputs(seed={seed}) failed: "
                       f"{type(e).__name__}{': ' + msg if msg else ''}; give --input files "
                       "or --shape") from None


def _print_report(rep: LineageCheck, warnings: list[str]) -> None:
    for w in warnings:
        print(w)
    lines = rep.lines()
    print(lines[0])
    for note in rep.notes:
        print(note)
    if rep.modes:
        print(table(summary_rows(rep), ["mode", "sound", "cells", "unsound", "disagree",
                                        "declared", "influential", "tightness",
                                        "widest decl/infl"]))
    elif rep.not_checked is None:
        print("no lineage mode to check (BLACKBOX only: queries re-execute it)")
    for line in lines[1:]:
        if line.startswith("    "):
            print(line.strip())
    print(rep.verdict())


def cmd_check(args: argparse.Namespace) -> int:
    params = {k: _param_value(v, k) for k, v in parse_assignments(args.param, "--param").items()}
    inputs = [_load_input(p) for p in args.input] if args.input else None
    shape = _shape(args.shape) if args.shape else None
    if inputs is not None and shape is not None:
        raise CliError("give --input files or --shape, not both")
    if args.seed < 0:
        raise CliError(f"--seed {args.seed}: expected a non-negative integer")
    operator: Any = args.operator
    warnings: list[str] = []
    crops = None
    if RUN_OP.match(args.operator):
        operator, inputs, warnings, crops = _run_operator(args, inputs, params)
    elif args.whole:
        raise CliError(f"--whole applies to an operator of a run (RUN:OP); "
                       f"{args.operator!r} is checked on the inputs given or made for it")
    elif inputs is None and shape is None:
        inputs = _example_inputs(args.operator, params, args.seed)
    cells = None
    if args.cells:
        if inputs is None and crops is None:
            raise CliError("--cells needs --input files (the cells are of their output)")
        cells = _cells(args.cells)
    common = {"samples": _positive("--samples", args.samples), "seed": args.seed,
              "modes": args.mode or None, "split": _positive("--chunks", args.chunks),
              "rtol": _tolerance(args.rtol), "cells": cells,
              "budget_s": parse_budget(args.budget), "progress": say}
    if crops is not None:
        read, chunks = crops
        rep = check_on_crops(operator, read, chunks=chunks, **common)
    else:
        rep = check_lineage(operator, inputs=inputs, params=params or None, shape=shape,
                            **common)
    if args.json:
        emit_json(dict(rep.to_json(), **({"warnings": warnings} if warnings else {})))
    else:
        _print_report(rep, warnings)
    return 0 if rep.sound else EXIT_UNSOUND


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "check-lineage", parents=[common],
        help="check an operator's declared lineage by perturbation (exit 1 when unsound)",
        description="Run an operator on small inputs, sample output cells (random, chunk "
        "borders, edges, rare values of the output and the inputs, unusual declared lineage "
        "sizes, payload cells), change every input cell outside each "
        "cell's declared backward lineage and re-run: a changed output is unsound. Also "
        "compares forward with backward lineage and measures tightness (declared cells "
        "against the cells whose change alone changes the output). Exit 0 sound, 1 "
        "unsound, 2 bad input.")
    s.add_argument("operator", help="a built-in (MedianFilter), a shipped UDF "
                   "(CosmicRayDetect), module:Class, or RUN:OP (an operator of a run, on "
                   "crops of the run's own arrays around the sampled cells by default)")
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
    s.add_argument("--budget", default="60s", metavar="TIME",
                   help="time for the whole check: 60s (default), 5m, 1h, or none; each "
                   "phase stops once it is spent and the report says what was cut")
    s.add_argument("--whole", action="store_true",
                   help="RUN:OP: check on the run's whole arrays instead of crops around "
                   "the sampled cells")
    add_changed_code_flag(s)
    s.set_defaults(func=cmd_check)
