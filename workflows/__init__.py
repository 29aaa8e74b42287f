"""The workflows SubZero ships, by name.

A workflow module defines ``NAME``, ``DESCRIPTION`` and ``build(inputs=None, **params)``
returning a :class:`subzero.workflow.Workflow`; ``inputs`` maps input names to user files
(``--input NAME=PATH``) for modules whose shapes depend on the data.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Mapping

from subzero.errors import WorkflowError

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


def build(name: str, inputs: Mapping[str, str] | None = None, **params: Any):
    """Build workflow ``name`` with its parameters (strings from the CLI are parsed by the
    module's ``build``)."""
    mod = get(name)
    try:
        return mod.build(inputs=dict(inputs or {}), **params)
    except TypeError as e:
        if "unexpected keyword" in str(e):
            bad = str(e).split("'")[1] if "'" in str(e) else str(e)
            raise WorkflowError(f"workflow {name!r} has no parameter {bad!r}") from None
        raise


def summary(name: str, run: Any) -> list[str]:
    """What a scientist checks first in a finished run of workflow ``name`` (the module's
    optional ``summary(run)``: e.g. the genomics model's training accuracy); one line
    each, empty when the module has none."""
    fn = getattr(get(name), "summary", None)
    return list(fn(run)) if fn is not None else []
