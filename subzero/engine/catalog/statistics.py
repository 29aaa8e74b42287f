"""What the optimizer learns from in the catalog: each operator's profile in a run
(``op_stats``: times, tasks, cells and lineage sizes) and the costs measured per operator
and strategy (``statistics``: named figures)."""

from __future__ import annotations

from typing import Any

from subzero.engine.catalog.base import CatalogBackend


class Statistics(CatalogBackend):
    """Operator profiles and measured costs."""

    def set_op_stats(self, rid: str, op: str, **figures: Any) -> None:
        """Record operator ``op``'s profile in run ``rid``, replacing an earlier one whole.

        Parameters
        ----------
        rid, op : str
            The run and the operator.
        **figures
            Columns of ``op_stats`` (``status``, ``runtime_s``, ``pairs``, ...); those
            not given are NULL.
        """
        cols = ["run", "op", *figures]
        with self.tx() as db:
            db.execute(self._replace_sql("op_stats", ("run", "op"), cols),
                       (rid, op, *figures.values()))

    def op_stats(self, rid: str) -> dict[str, dict[str, Any]]:
        """The operator profiles of run ``rid``, by operator."""
        return {r["op"]: dict(r) for r in self.db.execute(
            "SELECT * FROM op_stats WHERE run = ?", (rid,))}

    def set_statistics(self, rid: str, op: str, strategy: str, values: dict[str, float]) -> None:
        """Record costs measured for operator ``op`` and ``strategy`` in run ``rid``
        (each replaces the figure of that name); not on a read-only catalog.

        Parameters
        ----------
        rid, op, strategy : str
            The run, the operator (``*`` for the run as a whole) and the strategy.
        values : dict of str to float
            The figures by name.
        """
        if self._skip("measured costs"):
            return
        with self.tx() as db:
            db.executemany(
                self._replace_sql("statistics", ("run", "op", "strategy", "key"),
                                  ("run", "op", "strategy", "key", "value")),
                [(rid, op, strategy, k, float(v)) for k, v in values.items()],
            )

    def statistics(self, rid: str | None = None) -> list[dict[str, Any]]:
        """The measured costs of run ``rid``, or of every run: rows of ``run``, ``op``,
        ``strategy``, ``key`` and ``value``."""
        if rid is None:
            rows = self.db.execute("SELECT * FROM statistics")
        else:
            rows = self.db.execute("SELECT * FROM statistics WHERE run = ?", (rid,))
        return [dict(r) for r in rows]
