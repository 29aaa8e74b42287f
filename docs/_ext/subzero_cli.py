"""A Sphinx directive that documents the ``subzero`` command line from its parser.

``{subzero-cli}`` renders the parser that :func:`subzero.cli.main.build_parser` builds: the
top-level help, then one section per subcommand (its one-line help, then its
``format_help()``: usage, description and options). The page is made at build time from
the code, so it cannot drift from it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

#: the help text's width: fixed, so the page does not depend on the building terminal
WIDTH = 88


def subcommands(parser: argparse.ArgumentParser
                ) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, one-line help, parser)`` of each subcommand of ``parser``, in help order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _help(parser: argparse.ArgumentParser) -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        return parser.format_help()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


class SubzeroCli(SphinxDirective):
    """The ``subzero`` parser's help, one section per subcommand."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from subzero.cli.main import build_parser

        parser = build_parser()
        out: list[nodes.Node] = [nodes.literal_block(text=_help(parser), language="text")]
        for name, summary, sub in subcommands(parser):
            out.append(self._section(f"{parser.prog} {name}", summary, sub))
        return out

    def _section(self, title: str, summary: str, parser: argparse.ArgumentParser
                 ) -> nodes.section:
        section = nodes.section(ids=[nodes.make_id(title)],
                                names=[nodes.fully_normalize_name(title)])
        section += nodes.title(text=title)
        if summary:
            section += nodes.paragraph(text=summary[0].upper() + summary[1:] + ".")
        section += nodes.literal_block(text=_help(parser), language="text")
        for name, sub_summary, sub in subcommands(parser):
            section += self._section(f"{title} {name}", sub_summary, sub)
        self.state.document.note_implicit_target(section, section)
        return section


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("subzero-cli", SubzeroCli)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
