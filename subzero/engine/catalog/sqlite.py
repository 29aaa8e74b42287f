"""The catalog in SQLite: one file per home (``catalog.sqlite``), and :class:`Catalog`,
every concern of the catalog over it.

Only the driver writes the catalog (Spark tasks return plain data). Every write is one
transaction, so a process killed at any point leaves the catalog consistent: a run that was
interrupted stays ``running`` until the next process that opens the catalog sees that its
process is gone and marks it ``failed``.

The schema carries a version (``meta.schema_version``); opening a catalog written by a newer
SubZero is refused rather than misread, and one written by an older SubZero is migrated in
place (:data:`~subzero.engine.catalog.schema.MIGRATIONS`) the first time it is opened. A
home this process cannot write is opened read-only: nothing is created, migrated or
reaped there.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from subzero.engine.catalog.base import CatalogBackend
from subzero.engine.catalog.contents import RunContents
from subzero.engine.catalog.querylog import QueryLog
from subzero.engine.catalog.runs import Runs
from subzero.engine.catalog.schema import SCHEMA, SCHEMA_VERSION
from subzero.engine.catalog.shards import Shards
from subzero.engine.catalog.statistics import Statistics
from subzero.engine.diskfull import is_disk_full
from subzero.errors import CatalogError, DamagedCatalogError


def is_damage(e: BaseException) -> bool:
    """Whether an SQLite error says the catalog's file is damaged.

    Examples
    --------
    >>> is_damage(sqlite3.DatabaseError("database disk image is malformed"))
    True
    >>> is_damage(sqlite3.OperationalError("database is locked"))
    False
    """
    return isinstance(e, sqlite3.DatabaseError) and any(
        t in str(e) for t in ("malformed", "not a database", "database corruption"))


def damaged_catalog(path: Path | str, e: BaseException) -> DamagedCatalogError:
    """The one-line error for a catalog SQLite finds damaged.

    Parameters
    ----------
    path : pathlib.Path or str
        The catalog's file.
    e : BaseException
        What SQLite raised.

    Returns
    -------
    DamagedCatalogError
        The error, suggesting ``subzero verify``.
    """
    return DamagedCatalogError(f"the catalog {path} is damaged ({str(e).splitlines()[0]}); "
                               "run 'subzero verify RUN' to see what else is")


def _disk_full_text(e: BaseException) -> bool:
    """SQLite's word for a write the disk refused (when opening the catalog)."""
    return is_disk_full(e) or "disk I/O error" in str(e)


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


class SQLiteBackend(CatalogBackend):
    """A catalog's SQLite file: opening it (writable, or read-only where the home cannot
    be written), creating and migrating its tables, and SQLite's statements.

    Parameters
    ----------
    path : str or os.PathLike
        The catalog's file; its folder, the home, is created if missing.

    Raises
    ------
    CatalogError
        The home is a file or cannot be created, or the catalog cannot be opened, or it is
        of a newer SubZero (or of an older one, in a home that is read-only here).
    DamagedCatalogError
        SQLite finds the file damaged.
    """

    _refused = (sqlite3.OperationalError,)
    _errors = (sqlite3.Error,)
    _insertion_order = "rowid"

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
        # the home cannot be written here (a read-only mount, another user's home): the
        # catalog is opened read-only, and what readers would cache in it (the query log,
        # named queries' cells, re-execution costs) is skipped
        self.readonly = self.path.is_file() and not (
            os.access(self.path, os.W_OK) and os.access(home, os.W_OK))
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

    def _open(self) -> None:
        """Open a writable catalog: create its tables, migrate an older one, then let the
        concerns recover (:meth:`_recover`)."""
        self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        with self.tx():
            for stmt in SCHEMA.split(";"):
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
            self._recover()
        except sqlite3.OperationalError:
            pass  # a full disk: reading still works, and a later command recovers

    def _transaction(self) -> Any:
        return _transaction(self.db)

    def _columns(self, table: str) -> list[str]:
        return [r["name"] for r in self.db.execute(f"PRAGMA table_info({table})")]

    def _replace_sql(self, table: str, key: Sequence[str], cols: Sequence[str],
                     named: bool = False) -> str:
        marks = ", ".join(f":{c}" for c in cols) if named else ", ".join("?" * len(cols))
        return f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) VALUES ({marks})"

    @classmethod
    def _write_detached(cls, key: str, sql: str, rows: list[tuple]) -> None:
        if not os.path.exists(key):
            return  # the home was removed (a temporary one): nothing to write into
        db = sqlite3.connect(key, timeout=30.0, isolation_level=None)
        try:
            with _transaction(db):
                db.executemany(sql, rows)
        finally:
            db.close()

    def close(self) -> None:
        """Close the connection."""
        self.db.close()


class Catalog(Runs, RunContents, Shards, Statistics, QueryLog, SQLiteBackend):
    """The SQLite catalog of one SubZero home: runs (with their arrays and operators),
    shards, statistics and the query log, over one SQLite file.

    Parameters
    ----------
    path : str or os.PathLike
        The catalog's file (``HOME/catalog.sqlite``).

    Notes
    -----
    Each concern is a class over :class:`~subzero.engine.catalog.base.CatalogBackend`
    and :class:`SQLiteBackend` comes last, so that it supplies the connection and what
    SQLite says differently; :meth:`close` writes the pending query log first. A catalog
    in another database is the same concerns over a backend of its own.

    Examples
    --------
    >>> import tempfile
    >>> home = tempfile.TemporaryDirectory()
    >>> cat = Catalog(f"{home.name}/catalog.sqlite")
    >>> rid = cat.create_run("example", params={}, strategy="subzero", plan={})
    >>> cat.finish_run(rid, "complete", runtime_s=1.0)
    >>> rid, cat.run("latest")["status"], cat.schema_version == SCHEMA_VERSION
    ('r1', 'complete', True)
    >>> cat.close(); home.cleanup()
    """
