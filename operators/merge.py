"""Merging and masking built-ins: ``Where(cond, a, b)`` and :class:`MaskReplace` (the
astronomy ``badpixrm``).

Both are elementwise over their inputs (numpy broadcasting), so an output cell depends on
the same cell of every input: a mapping function describes that exactly from coordinates
alone, whichever branch the values pick (the value-dependent refinement would be payload
lineage, not a mapping).

>>> import numpy as np
>>> Where().kernel(np.array([True, False]), np.array([1, 2]), np.array([[9]]))
array([[1, 9]])
>>> MaskReplace(90.0, bad_values=[0]).kernel(np.array([0.0, 5.0, 7.0]),
...                                          np.array([0, 1, 0]))
array([90., 90.,  7.])
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.elementwise import ElementwiseBuiltin
from operators.parse import STRING_DTYPE, is_text, who
from subzero.errors import WorkflowError


# ---------------------------------------------------------------------------------------
# kernels (pure numpy)
# ---------------------------------------------------------------------------------------


def where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` where ``cond`` is true (non-zero), else ``b`` (numpy broadcasting)."""
    return np.where(np.asarray(cond).astype(bool, copy=False), a, b)


def mask_replace(x: np.ndarray, mask: np.ndarray, value: float,
                 bad_values: Sequence[float] = ()) -> np.ndarray:
    """``value`` where ``mask`` is non-zero (or NaN) or ``x`` is one of ``bad_values``,
    else ``x``. The result has ``x``'s dtype widened as numpy widens it for a Python scalar
    (uint16 with 90.0 gives float64, float32 stays float32)."""
    x = np.asarray(x)
    bad = np.asarray(mask) != 0
    if len(bad_values):
        bad = bad | np.isin(x, np.asarray(bad_values))
    dt = np.result_type(x.dtype, value)
    return np.where(bad, dt.type(value), x.astype(dt, copy=False))


# ---------------------------------------------------------------------------------------
# operators
# ---------------------------------------------------------------------------------------


def _check_condition(op: Any, dtype: np.dtype, what: str) -> None:
    if np.dtype(dtype).kind not in "biuf":
        raise WorkflowError(f"{who(op)}: {what} must be boolean or numeric. Got {dtype}.")


class Where(ElementwiseBuiltin):
    """Three inputs ``(cond, a, b)``: ``a`` where ``cond`` is true, else ``b``. Shapes
    broadcast like numpy (a 1x1 ``b`` is a constant fill). Strings work for ``a``/``b``.

    >>> Where().kernel(np.array([[True], [False]]), np.array([["x", "y"]]),
    ...                np.array(["-"])).tolist()
    [['x', 'y'], ['-', '-']]
    """

    n_inputs = 3

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        _check_condition(self, in_dtypes[0], "the condition (input 0)")
        a, b = np.dtype(in_dtypes[1]), np.dtype(in_dtypes[2])
        if is_text(a) or is_text(b):
            if not (is_text(a) and is_text(b)):
                raise WorkflowError(
                    f"{who(self)}: cannot merge strings with numbers ({a} and {b})"
                )
            return np.result_type(a, b) if a.kind == b.kind == "U" else STRING_DTYPE
        return np.result_type(a, b)

    def kernel(self, cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return where(cond, a, b)


class MaskReplace(ElementwiseBuiltin):
    """Two inputs ``(image, mask)``: ``value`` where the mask is non-zero or the pixel is one
    of ``bad_values``, else the pixel. The astronomy ``badpixrm`` is
    ``MaskReplace(90.0, bad_values=[0])`` ("90.0 where the pixel is 0 or masked").

    >>> MaskReplace(-1).kernel(np.array([3, 4]), np.array([True, False])).tolist()
    [-1, 4]
    """

    n_inputs = 2

    def __init__(self, value: float = 90.0, bad_values: Sequence[float] = ()) -> None:
        if isinstance(value, np.generic):
            value = value.item()
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise WorkflowError(f"MaskReplace: value must be a number. Got {value!r}.")
        self.value = value
        vals = [bad_values] if np.isscalar(bad_values) else list(bad_values)
        try:
            self.bad_values = tuple(v.item() if isinstance(v, np.generic) else v for v in vals)
            np.asarray(self.bad_values, dtype=np.float64)
        except (TypeError, ValueError):
            raise WorkflowError(
                f"MaskReplace: bad_values must be numbers. Got {bad_values!r}."
            ) from None

    def params(self) -> dict[str, Any]:
        return {"value": self.value, "bad_values": list(self.bad_values)}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        x = np.dtype(in_dtypes[0])
        if x.kind not in "biuf":
            raise WorkflowError(f"{who(self)}: the image (input 0) must be numeric. Got {x}.")
        _check_condition(self, in_dtypes[1], "the mask (input 1)")
        return np.result_type(x, self.value)

    def kernel(self, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return mask_replace(x, mask, self.value, self.bad_values)
