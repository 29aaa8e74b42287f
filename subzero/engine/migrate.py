"""Converting a home written by an earlier SubZero: pickled workflows become manifests.

Runs recorded before manifests kept their workflow as ``runs/<run>/workflow.pkl``, read with
``pickle.load``, which runs whatever code the file holds. :func:`migrate_home` converts
each such run once, when its owner asks (``subzero migrate HOME --trust``): it unpickles
the workflow, writes the run's manifest (:mod:`subzero.manifest`) with the code digests of
the modules installed now, records both in the catalog and removes the pickle. Nothing
else ever unpickles a home.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subzero import manifest
from subzero.engine import datastore, layout
from subzero.engine.catalog import Catalog
from subzero.engine.homeconfig import open_catalog
from subzero.errors import SubZeroError, WorkflowError
from subzero.workflow import Workflow


@dataclass
class Migration:
    """What :func:`migrate_home` found and did: runs converted, and runs it could not
    convert with the reason."""

    home: Path
    converted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    #: runs that already had a manifest
    current: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"home": str(self.home), "converted": self.converted, "failed": self.failed,
                "current": self.current}


def legacy_runs(home: Path, cat: Catalog) -> list[str]:
    """The runs of ``home`` whose workflow is still a pickle."""
    return [r["id"] for r in cat.runs()
            if r.get("manifest") is None and layout.legacy_workflow_path(home, r["id"]).exists()]


def migrate_home(home: str | os.PathLike, trust: bool = False) -> Migration:
    """Convert every pickled workflow of ``home`` into a manifest. Unpickling runs code, so
    without ``trust`` nothing is read and a one-line error says how many runs need it."""
    home = layout.resolve_home(home)
    cat = open_catalog(home)
    try:
        todo = legacy_runs(home, cat)
        out = Migration(home, current=sum(1 for r in cat.runs() if r.get("manifest")))
        if todo and not trust:
            shown = ", ".join(todo[:6]) + (" ..." if len(todo) > 6 else "")
            raise WorkflowError(
                f"{len(todo)} runs of {home} keep their workflow as a pickle ({shown}); "
                "converting them unpickles those files, which runs any code they hold: pass "
                "--trust if you trust whoever wrote this home")
        for rid in todo:
            try:
                _convert(home, rid, cat)
            except SubZeroError as e:
                out.failed[rid] = str(e).splitlines()[0]
            else:
                out.converted.append(rid)
        return out
    finally:
        cat.close()


def _convert(home: Path, rid: str, cat: Catalog) -> None:
    src = layout.legacy_workflow_path(home, rid)
    try:
        with open(src, "rb") as f:
            wf = pickle.load(f)  # the owner asked for this: migrate --trust
    except Exception as e:  # noqa: BLE001 - whatever the pickle raises, in one line
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise WorkflowError(f"its workflow file {src} cannot be read ({msg})") from None
    if not isinstance(wf, Workflow):
        raise WorkflowError(f"its workflow file {src} holds a {type(wf).__name__}")
    for node in wf.nodes.values():
        if not any(getattr(node.op, "init_args", ((), {}))):  # pickled before they were kept
            node.op.__dict__["_init_args"] = ((), _recover_args(node.op))
    doc, blobs = manifest.workflow_manifest(wf.validate(), wf.__dict__.get("source"))
    data = manifest.dumps(doc)
    write_manifest(home, rid, blobs, data)
    cat.set_manifest(rid, hashlib.sha256(data).hexdigest(), manifest.operator_code(doc))
    src.unlink()


def _recover_args(op: Any) -> dict[str, Any]:
    """The constructor arguments of an operator pickled before operators recorded them:
    the constructor's parameters found among the operator's attributes (same name, or
    with a leading underscore), else its :meth:`~subzero.operator.Operator.params`. The
    manifest then checks that they rebuild the same operator."""
    try:
        sig = inspect.signature(type(op).__init__)
    except (TypeError, ValueError):
        return {}
    state = vars(op)
    names = [p.name for p in list(sig.parameters.values())[1:]
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    found = {n: state[n] if n in state else state[f"_{n}"] for n in names
             if n in state or f"_{n}" in state}
    if len(found) == len(names):
        return found
    try:
        given = dict(op.params())
    except Exception:  # noqa: BLE001 - an operator that cannot say: its attributes
        return found
    return {n: given[n] for n in names if n in given} or found


def write_manifest(home: Path, rid: str, blobs: dict[str, bytes], data: bytes) -> None:
    """Run ``rid``'s manifest and its array files, each written whole under a temporary
    name and renamed into place (array files first: a manifest never names a missing one)."""
    if blobs:
        folder = layout.params_dir(home, rid)
        folder.mkdir(parents=True, exist_ok=True)
        for name, blob in blobs.items():
            _write_whole(folder / name, blob)
            datastore.push(folder / name)
    _write_whole(layout.manifest_path(home, rid), data)
    datastore.push(layout.manifest_path(home, rid))


def _write_whole(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".tmp.{path.name}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
