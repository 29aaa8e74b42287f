"""JSON for numpy values: the ``default=`` hook shared by the CLI and shard metadata;
strict JSON out (no NaN or infinity) and a parser with a nesting limit for files users give.

>>> import json, numpy as np
>>> json.dumps({"n": np.int64(3), "x": np.float32(0.5), "a": np.arange(2), "t": (1, 2)},
...            default=json_default)
'{"n": 3, "x": 0.5, "a": [0, 1], "t": [1, 2]}'
>>> strict_dumps({"cost": float("nan"), "p": [1.0, np.float32("inf")]})
'{"cost": null, "p": [1.0, null]}'
>>> loads_limited("[[[1]]]", max_depth=2)
Traceback (most recent call last):
...
subzero.jsonio.TooDeepError: nested 3 levels deep; expected at most 2
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

import numpy as np

#: the deepest nesting of objects and lists :func:`loads_limited` accepts by default: far
#: beyond any file SubZero reads, far below the depth that exhausts Python's stack
MAX_DEPTH = 64

# a JSON string, escapes included (unrolled, so long strings do not backtrack)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_default(o: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists; anything else a TypeError."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, (np.ndarray, tuple)):
        return o.tolist() if isinstance(o, np.ndarray) else list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def finite(obj: Any) -> Any:
    """``obj`` (dicts, lists, numbers, numpy values) with every NaN or infinite float as
    None: JSON has no NaN or infinity, and null says "no figure" to every reader.

    >>> finite({"a": [float("inf"), 2.5], "b": np.array([np.nan, 1.0])})
    {'a': [None, 2.5], 'b': [None, 1.0]}
    """
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return finite(obj.tolist()) if obj.dtype.kind in "fc" else obj.tolist()
    return obj


def strict_dumps(obj: Any, default: Callable[[Any], Any] = json_default, **kw: Any) -> str:
    """``json.dumps(obj)`` as strict JSON: a NaN or infinity anywhere is written as null
    (:func:`finite`) instead of the ``NaN`` / ``Infinity`` that strict parsers reject."""
    try:
        return json.dumps(obj, default=default, allow_nan=False, **kw)
    except ValueError:  # a non-finite number somewhere (rare): walk the document once
        return json.dumps(finite(obj), default=default, allow_nan=False, **kw)


class TooDeepError(ValueError):
    """JSON text whose lists and objects nest deeper than allowed."""

    def __init__(self, depth: int, limit: int) -> None:
        super().__init__(f"nested {depth:,} levels deep; expected at most {limit}")
        self.depth, self.limit = depth, limit


def nesting_depth(text: str) -> int:
    """How deep the lists and objects of JSON ``text`` nest (brackets inside strings do
    not count; in text that is not JSON the count is only an estimate).

    >>> nesting_depth('{"a": [1, {"b": "[[["}]}'), nesting_depth("3")
    (3, 0)
    """
    b = np.frombuffer(_STRING.sub('""', text).encode("utf-8", "replace"), np.uint8)
    step = (np.isin(b, (0x5B, 0x7B)).astype(np.int64) - np.isin(b, (0x5D, 0x7D)))
    return int(np.cumsum(step).max(initial=0))


def loads_limited(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)``, refusing (:class:`TooDeepError`, a ValueError like the parse
    errors) text that nests deeper than ``max_depth``, before Python's parser exhausts
    its stack on it."""
    depth = nesting_depth(text)
    if depth > max_depth:
        raise TooDeepError(depth, max_depth)
    return json.loads(text)
