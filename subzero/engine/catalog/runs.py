"""Runs in the catalog: each run's row and status, and the runs derived from it (their
arrays and operators: :mod:`.contents`).

A run is ``running`` from :meth:`Runs.create_run` until :meth:`Runs.finish_run`; one
whose process ended first is marked ``failed`` the next time a writable catalog is
opened on its host (:meth:`Runs.reap_stale_runs`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from subzero.engine.catalog.base import CatalogBackend, loads
from subzero.errors import CatalogError

#: the next run's number: after every run listed and every run removed, so that a removed
#: run's id is never given to another run
_NEXT_SEQ = ("SELECT MAX(s) + 1 FROM (SELECT COALESCE(MAX(seq), 0) AS s FROM runs "
             "UNION ALL SELECT COALESCE(MAX(seq), 0) FROM removed_runs) AS seqs")


def _proc_start(pid: int) -> str | None:
    """Start time of a process (Linux /proc), to tell a live run from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` is still the one that started at ``start``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = _proc_start(pid)
    return start is None or now is None or now == start


def _run_row(row: Any) -> dict[str, Any]:
    """A ``runs`` row as a dict, its JSON columns decoded."""
    d = dict(row)
    for k in ("params", "plan", "chunking", "derivation", "placement"):
        d[k] = loads(d.get(k))
    return d


class Runs(CatalogBackend):
    """Runs, their status and the runs derived from them."""

    def _recover(self) -> None:
        """Mark the runs whose process is gone failed (see :meth:`reap_stale_runs`)."""
        super()._recover()
        self.reap_stale_runs()

    # -- runs ------------------------------------------------------------------------------
    def create_run(
        self,
        workflow: str,
        params: dict[str, Any],
        strategy: str | None,
        plan: dict[str, list[str]],
        master: str | None = None,
        chunking: Any = None,
        placement: dict[str, Any] | None = None,
        manifest: str | None = None,
    ) -> str:
        """Record a new ``running`` run of this process.

        Parameters
        ----------
        workflow : str
            The workflow's name.
        params : dict
            Its parameters.
        strategy : str or None
            The lineage strategy asked for.
        plan : dict
            Each operator's lineage modes.
        master : str, optional
            The Spark master.
        chunking : Any, optional
            The chunking asked for (JSON).
        placement : dict, optional
            Where the run executes and why (:mod:`subzero.engine.placement`).
        manifest : str, optional
            The SHA-256 of the run's manifest.

        Returns
        -------
        str
            The run's id (``r1``, ``r2``, ...), never one a removed run had.
        """
        pid = os.getpid()
        with self.tx() as db:
            seq = db.execute(_NEXT_SEQ).fetchone()[0]
            rid = f"r{seq}"
            db.execute(
                "INSERT INTO runs (id, seq, workflow, params, strategy, plan, status, pid, "
                "pid_start, host, master, chunking, started, placement, manifest) "
                "VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, seq, workflow, json.dumps(params, default=str), strategy,
                 json.dumps(plan), pid, _proc_start(pid), socket.gethostname(), master,
                 json.dumps(chunking), time.time(),
                 None if placement is None else json.dumps(placement), manifest),
            )
        return rid

    def finish_run(self, rid: str, status: str, error: str | None = None, **figures: Any) -> None:
        """Record the end of run ``rid``.

        Parameters
        ----------
        rid : str
            The run.
        status : str
            ``complete`` or ``failed``.
        error : str, optional
            Why it failed.
        **figures
            Other columns of ``runs`` to set (``runtime_s``, ``lineage_bytes``, ...).
        """
        cols = {"status": status, "finished": time.time(), "error": error, **figures}
        sets = ", ".join(f"{k} = ?" for k in cols)
        with self.tx() as db:
            db.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*cols.values(), rid))

    def reap_stale_runs(self) -> list[str]:
        """Mark ``running`` runs of this host whose process is gone as ``failed``.

        Returns
        -------
        list of str
            The runs marked.
        """
        host = socket.gethostname()
        rows = self.db.execute(
            "SELECT id, pid, pid_start FROM runs WHERE status = 'running' AND host = ?", (host,)
        ).fetchall()
        dead = [r["id"] for r in rows if r["pid"] is None or not _alive(r["pid"], r["pid_start"])]
        if dead:
            with self.tx() as db:
                for rid in dead:
                    db.execute(
                        "UPDATE runs SET status = 'failed', error = ? "
                        "WHERE id = ? AND status = 'running'",
                        ("interrupted: its process ended before the run completed", rid),
                    )
        return dead

    def run(self, rid: str) -> dict[str, Any]:
        """A run's row by id (``r3``); ``latest`` (or ``last``) is the newest complete run,
        ``latest:WORKFLOW`` the newest complete run of that workflow.

        Parameters
        ----------
        rid : str
            The run's id, ``latest``, ``last`` or ``latest:WORKFLOW``.

        Returns
        -------
        dict
            The run's columns, JSON columns decoded.

        Raises
        ------
        CatalogError
            No such run, with the runs there are.
        """
        head, _, workflow = rid.partition(":")
        if head in ("latest", "last") and ":" in rid:
            row = self.db.execute(
                "SELECT * FROM runs WHERE status = 'complete' AND workflow = ? "
                "ORDER BY seq DESC LIMIT 1", (workflow,)).fetchone()
            if row is None:
                have = [r[0] for r in self.db.execute(
                    "SELECT DISTINCT workflow FROM runs WHERE status = 'complete' "
                    "ORDER BY workflow")]
                hint = (f"complete runs are of {', '.join(have)}" if have
                        else "the catalog has no complete run")
                raise CatalogError(f"{rid}: no complete run of workflow {workflow!r} in "
                                   f"{self.home} ({hint})")
        elif rid in ("latest", "last"):
            row = self.db.execute(
                "SELECT * FROM runs WHERE status = 'complete' ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            if row is None:
                raise CatalogError(f"no complete run in {self.home}; run a workflow first")
        else:
            row = self.db.execute("SELECT * FROM runs WHERE id = ?", (rid,)).fetchone()
            if row is None:
                known = [r[0] for r in self.db.execute(
                    "SELECT id FROM runs ORDER BY seq DESC LIMIT 5")]
                hint = f" (recent: {', '.join(known)})" if known else " (the catalog has no runs)"
                raise CatalogError(f"unknown run {rid!r}{hint}")
        return _run_row(row)

    def runs(self) -> list[dict[str, Any]]:
        """Every run's row, oldest first (as :meth:`run` gives one)."""
        rows = self.db.execute("SELECT * FROM runs ORDER BY seq").fetchall()
        return [_run_row(r) for r in rows]

    # -- derived runs (a what-if replay) ---------------------------------------------------
    def create_derived_run(self, parent: str, derivation: dict[str, Any]) -> str:
        """A new ``running`` run derived from run ``parent`` (same workflow, parameters,
        strategy, plan and chunking; ``runs.parent`` and ``runs.derivation`` set).

        Parameters
        ----------
        parent : str
            The run it is derived from.
        derivation : dict
            How it was derived (JSON).

        Returns
        -------
        str
            The new run's id.

        Raises
        ------
        CatalogError
            ``parent`` is not a run.
        """
        pid = os.getpid()
        with self.tx() as db:
            seq = db.execute(_NEXT_SEQ).fetchone()[0]
            rid = f"r{seq}"
            cur = db.execute(
                "INSERT INTO runs (id, seq, workflow, params, strategy, plan, status, pid, "
                "pid_start, host, master, chunking, started, parent, derivation, manifest) "
                "SELECT ?, ?, workflow, params, strategy, plan, 'running', ?, ?, ?, master, "
                "chunking, ?, id, ?, manifest FROM runs WHERE id = ?",
                (rid, seq, pid, _proc_start(pid), socket.gethostname(), time.time(),
                 json.dumps(derivation, default=str), parent))
            if cur.rowcount != 1:
                raise CatalogError(f"unknown run {parent!r}")
        return rid

    def inherit_rows(self, parent: str, child: str, arrays: Any, operators: Any,
                     skip_shards: Any = ()) -> None:
        """Copy run ``parent``'s rows of the named ``arrays`` and ``operators`` (with their
        statistics and shards, but the ``(op, chunk)`` pairs in ``skip_shards``) to run
        ``child``, in one transaction: a derived run references the parent's shards, which
        stay where they are.

        Parameters
        ----------
        parent, child : str
            The runs copied from and to.
        arrays, operators : iterable of str
            The names whose rows are copied.
        skip_shards : iterable of (str, str), optional
            The ``(op, chunk)`` shards not copied.
        """
        names = sorted(set(arrays)), sorted(set(operators))
        # each table's rows to keep, by the names they hold (INSERT ... SELECT: the rows
        # never leave the database)
        keep = {"arrays": "name IN ({a})", "operators": "name IN ({o})",
                "op_stats": "op IN ({o})", "statistics": "(op IN ({o}) OR op = '*')",
                "shards": "op IN ({o}) AND NOT EXISTS (SELECT 1 FROM skipped s "
                          "WHERE s.op = shards.op AND s.chunk = shards.chunk)"}
        # no names: IN (NULL), true of no row (PostgreSQL refuses an empty IN list)
        marks = {k: ", ".join("?" * len(n)) or "NULL" for k, n in zip("ao", names)}
        with self.tx() as db:
            db.execute(self._ddl("CREATE TEMP TABLE IF NOT EXISTS skipped (op TEXT, chunk TEXT)"))
            db.execute("DELETE FROM skipped")
            db.executemany("INSERT INTO skipped VALUES (?, ?)", sorted(set(skip_shards)))
            for table, where in keep.items():
                cols = self._columns(table)
                picked = ", ".join("?" if c == "run" else c for c in cols)
                args = [name for key in ("a", "o") if "{%s}" % key in where
                        for name in names["ao".index(key)]]
                db.execute(
                    f"INSERT INTO {table} ({', '.join(cols)}) SELECT {picked} FROM {table} "
                    f"WHERE run = ? AND {where.format(**marks)}", [child, parent, *args])
            db.execute("DELETE FROM skipped")

    def derived_runs(self, parent: str) -> list[str]:
        """The runs derived from run ``parent``, oldest first."""
        return [r[0] for r in self.db.execute(
            "SELECT id FROM runs WHERE parent = ? ORDER BY seq", (parent,))]
