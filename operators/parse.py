"""Parameter checks shared by the built-in operators (zarr-style ``parse_<thing>``).

Each function returns the normalized value or raises a :class:`subzero.errors.WorkflowError`
(or :class:`~subzero.errors.ShapeError` when the value clashes with a shape) whose one-line
message names the operator and the bad value.

>>> parse_axes((0, -1), 3, "Reduce")
(0, 2)
>>> parse_slices("0:1, 4:", "Subarray")
(slice(0, 1, None), slice(4, None, None))
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from subzero.cells import Box
from subzero.errors import ShapeError, WorkflowError

STRING_DTYPE = np.dtypes.StringDType()


def who(op: Any) -> str:
    """How an error names an operator: its workflow name once bound, else its class."""
    cls = type(op).__name__
    name = getattr(op, "name", "?")
    return f"operator {name!r} ({cls})" if name != "?" else cls


def is_text(dtype: Any) -> bool:
    """Whether ``dtype`` holds strings (fixed-width ``<U``, ``StringDType`` or objects)."""
    return np.dtype(dtype).kind in "UOT"


def parse_dtype(dtype: Any, what: str) -> np.dtype:
    """A numpy dtype from a name or dtype. An unsized ``"U"``/``str`` means ``StringDType``
    (variable-length UTF-8: how SubZero stores string arrays)."""
    if dtype is str or (isinstance(dtype, str) and dtype in ("U", "str", "T", "string")):
        return STRING_DTYPE
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise WorkflowError(f"{what}: {dtype!r} is not a numpy dtype (like 'float64')") from None
    if dt.kind == "U" and dt.itemsize == 0:
        return STRING_DTYPE
    return dt


def dtype_spec(dtype: np.dtype) -> str:
    """A plain-data name of ``dtype`` that :func:`parse_dtype` reads back."""
    return "T" if dtype.kind == "T" else dtype.str


def parse_axis(axis: Any, ndim: int, what: str) -> int:
    """One axis index in ``[-ndim, ndim)``, normalized to ``[0, ndim)``."""
    try:
        a = int(axis)
    except (TypeError, ValueError):
        raise WorkflowError(f"{what}: axis must be an int. Got {axis!r}.") from None
    if isinstance(axis, (bool, np.bool_)) or not -ndim <= a < ndim:
        raise ShapeError(f"{what}: axis {axis!r} is out of range for {ndim}-d input")
    return a % ndim


def parse_axes(axis: Any, ndim: int, what: str) -> tuple[int, ...]:
    """``None`` (all axes), an int or a sequence of distinct ints, normalized and sorted."""
    if axis is None:
        return tuple(range(ndim))
    items = [axis] if np.isscalar(axis) else list(axis)
    axes = [parse_axis(a, ndim, what) for a in items]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{what}: repeated axis in {axis!r}")
    return tuple(sorted(axes))


def parse_permutation(axes: Any, ndim: int, what: str) -> tuple[int, ...]:
    """An axis permutation of ``range(ndim)`` (``None``: reverse the axes, like ``.T``)."""
    if axes is None:
        return tuple(range(ndim - 1, -1, -1))
    try:
        perm = tuple(int(a) for a in axes)
    except (TypeError, ValueError):
        raise WorkflowError(f"{what}: axes must be a sequence of ints. Got {axes!r}.") from None
    norm = tuple(a % ndim if -ndim <= a < ndim else a for a in perm) if ndim else perm
    if sorted(norm) != list(range(ndim)):
        raise ShapeError(
            f"{what}: axes {list(perm)} are not a permutation of the {ndim} input axes"
        )
    return norm


def _parse_slice_text(text: str, what: str) -> tuple[slice, ...]:
    out = []
    for part in text.split(","):
        bits = [b.strip() for b in part.split(":")]
        try:
            nums = [int(b) if b else None for b in bits]
        except ValueError:
            raise WorkflowError(
                f"{what}: bad slice {part.strip()!r} in {text!r}; expected 'start:stop[:step]'"
            ) from None
        if len(nums) == 1:  # a single index keeps its axis (length-1 range)
            if nums[0] is None:
                raise WorkflowError(f"{what}: empty axis in {text!r}; use ':' for a whole axis")
            i = nums[0]
            out.append(slice(i, i + 1 if i != -1 else None))
        elif len(nums) <= 3:
            out.append(slice(*nums))
        else:
            raise WorkflowError(f"{what}: bad slice {part.strip()!r} in {text!r}")
    return tuple(out)


def parse_slices(spec: Any, what: str) -> tuple[slice, ...]:
    """A box selection as one slice per axis, from ``"0:1, 4:"`` text, a :class:`Box`, or a
    sequence of ``slice`` objects, ``(start, stop[, step])`` tuples or single indices (a
    single index keeps its axis with length 1)."""
    if isinstance(spec, str):
        return _check_slices(_parse_slice_text(spec, what), what)
    if isinstance(spec, Box):
        return spec.slices
    if isinstance(spec, slice):
        spec = (spec,)
    try:
        items = list(spec)
    except TypeError:
        raise WorkflowError(
            f"{what}: expected slices like '0:1, 0:1' or (slice(0, 1), slice(0, 1)). "
            f"Got {spec!r}."
        ) from None
    out: list[slice] = []
    for s in items:
        if isinstance(s, slice):
            out.append(s)
        elif isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)):
            out.append(slice(int(s), int(s) + 1 if int(s) != -1 else None))
        elif isinstance(s, (tuple, list)) and 1 <= len(s) <= 3:
            out.append(slice(*s))
        else:
            raise WorkflowError(f"{what}: bad slice {s!r} in {spec!r}")
    return _check_slices(tuple(out), what)


def _check_slices(out: tuple[slice, ...], what: str) -> tuple[slice, ...]:
    for s in out:
        for v in (s.start, s.stop, s.step):
            if v is not None and (not isinstance(v, (int, np.integer))
                                  or isinstance(v, (bool, np.bool_))):
                raise WorkflowError(f"{what}: slice {s!r} must have int bounds")
        if s.step is not None and s.step <= 0:
            raise WorkflowError(f"{what}: slice step must be positive. Got {s.step}.")
    return out


def slices_text(slices: Sequence[slice]) -> str:
    """Canonical text of a selection (what ``params()`` records), e.g. ``'0:1,4:'``."""
    parts = []
    for s in slices:
        a = "" if s.start is None else str(s.start)
        b = "" if s.stop is None else str(s.stop)
        parts.append(f"{a}:{b}" + (f":{s.step}" if s.step not in (None, 1) else ""))
    return ",".join(parts)


def parse_shape_param(shape: Any, what: str) -> tuple[int, ...]:
    """A target shape: ints, at most one of them ``-1`` (inferred)."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise WorkflowError(f"{what}: shape must be a sequence of ints. Got {shape!r}.") from None
    if sum(1 for s in out if s == -1) > 1 or any(s < -1 for s in out):
        raise WorkflowError(
            f"{what}: shape {out} may hold non-negative sizes and at most one -1. Got {shape!r}."
        )
    return out
