"""Spark's Python daemon for SubZero's tasks: pyspark's own (``pyspark.daemon``), with
pyspark imported from the installed package instead of from the zip files Spark puts first
on the workers' ``PYTHONPATH``.

Spark starts its Python workers' daemon with ``PYTHONPATH=<pyspark>/python/lib/pyspark.zip:
<pyspark>/python/lib/py4j-*-src.zip:...``. Those zips hold sources only, and Python does not
cache bytecode for a zip: every daemon would compile pyspark's modules anew, where the
installed package has cached bytecode, and so would each forked worker for
``pyspark.worker``. A fresh run would pay that before its first task starts.

Here, zips that ship inside the installed pyspark package (a pip install: the same release,
byte for byte the same sources) move behind the installed packages on ``sys.path``, then
pyspark's daemon runs as usual (``spark.python.daemon.module``, set by
:mod:`subzero.engine.spark`). Zips of any other Spark (``SPARK_HOME`` pointing elsewhere, a
cluster's own) stay first, as Spark put them.

The daemon also makes its workers keep freed memory for their next arrays
(:func:`subzero.engine.heap.keep_worker_memory`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from subzero.engine.heap import keep_worker_memory


def shipped_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are zips inside an installed pyspark package
    (``<site-packages>/pyspark/python/lib/*.zip``).

    >>> shipped_zips(["/x/site-packages/pyspark/python/lib/pyspark.zip", "/y/lib"])
    []
    """
    out = []
    for entry in path:
        p = Path(entry)
        if p.suffix != ".zip" or len(p.parents) < 3:
            continue
        package = p.parents[2]  # <package>/python/lib/<name>.zip
        if (package.name == "pyspark" and p.parent == package / "python" / "lib"
                and (package / "__init__.py").is_file() and (package / "daemon.py").is_file()):
            out.append(entry)
    return out


def installed_first(path: list[str]) -> list[str]:
    """``path`` with the installed pyspark's own zips moved to the end (so that ``import
    pyspark`` finds the package, with its cached bytecode), everything else in order."""
    zips = shipped_zips(path)
    return [e for e in path if e not in zips] + zips


def main() -> None:
    sys.path[:] = installed_first(sys.path)
    keep_worker_memory()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
