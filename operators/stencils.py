"""Stencil built-ins: convolution with a kernel, median filter.

A stencil's lineage is the box of its radius around each cell, so its mapping functions are
box dilations (:class:`operators.base.StencilOperator`) and it stores nothing.

>>> import numpy as np
>>> float(Convolve(np.ones((3, 3)) / 9, "constant").kernel(np.ones((3, 3)))[1, 1].round(12))
1.0
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import StencilOperator
from operators.parse import who
from subzero.errors import ShapeError, WorkflowError

_NDIMAGE_MODE = {"reflect": "reflect", "nearest": "nearest", "mirror": "mirror",
                 "constant": "constant", "wrap": "wrap"}


def _check_numeric(op: StencilOperator, dtype: np.dtype) -> None:
    if np.dtype(dtype).kind not in "biuf":
        raise WorkflowError(f"{who(op)}: needs a real-valued input. Got {np.dtype(dtype)}.")


class Convolve(StencilOperator):
    """Convolution with a fixed odd-sized kernel (``scipy.ndimage.convolve``), radius =
    half the kernel size, boundary handled like ``scipy.ndimage`` ``mode=``."""

    n_inputs = 1
    imports = ("scipy.ndimage",)

    def __init__(self, weights: Any, boundary: str = "reflect") -> None:
        try:
            w = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError):
            raise WorkflowError(f"Convolve: kernel weights must be numbers. Got {weights!r}.") \
                from None
        if w.ndim == 0 or any(n % 2 == 0 for n in w.shape):
            raise ShapeError(f"convolution kernel must have odd sizes. Got shape {w.shape}.")
        self.weights = w
        super().__init__(tuple(n // 2 for n in w.shape), boundary)

    def params(self) -> dict[str, Any]:
        return {"weights": self.weights.tolist(), "boundary": self.boundary}

    def check_bound(self) -> None:
        if self.weights.ndim != len(self.out_shape):
            raise ShapeError(
                f"operator {self.name!r}: kernel of rank {self.weights.ndim} on an array of "
                f"shape {self.out_shape}"
            )

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        _check_numeric(self, in_dtypes[0])
        return np.dtype("float64")

    def kernel(self, x: np.ndarray) -> np.ndarray:
        from scipy import ndimage  # scipy (slow to import) only in the kernels

        return ndimage.convolve(x.astype(np.float64, copy=False), self.weights,
                                mode=_NDIMAGE_MODE[self.boundary], cval=0.0)


class MedianFilter(StencilOperator):
    """Median over a ``(2r+1)^ndim`` box (``scipy.ndimage.median_filter``)."""

    n_inputs = 1
    imports = ("scipy.ndimage",)

    def __init__(self, radius: int | Sequence[int] = 1, boundary: str = "reflect") -> None:
        super().__init__(radius, boundary)

    def params(self) -> dict[str, Any]:
        return {"radius": list(self.radius), "boundary": self.boundary}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        _check_numeric(self, in_dtypes[0])
        return np.dtype(in_dtypes[0])

    def kernel(self, x: np.ndarray) -> np.ndarray:
        size = tuple(2 * r + 1 for r in self.radius_for(x.ndim))
        from scipy import ndimage  # scipy (slow to import) only in the kernels

        return ndimage.median_filter(x, size=size, mode=_NDIMAGE_MODE[self.boundary], cval=0.0)
