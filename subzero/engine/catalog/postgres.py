"""The catalog in PostgreSQL: one database shared by the processes of many users on many
hosts, and :class:`PostgresCatalog`, every concern of the catalog over it.

The concerns' SQL runs unchanged: :class:`Connection` takes SQLite's ``?`` and ``:name``
placeholders and gives rows read by position, by column name and as ``dict(row)``. What
PostgreSQL says differently is here: its column types (:func:`~.schema.postgres_sql`),
``INSERT ... ON CONFLICT`` for SQLite's ``INSERT OR REPLACE``, the order rows were
written in without a ``rowid``.

A write transaction takes one transaction-scoped advisory lock first, so that writers
take turns as under SQLite's ``BEGIN IMMEDIATE`` (a new run's number is read and used by
one writer at a time); readers never wait. Creating or migrating the tables happens in
such a transaction, so two processes opening a fresh database at once create them once.

Every failure to open the catalog is one line naming its URL without the password. A
role that cannot write (read-only, or a standby server) opens it read-only.

Only a PostgreSQL URL imports this module (and psycopg).
"""

from __future__ import annotations

import functools
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from subzero.engine.catalog.base import CatalogBackend, without_password
from subzero.engine.catalog.contents import RunContents
from subzero.engine.catalog.querylog import QueryLog
from subzero.engine.catalog.runs import Runs
from subzero.engine.catalog.schema import PG_SCHEMA, SCHEMA_VERSION, postgres_sql
from subzero.engine.catalog.shards import Shards
from subzero.engine.catalog.statistics import Statistics
from subzero.errors import CatalogError

#: how long connecting may take (each address of the host), unless the URL says
CONNECT_TIMEOUT_S = 4
#: how long a writer waits for the write lock (or any lock) before the write is refused,
#: as SQLite's busy timeout
LOCK_TIMEOUT = "30s"
#: the advisory lock of every write transaction (two int4 keys: "SubZ", the catalog)
_WRITE_LOCK = (0x5375625A, 1)
#: each catalog's connection string by its key (its URL without the password), for
#: :meth:`PostgresBackend._write_detached`: the key is what may be printed
_CONNINFO: dict[str, str] = {}


# -- SQLite's SQL as psycopg takes it -------------------------------------------------------
#: a quoted literal or name, a comment, a ``::`` cast, a ``?``, a ``:name``, a ``%``
_TOKEN = re.compile(r"""('(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*)|(::)|(\?)"""
                    r"""|(?<![:\w]):([A-Za-z_]\w*)|(%)""")


@functools.lru_cache(maxsize=512)
def pg_sql(sql: str) -> str:
    """SQLite's ``sql`` with psycopg's placeholders: ``?`` is ``%s``, ``:name`` is
    ``%(name)s``, ``%`` is ``%%``; quoted text and ``::`` casts stay as they are.

    Parameters
    ----------
    sql : str
        A statement with ``?`` or ``:name`` placeholders.

    Returns
    -------
    str
        The statement for psycopg (always executed with parameters, even none).

    Examples
    --------
    >>> pg_sql("UPDATE t SET a = ?, b = 'x?:y' WHERE c LIKE 'a%' AND d = ?::text")
    "UPDATE t SET a = %s, b = 'x?:y' WHERE c LIKE 'a%%' AND d = %s::text"
    >>> pg_sql("INSERT INTO t (a, b) VALUES (:a, :b)")
    'INSERT INTO t (a, b) VALUES (%(a)s, %(b)s)'
    """
    def one(m: re.Match) -> str:
        quoted, cast, mark, name, _ = m.groups()
        if quoted is not None:
            return quoted.replace("%", "%%")
        if cast is not None:
            return cast
        if mark is not None:
            return "%s"
        if name is not None:
            return f"%({name})s"
        return "%%"

    return _TOKEN.sub(one, sql)


class Row:
    """A row read as :class:`sqlite3.Row` is: by position, by column name, and as
    ``dict(row)``.

    Examples
    --------
    >>> r = Row(("id", "n"), {"id": 0, "n": 1}, ("r1", 3))
    >>> r[0], r["n"], dict(r), list(r)
    ('r1', 3, {'id': 'r1', 'n': 3}, ['r1', 3])
    """

    __slots__ = ("_index", "_names", "_values")

    def __init__(self, names: tuple[str, ...], index: dict[str, int],
                 values: Sequence[Any]) -> None:
        self._names, self._index, self._values = names, index, tuple(values)

    def __getitem__(self, key: int | slice | str) -> Any:
        if isinstance(key, str):
            try:
                return self._values[self._index[key]]
            except KeyError:
                lower = {n.lower(): i for n, i in self._index.items()}
                if key.lower() not in lower:
                    raise IndexError(f"no such column: {key}") from None
                return self._values[lower[key.lower()]]
        return self._values[key]

    def keys(self) -> list[str]:
        """The column names, in order."""
        return list(self._names)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Row):
            return self._names == other._names and self._values == other._values
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._names, self._values))

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._names, self._values))!r})"


def _row_factory(cursor: Any) -> Any:
    """psycopg's row factory giving :class:`Row` objects."""
    desc = cursor.description
    if desc is None:
        return tuple
    names = tuple(c.name for c in desc)
    index = {n: i for i, n in reversed(list(enumerate(names)))}  # the first of a name
    return lambda values: Row(names, index, values)


class Connection:
    """The catalog's psycopg connection as the concerns use an :mod:`sqlite3` one:
    ``execute`` and ``executemany`` with ``?`` or ``:name`` placeholders, rows as
    :class:`Row`, ``in_transaction``. It is in autocommit mode: a statement outside
    a transaction (:func:`_transaction`) is one of its own.

    Parameters
    ----------
    raw : psycopg.Connection
        The connection (autocommit).
    """

    def __init__(self, raw: psycopg.Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
                ) -> psycopg.Cursor:
        """Run one statement; the cursor gives its rows (``fetchone``, ``fetchall``,
        iteration) and ``rowcount``."""
        return self.raw.execute(pg_sql(sql), params if params is not None else ())

    def executemany(self, sql: str, rows: Any) -> psycopg.Cursor:
        """Run one statement for each of ``rows``."""
        cur = self.raw.cursor()
        cur.executemany(pg_sql(sql), list(rows))
        return cur

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        return self.raw.info.transaction_status != TransactionStatus.IDLE

    @property
    def closed(self) -> bool:
        """Whether the connection is closed."""
        return self.raw.closed

    def close(self) -> None:
        """Close the connection."""
        self.raw.close()


@contextmanager
def _transaction(db: Connection) -> Iterator[Connection]:
    """One write transaction, all or nothing, holding the catalog's write lock (one
    writer at a time, as SQLite's BEGIN IMMEDIATE). Inside another, it is part of that
    one."""
    if db.in_transaction:
        yield db
        return
    # READ COMMITTED whatever the server's default: each statement sees what the writers
    # before this one committed (the next run's number is read after the lock is held)
    db.raw.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
    try:
        db.raw.execute("SELECT pg_advisory_xact_lock(%s, %s)", _WRITE_LOCK)
        yield db
    except BaseException:
        if not db.raw.closed:
            db.raw.execute("ROLLBACK")
        raise
    else:
        db.raw.execute("COMMIT")


def _reason(e: BaseException, params: Mapping[str, Any]) -> tuple[str, str]:
    """Why connecting failed, in one line, and what was expected instead."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
    why = lines[0]
    # libpq says where it connected; the message names the URL already
    why = re.sub(r"^connection failed:\s*", "", why)
    why = re.sub(r'^connection to server (at|on socket) "[^"]*"( \([^)]*\))?(, port \d+)? '
                 r"failed:\s*", "", why)
    why = re.sub(r"^(FATAL|ERROR):\s*", "", why)
    for secret in (params.get("password"), os.environ.get("PGPASSWORD")):
        if secret:
            why = why.replace(str(secret), "***")
    where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
    state = getattr(e, "sqlstate", None)
    if state == "28P01" or "password authentication failed" in why:
        return why, ("the right password for the role (in the URL, $PGPASSWORD or "
                     "~/.pgpass)")
    if "no password supplied" in why:
        return why, "a password (in the URL, $PGPASSWORD or ~/.pgpass)"
    if state == "3D000" or re.search(r"database .* does not exist", why):
        return why, "an existing database (createdb it first)"
    if state in ("28000", "42501") or "role" in why:
        return why, "a role the server lets in"
    if isinstance(e, psycopg.ProgrammingError) or "connection option" in why:
        return why, "a URL postgresql://USER@HOST:PORT/DATABASE"
    return why, f"a PostgreSQL server accepting connections at {where}"


class PostgresBackend(CatalogBackend):
    """A catalog's PostgreSQL database: connecting to it (writable, or read-only for a
    role that cannot write), creating and migrating its tables, and PostgreSQL's
    statements.

    Parameters
    ----------
    url : str
        The database: ``postgresql://USER@HOST:PORT/DATABASE`` (a password in the URL,
        ``$PGPASSWORD`` or ``~/.pgpass``, as libpq finds it).
    home : str or os.PathLike
        The SubZero home the catalog belongs to.

    Raises
    ------
    CatalogError
        The server cannot be reached, refuses the role or its password, has no such
        database, is not PostgreSQL, or the catalog is of a newer SubZero (or of an older
        one, for a role that cannot write it): one line, naming the URL without its
        password. Nothing is written then.
    """

    _refused = (psycopg.OperationalError, pg_errors.ReadOnlySqlTransaction,
                pg_errors.InsufficientPrivilege)
    _errors = (psycopg.Error,)
    # no rowid: the transaction that wrote a row, then its place in the table (the order
    # rows were written in, unless one was updated since)
    _insertion_order = "xmin::text::bigint, ctid"

    def __init__(self, url: str, home: str | os.PathLike) -> None:
        self._home = Path(home)
        #: a name in the home, for code that expects a file's path (there is no file)
        self.path = self._home / "catalog.postgresql"
        self._key = without_password(url)
        self.readonly = self.full = False
        self._column_cache: dict[str, list[str]] = {}
        try:
            params = pg_conninfo.conninfo_to_dict(url)
        except psycopg.Error as e:
            raise CatalogError(f"cannot open the PostgreSQL catalog {self._key}: "
                               f"{_reason(e, {})[0]}; expected a URL "
                               "postgresql://USER@HOST:PORT/DATABASE") from None
        _CONNINFO[self._key] = url
        self.db = self._connect(url, params)
        try:
            self._open()
        except BaseException:
            self.db.close()
            raise

    def _connect(self, url: str, params: Mapping[str, Any]) -> Connection:
        """A connection to ``url``, or the one-line error saying why there is none."""
        extra: dict[str, Any] = {}
        if "connect_timeout" not in params:
            extra["connect_timeout"] = CONNECT_TIMEOUT_S
        if "application_name" not in params:
            extra["application_name"] = "subzero"
        try:
            raw = psycopg.connect(url, autocommit=True, row_factory=_row_factory, **extra)
        except psycopg.Error as e:
            why, expected = _reason(e, params)
            raise CatalogError(f"cannot open the PostgreSQL catalog {self._key}: {why}; "
                               f"expected {expected}") from None
        try:
            # the notices of CREATE TABLE IF NOT EXISTS are not news; a writer waits for
            # the write lock as long as SQLite's would
            raw.execute("SELECT set_config('client_min_messages', 'warning', false), "
                        "set_config('lock_timeout', %s, false)", (LOCK_TIMEOUT,))
        except psycopg.Error as e:
            raw.close()
            raise CatalogError(f"cannot open the PostgreSQL catalog {self._key}: "
                               f"{_reason(e, params)[0]}; expected a PostgreSQL server"
                               ) from None
        return Connection(raw)

    # -- opening ---------------------------------------------------------------------------
    def _version(self) -> int | None:
        """The catalog's schema version, None where it has no tables yet."""
        if self.db.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]:
            row = self.db.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None:
                return int(row["value"])
        return None

    def _cannot_write(self, tables: bool) -> bool:
        """Whether this role cannot write the catalog: a read-only session or a standby
        server, or no right to add rows (or, without ``tables``, to create them)."""
        can = ("has_table_privilege('runs', 'INSERT') AND has_table_privilege('query_log', "
               "'INSERT') AND has_table_privilege('meta', 'UPDATE')" if tables else
               "COALESCE(has_schema_privilege(current_schema(), 'CREATE'), false)")
        row = self.db.execute("SELECT current_setting('transaction_read_only') = 'on' "
                              f"OR pg_is_in_recovery(), {can}").fetchone()
        return bool(row[0]) or not row[1]

    def _newer(self, version: int) -> CatalogError:
        """The one-line refusal of a catalog of a newer SubZero."""
        return CatalogError(f"the catalog {self._key} has schema version {version}; this "
                            f"SubZero reads up to {SCHEMA_VERSION} (upgrade SubZero)")

    def _create(self, version: int | None) -> None:
        """Create the catalog's tables, or migrate them from ``version``, in one
        transaction under the write lock: of processes opening a fresh catalog at once,
        one creates it and the others find it made."""
        with self._transaction():
            for stmt in PG_SCHEMA.split(";"):
                if stmt.strip():
                    self.db.execute(stmt)
            version = self._version()
            if version is None:
                self.db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                                (str(SCHEMA_VERSION),))
            elif version > SCHEMA_VERSION:
                raise self._newer(version)
            elif version < SCHEMA_VERSION:
                self._migrate(version)

    def _open(self) -> None:
        """Check the catalog's version; create its tables or migrate them (one process
        at a time, under the write lock), then let the concerns recover
        (:meth:`_recover`). A role that cannot write only reads a current catalog."""
        try:
            version = self._version()
            self.readonly = self._cannot_write(version is not None)
        except psycopg.Error as e:
            raise CatalogError(f"cannot read the catalog {self._key}: "
                               f"{_reason(e, {})[0]}; expected a SubZero catalog") from None
        if self.readonly:
            if version is None:
                raise CatalogError(f"the catalog {self._key} has no tables yet and this "
                                   "role cannot create them; expected a role that may "
                                   "create tables there, or a catalog made already")
            if version > SCHEMA_VERSION:
                raise self._newer(version)
            if version < SCHEMA_VERSION:
                raise CatalogError(
                    f"the catalog {self._key} has schema version {version}; this SubZero "
                    f"reads {SCHEMA_VERSION}, and this role cannot upgrade it: open it once "
                    "with a role that can write it")
            return
        if version is not None and version > SCHEMA_VERSION:
            raise self._newer(version)
        if version != SCHEMA_VERSION:
            try:
                self._create(version)
            except psycopg.Error as e:
                raise CatalogError(f"cannot {'create' if version is None else 'upgrade'} "
                                   f"the catalog {self._key}: {_reason(e, {})[0]}; expected "
                                   "a database this role may create tables in") from None
        try:
            self._recover()
        except self._refused:
            pass  # the write lock is busy: a later command recovers

    # -- what PostgreSQL says differently ----------------------------------------------------
    @property
    def home(self) -> Path:
        """The SubZero home the catalog belongs to."""
        return self._home

    @property
    def location(self) -> str:
        """The catalog's URL without its password."""
        return self._key

    def _ddl(self, stmt: str) -> str:
        return postgres_sql(stmt)

    def _transaction(self) -> Any:
        return _transaction(self.db)

    def _columns(self, table: str) -> list[str]:
        return [r[0] for r in self.db.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "AND table_schema = current_schema() ORDER BY ordinal_position", (table,))]

    def _replace_sql(self, table: str, key: Sequence[str], cols: Sequence[str],
                     named: bool = False) -> str:
        marks = ", ".join(f":{c}" for c in cols) if named else ", ".join("?" * len(cols))
        if table not in self._column_cache:
            self._column_cache[table] = self._columns(table)
        # the row replaced whole: the columns not given take their default (NULL)
        sets = ", ".join(f"{c} = EXCLUDED.{c}" if c in cols else f"{c} = DEFAULT"
                         for c in self._column_cache[table] if c not in key)
        return (f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks}) "
                f"ON CONFLICT ({', '.join(key)}) DO " + (f"UPDATE SET {sets}" if sets
                                                         else "NOTHING"))

    @classmethod
    def _write_detached(cls, key: str, sql: str, rows: list[tuple]) -> None:
        url = _CONNINFO.get(key, key)
        params = pg_conninfo.conninfo_to_dict(url)
        try:
            raw = psycopg.connect(url, autocommit=True, **(
                {} if "connect_timeout" in params else {"connect_timeout": CONNECT_TIMEOUT_S}))
        except psycopg.Error as e:
            if getattr(e, "sqlstate", None) == "3D000" or re.search(
                    r"database .* does not exist", str(e)):
                return  # the database was dropped: nothing to write into
            raise type(e)(_reason(e, params)[0]) from None
        try:
            with _transaction(Connection(raw)) as db:
                db.executemany(sql, rows)
        finally:
            raw.close()

    def close(self) -> None:
        """Close the connection."""
        self.db.close()


class PostgresCatalog(Runs, RunContents, Shards, Statistics, QueryLog, PostgresBackend):
    """The PostgreSQL catalog of one SubZero home: runs (with their arrays and
    operators), shards, statistics and the query log, in one database that many
    processes, users and hosts share.

    Parameters
    ----------
    url : str
        The database: ``postgresql://USER@HOST:PORT/DATABASE``.
    home : str or os.PathLike
        The SubZero home it belongs to.

    Notes
    -----
    The same concerns as :class:`~subzero.engine.catalog.sqlite.Catalog`, over
    :class:`PostgresBackend`: the same methods and answers.

    Examples
    --------
    Opening a database that is not there is one line, without the password:

    >>> PostgresCatalog("postgresql://me:s3cret@127.0.0.1:1/lineage", "/tmp/home")
    Traceback (most recent call last):
    ...
    subzero.errors.CatalogError: cannot open the PostgreSQL catalog postgresql://me@127.0.0.1:1/lineage: Connection refused; expected a PostgreSQL server accepting connections at 127.0.0.1:1
    """
