"""A Sphinx directive that renders the import-linter contracts of ``setup.cfg``.

``{subzero-layers}`` reads every ``[importlinter:contract:*]`` section and shows its name
and what it checks: a ``layers`` contract as its layers from the top down (``a | b`` on one
layer: siblings, independent of each other), a ``forbidden`` contract as its source modules
and the modules they may not import, an ``acyclic_siblings`` contract as the packages whose
children may not import each other in a cycle. ``lint-imports`` (in ``make test``) enforces
the same text, so the page says what is checked.
"""

from __future__ import annotations

import configparser
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

SETUP_CFG = Path(__file__).resolve().parents[2] / "setup.cfg"
PREFIX = "importlinter:contract:"


def _lines(value: str) -> list[str]:
    return [v.strip() for v in value.strip().splitlines() if v.strip()]


def contracts(path: Path = SETUP_CFG) -> list[dict[str, Any]]:
    """The import-linter contracts of ``path``: ``{"id", "name", "type", ...lists}``."""
    cfg = configparser.ConfigParser()
    cfg.read(path)
    out = []
    for section in cfg.sections():
        if section.startswith(PREFIX):
            c: dict[str, Any] = {"id": section[len(PREFIX):]}
            for key, value in cfg[section].items():
                c[key] = _lines(value) if "\n" in value.strip() or key not in (
                    "name", "type") else value.strip()
            out.append(c)
    return out


def _modules(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def contract_markdown(c: dict[str, Any]) -> list[str]:
    """One contract as MyST Markdown."""
    lines = [f"**{c['name']}** (contract `{c['id']}`, type `{c['type']}`)", ""]
    if c["type"] == "layers":
        lines.append("From the top; a layer may import the layers below it, never one above:")
        lines.append("")
        for k, layer in enumerate(c.get("layers", []), 1):
            parts = [p.strip() for p in layer.split("|")]
            note = " (siblings: neither imports the other)" if len(parts) > 1 else ""
            lines.append(f"{k}. {_modules(parts)}{note}")
    elif c["type"] == "forbidden":
        lines.append(f"- modules: {_modules(c.get('source_modules', []))}")
        lines.append(f"- may not import: {_modules(c.get('forbidden_modules', []))}")
    else:
        for key, value in c.items():
            if key not in ("id", "name", "type"):
                value = value if isinstance(value, list) else [value]
                lines.append(f"- {key.replace('_', ' ')}: {_modules(value)}")
    return lines + [""]


class SubzeroLayers(SphinxDirective):
    """``{subzero-layers}``: the import contracts, read from ``setup.cfg``."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        self.env.note_dependency(str(SETUP_CFG))
        self.env.note_dependency(__file__)
        text: list[str] = []
        for c in contracts():
            text += contract_markdown(c)
        container = nodes.container()
        self.state.nested_parse(StringList(text, source="setup.cfg"), 0, container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("subzero-layers", SubzeroLayers)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
