"""SubZero on Spark: fine-grained lineage for scientific array workflows.

The Python API (see README):

>>> import subzero
>>> home = subzero.Home("subzero-home")                     # doctest: +SKIP
>>> run = home.run("example", strategy="subzero")           # doctest: +SKIP
>>> res = run.backward("bright", [(10, 20)], to="image")    # doctest: +SKIP
>>> res.count, res.coords[:3]                               # doctest: +SKIP
"""

__version__ = "0.1.0"

#: the names re-exported here and the module each comes from. They are loaded on first use,
#: so that ``import subzero`` loads no numpy: the command line (:mod:`subzero.cli`) sets
#: ``OPENBLAS_NUM_THREADS`` for its own process before numpy loads OpenBLAS, and importing
#: the library leaves the user's process as it was. The API (``Home``, ``Run``,
#: ``check_lineage``) is the top layer (zarr, engine, queries, optimizer), so the core
#: never imports what sits on it.
_EXPORTS: dict[str, str] = {
    "Box": "subzero.cells", "Ragged": "subzero.cells", "SubZeroError": "subzero.errors",
    "Direction": "subzero.modes", "Mode": "subzero.modes", "Strategy": "subzero.modes",
    "NamedQuery": "subzero.workflow", "Workflow": "subzero.workflow",
    "Home": "subzero.api", "Run": "subzero.api", "check_lineage": "subzero.api",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'subzero' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = ["Box", "Ragged", "SubZeroError", "Direction", "Mode", "Strategy", "NamedQuery",
           "Workflow", "Home", "Run", "check_lineage"]
