"""A Sphinx directive that documents the operator library from its code.

``{subzero-operators}`` walks every module of :mod:`operators` and renders, per operator
class (every public subclass of :class:`subzero.operator.Operator` defined there) and per
UDF decorator of :mod:`operators.udf`:

- its constructor's signature (parameters and defaults; the types are in the text);
- its lineage: the docstring's first paragraph;
- the lineage modes it supports, from its :meth:`~subzero.operator.Operator.supported_modes`
  (a decorator's: those of the operator class it makes), and how it splits into tasks;
- its parameters, from the docstring's numpydoc ``Parameters`` section, else from the
  signature.

Each class is a ``py:class`` object (``operators.elementwise.Unary``), so any page can link
to it. The page is made at build time, so it cannot drift from the code.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType
from typing import Any, Callable, Iterator

from docutils import nodes
from docutils.statemachine import StringList
from numpydoc.docscrape import NumpyDocString
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

#: the package walked, and the module whose public functions are the UDF decorators
PACKAGE = "operators"
UDF_MODULE = "operators.udf"
#: an RST role in a docstring (``:class:`~a.B```), rewritten to MyST's ``{py:class}`~a.B```
ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|exc|obj):`([^`]+)`")


def modules(package: str = PACKAGE) -> list[ModuleType]:
    """``package`` and every module in it, imported, in name order."""
    root = importlib.import_module(package)
    found = [root]
    for info in sorted(pkgutil.walk_packages(root.__path__, package + "."),
                       key=lambda i: i.name):
        found.append(importlib.import_module(info.name))
    return found


def operator_classes(package: str = PACKAGE) -> list[type]:
    """Every public operator class defined in ``package``'s modules, in module and source
    order (the classes a test expects on the page)."""
    from subzero.operator import Operator

    out: list[type] = []
    for module in modules(package):
        here = [c for name, c in vars(module).items()
                if inspect.isclass(c) and issubclass(c, Operator) and not name.startswith("_")
                and c.__module__ == module.__name__]
        here.sort(key=lambda c: inspect.getsourcelines(c)[1])
        out += here
    return out


def udf_decorators() -> list[Callable[..., Any]]:
    """The UDF decorators: the public functions of :mod:`operators.udf`, in source order."""
    udf = importlib.import_module(UDF_MODULE)
    names = getattr(udf, "__all__", [n for n in vars(udf) if not n.startswith("_")])
    fns = [getattr(udf, n) for n in names if inspect.isfunction(getattr(udf, n))]
    return sorted(fns, key=lambda f: inspect.getsourcelines(f)[1])


# -- what the code says ---------------------------------------------------------------------


def _probe(cls: type) -> Any:
    """An instance of ``cls`` made without its constructor (abstract methods stubbed), to
    ask what it declares; a class's modes do not depend on its parameters."""
    abstract = getattr(cls, "__abstractmethods__", frozenset())
    if abstract:
        cls = type(f"_Probe{cls.__name__}", (cls,),
                   {name: (lambda self, *a, **k: None) for name in abstract})
    return object.__new__(cls)


def supported_modes(cls: type) -> list[str]:
    """The modes ``cls`` declares, in the order of :class:`subzero.modes.Mode`."""
    from subzero.modes import Mode

    got = set(_probe(cls).supported_modes())
    return [m.value for m in Mode if m in got]


def parallelism(cls: type) -> str:
    """How ``cls`` splits into tasks: its declared :class:`~subzero.operator.Parallelism`,
    or what its parameters decide."""
    from subzero.operator import Parallelism

    declared = inspect.getattr_static(cls, "parallelism", None)
    if isinstance(declared, Parallelism):
        return str(declared)
    return "set by its parameters"


def decorator_class(fn: Callable[..., Any]) -> type:
    """The operator class a UDF decorator makes, from a probe function (one with the
    ``lineage`` keyword when the decorator insists on it)."""
    from operators.udf import UDFError

    def plain(x):  # noqa: ANN001, ANN202 - a probe, never run
        return x

    def recording(x, *, lineage=None):  # noqa: ANN001, ANN202
        return x

    params = list(inspect.signature(fn).parameters.values())
    for body in (plain, recording):
        try:
            if params and params[0].name == "fn":  # used bare: @udf.elementwise
                return fn(body)
            required = [0 for p in params if p.default is inspect.Parameter.empty]
            return fn(*required)(body)
        except UDFError:
            continue
    raise RuntimeError(f"cannot tell which operator class {fn.__name__} makes")


def _signature(obj: Any) -> inspect.Signature:
    """A function's signature, or a class's constructor's (``self`` left out; a class that
    defines no constructor takes nothing)."""
    if inspect.isclass(obj):
        if obj.__init__ is object.__init__:
            return inspect.Signature()
        sig = inspect.signature(obj.__init__)
        return sig.replace(parameters=list(sig.parameters.values())[1:])
    return inspect.signature(obj)


def signature(obj: Any) -> str:
    """``obj``'s parameters and defaults (no annotations), as Python spells a call."""
    sig = _signature(obj)
    return str(sig.replace(parameters=[p.replace(annotation=inspect.Parameter.empty)
                                       for p in sig.parameters.values()],
                           return_annotation=inspect.Signature.empty))


def constructor_parameters(obj: Any) -> list[inspect.Parameter]:
    """The parameters of a class's constructor or a function (``*args``/``**kwargs`` left
    out)."""
    return [p for p in _signature(obj).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def first_paragraph(obj: Any) -> str:
    """The first paragraph of ``obj``'s own docstring, on one line; a paragraph that ends
    with a colon keeps the list after it (Markdown, one item a line)."""
    parts = (inspect.getdoc(obj) or "").strip().split("\n\n")
    text = " ".join(parts[0].split())
    if text.endswith(":") and len(parts) > 1:
        items = re.split(r"\n(?=- )", parts[1].strip())
        text += "\n\n" + "\n".join(" ".join(item.split()) for item in items)
    return text


def documented_parameters(obj: Any) -> list[tuple[str, str]]:
    """``(name, text)`` of each entry of the docstring's numpydoc ``Parameters`` section
    (``name : description`` as this project writes them, or ``name : type`` then the
    description)."""
    doc = inspect.getdoc(obj) or ""
    if "Parameters\n---" not in doc:
        return []
    out = []
    for p in NumpyDocString(doc)["Parameters"]:
        desc = " ".join(" ".join(p.desc).split())
        kind = " ".join(p.type.split())
        if kind and desc and " " not in kind:
            text = f"({kind}) {desc}"
        else:
            text = " ".join(t for t in (kind, desc) if t)
        out.append((p.name, text))
    return out


def myst(text: str, cls: type | None = None) -> str:
    """Docstring text (RST roles) as MyST Markdown. In a class's text, an unqualified
    method name (``:meth:`map_b```) is qualified with the class that defines it along the
    method resolution order, where Python would find it."""
    def role(m: re.Match[str]) -> str:
        kind, target = m.group(1), m.group(2)
        if kind in ("meth", "attr") and cls is not None and "." not in target.lstrip("~"):
            name = target.lstrip("~")
            owner = next((k for k in cls.__mro__ if name in vars(k)), None)
            if owner is not None and owner is not cls:
                target = f"~{owner.__module__}.{owner.__qualname__}.{name}"
        return f"{{py:{kind}}}`{target}`"

    return ROLE.sub(role, text)


# -- the page ---------------------------------------------------------------------------------


def _default(p: inspect.Parameter) -> str:
    return "required" if p.default is inspect.Parameter.empty else f"default `{p.default!r}`"


def _parameter_lines(obj: Any, params: list[inspect.Parameter]) -> list[str]:
    documented = dict(documented_parameters(obj))
    lines: list[str] = []
    for p in params:
        # a numpydoc entry may document several names at once (``shape, dtype : ...``)
        text = documented.get(p.name) or next(
            (t for names, t in documented.items()
             if p.name in [n.strip() for n in names.split(",")]), "")
        lines.append(f"- `{p.name}` ({_default(p)})" + (f": {myst(text)}" if text else ""))
    return lines or ["- none"]


def _modes_line(modes: list[str]) -> str:
    return "- lineage modes: " + ", ".join(f"`{m}`" for m in modes)


def methods_named(cls: type) -> list[str]:
    """The methods a subclass implements (abstract) or that the class's first paragraph
    names (``:meth:`compute```), in that order: the page documents them under the class,
    so the names link."""
    named = list(sorted(getattr(cls, "__abstractmethods__", ())))
    for role, target in ROLE.findall(first_paragraph(cls)):
        name = target.lstrip("~").rsplit(".", 1)[-1]
        if role == "meth" and name not in named and callable(getattr(cls, name, None)):
            named.append(name)
    return named


def method_markdown(cls: type, name: str) -> list[str]:
    """One method as a nested ``py:method`` object: its signature and first paragraph."""
    fn = getattr(cls, name)
    params = list(_signature(fn).parameters.values())[1:]  # without self
    sig = inspect.Signature([p.replace(annotation=inspect.Parameter.empty) for p in params])
    return [f"```{{py:method}} {name}{sig}", "",
            myst(first_paragraph(fn), cls) or "(abstract)",
            "```", ""]


def class_markdown(cls: type, level: int = 3) -> list[str]:
    """One operator class as MyST Markdown: a ``py:class`` object with its lineage, modes,
    parallelism and parameters."""
    n_inputs = getattr(cls, "n_inputs", None)
    lines = [f"{'#' * level} {cls.__name__}", "",
             f"````{{py:class}} {cls.__name__}{signature(cls)}",
             f":module: {cls.__module__}", ""]
    lines += [myst(first_paragraph(cls), cls) or "(no description)", ""]
    lines += [_modes_line(supported_modes(cls)),
              f"- parallelism: {parallelism(cls)}",
              f"- inputs: {'any number' if n_inputs is None else n_inputs}",
              f"- kind: `{getattr(cls, 'kind', 'builtin')}`"]
    if inspect.isabstract(cls):
        lines.append("- a base class: subclass it (abstract: "
                     + ", ".join(f"`{m}`" for m in sorted(cls.__abstractmethods__)) + ")")
    lines += ["", "Parameters:", ""]
    lines += _parameter_lines(cls, constructor_parameters(cls))
    lines.append("")
    for name in methods_named(cls):
        lines += method_markdown(cls, name)
    lines += ["````", ""]
    return lines


def decorator_markdown(fn: Callable[..., Any]) -> list[str]:
    """One UDF decorator as MyST Markdown, linking to its API entry."""
    made = decorator_class(fn)
    lines = [f"### udf.{fn.__name__}", "",
             f"`{fn.__module__}.{fn.__name__}{signature(fn)}`, "
             f"{{py:func}}`in the API <{fn.__module__}.{fn.__name__}>`", "",
             myst(first_paragraph(fn)), "",
             _modes_line(supported_modes(made)),
             f"- parallelism: {parallelism(made)}", "", "Parameters:", ""]
    lines += _parameter_lines(fn, constructor_parameters(fn))
    return lines + [""]


def page_markdown() -> list[str]:
    """The whole generated part of the operator page."""
    classes = operator_classes()
    bases = [c for c in classes if c.__module__ == f"{PACKAGE}.base" or inspect.isabstract(c)]
    lines = ["```{py:currentmodule} operators.base", "```", "", "## Bases", "",
             "Subclass these to write an operator by hand; each derives exact mapping "
             "functions and tracing lineage from its shape.", ""]
    for cls in bases:
        lines += class_markdown(cls)
    lines += ["## Built-in operators", ""]
    by_module: dict[str, list[type]] = {}
    for cls in classes:
        if cls not in bases:
            by_module.setdefault(cls.__module__, []).append(cls)
    for module, members in by_module.items():
        lines += [f"### `{module}`", "", f"```{{py:currentmodule}} {module}", "```", "",
                  myst(first_paragraph(
            importlib.import_module(module))), ""]
        for cls in members:
            lines += class_markdown(cls, level=4)
    lines += ["## UDF decorators", "", f"```{{py:currentmodule}} {UDF_MODULE}", "```", "",
              "Each decorator turns a numpy function into an operator class of the lineage "
              f"shape it names (module `{UDF_MODULE}`); the modes are those of the class it "
              "makes. The function's parameters with defaults become the operator's.", ""]
    for fn in udf_decorators():
        lines += decorator_markdown(fn)
    return lines


def _source_files() -> Iterator[str]:
    for module in modules():
        if getattr(module, "__file__", None):
            yield module.__file__


class SubzeroOperators(SphinxDirective):
    """``{subzero-operators}``: the operator library, generated from :mod:`operators`."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        for path in [*_source_files(), __file__]:
            self.env.note_dependency(path)
        container = nodes.section()
        container.document = self.state.document
        self.state.nested_parse(StringList(page_markdown(), source="operators"), 0,
                                container, match_titles=True)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("subzero-operators", SubzeroOperators)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
