"""JSON for numpy values: the ``default=`` hook shared by the CLI and shard metadata.

>>> import json, numpy as np
>>> json.dumps({"n": np.int64(3), "x": np.float32(0.5), "a": np.arange(2), "t": (1, 2)},
...            default=json_default)
'{"n": 3, "x": 0.5, "a": [0, 1], "t": [1, 2]}'
"""

from __future__ import annotations

from typing import Any

import numpy as np


def json_default(o: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists; anything else a TypeError."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, (np.ndarray, tuple)):
        return o.tolist() if isinstance(o, np.ndarray) else list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
