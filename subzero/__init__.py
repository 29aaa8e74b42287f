"""SubZero on Spark: fine-grained lineage for scientific array workflows.

The Python API (see README):

>>> import subzero
>>> home = subzero.Home("subzero-home")                     # doctest: +SKIP
>>> run = home.run("example", strategy="subzero")           # doctest: +SKIP
>>> res = run.backward("bright", [(10, 20)], to="image")    # doctest: +SKIP
>>> res.count, res.coords[:3]                               # doctest: +SKIP
"""

import os

# A run's task threads (or Spark's tasks, which PySpark gives OMP_NUM_THREADS = task cpus)
# run numpy kernels side by side: OpenBLAS's own thread pools (numpy's and scipy's) beside
# them only spin. One BLAS thread per task, unless the environment says otherwise; set
# before numpy loads OpenBLAS (it reads the variable once), so it holds for the CLI and for
# a script that imports subzero first. 16 CCDs, black box in the CLI: 8.28 -> 7.75 s of
# CPU, 4.19 -> 4.09 s (4 alternating pairs).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from subzero.cells import Box, Ragged  # noqa: E402
from subzero.errors import SubZeroError  # noqa: E402
from subzero.modes import Direction, Mode, Strategy  # noqa: E402
from subzero.workflow import NamedQuery, Workflow  # noqa: E402

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
