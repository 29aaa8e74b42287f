"""Shared benchmark plumbing: argument parsing, timing, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a smaller, faster subset")
    p.add_argument("--out", help="write the figures as JSON to this file")
    return p


def positive_int(text: str) -> int:
    """A positive integer argument (argparse reports anything else in one line)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, list[float], Any]:
    """Median wall time of ``repeat`` calls, all times, and the last result."""
    times, res = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times, res


def warm(fn: Callable[[], Any], calls: int = 10, budget_s: float = 0.1) -> float:
    """Call ``fn`` until it ran ``calls`` times or for ``budget_s`` seconds (at least once:
    a slow call is warm after one run, a sub-millisecond one needs a few to reach steady
    state); returns the first call's time (the cold latency, reported beside the medians)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    for _ in range(calls - 1):
        if time.perf_counter() - t0 >= budget_s:
            break
        fn()
    return first


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "platform": platform.platform()}


def emit(doc: dict[str, Any], out: str | None) -> None:
    doc.setdefault("machine", machine())
    text = json.dumps(doc, indent=2, default=str)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
    print(text)


def grouped_log_bars(path: Path, groups: list[str], series: list[tuple[str, list[float]]],
                     title: str, ylabel: str = "query time (s, log)") -> None:
    """One PNG: for each group (a query) one bar per series (a strategy), log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(groups)), 3.8))
    width = 0.8 / max(1, len(series))
    for k, (label, ys) in enumerate(series):
        ax.bar(np.arange(len(groups)) + k * width, ys, width, label=label)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2)
    ax.set_xticklabels(groups)
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def overhead_bars(path: Path, rows: list[dict[str, Any]], title: str) -> None:
    """One PNG, two panels per strategy: workflow runtime and lineage bytes (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["strategy"] for r in rows]
    x = list(range(len(names)))
    fig, axes = plt.subplots(1, 2, figsize=(max(10.0, 1.2 * len(names)), 3.5))
    axes[0].bar(x, [r["runtime_s"] for r in rows], color="tab:blue")
    axes[0].set_ylabel("workflow runtime (s)")
    stored = [k for k, r in enumerate(rows) if r["lineage_bytes"] > 0]
    axes[1].bar(stored, [rows[k]["lineage_bytes"] / 1e6 for k in stored], color="tab:orange")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("lineage (MB, log)")
    for k in sorted(set(x) - set(stored)):  # nothing stored: say so, not a one-byte bar
        axes[1].annotate("none", (k, 0), xycoords=("data", "axes fraction"), xytext=(0, 4),
                         textcoords="offset points", ha="center", fontsize=8)
    for ax in axes:
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=30)
    fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
