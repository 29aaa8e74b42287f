"""The catalog: one SQLite file per home recording runs, arrays, operators, shards,
statistics and the query log.

Only the driver writes the catalog (Spark tasks return plain data). Every write is one
transaction, so a process killed at any point leaves the catalog consistent: a run that was
interrupted stays ``running`` until the next process that opens the catalog sees that its
process is gone and marks it ``failed``.

The schema carries a version (``meta.schema_version``); opening a catalog written by a newer
SubZero is refused rather than misread, and one written by an older SubZero is migrated in
place (:data:`MIGRATIONS`) the first time it is opened.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import re
import socket
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from subzero.engine.diskfull import is_disk_full, no_space
from subzero.errors import CatalogError, DamagedCatalogError

SCHEMA_VERSION = 6

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, workflow TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}', strategy TEXT, plan TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed')),
    pid INTEGER, pid_start TEXT, host TEXT, master TEXT, chunking TEXT,
    started REAL NOT NULL, finished REAL, runtime_s REAL,
    input_bytes INTEGER, array_bytes INTEGER, lineage_bytes INTEGER, error TEXT,
    parent TEXT, derivation TEXT, placement TEXT, manifest TEXT
);
CREATE TABLE IF NOT EXISTS arrays (
    run TEXT NOT NULL, name TEXT NOT NULL, shape TEXT NOT NULL, dtype TEXT NOT NULL,
    chunks TEXT NOT NULL, producer TEXT, nbytes INTEGER, stored_bytes INTEGER,
    origin TEXT, PRIMARY KEY (run, name)
);
CREATE TABLE IF NOT EXISTS operators (
    run TEXT NOT NULL, name TEXT NOT NULL, position INTEGER NOT NULL, class TEXT NOT NULL,
    kind TEXT NOT NULL, params TEXT NOT NULL, inputs TEXT NOT NULL,
    supported_modes TEXT NOT NULL, strategies TEXT NOT NULL, parallelism TEXT NOT NULL,
    code TEXT, PRIMARY KEY (run, name)
);
CREATE TABLE IF NOT EXISTS op_stats (
    run TEXT NOT NULL, op TEXT NOT NULL, status TEXT NOT NULL,
    runtime_s REAL, runtime_nolineage_s REAL, task_s REAL, compute_s REAL, io_s REAL,
    capture_s REAL, store_s REAL, tasks INTEGER,
    pairs INTEGER, out_cells INTEGER, in_cells INTEGER, lineage_bytes INTEGER, note TEXT,
    PRIMARY KEY (run, op)
);
CREATE TABLE IF NOT EXISTS shards (
    run TEXT NOT NULL, op TEXT NOT NULL, strategy TEXT NOT NULL, chunk TEXT NOT NULL,
    path TEXT NOT NULL, data_bytes INTEGER, index_bytes INTEGER, pairs INTEGER,
    out_cells INTEGER, in_cells INTEGER, fanin REAL, fanout REAL, encode_s REAL,
    attempt INTEGER, checksum TEXT, PRIMARY KEY (run, op, strategy, chunk)
);
CREATE TABLE IF NOT EXISTS statistics (
    run TEXT NOT NULL, op TEXT NOT NULL, strategy TEXT NOT NULL, key TEXT NOT NULL,
    value REAL, PRIMARY KEY (run, op, strategy, key)
);
CREATE TABLE IF NOT EXISTS named_cells (
    run TEXT NOT NULL, name TEXT NOT NULL, cells BLOB NOT NULL, PRIMARY KEY (run, name)
);
CREATE TABLE IF NOT EXISTS query_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL, at REAL NOT NULL,
    direction TEXT NOT NULL, start TEXT NOT NULL, target TEXT NOT NULL, path TEXT NOT NULL,
    in_count INTEGER, out_count INTEGER, elapsed_s REAL, steps TEXT
);
CREATE TABLE IF NOT EXISTS removed_runs (
    id TEXT NOT NULL, seq INTEGER NOT NULL, workflow TEXT NOT NULL, status TEXT NOT NULL,
    parent TEXT, started REAL, removed REAL NOT NULL, bytes INTEGER, done REAL
);
"""


#: what takes a catalog of version ``v - 1`` to version ``v`` (SQL statements, in order)
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 2: where each input came from (JSON: a file's path, size and checksum, or how the
    # workflow made it); NULL for the inputs of runs recorded before
    2: ("ALTER TABLE arrays ADD COLUMN origin TEXT",),
    # 3: a derived run's parent and how it was derived (a what-if replay, JSON); each
    # shard's checksum, recorded when it is published (NULL for shards recorded before)
    3: ("ALTER TABLE runs ADD COLUMN parent TEXT",
        "ALTER TABLE runs ADD COLUMN derivation TEXT",
        "ALTER TABLE shards ADD COLUMN checksum TEXT"),
    # 4: where a run executed, Spark jobs or the driver's own process, and why (JSON:
    # subzero.engine.placement); NULL for runs recorded before (Spark jobs, then)
    4: ("ALTER TABLE runs ADD COLUMN placement TEXT",),
    # 5: the SHA-256 of the run's manifest (runs/<run>/manifest.json, the workflow as
    # data), and each operator's code: its class, the digest of the modules it runs and
    # the distribution and version they came from (JSON); NULL for runs recorded before,
    # whose workflow is a pickle until 'subzero migrate' converts it
    5: ("ALTER TABLE runs ADD COLUMN manifest TEXT",
        "ALTER TABLE operators ADD COLUMN code TEXT"),
    # 6: the runs 'subzero rm' and 'subzero gc' removed (subzero.engine.remove): who they
    # were, when their rows went, and the bytes their files freed once those are deleted
    # (done NULL: the files are still being deleted, or the removal was interrupted)
    6: ("CREATE TABLE IF NOT EXISTS removed_runs (id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "workflow TEXT NOT NULL, status TEXT NOT NULL, parent TEXT, started REAL, "
        "removed REAL NOT NULL, bytes INTEGER, done REAL)",),
}


def is_damage(e: BaseException) -> bool:
    """Whether an SQLite error says the catalog's file is damaged."""
    return isinstance(e, sqlite3.DatabaseError) and any(
        t in str(e) for t in ("malformed", "not a database", "database corruption"))


def damaged_catalog(path: Path | str, e: BaseException) -> DamagedCatalogError:
    """The one-line error for a catalog SQLite finds damaged."""
    return DamagedCatalogError(f"the catalog {path} is damaged ({str(e).splitlines()[0]}); "
                               "run 'subzero verify RUN' to see what else is")


def _disk_full_text(e: BaseException) -> bool:
    """SQLite's word for a write the disk refused (when opening the catalog)."""
    return is_disk_full(e) or "disk I/O error" in str(e)


#: the next run's number: after every run listed and every run removed, so that a removed
#: run's id is never given to another run
_NEXT_SEQ = ("SELECT MAX(s) + 1 FROM (SELECT COALESCE(MAX(seq), 0) AS s FROM runs "
             "UNION ALL SELECT COALESCE(MAX(seq), 0) FROM removed_runs)")


def _proc_start(pid: int) -> str | None:
    """Start time of a process (Linux /proc), to tell a live run from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = _proc_start(pid)
    return start is None or now is None or now == start


def _loads(v: str | None) -> Any:
    return None if v is None else json.loads(v)


def _run_row(row: Any) -> dict[str, Any]:
    """A ``runs`` row as a dict, its JSON columns decoded."""
    d = dict(row)
    for k in ("params", "plan", "chunking", "derivation", "placement"):
        d[k] = _loads(d.get(k))
    return d


# Query-log rows not yet written, per catalog file. A lineage query takes well under a
# millisecond and a committed insert about a tenth of one, so rows are written in one
# transaction when LOG_BATCH of them wait or LOG_DELAY_S passed since the first, when this
# process reads the log or closes a catalog, and when it exits.
LOG_BATCH = 256
LOG_DELAY_S = 2.0
_LOG_LOCK = threading.Lock()
_PENDING_LOG: dict[str, list[tuple]] = {}
_PENDING_SINCE: dict[str, float] = {}
#: read-only catalogs this process has said so of (:meth:`Catalog._skip`)
_SAID_READONLY: set[str] = set()
_LOG_SQL = ("INSERT INTO query_log (run, at, direction, start, target, path, in_count, "
            "out_count, elapsed_s, steps) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One IMMEDIATE transaction: all or nothing. Inside another, it is part of that one
    (a caller records many rows at once: one commit)."""
    if db.in_transaction:
        yield db
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    else:
        db.execute("COMMIT")


def _write_log(db: sqlite3.Connection, rows: list[tuple]) -> None:
    with _transaction(db):
        db.executemany(_LOG_SQL, [(*r[:5], json.dumps(r[5]), *r[6:9], json.dumps(r[9]))
                                  for r in rows])


@atexit.register
def _flush_all_query_logs() -> None:
    """At exit: write every catalog's pending query-log rows (best effort: a catalog that
    cannot be written any more loses them, with a warning; a removed one, silently)."""
    with _LOG_LOCK:
        pending = dict(_PENDING_LOG)
        _PENDING_LOG.clear()
        _PENDING_SINCE.clear()
    for path, rows in pending.items():
        if not os.path.exists(path):
            continue  # the home was removed (a temporary one): nothing to log into
        try:
            db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
            try:
                _write_log(db, rows)
            finally:
                db.close()
        except sqlite3.Error as e:
            print(f"subzero: could not log {len(rows)} queries in {path}: {e}", file=sys.stderr)


class Catalog:
    """The SQLite catalog of one SubZero home.

    >>> cat = Catalog("/tmp/sz-home/catalog.sqlite")      # doctest: +SKIP
    >>> rid = cat.create_run("example", params={}, strategy="subzero", plan={})  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        home = self.path.parent
        if home.exists() and not home.is_dir():
            raise CatalogError(f"SubZero home {home} is a file; expected a folder (--home DIR)")
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CatalogError(f"cannot create SubZero home {home}: {e.strerror or e}; "
                               "expected a writable folder (--home DIR)") from None
        self._key = os.path.realpath(self.path)
        #: the home cannot be written here (a read-only mount, another user's home): the
        #: catalog is opened read-only, and what readers would cache in it (the query log,
        #: named queries' cells, re-execution costs) is skipped
        self.readonly = self.path.is_file() and not (
            os.access(self.path, os.W_OK) and os.access(home, os.W_OK))
        #: the home's disk is full: read-only, and a write is a no-space error
        self.full = False
        try:
            self._open_readonly() if self.readonly else self._open()
        except sqlite3.OperationalError as e:
            if self.readonly or not self.path.is_file() or not _disk_full_text(e):
                raise CatalogError(f"cannot open the catalog {self.path}: {e}; expected a "
                                   "writable SubZero home (--home DIR)") from None
            self.db.close()
            self.readonly = self.full = True  # reading commands still answer
            self._open_readonly()
        except sqlite3.DatabaseError as e:
            if is_damage(e):
                raise damaged_catalog(self.path, e) from None
            raise CatalogError(f"cannot open the catalog {self.path}: {e}; expected a writable "
                               "SubZero home (--home DIR)") from None

    def _open_readonly(self) -> None:
        """Open the catalog of a home this process cannot write: nothing is created,
        migrated or reaped. A catalog in WAL mode whose shared-memory file cannot be made
        (a read-only folder) is read as immutable, which it is from here."""
        from urllib.parse import quote

        for mode in ("mode=ro", "immutable=1"):
            self.db = sqlite3.connect(f"file:{quote(str(self.path))}?{mode}", uri=True,
                                      timeout=30.0, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            try:
                row = self.db.execute(
                    "SELECT value FROM meta WHERE key='schema_version'").fetchone()
                break
            except sqlite3.OperationalError:
                self.db.close()
                if mode == "immutable=1":
                    raise
        version = int(row["value"]) if row is not None else 0
        if version != SCHEMA_VERSION:
            self.db.close()
            newer = version > SCHEMA_VERSION
            raise CatalogError(
                f"catalog {self.path} has schema version {version}; this SubZero reads "
                f"{SCHEMA_VERSION}" + (" (upgrade SubZero)" if newer else
                                       "; the home is read-only here, so it cannot be "
                                       "upgraded: open it once where it is writable"))

    def _skip(self, what: str) -> bool:
        """True (and said once per process) when the catalog is read-only: ``what`` is
        not recorded."""
        if self.readonly:
            if self._key not in _SAID_READONLY:
                _SAID_READONLY.add(self._key)
                why = "its disk is full" if self.full else "it is read-only here"
                print(f"subzero: note: the home {self.path.parent} cannot be written ({why}); "
                      f"{what} and the like are not recorded", file=sys.stderr)
            return True
        return False

    def _open(self) -> None:
        self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        with self.tx():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    self.db.execute(stmt)
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self.db.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
            elif int(row["value"]) > SCHEMA_VERSION:
                raise CatalogError(
                    f"catalog {self.path} has schema version {row['value']}; this SubZero "
                    f"reads up to {SCHEMA_VERSION} (upgrade SubZero)"
                )
            elif int(row["value"]) < SCHEMA_VERSION:
                self._migrate(int(row["value"]))
        try:
            self.reap_stale_runs()
        except sqlite3.OperationalError:
            pass  # a full disk: reading still works, and a later command marks them

    def _migrate(self, version: int) -> None:
        """Bring a catalog of an older schema up to :data:`SCHEMA_VERSION` (inside the
        opening transaction: all steps or none)."""
        for v in range(version + 1, SCHEMA_VERSION + 1):
            for stmt in MIGRATIONS.get(v, ()):
                added = re.fullmatch(r"ALTER TABLE (\w+) ADD COLUMN (\w+) .*", stmt)
                if added and added[2] in self._columns(added[1]):
                    continue  # the table is newer than the catalog (created just now)
                self.db.execute(stmt)
        self.db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                        (str(SCHEMA_VERSION),))

    def _columns(self, table: str) -> set[str]:
        return {r["name"] for r in self.db.execute(f"PRAGMA table_info({table})")}

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("SELECT value FROM meta WHERE key='schema_version'")
                   .fetchone()["value"])

    def tx(self) -> Any:
        """One IMMEDIATE transaction: all or nothing (``with cat.tx() as db:``)."""
        if self.full:
            raise no_space("the catalog", self.path.parent)
        if self.readonly:
            raise CatalogError(f"the SubZero home {self.path.parent} is read-only here; "
                               "a command that records something needs a writable home")
        return _transaction(self.db)

    def close(self) -> None:
        try:
            self.flush_query_log()
        finally:
            self.db.close()

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
        cols = {"status": status, "finished": time.time(), "error": error, **figures}
        sets = ", ".join(f"{k} = ?" for k in cols)
        with self.tx() as db:
            db.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*cols.values(), rid))

    def reap_stale_runs(self) -> list[str]:
        """Mark ``running`` runs of this host whose process is gone as ``failed``."""
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
        ``latest:WORKFLOW`` the newest complete run of that workflow."""
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
                                   f"{self.path.parent} ({hint})")
        elif rid in ("latest", "last"):
            row = self.db.execute(
                "SELECT * FROM runs WHERE status = 'complete' ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            if row is None:
                raise CatalogError(f"no complete run in {self.path.parent}; run a workflow first")
        else:
            row = self.db.execute("SELECT * FROM runs WHERE id = ?", (rid,)).fetchone()
            if row is None:
                known = [r[0] for r in self.db.execute(
                    "SELECT id FROM runs ORDER BY seq DESC LIMIT 5")]
                hint = f" (recent: {', '.join(known)})" if known else " (the catalog has no runs)"
                raise CatalogError(f"unknown run {rid!r}{hint}")
        return _run_row(row)

    def runs(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM runs ORDER BY seq").fetchall()
        return [_run_row(r) for r in rows]

    # -- derived runs (a what-if replay) ---------------------------------------------------
    def create_derived_run(self, parent: str, derivation: dict[str, Any]) -> str:
        """A new ``running`` run derived from run ``parent`` (same workflow, parameters,
        strategy, plan and chunking; ``runs.parent`` and ``runs.derivation`` set)."""
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
        stay where they are."""
        names = sorted(set(arrays)), sorted(set(operators))
        # each table's rows to keep, by the names they hold (INSERT ... SELECT: the rows
        # never leave SQLite)
        keep = {"arrays": "name IN ({a})", "operators": "name IN ({o})",
                "op_stats": "op IN ({o})", "statistics": "(op IN ({o}) OR op = '*')",
                "shards": "op IN ({o}) AND NOT EXISTS (SELECT 1 FROM skipped s "
                          "WHERE s.op = shards.op AND s.chunk = shards.chunk)"}
        marks = {"a": ", ".join("?" * len(names[0])), "o": ", ".join("?" * len(names[1]))}
        with self.tx() as db:
            db.execute("CREATE TEMP TABLE IF NOT EXISTS skipped (op TEXT, chunk TEXT)")
            db.execute("DELETE FROM skipped")
            db.executemany("INSERT INTO skipped VALUES (?, ?)", sorted(set(skip_shards)))
            for table, where in keep.items():
                cols = [r["name"] for r in db.execute(f"PRAGMA table_info({table})")]
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

    # -- arrays and operators --------------------------------------------------------------
    def add_array(self, rid: str, name: str, shape: tuple, dtype: str, chunks: tuple,
                  producer: str | None, nbytes: int, stored_bytes: int | None = None,
                  origin: dict[str, Any] | None = None) -> None:
        """Record an array; an input's ``origin`` says where its data came from."""
        with self.tx() as db:
            db.execute(
                "INSERT INTO arrays (run, name, shape, dtype, chunks, producer, nbytes, "
                "stored_bytes, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, name, json.dumps(list(shape)), dtype, json.dumps(list(chunks)), producer,
                 nbytes, stored_bytes, None if origin is None else json.dumps(origin)),
            )

    def set_array_bytes(self, rid: str, stored_bytes: dict[str, int]) -> None:
        """Set the bytes on disk of arrays of run ``rid`` (name -> bytes), in one
        transaction."""
        with self.tx() as db:
            db.executemany("UPDATE arrays SET stored_bytes = ? WHERE run = ? AND name = ?",
                           [(n, rid, name) for name, n in stored_bytes.items()])

    def arrays(self, rid: str) -> dict[str, dict[str, Any]]:
        out = {}
        for r in self.db.execute("SELECT * FROM arrays WHERE run = ?", (rid,)):
            d = dict(r)
            d["shape"] = tuple(json.loads(d["shape"]))
            d["chunks"] = tuple(json.loads(d["chunks"]))
            d["origin"] = _loads(d["origin"])
            out[d["name"]] = d
        return out

    def newest_with_array(self, name: str) -> dict[str, Any] | None:
        """The newest complete run that has an array ``name`` (its ``id`` and
        ``workflow``), or None: what ``latest:WORKFLOW`` to suggest when ``latest`` lacks it."""
        row = self.db.execute(
            "SELECT runs.id, runs.workflow FROM runs JOIN arrays ON arrays.run = runs.id "
            "WHERE runs.status = 'complete' AND arrays.name = ? ORDER BY runs.seq DESC LIMIT 1",
            (name,)).fetchone()
        return None if row is None else dict(row)

    def missing_array(self, requested: str, info: dict[str, Any], name: str,
                      arrays: Any) -> str:
        """The one-line error for run ``info`` (asked for as ``requested``) lacking array
        ``name``: when ``requested`` is ``latest``, which workflow that is, and the
        ``latest:WORKFLOW`` whose newest run has the array."""
        known = f"arrays: {', '.join(arrays)}"
        if requested not in ("latest", "last"):
            return f"run {info['id']} has no array {name!r} ({known})"
        head = (f"run {info['id']} ({requested}: the newest run of any workflow, here "
                f"{info['workflow']!r}) has no array {name!r}")
        other = self.newest_with_array(name)
        if other is None:
            return f"{head}; no complete run has one ({known})"
        return (f"{head}; use {requested}:{other['workflow']} for the newest run of "
                f"{other['workflow']!r} ({known})")

    def input_origins(self, rid: str | None = None) -> dict[str, dict[str, Any]]:
        """Where each input came from, ``{run: {input: origin}}`` (one run's, or every
        run's); an origin is None for runs recorded before origins were."""
        q = "SELECT run, name, origin FROM arrays WHERE producer IS NULL"
        rows = (self.db.execute(q + " ORDER BY rowid") if rid is None
                else self.db.execute(q + " AND run = ? ORDER BY rowid", (rid,)))
        out: dict[str, dict[str, Any]] = {}
        for r in rows:
            out.setdefault(r["run"], {})[r["name"]] = _loads(r["origin"])
        return out

    def add_operator(self, rid: str, position: int, name: str, cls: str, kind: str,
                     params: dict, inputs: list[str], supported_modes: list[str],
                     strategies: list[str], parallelism: str,
                     code: dict[str, Any] | None = None) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT INTO operators (run, name, position, class, kind, params, inputs, "
                "supported_modes, strategies, parallelism, code) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, name, position, cls, kind, json.dumps(params, default=str),
                 json.dumps(inputs), json.dumps(supported_modes), json.dumps(strategies),
                 parallelism, None if code is None else json.dumps(code)),
            )

    def set_manifest(self, rid: str, digest: str, code: Mapping[str, dict[str, Any]]
                     ) -> None:
        """Record run ``rid``'s manifest digest and its operators' code (``subzero
        migrate``: a run recorded before manifests existed)."""
        with self.tx() as db:
            db.execute("UPDATE runs SET manifest = ? WHERE id = ?", (digest, rid))
            db.executemany("UPDATE operators SET code = ? WHERE run = ? AND name = ?",
                           [(json.dumps(c), rid, n) for n, c in code.items()])

    def set_operator_strategies(self, rid: str, name: str, strategies: list[str]) -> None:
        with self.tx() as db:
            db.execute("UPDATE operators SET strategies = ? WHERE run = ? AND name = ?",
                       (json.dumps(strategies), rid, name))

    def operators(self, rid: str) -> dict[str, dict[str, Any]]:
        out = {}
        for r in self.db.execute("SELECT * FROM operators WHERE run = ? ORDER BY position", (rid,)):
            d = dict(r)
            for k in ("params", "inputs", "supported_modes", "strategies"):
                d[k] = json.loads(d[k])
            d["code"] = _loads(d.get("code"))
            out[d["name"]] = d
        return out

    def set_op_stats(self, rid: str, op: str, **figures: Any) -> None:
        cols = ["run", "op", *figures]
        with self.tx() as db:
            db.execute(
                f"INSERT OR REPLACE INTO op_stats ({', '.join(cols)}) "
                f"VALUES ({', '.join('?' * len(cols))})",
                (rid, op, *figures.values()),
            )

    def op_stats(self, rid: str) -> dict[str, dict[str, Any]]:
        return {r["op"]: dict(r) for r in self.db.execute(
            "SELECT * FROM op_stats WHERE run = ?", (rid,))}

    # -- shards and statistics -------------------------------------------------------------
    def add_shards(self, rid: str, rows: list[dict[str, Any]]) -> None:
        """Record published shards; a retried task's shard replaces the earlier attempt's."""
        if not rows:
            return
        with self.tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO shards VALUES "
                "(:run, :op, :strategy, :chunk, :path, :data_bytes, :index_bytes, :pairs, "
                ":out_cells, :in_cells, :fanin, :fanout, :encode_s, :attempt, :checksum)",
                [{"run": rid, "checksum": None, **r} for r in rows],
            )

    def shards(self, rid: str, op: str | None = None, strategy: str | None = None
               ) -> list[dict[str, Any]]:
        q, args = "SELECT * FROM shards WHERE run = ?", [rid]
        if op is not None:
            q, args = q + " AND op = ?", args + [op]
        if strategy is not None:
            q, args = q + " AND strategy = ?", args + [strategy]
        return [dict(r) for r in self.db.execute(q + " ORDER BY op, strategy, chunk", args)]

    def set_statistics(self, rid: str, op: str, strategy: str, values: dict[str, float]) -> None:
        if self._skip("measured costs"):
            return
        with self.tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO statistics VALUES (?, ?, ?, ?, ?)",
                [(rid, op, strategy, k, float(v)) for k, v in values.items()],
            )

    def statistics(self, rid: str | None = None) -> list[dict[str, Any]]:
        if rid is None:
            rows = self.db.execute("SELECT * FROM statistics")
        else:
            rows = self.db.execute("SELECT * FROM statistics WHERE run = ?", (rid,))
        return [dict(r) for r in rows]

    # -- query log -------------------------------------------------------------------------
    # -- the cells named queries start from (chosen from a run's arrays once) -------------
    def named_cells(self, rid: str, name: str) -> np.ndarray | None:
        """The cached start cells of named query ``name`` of run ``rid`` (None if not yet
        chosen): a query reading them needs no array, hence no zarr."""
        row = self.db.execute("SELECT cells FROM named_cells WHERE run = ? AND name = ?",
                              (rid, name)).fetchone()
        return None if row is None else np.load(io.BytesIO(row["cells"]), allow_pickle=False)

    def set_named_cells(self, rid: str, cells: dict[str, np.ndarray]) -> None:
        rows = []
        for name, c in cells.items():
            buf = io.BytesIO()
            np.save(buf, np.asarray(c), allow_pickle=False)
            rows.append((rid, name, buf.getvalue()))
        if self._skip("named queries' cells"):
            return
        try:
            with self.tx() as db:
                db.executemany("INSERT OR REPLACE INTO named_cells VALUES (?, ?, ?)", rows)
        except sqlite3.OperationalError:
            pass  # a cache: a full disk leaves the cells to be chosen again

    def log_query(self, rid: str, direction: str, start: str, target: str, path: list,
                  in_count: int, out_count: int, elapsed_s: float, steps: list[dict]) -> None:
        """Log one query (the optimizer's workload). Written with the next batch: see
        :data:`LOG_BATCH`; reading the log here or closing the catalog writes it."""
        if self._skip("queries"):
            return
        row = (rid, time.time(), direction, start, target, path, in_count, out_count,
               elapsed_s, steps)
        with _LOG_LOCK:
            pending = _PENDING_LOG.setdefault(self._key, [])
            pending.append(row)
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
                _write_log(self.db, rows)
            except sqlite3.OperationalError as e:  # a full disk: the answers stand
                print(f"subzero: note: {len(rows)} queries were not logged in {self.path} "
                      f"({e})", file=sys.stderr)

    def query_log(self, rid: str | None = None) -> list[dict[str, Any]]:
        self.flush_query_log()
        if rid is None:
            rows = self.db.execute("SELECT * FROM query_log ORDER BY id")
        else:
            rows = self.db.execute("SELECT * FROM query_log WHERE run = ? ORDER BY id", (rid,))
        out = []
        for r in rows:
            d = dict(r)
            d["path"] = json.loads(d["path"])
            d["steps"] = _loads(d["steps"])
            out.append(d)
        return out


def shard_row(op: str, s: dict[str, Any], home: Path) -> dict[str, Any]:
    """The catalog row (:meth:`Catalog.add_shards`) of a shard a task published, ``s`` the
    task's description of it (its path made relative to the home)."""
    return {"op": op, "strategy": s["strategy"], "chunk": s["chunk"],
            "path": os.path.relpath(s["path"], home),
            "data_bytes": s.get("data_bytes", 0), "index_bytes": s.get("index_bytes", 0),
            "pairs": s.get("pairs", 0), "out_cells": s.get("out_cells", 0),
            "in_cells": s.get("in_cells", 0), "fanin": s.get("fanin"),
            "fanout": s.get("fanout"), "encode_s": s.get("encode_s"),
            "attempt": s.get("attempt", 0), "checksum": s.get("checksum")}
