"""What a replay did: the derived run, and per array what it recomputed and what changed
(the CLI's ``--json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ArrayReplay", "ReplayResult"]


@dataclass
class ArrayReplay:
    """What the replay did to one array.

    Parameters
    ----------
    name, shape
        The array.
    reached
        Cells the forward lineage of the changes reached.
    changed
        Cells whose value differs from the parent's (None: not compared).
    tiles
        Tiles recomputed.
    tiles_total
        Task chunks of a full run.
    recomputed
        Cells recomputed.
    elapsed_s
        Seconds spent on it.
    cells
        The changed cells' coordinates, when few.

    Examples
    --------
    >>> ArrayReplay("mask", (4, 4), 2, 1, 1, 4, 4, 0.0, [[1, 2]]).to_json()["compared"]
    True
    """

    name: str
    shape: tuple[int, ...]
    reached: int
    changed: int | None
    tiles: int
    tiles_total: int
    recomputed: int
    elapsed_s: float
    cells: list[list[int]] | None = None

    def to_json(self) -> dict[str, Any]:
        """As the CLI's ``--json`` shows it."""
        return {"array": self.name, "shape": list(self.shape), "reached": self.reached,
                "changed": self.changed, "compared": self.changed is not None,
                "tiles": self.tiles, "tiles_total": self.tiles_total,
                "recomputed_cells": self.recomputed, "elapsed_s": self.elapsed_s,
                "cells": self.cells}


@dataclass
class ReplayResult:
    """A finished replay: the derived run and what changed.

    Parameters
    ----------
    run, parent
        The derived run and the run it derives from.
    workflow
        Their workflow's name.
    array
        The array whose cells were set.
    cells
        How many cells were set.
    value
        What they were set to, as text.
    arrays
        The set array, then each recomputed one in run order.
    outputs
        The arrays whose changes are the answer.
    not_replayed
        Arrays the change reached beyond ``to``, left out of the derived run.
    recomputed_cells
        Cells recomputed, over every operator.
    full_cells
        Cells every operator of a full run computes.
    runtime_s, parent_runtime_s
        The replay's time and the parent run's.

    Examples
    --------
    >>> res = ReplayResult("r2", "r1", "example", "image", 1, "0", full_cells=400,
    ...                    recomputed_cells=40)
    >>> res.to_json()["recomputed_fraction"], res.array_result("image") is None
    (0.1, True)
    """

    run: str
    parent: str
    workflow: str
    array: str
    cells: int
    value: str
    arrays: list[ArrayReplay] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    not_replayed: list[str] = field(default_factory=list)
    recomputed_cells: int = 0
    full_cells: int = 0
    runtime_s: float = 0.0
    parent_runtime_s: float | None = None

    def array_result(self, name: str) -> ArrayReplay | None:
        """What the replay did to array ``name`` (None: nothing)."""
        return next((a for a in self.arrays if a.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """As the CLI's ``--json`` shows it."""
        return {"run": self.run, "parent": self.parent, "workflow": self.workflow,
                "array": self.array, "cells": self.cells, "value": self.value,
                "outputs": self.outputs, "arrays": [a.to_json() for a in self.arrays],
                "not_replayed": self.not_replayed, "recomputed_cells": self.recomputed_cells,
                "full_cells": self.full_cells,
                "recomputed_fraction": self.recomputed_cells / max(1, self.full_cells),
                "runtime_s": self.runtime_s, "parent_runtime_s": self.parent_runtime_s}
