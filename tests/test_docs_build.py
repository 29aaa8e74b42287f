"""The documentation site builds without a warning, and its references follow the code."""

from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

from subzero.cli.main import build_parser
from tests.conftest import ROOT

NO_DOCS_EXTRA = "the docs extra is not installed: pip install -e '.[docs]'"
for _module in ("sphinx", "myst_parser", "numpydoc"):
    pytest.importorskip(_module, reason=NO_DOCS_EXTRA)

#: the API reference's curated names, each documented on the API page
API_NAMES = (
    "subzero.api.Home", "subzero.api.Run", "subzero.workflow.Workflow",
    "subzero.operator.Operator", "subzero.runtime.TaskContext", "operators.udf.elementwise",
    "operators.udf.stencil", "operators.udf.along", "operators.udf.rows",
    "operators.udf.columns", "operators.udf.whole_array", "operators.udf.blackbox",
    "operators.udf.cells", "operators.udf.Lineage",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML site, built as ``make docs`` builds it (warnings are errors) in a temp dir."""
    out = tmp_path_factory.mktemp("docs")
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-E", "-q",
         "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the documentation build failed:\n{r.stdout}{r.stderr}"
    assert "WARNING" not in r.stderr, r.stderr
    return out / "html"


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def test_docs_build_without_warnings(site: Path) -> None:
    for page in ("index", "guide/your-workflow", "reference/lineage", "reference/cli",
                 "reference/api", "reference/http", "reference/environment",
                 "reference/performance"):
        assert (site / f"{page}.html").is_file(), f"{page} was not built"


def test_cli_page_lists_every_subcommand_of_the_parser(site: Path) -> None:
    names = _subcommands(build_parser())
    assert names, "the parser has no subcommand"
    page = _text(site / "reference" / "cli.html")
    for name in names:
        assert f"usage: subzero {name} " in page or f"usage: subzero {name}\n" in page, (
            f"the CLI page does not show the usage of 'subzero {name}'")
    headings = re.findall(r'<section id="subzero-([\w-]+)">',
                          (site / "reference" / "cli.html").read_text())
    assert headings == names, "the CLI page's sections are not the parser's subcommands"


def test_api_page_documents_the_curated_names(site: Path) -> None:
    page = (site / "reference" / "api.html").read_text()
    for name in API_NAMES:
        assert f'id="{name}"' in page, f"the API page does not document {name}"


def test_performance_page_shows_every_results_file(site: Path) -> None:
    """Each benchmark's results, with its command; the UDF benchmark's table as written."""
    import json

    page = _text(site / "reference" / "performance.html")
    results = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert results
    for path in results:
        assert f"({path.name})" in page, f"the performance page does not show {path.name}"
    udf = json.loads((ROOT / "benchmarks" / "results" / "udf.json").read_text())
    assert udf["command"] in page
    for row in udf["table"]:
        assert row["case"] in page


def test_http_page_names_every_route_of_the_app() -> None:
    """The HTTP API page names every route the explorer's app declares."""
    source = (ROOT / "subzero" / "serve" / "app.py").read_text()
    page = (ROOT / "docs" / "reference" / "http.md").read_text()
    routes = re.findall(r'Route\("([^"]+)"', source)
    assert len(routes) > 5
    for route in routes:
        if route == "/":
            continue
        plain = re.sub(r"\{(\w+):\w+\}", r"{\1}", route).split(".{fmt}")[0]
        assert plain in page, f"docs/reference/http.md does not name {route}"


def test_environment_page_names_every_variable_the_code_reads() -> None:
    """Every ``SUBZERO_*`` variable the library reads is on the environment page."""
    page = (ROOT / "docs" / "reference" / "environment.md").read_text()
    found = set()
    for package in ("subzero", "operators", "encoders", "optimizer", "workflows"):
        for path in (ROOT / package).rglob("*.py"):
            found |= set(re.findall(r"\bSUBZERO_[A-Z_]+\b", path.read_text()))
    assert "SUBZERO_HOME" in found
    missing = sorted(v for v in found if f"`{v}`" not in page)
    assert not missing, f"docs/reference/environment.md does not name {missing}"
