"""What lineage costs a UDF, by the way it is written (issue 41).

On a 2001 x 513 float32 image, in the driver (one process, the run's own chunking):

- a 3 x 3 median reporting lineage with one ``ctx.lwrite`` per pixel (``percell``), one
  ``ctx.lwrite_pairs`` call per block (``pairs``: stored as pairs under ``full-one``, as
  the boxes they are under ``full-compact``), the decorators' vectorized call
  (``cells``, stored as payloads under ``subzero``, as pairs under ``full-one`` and from
  its boxes under ``full-compact``), and declared as the stencil it is (``stencil``:
  nothing stored), against no lineage;
- a data-dependent cleaner (0.8 % of pixels flagged by a mask input, replaced by their
  5 x 5 median) declared FULL by hand (``lwrite_pairs``, or ``lwrite_box``: its boxes as
  they are) and through ``udf.cells`` (payloads, or pairs: as
  they are under ``full-one``, compressed under ``full-compact``), and as a black box.

Each row gives the run's wall time (its one operator, its lineage stored), the operator's
stage time, the time its lineage took to capture (``lwrite`` calls and their conversion,
the decorators' recording) and to store (summed over tasks), the lineage's bytes, and the
ratios to the black box's run and to the inputs' bytes: medians of ``--repeat`` runs taken
in alternation. ``calls`` times the per-cell loop alone (a million ``lwrite`` calls and their
conversion into pairs) beside the ``lwrite_pairs`` call it must match, and the time to
store each of the two batches as a FullOne shard.

    python benchmarks/bench_udf.py --out benchmarks/results/udf.json
    python benchmarks/bench_udf.py --only cleaner --repeat 10 --out benchmarks/results/udf.json

``--only PREFIX`` runs the cases whose name starts with ``PREFIX`` (and their black box)
and, when ``--out`` names an existing results file, replaces just those rows in it (the
other rows and the per-call figures are kept, ``partial_runs`` says which were redone).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import emit, parser

sys.path.insert(0, str(Path(__file__).resolve().parent))  # udf_cases, as a run records it

import udf_cases  # noqa: E402
from operators.base import box_neighbours  # noqa: E402
from subzero.cells import Box  # noqa: E402
from encoders.sink import write_shard  # noqa: E402
from subzero.engine import layout  # noqa: E402
from subzero.engine.catalog import Catalog  # noqa: E402
from subzero.engine.runner import run_workflow  # noqa: E402
from subzero.modes import FULL_ONE_BWD, Mode  # noqa: E402
from subzero.runtime import ChunkContext, TaskContext  # noqa: E402

STORE_PAIRS = 10  # alternating pairs of stores of the two batches

CASES = [  # (name, workflow kind, strategy, baseline)
    ("median per-cell lwrite", "percell", "full-one", "median-blackbox"),
    ("median lwrite_pairs", "pairs", "full-one", "median-blackbox"),
    ("median lwrite_pairs (compact)", "pairs", "full-compact", "median-blackbox"),
    ("median udf.cells (payloads)", "cells", "subzero", "median-blackbox"),
    ("median udf.cells (pairs)", "cells", "full-one", "median-blackbox"),
    ("median udf.cells (compact)", "cells", "full-compact", "median-blackbox"),
    ("median udf.stencil", "stencil", "subzero", "median-blackbox"),
    ("median black box", "median-blackbox", "blackbox", "median-blackbox"),
    ("cleaner FULL by hand", "cleaner-full", "full-one", "cleaner-blackbox"),
    ("cleaner FULL by hand (compact)", "cleaner-full", "full-compact", "cleaner-blackbox"),
    ("cleaner lwrite_box (compact)", "cleaner-box", "full-compact", "cleaner-blackbox"),
    ("cleaner udf.cells (payloads)", "cleaner-api", "subzero", "cleaner-blackbox"),
    ("cleaner udf.cells (pairs)", "cleaner-api", "full-one", "cleaner-blackbox"),
    ("cleaner udf.cells (compact)", "cleaner-api", "full-compact", "cleaner-blackbox"),
    ("cleaner black box", "cleaner-blackbox", "blackbox", "cleaner-blackbox"),
]


def one_run(kind: str, strategy: str, tmp: Path) -> dict[str, Any]:
    home = tmp / f"{kind}-{strategy}"
    shutil.rmtree(home, ignore_errors=True)
    res = run_workflow(udf_cases.workflow(kind), home, strategy=strategy, where="driver")
    cat = Catalog(home / "catalog.sqlite")
    try:
        st = cat.op_stats(res.run)["op"]
    finally:
        cat.close()
    shutil.rmtree(home, ignore_errors=True)
    return {"run_s": res.runtime_s, "runtime_s": st["runtime_s"], "capture_s": st["capture_s"],
            "store_s": st["store_s"], "lineage_bytes": st["lineage_bytes"],
            "input_bytes": res.input_bytes, "strategies": res.operators[0]["strategies"],
            "warnings": res.warnings}


def _store(batch: Any, ch: ChunkContext, tmp: Path) -> float:
    """Seconds to store ``batch`` as one FullOne backward shard."""
    spec = layout.shard_spec(tmp / "store", "r1", "op", FULL_ONE_BWD, ch.index, ch.out_box,
                             ch.out_shape, ch.in_shapes)
    shutil.rmtree(tmp / "store", ignore_errors=True)
    t = time.perf_counter()
    write_shard(spec, batch)
    took = time.perf_counter() - t
    shutil.rmtree(tmp / "store", ignore_errors=True)
    return took


def calls(repeat: int, tmp: Path) -> dict[str, Any]:
    """A million per-cell ``lwrite`` calls and their conversion into pairs, against one
    ``lwrite_pairs`` call with the same pairs; then each batch stored as a FullOne shard,
    alternately."""
    h, w = udf_cases.SHAPE
    box = Box((0, 0), (h, w))
    ch = ChunkContext((0, 0), box, (box,), (h, w), ((h, w),))
    per, vec, store_per, store_vec = [], [], [], []
    for _ in range(repeat):
        t = time.perf_counter()
        ctx = TaskContext(ch, frozenset({Mode.FULL}), "percell")
        for r in range(h):
            r0, r1 = max(r - 1, 0), min(r + 2, h)
            for c in range(w):
                ctx.lwrite((r, c), Box((r0, max(c - 1, 0)), (r1, min(c + 2, w))))
        a = ctx.full_pairs()
        per.append(time.perf_counter() - t)
        t = time.perf_counter()
        ctx2 = TaskContext(ch, frozenset({Mode.FULL}), "pairs")
        lin = box.linear((h, w))
        ctx2.lwrite_pairs(lin, box_neighbours(np.argwhere(np.ones((h, w), bool)), (1, 1),
                                              (h, w)))
        b = ctx2.full_pairs()
        vec.append(time.perf_counter() - t)
    _store(b, ch, tmp)  # warm: the first store of a process pays for its imports
    for k in range(STORE_PAIRS):  # alternating pairs, the order swapped each time
        for batch, times in ((a, store_per), (b, store_vec))[::1 if k % 2 else -1]:
            times.append(_store(batch, ch, tmp))
    same = (np.array_equal(a.out.values, b.out.values)
            and np.array_equal(a.ins[0].values, b.ins[0].values)
            and np.array_equal(a.ins[0].offsets, b.ins[0].offsets))
    return {"calls": h * w, "per_cell_s": statistics.median(per), "per_cell_all_s": per,
            "lwrite_pairs_s": statistics.median(vec), "lwrite_pairs_all_s": vec,
            "store_per_cell_s": statistics.median(store_per),
            "store_lwrite_pairs_s": statistics.median(store_vec),
            "store_per_cell_all_s": store_per, "store_lwrite_pairs_all_s": store_vec,
            "same_pairs": bool(same)}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="runs per case, alternated (3)")
    p.add_argument("--only", default=None,
                   help="run only the cases whose name starts with this (and their black "
                        "box), replacing their rows in an existing --out file")
    args = p.parse_args()
    repeat = 1 if args.quick else args.repeat
    cases = CASES
    if args.only:
        cases = [c for c in CASES if c[0].startswith(args.only)
                 or any(o[0].startswith(args.only) and o[3] == c[1] for o in CASES)]
        if not cases:
            p.error(f"--only matches no case. Got {args.only!r}.")
    tmp = Path(tempfile.mkdtemp(prefix="bench-udf-"))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in cases}
    try:
        for k in range(repeat):  # alternate: every case once per round, order reversed
            order = cases if k % 2 == 0 else cases[::-1]
            for name, kind, strategy, _ in order:
                runs[name].append(one_run(kind, strategy, tmp))
                print(f"{name}: {runs[name][-1]['run_s']:.2f} s", file=sys.stderr)
        per_call = None if args.only else calls(repeat, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {name: {key: statistics.median(r[key] for r in rs)
                  for key in ("run_s", "runtime_s", "capture_s", "store_s", "lineage_bytes")}
           for name, rs in runs.items()}
    table = []
    for name, kind, strategy, base in cases:
        base_name = next(n for n, k, _, _ in CASES if k == base)
        m, first = med[name], runs[name][0]
        table.append({
            "case": name, "strategy": strategy, "stored_as": first["strategies"],
            **m, "runtime_all_s": [r["runtime_s"] for r in runs[name]],
            "input_bytes": first["input_bytes"],
            "x_blackbox_run": m["run_s"] / med[base_name]["run_s"],
            "x_input_bytes": m["lineage_bytes"] / first["input_bytes"],
            "warned": bool(first["warnings"]),
        })
    doc = {"benchmark": "udf", "quick": args.quick, "repeat": repeat,
           "command": "python benchmarks/bench_udf.py --out benchmarks/results/udf.json",
           "shape": list(udf_cases.SHAPE), "table": table, "per_cell_calls": per_call}
    if args.only and args.out and Path(args.out).exists():
        doc = _merged(Path(args.out), table, args.only, repeat)
    emit(doc, args.out)


def _merged(path: Path, table: list[dict[str, Any]], only: str, repeat: int
            ) -> dict[str, Any]:
    """The results file at ``path`` with the rows of ``table`` replacing (or joining, in
    :data:`CASES` order) its rows of the same cases."""
    import json

    doc = json.loads(path.read_text())
    doc.pop("machine", None)  # emit records this machine
    rows = {r["case"]: r for r in doc.get("table", [])}
    rows.update({r["case"]: r for r in table})
    doc["table"] = [rows[n] for n, *_ in CASES if n in rows]
    redone = {r["case"] for r in table}  # an earlier partial run of these rows is gone
    doc["partial_runs"] = [p for p in doc.get("partial_runs", [])
                           if not set(p["cases"]) <= redone] + [{
        "command": f"python benchmarks/bench_udf.py --only '{only}' --repeat {repeat} "
                   f"--out {path}", "cases": sorted(redone), "repeat": repeat}]
    return doc


if __name__ == "__main__":
    main()
