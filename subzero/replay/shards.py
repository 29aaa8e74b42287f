"""A recomputed chunk's lineage shards, shared with the parent's where they came out the
same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from encoders.store import read_meta
from subzero.chunking import chunk_key
from subzero.engine.tasks import store_shards
from subzero.errors import StoreError

__all__ = ["store_shared"]


def _digest(home: Path, row: dict[str, Any], memo: dict[str, str | None]) -> str | None:
    """The pairs digest a parent's shard (its catalog ``row``) recorded (None: none, or
    unreadable), kept in ``memo`` by path."""
    path = row["path"]
    if path not in memo:
        try:
            memo[path] = read_meta(home / path).get("stats", {}).get("digest")
        except (StoreError, OSError, ValueError):
            memo[path] = None
    return memo[path]


def store_shared(home: Path, job: Any, full: Any, pay: Any,
                 parents: dict[tuple[str, str], dict[str, Any]],
                 digests: dict[str, str | None]) -> list[dict[str, Any]]:
    """Store a recomputed task's pairs, sharing the parent's shards that hold the same.

    A strategy whose pairs came out as the parent's shard of that chunk holds (equal
    digests, see :func:`encoders.layouts.pairs.pairs_digest`) is not written: its row is
    the parent's, pointing at the parent's files, like those of the chunks not
    recomputed.

    Parameters
    ----------
    home
        The home.
    job
        The task (:func:`subzero.engine.tasks.make_jobs`).
    full, pay
        Its captured pairs and payloads (:func:`subzero.engine.tasks.run_task`).
    parents
        The parent's shard rows of the operator, by (strategy, chunk key).
    digests
        The parent's shards' digests read so far, by path (filled in).

    Returns
    -------
    list of dict
        Each strategy's shard statistics (:func:`subzero.engine.tasks.store_shards`).
    """
    key = chunk_key(job.chunk.index)
    rows = {s.name: parents.get((s.name, key)) for s in job.strategies}
    same_as = {name: d for name, row in rows.items()
               if row is not None and (d := _digest(home, row, digests)) is not None}
    out = []
    for stats in store_shards(job, full, pay, same_as):
        row = rows.get(stats["strategy"])
        if stats.get("same") and row is not None:
            stats = {**row, "path": str(home / row["path"])}
        out.append(stats)
    return out
