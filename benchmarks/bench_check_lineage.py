#!/usr/bin/env python
"""The lineage checker's table: is every built-in and shipped UDF sound, and how tight?

    python benchmarks/bench_check_lineage.py [--quick] [--queries] [--out FILE.json]
    python benchmarks/bench_check_lineage.py --lies-only --out FILE.json

1. **Every built-in and shipped UDF** (``workflows.checkable.CHECKED``) through
   ``subzero.check_lineage`` on its default inputs (seed 0): per lineage mode, sound or not,
   forward/backward disagreements, and tightness: declared input cells against influential
   ones (whose change alone moves the output), summed over the sampled cells, and over the
   cells whose lineage is more than one cell (``wide``: what the identity cells dilute).
2. **Cosmic-ray candidates of the real LSST exposures** (``$SUBZERO_DATA`` or
   ``../shared/data``; skipped without them): how many candidates each kind of recorded
   lineage covers, and for a sample of each kind the declared cells now and before this
   change (the 13 x 13 box), the influential cells (the checker on a 40 x 40 crop around
   the pixel, COMP mode) and soundness.
3. With ``--queries`` (Spark, real exposures): what the tighter lineage does to queries
   through ``cr`` in a ``subzero`` run: BQ0/BQ2 (backward through ``cr1``/``cr2``), every
   flagged pixel of ``cr1`` one step back, and a 200 x 200 box of ``rmbg1`` forward to
   ``cr1``: cells and the fastest of 15 warm calls (the machine is shared).
4. **Deliberately wrong UDFs** (:mod:`workflows.lies`): the checker with its default
   options (as ``subzero check-lineage workflows.lies:NAME``: 24 samples, seed 0, a 60 s
   budget, each class's ``example_inputs``) on every lie and honest control: the kind of
   lie, the verdict, whether it was found (a lie unsound, a control sound), the samplers
   whose cells were unsound, the time, the perturbed runs and those skipped (raised).
   ``--lies-only`` runs this section alone and writes it into the ``--out`` file, keeping
   the file's other sections.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, machine, parser  # noqa: E402

import numpy as np  # noqa: E402

import subzero  # noqa: E402
from subzero.cells import Box  # noqa: E402
from subzero.engine.spark import get_spark  # noqa: E402
from workflows.astro_data import (EXPOSURE_FILES, SKY, data_dir, load_exposure,  # noqa: E402
                                  subtract_background)
from workflows.astro_udfs import (CR_RADIUS, SP_RADIUS, CosmicRayDetect, cr_cell_masks,  # noqa
                                  cr_lineage, cr_paths, lacosmic)
from workflows import lies  # noqa: E402
from workflows.checkable import CHECKED  # noqa: E402


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 2) if b else None


def bench_table(samples: int) -> list[dict]:
    rows = []
    for name in CHECKED:
        t = time.perf_counter()
        rep = subzero.check_lineage(name, samples=samples, seed=0)
        elapsed = time.perf_counter() - t
        for m in rep.modes:
            wide = [c for c in m.measured if c.declared > 1]
            wd, wi = sum(c.declared for c in wide), sum(c.influential or 0 for c in wide)
            w = m.widest
            rows.append({
                "operator": name, "mode": m.mode.value, "sound": m.sound,
                "unsound_cells": len(m.unsound), "disagreements": m.disagreements,
                "cells": len(m.cells), "declared": m.declared, "influential": m.influential,
                "tightness": _ratio(m.declared, m.influential),
                "wide_cells": len(wide), "wide_declared": wd, "wide_influential": wi,
                "wide_tightness": _ratio(wd, wi),
                "worst_cell": None if m.worst is None else round(m.worst, 2),
                "widest": None if w is None else {"cell": list(w.cell), "why": w.why,
                                                  "declared": w.declared,
                                                  "influential": w.influential},
                "influence_tried": round(m.influence_tried, 3), "seconds": round(elapsed, 2)})
        sound = all(m.sound for m in rep.modes)
        print(f"{name}: {'sound' if sound else 'UNSOUND'} in {elapsed:.1f} s", file=sys.stderr)
    return rows


def _sizes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Declared input cells of every candidate of one exposure: now, and the 13 x 13 box
    (clipped) recorded before."""
    op = CosmicRayDetect(sky=SKY)
    det = lacosmic(x, sky=SKY)
    cy, cx = np.nonzero(x > op.gate)
    paths = cr_paths(det, cy, cx, op.sigclip, op.sigfrac)
    masks = cr_cell_masks(det, x, cy, cx, op.gain, op.readnoise, op.sigclip, op.sigfrac)
    now = cr_lineage(np.stack([cy, cx], 1), paths, masks, x.shape).lengths
    h = np.minimum(cy + CR_RADIUS, x.shape[0] - 1) - np.maximum(cy - CR_RADIUS, 0) + 1
    w = np.minimum(cx + CR_RADIUS, x.shape[1] - 1) - np.maximum(cx - CR_RADIUS, 0) + 1
    return now, h * w


def _kinds(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The candidates of one exposure and the kind of lineage each records."""
    op = CosmicRayDetect(sky=SKY)
    det = lacosmic(x, sky=SKY)
    cy, cx = np.nonzero(x > op.gate)
    paths = cr_paths(det, cy, cx, op.sigclip, op.sigfrac)
    masks = cr_cell_masks(det, x, cy, cx, op.gain, op.readnoise, op.sigclip, op.sigfrac)
    flagged = det.mask[cy, cx]
    kind = np.where(flagged, "flagged", "")
    nbits = np.array([bin(int(m)).count("1") for m in masks])
    kind = np.where(~flagged & (masks != 0) & (nbits == 5), "rejected: cross", kind)
    kind = np.where(~flagged & (masks != 0) & (nbits > 5), "rejected: cross + median window",
                    kind)
    for r, label in ((SP_RADIUS, "rejected: low S' (9x9)"),
                     (SP_RADIUS + 1, "rejected: calm neighbours (11x11)"),
                     (CR_RADIUS, "rejected: other (13x13)")):
        kind = np.where(~flagged & (masks == 0) & (paths[:, 0] == r), label, kind)
    return cy, cx, kind


def bench_real(per_kind: int) -> dict | None:
    root = data_dir()
    if root is None or not all((root / f).exists() for f in EXPOSURE_FILES):
        print("real exposures not found: skipping the cosmic-ray section", file=sys.stderr)
        return None
    rng = np.random.default_rng(0)
    out: dict = {"exposures": [], "kinds": {}}
    samples: dict[str, list] = {}
    for f in EXPOSURE_FILES:
        x = subtract_background(load_exposure(root / f))
        cy, cx, kind = _kinds(x)
        now, before = _sizes(x)
        out["exposures"].append({
            "file": f, "candidates": int(len(cy)), "flagged": int((kind == "flagged").sum()),
            "declared_mean": round(float(now.mean()), 1),
            "declared_median": float(np.median(now)),
            "declared_before_mean": round(float(before.mean()), 1),
            "lineage_cells_total": int(now.sum()), "lineage_cells_total_before":
            int(before.sum())})
        print(f"real {f}: {len(cy)} candidates, declared mean {now.mean():.1f} (median "
              f"{np.median(now):.0f}) cells, was {before.mean():.1f}", file=sys.stderr)
        for k in np.unique(kind):
            idx = np.flatnonzero(kind == k)
            d = out["kinds"].setdefault(str(k), {"candidates": 0})
            d["candidates"] += int(len(idx))
            for j in rng.choice(idx, min(per_kind, len(idx)), replace=False):
                samples.setdefault(str(k), []).append((x, int(cy[j]), int(cx[j])))
    for k, cases in samples.items():
        decl, infl, before, sound = [], [], [], True
        for x, y, c in cases[:per_kind]:
            y0 = min(max(y - 20, 0), x.shape[0] - 40)
            x0 = min(max(c - 20, 0), x.shape[1] - 40)
            crop = x[y0:y0 + 40, x0:x0 + 40]
            rep = subzero.check_lineage("CosmicRayDetect", inputs=[crop],
                                        cells=[(y - y0, c - x0)], modes=["COMP"], seed=1)
            cell = rep.modes[0].cells[0]
            decl.append(cell.declared)
            infl.append(cell.influential)
            sound &= rep.sound
            h = min(y + CR_RADIUS, x.shape[0] - 1) - max(y - CR_RADIUS, 0) + 1
            w = min(c + CR_RADIUS, x.shape[1] - 1) - max(c - CR_RADIUS, 0) + 1
            before.append(h * w)
        d = out["kinds"][k]
        d.update({"checked": len(decl), "sound": sound,
                  "declared_median": statistics.median(decl),
                  "declared_before_median": statistics.median(before),
                  "influential_median": statistics.median(infl),
                  "declared": decl, "influential": infl,
                  "tightness": _ratio(sum(decl), sum(infl)),
                  "tightness_before": _ratio(sum(before), sum(infl))})
        print(f"real {k}: {d['candidates']} candidates; declared median "
              f"{d['declared_median']} (was {d['declared_before_median']}), influential "
              f"median {d['influential_median']}, sound {sound}", file=sys.stderr)
    return out


def bench_queries() -> dict | None:
    root = data_dir()
    if root is None or not all((root / f).exists() for f in EXPOSURE_FILES):
        return None
    home = Path(tempfile.mkdtemp(prefix="bench-check-lineage-"))
    try:
        get_spark("local[2]", home / "logs")
        run = subzero.Home(home).run("astronomy", strategy="subzero", quiet=True, data="real")
        flagged = np.argwhere(run.array("cr1"))
        queries = {
            "BQ0": lambda c=run.named_query_cells("BQ0"): run.named_query("BQ0", cells=c),
            "BQ2": lambda c=run.named_query_cells("BQ2"): run.named_query("BQ2", cells=c),
            "cr1 flagged, one step back": lambda: run.backward(flagged, start="cr1",
                                                               path=[("cr1", 0)]),
            "rmbg1 200x200 forward to cr1": lambda: run.forward(
                Box((500, 100), (700, 300)), start="rmbg1", path=[("cr1", 0)]),
        }
        out = {}
        for name, fn in queries.items():
            fn()
            times = []
            for _ in range(15):
                t = time.perf_counter()
                res = fn()
                times.append(time.perf_counter() - t)
            out[name] = {"cells": int(res.count), "fastest_ms": round(1000 * min(times), 2)}
            print(f"query {name}: {res.count} cells, {1000 * min(times):.2f} ms",
                  file=sys.stderr)
        return out
    finally:
        shutil.rmtree(home, ignore_errors=True)


def bench_lies(budget_s: float = 60.0) -> list[dict]:
    """Every lie and control of :mod:`workflows.lies` through the checker's defaults."""
    rows = []
    for name, kind, honest in ([(n, k, False) for n, k in lies.LIES.items()]
                               + [(n, k, True) for n, k in lies.CONTROLS.items()]):
        cls = getattr(lies, name)
        t = time.perf_counter()
        rep = subzero.check_lineage(f"workflows.lies:{name}", inputs=cls.example_inputs(0),
                                    budget_s=budget_s)
        elapsed = time.perf_counter() - t
        found = rep.sound if honest else not rep.sound
        rows.append({
            "udf": name, "kind": kind, "honest": honest,
            "verdict": rep.verdict().split(":")[0], "found": found,
            "modes": [m.mode.value for m in rep.modes],
            "unsound_cells": sum(len(m.unsound) for m in rep.modes),
            "cells": sum(len(m.cells) for m in rep.modes),
            "found_by": sorted({c.why for m in rep.modes for c in m.unsound}),
            "seconds": round(elapsed, 2),
            "perturbed_runs": sum(m.runs for m in rep.modes),
            "skipped": sum(m.failed_runs for m in rep.modes),
            "cut": [c for m in rep.modes for c in m.cut]})
        print(f"lie {name}: {rows[-1]['verdict']} ({'found' if found else 'MISSED'}) in "
              f"{elapsed:.1f} s", file=sys.stderr)
    return rows


def main() -> None:
    p = parser(__doc__.splitlines()[1])
    p.add_argument("--queries", action="store_true",
                   help="also time queries through cr on a real run (starts Spark)")
    p.add_argument("--lies-only", action="store_true",
                   help="run only the deliberately wrong UDFs and write them into the --out "
                        "file under 'lies', keeping its other sections")
    args = p.parse_args()
    if args.lies_only:
        old = Path(args.out) if args.out else None
        doc = json.loads(old.read_text()) if old is not None and old.exists() else {
            "benchmark": "check_lineage"}
        doc["lies"] = bench_lies()
        doc["lies_command"] = ("python benchmarks/bench_check_lineage.py --lies-only --out "
                               "benchmarks/results/check_lineage.json")
        doc["lies_machine"] = machine()
        emit(doc, args.out)
        return
    doc: dict = {"benchmark": "check_lineage", "quick": args.quick,
                 "command": "python benchmarks/bench_check_lineage.py --queries --out "
                            "benchmarks/results/check_lineage.json"}
    doc["table"] = bench_table(12 if args.quick else 24)
    doc["real_cosmic_rays"] = bench_real(3 if args.quick else 8)
    doc["lies"] = bench_lies()
    if args.queries:
        doc["queries"] = bench_queries()
        # the same section at 825969d (the 13 x 13 box for every candidate), for comparison
        doc["queries_before"] = {"BQ0": {"cells": 1690, "fastest_ms": 1.49},
                                 "BQ2": {"cells": 1690, "fastest_ms": 1.43},
                                 "cr1 flagged, one step back": {"cells": 21635,
                                                                "fastest_ms": 1.89},
                                 "rmbg1 200x200 forward to cr1": {"cells": 40014,
                                                                  "fastest_ms": 2.08}}
    emit(doc, args.out)


if __name__ == "__main__":
    main()
