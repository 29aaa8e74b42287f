"""Elementwise built-ins: numpy ufuncs (unary, binary, with a constant), affine maps, casts and
copies, the logistic function, and a classifier from numbers to string labels.

Kernels are the module-level functions (numpy in, numpy out, whole blocks). Lineage is
one-to-one, with numpy broadcasting for size-1 axes (a 1x1 input feeds every output cell),
so the backward mapping and ``all_to_all`` come from
:class:`operators.base.ElementwiseOperator`, the forward mapping and tracing from
:class:`ElementwiseBuiltin`; nothing is stored for MAP.

>>> import numpy as np
>>> Binary("subtract").kernel(np.array([3.0, 5.0]), np.array([[1.0]]))
array([[2., 4.]])
>>> Scalar("multiply", 2.0).kernel(np.array([1.0, 2.5]))
array([2., 5.])
>>> Classify(0.5).kernel(np.array([0.2, 0.9])).tolist()
['N', 'Y']
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import ElementwiseOperator
from operators.geometry import axis_strides, outer_linear
from operators.parse import STRING_DTYPE, dtype_spec, is_text, parse_dtype, who
from subzero.cells import Ragged
from subzero.errors import WorkflowError
from subzero.runtime import TaskContext

#: Short names a scientist may use instead of numpy ufunc names.
UFUNC_ALIASES = {
    "+": "add", "-": "subtract", "*": "multiply", "/": "divide", "//": "floor_divide",
    "%": "remainder", "**": "power", "pow": "power", "sub": "subtract", "mul": "multiply",
    "div": "divide", "neg": "negative",
    ">": "greater", ">=": "greater_equal", "<": "less", "<=": "less_equal", "==": "equal",
    "!=": "not_equal", "gt": "greater", "ge": "greater_equal", "lt": "less",
    "le": "less_equal", "eq": "equal", "ne": "not_equal",
    "and": "logical_and", "or": "logical_or", "xor": "logical_xor", "not": "logical_not",
}

ScalarValue = bool | int | float | complex | str


# ---------------------------------------------------------------------------------------
# kernels (pure numpy)
# ---------------------------------------------------------------------------------------


def affine(x: np.ndarray, scale: float, offset: float) -> np.ndarray:
    """``x * scale + offset`` in float64."""
    return x.astype(np.float64) * scale + offset


def logistic(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow (``scipy.special.expit``); integers and
    booleans are computed in float64, floats keep their precision."""
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    from scipy import special  # scipy (slow to import) only in the kernel that needs it

    return special.expit(x)


def classify(x: np.ndarray, thresholds: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Label ``k`` for values above exactly ``k`` of the sorted ``thresholds`` (strictly
    above: a value equal to a threshold stays below it). NaN gets ``labels[0]``.

    >>> classify(np.array([0.5, 0.51]), np.array([0.5]), np.array(["N", "Y"])).tolist()
    ['N', 'Y']
    """
    x = np.asarray(x)
    idx = np.searchsorted(thresholds, x, side="left")  # = number of thresholds < x
    if x.dtype.kind == "f":
        idx[np.isnan(x)] = 0
    return np.asarray(labels, dtype=STRING_DTYPE)[idx]


def cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A copy of ``x`` with ``dtype``."""
    return np.array(x, dtype=dtype, copy=True, order="C")


def _sample(dtype: np.dtype) -> np.ndarray:
    # one representative element of a dtype, to learn a kernel's output dtype at bind time
    return np.zeros(1, dtype=dtype)


def parse_ufunc(name: str, nin: int, what: str = "") -> np.ufunc:
    """The numpy ufunc called ``name`` (or an alias like ``">"``) taking ``nin`` inputs, or a
    clear error (prefixed with ``what``, the operator)."""
    key = UFUNC_ALIASES.get(str(name), str(name))
    if nin == 1 and str(name) == "-":
        key = "negative"
    fn = getattr(np, key, None)
    if not isinstance(fn, np.ufunc) or fn.nin != nin:
        kind = "unary" if nin == 1 else "binary"
        raise WorkflowError(f"{what + ': ' if what else ''}{name!r} is not a {kind} numpy ufunc "
                            f"(like {'sqrt' if nin == 1 else 'add'!r} or an alias like "
                            f"{'-' if nin == 1 else '>'!r})")
    return fn


def _ufunc_dtype(op: Any, fn: np.ufunc, *samples: Any) -> np.dtype:
    try:
        with np.errstate(all="ignore"):  # 0/0 on the samples is fine: only the dtype counts
            return np.asarray(fn(*samples)).dtype
    except TypeError:
        kinds = ", ".join(str(np.asarray(s).dtype) if isinstance(s, np.ndarray)
                          else repr(s) for s in samples)
        raise WorkflowError(f"{who(op)}: ufunc {fn.__name__!r} does not apply to {kinds}") \
            from None


# ---------------------------------------------------------------------------------------
# operators
# ---------------------------------------------------------------------------------------


class ElementwiseBuiltin(ElementwiseOperator):
    """:class:`~operators.base.ElementwiseOperator` as the built-ins use it:

    - the forward mapping always returns a fresh, writable frontier (the base's
      ``broadcast_map_f`` returns a read-only view of its argument when the input is not
      broadcast; a caller updating the result in place would fail or corrupt its frontier);
    - tracing builds each input's linear indices from per-axis ranges (an outer sum) rather
      than through coordinates, which avoids materializing a coordinate array per axis.
    """

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        return np.array(np.broadcast_to(frontier_in, self.out_shape), dtype=bool, order="C")

    def trace(self, ctx: TaskContext) -> None:
        box = ctx.chunk.out_box
        out_lin = box.linear(self.out_shape)
        ins = []
        for shape in self.in_shapes:
            pad = len(self.out_shape) - len(shape)
            st = axis_strides(shape)
            # a broadcast axis (missing, or size 1) contributes index 0 for every cell
            per_axis = [np.zeros(box.hi[k] - box.lo[k], dtype=np.uint64) if k < pad
                        or shape[k - pad] == 1 else
                        np.arange(box.lo[k], box.hi[k], dtype=np.uint64) * np.uint64(st[k - pad])
                        for k in range(len(self.out_shape))]
            ins.append(Ragged.from_singletons(outer_linear(per_axis)))
        ctx.lwrite_pairs(Ragged.from_singletons(out_lin), *ins)


class Unary(ElementwiseBuiltin):
    """Apply a unary numpy ufunc (``"sqrt"``, ``"log1p"``, ``"abs"``, ``"isnan"``,
    ``"logical_not"``...).

    >>> Unary("logical_not").kernel(np.array([True, False])).tolist()
    [False, True]
    """

    n_inputs = 1

    def __init__(self, ufunc: str) -> None:
        self.ufunc = str(ufunc)
        self._fn = parse_ufunc(self.ufunc, 1, "Unary")

    def params(self) -> dict[str, Any]:
        return {"ufunc": self.ufunc}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return _ufunc_dtype(self, self._fn, _sample(in_dtypes[0]))

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return self._fn(x)


class Binary(ElementwiseBuiltin):
    """Apply a binary numpy ufunc (``"add"``, ``"subtract"``, ``"greater"``,
    ``"logical_and"``, or an alias like ``">"``) to two arrays of the same shape, or arrays
    that broadcast (an image and a 1x1 array).

    >>> Binary(">").kernel(np.array([1, 5]), np.array([[3]])).tolist()
    [[False, True]]
    """

    n_inputs = 2

    def __init__(self, ufunc: str) -> None:
        self.ufunc = str(ufunc)
        self._fn = parse_ufunc(self.ufunc, 2, "Binary")

    def params(self) -> dict[str, Any]:
        return {"ufunc": self.ufunc}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return _ufunc_dtype(self, self._fn, _sample(in_dtypes[0]), _sample(in_dtypes[1]))

    def kernel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._fn(a, b)


def parse_scalar(value: Any, what: str) -> ScalarValue:
    """A constant operand as a plain Python scalar (number, bool or string)."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (bool, int, float, complex, str)):
        raise WorkflowError(f"{what}: constant must be a number or a string. Got {value!r}.")
    return value


class Scalar(ElementwiseBuiltin):
    """A binary ufunc with a constant operand: ``ufunc(x, value)``, or ``ufunc(value, x)``
    when ``left=True``. The constant follows numpy's rules for Python scalars (it does not
    widen the array's dtype: a float32 image times 2.0 stays float32).

    >>> Scalar("subtract", 1.0, left=True).kernel(np.array([0.25]))
    array([0.75])
    >>> Scalar("equal", "NA").kernel(np.array(["NA", "Y"])).tolist()
    [True, False]
    """

    n_inputs = 1

    def __init__(self, ufunc: str, value: Any, left: bool = False) -> None:
        self.ufunc = str(ufunc)
        self._fn = parse_ufunc(self.ufunc, 2, "Scalar")
        self.value = parse_scalar(value, f"Scalar({self.ufunc!r})")
        self.left = bool(left)

    def params(self) -> dict[str, Any]:
        return {"ufunc": self.ufunc, "value": self.value, "left": self.left}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        x = _sample(in_dtypes[0])
        args = (self.value, x) if self.left else (x, self.value)
        return _ufunc_dtype(self, self._fn, *args)

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return self._fn(self.value, x) if self.left else self._fn(x, self.value)


class Affine(ElementwiseBuiltin):
    """``x * scale + offset`` in float64.

    >>> Affine(2.0, 1.0).kernel(np.array([1, 2], dtype=np.uint16))
    array([3., 5.])
    """

    n_inputs = 1

    def __init__(self, scale: float = 1.0, offset: float = 0.0) -> None:
        try:
            self.scale = float(scale)
            self.offset = float(offset)
        except (TypeError, ValueError):
            raise WorkflowError(
                f"Affine: scale and offset must be numbers. Got {scale!r}, {offset!r}."
            ) from None

    def params(self) -> dict[str, Any]:
        return {"scale": self.scale, "offset": self.offset}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        if is_text(in_dtypes[0]):
            raise WorkflowError(f"{who(self)}: needs a numeric input. Got {in_dtypes[0]}.")
        return np.dtype("float64")

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return affine(x, self.scale, self.offset)


class Cast(ElementwiseBuiltin):
    """Copy with a new dtype (``Cast("float64")``; ``Cast()`` keeps the dtype: a copy).
    ``Cast(str)`` or ``Cast("U")`` makes variable-length strings (numpy ``StringDType``).

    >>> Cast("float64").kernel(np.array([1, 2], dtype=np.uint16))
    array([1., 2.])
    """

    n_inputs = 1

    def __init__(self, dtype: Any = None) -> None:
        self.dtype = None if dtype is None else dtype_spec(parse_dtype(dtype, "Cast"))

    def params(self) -> dict[str, Any]:
        return {"dtype": self.dtype}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return in_dtypes[0] if self.dtype is None else parse_dtype(self.dtype, "Cast")

    def kernel(self, x: np.ndarray) -> np.ndarray:
        # Cast() keeps the block's dtype (a copy); a bound Cast(dtype) makes out_dtype
        target = x.dtype if self.dtype is None else parse_dtype(self.dtype, "Cast")
        try:
            return cast(x, target)
        except ValueError as e:  # e.g. the string "NA" cast to float64
            raise WorkflowError(f"{who(self)}: cannot cast to {target}: {e}") from None


class Copy(Cast):
    """An identical copy (same dtype); works for strings too.

    >>> Copy().kernel(np.array(["a", "b"])).tolist()
    ['a', 'b']
    """

    def __init__(self) -> None:
        super().__init__(None)

    def params(self) -> dict[str, Any]:
        return {}


class Logistic(ElementwiseBuiltin):
    """The logistic function ``1 / (1 + exp(-x))`` (log-odds to probability).

    >>> Logistic().kernel(np.array([0.0]))
    array([0.5])
    """

    n_inputs = 1
    imports = ("scipy.special",)

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        dt = np.dtype(in_dtypes[0])
        if dt.kind not in "biuf":
            raise WorkflowError(f"{who(self)}: needs a real-valued input. Got {dt}.")
        return dt if dt.kind == "f" else np.dtype("float64")

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return logistic(x)


class Classify(ElementwiseBuiltin):
    """Numbers to string labels: ``labels[k]`` where the value is strictly above ``k`` of the
    (increasing) ``thresholds``; NaN gets ``labels[0]``. The output is a string array
    (numpy ``StringDType``). The default is ``"Y" if x > 0.5 else "N"``.

    >>> Classify().kernel(np.array([0.5, 0.7, np.nan])).tolist()
    ['N', 'Y', 'N']
    >>> Classify([0, 10], ["low", "mid", "high"]).kernel(np.array([-1, 5, 11])).tolist()
    ['low', 'mid', 'high']
    """

    n_inputs = 1

    def __init__(self, threshold: float | Sequence[float] = 0.5,
                 labels: Sequence[str] = ("N", "Y")) -> None:
        ts = [threshold] if np.isscalar(threshold) else list(threshold)
        try:
            self.thresholds = tuple(float(t) for t in ts)
        except (TypeError, ValueError):
            raise WorkflowError(f"Classify: thresholds must be numbers. Got {threshold!r}.") \
                from None
        if not self.thresholds or any(np.isnan(self.thresholds)) or any(
                b <= a for a, b in zip(self.thresholds, self.thresholds[1:])):
            raise WorkflowError(
                f"Classify: thresholds must be strictly increasing numbers. Got {threshold!r}."
            )
        if isinstance(labels, str) or not all(isinstance(s, str) for s in labels):
            raise WorkflowError(f"Classify: labels must be a sequence of strings. Got {labels!r}.")
        self.labels = tuple(labels)
        if len(self.labels) != len(self.thresholds) + 1:
            raise WorkflowError(
                f"Classify: {len(self.thresholds)} threshold(s) need "
                f"{len(self.thresholds) + 1} labels. Got {len(self.labels)}: {labels!r}."
            )

    def params(self) -> dict[str, Any]:
        th: Any = self.thresholds[0] if len(self.thresholds) == 1 else list(self.thresholds)
        return {"threshold": th, "labels": list(self.labels)}

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        dt = np.dtype(in_dtypes[0])
        if dt.kind not in "biuf":
            raise WorkflowError(f"{who(self)}: needs a real-valued input. Got {dt}.")
        return STRING_DTYPE

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return classify(x, np.asarray(self.thresholds), np.asarray(self.labels))
