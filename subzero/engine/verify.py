"""``subzero verify``: is everything a run's catalog lists on disk, whole and unchanged?

:func:`verify_run` checks, for one run:

- the catalog against the files: the run's folder, its bound workflow (re-execution needs
  it), every cataloged array and shard present, and nothing in its lineage folder that
  the catalog does not list (a shard left behind, a writer's temporary directory);
- every shard: its files match the checksum recorded when it was published
  (``shards.checksum``, :func:`encoders.store.shard_checksum`), it opens, and every record
  of every table, every blob and every R-tree entry reads (LMDB checks each page it
  walks);
- every array: zarr opens it, its shape and dtype are the cataloged ones, every chunk file
  is there (SubZero writes every chunk, so a missing one is damage) and decodes.

It changes nothing of the run: no file, array, shard or catalog row (opening the catalog
may update its schema and mark runs of dead processes failed, as every command does; a
read-only home is refused). Each problem is one :class:`Problem` naming what is damaged
(``shard op/strategy/chunk``, ``array NAME chunk K``) and how.

>>> report = verify_run("subzero-home", "latest")    # doctest: +SKIP
>>> report.ok, [p.line() for p in report.problems]   # doctest: +SKIP
(True, [])
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb
import numpy as np

from encoders.lookup import open_shard, open_shared
from encoders.store import BLOBS, LmdbShard, check_shard_files, read_meta
from subzero.engine import arrays, datastore, layout
from subzero.engine.catalog import Catalog
from subzero.engine.homeconfig import open_catalog
from subzero import manifest
from subzero.codeid import CodeGate
from subzero.engine.runs import operator_code, read_manifest
from subzero.errors import CodeError, DamagedCatalogError, StoreError

#: what a damaged file raises while it is read
_READ_ERRORS = (lmdb.Error, OSError, ValueError, KeyError, IndexError, RuntimeError,
                StoreError)


@dataclass
class Problem:
    """One damaged or missing thing: ``kind`` is ``catalog``, ``shard`` or ``array``."""

    kind: str
    what: str
    detail: str

    def line(self) -> str:
        return f"{self.kind} {self.what}: {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "what": self.what, "detail": self.detail}


@dataclass
class Report:
    """What :func:`verify_run` checked and found."""

    run: str
    status: str
    shards: int = 0
    arrays: int = 0
    records: int = 0
    chunks: int = 0
    unchecksummed: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "status": self.status, "ok": self.ok,
                "shards": self.shards, "arrays": self.arrays, "records": self.records,
                "chunks": self.chunks, "shards_without_checksum": self.unchecksummed,
                "problems": [p.to_json() for p in self.problems]}


def _first_line(e: BaseException) -> str:
    msg = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def read_whole_shard(path: str | os.PathLike) -> int:
    """Open a shard and read every record of every table, every blob and every R-tree
    entry; returns the records read (raises what the damaged file raises). A shard this
    process already has open for queries is read through that reader (LMDB refuses to open
    an environment twice in one process)."""
    shared = open_shared(path)
    if shared is None:
        open_shard(path).close()  # what a query does first: metadata, encoding, environment
    meta = shared.meta if shared is not None else read_meta(path)
    data = shared.data if shared is not None else LmdbShard(path, meta)
    n = 0
    try:  # closed even when the damaged file raises (what verify is for), unless shared
        for table in meta.get("lmdb", {}):
            if table == BLOBS:
                continue
            for keys, _values in data.scan(table):
                n += len(keys)
        for name in data.blob_names():
            n += int(data.blob(name).size > 0)
        for name, ndim in meta.get("rtree_dims", {}).items():
            big = np.full((1, int(ndim)), 2.0 ** 62)
            n += len(data.rtree_query(name, -big, big))
    finally:
        if shared is None:
            data.close()
    return n


def _check_shard(home: Path, row: dict[str, Any], report: Report) -> None:
    what = f"{row['op']}/{row['strategy']}/{row['chunk']}"
    report.shards += 1
    if not row.get("checksum"):
        report.unchecksummed += 1
    try:  # an object-store home's shard: fetched into the cache, checked as it arrives
        path = Path(datastore.shard_folder(home, row))
    except StoreError as e:
        report.problems.append(Problem("shard", what, str(e).split("; run 'subzero")[0]))
        return
    problem = check_shard_files(path, row.get("checksum"))
    if problem is not None:
        report.problems.append(Problem("shard", what, f"{problem} ({path})"))
        return
    try:
        report.records += read_whole_shard(path)
    except _READ_ERRORS as e:
        report.problems.append(Problem("shard", what, f"unreadable: {_first_line(e)}"))


def _same_dtype(have: np.dtype, want: str) -> bool:
    """Whether a zarr array's dtype is the cataloged one (text is stored as StringDType,
    whatever text dtype the catalog names)."""
    if have.kind in "OTU":
        if "String" in want:
            return True
        try:
            return np.dtype(want).kind in "OTU"
        except TypeError:
            return False
    return str(have) == want


def _check_array(home: Path, rid: str, name: str, row: dict[str, Any], report: Report) -> None:
    path = layout.array_path(home, rid, name)
    report.arrays += 1
    remote = datastore.mounted(path)
    if not (datastore.array_exists(path) if remote else path.is_dir()):
        report.problems.append(Problem("array", name, f"missing ({path})"))
        return
    try:
        arr = arrays.open_array(path)
    except Exception as e:  # noqa: BLE001 - zarr's errors for a damaged zarr.json vary
        report.problems.append(Problem("array", name, f"zarr cannot open it: {_first_line(e)}"))
        return
    want_shape, want_dtype = tuple(row["shape"]), str(row["dtype"])
    if tuple(arr.shape) != want_shape or not _same_dtype(arr.dtype, want_dtype):
        report.problems.append(Problem(
            "array", name, f"shape {tuple(arr.shape)} dtype {arr.dtype}; the catalog says "
            f"{want_shape} {want_dtype}"))
        return
    every = bool(arr.attrs.get(arrays.ALL_CHUNKS))
    for key in arrays.chunk_keys(arr):
        label = ".".join(map(str, key)) or "0"
        f = arrays.chunk_file(path, key)
        if not (remote.store.exists(remote.key(f)) if remote else f.is_file()):
            if every:
                report.problems.append(Problem("array", f"{name} chunk {label}", f"missing ({f})"))
            continue
        report.chunks += 1
        lo = tuple(k * c for k, c in zip(key, arr.chunks))
        hi = tuple(min(s, l + c) for s, l, c in zip(arr.shape, lo, arr.chunks))
        try:
            np.asarray(arr[tuple(slice(a, b) for a, b in zip(lo, hi))] if key else arr[...])
        except Exception as e:  # noqa: BLE001 - a codec's error on a cut or garbled chunk
            report.problems.append(Problem("array", f"{name} chunk {label}",
                                           f"cannot be decoded: {_first_line(e)} ({f})"))


def _check_catalog(home: Path, rid: str, info: dict[str, Any],
                   cat_ops: dict[str, dict[str, Any]], shard_rows: list[dict[str, Any]],
                   names: set[str], report: Report) -> None:
    run_dir = layout.run_dir(home, rid)
    remote = datastore.mounted(home) is not None
    if not (rid in datastore.run_names(home) if remote else run_dir.is_dir()):
        report.problems.append(Problem("catalog", rid, f"the run's folder is missing ({run_dir})"))
        return
    if info["status"] == "complete":
        # the manifest is read and checked, but no module it names is imported
        try:
            doc = read_manifest(home, rid, info, operator_code(cat_ops))
            CodeGate(manifest.module_records(doc), home=home).check_all()
        except (StoreError, CodeError) as e:
            report.problems.append(Problem("catalog", rid, str(e).split("; run 'subzero")[0]))
    if remote:  # objects no row names are swept by the run and by 'subzero gc'
        return
    listed = {os.path.normpath(home / r["path"]) for r in shard_rows}
    lineage = run_dir / "lineage"
    if lineage.is_dir():
        for strat in sorted(p for p in lineage.glob("*/*") if p.is_dir()):
            for shard in sorted(strat.iterdir()):
                if os.path.normpath(shard) in listed:
                    continue
                kind = ("a writer's leftover" if shard.name.startswith((".tmp.", ".old."))
                        else "not in the catalog")
                report.problems.append(Problem("catalog", os.path.relpath(shard, home),
                                               f"{kind} (nothing reads it)"))
    adir = layout.arrays_dir(home, rid)
    if adir.is_dir():
        for p in sorted(adir.glob("*.zarr")):
            if p.name[:-5] not in names:
                report.problems.append(Problem("catalog", os.path.relpath(p, home),
                                               "an array the catalog does not list"))


def verify_run(home: str | os.PathLike | None, run: str) -> Report:
    """Check run ``run`` (an id, ``latest`` or ``latest:WORKFLOW``) of ``home``; see the
    module docstring. A run's ``running`` or ``failed`` status is reported, not checked
    against (its files are whatever it wrote)."""
    home = layout.resolve_home(home)
    try:
        cat = open_catalog(home)
    except DamagedCatalogError as e:
        return _damaged_catalog(run, e)
    try:
        damage = _integrity(cat)
        if damage:
            return _damaged_catalog(run, damage)
        info = cat.run(run)
        rid = info["id"]
        rows = cat.shards(rid)
        arrs = cat.arrays(rid)
        ops = cat.operators(rid)
    except sqlite3.DatabaseError as e:
        return _damaged_catalog(run, e)
    finally:
        cat.close()
    report = Report(rid, info["status"])
    _check_catalog(home, rid, info, ops, [r for r in rows if _own(r, rid)], set(arrs), report)
    for row in rows:
        _check_shard(home, row, report)
    for name, row in arrs.items():
        _check_array(home, rid, name, row, report)
    return report


def _integrity(cat: Catalog) -> str | None:
    """SQLite's own check of every page of the catalog: None when it finds nothing (or
    the catalog is a PostgreSQL database, which checks its own pages)."""
    if not isinstance(cat, Catalog):
        return None
    try:
        rows = [r[0] for r in cat.db.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as e:
        return str(e)
    return None if rows == ["ok"] else "; ".join(rows[:3])


def _damaged_catalog(run: str, what: Any) -> Report:
    """The report of a run whose catalog is damaged: nothing else can be trusted."""
    text = str(what).splitlines()[0] if str(what) else type(what).__name__
    report = Report(run, "unknown")
    report.problems.append(Problem("catalog", layout.CATALOG, f"damaged: {text}"))
    return report


def _own(row: dict[str, Any], rid: str) -> bool:
    """Whether a shard row lives in run ``rid``'s own folder (a derived run lists its
    parent's shards too)."""
    parts = Path(row["path"]).parts
    return len(parts) > 1 and parts[1] == rid


__all__ = ["verify_run", "Report", "Problem", "read_whole_shard"]
