"""What a query answers: the frontier it reached in the target array, and its steps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from subzero.cells import to_coords
from subzero.frontier import Frontier

MAX_JSON_CELLS = 10_000


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

    def to_json(self) -> dict[str, Any]:
        d = {"operator": self.operator, "input": self.input, "method": self.method,
             "in_count": self.in_count, "out_count": self.out_count, "elapsed_s": self.elapsed_s}
        if self.note:
            d["note"] = self.note
        if self.changed_code:
            d["changed_code"] = True
        return d


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
            "steps": [s.to_json() for s in self.steps],
        }
        if self.changed_code:
            doc["changed_code"] = self.changed_code
        if self.count <= max_cells:
            doc["cells"] = self.coords.tolist()
        return doc
