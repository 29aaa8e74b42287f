"""The cells a workflow's named query starts from, chosen once per run and kept in the
catalog (``named_cells``): a later query, even a one-shot CLI process, reads no array to
choose them again.

A named query's ``cells(run)`` receives the run: a :class:`subzero.api.Run`, or a
:class:`~subzero.engine.runs.LoadedRun` (both have ``workflow``, ``array(name)`` and the
arrays' paths).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np

from subzero.engine.catalog import Catalog
from subzero.errors import SubZeroError
from subzero.workflow import NamedQuery, Workflow


def named_query(wf: Workflow, name: str) -> NamedQuery:
    """Workflow ``wf``'s named query ``name``, or an error listing the ones it has."""
    q = wf.queries.get(name)
    if q is None:
        known = ", ".join(wf.queries) or "none"
        raise SubZeroError(f"workflow {wf.name!r} has no named query {name!r} "
                           f"(named queries: {known})")
    return q


def start_cells(run: Any, rid: str, name: str, catalog: Catalog) -> Any:
    """The cells named query ``name`` of run ``rid`` starts from: remembered ones, else
    chosen now (and remembered when they were picked from arrays)."""
    q = named_query(run.workflow, name)
    cached = catalog.named_cells(rid, name)
    if cached is not None:
        return cached
    cells = q.cells(run)
    if isinstance(cells, np.ndarray):
        remember(catalog, rid, {name: cells})
    return cells


def choose_all(run: Any, rid: str, catalog: Catalog) -> None:
    """Choose and remember the start cells of every named query that picks them from the
    run's arrays; a query with nothing to trace is left to say so when it is asked."""
    chosen = {}
    for name, q in run.workflow.queries.items():
        if catalog.named_cells(rid, name) is not None:
            continue
        try:
            cells = q.cells(run)
        except SubZeroError:
            continue
        if isinstance(cells, np.ndarray):
            chosen[name] = cells
    remember(catalog, rid, chosen)


def remember(catalog: Catalog, rid: str, cells: dict[str, np.ndarray]) -> None:
    """Cache start cells; a home this process cannot write (read-only, a busy catalog)
    just goes without the cache."""
    try:
        catalog.set_named_cells(rid, cells)
    except (sqlite3.Error, OSError):
        pass
