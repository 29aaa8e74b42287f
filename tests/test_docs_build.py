"""The documentation site builds without a warning, and its references follow the code."""

from __future__ import annotations

import argparse
import configparser
import html
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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


#: the packages whose modules may define tuning settings (``subzero.settings.define``)
PACKAGES = ("subzero", "operators", "encoders", "optimizer", "workflows")
#: the pages every build must make
PAGES = ("index", "guide/your-workflow", "reference/lineage", "reference/operators",
         "reference/cli", "reference/api", "reference/http", "reference/environment",
         "reference/performance", "design/layers", "design/runs", "design/queries",
         "design/replay", "design/tight-lineage")


def _modules(package: str) -> list[ModuleType]:
    """``package`` and every module in it, imported (``__main__`` modules left out)."""
    root = importlib.import_module(package)
    return [root] + [importlib.import_module(i.name)
                     for i in pkgutil.walk_packages(root.__path__, package + ".")
                     if not i.name.endswith(".__main__")]


def _settings() -> dict[str, object]:
    """Every tuning setting, once every module that may define one is imported."""
    for package in PACKAGES:
        _modules(package)
    from subzero.settings import SETTINGS

    return dict(SETTINGS)


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


def _plain(page: Path) -> str:
    """A page's text on one line, with Sphinx's typographic quotes and ellipses undone."""
    text = _text(page).translate({0x2019: "'", 0x2018: "'", 0x201C: '"', 0x201D: '"'})
    return " ".join(text.replace("\u2026", "...").split())


def _without_examples(source: str) -> str:
    """Python source without its doctest examples (``>>>`` lines and their output)."""
    kept, example = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith(">>>"):
            example = True
        elif not stripped or '"""' in stripped:
            example = False
        if not example:
            kept.append(line)
    return "\n".join(kept)


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def test_docs_build_without_warnings(site: Path) -> None:
    for page in PAGES:
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
    """Every ``SUBZERO_*`` variable the library reads is on the environment page: named in
    its text, or a tuning setting (whose table the page generates from ``SETTINGS``)."""
    page = (ROOT / "docs" / "reference" / "environment.md").read_text()
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found |= set(re.findall(r"\bSUBZERO_[A-Z_]+\b",
                                    _without_examples(path.read_text())))
    assert "SUBZERO_HOME" in found
    settings = {s.variable for s in _settings().values()}
    missing = sorted(v for v in found if f"`{v}`" not in page and v not in settings)
    assert not missing, f"docs/reference/environment.md does not name {missing}"


def test_environment_page_lists_every_setting(site: Path) -> None:
    """The generated settings table shows every setting with its default and its text."""
    settings = _settings()
    assert settings, "no module defines a setting"
    page = _plain(site / "reference" / "environment.html")
    for s in settings.values():
        row = re.search(re.escape(s.variable) + r" (.*?)(?= SUBZERO_|$)", page)
        assert row, f"the environment page does not list {s.variable}"
        assert s.describe_default() in row.group(1), (
            f"{s.variable}: the page does not show its default {s.describe_default()!r}")
        assert " ".join(re.sub(r"`+", "", s.doc).split())[:40] in row.group(1), (
            f"{s.variable}: the page does not say what it decides")


def _operator_classes() -> list[type]:
    from subzero.operator import Operator

    return [c for m in _modules("operators") for name, c in vars(m).items()
            if inspect.isclass(c) and issubclass(c, Operator) and not name.startswith("_")
            and c.__module__ == m.__name__]


def _declared_modes(cls: type) -> frozenset:
    """What ``cls.supported_modes()`` says, asked of an instance made without its
    constructor (abstract methods stubbed)."""
    stubs = {name: (lambda self, *a, **k: None) for name in cls.__abstractmethods__}
    return object.__new__(type("Probe", (cls,), stubs)).supported_modes()


def _init_parameters(obj: object) -> list[str]:
    if inspect.isclass(obj):
        if obj.__init__ is object.__init__:
            return []
        obj = obj.__init__
    return [p.name for p in inspect.signature(obj).parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _sections(page: str, ids: list[str]) -> dict[str, str]:
    """The page's text from each of ``ids`` to the next of them (or the end)."""
    at = sorted((page.index(f'id="{i}"'), i) for i in ids if f'id="{i}"' in page)
    ends = [a for a, _ in at[1:]] + [len(page)]
    return {i: html.unescape(re.sub(r"<[^>]+>", "", page[a:e])) for (a, i), e in zip(at, ends)}


def test_operator_page_documents_every_operator_class(site: Path) -> None:
    """Every operator class of ``operators/`` is on the generated page, as a Python object
    with its constructor's parameters and its lineage modes."""
    classes = _operator_classes()
    assert len(classes) > 15
    page = (site / "reference" / "operators.html").read_text()
    ids = [f"{c.__module__}.{c.__name__}" for c in classes]
    missing = [i for i in ids if f'id="{i}"' not in page]
    assert not missing, f"the operator page does not document {missing}"
    sections = _sections(page, ids)
    for cls, i in zip(classes, ids):
        text = sections[i]
        for name in _init_parameters(cls):
            assert name in text, f"{i}: the operator page does not show parameter {name!r}"
        shown = re.search(r"lineage modes: ([A-Z, ]+)", text)
        assert shown, f"{i}: the operator page does not show its lineage modes"
        assert set(shown.group(1).replace(",", " ").split()) == {
            m.value for m in _declared_modes(cls)}, f"{i}: the page's modes are not its own"


def test_operator_page_documents_every_udf_decorator(site: Path) -> None:
    """Every UDF decorator is on the page with its parameters and the modes it gives."""
    from operators import udf

    page = _text(site / "reference" / "operators.html")
    for name in udf.__all__:
        fn = getattr(udf, name)
        if not inspect.isfunction(fn):
            continue
        assert f"udf.{name}" in page, f"the operator page does not show udf.{name}"
        start = page.index(f"operators.udf.{name}(")
        text = page[start:start + 3000]
        for p in _init_parameters(fn):
            assert p in text, f"udf.{name}: the operator page does not show {p!r}"
    assert "COMP" in page[page.index("operators.udf.cells("):]


def test_layers_page_shows_every_import_contract(site: Path) -> None:
    """The design page on layers lists the import-linter contracts of ``setup.cfg``: every
    contract's name and every module it names."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    contracts = [s for s in cfg.sections() if s.startswith("importlinter:contract:")]
    assert contracts
    page = _plain(site / "design" / "layers.html")
    for section in contracts:
        assert cfg[section]["name"] in page, f"the layers page does not show {section}"
        for key in ("layers", "source_modules", "forbidden_modules", "ancestors"):
            for line in cfg[section].get(key, "").split("\n"):
                for module in filter(None, (m.strip() for m in line.split("|"))):
                    assert module in page, f"the layers page does not name {module}"


def test_performance_page_shows_plots_of_the_results(site: Path) -> None:
    """The plots drawn from the results at build time are on the page, as images."""
    page = (site / "reference" / "performance.html").read_text()
    images = re.findall(r'<img[^>]+src="([^"]+\.png)"', page)
    for stem in ("astronomy", "query", "scale", "replay", "genomics"):
        if (ROOT / "benchmarks" / "results" / f"{stem}.json").is_file():
            assert any(f"/{stem}-" in src for src in images), f"no plot of {stem}.json"
    for src in images:
        assert (site / "reference" / src).resolve().is_file(), f"{src} was not copied"


def test_references_must_name_real_objects() -> None:
    """The build is nitpicky: a Python reference to an undocumented but real object renders
    as code (``subzero_refs``), one to nothing fails the build."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import subzero_refs
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    assert re.search(r"^nitpicky = True$", (ROOT / "docs" / "conf.py").read_text(), re.M)
    assert subzero_refs.real_object("subzero.cells.Box", None, None) is not None
    assert subzero_refs.real_object("Ragged", "subzero.runtime", "TaskContext") is not None
    assert subzero_refs.real_object("in_shapes", "subzero.operator", "Operator") is not None
    assert subzero_refs.real_object("subzero.cells.Boxx", None, None) is None
    assert subzero_refs.real_object("NoSuchName", "subzero.api", "Run") is None
