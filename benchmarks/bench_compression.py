#!/usr/bin/env python
"""How small FULL lineage gets in each Full encoding, against DSLog's Parquet baseline.

    python benchmarks/bench_compression.py [--quick] [--out FILE.json] [--png DIR]
                                           [--repeat N] [--workloads W,...]
                                           [--strategies S,...]

``--workloads`` (names or fragments: ``synthetic:cleaner``, ``astronomy:``) and
``--strategies`` (``full-compact-bwd``, ``parquet-zstd``, ...) measure a few rows while
developing an encoding; the results file is written from a run of everything.

For every workload the same FULL region pairs are stored (a) in every registered Full
encoding and direction (the registry of :mod:`encoders`, so a new one is picked up when it
is registered), through the project's own shard writer (``encoders.sink.write_shard``) and
queried through ``encoders.lookup``, and (b) as DSLog's baseline (ProvRC, 2024): a
column-store table of (output, input) linear cell indices, one Parquet file per operator
input, zstd-compressed by pyarrow with its default settings, rows sorted by output then
input, in the narrowest unsigned integer type that holds the indices. The baseline's write
time includes expanding the region pairs to cell pairs and sorting them. Its backward
queries filter on the output column with a pyarrow dataset filter
(``pc.field("out").isin(cells)``, which skips row groups by their statistics); its forward
queries filter on the input column the same way (no order to exploit: every row group is
read). Workloads whose cell pairs would exceed ``--max-parquet-pairs`` (a broadcast of a
global mean pairs every output with every input) have no Parquet row.

Reported per workload and encoding: bytes on disk, write time, backward and forward query
time for 1, 100 and 10,000 query cells (output cells with lineage, input cells that have
some; fewer when there are fewer), the input's bytes, and the ratios to the Parquet file and
to the input. Figures are medians of ``--repeat`` repeats; within a repeat every encoding
is written (and then queried) in turn, so machine drift affects all alike. Every
encoding's and Parquet's answer is asserted equal to the brute-force answer from the
pairs. Multi-input operators are queried on their input 0; their bytes cover every input.
An encoding's lookup that runs past ``QUERY_TIMEOUT_S`` is abandoned (its deadline raises
``LookupTimeout``) and reported as timed out (``timed_out``, the time left empty).

Workloads: every operator of the astronomy workflow on the real LSST exposures
($SUBZERO_DATA or ../shared/data), traced on the driver in FULL mode as one chunk
(``subzero.testing.run_chunked``: the pairs an engine task writes, one shard per operator);
every operator of the genomics workflow at scale 100; and synthetic ones on an image of the
exposures' shape and dtype: a cleaner (identity except 1% flagged pixels, which depend on
their 5 x 5 box), a 3 x 3 and a 9 x 9 stencil, a row reduction, a transpose and random
sparse pairs (a random tenth of the output cells, each on two random input cells).
``--quick``: generated 200 x 64 exposures, genomics at scale 1, a 200 x 64 image. An
encoding that raises while writing a workload is reported in its row (``error``) and
left out of that workload's queries.

Targets (the issue's, evaluated for FullCompact when it is registered): stencils, the
cleaner and the row reduction at least 100x smaller than Parquet and at most 0.05x their
input's bytes; the astronomy operators ``full-one`` stores at most 0.2x the exposures'
bytes; random sparse pairs no bigger than FullOne; query times no worse than FullOne's in
the same direction (the median ratio over workloads and query sizes within 10%).
"""

from __future__ import annotations

import itertools
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _common import emit, parser  # noqa: E402

import encoders  # noqa: E402,F401  (registers the encodings)
from encoders import lookup  # noqa: E402
from encoders.base import LookupTimeout  # noqa: E402
from encoders.registry import encodings  # noqa: E402
from encoders.sink import write_shard  # noqa: E402
from operators.base import box_neighbours  # noqa: E402
from subzero.cells import Box, Ragged, to_coords  # noqa: E402
from subzero.engine.layout import shard_spec  # noqa: E402
from subzero.lineage import PairBatch  # noqa: E402
from subzero.modes import STRATEGIES, Mode  # noqa: E402

QUERY_SIZES = (1, 100, 10_000)
#: the synthetic image: the LSST exposures' shape and pixel type
IMAGE_SHAPE, IMAGE_DTYPE = (2001, 513), np.dtype("uint16")
QUICK_SHAPE = (200, 64)
#: workloads the issue's size targets apply to (stencils, identity with exceptions,
#: reductions)
TARGETED = ("cleaner", "stencil3x3", "stencil9x9", "rowsum")
MAX_PARQUET_PAIRS = 100_000_000
#: a lookup running longer is abandoned (``LookupTimeout``) and reported as timed out
QUERY_TIMEOUT_S = 20.0
#: cell pairs expanded at a time (bounds the baseline's memory while it is written)
EXPAND_BLOCK = 8_000_000
_CHUNKS = itertools.count()


# ---------------------------------------------------------------------------------------
# workloads
# ---------------------------------------------------------------------------------------


@dataclass
class Workload:
    """One operator's FULL region pairs and what they describe."""

    name: str
    group: str  # astronomy | genomics | synthetic
    kind: str  # elementwise, stencil, reduction, ...
    operator: str
    pairs: PairBatch
    out_shape: tuple[int, ...]
    in_shapes: tuple[tuple[int, ...], ...]
    input_bytes: int
    input_dtypes: list[str] = field(default_factory=list)

    def cell_pairs(self) -> list[int]:
        """Cell pairs (output cell, input cell) per input, as the baseline stores them."""
        outs = self.pairs.out.lengths.astype(np.int64)
        return [int((outs * r.lengths).sum()) for r in self.pairs.ins]


_KINDS = {"Cast": "elementwise", "Copy": "elementwise", "MaskReplace": "elementwise",
          "Binary": "elementwise", "Logistic": "elementwise", "Classify": "elementwise",
          "Subarray": "subarray", "Transpose": "transpose", "Reduce": "reduction",
          "MeanBroadcast": "broadcast", "CosmicRayDetect": "identity-with-exceptions",
          "CosmicRayRemove": "identity-with-exceptions"}


def trace_workflow(wf: Any, arrays: dict[str, np.ndarray], group: str
                   ) -> Iterator[Workload]:
    """Run every operator of ``wf`` on the driver in FULL mode (one chunk), in order, and
    yield its pairs; ``arrays`` holds the inputs and receives every output."""
    from subzero.testing import run_chunked

    wf.validate()
    for name in wf.order:
        node, op = wf.nodes[name], wf.ops[name]
        ins = [arrays[s] for s in node.inputs]
        if Mode.FULL not in op.supported_modes():
            raise SystemExit(f"{group} operator {name} cannot trace FULL lineage")
        out, full, _ = run_chunked(op, ins, 1, (Mode.FULL,))
        arrays[name] = out
        if full is None or not len(full):
            continue
        yield Workload(f"{group}:{name}", group, _KINDS.get(type(op).__name__, "udf"),
                       type(op).__name__, full, tuple(op.out_shape),
                       tuple(tuple(s) for s in op.in_shapes),
                       int(sum(a.nbytes for a in ins)), [str(a.dtype) for a in ins])


def astronomy_workloads(quick: bool) -> tuple[Iterator[Workload], dict[str, Any]]:
    """The astronomy operators on the real exposures (generated small ones with
    ``quick``), and what the data is."""
    from workflows import astronomy
    from workflows.astro_data import load_exposure

    if quick:
        wf, real = astronomy.build(shape="x".join(map(str, QUICK_SHAPE)),
                                   data="generated"), None
    else:
        real = astronomy.real_inputs()
        if real is None:
            raise SystemExit("no real LSST exposures: set $SUBZERO_DATA (or put them in "
                             "../shared/data/lsst), or run with --quick")
        wf = astronomy.build(inputs=real)
    arrays = {n: (load_exposure(s.path) if s.path else np.asarray(s.source()))
              for n, s in wf.validate().inputs.items()}
    exposures = [n for n, s in wf.inputs.items() if not s.auxiliary]
    info = {"data": "real" if real else "generated",
            "files": sorted(real.values()) if real else None,
            "shape": list(arrays[exposures[0]].shape),
            "input_bytes": int(sum(arrays[n].nbytes for n in exposures)),
            "full_one_stores": sorted(n for n, ss in wf.plan("full-one").items()
                                      if any(s.stored for s in ss))}
    return trace_workflow(wf, arrays, "astronomy"), info


def genomics_workloads(quick: bool) -> tuple[Iterator[Workload], dict[str, Any]]:
    """The genomics operators at scale 100 (1 with ``quick``)."""
    from workflows import genomics

    scale = 1 if quick else 100
    wf = genomics.build(scale=scale).validate()
    arrays = {n: np.asarray(s.source()) for n, s in wf.inputs.items()}
    info = {"scale": scale, "data": wf.params["data"], "patients": wf.params["patients"]}
    return trace_workflow(wf, arrays, "genomics"), info


def synthetic_workloads(shape: tuple[int, int], seed: int = 0) -> Iterator[Workload]:
    """The issue's regular shapes and the random worst case on a ``shape`` image."""
    h, w = shape
    n = h * w
    nbytes = n * IMAGE_DTYPE.itemsize
    cells = np.arange(n, dtype=np.uint64)
    coords = to_coords(cells, shape)
    rng = np.random.default_rng(seed)

    def make(name: str, kind: str, pairs: PairBatch, out_shape: tuple[int, ...]) -> Workload:
        return Workload(f"synthetic:{name}", "synthetic", kind, name, pairs, out_shape,
                        (shape,), nbytes, [str(IMAGE_DTYPE)])

    flag = rng.random(n) < 0.01
    box = box_neighbours(coords[flag], (2, 2), shape)
    rest = Ragged.from_singletons(cells[~flag])
    yield make("cleaner", "identity-with-exceptions", PairBatch.concat([
        PairBatch(Ragged.from_singletons(cells[flag]), ins=(box,)),
        PairBatch(rest, ins=(rest,))]), shape)
    for r in (1, 4):
        yield make(f"stencil{2 * r + 1}x{2 * r + 1}", "stencil", PairBatch(
            Ragged.from_singletons(cells), ins=(box_neighbours(coords, (r, r), shape),)),
            shape)
    yield make("rowsum", "reduction", PairBatch(
        Ragged.from_singletons(np.arange(h, dtype=np.uint64)),
        ins=(Ragged(cells, np.arange(h + 1, dtype=np.int64) * w),)), (h, 1))
    src = (coords[:, 1] * h + coords[:, 0]).astype(np.uint64)  # out (j, i) <- in (i, j)
    order = np.argsort(src)
    yield make("transpose", "transpose", PairBatch(
        Ragged.from_singletons(src[order]), ins=(Ragged.from_singletons(cells[order]),)),
        (w, h))
    some = np.sort(rng.choice(n, n // 10, replace=False)).astype(np.uint64)
    picks = np.sort(rng.integers(0, n, (len(some), 2)), axis=1).astype(np.uint64)
    yield make("random", "random", PairBatch(Ragged.from_singletons(some),
                                             ins=(Ragged.from_dense(picks),)), shape)


# ---------------------------------------------------------------------------------------
# the encodings and the Parquet baseline
# ---------------------------------------------------------------------------------------


def full_variants() -> list[tuple[str, str, str]]:
    """``(encoding, direction, strategy)`` of every registered Full encoding, in the
    registry's order, for each direction it has a strategy for."""
    found = []
    for name, cls in encodings().items():
        if cls.payload:
            continue
        for s in STRATEGIES.values():
            if s.mode is Mode.FULL and s.encoding == name:
                found.append((name, s.direction.value, s.name))
    return found


def write_encoding(home: Path, strategy: str, w: Workload) -> tuple[float, dict[str, Any]]:
    """Store ``w``'s pairs as one shard of ``strategy``: seconds and the sink's stats."""
    from subzero.modes import Strategy

    spec = shard_spec(home, "bench", "op", Strategy.parse(strategy), (next(_CHUNKS),),
                      Box.full(w.out_shape), w.out_shape, w.in_shapes, 0)
    t = time.perf_counter()
    stats = write_shard(spec, w.pairs)
    return time.perf_counter() - t, stats


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting (numpy's hash-based unique is slower on these arrays)."""
    a = np.sort(a)
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def cell_pairs(pairs: PairBatch, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (output cell, input-``i`` cell) of ``pairs``, sorted by output then input,
    duplicates removed, in the narrowest unsigned type holding them."""
    out, ins = pairs.out, pairs.ins[i]
    top = max(int(out.values.max(initial=0)), int(ins.values.max(initial=0)))
    dtype = np.uint32 if top < 1 << 32 else np.uint64
    m, k = out.lengths.astype(np.int64), ins.lengths.astype(np.int64)
    sizes = m * k
    keys = []
    bounds = np.searchsorted(np.cumsum(sizes), np.arange(EXPAND_BLOCK, int(sizes.sum()),
                                                         EXPAND_BLOCK))
    for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(sizes)]):
        if b <= a:
            continue
        sz = sizes[a:b]
        row = np.repeat(np.arange(a, b, dtype=np.int64), sz)
        starts = np.zeros(len(sz), dtype=np.int64)
        np.cumsum(sz[:-1], out=starts[1:])
        t = np.arange(int(sz.sum()), dtype=np.int64) - np.repeat(starts, sz)
        o = out.values[out.offsets[row] + t // k[row]].astype(np.uint64)
        v = ins.values[ins.offsets[row] + t % k[row]].astype(np.uint64)
        keys.append((o << np.uint64(32)) | v if dtype is np.uint32 else np.stack([o, v], 1))
    if dtype is np.uint32:
        key = sorted_unique(np.concatenate(keys)) if keys else np.zeros(0, np.uint64)
        return (key >> np.uint64(32)).astype(np.uint32), (key & np.uint64(0xFFFFFFFF)
                                                          ).astype(np.uint32)
    both = np.unique(np.concatenate(keys), axis=0)
    return both[:, 0], both[:, 1]


def write_parquet(folder: Path, pairs: PairBatch) -> tuple[float, list[Path]]:
    """The baseline: one zstd Parquet file of (out, in) cell indices per input."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    paths = []
    for i in range(len(pairs.ins)):
        o, v = cell_pairs(pairs, i)
        path = folder / f"in{i}.parquet"
        pq.write_table(pa.table({"out": o, "in": v}), path, compression="zstd")
        paths.append(path)
    return time.perf_counter() - t, paths


def parquet_pairs(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The (out, in) columns of a baseline file, read back whole."""
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    return t.column("out").to_numpy(), t.column("in").to_numpy()


class ParquetReader:
    """Backward and forward lookups on a baseline file with dataset filters."""

    def __init__(self, path: Path) -> None:
        import pyarrow.dataset as ds

        self.ds = ds.dataset(str(path), format="parquet")

    def _lookup(self, key: str, value: str, cells: np.ndarray) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.compute as pc

        typ = self.ds.schema.field(key).type
        got = self.ds.to_table(columns=[value],
                               filter=pc.field(key).isin(pa.array(cells, type=typ)))
        return sorted_unique(got.column(value).to_numpy()).astype(np.uint64)

    def backward(self, out_lin: np.ndarray) -> np.ndarray:
        return self._lookup("out", "in", out_lin)

    def forward(self, in_lin: np.ndarray) -> np.ndarray:
        return self._lookup("in", "out", in_lin)

    def close(self) -> None:
        self.ds = None


def brute(pairs: PairBatch, cells: np.ndarray, i: int, backward: bool,
          sizes: tuple[int, int]) -> np.ndarray:
    """The answer from the pairs: sorted unique uint64 cells of the other side."""
    key, val = (pairs.out, pairs.ins[i]) if backward else (pairs.ins[i], pairs.out)
    mask = np.zeros(sizes[0] if backward else sizes[1], dtype=bool)
    mask[cells.astype(np.intp)] = True
    rows = np.flatnonzero(key.any_in(mask))
    return sorted_unique(val.take(rows).values).astype(np.uint64)


# ---------------------------------------------------------------------------------------
# measuring one workload
# ---------------------------------------------------------------------------------------


def _deadline() -> float:
    return time.perf_counter() + QUERY_TIMEOUT_S


def query_cells(w: Workload, seed: int = 0) -> dict[str, dict[int, np.ndarray]]:
    """Per query size, sorted output cells with lineage and input-0 cells that have some."""
    rng = np.random.default_rng(seed)
    out = {"backward": {}, "forward": {}}
    for side, values in (("backward", w.pairs.out.values), ("forward", w.pairs.ins[0].values)):
        have = sorted_unique(values)
        for n in QUERY_SIZES:
            out[side][n] = np.sort(rng.choice(have, min(n, len(have)), replace=False)
                                   ).astype(np.uint64)
    return out


def measure(w: Workload, home: Path, repeat: int, max_parquet: int,
            strategies: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Every Full encoding (those of ``strategies`` only, when given) and the baseline on
    ``w``: one row each."""
    variants = [(e, d, s) for e, d, s in full_variants()
                if strategies is None or s in strategies]
    cell_pairs_n = w.cell_pairs()
    with_parquet = sum(cell_pairs_n) <= max_parquet
    if with_parquet and (strategies is None or "parquet-zstd" in strategies):
        variants.append(("Parquet", "-", "parquet-zstd"))
    writes: dict[str, list[float]] = {s: [] for _, _, s in variants}
    kept: dict[str, Any] = {}
    failed: dict[str, str] = {}  # an encoding that raised while writing: why
    for r in range(repeat):
        for _, _, s in variants:
            if s in failed:
                continue
            if s == "parquet-zstd":
                folder = home / f"parquet-{next(_CHUNKS)}"
                dt, paths = write_parquet(folder, w.pairs)
                got = {"paths": paths, "folder": folder,
                       "disk_bytes": sum(p.stat().st_size for p in paths)}
            else:
                try:
                    dt, st = write_encoding(home, s, w)
                except Exception as e:  # reported in its row; the others go on
                    failed[s] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                    print(f"  {w.name}: {s} failed to write: {failed[s]}", file=sys.stderr)
                    continue
                got = {"path": st["path"], "folder": Path(st["path"]),
                       "disk_bytes": int(st["data_bytes"] + st["index_bytes"]),
                       "data_bytes": int(st["data_bytes"]),
                       "index_bytes": int(st["index_bytes"]),
                       "records": int(st.get("records", 0))}
            writes[s].append(dt)
            if s in kept:  # keep the last repeat's copy for the queries
                shutil.rmtree(kept[s]["folder"], ignore_errors=True)
            kept[s] = got
    failures = [{"name": f"{w.name}/{s}", "disk_bytes": None, "workload": w.name,
                 "encoding": e, "direction": d, "strategy": s, "error": failed[s]}
                for e, d, s in variants if s in failed]
    variants = [v for v in variants if v[2] not in failed]
    q = query_cells(w)
    sizes = (int(np.prod(w.out_shape)), int(np.prod(w.in_shapes[0])))
    readers: dict[str, Any] = {}
    look: dict[str, dict[str, Callable[[np.ndarray], np.ndarray]]] = {}
    for _, _, s in variants:
        if s == "parquet-zstd":
            rd = ParquetReader(kept[s]["paths"][0])
            look[s] = {"backward": rd.backward, "forward": rd.forward}
        else:
            rd = lookup.open_shard(kept[s]["path"])
            look[s] = {"backward": lambda c, rd=rd: rd.backward(c, 0, _deadline()),
                       "forward": lambda c, rd=rd: rd.forward(c, 0, _deadline())}
        readers[s] = rd
    times: dict[tuple[str, str, int], list[float]] = {}
    counts: dict[tuple[str, int], int] = {}
    slow: set[tuple[str, str, int]] = set()  # timed out once: not asked again
    try:
        for side in ("backward", "forward"):  # correctness, and warm every reader
            for n, cells in q[side].items():
                want = brute(w.pairs, cells, 0, side == "backward", sizes)
                counts[(side, n)] = len(want)
                for _, _, s in variants:
                    try:
                        got = np.asarray(look[s][side](cells)).astype(np.uint64)
                    except LookupTimeout:
                        slow.add((s, side, n))
                        continue
                    assert np.array_equal(got, want), (
                        f"{w.name}: {s} {side} of {len(cells)} cells answers {len(got)} "
                        f"cells, brute force {len(want)}")
        for _ in range(repeat):
            for _, _, s in variants:
                for side in ("backward", "forward"):
                    for n, cells in q[side].items():
                        if (s, side, n) in slow:
                            continue
                        t = time.perf_counter()
                        try:
                            look[s][side](cells)
                        except LookupTimeout:
                            slow.add((s, side, n))
                            continue
                        times.setdefault((s, side, n), []).append(time.perf_counter() - t)
    finally:
        for rd in readers.values():
            rd.close()
        for got in kept.values():
            shutil.rmtree(got["folder"], ignore_errors=True)
    parquet = kept.get("parquet-zstd", {}).get("disk_bytes")
    rows = []
    for enc, direction, s in variants:
        b = kept[s]["disk_bytes"]
        row: dict[str, Any] = {
            "name": f"{w.name}/{s}", "disk_bytes": b,
            "ratio_to_parquet": b / parquet if parquet else None,
            "ratio_to_input": b / w.input_bytes if w.input_bytes else None,
            "write_s": statistics.median(writes[s])}
        for side in ("backward", "forward"):
            for n in QUERY_SIZES:
                row[f"{side}_{n}_s"] = (None if (s, side, n) in slow
                                        else statistics.median(times[(s, side, n)]))
        row.update({"workload": w.name, "encoding": enc, "direction": direction,
                    "strategy": s, "input_bytes": w.input_bytes})
        for side in ("backward", "forward"):
            for n in QUERY_SIZES:
                row[f"{side}_{n}_cells"] = [len(q[side][n]), counts[(side, n)]]
        row["timed_out"] = sorted(f"{side}_{n}" for v, side, n in slow if v == s)
        for k in ("data_bytes", "index_bytes", "records"):
            if k in kept[s]:
                row[k] = kept[s][k]
        rows.append(row)
    return rows + failures


# ---------------------------------------------------------------------------------------
# targets and the plot
# ---------------------------------------------------------------------------------------


def _row(rows: list[dict[str, Any]], workload: str, strategy: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["workload"] == workload and r["strategy"] == strategy),
                None)


def targets(rows: list[dict[str, Any]], astro: dict[str, Any], encoding: str = "FullCompact"
            ) -> list[dict[str, Any]]:
    """The issue's targets for ``encoding`` (both its directions), as records with
    ``met``; none when it is not registered."""
    mine = [(d, s) for e, d, s in full_variants() if e == encoding]
    out: list[dict[str, Any]] = []
    for direction, s in mine:
        for name in TARGETED:
            r = _row(rows, f"synthetic:{name}", s)
            if r is None:
                continue
            if r.get("error"):
                out.append({"target": "stores the pairs", "workload": name, "strategy": s,
                            "value": None, "error": r["error"], "met": False})
                continue
            if r["ratio_to_parquet"] is not None:
                out.append({"target": "at least 100x smaller than Parquet", "workload": name,
                            "strategy": s, "value": r["ratio_to_parquet"], "limit": 0.01,
                            "met": r["ratio_to_parquet"] <= 0.01})
            out.append({"target": "at most 0.05x the input's bytes", "workload": name,
                        "strategy": s, "value": r["ratio_to_input"], "limit": 0.05,
                        "met": r["ratio_to_input"] <= 0.05})
        stored = [_row(rows, f"astronomy:{n}", s) for n in astro.get("full_one_stores", [])]
        if stored and all(stored):
            v = (None if any(r.get("error") for r in stored)
                 else sum(r["disk_bytes"] for r in stored) / astro["input_bytes"])
            out.append({"target": "astronomy (the operators full-one stores) at most 0.2x "
                                  "the exposures' bytes", "workload": "astronomy",
                        "strategy": s, "value": v, "limit": 0.2,
                        "met": v is not None and v <= 0.2})
        fo = f"full-one-{direction}"
        r, base = _row(rows, "synthetic:random", s), _row(rows, "synthetic:random", fo)
        if r and base and not r.get("error") and not base.get("error"):
            v = r["disk_bytes"] / base["disk_bytes"]
            out.append({"target": f"random sparse pairs no bigger than {fo}",
                        "workload": "random", "strategy": s, "value": v, "limit": 1.0,
                        "met": v <= 1.0})
        side = "backward" if direction == "bwd" else "forward"
        ratios = []
        for r in rows:
            if r["strategy"] != s:
                continue
            base = _row(rows, r["workload"], fo)
            for n in QUERY_SIZES:
                k = f"{side}_{n}_s"
                if base and r.get(k) is not None and base.get(k):
                    ratios.append(r[k] / base[k])
        if ratios:
            v = statistics.median(ratios)
            out.append({"target": f"{side} queries no slower than {fo} (median ratio over "
                                  "workloads and query sizes, 10% noise allowed)",
                        "workload": "all", "strategy": s, "value": v, "limit": 1.1,
                        "worst": max(ratios), "met": v <= 1.1})
    return out


def bytes_table(rows: list[dict[str, Any]], workloads: list[dict[str, Any]]
                ) -> list[dict[str, Any]]:
    """One record per workload: its input's bytes and each encoding's."""
    out = []
    for w in workloads:
        rec: dict[str, Any] = {"workload": w["name"], "input_bytes": w["input_bytes"]}
        for r in rows:
            if r["workload"] == w["name"]:
                rec[r["strategy"]] = r["disk_bytes"]
        out.append(rec)
    return out


def plot(rows: list[dict[str, Any]], workloads: list[dict[str, Any]], out_dir: str
         ) -> list[str]:
    """Bytes per encoding and workload (log scale), one panel per group of workloads, the
    input's bytes as a red tick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = list(dict.fromkeys(r["strategy"] for r in rows))
    groups = list(dict.fromkeys(w["group"] for w in workloads))
    fig, axes = plt.subplots(len(groups), 1, figsize=(14, 3.6 * len(groups)), squeeze=False)
    width = 0.85 / max(1, len(series))
    for ax, group in zip(axes[:, 0], groups):
        mine = [w for w in workloads if w["group"] == group]
        x = np.arange(len(mine))
        for k, s in enumerate(series):
            ys = [next((r["disk_bytes"] for r in rows
                        if r["workload"] == w["name"] and r["strategy"] == s), None)
                  for w in mine]
            ys = [np.nan if y is None else y for y in ys]
            ax.bar(x + k * width, ys, width, label=s,
                   color="black" if s == "parquet-zstd" else f"C{k}")
        mid = x + 0.425 - width / 2
        ax.scatter(mid, [w["input_bytes"] for w in mine], marker="_", s=300, color="red",
                   zorder=3, label="input bytes")
        ax.set_xticks(mid)
        ax.set_xticklabels([w["name"].split(":", 1)[1] for w in mine], rotation=40,
                           ha="right", fontsize=7)
        ax.set_xlim(-0.5, len(mine))
        ax.set_yscale("log")
        ax.set_ylabel("bytes on disk (log)")
        ax.set_title(group, fontsize=9)
    axes[0, 0].legend(fontsize=7, ncol=len(series) + 1, loc="lower center",
                      bbox_to_anchor=(0.5, 1.08))
    fig.suptitle("FULL lineage: bytes per encoding and workload")
    fig.tight_layout()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    path = str(Path(out_dir) / "compression.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


# ---------------------------------------------------------------------------------------


def run(quick: bool, repeat: int, max_parquet: int = MAX_PARQUET_PAIRS,
        groups: tuple[str, ...] = ("synthetic", "astronomy", "genomics"),
        shape: tuple[int, int] | None = None, only: tuple[str, ...] | None = None,
        strategies: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The benchmark's document (without the machine); ``groups`` and ``shape`` (the
    synthetic image's) let a test run a small part of it, ``only`` (workload names or
    name fragments: ``cleaner``, ``astronomy:``) and ``strategies`` (strategy names;
    ``parquet-zstd`` for the baseline) let a developer measure a few rows."""
    shape = shape or (QUICK_SHAPE if quick else IMAGE_SHAPE)
    tmp = Path(tempfile.mkdtemp(prefix="sz-bench-compress-"))
    rows: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    astro: dict[str, Any] = {}
    genomics: dict[str, Any] = {}
    t0 = time.perf_counter()
    sources: list[Iterator[Workload]] = []
    if "synthetic" in groups:
        sources.append(synthetic_workloads(shape))
    if "astronomy" in groups:
        it, astro = astronomy_workloads(quick)
        sources.append(it)
    if "genomics" in groups:
        it, genomics = genomics_workloads(quick)
        sources.append(it)
    try:
        for w in itertools.chain(*sources):
            if only and not any(o in w.name for o in only):
                continue
            t = time.perf_counter()
            got = measure(w, tmp, repeat, max_parquet, strategies)
            rows += got
            cp = w.cell_pairs()
            workloads.append({
                "name": w.name, "group": w.group, "kind": w.kind, "operator": w.operator,
                "region_pairs": len(w.pairs), "cell_pairs": int(sum(cp)),
                "input_bytes": w.input_bytes, "out_shape": list(w.out_shape),
                "in_shapes": [list(s) for s in w.in_shapes], "input_dtypes": w.input_dtypes,
                "parquet": "stored" if sum(cp) <= max_parquet
                else f"skipped: {sum(cp):.3g} cell pairs", "elapsed_s":
                    time.perf_counter() - t})
            print(f"{w.name:28s} {len(w.pairs):9d} pairs {sum(cp):14d} cell pairs  "
                  + "  ".join(f"{r['strategy']} {r['disk_bytes'] / 1e3:9.1f} kB"
                              if r["disk_bytes"] is not None else f"{r['strategy']} failed"
                              for r in got) + f"  ({time.perf_counter() - t:.1f} s)",
                  file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    variants = full_variants()
    return {
        "benchmark": "compression",
        "command": "python benchmarks/bench_compression.py"
                   + (" --quick" if quick else "") + f" --repeat {repeat}",
        "quick": quick, "repeat": repeat,
        "encodings": ", ".join(s for _, _, s in variants) + ", parquet-zstd",
        "compact_registered": any(e == "FullCompact" for e, _, _ in variants),
        "synthetic_shape": "x".join(map(str, shape)), "synthetic_dtype": str(IMAGE_DTYPE),
        "query_sizes": list(QUERY_SIZES), "queried_input": 0,
        "parquet": {"compression": "zstd (pyarrow default level)",
                    "columns": "out, in: narrowest unsigned integer type",
                    "order": "sorted by out, then in",
                    "backward": "pyarrow.dataset filter pc.field('out').isin(cells)",
                    "forward": "pyarrow.dataset filter pc.field('in').isin(cells)",
                    "max_cell_pairs": max_parquet},
        "astronomy": astro, "genomics": genomics,
        "bytes": bytes_table(rows, workloads), "targets": targets(rows, astro),
        "workloads": workloads, "rows": rows,
        "elapsed_s": time.perf_counter() - t0,
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--png", help="write compression.png (bytes per encoding and workload) "
                                 "into this folder")
    p.add_argument("--repeat", type=int, default=None,
                   help="repeats of every write and query (default 3, 1 with --quick)")
    p.add_argument("--max-parquet-pairs", type=int, default=MAX_PARQUET_PAIRS,
                   help="workloads with more cell pairs get no Parquet baseline")
    p.add_argument("--workloads", default=None,
                   help="comma-separated workload names or fragments to run (default: all; "
                        "e.g. cleaner,rowsum or astronomy:)")
    p.add_argument("--strategies", default=None,
                   help="comma-separated strategies to measure (default: every Full one "
                        "and parquet-zstd)")
    args = p.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    if repeat < 1:
        p.error(f"--repeat must be at least 1. Got {repeat}.")
    only = tuple(args.workloads.split(",")) if args.workloads else None
    strategies = tuple(args.strategies.split(",")) if args.strategies else None
    groups = ("synthetic", "astronomy", "genomics")
    if only:  # build only the groups a named workload can be in
        groups = tuple(g for g in groups
                       if any(o.startswith(g + ":") or ":" not in o for o in only))
    doc = run(args.quick, repeat, args.max_parquet_pairs, groups=groups, only=only,
              strategies=strategies)
    if args.png:
        doc["plots"] = plot(doc["rows"], doc["workloads"], args.png)
    emit(doc, args.out)


if __name__ == "__main__":
    main()
