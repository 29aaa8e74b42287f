"""SubZero on Spark: fine-grained lineage for scientific array workflows.

The Python API (see README):

>>> import subzero
>>> home = subzero.Home("subzero-home")                     # doctest: +SKIP
>>> run = home.run("example", strategy="subzero")           # doctest: +SKIP
>>> res = run.backward("bright", [(10, 20)], to="image")    # doctest: +SKIP
>>> res.count, res.coords[:3]                               # doctest: +SKIP
"""

from subzero.cells import Box, Ragged
from subzero.errors import SubZeroError
from subzero.modes import Direction, Mode, Strategy
from subzero.workflow import NamedQuery, Workflow

__version__ = "0.1.0"


def __getattr__(name: str):
    # the API is the top layer (zarr, engine, queries, optimizer): loaded on first use, so
    # that `import subzero` stays light and the core never imports what sits on it
    if name in ("Home", "Run", "check_lineage"):
        from subzero import api

        return getattr(api, name)
    raise AttributeError(f"module 'subzero' has no attribute {name!r}")


__all__ = ["Box", "Ragged", "SubZeroError", "Direction", "Mode", "Strategy", "NamedQuery",
           "Workflow", "Home", "Run", "check_lineage"]
