"""The ``subzero`` command line (see :mod:`subzero.cli.main`).

=====================  ===================================================================
module                 commands
=====================  ===================================================================
``cli.runs``           ``workflows``, ``run``, ``runs``, ``show``, ``export``
``cli.query``          ``query`` (and :mod:`cli.render`: the result drawn as a PNG)
``cli.optimize``       ``optimize``, ``calibrate``
``cli.bench``          ``bench``
``cli.demo``           ``make demo``: the main job, narrated
``cli.common``         one-line errors, tables, JSON, text forms of cells and paths
=====================  ===================================================================
"""

from subzero.cli.main import build_parser, main

__all__ = ["main", "build_parser"]
