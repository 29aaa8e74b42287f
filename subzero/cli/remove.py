"""``subzero rm RUN...`` and ``subzero gc``: remove runs (their arrays, lineage shards,
catalog rows and folder) and say what that frees (:mod:`subzero.engine.remove`).

``rm`` removes the runs named; a run that a derived run needs is refused naming it
(``--with-derived`` removes both), a running run is refused. ``gc`` removes the runs its
criteria select (``--failed``, ``--older-than AGE``, ``--keep-last N``, which narrow each
other), keeping those a kept derived run needs; with no criterion it only finishes
removals that were interrupted. ``--dry-run`` changes nothing and says what would go.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from subzero.cli.common import CliError, emit_json, table
from subzero.engine.remove import Removal, collect_garbage, remove_runs
from subzero.sizes import human_bytes

#: seconds per unit of ``--older-than``
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str, flag: str = "--older-than") -> float:
    """Seconds from an age such as ``30d``, ``12h``, ``90m``, ``2w`` or ``45s``.

    >>> parse_age("30d"), parse_age("1.5h")
    (2592000.0, 5400.0)
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhdw])\s*", str(text))
    if not m:
        raise CliError(f"{flag} {text!r}: expected a number and a unit s, m, h, d or w "
                       "(e.g. 30d, 12h)")
    return float(m.group(1)) * AGE_UNITS[m.group(2)]


def parse_count(text: str, flag: str = "--keep-last") -> int:
    """A whole number of runs, 0 or more.

    >>> parse_count("3")
    3
    """
    if not re.fullmatch(r"\s*[0-9]+\s*", str(text)):
        raise CliError(f"{flag} {text!r}: expected a whole number of runs, 0 or more")
    return int(text)


def _print(report: Removal, as_json: bool) -> None:
    if as_json:
        emit_json(report.to_json())
        return
    verb = "would free" if report.dry_run else "freed"
    head = "dry run: " if report.dry_run else ""
    if report.removed:
        print(table([(r.run, r.workflow, r.status, r.parent or "-", human_bytes(r.bytes), r.why)
                     for r in report.removed],
                    ("run", "workflow", "status", "parent", verb, "why")))
    for k in report.kept:
        print(f"kept {k.run}: {k.why}")
    n = len(report.removed)
    if n:
        print(f"{head}{verb} {human_bytes(report.bytes)} ({report.bytes:,} bytes) removing "
              f"{n} run{'s' if n != 1 else ''}")
    else:
        print(f"{head}nothing to remove")


def cmd_rm(args: argparse.Namespace) -> int:
    report = remove_runs(args.home, args.runs, with_derived=args.with_derived,
                         dry_run=args.dry_run)
    _print(report, args.json)
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    older = None if args.older_than is None else parse_age(args.older_than)
    keep = None if args.keep_last is None else parse_count(args.keep_last)
    report = collect_garbage(args.home, failed=args.failed, older_than=older, keep_last=keep,
                             dry_run=args.dry_run)
    _print(report, args.json)
    if not (args.failed or older is not None or keep is not None) and not args.json:
        print("(no criterion given: only interrupted removals are finished; "
              "pass --failed, --older-than AGE or --keep-last N)")
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("rm", parents=[common],
                       help="remove runs: their arrays, shards, catalog rows and folder")
    s.add_argument("runs", nargs="+", metavar="RUN", help="run id, 'latest' or 'latest:WORKFLOW'")
    s.add_argument("--with-derived", action="store_true",
                   help="also remove the runs derived from them (replays), which use their "
                   "files; without it such a run is refused")
    s.add_argument("--dry-run", action="store_true",
                   help="change nothing: say what would be removed and freed")
    s.set_defaults(func=cmd_rm)

    s = sub.add_parser("gc", parents=[common],
                       help="remove failed or old runs and finish interrupted removals")
    s.add_argument("--failed", action="store_true", help="remove failed runs")
    s.add_argument("--older-than", metavar="AGE",
                   help="remove runs started more than AGE ago (30d, 12h, 90m, 2w)")
    s.add_argument("--keep-last", metavar="N",
                   help="keep the N newest complete runs of each workflow (alone: remove "
                   "every other run)")
    s.add_argument("--dry-run", action="store_true",
                   help="change nothing: say what would be removed and freed")
    s.set_defaults(func=cmd_gc)
