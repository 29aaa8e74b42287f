"""Lineage shards in the catalog: one row per shard a task published (where its files are,
their sizes and checksum, what it holds), by run, operator, strategy and chunk."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from subzero.engine.catalog.base import CatalogBackend

#: the columns of a ``shards`` row, in the table's order
SHARD_COLUMNS = ("run", "op", "strategy", "chunk", "path", "data_bytes", "index_bytes",
                 "pairs", "out_cells", "in_cells", "fanin", "fanout", "encode_s", "attempt",
                 "checksum")


def shard_row(op: str, s: dict[str, Any], home: Path) -> dict[str, Any]:
    """The catalog row (:meth:`Shards.add_shards`) of a shard a task published, ``s`` the
    task's description of it (its path made relative to the home).

    Parameters
    ----------
    op : str
        The operator whose lineage the shard holds.
    s : dict
        The task's description: ``strategy``, ``chunk`` and ``path``, and the figures
        it measured.
    home : pathlib.Path
        The SubZero home.

    Returns
    -------
    dict
        The row but its run; figures the task did not give are 0 or None.

    Examples
    --------
    >>> row = shard_row("blur", {"strategy": "full_one_bwd", "chunk": "0.1",
    ...                          "path": "/h/runs/r1/lineage/blur/0.1"}, Path("/h"))
    >>> row["path"], row["pairs"], row["checksum"]
    ('runs/r1/lineage/blur/0.1', 0, None)
    """
    return {"op": op, "strategy": s["strategy"], "chunk": s["chunk"],
            "path": os.path.relpath(s["path"], home),
            "data_bytes": s.get("data_bytes", 0), "index_bytes": s.get("index_bytes", 0),
            "pairs": s.get("pairs", 0), "out_cells": s.get("out_cells", 0),
            "in_cells": s.get("in_cells", 0), "fanin": s.get("fanin"),
            "fanout": s.get("fanout"), "encode_s": s.get("encode_s"),
            "attempt": s.get("attempt", 0), "checksum": s.get("checksum")}


class Shards(CatalogBackend):
    """The lineage shards of runs."""

    def add_shards(self, rid: str, rows: list[dict[str, Any]]) -> None:
        """Record published shards; a retried task's shard replaces the earlier attempt's.

        Parameters
        ----------
        rid : str
            The run.
        rows : list of dict
            The shards' rows (:func:`shard_row`); a row without ``checksum`` has none.
        """
        if not rows:
            return
        with self.tx() as db:
            db.executemany(
                self._replace_sql("shards", ("run", "op", "strategy", "chunk"), SHARD_COLUMNS,
                                  named=True),
                [{"run": rid, "checksum": None, **r} for r in rows],
            )

    def shards(self, rid: str, op: str | None = None, strategy: str | None = None
               ) -> list[dict[str, Any]]:
        """The shards of run ``rid``, of one operator or strategy if given, ordered by
        operator, strategy and chunk.

        Parameters
        ----------
        rid : str
            The run.
        op, strategy : str, optional
            Only this operator's, or this strategy's.

        Returns
        -------
        list of dict
            The shards' rows.
        """
        q, args = "SELECT * FROM shards WHERE run = ?", [rid]
        if op is not None:
            q, args = q + " AND op = ?", args + [op]
        if strategy is not None:
            q, args = q + " AND strategy = ?", args + [strategy]
        return [dict(r) for r in self.db.execute(q + " ORDER BY op, strategy, chunk", args)]
