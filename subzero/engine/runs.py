"""A finished run as queries and re-execution see it: its catalog rows and its workflow,
rebuilt from the run's manifest."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from subzero.engine import datastore, layout
from subzero.engine.arrays import read_array, read_box
from subzero.engine.catalog import Catalog
from subzero.engine.homeconfig import open_catalog
from subzero import manifest
from subzero.cells import Box
from subzero.codeid import CodeGate
from subzero.errors import CatalogError, CodeError, DamagedError, StoreError, WorkflowError
from subzero.modes import Strategy
from subzero.operator import Operator
from subzero.workflow import Workflow


@dataclass
class LoadedRun:
    """A finished run as the query side sees it: catalog rows plus the bound workflow."""

    home: Path
    id: str
    info: dict[str, Any]
    workflow: Workflow
    arrays: dict[str, dict[str, Any]]
    operators: dict[str, dict[str, Any]]
    #: how the run was asked for (``latest``, ``latest:astronomy``, ``r3``)
    requested: str | None = None
    #: what readers worked out once about this run's arrays, which never change once the
    #: run is complete (a replay's: each array's directory, links resolved, and its
    #: :class:`~subzero.engine.chunkstore.ChunkFiles`), by (kind, array)
    memo: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False, compare=False)
    #: operators whose code cannot be used here, with the reason (they stand in as
    #: :class:`~subzero.manifest.Unavailable`: stored lineage answers, their code does not)
    unavailable: dict[str, str] = field(default_factory=dict)
    #: operators whose code changed since the run and is used anyway, with what changed
    changed_code: dict[str, str] = field(default_factory=dict)

    def array_path(self, name: str) -> Path:
        if name not in self.arrays:
            # asked for as latest: say which workflow that is and which latest:WORKFLOW has it
            try:
                cat = open_catalog(self.home)
            except CatalogError:  # a run read without its home's catalog
                raise StoreError(f"run {self.id} has no array {name!r} (arrays: "
                                 f"{', '.join(self.arrays)})") from None
            try:
                msg = cat.missing_array(self.requested or self.id, self.info, name, self.arrays)
            finally:
                cat.close()
            raise StoreError(msg)
        return layout.array_path(self.home, self.id, name)

    def array(self, name: str) -> np.ndarray:
        """The whole array ``name`` of this run, as numpy."""
        return read_array(self.array_path(name))

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of array ``name`` of this run.

        Raises
        ------
        StoreError
            The run has no array ``name``.
        """
        self.array_path(name)
        return tuple(int(n) for n in self.arrays[name]["shape"])

    def read_box(self, name: str, box: Box | None = None) -> np.ndarray:
        """The cells ``box`` of array ``name`` of this run (the whole array when None).

        A numeric array is decoded from its chunk files directly, other arrays through
        zarr; a chunk missing or damaged is an error, never fill values in its place.

        Parameters
        ----------
        name
            The array (an input's or an operator's name).
        box
            The cells to read, inside the array's shape.

        Returns
        -------
        np.ndarray
            The cells, of ``box``'s shape.

        Raises
        ------
        StoreError
            The run has no array ``name``, or ``box`` is not inside it.
        DamagedError
            A chunk holding the cells is missing or damaged.
        """
        path = self.array_path(name)
        return read_array(path) if box is None else read_box(path, box)

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start`` to ``stop`` (exclusive, clipped to the array) of array ``name``,
        whole along the other axes: :meth:`read_box` of those rows.

        Parameters
        ----------
        name
            The array.
        start, stop
            The rows (along the first axis).

        Returns
        -------
        np.ndarray
            The rows; the whole array for a 0-d one.
        """
        shape = self.shape(name)
        if not shape:
            return self.read_box(name, Box.full(shape))
        lo = min(max(int(start), 0), shape[0])
        hi = min(max(int(stop), lo), shape[0])
        return self.read_box(name, Box((lo, *(0,) * (len(shape) - 1)), (hi, *shape[1:])))

    def op(self, name: str) -> Operator:
        if name not in self.workflow.ops:
            raise WorkflowError(
                f"run {self.id} has no operator {name!r} "
                f"(operators: {', '.join(self.workflow.order)})"
            )
        return self.workflow.ops[name]

    def strategies(self, name: str) -> list[Strategy]:
        return [Strategy.parse(s) for s in self.operators[name]["strategies"]]

    def chunks(self, name: str) -> tuple[int, ...]:
        return tuple(self.arrays[name]["chunks"])


def read_manifest(home: Path, rid: str, info: Mapping[str, Any],
                  code: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Run ``rid``'s manifest, checked against what the catalog recorded: the manifest's
    digest (``info``, the run's row) and each operator's class and code digest (``code``,
    by operator); a one-line error when it is missing, altered or malformed. Imports
    nothing."""
    path = layout.manifest_path(home, rid)
    recorded = info.get("manifest")
    if recorded is None:
        if layout.legacy_workflow_path(home, rid).exists():
            raise StoreError(f"run {rid} was recorded by an earlier SubZero (its workflow is "
                             f"a pickle); convert the home once with 'subzero migrate "
                             f"{home} --trust'")
        raise DamagedError(f"run {rid} has no manifest recorded in the catalog; run "
                           f"'subzero verify {rid}'")
    try:
        datastore.pull(path)  # an object-store home's: fetched once, checked below
        data = path.read_bytes()
    except FileNotFoundError:
        raise DamagedError(f"run {rid} has lost its manifest {path}; run 'subzero verify "
                           f"{rid}'") from None
    except OSError as e:
        raise DamagedError(f"run {rid}'s manifest {path} cannot be read ({e.strerror or e}); "
                           f"run 'subzero verify {rid}'") from None
    if hashlib.sha256(data).hexdigest() != recorded:
        raise DamagedError(f"run {rid}'s manifest {path} does not match the digest the "
                           f"catalog recorded; run 'subzero verify {rid}'")
    try:
        doc = manifest.loads(data, f"run {rid}'s manifest {path}")
        entries = {e.get("name"): e for e in doc["operators"] if isinstance(e, dict)}
        for name, row in code.items():
            mine = entries.get(name)
            if mine is None or mine.get("digest") != row.get("digest") or \
                    mine.get("class") != row.get("class"):
                raise CodeError(f"run {rid}'s manifest and catalog disagree on operator "
                                f"{name!r}'s code")
    except CodeError as e:
        raise DamagedError(f"{e}; run 'subzero verify {rid}'") from None
    return doc


def operator_code(operators: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The code the catalog recorded for each operator (:meth:`Catalog.operators` rows)."""
    return {n: dict(o["code"]) for n, o in operators.items() if isinstance(o.get("code"), dict)}


def load_workflow(home: Path, rid: str, info: Mapping[str, Any],
                  code: Mapping[str, Mapping[str, Any]], allow_changed_code: bool = False
                  ) -> tuple[Workflow, dict[str, str], dict[str, str]]:
    """Run ``rid``'s workflow from its manifest (:func:`read_manifest`), every module it
    names checked before it is imported (:class:`~subzero.codeid.CodeGate`).

    Returns the bound workflow, the operators that stand in for code that cannot be used
    (:class:`~subzero.manifest.Unavailable`) with the reason, and the operators whose code
    changed since the run (used anyway: ``allow_changed_code``) with what changed.
    """
    doc = read_manifest(home, rid, info, code)
    records = manifest.module_records(doc)
    gate = CodeGate(records, home=home, allow_changed=allow_changed_code)
    gate.check_all()
    params = layout.params_dir(home, rid)

    def blob(name: str) -> bytes:
        try:
            datastore.pull(params / name)
            return (params / name).read_bytes()
        except OSError:
            raise CodeError(f"run {rid} has lost array parameter {params / name}") from None

    wf, missing = manifest.workflow_from_manifest(doc, gate, blob)
    changed = {}
    for entry in doc["operators"]:
        name = str(entry["name"])
        if name in missing:
            continue
        diffs = [c.text() for m in entry.get("modules", [])
                 if (c := gate.changed(str(m))) is not None]
        if diffs:
            changed[name] = diffs[0]
    return wf, missing, changed


def load_run(home: str | os.PathLike | None, rid: str, catalog: Catalog | None = None,
             require_complete: bool = True, workflow: Workflow | None = None,
             allow_changed_code: bool = False) -> LoadedRun:
    """Run ``rid`` of ``home`` as queries see it (``workflow``: its bound workflow, when
    the caller holds an equal one: a derived run's is a copy of its parent's;
    ``allow_changed_code``: use operators whose code changed since the run, see
    :func:`load_workflow`)."""
    home = layout.resolve_home(home)
    cat = catalog or open_catalog(home)  # a reading command never makes a home
    requested = rid
    try:
        info = cat.run(rid)
        rid = info["id"]
        if require_complete and info["status"] != "complete":
            raise StoreError(
                f"run {rid} is {info['status']}"
                + (f" ({info['error']})" if info.get("error") else "")
                + "; only complete runs can be queried"
            )
        operators = cat.operators(rid)
        if workflow is None:
            wf, missing, changed = load_workflow(home, rid, info, operator_code(operators),
                                                 allow_changed_code)
        else:
            wf, missing, changed = workflow, {}, {}
        wf.validate()
        return LoadedRun(home, rid, info, wf, cat.arrays(rid), operators, requested,
                         unavailable=missing, changed_code=changed)
    finally:
        if catalog is None:
            cat.close()
