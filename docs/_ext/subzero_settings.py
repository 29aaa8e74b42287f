"""A Sphinx directive that lists every tuning setting (:mod:`subzero.settings`) at build time.

A module defines its settings when it is imported (``settings.define(...)``), so
``{subzero-settings}`` first imports every module of the project's packages (walked with
:mod:`pkgutil`; ``__main__`` modules, which would run a command, are left out), then renders
:data:`subzero.settings.SETTINGS` as a table: the variable, its default as the code states
it (:meth:`~subzero.settings.Setting.describe_default`), what it decides, the benchmark
that shows its effect and the module that defines it. The table cannot drift from the code.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

#: the packages whose modules may define settings
PACKAGES = ("subzero", "operators", "encoders", "optimizer", "workflows")


def import_all(packages: tuple[str, ...] = PACKAGES) -> list[ModuleType]:
    """Every module of ``packages``, imported (``__main__`` modules left out)."""
    found = []
    for package in packages:
        root = importlib.import_module(package)
        found.append(root)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            if info.name.rsplit(".", 1)[-1] == "__main__":
                continue
            found.append(importlib.import_module(info.name))
    return found


def settings() -> list[Any]:
    """Every :class:`~subzero.settings.Setting` the packages define, by variable name."""
    import_all()
    from subzero.settings import SETTINGS

    return sorted(SETTINGS.values(), key=lambda s: s.variable)


#: an RST role in a setting's text (``:func:`size```), rewritten to MyST's ``{py:func}`size```
ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|exc|obj):`([^`]+)`")


def _cell(text: str) -> str:
    """Text for one Markdown table cell (no pipes, one line, MyST roles)."""
    text = ROLE.sub(lambda m: f"{{py:{m.group(1)}}}`{m.group(2)}`", str(text))
    return " ".join(text.split()).replace("|", "\\|")


def table_markdown() -> list[str]:
    """The settings as a MyST Markdown table."""
    lines = ["| variable | default | what it decides | benchmark | defined in |",
             "|---|---|---|---|---|"]
    for s in settings():
        bench = f"`{s.benchmark}`" if s.benchmark else "-"
        module = f"`{s.module}`" if s.module else "-"
        lines.append(f"| `{s.variable}` | {_cell(s.describe_default())} | {_cell(s.doc)} "
                     f"| {bench} | {module} |")
    return lines


class SubzeroSettings(SphinxDirective):
    """``{subzero-settings}``: the table of every tuning setting."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        rows = table_markdown()
        self.env.note_dependency(__file__)
        for module in import_all():
            if getattr(module, "__file__", None):
                self.env.note_dependency(module.__file__)
        container = nodes.container()
        self.state.nested_parse(StringList(rows, source="settings"), 0, container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("subzero-settings", SubzeroSettings)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
