"""Elementwise built-ins: unary and binary numpy ufuncs, affine maps, casts.

Each is a pure numpy kernel on blocks; lineage is one-to-one (numpy broadcasting for 1x1
inputs), so the mapping functions come from :class:`operators.base.ElementwiseOperator`.

>>> import numpy as np
>>> Binary("subtract").kernel(np.array([3.0, 5.0]), np.array([[1.0]]))
array([[2., 4.]])
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import ElementwiseOperator
from subzero.errors import WorkflowError


def parse_ufunc(name: str, nin: int) -> np.ufunc:
    """The numpy ufunc called ``name`` taking ``nin`` inputs, or a clear error."""
    fn = getattr(np, str(name), None)
    if not isinstance(fn, np.ufunc) or fn.nin != nin:
        kind = "unary" if nin == 1 else "binary"
        raise WorkflowError(f"{name!r} is not a {kind} numpy ufunc (like 'sqrt' or 'add')")
    return fn


class Unary(ElementwiseOperator):
    """Apply a unary numpy ufunc (``"sqrt"``, ``"log1p"``, ``"abs"``, ``"isnan"``...)."""

    n_inputs = 1

    def __init__(self, ufunc: str) -> None:
        self.ufunc = str(ufunc)
        self._fn = parse_ufunc(self.ufunc, 1)

    def params(self) -> dict[str, Any]:
        return {"ufunc": self.ufunc}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return self._fn(np.zeros(1, dtype=in_dtypes[0])).dtype

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return self._fn(x)


class Binary(ElementwiseOperator):
    """Apply a binary numpy ufunc (``"add"``, ``"subtract"``, ``"greater"``, ``"logical_and"``,
    ...) to two arrays of the same shape, or an array and a 1x1 array (broadcast)."""

    n_inputs = 2

    def __init__(self, ufunc: str) -> None:
        self.ufunc = str(ufunc)
        self._fn = parse_ufunc(self.ufunc, 2)

    def params(self) -> dict[str, Any]:
        return {"ufunc": self.ufunc}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return self._fn(np.zeros(1, dtype=in_dtypes[0]), np.zeros(1, dtype=in_dtypes[1])).dtype

    def kernel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._fn(a, b)


class Affine(ElementwiseOperator):
    """``x * scale + offset`` in float64."""

    n_inputs = 1

    def __init__(self, scale: float = 1.0, offset: float = 0.0) -> None:
        self.scale = float(scale)
        self.offset = float(offset)

    def params(self) -> dict[str, Any]:
        return {"scale": self.scale, "offset": self.offset}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype("float64")

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return x.astype(np.float64) * self.scale + self.offset


class Cast(ElementwiseOperator):
    """Copy with a new dtype (``Cast("float64")``; ``Cast()`` keeps the dtype: a copy)."""

    n_inputs = 1

    def __init__(self, dtype: Any = None) -> None:
        self.dtype = None if dtype is None else np.dtype(dtype).str

    def params(self) -> dict[str, Any]:
        return {"dtype": self.dtype}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return in_dtypes[0] if self.dtype is None else np.dtype(self.dtype)

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return np.array(x, dtype=self.out_dtype, copy=True)
