"""A Sphinx directive that renders the benchmarks' results (``benchmarks/results/*.json``)
as tables at build time, so the performance page shows what the last benchmark run wrote
and cannot drift from it.

Each results file becomes a section: its command, its plots (:mod:`subzero_plots`, drawn
at build time into the build's doctree folder), its scalar fields and groups of them, and
every list of records in it (at the top level or one level down) as a table of its scalar
columns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive

import subzero_plots

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
#: a table shows at most this many columns and rows (the JSON file holds the rest)
MAX_COLUMNS = 10
MAX_ROWS = 60


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _text(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "-" if v is None else ("yes" if v else "no")
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _table(rows: list[dict[str, Any]]) -> nodes.table:
    columns: list[str] = []
    for row in rows:
        for k, v in row.items():
            if _scalar(v) and k not in columns:
                columns.append(k)
    columns = columns[:MAX_COLUMNS]
    table = nodes.table()
    group = nodes.tgroup(cols=len(columns))
    table += group
    for _ in columns:
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    group += head
    head += _row(columns)
    body = nodes.tbody()
    group += body
    for row in rows[:MAX_ROWS]:
        body += _row([_text(row.get(c)) for c in columns])
    return table


def _row(cells: list[str]) -> nodes.row:
    row = nodes.row()
    for text in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(text=text)
        row += entry
    return row


def _records(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The lists of records in a results document, with where they are."""
    found = []
    for key, value in doc.items():
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            found.append((key, value))
        elif isinstance(value, dict):
            for sub, inner in value.items():
                if isinstance(inner, list) and inner and all(isinstance(r, dict)
                                                             for r in inner):
                    found.append((f"{key}.{sub}", inner))
    return found


def _figures(path: Path, doc: dict[str, Any], env: Any) -> list[nodes.Node]:
    """The results file's plots as figures; image paths relative to the page's folder."""
    out = Path(env.doctreedir) / "subzero-plots"
    here = Path(env.doc2path(env.docname)).parent
    figures: list[nodes.Node] = []
    for png, title in subzero_plots.draw(path.stem, doc, out):
        figure = nodes.figure()
        figure += nodes.image(uri=Path(os.path.relpath(png, here)).as_posix(), alt=title)
        figure += nodes.caption(text=title)
        figures.append(figure)
    return figures


def _section(path: Path, env: Any) -> nodes.section:
    doc = json.loads(path.read_text())
    name = str(doc.get("benchmark", path.stem))
    section = nodes.section(ids=[nodes.make_id(f"results-{path.stem}")])
    section += nodes.title(text=f"{name} ({path.name})")
    command = doc.get("command") or f"python benchmarks/bench_{path.stem}.py"
    para = nodes.paragraph()
    para += nodes.literal(text=command)
    section += para
    for figure in _figures(path, doc, env):
        section += figure
    scalars = {k: v for k, v in doc.items() if _scalar(v) and k not in ("benchmark", "command")}
    if scalars:
        section += nodes.paragraph(text="; ".join(f"{k}: {_text(v)}" for k, v in scalars.items()))
    for key, value in doc.items():  # a group of figures (a dict of scalars)
        if isinstance(value, dict) and value and all(_scalar(v) for v in value.values()):
            section += nodes.paragraph(text=f"{key}: " + "; ".join(
                f"{k} {_text(v)}" for k, v in value.items()))
    for where, rows in _records(doc):
        section += nodes.rubric(text=where)
        section += _table(rows)
    return section


class Results(Directive):
    """``{subzero-results}``: one section per results file, in name order."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        env = self.state.document.settings.env
        out: list[nodes.Node] = []
        for path in sorted(RESULTS.glob("*.json")):
            env.note_dependency(str(path))
            out.append(_section(path, env))
        for module in (__file__, subzero_plots.__file__):  # the page changes with its code
            env.note_dependency(module)
        return out


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("subzero-results", Results)
    return {"version": "1", "parallel_read_safe": True}
