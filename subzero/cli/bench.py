"""``subzero bench NAME``: run one of the benchmark scripts in ``benchmarks/``."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path
from typing import Any

from subzero.cli.common import check_output
from subzero.errors import SubZeroError

BENCHMARKS = ("astronomy", "genomics", "encoders", "query", "executor", "optimizer", "scale",
              "serve", "check_lineage")


def benchmarks_dir() -> Path:
    d = Path(__file__).resolve().parents[2] / "benchmarks"
    if not d.is_dir():
        raise SubZeroError(f"no benchmarks folder at {d}: benchmarks run from a source checkout")
    return d


def cmd_bench(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_output(args.out, "--out", (".json",))
    if args.png is not None:
        png = Path(args.png)
        if png.exists() and not png.is_dir():
            raise SubZeroError(f"--png {args.png} is a file, not a folder; expected a folder "
                               "for the plots")
        if not png.exists() and not png.parent.is_dir():
            raise SubZeroError(f"--png {args.png}: folder {png.parent} does not exist")
    script = benchmarks_dir() / f"bench_{args.name}.py"
    if not script.exists():
        raise SubZeroError(f"benchmark {args.name!r} is not available ({script} is missing)")
    argv = [str(script)]
    if args.quick:
        argv.append("--quick")
    if args.out:
        argv += ["--out", args.out]
    if args.png:
        argv += ["--png", args.png]
    old = sys.argv
    sys.argv = argv
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        sys.argv = old
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("bench", help="run a benchmark (prints JSON)")
    s.add_argument("name", choices=BENCHMARKS)
    s.add_argument("--quick", action="store_true", help="a smaller, faster subset")
    s.add_argument("--out", help="also write the JSON to this file")
    s.add_argument("--png", help="write plots into this folder (where the benchmark has them)")
    s.set_defaults(func=cmd_bench)
