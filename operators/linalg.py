"""Matrix multiply: :class:`MatMul`.

``out[i, j] = sum_k a[i, k] * b[k, j]`` depends on row ``i`` of ``a`` and column ``j`` of
``b``. The mapping functions are row and column ``any`` s followed by broadcasts; an output
chunk of rows ``R`` and columns ``C`` reads rows ``R`` of ``a`` and columns ``C`` of ``b``;
tracing writes one region pair per output row (with ``a``'s row) and one per output column
(with ``b``'s column), which together are exactly the lineage.

>>> import numpy as np
>>> matmul(np.array([[1, 2]]), np.array([[3], [4]])).tolist()
[[11]]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import MappingOperator
from operators.parse import who
from subzero.cells import Box, Ragged
from subzero.errors import ShapeError, WorkflowError
from subzero.operator import BLOCKWISE
from subzero.runtime import TaskContext

Shape = tuple[int, ...]


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-d arrays."""
    return np.matmul(a, b)


class MatMul(MappingOperator):
    """Two 2-d inputs ``a`` (n x k) and ``b`` (k x m) give ``a @ b`` (n x m).

    >>> op = MatMul().bind("mm", [(5, 3), (3, 2)], ["f8", "f8"])
    >>> op.out_shape, op.input_box(Box((1, 0), (2, 1)), 0), op.input_box(Box((1, 0), (2, 1)), 1)
    ((5, 2), Box(lo=(1, 0), hi=(2, 3)), Box(lo=(0, 0), hi=(3, 1)))
    """

    n_inputs = 2
    # any chunking: input_box() gives the rows of a and the columns of b a chunk needs
    parallelism = BLOCKWISE

    def params(self) -> dict[str, Any]:
        return {}

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        a, b = (tuple(s) for s in in_shapes)
        if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            raise ShapeError(
                f"{who(self)}: cannot multiply {a} by {b}; expected 2-d (n, k) and (k, m)"
            )
        return (a[0], b[1])

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        try:
            return matmul(np.zeros((1, 1), in_dtypes[0]), np.zeros((1, 1), in_dtypes[1])).dtype
        except TypeError:
            raise WorkflowError(
                f"{who(self)}: cannot multiply {in_dtypes[0]} by {in_dtypes[1]} matrices"
            ) from None

    def input_box(self, out_box: Box, i: int) -> Box:
        k = self.in_shapes[0][1]
        if i == 0:
            return Box((out_box.lo[0], 0), (out_box.hi[0], k))
        return Box((0, out_box.lo[1]), (k, out_box.hi[1]))

    def kernel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return matmul(a, b)

    def compute(self, ctx: TaskContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return matmul(a, b)

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        if i == 0:
            rows = frontier_out.any(axis=1)[:, None]
            return np.broadcast_to(rows, self.in_shapes[0]).copy()
        cols = frontier_out.any(axis=0)[None, :]
        return np.broadcast_to(cols, self.in_shapes[1]).copy()

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        if i == 0:
            hit = frontier_in.any(axis=1)[:, None]
        else:
            hit = frontier_in.any(axis=0)[None, :]
        return np.broadcast_to(hit, self.out_shape).copy()

    def all_to_all(self, i: int) -> bool:
        return min(*self.in_shapes[0], self.in_shapes[1][1]) > 0

    def trace(self, ctx: TaskContext) -> None:
        box = ctx.chunk.out_box
        k, m = self.in_shapes[0][1], self.in_shapes[1][1]
        r0, r1, c0, c1 = box.lo[0], box.hi[0], box.lo[1], box.hi[1]
        out_grid = box.linear(self.out_shape).reshape(box.shape)
        rows = np.arange(r0, r1, dtype=np.uint64)[:, None]
        cols = np.arange(c0, c1, dtype=np.uint64)[None, :]
        ks = np.arange(k, dtype=np.uint64)
        # output row i depends on row i of a ...
        a_rows = rows * np.uint64(k) + ks[None, :]
        ctx.lwrite_pairs(Ragged.from_dense(out_grid), Ragged.from_dense(a_rows), None)
        # ... and output column j on column j of b
        b_cols = ks[None, :] * np.uint64(m) + cols.T
        ctx.lwrite_pairs(Ragged.from_dense(np.ascontiguousarray(out_grid.T)), None,
                         Ragged.from_dense(b_cols))
