"""A finished run as queries and re-execution see it: its catalog rows and bound workflow."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from subzero.engine import layout
from subzero.engine.arrays import read_array
from subzero.engine.catalog import Catalog
from subzero.errors import CatalogError, DamagedError, StoreError, WorkflowError
from subzero.modes import Strategy
from subzero.operator import Operator
from subzero.workflow import Workflow


@dataclass
class LoadedRun:
    """A finished run as the query side sees it: catalog rows plus the bound workflow."""

    home: Path
    id: str
    info: dict[str, Any]
    workflow: Workflow
    arrays: dict[str, dict[str, Any]]
    operators: dict[str, dict[str, Any]]
    #: how the run was asked for (``latest``, ``latest:astronomy``, ``r3``)
    requested: str | None = None
    #: what readers worked out once about this run's arrays, which never change once the
    #: run is complete (a replay's: each array's directory, links resolved, and its
    #: :class:`~subzero.engine.arrays.ChunkFiles`), by (kind, array)
    memo: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False, compare=False)

    def array_path(self, name: str) -> Path:
        if name not in self.arrays:
            # asked for as latest: say which workflow that is and which latest:WORKFLOW has it
            cat = Catalog(layout.catalog_path(self.home))
            try:
                msg = cat.missing_array(self.requested or self.id, self.info, name, self.arrays)
            finally:
                cat.close()
            raise StoreError(msg)
        return layout.array_path(self.home, self.id, name)

    def array(self, name: str) -> np.ndarray:
        """The whole array ``name`` of this run, as numpy."""
        return read_array(self.array_path(name))

    def op(self, name: str) -> Operator:
        if name not in self.workflow.ops:
            raise WorkflowError(
                f"run {self.id} has no operator {name!r} "
                f"(operators: {', '.join(self.workflow.order)})"
            )
        return self.workflow.ops[name]

    def strategies(self, name: str) -> list[Strategy]:
        return [Strategy.parse(s) for s in self.operators[name]["strategies"]]

    def chunks(self, name: str) -> tuple[int, ...]:
        return tuple(self.arrays[name]["chunks"])


def load_workflow(home: Path, rid: str) -> Workflow:
    """Run ``rid``'s bound workflow (``workflow.pkl``), or a one-line error naming it when
    it is missing or damaged."""
    path = layout.workflow_path(home, rid)
    try:
        with open(path, "rb") as f:
            wf = pickle.load(f)
    except FileNotFoundError:
        raise StoreError(f"run {rid} has lost its workflow file {path}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DamagedError(f"run {rid}'s workflow file {path} cannot be read ({msg}); run "
                           f"'subzero verify {rid}'") from None
    if not isinstance(wf, Workflow):
        raise DamagedError(f"run {rid}'s workflow file {path} holds a {type(wf).__name__}, "
                           f"not a workflow; run 'subzero verify {rid}'")
    return wf


def load_run(home: str | os.PathLike | None, rid: str, catalog: Catalog | None = None,
             require_complete: bool = True, workflow: Workflow | None = None) -> LoadedRun:
    """Run ``rid`` of ``home`` as queries see it (``workflow``: its bound workflow, when
    the caller holds an equal one: a derived run's is a copy of its parent's)."""
    home = layout.resolve_home(home)
    if catalog is None and not layout.catalog_path(home).exists() and (
            home.is_dir() or not home.exists()):
        # a reading command never makes a home where there was none
        raise CatalogError(f"no SubZero home at {home} (no {layout.CATALOG}; run a workflow "
                           "first, or pass --home)")
    cat = catalog or Catalog(layout.catalog_path(home))
    requested = rid
    try:
        info = cat.run(rid)
        rid = info["id"]
        if require_complete and info["status"] != "complete":
            raise StoreError(
                f"run {rid} is {info['status']}"
                + (f" ({info['error']})" if info.get("error") else "")
                + "; only complete runs can be queried"
            )
        wf = load_workflow(home, rid) if workflow is None else workflow
        wf.validate()
        return LoadedRun(home, rid, info, wf, cat.arrays(rid), cat.operators(rid), requested)
    finally:
        if catalog is None:
            cat.close()
