"""What ``subzero serve`` answers, without HTTP: a home's runs kept warm (catalog, bound
workflows, shard readers, arrays' metadata), array tiles as PNG, and lineage queries whose
answers carry a compact mask of every array they reached.

One :class:`Explorer` lives on one thread (its catalog is a SQLite connection): the web
app (:mod:`subzero.serve.app`) hands every call to that thread.

Masks travel as runs of set cells in C order (``[start, length, start, length, ...]`` over
the flattened array): a star's few hundred cells are a few dozen runs, a whole array is one.

>>> rle(np.array([0, 1, 2, 7, 9, 10], dtype=np.uint64)).tolist()
[0, 3, 7, 1, 9, 2]
"""

from __future__ import annotations

import io
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from subzero.api import Run
from subzero.cells import Box, check_coords, parse_cells, size_of
from subzero.engine import layout
from subzero.engine.arrays import open_array, read_array, read_box
from subzero.engine.catalog import Catalog
from subzero.engine.runs import load_run
from subzero.errors import CellError, QueryError, StoreError, SubZeroError
from subzero.frontier import Frontier
from subzero.query import LineageResult, QueryExecutor
from subzero.query.paths import simple_paths

#: a tile's side in pixels
TILE = 256
#: the coarsest zoom level: each tile pixel stands for 2**MAX_ZOOM cells per axis
MAX_ZOOM = 12
#: the most cells one query may start from
MAX_QUERY_CELLS = 1_000_000
#: masks with more runs than this travel without their cells (the count still does)
MAX_RUNS = 1_000_000
#: the contrast stretch is taken from at most this many cells of an array
STRETCH_CELLS = 1 << 22

RUN_ID = re.compile(r"r[0-9]{1,9}|latest(:[A-Za-z0-9_.-]{1,64})?")
NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


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


@dataclass
class _Warm:
    """A run kept warm: its bound workflow, query executor and arrays' contrast."""

    run: Run
    qx: QueryExecutor
    stretch: dict[str, tuple[float, float]] = field(default_factory=dict)


class Explorer:
    """The runs of one home, for the web explorer (one thread only)."""

    def __init__(self, home: str | Path | None) -> None:
        self.home = layout.resolve_home(home)
        path = layout.catalog_path(self.home)
        if not path.is_file():
            raise StoreError(f"no SubZero home at {self.home} (no catalog {path.name}); "
                             "expected a home with runs (subzero run ... --home DIR)")
        self.catalog = Catalog(path)
        self._warm: dict[str, _Warm] = {}

    def close(self) -> None:
        for w in self._warm.values():
            w.qx.close()
        self.catalog.close()

    # -- runs ------------------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        keys = ("id", "workflow", "strategy", "status", "started", "runtime_s", "input_bytes",
                "lineage_bytes", "parent", "error")
        return [{k: r.get(k) for k in keys} for r in self.catalog.runs()]

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
            loaded = load_run(self.home, info["id"], catalog=self.catalog)
            run = Run(loaded, requested=rid)
            qx = QueryExecutor(loaded, catalog=self.catalog)
            w = self._warm[info["id"]] = _Warm(run, qx)
        return w

    def run_info(self, rid: str) -> dict[str, Any]:
        w = self.warm(rid)
        loaded, wf = w.run.loaded, w.run.workflow
        stats = self.catalog.op_stats(loaded.id)
        consumed = {a for node in wf.nodes.values() for a in node.inputs}
        arrays = []
        for name, a in loaded.arrays.items():
            arrays.append({"name": name, "shape": a["shape"], "dtype": a["dtype"],
                           "chunks": a["chunks"], "view": list(view_shape(a["shape"])),
                           "producer": name if name in wf.nodes else None,
                           "input": name in wf.inputs, "output": name not in consumed,
                           "stored_bytes": a.get("stored_bytes")})
        operators = []
        for name in wf.order:
            row, st = loaded.operators.get(name, {}), stats.get(name, {})
            operators.append({"name": name, "class": row.get("class"), "kind": row.get("kind"),
                              "inputs": list(wf.nodes[name].inputs),
                              "strategies": row.get("strategies", []),
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
                "arrays": arrays, "operators": operators, "named": named}

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
        r1, c1 = min(h, r0 + span), min(wd, c0 + span)
        if len(meta["shape"]) == 2:
            if f > 1:  # read every f-th row and column only
                block = np.asarray(open_array(path)[r0:r1:f, c0:c1:f])
            else:
                block = read_box(path, Box((r0, c0), (r1, c1)))
        else:
            block = read_array(path).reshape(h, wd)[r0:r1:f, c0:c1:f]
        lo, hi = self._stretch(w, name, path, meta)
        return png(grey(block, lo, hi))

    def _stretch(self, w: _Warm, name: str, path: Path, meta: Mapping[str, Any]
                 ) -> tuple[float, float]:
        """The 1st and 99.5th percentiles of the array (of a centred box of it when large),
        so that every tile of one array shares one contrast."""
        if name in w.stretch:
            return w.stretch[name]
        shape = tuple(meta["shape"])
        if size_of(shape) <= STRETCH_CELLS or len(shape) != 2:
            data = read_array(path)
        else:
            side = int(np.sqrt(STRETCH_CELLS))
            lo = tuple(max(0, (s - side) // 2) for s in shape)
            data = read_box(path, Box(lo, tuple(min(s, a + side) for s, a in zip(shape, lo))))
        w.stretch[name] = stretch(data)
        return w.stretch[name]

    # -- queries ---------------------------------------------------------------------------
    def query(self, rid: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Answer one query given as the API's fields: ``direction``, ``from``, one of
        ``cells`` (``"r,c;r,c"`` or a list of coordinates), ``box`` (``"r0:r1,c0:c1"``),
        then ``to`` (an array), ``path`` (``"op:i,op:i"``) or neither (the workflow's inputs
        backward, its outputs forward), and ``method``."""
        t0 = time.perf_counter()
        w = self.warm(rid)
        results = self._query(w, spec)
        return answer(w.run, results[0].direction, results[0].start, results,
                      time.perf_counter() - t0)

    def _query(self, w: _Warm, spec: Mapping[str, Any]) -> list[LineageResult]:
        direction = spec.get("direction")
        if direction not in ("backward", "forward"):
            raise QueryError(f"direction {str(direction)[:40]!r}: expected backward or forward")
        start = spec.get("from")
        meta = self._array(w, start)
        cells = query_cells(spec, tuple(meta["shape"]))
        method = spec.get("method") or "auto"
        path = parse_path_spec(spec.get("path"))
        to = spec.get("to") or None
        if path is not None and to is not None:
            raise QueryError("give a path or a target (to), not both")
        if to is not None:
            self._array(w, to)
        targets = [to] if (to or path) else default_targets(w.run, direction, start)
        return [w.qx.query(direction, cells, start, path, t, method) for t in targets]

    def paths(self, rid: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The paths from ``from`` to ``to`` one by one (at most 64, shortest first), for
        choosing one: each its steps and the arrays it goes through."""
        w = self.warm(rid)
        direction = spec.get("direction")
        if direction not in ("backward", "forward"):
            raise QueryError(f"direction {str(direction)[:40]!r}: expected backward or forward")
        start, to = spec.get("from"), spec.get("to")
        self._array(w, start)
        self._array(w, to)
        wf = w.run.workflow
        out = []
        for steps in simple_paths(wf, direction, start, to):
            through = [wf.nodes[op].inputs[i] if direction == "backward" else op
                       for op, i in steps]
            out.append({"steps": [list(s) for s in steps], "through": through})
        return {"run": w.run.id, "direction": direction, "from": start, "to": to,
                "paths": out}

    def named(self, rid: str, name: str, method: str = "auto") -> dict[str, Any]:
        t0 = time.perf_counter()
        w = self.warm(rid)
        q = w.run.workflow.queries.get(name) if isinstance(name, str) else None
        if q is None:
            known = ", ".join(w.run.workflow.queries) or "none"
            raise NotFound(f"workflow {w.run.workflow.name!r} has no named query "
                           f"{str(name)[:80]!r} (named queries: {known})")
        cells = w.run.named_query_cells(name)
        res = w.qx.query(q.direction, cells, q.start, q.path, q.to, method)
        doc = answer(w.run, q.direction, q.start, [res], time.perf_counter() - t0)
        doc["named"] = name
        return doc

    def result_file(self, rid: str, spec: Mapping[str, Any], fmt: str) -> tuple[bytes, str]:
        """The mask a query reached in its one target, as ``.npy`` or FITS bytes."""
        if fmt not in ("npy", "fits"):
            raise QueryError(f"format {str(fmt)[:20]!r}: expected npy or fits")
        w = self.warm(rid)
        if spec.get("named"):
            name = spec["named"]
            q = w.run.workflow.queries.get(name)
            if q is None:
                raise NotFound(f"no named query {str(name)[:80]!r}")
            res = w.qx.query(q.direction, w.run.named_query_cells(name), q.start, q.path,
                             q.to, spec.get("method") or "auto")
        else:
            if not (spec.get("to") or spec.get("path")):
                raise QueryError("a download needs one target: give to=ARRAY or path=...")
            res = self._query(w, spec)[0]
        mask = res.mask
        buf = io.BytesIO()
        if fmt == "npy":
            np.save(buf, mask, allow_pickle=False)
        else:
            from astropy.io import fits  # astropy only when a FITS file is asked for

            fits.PrimaryHDU(mask.astype(np.uint8)).writeto(buf)
        return buf.getvalue(), f"{res.run}-{res.direction}-{res.array}.{fmt}"


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
    """A query's start cells from ``cells`` or ``box`` (exactly one), checked against
    ``shape`` and :data:`MAX_QUERY_CELLS`."""
    cells, box = spec.get("cells"), spec.get("box")
    if (cells is None) == (box is None):
        raise QueryError("give exactly one of cells ('r,c;r,c') or box ('r0:r1,c0:c1')")
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
        if cells.count(";") >= MAX_QUERY_CELLS:
            raise TooLarge(f"at most {MAX_QUERY_CELLS:,} cells per query")
        arr = parse_cells(cells, shape)
    else:
        if isinstance(cells, list) and len(cells) > MAX_QUERY_CELLS:
            raise TooLarge(f"{len(cells):,} cells; at most {MAX_QUERY_CELLS:,} per query")
        try:
            arr = np.asarray(cells)
        except ValueError:  # rows of different lengths
            arr = np.asarray([], dtype=object)
        if arr.ndim != 2 or arr.shape[1] != len(shape) or arr.dtype.kind not in "iu" \
                or not len(arr):
            raise CellError(f"cells {str(cells)[:60]}: expected [[r, c], ...] with "
                            f"{len(shape)} integer coordinates each for the array {shape}")
        arr = arr.astype(np.int64)
    check_coords(arr, shape, "cells")
    return arr


def parse_path_spec(path: Any) -> list[tuple[str, int]] | None:
    """``"op:i,op:i"`` or ``[[op, i], ...]`` -> steps (None when not given)."""
    if path in (None, "", []):
        return None
    if isinstance(path, str):
        parts = [p.strip() for p in path.split(",") if p.strip()]
        out = []
        for part in parts:
            name, _, idx = part.partition(":")
            if not NAME.fullmatch(name) or not idx.isdigit():
                raise QueryError(f"path step {part[:60]!r}: expected op:index")
            out.append((name, int(idx)))
        return out
    if isinstance(path, list) and all(isinstance(s, list) and len(s) == 2
                                      and isinstance(s[0], str) and isinstance(s[1], int)
                                      for s in path):
        return [(s[0], s[1]) for s in path]
    raise QueryError(f"path {str(path)[:60]!r}: expected 'op:i,op:i' or [[op, i], ...]")


def answer(run: Run, direction: str, start: str, results: list[LineageResult],
           elapsed_s: float) -> dict[str, Any]:
    """The API's answer: per target its count, its steps (each with the array it reached)
    and the masks of the target and of every array along the way."""
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
                    "along": {a: mask_json(f) for a, f in res.along.items()}})
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
