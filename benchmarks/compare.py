#!/usr/bin/env python
"""Compare the figures of two versions of one benchmark, side by side.

    python benchmarks/compare.py --old A.json [A2.json ...] --new B.json [B2.json ...]
                                 [--worst 10] [--out FILE.json]

Each file is the JSON a ``bench_*.py --out`` wrote. Every numeric figure is keyed by its
path in the document (list items by their name, strategy, query... where they have one).
Headline figures are compared: medians, per-strategy and summary times, bytes, ratios and
speed-ups, not the raw per-repeat times behind a median. With several runs per side, each
side's figure is its best run (least time or bytes, highest speed-up), which filters the
noise of a shared machine without favouring either side. Prints, as JSON: how many figures,
the median of new/old (for speed-ups old/new, so above 1 is always "new is worse"), how
many are worse or better by more than ``--tolerance`` (default 10%), and the worst ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

_NAMES = ("name", "strategy", "query", "label", "method", "case", "encoding", "op", "operator",
          "family", "step", "box")
_TAGS = ("direction", "frontier", "cells", "fanin", "fanout", "payloads", "budget", "scale",
         "disk_budget_fraction", "max_runtime", "steps")
_FIGURES = ("median", "_s", "_ms", "speedup", "bytes", "ratio", "worst", "mean")
_HIGHER_IS_BETTER = ("speedup", "accuracy")


def flatten(doc: Any, path: str = "") -> dict[str, float]:
    """``{path: value}`` of every number in ``doc``."""
    out: dict[str, float] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.update(flatten(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            key = str(i)
            if isinstance(v, dict):
                name = next((str(v[n]) for n in _NAMES if isinstance(v.get(n), (str, int))),
                            None)
                tags = [f"{t}={v[t]}" for t in _TAGS
                        if t in v and not isinstance(v[t], (dict, list))]
                if name is not None or tags:
                    key = "/".join(([name] if name is not None else []) + tags)
            out.update(flatten(v, f"{path}[{key}]"))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        out[path] = float(doc)
    return out


def headline(key: str) -> bool:
    last = key.rsplit(".", 1)[-1]
    if "times[" in key or "machine" in key or last.startswith(("target", "paper")):
        return False
    return any(f in last for f in _FIGURES)


def higher_is_better(key: str) -> bool:
    return any(h in key.rsplit(".", 1)[-1] for h in _HIGHER_IS_BETTER)


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per figure, the best value over the runs that have it."""
    out: dict[str, float] = {}
    for run in runs:
        for k, v in run.items():
            if k not in out:
                out[k] = v
            else:
                out[k] = max(out[k], v) if higher_is_better(k) else min(out[k], v)
    return out


def compare(old: dict[str, float], new: dict[str, float], tolerance: float = 0.10,
            worst: int = 10) -> dict[str, Any]:
    rows = []
    for k in sorted(set(old) & set(new)):
        a, b = old[k], new[k]
        if not headline(k) or a <= 0 or b <= 0:
            continue
        r = a / b if higher_is_better(k) else b / a
        rows.append((r, k, a, b))
    rows.sort(reverse=True)
    ratios = [r for r, *_ in rows]
    return {
        "figures": len(rows),
        "median_new_over_old": statistics.median(ratios) if ratios else None,
        "worse": sum(r > 1 + tolerance for r in ratios),
        "better": sum(r < 1 / (1 + tolerance) for r in ratios),
        "tolerance": tolerance,
        "worst": [{"figure": k, "old": a, "new": b, "worse_by": r} for r, k, a, b in
                  rows[:worst]],
        "only_old": len(set(old) - set(new)), "only_new": len(set(new) - set(old)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", nargs="+", required=True, help="the old version's JSON file(s)")
    p.add_argument("--new", nargs="+", required=True, help="the new version's JSON file(s)")
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--worst", type=int, default=10, help="how many of the worst to list")
    p.add_argument("--out", help="also write the comparison to this file")
    args = p.parse_args()
    old = best([flatten(json.loads(Path(f).read_text())) for f in args.old])
    new = best([flatten(json.loads(Path(f).read_text())) for f in args.new])
    doc = compare(old, new, args.tolerance, args.worst)
    text = json.dumps(doc, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
