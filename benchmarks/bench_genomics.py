#!/usr/bin/env python
"""The genomics benchmark (paper Figures 6 and 7) at x100 (9,600 patients).

    python benchmarks/bench_genomics.py [--quick] [--out FILE.json] [--png DIR]
    subzero bench genomics [--quick] [--out FILE.json] [--png DIR]

Figure 6: for each static strategy of Table II (blackbox, full-one, full-many, full-forw,
full-both, pay-one, pay-many, pay-both) the workflow's runtime and lineage bytes, and each
named query's time *static* (stored lineage used whenever the strategy has it, even with a
mismatched direction: `--method stored`) and *dynamic* (the query-time optimizer's choice).

Figure 7: the strategy optimizer under disk budgets of 1, 10, 20, 50 and 100 MB, planning for
the workload the static runs logged (an equal mix of the four queries) from the black-box
run's statistics: the strategies it chose, the real lineage bytes (never above the budget)
and the query times. All in one process on one Spark session; medians of repeats; ratios to
the `blackbox` strategy (UDFs re-executed, built-ins mapped). `--quick`: x10, fewer budgets.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, grouped_log_bars, overhead_bars, parser, timed, warm  # noqa: E402


from subzero.api import Run  # noqa: E402
from subzero.engine.runs import load_run
from subzero.engine.runner import run_workflow  # noqa: E402
from subzero.engine.spark import get_spark  # noqa: E402
from workflows import genomics  # noqa: E402

STATIC = ("blackbox", "full-one", "full-many", "full-forw", "full-both", "pay-one",
          "pay-many", "pay-both")
QUERIES = ("bad-hospital", "full", "high-likelihood", "relapse")
BUDGETS_MB = (1, 10, 20, 50, 100)


def time_queries(run: Run, repeat: int, methods: tuple[str, ...]) -> dict:
    out = {}
    for name in QUERIES:
        cells = run.named_query_cells(name)  # chosen from the data, not timed
        for method in methods:
            # warm (open shards, fill caches) without logging: every query of the workload
            # the optimizer reads is logged the same number of times
            qx = run.query_executor()
            qx.log = False
            try:
                first = warm(lambda: run.named_query(name, method, cells))
            finally:
                qx.log = True
            med, times, r = timed(lambda: run.named_query(name, method, cells), repeat)
            key = "dynamic" if method == "auto" else "static"
            out.setdefault(name, {})[key] = {
                "median_s": med, "times": times, "first_s": first, "count": r.count,
                "direction": r.direction,
                "methods": [f"{s.operator}:{s.method}" for s in r.steps]}
    return out


def plot(doc: dict, out: Path) -> None:
    rows = doc["static"]
    overhead_bars(out / "genomics_overhead.png", rows, "Genomics: overhead per strategy (Fig. 6a)")
    for key, title in (("static", "Fig. 6b: static"), ("dynamic", "Fig. 6c: dynamic")):
        grouped_log_bars(out / f"genomics_queries_{key}.png", list(QUERIES),
                         [(r["strategy"], [r["queries"][q][key]["median_s"] for q in QUERIES])
                          for r in rows], f"Genomics query costs ({title})")
    if doc.get("optimizer"):
        grouped_log_bars(
            out / "genomics_optimizer.png", list(QUERIES),
            [(f"SubZero{r['budget_mb']} ({r['lineage_bytes'] / 1e6:.1f} MB)",
              [r["queries"][q]["dynamic"]["median_s"] for q in QUERIES])
             for r in doc["optimizer"]], "Genomics: optimizer under disk budgets (Fig. 7)")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--png", help="write the plots into this folder")
    args = p.parse_args()
    scale = 10 if args.quick else 100
    repeat = 3 if args.quick else 5
    budgets = (1, 20, 100) if args.quick else BUDGETS_MB
    spark = get_spark()
    tmp = Path(tempfile.mkdtemp(prefix="sz-bench-genomics-"))
    static_rows, opt_rows, model = [], [], {}
    try:
        run_workflow(genomics.build(scale=1), tmp / "warm", strategy="pay-both", spark=spark)
        for strategy in STATIC:
            wf = genomics.build(scale=scale)
            res = run_workflow(wf, tmp, strategy=strategy, spark=spark)
            run = Run(load_run(tmp, res.run))
            queries = time_queries(run, repeat, ("stored", "auto"))
            if not model:  # the model is the same under every strategy
                (tp, fn), (fp, tn) = run.array("validate").tolist()
                model = {"data": run.workflow.params.get("data"),
                         "confusion_tp_fn_fp_tn": [tp, fn, fp, tn],
                         "training_accuracy": (tp + tn) / max(1, tp + fn + fp + tn),
                         "summary": genomics.summary(run)}
            static_rows.append({"strategy": strategy, "run": res.run, "runtime_s": res.runtime_s,
                                "input_bytes": res.input_bytes,
                                "lineage_bytes": res.lineage_bytes,
                                "operators": res.operators, "queries": queries})
        base = static_rows[0]
        try:
            from optimizer.plan import optimize
        except ImportError:
            optimize = None
        if optimize is not None:
            wf = genomics.build(scale=scale)
            for mb in budgets:
                budget = mb * 1_000_000
                plan = optimize(wf, tmp, run=base["run"], max_disk=budget, fallback=True)
                res = run_workflow(genomics.build(scale=scale), tmp, plan=plan.plan,
                                   max_disk=budget, spark=spark)
                run = Run(load_run(tmp, res.run))
                opt_rows.append({
                    "budget_mb": mb, "run": res.run, "plan": plan.plan,
                    "predicted_bytes": plan.totals.get("disk"), "runtime_s": res.runtime_s,
                    "lineage_bytes": res.lineage_bytes,
                    "within_budget": res.lineage_bytes <= budget,
                    "notes": plan.notes + [o["note"] for o in res.operators if o.get("note")],
                    "queries": time_queries(run, repeat, ("auto",))})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def ratio(row: dict, q: str, key: str) -> float:
        return row["queries"][q][key]["median_s"] / base["queries"][q]["dynamic"]["median_s"]

    summary = {
        "dynamic_worst_vs_blackbox": max(ratio(r, q, "dynamic") for r in static_rows
                                         for q in QUERIES),
        "static_worst_vs_blackbox": max(ratio(r, q, "static") for r in static_rows
                                        for q in QUERIES),
    }
    if opt_rows:
        top = opt_rows[-1]
        fwd = [q for q in QUERIES if top["queries"][q]["dynamic"]["direction"] == "forward"]
        bwd = [q for q in QUERIES if q not in fwd]
        summary.update({
            "budget_mb": top["budget_mb"],
            "forward_speedup_min": min(1 / ratio(top, q, "dynamic") for q in fwd),
            "backward_speedup_min": min(1 / ratio(top, q, "dynamic") for q in bwd),
            "all_within_budget": all(r["within_budget"] for r in opt_rows),
        })
    doc = {"benchmark": "genomics", "scale": scale, "patients": 96 * scale, "repeat": repeat,
           "model": model, "static": static_rows, "optimizer": opt_rows, "summary": summary,
           "targets": {"dynamic_worst_vs_blackbox_max": 1.5, "forward_speedup_min": 1000,
                       "backward_speedup_min": 3}}
    if args.png:
        plot(doc, Path(args.png))
    emit(doc, args.out)


if __name__ == "__main__":
    main()
