"""What ``subzero serve`` answers, without HTTP: a home's runs kept warm (catalog, bound
workflows, shard readers, arrays' metadata), array tiles as PNG, and lineage queries whose
answers carry a compact mask of every array they reached.

An :class:`Explorer` lives on one thread (its catalog is a SQLite connection): the web
app (:mod:`subzero.serve.app`) keeps one on each of its worker threads. Queries take an
optional ``check``, called before each step of their walk, which ends them by raising.

Masks travel as runs of set cells in C order (``[start, length, start, length, ...]`` over
the flattened array): a star's few hundred cells are a few dozen runs, a whole array is one.

>>> rle(np.array([0, 1, 2, 7, 9, 10], dtype=np.uint64)).tolist()
[0, 3, 7, 1, 9, 2]
"""

from __future__ import annotations

import functools
import io
import itertools
import os
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from subzero.api import Run
from subzero.cells import Box, check_coords, parse_cells, size_of
from subzero.engine import datastore, layout
from subzero.engine.arrays import chunk_file, grid_keys, read_array, read_box
from subzero.engine.homeconfig import home_exists, open_catalog
from subzero.engine.runs import load_run
from subzero.errors import CellError, QueryError, StoreError, SubZeroError
from subzero.frontier import Frontier
from subzero.query import LineageResult, QueryExecutor
from subzero.query.named import named_query, start_cells
from subzero.query.paths import parse_path, path_labels, simple_paths
from subzero.query.results import Step, parse_scope
from subzero.serve.regions import RegionError, mask_to_ds9, parse_ds9, rasterise, window
from subzero.serve.sky import carry, file_wcs

#: a tile's side in pixels
TILE = 256
#: the readout's values travel in blocks of this many cells a side
VALUE_BLOCK = 32
#: the coarsest zoom level: each tile pixel stands for 2**MAX_ZOOM cells per axis
MAX_ZOOM = 12
#: the most cells one query may start from
MAX_QUERY_CELLS = 1_000_000
#: masks with more runs than this travel without their cells (the count still does)
MAX_RUNS = 1_000_000
#: the contrast stretch is taken from at most this many cells of an array
STRETCH_CELLS = 1 << 22
#: the most paths one /paths answer lists (shortest first)
MAX_PATHS = 64
#: the most cells of the box a query's start region spans (the box is rasterised whole)
MAX_REGION_BOX = 1 << 26

RUN_ID = re.compile(r"r[0-9]{1,9}|latest(:[A-Za-z0-9_.-]{1,64})?")

#: ``check(target, operator, input, steps_done)``: called before each step of a query
#: (``target`` None when the query follows a path)
Check = Callable[[str | None, str, int, Sequence[Step]], None]

#: held while a query reads stored lineage: the process has one reader per shard (LMDB opens
#: an environment once per process, :func:`encoders.lookup.shared_shard`) and a reader's
#: read transaction and cursors serve one thread at a time; re-execution runs without it
_STORED_READS = threading.Lock()

#: each array's contrast (:meth:`Explorer._stretch`) by its folder and its run's start, for
#: every explorer of the process: a finished run's arrays never change, and the explorers
#: of a server's threads would each compute it again
_CONTRAST: dict[tuple[str, Any], tuple[float, float]] = {}


class NotFound(SubZeroError):
    """A run, array or named query the home does not have (HTTP 404)."""


class TooLarge(SubZeroError):
    """A request larger than the explorer answers (HTTP 413)."""


def rle(lin: np.ndarray) -> np.ndarray:
    """Sorted distinct linear indices as ``[start, length, ...]`` runs (int64)."""
    lin = np.asarray(lin, dtype=np.int64)
    if lin.size == 0:
        return np.empty(0, dtype=np.int64)
    breaks = np.flatnonzero(np.diff(lin) != 1) + 1
    starts = lin[np.concatenate(([0], breaks))]
    ends = lin[np.concatenate((breaks - 1, [lin.size - 1]))]
    return np.column_stack((starts, ends - starts + 1)).reshape(-1)


def unrle(runs: Sequence[int], size: int) -> np.ndarray:
    """The flat bool mask of ``runs`` (the inverse of :func:`rle`)."""
    r = np.asarray(runs, dtype=np.int64).reshape(-1, 2)
    edges = np.zeros(size + 1, dtype=np.int64)
    np.add.at(edges, r[:, 0], 1)
    np.add.at(edges, r[:, 0] + r[:, 1], -1)
    return np.cumsum(edges[:-1]) > 0


def view_shape(shape: Sequence[int]) -> tuple[int, int]:
    """The 2-D picture of an array: rows x the last axis (a vector is one row, a scalar one
    cell); C order, so a picture's pixel (r, c) is flat cell ``r * width + c``."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return 1, shape[0]
    return size_of(shape[:-1]), shape[-1]


def mask_json(f: Frontier) -> dict[str, Any]:
    runs = rle(f.lin)
    doc: dict[str, Any] = {"shape": list(f.shape), "view": list(view_shape(f.shape)),
                           "count": int(f.n)}
    if len(runs) // 2 <= MAX_RUNS:
        doc["runs"] = runs.tolist()
    return doc


class _Executor(QueryExecutor):
    """A query executor for explorers on several threads: its stored-lineage reads hold
    :data:`_STORED_READS` (see there)."""

    def _stored(self, *args: Any, **kwargs: Any) -> Frontier | None:
        with _STORED_READS:
            return super()._stored(*args, **kwargs)


@dataclass
class _Warm:
    """A run kept warm: its bound workflow and query executor."""

    run: Run
    qx: QueryExecutor
    #: each array's celestial WCS (:meth:`Explorer.sky`), once asked
    sky: dict[str, dict[str, Any] | None] | None = None


class Explorer:
    """The runs of one home, for the web explorer (one thread only)."""

    def __init__(self, home: str | Path | None, allow_changed_code: bool = False) -> None:
        self.home = layout.resolve_home(home)
        self.allow_changed_code = allow_changed_code
        if not home_exists(self.home):
            raise StoreError(f"no SubZero home at {datastore.home_name(self.home)} (no catalog "
                             "there); "
                             "expected a home with runs (subzero run ... --home DIR)")
        self.catalog = open_catalog(self.home)
        self._warm: dict[str, _Warm] = {}

    def close(self) -> None:
        for w in self._warm.values():
            w.qx.close()
        self.catalog.close()

    # -- runs ------------------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        """The home's runs, oldest first: each its catalog figures, ``created`` (when it
        started, ISO 8601 UTC), ``inputs`` (each its ``name``, its ``origin`` in a few words,
        :func:`origin_phrase`, and whether it is ``auxiliary``), ``real`` (every input that
        is not auxiliary was read from a file) and ``parent`` (the run a replay derives
        from, else None)."""
        keys = ("id", "workflow", "strategy", "status", "started", "runtime_s", "input_bytes",
                "lineage_bytes", "parent", "error")
        origins = self.catalog.input_origins()
        out = []
        for r in self.catalog.runs():
            mine = origins.get(r["id"], {})
            data = [o for o in mine.values() if not (o or {}).get("auxiliary")]
            out.append({**{k: r.get(k) for k in keys}, "created": iso_utc(r.get("started")),
                        "inputs": [{"name": n, "origin": origin_phrase(o),
                                    "auxiliary": bool((o or {}).get("auxiliary"))}
                                   for n, o in mine.items()],
                        "real": bool(data) and all((o or {}).get("kind") == "file"
                                                   for o in data)})
        return out

    def warm(self, rid: str) -> _Warm:
        if not isinstance(rid, str) or not RUN_ID.fullmatch(rid):
            raise NotFound(f"no run {str(rid)[:80]!r}; expected a run id like r3, 'latest' or "
                           "'latest:WORKFLOW'")
        try:
            info = self.catalog.run(rid)
        except SubZeroError as e:
            raise NotFound(str(e).splitlines()[0]) from None
        w = self._warm.get(info["id"])
        if w is None:
            loaded = load_run(self.home, info["id"], catalog=self.catalog,
                              allow_changed_code=self.allow_changed_code)
            run = Run(loaded, requested=rid)
            qx = _Executor(loaded, catalog=self.catalog)
            w = self._warm[info["id"]] = _Warm(run, qx)
        return w

    def run_info(self, rid: str) -> dict[str, Any]:
        w = self.warm(rid)
        loaded, wf = w.run.loaded, w.run.workflow
        stats = self.catalog.op_stats(loaded.id)
        consumed = {a for node in wf.nodes.values() for a in node.inputs}
        sky = self.sky(w)
        arrays = []
        for name, a in loaded.arrays.items():
            arrays.append({"name": name, "shape": a["shape"], "dtype": a["dtype"],
                           "chunks": a["chunks"], "view": list(view_shape(a["shape"])),
                           "producer": name if name in wf.nodes else None,
                           "input": name in wf.inputs, "output": name not in consumed,
                           "stored_bytes": a.get("stored_bytes"), "wcs": sky.get(name)})
        operators = []
        for name in wf.order:
            row, st = loaded.operators.get(name, {}), stats.get(name, {})
            op = None if name in loaded.unavailable else wf.ops.get(name)
            operators.append({"name": name, "class": row.get("class"), "kind": row.get("kind"),
                              "description": summary(op),
                              "inputs": list(wf.nodes[name].inputs),
                              "strategies": row.get("strategies", []),
                              "code": row.get("code"),
                              "lineage_bytes": st.get("lineage_bytes"),
                              "runtime_s": st.get("runtime_s")})
        named = [{"name": q.name, "direction": q.direction, "start": q.start, "to": q.to,
                  "path": [list(s) for s in q.path] if q.path else None,
                  "description": q.description} for q in wf.queries.values()]
        info = {k: loaded.info.get(k) for k in ("id", "workflow", "strategy", "status", "params",
                                                 "runtime_s", "input_bytes", "lineage_bytes",
                                                 "parent")}
        return {**info, "run": loaded.id, "inputs": list(wf.inputs),
                "outputs": [a["name"] for a in arrays if a["output"] and not a["input"]],
                "arrays": arrays, "operators": operators, "named": named,
                "changed_code": dict(loaded.changed_code),
                "unavailable": dict(loaded.unavailable)}

    def sky(self, w: _Warm) -> dict[str, dict[str, Any] | None]:
        """Each array's celestial WCS (:mod:`subzero.serve.sky`, normalised), or None: an
        input read from a FITS file whose header has one, carried to the arrays computed
        from it that keep its shape. Worked out once per run (each header read once)."""
        if w.sky is None:
            loaded, wf = w.run.loaded, w.run.workflow
            shapes = {n: tuple(a["shape"]) for n, a in loaded.arrays.items()}
            known = {}
            for name in wf.inputs:
                origin = (loaded.arrays.get(name) or {}).get("origin") or {}
                if origin.get("kind") == "file" and origin.get("path"):
                    known[name] = file_wcs(origin["path"], shapes.get(name, ()),
                                           origin.get("bytes"))
            w.sky = carry(shapes, {n: list(wf.nodes[n].inputs) for n in wf.order}, known)
        return w.sky

    def diff(self, rid: str, name: str, check: Check | None = None) -> dict[str, Any]:
        """The cells of array ``name`` of replay ``rid`` whose values differ from its parent
        run's (a NaN equals any NaN), compared chunk by chunk: ``changed`` (their count) and
        ``mask`` (as a query's answer carries one, :func:`mask_json`). ``check`` is called
        before each chunk (as before a query's step, :data:`Check`: toward ``name``, at
        operator ``"diff"``), to stop a long comparison.

        Raises
        ------
        NotFound
            An unknown run, a run that is not a replay, its parent gone, or an array
            either run lacks.
        """
        w = self.warm(rid)
        loaded = w.run.loaded
        parent = loaded.info.get("parent")
        if not parent:
            raise NotFound(f"run {loaded.id} is not a replay (it has no parent run); a diff "
                           "compares a replay with the run it derives from")
        meta = self._array(w, name)
        try:
            self.catalog.run(parent)
        except SubZeroError:
            raise NotFound(f"run {loaded.id}'s parent run {parent} is no longer in the "
                           "home") from None
        theirs = self.catalog.arrays(parent).get(name)
        if theirs is None:
            raise NotFound(f"parent run {parent} of run {loaded.id} has no array {name!r}")
        shape = tuple(meta["shape"])
        if tuple(theirs["shape"]) != shape:
            raise QueryError(f"array {name!r} has shape {shape} in run {loaded.id} and "
                             f"{tuple(theirs['shape'])} in its parent {parent}")
        lin = changed_cells(loaded.array_path(name), layout.array_path(self.home, parent, name),
                            shape, tuple(meta["chunks"]),
                            None if check is None else functools.partial(check, name, "diff",
                                                                         0, ()))
        f = Frontier(shape, lin=lin)
        return {"run": loaded.id, "parent": parent, "array": name, "shape": list(shape),
                "changed": int(f.n), "mask": mask_json(f)}

    def _array(self, w: _Warm, name: Any) -> dict[str, Any]:
        arrays = w.run.loaded.arrays
        if not isinstance(name, str) or name not in arrays:
            shown = str(name)[:80]
            raise NotFound(f"run {w.run.id} has no array {shown!r} "
                           f"(arrays: {', '.join(arrays)})")
        return arrays[name]

    # -- tiles -----------------------------------------------------------------------------
    def tile(self, rid: str, name: str, z: int, ty: int, tx: int) -> bytes:
        """Tile ``(ty, tx)`` of array ``name`` at zoom ``z`` (each pixel 2**z cells per axis,
        nearest cell), contrast-stretched like ``subzero query --png``, as PNG."""
        w = self.warm(rid)
        meta = self._array(w, name)
        h, wd = view_shape(meta["shape"])
        if not (0 <= z <= MAX_ZOOM):
            raise CellError(f"zoom {z} is outside 0..{MAX_ZOOM}")
        f = 1 << z
        span = TILE * f
        ny, nx = -(-h // span), -(-wd // span)
        if not (0 <= ty < ny and 0 <= tx < nx):
            raise CellError(f"tile ({ty}, {tx}) at zoom {z} is outside array {name!r}: it has "
                            f"{ny} x {nx} tiles at that zoom")
        path = w.run.loaded.array_path(name)
        r0, c0 = ty * span, tx * span
        block = read_view(path, meta["shape"], (r0, min(h, r0 + span)),
                          (c0, min(wd, c0 + span)), f)
        lo, hi = self._stretch(w, path, meta)
        return png(grey(block, lo, hi))

    def values(self, rid: str, name: str, ty: int, tx: int) -> dict[str, Any]:
        """The cell values of block ``(ty, tx)`` (:data:`VALUE_BLOCK` cells a side) of array
        ``name``'s 2-D picture, for the readout under the cursor: ``{"rows": [r0, r1],
        "cols": [c0, c1], "values": rows of numbers}`` (NaN and infinities as null, text as
        strings)."""
        w = self.warm(rid)
        meta = self._array(w, name)
        h, wd = view_shape(meta["shape"])
        ny, nx = -(-h // VALUE_BLOCK), -(-wd // VALUE_BLOCK)
        if not (0 <= ty < ny and 0 <= tx < nx):
            raise CellError(f"value block ({ty}, {tx}) is outside array {name!r}: it has "
                            f"{ny} x {nx} blocks of {VALUE_BLOCK} x {VALUE_BLOCK} cells")
        r0, c0 = ty * VALUE_BLOCK, tx * VALUE_BLOCK
        r1, c1 = min(h, r0 + VALUE_BLOCK), min(wd, c0 + VALUE_BLOCK)
        block = np.asarray(read_view(w.run.loaded.array_path(name), meta["shape"], (r0, r1),
                                     (c0, c1)))
        if block.dtype.kind in "fc":
            vals = np.where(np.isfinite(block), block, np.nan).astype(object)
            vals[~np.isfinite(block)] = None
            values = [[None if v is None else float(v) for v in row] for row in vals]
        elif block.dtype.kind in "biu":
            values = block.tolist()
        else:
            values = [[str(v) for v in row] for row in block]
        return {"rows": [r0, r1], "cols": [c0, c1], "values": values}

    @staticmethod
    def _stretch(w: _Warm, path: Path, meta: Mapping[str, Any]) -> tuple[float, float]:
        """The 1st and 99.5th percentiles of the array (of a centred box of it when large:
        at most :data:`STRETCH_CELLS` cells, whatever its rank), so that every tile of one
        array shares one contrast."""
        key = (str(path), w.run.loaded.info.get("started"))
        if key in _CONTRAST:
            return _CONTRAST[key]
        shape = tuple(meta["shape"])
        if size_of(shape) <= STRETCH_CELLS:
            data = read_array(path)
        else:
            side = max(1, int(STRETCH_CELLS ** (1.0 / len(shape)) + 1e-9))
            lo = tuple(max(0, (s - side) // 2) for s in shape)
            data = read_box(path, Box(lo, tuple(min(s, a + side) for s, a in zip(shape, lo))))
        _CONTRAST[key] = stretch(data)
        return _CONTRAST[key]

    # -- queries ---------------------------------------------------------------------------
    def query(self, rid: str, spec: Mapping[str, Any], check: Check | None = None
              ) -> dict[str, Any]:
        """Answer one query given as the API's fields: ``direction``, ``from``, one of
        ``cells`` (``"r,c;r,c"`` or a list of coordinates), ``box`` (``"r0:r1,c0:c1"``),
        then ``to`` (an array), ``path`` (``"op:i,op:i"``) or neither (the workflow's inputs
        backward, its outputs forward), and ``method``. ``check``: see :data:`Check`."""
        t0 = time.perf_counter()
        w = self.warm(rid)
        results = self._query(w, spec, check)
        return answer(w.run, results[0].direction, results[0].start, results,
                      time.perf_counter() - t0)

    def _query(self, w: _Warm, spec: Mapping[str, Any], check: Check | None = None
               ) -> list[LineageResult]:
        direction = _direction(spec)
        start = _text(spec, "from")
        meta = self._array(w, start)
        cells = query_cells(spec, tuple(meta["shape"]))
        method = _text(spec, "method", required=False) or "auto"
        path = parse_path_spec(spec.get("path"))
        to = _text(spec, "to", required=False)
        if path is not None and to is not None:
            raise QueryError("give a path or a target (to), not both")
        if to is not None:
            self._array(w, to)
        scope = parse_scope(spec.get("scope") or "local")
        targets = [to] if (to or path) else default_targets(w.run, direction, start)
        return [w.qx.query(direction, cells, start, path, t, method, _hook(check, t), scope)
                for t in targets]

    def paths(self, rid: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The paths from ``from`` to ``to`` one by one (at most :data:`MAX_PATHS`, shortest
        first; ``truncated`` when there are more), for choosing one: each its steps, the
        arrays it goes through, a ``label`` naming what sets it apart from the others
        (:func:`subzero.query.paths.path_labels`) and whether it is ``global`` (it passes
        a whole-input step). Given start cells (``cells`` or ``box``, as a query takes
        them), each path also has the ``count`` of cells it reaches in ``to`` (the path is
        explicit, so its whole-input steps are taken)."""
        w = self.warm(rid)
        direction = _direction(spec)
        start, to = _text(spec, "from"), _text(spec, "to")
        meta = self._array(w, start)
        self._array(w, to)
        cells = None
        if spec.get("cells") is not None or spec.get("box") is not None:
            cells = query_cells(spec, tuple(meta["shape"]))
        method = _text(spec, "method", required=False) or "auto"
        wf = w.run.workflow
        found = simple_paths(wf, direction, start, to, limit=MAX_PATHS + 1)

        def whole(op: str, i: int) -> bool:
            return w.run.loaded.op(op).whole_input(i)

        out = []
        for steps, label in zip(found[:MAX_PATHS], path_labels(wf, found[:MAX_PATHS], whole)):
            through = [wf.nodes[op].inputs[i] if direction == "backward" else op
                       for op, i in steps]
            doc = {"steps": [list(s) for s in steps], "through": through, "label": label,
                   "global": any(whole(op, i) for op, i in steps)}
            if cells is not None:
                doc["count"] = self._path_count(w, direction, cells, start, steps, method)
            out.append(doc)
        return {"run": w.run.id, "direction": direction, "from": start, "to": to,
                "paths": out, "truncated": len(found) > MAX_PATHS}

    @staticmethod
    def _path_count(w: _Warm, direction: str, cells: Any, start: str,
                    steps: Sequence[tuple[str, int]], method: str) -> int:
        """The cells one path reaches, kept out of the query log (the optimizer's
        workload): the listing is not a query the user asked."""
        log, w.qx.log = w.qx.log, False
        try:
            return w.qx.query(direction, cells, start, list(steps), None, method).count
        finally:
            w.qx.log = log

    def named(self, rid: str, name: str, method: str = "auto", check: Check | None = None
              ) -> dict[str, Any]:
        """Named query ``name`` of the run (``check``: see :data:`Check`)."""
        t0 = time.perf_counter()
        w = self.warm(rid)
        res = self._named(w, name, method, check)
        doc = answer(w.run, res.direction, res.start, [res], time.perf_counter() - t0)
        doc["named"] = name
        return doc

    def _named(self, w: _Warm, name: Any, method: Any, check: Check | None = None
               ) -> LineageResult:
        """Named query ``name`` of the run, its cells chosen once and kept in the catalog
        (:mod:`subzero.query.named`); unknown: :class:`NotFound`."""
        if not isinstance(method, str):
            raise QueryError(f"method {str(method)[:40]!r}: expected a method name")
        try:
            q = named_query(w.run.workflow, str(name)[:128])
        except SubZeroError as e:
            raise NotFound(_first_line(e)) from None
        cells = start_cells(w.run, w.run.id, q.name, self.catalog)
        return w.qx.query(q.direction, cells, q.start, q.path, q.to, method,
                          _hook(check, q.to))

    def result_file(self, rid: str, spec: Mapping[str, Any], fmt: str,
                    check: Check | None = None) -> tuple[bytes, str]:
        """The mask a query reached in its one target, as ``.npy`` or FITS bytes, or as a
        ds9 region file (``reg``, :func:`subzero.serve.regions.mask_to_ds9`, over the
        array's 2-D picture, :func:`view_shape`) (``check``: see :data:`Check`)."""
        if fmt not in ("npy", "fits", "reg"):
            raise QueryError(f"format {str(fmt)[:20]!r}: expected npy, fits or reg")
        w = self.warm(rid)
        if spec.get("named"):
            res = self._named(w, spec["named"], spec.get("method") or "auto", check)
        else:
            if not (spec.get("to") or spec.get("path")):
                raise QueryError("a download needs one target: give to=ARRAY or path=...")
            res = self._query(w, spec, check)[0]
        mask = res.mask
        buf = io.BytesIO()
        if fmt == "npy":
            np.save(buf, mask, allow_pickle=False)
        elif fmt == "reg":
            buf.write(mask_to_ds9(mask, view_shape(mask.shape)).encode())
        else:
            from astropy.io import fits  # astropy only when a FITS file is asked for

            fits.PrimaryHDU(mask.astype(np.uint8)).writeto(buf)
        return buf.getvalue(), f"{res.run}-{res.direction}-{res.array}.{fmt}"


def _hook(check: Check | None, target: str | None
          ) -> Callable[[str, int, Sequence[Step]], None] | None:
    """``check`` for the walk toward ``target`` (the executor's ``before_step``)."""
    return None if check is None else functools.partial(check, target)


def default_targets(run: Run, direction: str, start: str) -> list[str]:
    """Backward: the workflow inputs ``start`` derives from; forward: the workflow outputs
    derived from it (``start`` itself excluded)."""
    wf = run.workflow
    reach, todo = set(), [start]
    if direction == "backward":
        while todo:
            a = todo.pop()
            for b in (wf.nodes[a].inputs if a in wf.nodes else ()):
                if b not in reach:
                    reach.add(b)
                    todo.append(b)
        out = [a for a in wf.inputs if a in reach]
    else:
        users: dict[str, list[str]] = {}
        for n, node in wf.nodes.items():
            for b in node.inputs:
                users.setdefault(b, []).append(n)
        while todo:
            a = todo.pop()
            for b in users.get(a, ()):
                if b not in reach:
                    reach.add(b)
                    todo.append(b)
        out = [n for n in wf.order if n in reach and n not in users]
    if not out:
        side = "input" if direction == "backward" else "output"
        raise QueryError(f"array {start!r} is a workflow {side}: nothing lies {direction} of it; "
                         "choose another array or a target")
    return out


def query_cells(spec: Mapping[str, Any], shape: tuple[int, ...]) -> Any:
    """A query's start cells from ``cells``, ``box`` or ``region`` (exactly one), checked
    against ``shape`` and :data:`MAX_QUERY_CELLS`. A region is ds9 region text in image
    coordinates over the array's 2-D picture (:func:`view_shape`,
    :mod:`subzero.serve.regions`)."""
    cells, box, region = spec.get("cells"), spec.get("box"), spec.get("region")
    if sum(v is not None for v in (cells, box, region)) != 1:
        raise QueryError("give exactly one of cells ('r,c;r,c'), box ('r0:r1,c0:c1') or "
                         "region (ds9 region text)")
    if region is not None:
        return region_cells(region, shape)
    if box is not None:
        if not isinstance(box, str):
            raise CellError(f"box {str(box)[:60]!r}: expected 'r0:r1,c0:c1'")
        b = Box.parse(box, shape)
        if not Box.full(shape).contains_box(b):
            raise CellError(f"box {box!r} is outside the array {shape}")
        if size_of(b.shape) > MAX_QUERY_CELLS:
            raise TooLarge(f"box {box!r} has {size_of(b.shape):,} cells; at most "
                           f"{MAX_QUERY_CELLS:,} per query")
        return b
    if isinstance(cells, str):
        arr = parse_cells(cells, shape)  # the text is bounded by the request's size
        if len(arr) > MAX_QUERY_CELLS:
            raise TooLarge(f"{len(arr):,} cells; at most {MAX_QUERY_CELLS:,} per query")
    else:
        if isinstance(cells, list) and len(cells) > MAX_QUERY_CELLS:
            raise TooLarge(f"{len(cells):,} cells; at most {MAX_QUERY_CELLS:,} per query")
        try:
            arr = np.asarray(cells)
        except ValueError:  # rows of different lengths
            arr = np.asarray([], dtype=object)
        if arr.ndim != 2 or arr.shape[1] != len(shape) or arr.dtype.kind not in "iu" \
                or not len(arr) or bool in set(map(type, itertools.chain.from_iterable(cells))):
            # (numpy reads true/false among numbers as 1/0: the types are looked at, in C)
            raise CellError(f"cells {str(cells)[:60]}: expected [[r, c], ...] with "
                            f"{len(shape)} integer coordinates each for the array {shape}")
        arr = arr.astype(np.int64)
    check_coords(arr, shape, "cells")
    return arr


def region_cells(text: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The coordinates of the cells ds9 region ``text`` selects in an array of ``shape``
    (over its 2-D picture), rasterised over the box its included regions span only."""
    if not isinstance(text, str):
        raise RegionError(f"region {str(text)[:60]!r}: expected ds9 region text")
    rows, cols = view_shape(shape)
    regions = parse_ds9(text)
    r0, r1, c0, c1 = win = window(regions, (rows, cols))
    if (r1 - r0) * (c1 - c0) > MAX_REGION_BOX:
        raise TooLarge(f"region spans {r1 - r0:,} x {c1 - c0:,} cells; at most "
                       f"{MAX_REGION_BOX:,} cells of box")
    rr, cc = np.nonzero(rasterise(regions, win))
    if not len(rr):
        raise CellError(f"region {text.strip()[:60]!r} holds no cell of the array {shape}")
    if len(rr) > MAX_QUERY_CELLS:
        raise TooLarge(f"region holds {len(rr):,} cells; at most {MAX_QUERY_CELLS:,} per "
                       "query")
    flat = (rr.astype(np.int64) + r0) * cols + (cc.astype(np.int64) + c0)
    if not shape:  # a scalar's one cell
        return np.zeros((len(flat), 0), dtype=np.int64)
    return np.column_stack(np.unravel_index(flat, shape)).astype(np.int64)


def parse_path_spec(path: Any) -> list[tuple[str, int]] | None:
    """``"op:i,op:i"`` (:func:`subzero.query.paths.parse_path`) or ``[[op, i], ...]`` ->
    steps (None when not given)."""
    if path in (None, "", []):
        return None
    if isinstance(path, str):
        return parse_path(path, "path")
    if isinstance(path, list) and all(isinstance(s, list) and len(s) == 2
                                      and isinstance(s[0], str) and isinstance(s[1], int)
                                      and not isinstance(s[1], bool) for s in path):
        return [(s[0], s[1]) for s in path]
    raise QueryError(f"path {str(path)[:60]!r}: expected 'op:i,op:i' or [[op, i], ...]")


def _direction(spec: Mapping[str, Any]) -> str:
    direction = spec.get("direction")
    if direction not in ("backward", "forward"):
        raise QueryError(f"direction {str(direction)[:40]!r}: expected backward or forward")
    return direction


def _text(spec: Mapping[str, Any], key: str, required: bool = True) -> Any:
    """Field ``key`` of a query: a non-empty string (None when absent and not required)."""
    value = spec.get(key)
    if value is None or value == "":
        if required:
            raise QueryError(f"{key}: required (an array name)")
        return None
    if not isinstance(value, str):
        raise QueryError(f"{key} {str(value)[:60]}: expected a string, not "
                         f"{type(value).__name__}")
    return value


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def iso_utc(t: Any) -> str | None:
    """A catalog time (seconds since the epoch) as ISO 8601 UTC (None stays None).

    >>> iso_utc(0)
    '1970-01-01T00:00:00Z'
    """
    if t is None:
        return None
    return datetime.fromtimestamp(float(t), timezone.utc).isoformat(
        timespec="seconds").replace("+00:00", "Z")


def origin_phrase(origin: Mapping[str, Any] | None) -> str:
    """An input's origin (:func:`subzero.engine.inputs.input_origins`) in a few words: a
    file's base name, ``generated`` for data the workflow made, ``not recorded`` for runs
    from before origins were recorded.

    >>> origin_phrase({"kind": "file", "path": "/data/calexp-0001.fits"})
    'calexp-0001.fits'
    >>> origin_phrase({"kind": "workflow", "description": "generated, seed 0"})
    'generated'
    """
    if not origin:
        return "not recorded"
    if origin.get("kind") == "file":
        return Path(str(origin.get("path", ""))).name
    return "generated"


def summary(op: Any) -> str:
    """The summary of an operator's class docstring (its first paragraph, on one line;
    empty when it has none)."""
    doc = type(op).__doc__ if op is not None else None
    if not isinstance(doc, str):
        return ""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def changed_cells(path: Path, parent_path: Path, shape: tuple[int, ...],
                  chunks: tuple[int, ...], before: Callable[[], None] | None = None
                  ) -> np.ndarray:
    """The sorted flat indices (uint64) of the cells whose values differ between the
    arrays at ``path`` and ``parent_path`` (same shape; a NaN equals any NaN), read one
    chunk box of both at a time (``before`` called before each). An array, or a chunk,
    that is the parent's own file (a replay links what it did not change) is not read."""
    if os.path.realpath(path) == os.path.realpath(parent_path):
        return np.empty(0, dtype=np.uint64)
    if not shape:  # a scalar: one cell
        a, b = read_array(path), read_array(parent_path)
        differs = bool(np.asarray(a != b)) and not bool((_isnan(a) & _isnan(b)).any())
        return np.zeros(int(differs), dtype=np.uint64)
    found = []
    for key in grid_keys(shape, chunks):
        if before is not None:
            before()
        mine, theirs = chunk_file(path, key), chunk_file(parent_path, key)
        try:
            if os.path.samefile(mine, theirs):
                continue
        except OSError:
            pass  # a chunk file absent (fill values) or a scalar's: compared by value
        lo = tuple(k * c for k, c in zip(key, chunks))
        box = Box(lo, tuple(min(s, a + c) for s, a, c in zip(shape, lo, chunks)))
        a, b = read_box(path, box), read_box(parent_path, box)
        diff = np.asarray(a != b)
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            diff &= ~(_isnan(a) & _isnan(b))
        if diff.any():
            where = np.nonzero(diff)
            found.append(np.ravel_multi_index(
                tuple(w + l for w, l in zip(where, lo)), shape).astype(np.uint64))
    if not found:
        return np.empty(0, dtype=np.uint64)
    return np.sort(np.concatenate(found))


def _isnan(a: np.ndarray) -> np.ndarray:
    return np.isnan(a) if a.dtype.kind in "fc" else np.zeros(a.shape, dtype=bool)


def read_view(path: Path, shape: Sequence[int], rows: tuple[int, int],
              cols: tuple[int, int], f: int = 1) -> np.ndarray:
    """Rows ``rows[0]:rows[1]:f`` by columns ``cols[0]:cols[1]:f`` of an array's 2-D picture
    (:func:`view_shape`), reading only the box of cells they lie in (with the store's damage
    checks): a vector is its one row; an array of more axes is read over the bounding box,
    along its leading axes, of the flat rows wanted."""
    shape = tuple(int(s) for s in shape)
    (r0, r1), (c0, c1) = rows, cols
    if not shape:
        return read_array(path).reshape(1, 1)
    step = None if f == 1 else (f,) * len(shape)
    if len(shape) == 1:
        return read_box(path, Box((c0,), (c1,)), step).reshape(1, -1)
    if len(shape) == 2:
        return read_box(path, Box((r0, c0), (r1, c1)), step)
    want = np.unravel_index(np.arange(r0, r1, f), shape[:-1])
    lo = tuple(int(a.min()) for a in want)
    hi = tuple(int(a.max()) + 1 for a in want)
    box = read_box(path, Box((*lo, c0), (*hi, c1)),
                   None if f == 1 else (1,) * (len(shape) - 1) + (f,))
    return box[tuple(a - l for a, l in zip(want, lo))]


def answer(run: Run, direction: str, start: str, results: list[LineageResult],
           elapsed_s: float) -> dict[str, Any]:
    """The API's answer: per target its count, its steps (each with the array it reached),
    the masks of the target and of every array along the way (of the local answer in local
    scope), its scope and the global dependencies it listed instead of following."""
    wf = run.workflow
    out = []
    for res in results:
        steps = []
        for s in res.steps:
            reached = wf.nodes[s.operator].inputs[s.input] if direction == "backward" \
                else s.operator
            steps.append({**s.to_json(), "reached": reached})
        out.append({"array": res.array, "shape": list(res.shape), "count": res.count,
                    "elapsed_s": res.elapsed_s, "steps": steps, "mask": mask_json(res.frontier),
                    "along": {a: mask_json(f) for a, f in res.along.items()},
                    "scope": res.scope, "global": [g.to_json() for g in res.global_deps]})
    return {"run": run.id, "direction": direction, "from": start, "results": out,
            "elapsed_s": elapsed_s}


def stretch(data: np.ndarray) -> tuple[float, float]:
    img = _numeric(data)
    finite = img[np.isfinite(img)]
    if not finite.size:
        return 0.0, 1.0
    lo, hi = (float(v) for v in np.percentile(finite, [1.0, 99.5]))
    if data.dtype == bool or hi <= lo:
        lo, hi = float(finite.min()), float(finite.max())
    return lo, (hi if hi > lo else lo + 1.0)


def _numeric(data: np.ndarray) -> np.ndarray:
    data = np.asarray(data)
    if data.dtype.kind in "OTUS":  # text: numbers where every cell is one, else non-empty
        text = data.astype(np.dtypes.StringDType())
        try:
            return text.astype(np.float64)
        except ValueError:
            return (np.strings.str_len(text) > 0).astype(np.float64)
    return data.astype(np.float64, copy=False)


def grey(block: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``block`` stretched to 0..255 (non-finite cells black)."""
    img = _numeric(block)
    g = np.clip((img - lo) * (255.0 / (hi - lo)), 0, 255)
    g[~np.isfinite(g)] = 0
    return np.ascontiguousarray(g.astype(np.uint8).reshape(img.shape[0], -1))


def png(img: np.ndarray) -> bytes:
    """A grey 2-D uint8 image as PNG bytes (fast compression: tiles are made per request)."""
    from PIL import Image  # Pillow (matplotlib's own dependency) only to encode tiles

    buf = io.BytesIO()
    Image.fromarray(img, mode="L").save(buf, format="PNG", compress_level=1)
    return buf.getvalue()
