"""The new values a replay gives the chosen cells, checked against the array's dtype."""

from __future__ import annotations

from typing import Any

import numpy as np

from subzero.errors import ReplayError

__all__ = ["replay_values"]


def replay_values(array: str, dtype: Any, n: int, value: Any = None,
                  values: np.ndarray | None = None, nan: bool = False) -> np.ndarray:
    """The ``n`` values the chosen cells of ``array`` get, checked against its dtype.

    Exactly one of ``value``, ``values`` and ``nan`` is given.

    Parameters
    ----------
    array
        The array's name (for the messages).
    dtype
        The array's dtype.
    n
        How many cells are chosen.
    value
        One value for every cell: a number, or text as given on the command line.
    values
        One value per cell, in C order of the cells.
    nan
        Every cell NaN (a float array).

    Returns
    -------
    numpy.ndarray
        ``n`` values of ``dtype``.

    Raises
    ------
    ReplayError
        Not exactly one of them given, or values the array cannot hold.

    Examples
    --------
    >>> replay_values("exp1", "uint16", 2, value="7").tolist()
    [7, 7]
    >>> replay_values("exp1", "uint16", 1, value="1.5")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    subzero.errors.ReplayError: --set '1.5': array exp1 holds uint16; expected an integer ...
    """
    dtype = np.dtype(dtype)
    if sum((value is not None, values is not None, bool(nan))) != 1:
        raise ReplayError("give exactly one of a value (--set), values (--values) or --nan")
    if nan:
        if dtype.kind not in "fc":
            raise ReplayError(f"--nan: array {array} holds {dtype}; NaN needs a float array")
        return np.full(n, np.nan, dtype=dtype)
    if value is not None:
        return np.full(n, _scalar(array, dtype, value), dtype=dtype)
    vals = np.asarray(values)
    if vals.size != n:
        raise ReplayError(f"--values holds {vals.size} values of shape {vals.shape}; "
                          f"expected one per chosen cell of {array} ({n})")
    vals = vals.reshape(-1)
    if dtype.kind in "UOT":
        if vals.dtype.kind not in "UOT":
            raise ReplayError(f"--values of dtype {vals.dtype}: array {array} holds text; "
                              "expected strings")
        return vals.astype(str)
    fits = {"b": "b", "i": "biu", "u": "biu", "f": "biuf", "c": "biufc"}.get(dtype.kind, "")
    if vals.dtype.kind not in fits:
        raise ReplayError(f"--values of dtype {vals.dtype} cannot go into array {array} of "
                          f"dtype {dtype} (expected {dtype} or another "
                          f"{'integer' if dtype.kind in 'iu' else dtype.kind} type)")
    if dtype.kind in "iu" and vals.size:
        info = np.iinfo(dtype)
        lo, hi = vals.min(), vals.max()
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise ReplayError(f"--values holds {bad}, outside the range of array {array} "
                              f"({dtype}: {info.min} to {info.max})")
    return vals.astype(dtype)


def _scalar(array: str, dtype: np.dtype, value: Any) -> Any:
    text = str(value).strip()
    if dtype.kind in "UOT":
        return str(value)
    if dtype.kind == "b":
        if text.lower() in ("1", "true"):
            return True
        if text.lower() in ("0", "false"):
            return False
        raise ReplayError(f"--set {text!r}: array {array} holds bool; expected true or false")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        try:
            v = int(text, 10)
        except ValueError:
            v = None
        if v is None or not info.min <= v <= info.max:
            raise ReplayError(f"--set {text!r}: array {array} holds {dtype}; expected an "
                              f"integer from {info.min} to {info.max}")
        return v
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ReplayError(f"--set {text!r}: array {array} holds {dtype}; expected a number") \
            from None
    with np.errstate(over="ignore"):
        cast = dtype.type(v)
    if np.isinf(cast) and text.lower().lstrip("+-") not in ("inf", "infinity"):  # 1e400
        raise ReplayError(f"--set {text!r}: too large for array {array} ({dtype}); expected "
                          f"a number of magnitude at most {np.finfo(dtype).max:g}")
    return cast
