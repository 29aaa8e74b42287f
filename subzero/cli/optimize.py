"""``subzero optimize`` and ``subzero calibrate``: the strategy optimizer's commands."""

from __future__ import annotations

import argparse
from typing import Any

import workflows
from optimizer.calibrate import calibrate
from optimizer.calibration import load_calibration
from optimizer.plan import optimize
from subzero.cli.common import (check_output, emit_json, json_text, output_file,
                                parse_assignments, table, write_failed)
from subzero.errors import SubZeroError
from subzero.query.costs import CALIBRATION_FILE
from subzero.sizes import human_bytes, parse_size


def _seconds(v: float) -> str:
    if v == 0:
        return "0"
    if v < 1e-3:
        return f"{v * 1e6:.0f} us"
    if v < 1:
        return f"{v * 1e3:.1f} ms"
    return f"{v:.2f} s"


def _budget(text: str | None) -> int | None:
    if text is None or str(text).strip().lower() in ("none", "unlimited", "inf"):
        return None
    return parse_size(text, "--max-disk")


def _factor(text: str | None) -> float | None:
    if text is None:
        return None
    t = str(text).strip().lower().rstrip("x")
    try:
        v = float(t)
    except ValueError:
        raise SubZeroError(f"--max-runtime {text!r}: expected a factor of the black-box "
                           "runtime such as 1.5") from None
    return v


def _pins(items: list[str] | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for it in items or []:
        op, sep, strat = it.partition("=")
        if not sep or not op.strip() or not strat.strip():
            raise SubZeroError(f"--pin {it!r}: expected OPERATOR=STRATEGY")
        for s in strat.split(","):
            out.setdefault(op.strip(), []).append(s.strip())
    return out


def cmd_optimize(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_output(args.out, "--out", (".json",))
    if (args.workflow is None) == (args.run is None):
        raise SubZeroError("give exactly one of --workflow NAME or --run RUN")
    wf = None
    if args.workflow is not None:
        wf = workflows.build(args.workflow, **parse_assignments(args.param, "--param"))
    elif args.param:
        raise SubZeroError("--param applies to --workflow (a run already has its parameters)")
    res = optimize(wf, args.home, run=args.run, workload=args.workload,
                   max_disk=_budget(args.max_disk), max_runtime=_factor(args.max_runtime),
                   pins=_pins(args.pin), fallback=args.fallback,
                   calibration=load_calibration(args.calibration) if args.calibration else None,
                   sample=not args.no_sample)
    doc = res.to_json()
    if args.out:
        with output_file(args.out, "--out") as tmp:
            tmp.write_text(json_text(doc) + "\n")
    if args.json:
        emit_json(doc)
        return 0
    rows = [(r["operator"], ",".join(r["strategies"]), human_bytes(r["disk"]),
             _seconds(r["overhead_s"]), f"{r['p_backward']:.2f}/{r['p_forward']:.2f}",
             _seconds(r["q_backward"]) if r["p_backward"] else "-",
             _seconds(r["q_forward"]) if r["p_forward"] else "-", r["source"])
            for r in res.rows]
    print(table(rows, ("operator", "strategies", "disk", "overhead", "p bwd/fwd",
                       "q bwd", "q fwd", "from")))
    t = res.totals
    budget = "unlimited" if res.max_disk is None else human_bytes(res.max_disk)
    print(f"\nplan for {res.workflow} from run {res.run} ({res.workload.source}): lineage "
          f"{human_bytes(t['disk'])} of {budget}, runtime x{t['runtime_factor']:.2f}"
          + (f" (limit x{res.max_runtime:g})" if res.max_runtime else "")
          + f", expected query cost {_seconds(t['query_cost'])}"
          + (f"; solved in {res.solver['solve_s'] * 1000:.0f} ms"
             if res.solver.get("solve_s") else ""))
    for n in res.notes:
        print(f"note: {n}")
    if args.out:
        print(f"plan written to {args.out}; apply it with: subzero run {res.workflow} "
              f"--plan {args.out}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    out = check_output(args.out, "--out", (".json",)) if args.out is not None else CALIBRATION_FILE
    cal = calibrate(quick=args.quick, spark=not args.no_spark,
                    progress=None if args.json else print)
    try:
        cal.save(out)
    except OSError as e:
        raise write_failed("--out", out, e) from None
    if args.json:
        emit_json(cal.to_json())
        return 0
    fit = cal.meta.get("fit", {})
    for name, f in sorted(fit.items()):
        print(f"{name:14s} worst fit error: " + ", ".join(
            f"{t} {v * 100:.0f}%" for t, v in f.items()))
    print(f"calibration written to {out}")
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("optimize", parents=[common],
                       help="choose lineage strategies within a disk/runtime budget")
    s.add_argument("--workflow", help="plan the next run of this workflow (statistics from "
                   "its newest complete run)")
    s.add_argument("--run", help="take statistics from this run")
    s.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="workflow parameter, as for 'subzero run' (repeatable)")
    s.add_argument("--workload", metavar="FILE", help="JSON file of sample queries with "
                   "weights (default: the query log)")
    s.add_argument("--max-disk", required=True, metavar="SIZE",
                   help="lineage disk budget, e.g. 100MB ('none' for unlimited)")
    s.add_argument("--max-runtime", metavar="FACTOR",
                   help="runtime budget as a factor of the black-box runtime, e.g. 1.5")
    s.add_argument("--pin", action="append", metavar="OP=STRATEGY",
                   help="force a strategy for an operator (repeatable)")
    s.add_argument("--out", metavar="PLAN.json", help="write the plan file")
    s.add_argument("--fallback", action="store_true",
                   help="if nothing fits the budget, plan black box instead of failing")
    s.add_argument("--calibration", metavar="FILE", help="calibration file to use")
    s.add_argument("--no-sample", action="store_true",
                   help="do not run the statistics pass (only measured strategies count)")
    s.set_defaults(func=cmd_optimize)

    s = sub.add_parser("calibrate", parents=[common],
                       help="measure the cost model's constants on this machine")
    s.add_argument("--quick", action="store_true", help="fewer, smaller measurements")
    s.add_argument("--no-spark", action="store_true",
                   help="do not start Spark (keep the per-task re-execution constant)")
    s.add_argument("--out", metavar="FILE", help="where to write (default "
                   "subzero/query/calibration.json)")
    s.set_defaults(func=cmd_calibrate)
