"""The ``subzero`` command line (see :mod:`subzero.cli.main`).

=====================  ===================================================================
module                 commands
=====================  ===================================================================
``cli.runs``           ``workflows``, ``run``, ``runs``, ``show``, ``export``
``cli.query``          ``query`` (and :mod:`cli.render`: the result drawn as a PNG)
``cli.serve``          ``serve``: the web explorer (:mod:`subzero.serve`)
``cli.replay``         ``replay``: what-if replay of changed cells
``cli.optimize``       ``optimize``, ``calibrate``
``cli.check``          ``check-lineage``: an operator's declared lineage by perturbation
``cli.verify``         ``verify``: a run's catalog, shards and arrays checked
``cli.remove``         ``rm``, ``gc``: removing runs and what that frees
``cli.migrate``        ``migrate``: a home of pickled workflows converted to manifests
``cli.bench``          ``bench``
``cli.demo``           ``make demo``: the main job, narrated
``cli.common``         one-line errors, tables, JSON, text forms of cells and paths
=====================  ===================================================================

:data:`subzero.cli.main.COMMANDS` maps each command to its module; only the module of the
command that runs is imported.
"""

import os

# A run's task threads (or Spark's tasks) run numpy kernels side by side, so OpenBLAS's own
# thread pools beside them only spin: one BLAS thread per task, unless the environment says
# otherwise. OpenBLAS reads the variable once, when numpy loads it, so it is set here, before
# the command line imports numpy (``import subzero`` does not); the library itself leaves
# the user's environment alone. Spark's Python workers get it from
# :mod:`subzero.engine.spark`. See benchmarks/bench_scale.py.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from subzero.cli.main import build_parser, main  # noqa: E402

__all__ = ["main", "build_parser"]
