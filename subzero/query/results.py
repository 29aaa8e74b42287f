"""What a query answers: the frontier it reached in the target array, its steps, and the
global dependencies it listed instead of following (local scope)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from subzero.cells import to_coords
from subzero.errors import QueryError
from subzero.frontier import Frontier

MAX_JSON_CELLS = 10_000
#: the query scopes: ``local`` lists whole-input steps as global dependencies instead of
#: following them (the default), ``all`` follows every step
SCOPES = ("local", "all")


def parse_scope(scope: Any, what: str = "scope") -> str:
    """A query scope (one of :data:`SCOPES`), or an error naming the value.

    >>> parse_scope("all")
    'all'
    >>> parse_scope("bogus")
    Traceback (most recent call last):
    ...
    subzero.errors.QueryError: scope 'bogus': expected local or all
    """
    if scope not in SCOPES:
        raise QueryError(f"{what} {str(scope)[:40]!r}: expected local or all")
    return scope


@dataclass
class Step:
    """What one query step did: through which operator input, by which method."""

    operator: str
    input: int
    method: str
    in_count: int
    out_count: int
    elapsed_s: float
    note: str = ""
    #: the step ran the operator's code, which changed since the run (allowed by the
    #: caller: ``allow_changed_code``); its answer may differ from the run's lineage
    changed_code: bool = False
    #: the step goes through a whole-input dependency (:meth:`Operator.whole_input`),
    #: taken because the query asked for it (an explicit path, or scope ``all``)
    is_global: bool = False

    def to_json(self) -> dict[str, Any]:
        d = {"operator": self.operator, "input": self.input, "method": self.method,
             "in_count": self.in_count, "out_count": self.out_count, "elapsed_s": self.elapsed_s,
             "global": self.is_global}
        if self.note:
            d["note"] = self.note
        if self.changed_code:
            d["changed_code"] = True
        return d


@dataclass(frozen=True)
class GlobalDependency:
    """A step a query in local scope did not take: through input ``input`` of
    ``operator``, every output cell depends on every cell of that input (a global mean, a
    model fitted on the whole input), so taking it would reach the whole of ``array``.

    ``array`` is the array the step would have reached (the operator's input backward,
    its output forward) and ``cells`` that array's cell count; ``kind`` is the operator's
    class name and ``description`` the first sentence of its class docstring.
    """

    operator: str
    input: int
    array: str
    cells: int
    kind: str = ""
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"operator": self.operator, "input": self.input, "array": self.array,
                "cells": self.cells, "class": self.kind, "description": self.description}


@dataclass
class LineageResult:
    """A query's answer: the :class:`~subzero.frontier.Frontier` reached in the target
    array (its cells as a mask, coordinates or linear indices, in whichever form is asked
    for), and how it was reached."""

    run: str
    direction: str
    array: str
    frontier: Frontier
    steps: list[Step] = field(default_factory=list)
    elapsed_s: float = 0.0
    start: str = ""
    #: the frontier reached in every array along the way (start and target included)
    along: dict[str, Frontier] = field(default_factory=dict)
    #: ``local`` (whole-input steps listed in :attr:`global_deps`, not taken) or ``all``
    scope: str = "local"
    #: the whole-input steps the query did not take (local scope), in walk order
    global_deps: list[GlobalDependency] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.frontier.shape

    @property
    def changed_code(self) -> list[str]:
        """The operators whose code changed since the run and answered a step of this
        query anyway (``allow_changed_code``): the answer is not the run's own lineage."""
        return list(dict.fromkeys(s.operator for s in self.steps if s.changed_code))

    @property
    def mask(self) -> np.ndarray:
        """The result as a bool array of the target's shape."""
        return self.frontier.mask

    @property
    def count(self) -> int:
        return self.frontier.n

    @property
    def linear(self) -> np.ndarray:
        """The result cells as sorted uint64 linear indices."""
        return self.frontier.lin

    @property
    def coords(self) -> np.ndarray:
        """The result cells as an ``(n, ndim)`` int64 array, C order."""
        return to_coords(self.frontier.lin, self.shape)

    def to_json(self, max_cells: int = MAX_JSON_CELLS) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "run": self.run, "direction": self.direction, "array": self.array,
            "shape": list(self.shape), "count": self.count, "elapsed_s": self.elapsed_s,
            "steps": [s.to_json() for s in self.steps], "scope": self.scope,
            "global": [g.to_json() for g in self.global_deps],
        }
        if self.changed_code:
            doc["changed_code"] = self.changed_code
        if self.count <= max_cells:
            doc["cells"] = self.coords.tolist()
        return doc
