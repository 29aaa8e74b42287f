"""Global reductions broadcast back to the input's shape (all-to-all lineage).

>>> import numpy as np
>>> MeanBroadcast().kernel(np.array([[1.0, 3.0]]))
array([[2., 2.]])
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import AllToAllOperator
from subzero.runtime import TaskContext


class MeanBroadcast(AllToAllOperator):
    """An array of the input's shape filled with the input's global mean (one task)."""

    n_inputs = 1

    def output_shape(self, in_shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
        return tuple(in_shapes[0])

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype("float64")

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return np.full(x.shape, x.mean(dtype=np.float64))

    def compute(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        return self.kernel(x)[ctx.chunk.out_box.slices]

    def params(self) -> dict[str, Any]:
        return {}
