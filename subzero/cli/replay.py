"""``subzero replay``: what if some cells of one array had held other values?

Changes the chosen cells of an array of a complete run, recomputes only the tiles their
forward lineage reaches, and writes the result as a new run derived from the original
(:mod:`subzero.replay`); prints which cells of each output changed and how much was
recomputed against a full re-run.
"""

from __future__ import annotations

import argparse
from typing import Any

from subzero.api import Run
from subzero.cli.common import (add_changed_code_flag, cells_from_args, emit_json, load_npy,
                                table)
from subzero.engine import datastore, layout
from subzero.engine.homeconfig import home_exists, open_catalog
from subzero.engine.runs import load_run
from subzero.errors import ReplayError
from subzero.frontier import start_frontier
from subzero.replay import ReplayResult, check_replay, check_status, replay_values


def cmd_replay(args: argparse.Namespace) -> int:
    given = sum((args.set is not None, args.values is not None, bool(args.nan)))
    if given != 1:
        raise ReplayError("give exactly one of --set VALUE, --values F.npy or --nan")
    home = layout.resolve_home(args.home)
    if not home_exists(home):
        raise ReplayError(f"no SubZero home at {datastore.home_name(home)} (run a workflow "
                          "first, or pass --home)")
    cat = open_catalog(home)
    try:
        info = cat.run(args.run)
    finally:
        cat.close()
    check_status(info)  # a failed or running run is named before its files are read
    loaded = load_run(home, info["id"], allow_changed_code=args.allow_changed_code)
    check_replay(loaded, args.from_, args.to)
    run = Run(loaded, requested=args.run)
    wf = run.workflow
    cells = cells_from_args(args, wf.array_shape(args.from_))
    mask = start_frontier(wf.array_shape(args.from_), cells).mask
    dtype = (wf.inputs[args.from_].dtype if args.from_ in wf.inputs
             else wf.ops[args.from_].out_dtype)
    values = None if args.values is None else load_npy(args.values, "--values",
                                                       "one value per cell")
    # checked here too, so that a bad value fails before the derived run exists
    replay_values(args.from_, dtype, int(mask.sum()), value=args.set, values=values,
                  nan=args.nan)
    try:
        new = run.replay(args.from_, mask, value=args.set, values=values, nan=args.nan,
                         to=args.to, where=args.where, quiet=args.json or None,
                         compare_all=args.compare_all)
    finally:
        run.close()
    res = new.replayed
    if args.json:
        emit_json(res.to_json())
        return 0
    _report(res)
    return 0


def _report(res: ReplayResult) -> None:
    first = res.arrays[0]
    print(f"run {res.run}: replay of run {res.parent} ({res.workflow}), {res.cells} cells of "
          f"{res.array} set to {res.value} ({first.changed} changed)")
    rows = [(a.name, a.reached, "-" if a.changed is None else a.changed,
             f"{a.tiles}/{a.tiles_total}", a.recomputed, f"{a.elapsed_s * 1000:.1f}")
            for a in res.arrays[1:]]
    if rows:
        print(table(rows, ("array", "reached", "changed", "tiles", "recomputed_cells", "ms")))
    if any(a.changed is None for a in res.arrays):
        print("changed '-': recomputed whole and not compared with the parent's "
              "(--compare-all counts them)")
    for name in res.outputs:
        a = res.array_result(name)
        n = a.changed if a is not None else 0
        cells = (": " + "; ".join(",".join(str(v) for v in c) for c in a.cells)
                 if a is not None and a.cells else "")
        print(f"output {name}: {n} cells changed{cells}")
    if res.not_replayed:
        print(f"not replayed (beyond --to, left out of run {res.run}): "
              f"{', '.join(res.not_replayed)}")
    frac = res.recomputed_cells / max(1, res.full_cells)
    parent = (f"; the parent run took {res.parent_runtime_s:.2f} s"
              if res.parent_runtime_s else "")
    print(f"recomputed {res.recomputed_cells:,} of the {res.full_cells:,} cells a full re-run "
          f"computes ({frac:.1%}) in {res.runtime_s:.2f} s{parent}")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("replay", parents=[common],
                       help="what if some cells had other values: a derived run")
    s.add_argument("run", help="run id, 'latest' or 'latest:WORKFLOW'")
    s.add_argument("--from", dest="from_", metavar="ARRAY", required=True,
                   help="the array whose cells change (an input or an intermediate)")
    s.add_argument("--cells", help="cells as 'r,c;r,c'")
    s.add_argument("--cells-file", help=".npy of (n, ndim) coordinates or a bool mask")
    s.add_argument("--box", help="a box of cells 'r0:r1,c0:c1' (half-open)")
    s.add_argument("--set", metavar="VALUE", help="the value every chosen cell gets")
    s.add_argument("--values", metavar="F.npy",
                   help="one value per chosen cell, in row-major order of the cells")
    s.add_argument("--nan", action="store_true", help="set the cells to NaN (float arrays)")
    s.add_argument("--to", nargs="+", action="extend", metavar="ARRAY",
                   help="replay only what these arrays need (default: everything downstream)")
    s.add_argument("--compare-all", action="store_true",
                   help="count the changed cells of every array (by default an intermediate "
                   "recomputed whole, with noisy values, is not compared)")
    s.add_argument("--where", default="auto", choices=("auto", "driver", "spark"),
                   help="where recomputed tiles run (default: Spark only for large operators "
                   "when a session is running)")
    add_changed_code_flag(s)
    s.set_defaults(func=cmd_replay)
