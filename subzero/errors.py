"""Errors a user can cause, each with a one-line message naming the bad value.

Everything a scientist can get wrong (a bad cell, an unknown array, a malformed workflow)
raises a subclass of :class:`SubZeroError`. The CLI prints its message on one line and exits
with status 2; anything else is a bug in SubZero and is reported as such.
"""

from __future__ import annotations


class SubZeroError(Exception):
    """Base class of every error caused by bad input; its message is one line."""


class WorkflowError(SubZeroError):
    """A workflow specification is invalid (unknown input, cycle, duplicate name...)."""


class ShapeError(WorkflowError):
    """Input shapes an operator cannot combine."""


class ModeError(WorkflowError):
    """A lineage mode or strategy an operator does not support."""


class CellError(SubZeroError):
    """Cells outside an array, or in a form SubZero does not understand."""


class StoreError(SubZeroError):
    """An array or run that is missing, or would be overwritten."""


class DamagedError(StoreError):
    """A stored file (a lineage shard, an array chunk) that is missing, truncated or does not
    match its checksum: named, with ``subzero verify`` suggested."""


class CatalogError(SubZeroError):
    """The catalog does not hold what was asked for."""


class DamagedCatalogError(CatalogError):
    """The catalog's file is damaged (SQLite finds it malformed): named, with ``subzero
    verify`` suggested."""


class QueryError(SubZeroError):
    """A lineage query that cannot be answered as asked."""


class ReplayError(SubZeroError):
    """A what-if replay asked of a run, cells or values it cannot use."""


class SparkError(SubZeroError):
    """Spark could not be started (Java missing or too old, bad master URL)."""


class ShipEnvError(SubZeroError):
    """The driver's Python environment cannot be packed for the executors (not a
    virtualenv, or one venv-pack refuses)."""


class CodeError(SubZeroError):
    """Code a run names that cannot be used: a module outside its recorded distribution,
    inside the home, changed since the run, or that fails to import; or an operator or
    parameter that cannot be recorded as data."""


class NoSpaceError(SubZeroError):
    """The file system refused a write: no space left (ENOSPC), over quota (EDQUOT) or
    read-only (EROFS). Not the user's input, so the command exits 1, in one line."""

    exit_code = 1
