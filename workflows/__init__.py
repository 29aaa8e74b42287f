"""The workflows SubZero ships, by name, and any workflow a user writes, by target.

A shipped workflow module defines ``NAME``, ``DESCRIPTION`` and ``build(inputs=None,
**params)`` returning a :class:`subzero.workflow.Workflow`; ``inputs`` maps input names to
user files (``--input NAME=PATH``) for modules whose shapes depend on the data.

A user's workflow is named by a *target* (:func:`load_target`): ``package.module[:NAME]``
or ``path/to/file.py[:NAME]``, where ``NAME`` is a :class:`~subzero.workflow.Workflow`
object or a function returning one (default: a function ``build``, else an object
``workflow``). :func:`build` calls the function with the parameters as keyword arguments,
converting the command line's strings by the function's annotations.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

from subzero.codeid import check_module_name, exec_file, locate
from subzero.errors import SubZeroError, WorkflowError
from subzero.workflow import Workflow

MODULES = {
    "example": "workflows.example",
    "astronomy": "workflows.astronomy",
    "genomics": "workflows.genomics",
}


def available() -> dict[str, ModuleType]:
    """Workflow modules that are importable, by name."""
    out = {}
    for name, mod in MODULES.items():
        try:
            out[name] = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
    return out


def get(name: str) -> ModuleType:
    mods = available()
    if name not in mods:
        raise WorkflowError(f"unknown workflow {name!r}; expected one of {', '.join(mods)}")
    return mods[name]


@dataclass
class Target:
    """A workflow named on the command line: the module it is in and the object in it.

    ``name`` is ``NAME`` as given, or None for the default (``build``, else ``workflow``);
    ``shipped`` is the shipped workflow's name, when it is one.
    """

    text: str
    module: ModuleType
    name: str | None
    shipped: str | None = None

    def object(self) -> tuple[str, Any]:
        """The workflow object or function the target names, and its name."""
        names = [self.name] if self.name else ["build", "workflow"]
        for n in names:
            obj = self.module
            for part in n.split("."):
                obj = getattr(obj, part, None)
            if obj is not None:
                return n, obj
        where = self.module.__name__
        if self.name:
            raise WorkflowError(f"{self.text}: module {where} has no {self.name!r}")
        raise WorkflowError(f"{self.text}: module {where} has no function 'build' nor object "
                            f"'workflow'; name the one to run as {self.text}:NAME")

    def reference(self, name: str) -> str:
        """Where the workflow came from, as the manifest records it."""
        f = getattr(self.module, "__file__", None)
        if self.text.split(":")[0].endswith(".py") and f:
            return f"{Path(f).resolve()}:{name}"
        return f"{self.module.__name__}:{name}"


def load_target(text: str) -> Target:
    """Import the module of ``text``: a shipped workflow's name, ``package.module[:NAME]``
    or ``path/to/file.py[:NAME]``; a one-line error when it cannot be.

    >>> t = load_target("example")
    >>> t.shipped, t.module.__name__, t.object()[0]
    ('example', 'workflows.example', 'build')
    """
    if not isinstance(text, str) or not text.strip():
        raise WorkflowError(f"expected a workflow: a name ({', '.join(MODULES)}), a module "
                            f"(package.module[:NAME]) or a file (path/to/file.py[:NAME]). "
                            f"Got {text!r}.")
    if text in MODULES:
        return Target(text, get(text), "build", shipped=text)
    where, _, name = text.rpartition(":") if _has_name(text) else (text, "", "")
    if name and not all(p.isidentifier() for p in name.split(".")):
        raise WorkflowError(f"{text}: {name!r} is not a Python name")
    if where in MODULES:
        return Target(text, get(where), name or None, shipped=where)
    if where.endswith(".py") or os.sep in where or "/" in where or Path(where).is_file():
        return Target(text, _import_file(where, text), name or None)
    if check_module_name(where) is None:
        known = ", ".join(MODULES)
        raise WorkflowError(f"unknown workflow {text!r}; expected one of {known}, a module "
                            "(package.module[:NAME]) or a file (path/to/file.py[:NAME])")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as 'python -m' does: the user's own packages
    try:
        module = importlib.import_module(where)
    except ModuleNotFoundError as e:
        if e.name and where.startswith(e.name):
            raise WorkflowError(f"unknown workflow {text!r}: no module named {e.name!r} "
                                f"(shipped: {', '.join(MODULES)}; a file: "
                                "path/to/file.py)") from None
        raise WorkflowError(f"{text}: importing module {where} failed: {e}") from None
    except SubZeroError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module, reported in one line
        raise WorkflowError(f"{text}: importing module {where} failed: "
                            f"{type(e).__name__}: {_first(e)}") from None
    return Target(text, module, name or None)


def _has_name(text: str) -> bool:
    head, sep, tail = text.rpartition(":")
    return bool(sep) and bool(head) and os.sep not in tail and "/" not in tail


def _first(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _import_file(where: str, text: str) -> ModuleType:
    """A workflow file, imported as a module named after it (its folder put on the import
    path, as ``python file.py`` does, so that it imports the modules beside it)."""
    path = Path(where).expanduser()
    if not path.is_file():
        raise WorkflowError(f"{text}: no such file {where}")
    if path.suffix != ".py":
        raise WorkflowError(f"{text}: {where} is not a Python file (.py)")
    path = path.resolve()
    name = path.stem
    if not name.isidentifier():
        raise WorkflowError(f"{text}: {path.name} cannot be imported as a module (its name must "
                            "be a Python name: letters, digits and '_')")
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() == path:
            return loaded
        raise WorkflowError(f"{text}: a module named {name!r} is already imported from "
                            f"{getattr(loaded, '__file__', 'elsewhere')}; rename {path.name}")
    other = locate(name)
    if name in sys.stdlib_module_names or (other is not None and other != path):
        raise WorkflowError(f"{text}: {path.name} would be imported as module {name!r}, the "
                            f"name of another module ({other or 'the standard library'}); "
                            "rename the file")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        return exec_file(name, path)
    except SubZeroError:
        raise
    except SyntaxError as e:
        raise WorkflowError(f"{text}: {where} is not valid Python (line {e.lineno}: "
                            f"{e.msg})") from None
    except Exception as e:  # noqa: BLE001 - the user's file, reported in one line
        raise WorkflowError(f"{text}: running {where} failed: {type(e).__name__}: "
                            f"{_first(e)}") from None


def build(name: str, inputs: Mapping[str, str] | None = None, **params: Any) -> Workflow:
    """Build the workflow target ``name`` (:func:`load_target`) with its parameters
    (strings from the command line are converted by the function's annotations; a
    shipped workflow's ``build`` parses its own)."""
    target = load_target(name)
    attr, obj = target.object()
    if isinstance(obj, Workflow):
        if params:
            raise WorkflowError(f"{name}: {attr} is a workflow object, which takes no --param "
                                f"(given: {', '.join(sorted(params))})")
        wf = obj
    elif callable(obj):
        kwargs = _arguments(name, attr, obj, dict(params), dict(inputs or {}))
        try:
            wf = obj(**kwargs)
        except SubZeroError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's function, reported in one line
            raise WorkflowError(f"{name}: {attr}() raised {type(e).__name__}: "
                                f"{_first(e)}") from None
        if not isinstance(wf, Workflow):
            raise WorkflowError(f"{name}: {attr}() returned a {type(wf).__name__}, not a "
                                "subzero.Workflow")
    else:
        raise WorkflowError(f"{name}: {attr} is a {type(obj).__name__}, neither a workflow nor "
                            "a function returning one")
    wf.source = {"target": target.reference(attr),
                 "params": {k: str(v) for k, v in params.items()}}
    return wf


def _arguments(text: str, attr: str, fn: Callable[..., Any], params: dict[str, Any],
               inputs: dict[str, str]) -> dict[str, Any]:
    """The keyword arguments to call workflow function ``fn`` with: ``params`` converted by
    its annotations (unknown names refused, naming the accepted ones), and ``inputs``
    when it takes them."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {**params, **({"inputs": inputs} if inputs else {})}
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: no conversion
        hints = {}
    accepted = [p.name for p in sig.parameters.values() if p.name != "inputs" and p.kind in (
        p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    open_ended = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    out: dict[str, Any] = {}
    for key, value in params.items():
        if key not in accepted and not open_ended:
            raise WorkflowError(f"{text}: {attr}() has no parameter {key!r} (accepted: "
                                f"{', '.join(accepted) or 'none'})")
        out[key] = convert_param(key, value, hints.get(key, Any)) \
            if isinstance(value, str) else value
    if "inputs" in sig.parameters or open_ended:
        out["inputs"] = inputs
    missing = [p.name for p in sig.parameters.values() if p.default is p.empty and p.kind in (
        p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in out]
    if missing:
        raise WorkflowError(f"{text}: {attr}() needs --param {missing[0]}=VALUE")
    return out


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def convert_param(key: str, value: str, annotation: Any) -> Any:
    """A ``--param`` string as the type ``annotation`` names (int, float, bool, str, a
    path, a list or tuple of those, or an optional one); others are passed as text.

    >>> convert_param("n", "3", int), convert_param("on", "yes", bool)
    (3, True)
    >>> convert_param("sizes", "3,4", tuple[int, ...])
    (3, 4)
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if value.lower() in ("none", "") and len(kinds) < len(args):
            return None
        if len(kinds) == 1:
            return convert_param(key, value, kinds[0])
        return value
    if origin in (list, tuple) and args:
        inner = args[0]
        parts = [v.strip() for v in value.replace("x", ",").split(",")] if inner in (
            int, float) else [v.strip() for v in value.split(",")]
        items = [convert_param(key, v, inner) for v in parts if v]
        return tuple(items) if origin is tuple else items
    try:
        if annotation is bool:
            if value.lower() in _TRUE + _FALSE:
                return value.lower() in _TRUE
            raise ValueError
        if annotation is int:
            return int(value)
        if annotation is float:
            return float(value)
        if annotation in (Path, os.PathLike):
            return Path(value)
    except ValueError:
        kind = {bool: "true or false", int: "an integer", float: "a number"}[annotation]
        raise WorkflowError(f"--param {key}={value!r}: expected {kind}") from None
    return value


def summary(name: str, run: Any) -> list[str]:
    """What a scientist checks first in a finished run of workflow ``name`` (the module's
    optional ``summary(run)``: e.g. the genomics model's training accuracy); one line
    each, empty when the module has none."""
    if name not in MODULES:
        return []
    fn = getattr(get(name), "summary", None)
    return list(fn(run)) if fn is not None else []
