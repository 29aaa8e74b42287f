"""Plots of the benchmarks' results, drawn at build time (matplotlib, Agg) for the
performance page.

:data:`PLOTS` maps a results file's stem (``astronomy`` for
``benchmarks/results/astronomy.json``) to the functions that draw it; each takes the parsed
document and returns a ``(title, figure)`` pair, or None when the document lacks what it
plots (an older or partial results file). :func:`draw` writes the figures as PNG files and
returns their paths and titles; :mod:`subzero_results` puts them in the file's section.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

Figure = Any
Plot = Callable[[dict[str, Any]], "tuple[str, Figure] | None"]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "figure.dpi": 100, "savefig.dpi": 100,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _records(doc: dict[str, Any], key: str, *fields: str) -> list[dict[str, Any]]:
    rows = doc.get(key)
    if not isinstance(rows, list):
        return []
    return [r for r in rows if isinstance(r, dict) and all(
        isinstance(r.get(f), (int, float, str)) for f in fields)]


def astronomy_strategies(doc: dict[str, Any]) -> tuple[str, Figure] | None:
    """Runtime and lineage bytes (over the input's) per strategy."""
    rows = _records(doc, "strategies", "strategy", "runtime_s", "lineage_bytes",
                    "input_bytes")
    if not rows:
        return None
    plt = _plt()
    names = [r["strategy"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 2.8), constrained_layout=True)
    a.bar(names, [r["runtime_s"] for r in rows], color="#4c72b0")
    a.set_ylabel("runtime (s)")
    a.set_title("run time per strategy")
    b.bar(names, [r["lineage_bytes"] / max(1, r["input_bytes"]) for r in rows],
          color="#dd8452")
    b.set_ylabel("lineage bytes / input bytes")
    b.set_yscale("symlog", linthresh=0.01)
    b.set_title("lineage size per strategy")
    for ax in (a, b):
        ax.tick_params(axis="x", labelrotation=30)
    return "Astronomy: runtime and lineage size per strategy", fig


def astronomy_queries(doc: dict[str, Any]) -> tuple[str, Figure] | None:
    """Each backward and forward query's median time, per strategy (log scale)."""
    rows = _records(doc, "strategies", "strategy")
    rows = [r for r in rows if isinstance(r.get("queries"), dict)]
    if not rows:
        return None
    queries = sorted({q for r in rows for q in r["queries"]})
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.3), layout="constrained")
    width = 0.8 / len(rows)
    for k, r in enumerate(rows):
        ys = [r["queries"].get(q, {}).get("median_s", float("nan")) for q in queries]
        ax.bar([i + k * width for i in range(len(queries))], ys, width, label=r["strategy"])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(queries))], queries)
    ax.set_yscale("log")
    ax.set_ylabel("median query time (s)")
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, ncols=len(rows),
               loc="outside lower center")
    return "Astronomy: query time per query and strategy", fig


def query_methods(doc: dict[str, Any]) -> tuple[str, Figure] | None:
    """One step's median time per access method and frontier size (log scale)."""
    rows = _records(doc, "one_step", "step", "method", "frontier", "median_s")
    if not rows:
        return None
    plt = _plt()
    labels = [f"{r['step']} {r.get('strategy') or r['method']}, {r['frontier']} cells"
              for r in rows]
    colors = {"map": "#55a868", "stored": "#4c72b0", "reexec": "#c44e52"}
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(rows) + 0.8), constrained_layout=True)
    ax.barh(range(len(rows)), [r["median_s"] for r in rows],
            color=[colors.get(r["method"], "#8172b3") for r in rows])
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("median time of one step (s); green map, blue stored, red re-execution")
    return "Query: one step's latency per method and frontier", fig


def scale_runtime(doc: dict[str, Any]) -> tuple[str, Figure] | None:
    """Runtime against cells per configuration: black box, subzero and numpy (log-log)."""
    rows = _records(doc, "configurations", "name", "cells")
    series = ("blackbox", "subzero", "numpy")
    rows = [r for r in rows if all(isinstance(r.get(s), dict) and isinstance(
        r[s].get("runtime_s"), (int, float)) for s in series)]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.2), constrained_layout=True)
    for ccds, marker, what in ((False, "o-", "one exposure"), (True, "s--", "CCDs")):
        part = sorted((r for r in rows if (r.get("ccds", 1) > 1) == ccds),
                      key=lambda r: r["cells"])
        if not part:
            continue
        for k, s in enumerate(series):
            ax.plot([r["cells"] for r in part], [r[s]["runtime_s"] for r in part], marker,
                    color=f"C{k}", label=f"{s}, {what}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cells per exposure (all CCDs)")
    ax.set_ylabel("runtime (s)")
    ax.legend(fontsize=7)
    return "Scale: runtime against size", fig


def replay_cases(doc: dict[str, Any]) -> tuple[str, Figure] | None:
    """A replay's time against a full re-run's, per case."""
    rows = _records(doc, "cases", "where", "full_rerun_s", "replay_s")
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 2.4), constrained_layout=True)
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["full_rerun_s"] for r in rows], 0.4, label="full re-run")
    ax.bar([x + 0.2 for x in xs], [r["replay_s"] for r in rows], 0.4, label="replay")
    ax.set_xticks(list(xs), [r["where"] for r in rows])
    ax.set_ylabel("median time (s)")
    ax.legend(fontsize=7)
    return "Replay: a replay against a full re-run", fig


def genomics_budgets(doc: dict[str, Any]) -> tuple[str, Figure] | None:
    """The optimizer's plans: lineage bytes stored and runtime per disk budget."""
    rows = _records(doc, "optimizer", "budget_mb", "lineage_bytes", "runtime_s")
    if not rows:
        return None
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 2.6), constrained_layout=True)
    budgets = [r["budget_mb"] for r in rows]
    a.plot(budgets, [r["lineage_bytes"] / 1e6 for r in rows], "o-", label="stored")
    a.plot(budgets, budgets, ":", color="grey", label="budget")
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("disk budget (MB)")
    a.set_ylabel("lineage (MB)")
    a.legend(fontsize=7)
    b.plot(budgets, [r["runtime_s"] for r in rows], "o-")
    b.set_xscale("log")
    b.set_xlabel("disk budget (MB)")
    b.set_ylabel("runtime (s)")
    return "Genomics: the optimizer's plans per disk budget", fig


#: the plots of each results file, by its stem
PLOTS: dict[str, tuple[Plot, ...]] = {
    "astronomy": (astronomy_strategies, astronomy_queries),
    "query": (query_methods,),
    "scale": (scale_runtime,),
    "replay": (replay_cases,),
    "genomics": (genomics_budgets,),
}


def draw(stem: str, doc: dict[str, Any], out: Path) -> list[tuple[Path, str]]:
    """Draw the plots of results file ``stem`` into ``out``: ``(png path, title)`` each.
    A file's name holds a digest of its data, so a changed result is a new image."""
    found = []
    digest = hashlib.sha256(repr(doc).encode()).hexdigest()[:10]
    for plot in PLOTS.get(stem, ()):
        got = plot(doc)
        if got is None:
            continue
        title, fig = got
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{stem}-{plot.__name__}-{digest}.png"
        for old in out.glob(f"{stem}-{plot.__name__}-*.png"):  # drawn from older results
            if old != path:
                old.unlink()
        fig.savefig(path)
        _plt().close(fig)
        found.append((path, title))
    return found
