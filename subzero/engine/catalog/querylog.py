"""What lineage queries leave in the catalog: the log of queries asked (the optimizer's
workload) and the start cells of named queries, chosen from a run's arrays once.

Both are what readers write, so a read-only catalog skips them. Logged queries are
written in batches, shared by every catalog object of the same file in this process:
when :data:`LOG_BATCH` rows wait or :data:`LOG_DELAY_S` passed since the first, when this
process reads the log or closes a catalog, and when it exits.
"""

from __future__ import annotations

import atexit
import io
import json
import sys
import threading
import time
from typing import Any

import numpy as np

from subzero.engine.catalog.base import CatalogBackend, loads

# A lineage query is much quicker than a committed insert, so logged rows wait to be
# written together.
LOG_BATCH = 256
LOG_DELAY_S = 2.0
_LOG_LOCK = threading.Lock()
#: query-log rows not yet written, by catalog (:attr:`CatalogBackend._key`)
_PENDING_LOG: dict[str, list[tuple]] = {}
_PENDING_SINCE: dict[str, float] = {}
#: the class of the catalog each pending log belongs to: what writes it at exit
_BACKENDS: dict[str, type[CatalogBackend]] = {}
_LOG_SQL = ("INSERT INTO query_log (run, at, direction, start, target, path, in_count, "
            "out_count, elapsed_s, steps) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def _log_params(rows: list[tuple]) -> list[tuple]:
    """Pending rows as :data:`_LOG_SQL` takes them (path and steps as JSON)."""
    return [(*r[:5], json.dumps(r[5]), *r[6:9], json.dumps(r[9])) for r in rows]


@atexit.register
def _flush_all_query_logs() -> None:
    """At exit: write every catalog's pending query-log rows (best effort: a catalog that
    cannot be written any more loses them, with a warning; a removed one, silently)."""
    with _LOG_LOCK:
        pending = dict(_PENDING_LOG)
        _PENDING_LOG.clear()
        _PENDING_SINCE.clear()
    for key, rows in pending.items():
        backend = _BACKENDS[key]
        try:
            backend._write_detached(key, _LOG_SQL, _log_params(rows))
        except backend._errors as e:
            print(f"subzero: could not log {len(rows)} queries in {key}: {e}", file=sys.stderr)


class QueryLog(CatalogBackend):
    """The query log and the start cells of named queries."""

    # -- the cells named queries start from ------------------------------------------------
    def named_cells(self, rid: str, name: str) -> np.ndarray | None:
        """The cached start cells of named query ``name`` of run ``rid`` (None if not yet
        chosen): a query reading them needs no array, hence no zarr."""
        row = self.db.execute("SELECT cells FROM named_cells WHERE run = ? AND name = ?",
                              (rid, name)).fetchone()
        return None if row is None else np.load(io.BytesIO(row["cells"]), allow_pickle=False)

    def set_named_cells(self, rid: str, cells: dict[str, np.ndarray]) -> None:
        """Cache the start cells of named queries of run ``rid`` (name -> cells); not on
        a read-only catalog, nor when the disk refuses the write.

        Parameters
        ----------
        rid : str
            The run.
        cells : dict of str to numpy.ndarray
            Each named query's start cells.
        """
        rows = []
        for name, c in cells.items():
            buf = io.BytesIO()
            np.save(buf, np.asarray(c), allow_pickle=False)
            rows.append((rid, name, buf.getvalue()))
        if self._skip("named queries' cells"):
            return
        try:
            with self.tx() as db:
                db.executemany(self._replace_sql("named_cells", ("run", "name"),
                                                 ("run", "name", "cells")), rows)
        except self._refused:
            pass  # a cache: a full disk leaves the cells to be chosen again

    # -- the query log ---------------------------------------------------------------------
    def log_query(self, rid: str, direction: str, start: str, target: str, path: list,
                  in_count: int, out_count: int, elapsed_s: float, steps: list[dict]) -> None:
        """Log one query (the optimizer's workload). Written with the next batch: see
        :data:`LOG_BATCH`; reading the log here or closing the catalog writes it.

        Parameters
        ----------
        rid : str
            The run queried.
        direction : str
            ``backward`` or ``forward``.
        start, target : str
            The arrays it starts from and ends at.
        path : list
            The path it took (JSON).
        in_count, out_count : int
            How many cells it started from and found.
        elapsed_s : float
            How long it took.
        steps : list of dict
            How each step was answered (JSON).
        """
        if self._skip("queries"):
            return
        row = (rid, time.time(), direction, start, target, path, in_count, out_count,
               elapsed_s, steps)
        with _LOG_LOCK:
            pending = _PENDING_LOG.setdefault(self._key, [])
            pending.append(row)
            _BACKENDS.setdefault(self._key, type(self))
            due = (len(pending) >= LOG_BATCH
                   or row[1] - _PENDING_SINCE.setdefault(self._key, row[1]) >= LOG_DELAY_S)
        if due:
            self.flush_query_log()

    def flush_query_log(self) -> None:
        """Write the queries this process logged to this catalog and has not written."""
        with _LOG_LOCK:
            rows = _PENDING_LOG.pop(self._key, None)
            _PENDING_SINCE.pop(self._key, None)
        if rows:
            try:
                with self._transaction() as db:
                    db.executemany(_LOG_SQL, _log_params(rows))
            except self._refused as e:  # a full disk: the answers stand
                print(f"subzero: note: {len(rows)} queries were not logged in {self.location} "
                      f"({e})", file=sys.stderr)

    def query_log(self, rid: str | None = None) -> list[dict[str, Any]]:
        """The logged queries of run ``rid``, or of every run, oldest first (this
        process's pending ones written first).

        Parameters
        ----------
        rid : str, optional
            Only this run's.

        Returns
        -------
        list of dict
            The ``query_log`` rows, ``path`` and ``steps`` decoded.
        """
        self.flush_query_log()
        if rid is None:
            rows = self.db.execute("SELECT * FROM query_log ORDER BY id")
        else:
            rows = self.db.execute("SELECT * FROM query_log WHERE run = ? ORDER BY id", (rid,))
        out = []
        for r in rows:
            d = dict(r)
            d["path"] = json.loads(d["path"])
            d["steps"] = loads(d["steps"])
            out.append(d)
        return out

    def close(self) -> None:
        """Write this process's pending queries, then close the connection."""
        try:
            self.flush_query_log()
        finally:
            super().close()
