"""How a Python cross-reference to an undocumented name is treated: the build is
``nitpicky`` (every reference must resolve), and this extension decides what "resolve"
means for names the reference does not document.

The API reference is curated (``reference/api.md``, ``reference/operators.md``):
internal modules (the engine, the query executor, cells and frontiers...) are not
documented, yet the docstrings of documented names mention them, as they should. A
reference that Sphinx cannot link is looked up the way Python would find it: as a
dotted path, or from the module (and class) of the docstring that holds it, through that
module's imports, then through its packages' (``Box`` in :mod:`subzero.api` is
``subzero.Box``). When it names a real object, the reference renders as code, without a
link; when it names nothing (a typo, a name removed or renamed), the build warns, and
``make docs`` fails.

>>> real_object("subzero.cells.Box", None, None) is not None
True
>>> real_object("Box", "subzero.runtime", "TaskContext") is not None
True
>>> real_object("Box", "subzero.api", "Run") is not None
True
>>> real_object("subzero.cells.NoSuchThing", None, None) is None
True
"""

from __future__ import annotations

import importlib
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

_MISSING = object()


def _dotted(path: str) -> Any:
    """The object at dotted ``path`` (a module, then attributes), or ``_MISSING``."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception:  # noqa: BLE001 - a module that fails to import names nothing here
            return _MISSING
        for attr in parts[cut:]:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                return _MISSING
        return obj
    return _MISSING


def real_object(target: str, module: str | None, klass: str | None) -> Any:
    """The object a reference ``target`` names, seen from a docstring of ``module`` (and
    ``klass``), or None. A class attribute declared only by its annotation counts."""
    target = target.lstrip("~.").removesuffix("()")
    candidates = [target]
    if module:
        if klass:
            candidates.append(f"{module}.{klass}.{target}")
        parts = module.split(".")
        candidates += [".".join(parts[:k] + [target]) for k in range(len(parts), 0, -1)]
    for path in candidates:
        obj = _dotted(path)
        if obj is not _MISSING:
            return obj
        owner_path, _, name = path.rpartition(".")
        owner = _dotted(owner_path) if owner_path else _MISSING
        if isinstance(owner, type) and any(name in getattr(k, "__annotations__", {})
                                           for k in owner.__mro__):
            return name
    return None


def code_for_real_objects(app: Sphinx, env: BuildEnvironment, node: Any,
                          contnode: nodes.Element) -> nodes.Element | None:
    """``missing-reference``: a Python reference to a real but undocumented object renders
    as its text; anything else is left to warn."""
    if node.get("refdomain") != "py":
        return None
    if real_object(node["reftarget"], node.get("py:module"), node.get("py:class")) is None:
        return None
    return contnode


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("missing-reference", code_for_real_objects)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
