"""Checks of the workflows' parameters (``--param NAME=VALUE`` strings from the CLI, or
Python values): each a ``parse_<kind>`` that returns the value or raises
:class:`subzero.errors.WorkflowError` naming the parameter, what it got and what it expects.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

import numpy as np

from subzero.errors import WorkflowError

#: the largest seed a generator takes (numpy seeds are unbounded; 64 bits is plenty)
MAX_SEED = 2 ** 63 - 1
#: an integer as the command line gives it
_DIGITS = re.compile(r"\s*[+-]?\d+\s*")


def parse_int(value: Any, name: str, low: int | None = None, high: int | None = None,
              example: str = "1") -> int:
    """An integer parameter within ``[low, high]``.

    >>> parse_int("7", "seed", 0)
    7
    >>> parse_int("x", "seed", 0)
    Traceback (most recent call last):
    ...
    subzero.errors.WorkflowError: seed must be an integer >= 0 like 1. Got 'x'.
    >>> parse_int(2.5, "seed", 0)
    Traceback (most recent call last):
    ...
    subzero.errors.WorkflowError: seed must be an integer >= 0 like 1. Got 2.5.
    """
    bounds = (f" from {low} to {high}" if low is not None and high is not None
              else f" >= {low}" if low is not None else f" <= {high}" if high is not None
              else "")
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        v: int | None = int(value)  # Python or numpy integers; never bools or floats
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        v = int(value)  # the CLI's digits (no '1_000', no '2.0')
    else:
        v = None
    if v is None or (low is not None and v < low) or (high is not None and v > high):
        raise WorkflowError(f"{name} must be an integer{bounds} like {example}. Got {value!r}.")
    return v


def parse_seed(value: Any) -> int:
    """A random seed: an integer from 0 to 2**63 - 1."""
    return parse_int(value, "seed", 0, MAX_SEED, "0")


def parse_float(value: Any, name: str, example: str = "1.5") -> float:
    """A finite number parameter.

    >>> parse_float("2.5", "threshold")
    2.5
    """
    try:
        v = float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError, OverflowError):
        v = math.nan
    if not math.isfinite(v):
        raise WorkflowError(f"{name} must be a finite number like {example}. Got {value!r}.")
    return v
