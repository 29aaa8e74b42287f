"""``subzero query``: lineage queries from the command line."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from subzero.cli.common import (IMAGE_SUFFIXES, add_changed_code_flag, cells_from_args,
                                check_output, emit_json, output_file, table)
from subzero.cli.render import cells_phrase, inputs_origin, lineage_legend, render_mask
from subzero.engine.runs import load_run
from subzero.errors import QueryError
from subzero.query import QueryExecutor
from subzero.query.named import named_query, start_cells
from subzero.query.paths import parse_path
from subzero.query.results import SCOPES, GlobalDependency


def _check_args(args: argparse.Namespace) -> None:
    """What can be refused before the run is opened: empty values, unwritable outputs."""
    for flag in ("--from", "--cells", "--cells-file", "--box", "--to", "--path", "--named"):
        v = getattr(args, flag[2:].replace("-", "_").replace("from", "from_"), None)
        if v is not None and not str(v).strip():
            raise QueryError(f"{flag} {v!r}: expected a value")
    if args.out is not None:
        check_output(args.out, "--out", (".npy",))
    if args.png is not None:
        check_output(args.png, "--png", IMAGE_SUFFIXES)


def cmd_query(args: argparse.Namespace) -> int:
    _check_args(args)
    path = parse_path(args.path) if args.path else None  # a bad path fails before any I/O
    run = load_run(args.home, args.run, allow_changed_code=args.allow_changed_code)
    qx = QueryExecutor(run)
    try:
        return _query(args, run, qx, path)
    finally:
        qx.close()


def _query(args: argparse.Namespace, run: Any, qx: QueryExecutor, path: Any) -> int:
    if args.named:
        if any(x is not None for x in (args.direction, args.from_, args.to, args.path,
                                       args.cells, args.cells_file, args.box)):
            raise QueryError("--named takes no direction, --from, --to, --path or cells")
        q = named_query(run.workflow, args.named)
        cells = start_cells(run, run.id, args.named, qx.catalog)
        res = qx.query(q.direction, cells, q.start, q.path, q.to, args.method,
                       scope=args.scope)
    else:
        if args.direction not in ("backward", "forward"):
            raise QueryError("give a direction (backward or forward), or --named NAME")
        if args.from_ is None:
            raise QueryError("--from NAME is required: the array holding the query cells")
        if (args.to is None) == (args.path is None):
            raise QueryError("give exactly one of --to NAME or --path op:idx,...")
        qx.check_array(args.from_)
        cells = cells_from_args(args, run.workflow.array_shape(args.from_))
        res = qx.query(args.direction, cells, args.from_, path, args.to, args.method,
                       scope=args.scope)
    if args.out:
        with output_file(args.out, "--out") as tmp:
            np.save(tmp, res.mask)
    if args.png:
        origin = inputs_origin(run.info.get("params"))
        about = ", ".join(filter(None, (run.workflow.name, origin)))
        with output_file(args.png, "--png") as tmp:
            render_mask(run.array(res.array), res.mask, tmp,
                        f"run {run.id} ({about}): {res.direction} lineage in {res.array}",
                        legend=lineage_legend(res))
    if args.json:
        emit_json(res.to_json())
        return 0
    print(table([(s.operator, s.input, s.method, s.in_count, s.out_count,
                  f"{s.elapsed_s * 1000:.2f}") for s in res.steps],
                ("operator", "input", "method", "in_cells", "out_cells", "ms")))
    print(f"\n{res.direction} lineage of {res.start} in {res.array} {tuple(res.shape)}: "
          f"{cells_phrase(res.count)}, {res.elapsed_s * 1000:.1f} ms")
    for g in res.global_deps:
        print(global_line(g))
    for s in res.steps:  # a switch, a damaged shard: what the method column cannot say
        if s.note:
            print(f"note: {s.operator}: {s.note}")
    for op in res.changed_code:
        print(f"warning: {op}: answered by code changed since run {run.id} "
              f"({run.changed_code.get(op, 'changed')}); not the run's own lineage")
    if 0 < res.count <= 20:
        print("cells:", "; ".join(",".join(str(v) for v in c) for c in res.coords.tolist()))
    for what, p in (("mask", args.out), ("picture", args.png)):
        if p:
            print(f"{what} written to {p}")
    return 0


def global_line(g: GlobalDependency) -> str:
    """The line a query prints for a global dependency it listed instead of following.

    >>> print(global_line(GlobalDependency("m", 0, "x", 1234, "Reduce", "a mean")))
    and m (Reduce: a mean): every one of the 1,234 cells of x — add --scope all to include them
    """
    what = (f"the one cell of {g.array} — add --scope all to include it" if g.cells == 1
            else f"every one of the {g.cells:,} cells of {g.array} — add --scope all to "
            "include them")
    return f"and {g.operator} ({g.kind}: {g.description}): {what}"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("query", parents=[common], help="trace lineage backward or forward")
    s.intermixed = True  # the direction may follow options: query r1 --method map backward
    add_changed_code_flag(s)
    s.add_argument("run", help="run id, 'latest' or 'latest:WORKFLOW'")
    s.add_argument("direction", nargs="?", choices=("backward", "forward"),
                   help="backward or forward (after RUN, before or after the options)")
    s.add_argument("--from", dest="from_", metavar="NAME", help="array holding the query cells")
    s.add_argument("--cells", help="cells as 'r,c;r,c'")
    s.add_argument("--cells-file", help=".npy of (n, ndim) coordinates or a bool mask")
    s.add_argument("--box", help="a box of cells 'r0:r1,c0:c1' (half-open)")
    s.add_argument("--to", help="target array: union of every path to it")
    s.add_argument("--path", help="explicit path 'op:index,op:index,...': each operator and the "
                   "input it goes through (0 for the first)")
    s.add_argument("--named", help="a named query of the workflow (e.g. BQ3)")
    s.add_argument("--method", default="auto", choices=("auto", "map", "stored", "reexec"),
                   help="preferred access method per step (default: cheapest)")
    s.add_argument("--scope", default="local", choices=SCOPES,
                   help="local (default): list global dependencies (a global mean) on the "
                   "way to --to instead of following them; all: follow them too")
    s.add_argument("--out", help="write the result mask as .npy")
    s.add_argument("--png", help="draw the result over the target array")
    s.set_defaults(func=cmd_query)
