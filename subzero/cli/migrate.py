"""``subzero migrate HOME --trust``: convert runs recorded by an earlier SubZero (their
workflow a pickle) to manifests (:mod:`subzero.engine.migrate`)."""

from __future__ import annotations

import argparse
from typing import Any

from subzero.cli.common import CliError, emit_json
from subzero.engine.migrate import migrate_home


def cmd_migrate(args: argparse.Namespace) -> int:
    res = migrate_home(args.target or args.home, trust=args.trust)
    if args.json:
        emit_json(res.to_json())
    else:
        for rid in res.converted:
            print(f"run {rid}: converted (manifest.json written; workflow.pkl removed)")
        for rid, why in res.failed.items():
            print(f"run {rid}: not converted: {why}")
        if not res.converted and not res.failed:
            print(f"{res.home}: nothing to convert ({res.current} runs have a manifest)")
        elif res.converted:
            print("code digests record the modules installed now, not those of the runs' time")
    if res.failed:
        raise CliError(f"{len(res.failed)} runs could not be converted (listed above); their "
                       "queries need them run again")
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("migrate", parents=[common],
                       help="convert a home written by an earlier SubZero (pickled workflows)")
    s.add_argument("target", nargs="?", metavar="HOME",
                   help="the home to convert (default --home, $SUBZERO_HOME or ./subzero-home)")
    s.add_argument("--trust", action="store_true",
                   help="unpickle the old workflow files (runs any code they hold)")
    s.set_defaults(func=cmd_migrate)
