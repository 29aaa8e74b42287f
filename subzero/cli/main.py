"""``subzero``: the command line, one module per group of commands.

Every error a user can cause prints one line on stderr (``subzero: error: ...``) and exits
with status 2, without a traceback. ``--json`` prints machine-readable output only.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sqlite3
import sys
import warnings
from typing import Sequence

from subzero.cli.common import EXIT_USAGE, CliError, Parser
from subzero.errors import SubZeroError

#: each command, in help order, and the module of :mod:`subzero.cli` whose
#: ``register(subparsers, common)`` adds it. A command's module is imported only when that
#: command runs (all of them for ``--help`` or an unknown command): a one-shot query must
#: not pay for importing the optimizer, Starlette or the replay engine.
COMMANDS: dict[str, str] = {
    "workflows": "runs", "run": "runs", "runs": "runs", "show": "runs", "export": "runs",
    "query": "query", "serve": "serve", "replay": "replay", "optimize": "optimize",
    "calibrate": "optimize", "check-lineage": "check", "verify": "verify",
    "migrate": "migrate", "bench": "bench", "rm": "remove", "gc": "remove",
}


def command_modules(argv: Sequence[str] | None = None) -> list[str]:
    """The modules to register for ``argv``: the command's own, or every one."""
    first = next((a for a in (argv or []) if not a.startswith("-")), None)
    if first in COMMANDS and not any(a in ("-h", "--help") for a in (argv or [])[:1]):
        return [COMMANDS[first]]
    return list(dict.fromkeys(COMMANDS.values()))


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (every command when None): see :data:`COMMANDS`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=None,
                        help="SubZero home directory (default $SUBZERO_HOME or ./subzero-home)")
    common.add_argument("--catalog", default=None, metavar="URL",
                        help="the home's catalog: postgresql://USER@HOST:PORT/DB for a new "
                        "home shared by several processes and users (default "
                        "$SUBZERO_CATALOG, else the home's own, else SQLite in the home)")
    common.add_argument("--json", action="store_true", help="print JSON only")

    p = Parser(prog="subzero", description="Fine-grained lineage for scientific array "
               "workflows on Apache Spark (SubZero).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in command_modules(argv):
        # by name, from the table above: only the command that runs is imported
        importlib.import_module(f"subzero.cli.{name}").register(sub, common)
    return p


def _command_names(parser: argparse.ArgumentParser) -> list[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(argv)  # imports the command's modules: their settings are read
        args = parser.parse_args(argv)
        if getattr(args, "catalog", None) is not None or "subzero.engine.homeconfig" in sys.modules:
            from subzero.engine.homeconfig import request_catalog

            request_catalog(getattr(args, "catalog", None))  # this command's, not the last one's
        if not getattr(args, "command", None):
            names = ", ".join(sub for sub in _command_names(parser))
            raise CliError(f"no command given; expected one of {names} (subzero --help)")
        with warnings.catch_warnings():
            if not os.environ.get("SUBZERO_DEBUG"):  # a library's warnings are not ours to print
                warnings.simplefilter("ignore")
            return int(args.func(args) or 0)
    except SubZeroError as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"subzero: error: {msg}", file=sys.stderr)
        return getattr(e, "exit_code", EXIT_USAGE)
    except KeyboardInterrupt:
        print("subzero: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - a bug in SubZero, reported in one line
        if isinstance(e, sqlite3.DatabaseError):
            from subzero.engine.catalog import damaged_catalog, is_damage

            if is_damage(e):  # a catalog page damaged on disk, met while reading it
                print(f"subzero: error: {damaged_catalog('of this home', e)}",
                      file=sys.stderr)
                return EXIT_USAGE
        if os.environ.get("SUBZERO_DEBUG"):
            raise
        msg = str(e).splitlines()[0] if str(e) else ""
        print(f"subzero: internal error: {type(e).__name__}: {msg} "
              "(set SUBZERO_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
