"""``subzero verify RUN``: check a run's catalog, lineage shards and arrays against the
files (:mod:`subzero.engine.verify`) and list what is damaged."""

from __future__ import annotations

import argparse
from typing import Any

from subzero.cli.common import emit_json, table
from subzero.engine.verify import verify_run

#: the exit status when something is damaged (2 stays a bad command line, 1 a bug)
EXIT_DAMAGED = 3


def cmd_verify(args: argparse.Namespace) -> int:
    report = verify_run(args.home, args.run)
    if args.json:
        emit_json(report.to_json())
        return 0 if report.ok else EXIT_DAMAGED
    checked = (f"{report.shards} shards ({report.records:,} records), {report.arrays} arrays "
               f"({report.chunks} chunks)")
    if report.unchecksummed:
        checked += (f"; {report.unchecksummed} shards have no recorded checksum (written before "
                    "checksums were, or by a tool that does not record them): read back only")
    if report.ok:
        print(f"run {report.run} ({report.status}): ok, checked {checked}")
        return 0
    print(table([(p.kind, p.what, p.detail) for p in report.problems],
                ("kind", "what", "problem")))
    print(f"\nrun {report.run} ({report.status}): {len(report.problems)} damaged or missing; "
          f"checked {checked}. Queries re-execute an operator whose shard is damaged "
          "(--method auto); a damaged array needs the run again.")
    return EXIT_DAMAGED


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("verify", parents=[common],
                       help="check a run's shards and arrays against the catalog")
    s.add_argument("run", help="run id, 'latest' or 'latest:WORKFLOW'")
    s.set_defaults(func=cmd_verify)
