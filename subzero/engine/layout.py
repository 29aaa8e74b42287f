"""The home directory's layout: every path of a run, built in one place.

::

    <home>/catalog.sqlite                              runs, arrays, shards, statistics
    <home>/runs/<run>/manifest.json                    the workflow as data (JSON)
    <home>/runs/<run>/params/<sha256>.npy              its large array parameters
    <home>/runs/<run>/arrays/<array>.zarr              every operator output
    <home>/runs/<run>/lineage/<op>/<strategy>/<chunk>/ one lineage shard
    <home>/logs/spark.log                              Spark's own log output

Home is ``--home``, else ``$SUBZERO_HOME``, else ``./subzero-home``; an object-store home
(``s3://bucket/prefix``) has the same layout as objects, under the local folder it is
mounted at (:mod:`subzero.engine.datastore`).

>>> from pathlib import Path
>>> shard_dir(Path("/h"), "r1", "smooth", "full-one-bwd", (0, 1)).as_posix()
'/h/runs/r1/lineage/smooth/full-one-bwd/0.1'
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Sequence

from subzero.cells import Box
from subzero.chunking import chunk_key
from subzero.errors import CatalogError, StoreError
from subzero.lineage import ShardSpec
from subzero.modes import Strategy

DEFAULT_HOME = "subzero-home"
CATALOG = "catalog.sqlite"
MANIFEST_FILE = "manifest.json"
#: the pickled workflow of runs recorded before manifests: read only by 'subzero migrate'
LEGACY_WORKFLOW_FILE = "workflow.pkl"


def resolve_home(home: str | os.PathLike | None = None) -> Path:
    """``home`` if given, else ``$SUBZERO_HOME``, else ``./subzero-home`` (absolute).

    An empty ``home`` is refused rather than taken as "not given" (``--home ''`` is more
    likely an unset variable than a wish for the default), and so is a path that cannot be
    resolved (a symlink loop, an unknown ``~user``): :class:`StoreError` naming it.

    >>> resolve_home("")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    subzero.errors.StoreError: --home '': expected a folder (leave --home out for ...)
    """
    if home is not None and not str(home).strip():
        raise StoreError(f"--home {str(home)!r}: expected a folder (leave --home out for "
                         "$SUBZERO_HOME or ./subzero-home)")
    h = home or os.environ.get("SUBZERO_HOME") or DEFAULT_HOME
    if isinstance(h, str) and h.startswith("s3://"):
        # object storage, seen through a local folder (subzero.engine.datastore)
        from subzero.engine.datastore import mount

        return mount(h)
    try:
        return Path(h).expanduser().resolve()
    except (RuntimeError, OSError, ValueError) as e:  # RuntimeError: a loop, or no ~user
        if "loop" in str(e) or getattr(e, "errno", None) == errno.ELOOP:
            why = "a symlink loop"
        else:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StoreError(f"SubZero home {os.fspath(h)!r} cannot be resolved ({why}); "
                         "expected a folder (--home DIR)") from None


def catalog_path(home: Path) -> Path:
    return Path(home) / CATALOG


def existing_catalog(home: str | os.PathLike | None) -> tuple[Path, Path]:
    """The home (resolved, :func:`resolve_home`) and its catalog, which must exist: a
    reading command never makes a home. A one-line :class:`CatalogError` otherwise."""
    home = resolve_home(home)
    path = catalog_path(home)
    if home.exists() and not home.is_dir():
        raise CatalogError(f"SubZero home {home} is a file; expected a folder (--home DIR)")
    if not path.is_file():
        raise CatalogError(f"no SubZero home at {home} (run a workflow first, or pass --home)")
    return home, path


def logs_dir(home: Path) -> Path:
    return Path(home) / "logs"


def run_dir(home: Path, rid: str) -> Path:
    return Path(home) / "runs" / rid


def manifest_path(home: Path, rid: str) -> Path:
    return run_dir(home, rid) / MANIFEST_FILE


def params_dir(home: Path, rid: str) -> Path:
    """The array parameters the manifest names (``.npy`` files named by their SHA-256)."""
    return run_dir(home, rid) / "params"


def legacy_workflow_path(home: Path, rid: str) -> Path:
    return run_dir(home, rid) / LEGACY_WORKFLOW_FILE


def arrays_dir(home: Path, rid: str) -> Path:
    return run_dir(home, rid) / "arrays"


def array_path(home: Path, rid: str, name: str) -> Path:
    return arrays_dir(home, rid) / f"{name}.zarr"


def strategy_dir(home: Path, rid: str, op: str, strategy: str) -> Path:
    """Every shard one operator stored with one strategy (``strategy``: its name)."""
    return run_dir(home, rid) / "lineage" / op / str(strategy)


def shard_dir(home: Path, rid: str, op: str, strategy: str, chunk: Sequence[int]) -> Path:
    """One shard: the lineage of one operator, strategy and output chunk."""
    return strategy_dir(home, rid, op, strategy) / chunk_key(chunk)


def shard_spec(home: Path, rid: str, op: str, strategy: Strategy, chunk: Sequence[int],
               out_box: Box, out_shape: Sequence[int], in_shapes: Sequence[Sequence[int]],
               attempt: int = 0) -> ShardSpec:
    """The spec of one shard of a run, placed at its :func:`shard_dir`."""
    chunk = tuple(int(c) for c in chunk)
    return ShardSpec(str(shard_dir(home, rid, op, strategy.name, chunk)), rid, op, strategy,
                     chunk, out_box, tuple(out_shape), tuple(tuple(s) for s in in_shapes),
                     attempt)


def check_writable_home(home: Path) -> None:
    """Raise :class:`subzero.errors.StoreError` unless ``home`` is (or can be made) a folder
    this process can write into, tried for real: root passes ``os.access`` on read-only
    folders, and a read-only mount or immutable folder fails only on write."""
    if home.exists() and not home.is_dir():
        raise StoreError(f"SubZero home {home} is a file; expected a folder (--home DIR)")
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / f".subzero-write-test.{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise StoreError(f"SubZero home {home} is not writable ({e.strerror or e}); expected a "
                         "folder SubZero can write its runs into (--home DIR)") from None
