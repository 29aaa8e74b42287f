"""``subzero workflows``, ``run``, ``runs``, ``show`` and ``export``: running workflows and
looking at what their runs hold."""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

import workflows
from subzero.api import Home, optimized_plan, say
from subzero.chunking import DEFAULT_MAX_CHUNKS, Chunking, check_chunk_sizes
from subzero.cli.common import (CliError, check_output, emit_json, output_file,
                                parse_assignments, table)
from subzero.engine import layout
from subzero.engine.catalog import Catalog
from subzero.engine.homeconfig import open_catalog, prepare_catalog
from subzero.engine.inputs import origin_text
from subzero.engine.placement import WHERE
from subzero.engine.spark import check_master, resolve_master
from subzero.display import RunDisplay
from subzero.engine.runner import RunResult, RunSpec, execute
from subzero.jsonio import TooDeepError, loads_limited
from subzero.sizes import human_bytes, parse_size


def cmd_workflows(args: argparse.Namespace) -> int:
    mods = workflows.available()
    if args.json:
        emit_json([{"name": n, "description": m.DESCRIPTION} for n, m in mods.items()])
    else:
        print(table([(n, m.DESCRIPTION) for n, m in mods.items()], ("workflow", "description")))
        print("\nyour own: subzero run package.module[:NAME] or subzero run path/to/file.py[:NAME]"
              "\n  (NAME: a function returning a subzero.Workflow, default 'build', or a "
              "Workflow object;\n  --param K=V passes keyword arguments to the function)")
    return 0


def _build_workflow(args: argparse.Namespace) -> Any:
    params = parse_assignments(args.param, "--param")
    if getattr(args, "scale", None) is not None:
        params["scale"] = str(args.scale)
    inputs = parse_assignments(args.input, "--input")
    for name, path in inputs.items():
        if not path:
            raise CliError(f"--input {name}={path}: expected a file path for input {name!r} "
                           f"(--input {name}=PATH)")
    return workflows.build(args.workflow, inputs=inputs, **params), inputs


def load_plan_file(path: str) -> tuple[dict[str, list[str]], int | None]:
    """A plan file: ``{"plan": {OP: [STRATEGY, ...]}, "max_disk": BYTES, ...}`` (the
    optimizer's output) or a bare ``{OP: [STRATEGY, ...]}``; each operator listed with at
    least one strategy, and at least one operator."""
    p = Path(path)
    if p.is_dir():
        raise CliError(f"--plan {path} is a folder; expected a plan file (JSON)")
    try:
        with open(p, encoding="utf-8") as f:
            doc = loads_limited(f.read())
    except FileNotFoundError:
        raise CliError(f"--plan {path}: no such file") from None
    except UnicodeDecodeError:
        raise CliError(f"--plan {path}: not a text file; expected a plan file (JSON)") from None
    except OSError as e:
        raise CliError(f"--plan {path}: cannot read it ({e.strerror or e})") from None
    except TooDeepError as e:
        raise CliError(f"--plan {path}: its lists and objects are {e}") from None
    except json.JSONDecodeError as e:
        raise CliError(f"--plan {path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    plan = doc.get("plan", doc) if isinstance(doc, dict) else None
    if not isinstance(plan, dict) or not all(
        isinstance(v, list) and all(isinstance(s, str) for s in v) for v in plan.values()
    ):
        raise CliError(f"--plan {path}: expected {{\"plan\": {{\"OP\": [\"STRATEGY\", ...]}}}}")
    if not plan:
        raise CliError(f"--plan {path} lists no operator; expected {{\"plan\": {{\"OP\": "
                       "[\"STRATEGY\", ...]}}")
    empty = [op for op, v in plan.items() if not v]
    if empty:
        raise CliError(f"--plan {path}: operator {empty[0]!r} has an empty strategy list; "
                       "expected at least one strategy (e.g. [\"blackbox\"])")
    budget = doc.get("max_disk") if isinstance(doc, dict) and "plan" in doc else None
    return plan, (parse_size(budget, "max_disk in the plan") if budget is not None else None)


def check_chunking(chunking: Chunking, text: str | None, wf: Any) -> Chunking:
    """Refuse a ``--chunks`` spec with a number of axes no array of the workflow has."""
    given = chunking.split if chunking.split is not None else chunking.chunks
    if given is None or (chunking.split is not None and len(given) == 1):
        return chunking
    wf.validate()
    ndims = sorted({len(s.shape) for s in wf.inputs.values()}
                   | {len(op.out_shape) for op in wf.ops.values()} - {0})
    if len(given) not in ndims:
        axes = " or ".join(str(n) for n in ndims)
        raise CliError(f"--chunks {text!r} has {len(given)} axes; the arrays of workflow "
                       f"{wf.name!r} have {axes}")
    return chunking


def check_chunk_limits(chunking: Chunking, text: str | None, wf: Any,
                       max_chunks: int | None = None, force: bool = False) -> None:
    """Refuse, before anything is written, a ``--chunks`` that cuts an array of ``wf`` into
    more than ``max_chunks`` chunks (``--max-chunks``), or into many chunks under 64 KiB
    (unless ``--force``): see :func:`subzero.chunking.check_chunk_sizes`."""
    if max_chunks is not None and max_chunks < 1:
        raise CliError(f"--max-chunks {max_chunks}: expected a positive number of chunks")
    if chunking.is_default:  # the default chunking is sized from the data itself
        return
    wf.validate()
    arrays = {n: (s.shape, s.dtype) for n, s in wf.inputs.items()}
    arrays.update({n: (op.out_shape, op.out_dtype) for n, op in wf.ops.items()})
    check_chunk_sizes(chunking, arrays, f"--chunks {text!r}",
                      DEFAULT_MAX_CHUNKS if max_chunks is None else max_chunks, force)


def _given(args: argparse.Namespace, *names: str) -> None:
    """An option given as an empty string is refused (not taken as absent)."""
    for name in names:
        v = getattr(args, name.lstrip("-").replace("-", "_"), None)
        if v is not None and not str(v).strip():
            raise CliError(f"{name} {v!r}: expected a value")


def cmd_run(args: argparse.Namespace) -> int:
    _given(args, "--max-disk", "--plan", "--chunks", "--strategy", "--master")
    if args.master is not None:
        check_master(resolve_master(args.master))  # before anything is built or started
    prepare_catalog(layout.resolve_home(args.home))
    chunking = Chunking.parse(args.chunks)
    plan, plan_budget = load_plan_file(args.plan) if args.plan is not None else (None, None)
    max_disk = (parse_size(args.max_disk, "--max-disk") if args.max_disk is not None
                else plan_budget)
    wf, inputs = _build_workflow(args)
    chunking = check_chunking(chunking, args.chunks, wf)
    check_chunk_limits(chunking, args.chunks, wf, args.max_chunks, args.force)
    strategy = args.strategy
    label = None
    if strategy == "optimized" and plan is None:
        plan = optimized_plan(wf, args.home, max_disk=max_disk)
        label = "optimized"
    elif plan is not None:
        label = f"plan:{Path(args.plan).name}"
    spec = RunSpec.build(wf, home=args.home, inputs=inputs, strategy=strategy, plan=plan,
                         label=label, chunking=chunking, master=args.master,
                         max_disk=max_disk, where=args.where, ship_env=args.ship_env)
    with RunDisplay(say) as shown:
        res = execute(spec, notify=shown.notify, on_progress=shown.progress)
    notes = _run_summary(args, res)
    if args.json:
        emit_json(dict(res.to_json(), summary=notes))
        return 0
    rows = [(o["name"], f"{o['runtime_s']:.3f}", f"{o['lineage_s']:.3f}",
             human_bytes(o["lineage_bytes"]), ",".join(o["strategies"])) for o in res.operators]
    print(table(rows, ("operator", "runtime_s", "lineage_s", "lineage", "strategies")))
    print(f"\nrun {res.run} of {res.workflow} ({res.strategy}) complete in {res.runtime_s:.2f} s; "
          f"inputs {human_bytes(res.input_bytes)} ({data_kind(res.inputs)}), "
          f"lineage {human_bytes(res.lineage_bytes)}")
    for line in notes:
        print(line)
    return 0


def _run_summary(args: argparse.Namespace, res: RunResult) -> list[str]:
    """The workflow's own summary lines of a finished run (none for your own workflows); its
    named queries' start cells are chosen now, while the arrays are fresh in the page cache,
    so that a later `subzero query --named` reads no array."""
    run = Home(args.home).get(res.run)
    if res.workflow not in workflows.available():  # a workflow of your own: no summary
        run.choose_named_cells()
        return []
    # both read whole arrays (decoding and counting release the GIL): on two threads
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="subzero-summary") as pool:
        lines = pool.submit(workflows.summary, res.workflow, run)
        run.choose_named_cells()
        return lines.result()


def data_kind(origins: dict[str, Any] | None) -> str:
    """``generated``, ``files`` or ``mixed``: where a run's (non-constant) inputs came from.

    >>> data_kind({"exp1": {"kind": "file"}, "satmask": {"kind": "workflow", "auxiliary": True}})
    'files'
    """
    kinds = {("files" if (o or {}).get("kind") == "file" else "generated" if o else "-")
             for o in (origins or {}).values() if not (o or {}).get("auxiliary")}
    return kinds.pop() if len(kinds) == 1 else "mixed" if kinds else "-"


def _catalog(args: argparse.Namespace) -> Catalog:
    return open_catalog(layout.resolve_home(args.home))


def cmd_runs(args: argparse.Namespace) -> int:
    cat = _catalog(args)
    runs = cat.runs()
    origins = cat.input_origins()
    keys = ("id", "workflow", "strategy", "status", "started", "runtime_s", "input_bytes",
            "lineage_bytes", "error", "parent", "derivation")
    if args.json:
        emit_json([{**{("run" if k == "id" else k): r[k] for k in keys},
                    "inputs": origins.get(r["id"], {})} for r in runs])
        return 0
    rows = [(r["id"], r["workflow"], r["strategy"] or "-", r["status"], r.get("parent") or "-",
             time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"])),
             "-" if r["runtime_s"] is None else f"{r['runtime_s']:.2f}",
             human_bytes(r["input_bytes"]),
             data_kind(origins.get(r["id"]) or origins.get(r.get("parent") or "")),
             human_bytes(r["lineage_bytes"]), r["error"] or _derived(r)) for r in runs]
    print(table(rows, ("run", "workflow", "strategy", "status", "parent", "started",
                       "runtime_s", "inputs", "data", "lineage", "note"))
          if rows else "no runs yet")
    return 0


def _derived(r: dict[str, Any]) -> str:
    """How a derived run was made, in a few words (empty for a plain run)."""
    d = r.get("derivation") or {}
    if d.get("kind") != "replay":
        return ""
    return f"replay: {d.get('cells')} cells of {d.get('array')} set to {d.get('value')}"


def cmd_show(args: argparse.Namespace) -> int:
    cat = _catalog(args)
    info = cat.run(args.run)
    rid = info["id"]
    ops, stats, arrays = cat.operators(rid), cat.op_stats(rid), cat.arrays(rid)
    origins = cat.input_origins(rid).get(rid, {})
    if args.json:
        emit_json({"run": info, "inputs": origins, "operators": list(ops.values()),
                   "stats": list(stats.values()), "arrays": list(arrays.values())})
        return 0
    print(f"run {rid}: {info['workflow']} ({info['strategy']}), {info['status']}"
          + (f" - {info['error']}" if info["error"] else ""))
    if info.get("parent"):
        print(f"derived from run {info['parent']}: {_derived(info) or 'see runs --json'}")
    placed = info.get("placement")
    if placed:
        where = ("in the driver's own process" if placed.get("where") == "driver"
                 else f"as Spark jobs ({info.get('master') or 'master not recorded'})")
        print(f"executed {where}: {placed.get('why', '')}")
    data = sorted(n for n, o in origins.items() if not (o or {}).get("auxiliary"))
    for n in data:
        print(f"input {n}: {origin_text(origins[n])}")
    constants = [n for n in origins if n not in data]
    if constants:
        print(f"constant inputs of the workflow: {', '.join(constants)}")
    rows = []
    for n, o in ops.items():
        s = stats.get(n, {})
        rows.append((n, o["kind"], ",".join(o["inputs"]), ",".join(o["strategies"]),
                     o["parallelism"], f"{s.get('runtime_s') or 0:.3f}",
                     human_bytes(s.get("lineage_bytes")), s.get("pairs") or 0))
    print(table(rows, ("operator", "kind", "inputs", "strategies", "parallelism",
                       "runtime_s", "lineage", "pairs")))
    print()
    print(table([(n, *_code_cells(o.get("code"), o["class"])) for n, o in ops.items()],
                ("operator", "class", "code sha256", "from")))
    notes = [(n, s["note"]) for n, s in stats.items() if s.get("note")]
    for n, note in notes:
        print(f"note: {n}: {note}")
    return 0


def _code_cells(code: dict[str, Any] | None, cls: str) -> tuple[str, str, str]:
    """An operator's class, code digest and where it came from, as ``show`` lists them."""
    if not code:
        return cls, "-", "not recorded (subzero migrate)"
    dist = code.get("distribution")
    origin = (f"{dist} {code.get('version') or ''}".strip() if dist
              else "no distribution (a module of your own)")
    return str(code.get("class")), str(code.get("digest"))[:16], origin


def cmd_export(args: argparse.Namespace) -> int:
    out = check_output(args.out, "export: OUT", (".npy", ".fits", ".fit"))
    run = Home(args.home).get(args.run)
    data = run.array(args.array)
    suffix = out.suffix.lower()
    if suffix in (".fits", ".fit") and data.dtype.kind not in "biuf":
        raise CliError(f"array {args.array!r} has dtype {data.dtype}; FITS holds numbers only "
                       "(export to .npy instead)")
    with output_file(out, "export: OUT") as tmp:
        if suffix == ".npy":
            np.save(tmp, data)
        else:
            from astropy.io import fits  # astropy only to write FITS

            fits.PrimaryHDU(data.astype(np.uint8) if data.dtype == bool else data).writeto(
                tmp, overwrite=True)
    if not args.json:
        print(f"wrote {args.array} of run {run.id} ({data.shape}, {data.dtype}) to {out}")
    else:
        emit_json({"run": run.id, "array": args.array, "shape": data.shape,
                   "dtype": str(data.dtype), "out": str(out)})
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("workflows", parents=[common], help="list the workflows")
    s.set_defaults(func=cmd_workflows)

    s = sub.add_parser("run", parents=[common], help="run a workflow on Spark")
    s.add_argument("workflow")
    s.add_argument("--input", action="append", metavar="NAME=PATH",
                   help="read input NAME from a .npy/.fits file (repeatable)")
    s.add_argument("--strategy", default="subzero",
                   help="lineage strategy: subzero, blackbox, blackbox-opt, full-one, "
                   "full-many, ... or optimized (default subzero)")
    s.add_argument("--plan", help="apply a plan file written by 'subzero optimize'")
    s.add_argument("--max-disk", help="lineage disk budget, e.g. 100MB: an operator whose "
                   "lineage would exceed it stores none (black box for this run)")
    s.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="workflow parameter, e.g. shape=400x200 (repeatable)")
    s.add_argument("--scale", type=int, default=None, help="genomics: patient replication")
    s.add_argument("--chunks", help="chunks per axis ('4', '4x2') or chunk shape ('500,513')")
    s.add_argument("--max-chunks", type=int, metavar="N",
                   help=f"the most chunks --chunks may cut one array into (default "
                   f"{DEFAULT_MAX_CHUNKS:,})")
    s.add_argument("--force", action="store_true",
                   help="allow a --chunks that makes many chunks under 64 KiB an array")
    s.add_argument("--master", help="Spark master URL (default $SUBZERO_SPARK_MASTER or local[*,4]: all cores, 4 tries per task)")
    s.add_argument("--where", choices=WHERE, default="auto",
                   help="run as Spark jobs, or in this process (driver); auto (default): "
                   "a small run on a local master runs in this process when that is quicker")
    s.add_argument("--ship-env", action="store_true",
                   help="pack this virtualenv (cached by its contents) and ship it to the "
                   "executors with spark.archives, for a cluster whose nodes do not have it "
                   "(they need the same base Python: see the cluster guide)")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("runs", parents=[common], help="list runs")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("show", parents=[common], help="show a run's operators and figures")
    s.add_argument("run", help="run id, 'latest' or 'latest:WORKFLOW'")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("export", parents=[common], help="write an array of a run to .npy/.fits")
    s.add_argument("run", help="run id, 'latest' or 'latest:WORKFLOW'")
    s.add_argument("array")
    s.add_argument("out")
    s.set_defaults(func=cmd_export)
