"""What every part of the catalog stands on: a connection to its database, its
transactions, and the few statements that differ between databases.

:class:`CatalogBackend` is the interface. The concerns (:mod:`.runs`, :mod:`.contents`,
:mod:`.shards`, :mod:`.statistics`, :mod:`.querylog`) are small classes over it that only issue SQL
through ``db``, ``tx()`` and the helpers here; a database is one implementation of it
(:class:`~subzero.engine.catalog.sqlite.SQLiteBackend`), and a catalog is the concerns
composed over one (:class:`~subzero.engine.catalog.sqlite.Catalog`, and
:class:`~subzero.engine.catalog.postgres.PostgresCatalog` over
:class:`~subzero.engine.catalog.postgres.PostgresBackend`).

The SQL the concerns write is what SQLite and PostgreSQL share, with ``?`` placeholders;
what they do not share goes through :meth:`CatalogBackend._replace_sql`,
:meth:`CatalogBackend._columns`, :meth:`CatalogBackend._ddl` (a table's column types) and
:attr:`CatalogBackend._insertion_order`.
"""

from __future__ import annotations

import json
import re
import sys
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from subzero.engine.catalog.schema import MIGRATIONS, SCHEMA_VERSION
from subzero.engine.diskfull import no_space
from subzero.errors import CatalogError

#: read-only catalogs this process has said so of (:meth:`CatalogBackend._skip`)
_SAID_READONLY: set[str] = set()


def loads(v: str | None) -> Any:
    """A JSON column's value, None for NULL.

    Parameters
    ----------
    v : str or None
        The column's text.

    Returns
    -------
    Any
        The decoded value, or None.

    Examples
    --------
    >>> loads('{"a": [1, 2]}'), loads(None)
    ({'a': [1, 2]}, None)
    """
    return None if v is None else json.loads(v)


def without_password(url: str) -> str:
    """``url`` (or a ``key=value`` connection string) without its password.

    Parameters
    ----------
    url : str
        A PostgreSQL URL or connection string.

    Returns
    -------
    str
        The same without the password (in the user part or as a parameter).

    Examples
    --------
    >>> without_password("postgresql://me:s3cret@db.example.org:5432/lineage")
    'postgresql://me@db.example.org:5432/lineage'
    >>> without_password("postgres://db/x?password=s3cret&sslmode=require")
    'postgres://db/x?sslmode=require'
    >>> without_password("host=db password='s 3' dbname=x")
    'host=db dbname=x'
    """
    if "://" not in url:
        return re.sub(r"\s*\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", "", url).strip()
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        auth, _, hosts = netloc.rpartition("@")
        netloc = f"{auth.partition(':')[0]}@{hosts}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class CatalogBackend(ABC):
    """A connection to one catalog's database: what the concerns of a catalog issue
    their SQL through.

    Attributes
    ----------
    path : pathlib.Path
        The catalog's file; its parent is the SubZero home (a catalog in a database
        server has no file: a name in its home).
    home : pathlib.Path
        The SubZero home the catalog belongs to.
    location : str
        What names the catalog in messages (its file, or its URL without a password).
    db : Any
        The open connection: ``db.execute(sql, params)`` and ``db.executemany(sql,
        rows)`` take ``?`` (or ``:name``) placeholders and give rows that are read by
        position and by column name (``dict(row)`` is the row's columns).
    readonly : bool
        The home cannot be written here (a read-only mount, another user's home, a full
        disk): nothing is recorded, and what readers would cache is skipped.
    full : bool
        The home's disk is full: read-only, and a write is a no-space error.
    """

    path: Path
    db: Any
    readonly: bool
    full: bool
    #: what names this catalog's database within this process (its file's real path)
    _key: str
    #: what the database raises when it refuses a write (a full disk, a busy file)
    _refused: ClassVar[tuple[type[Exception], ...]] = ()
    #: what the database raises for any failure
    _errors: ClassVar[tuple[type[Exception], ...]] = ()
    #: the column or expression that orders a table's rows as they were inserted
    _insertion_order: ClassVar[str]

    # -- what each database implements ----------------------------------------------------
    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """One transaction on ``db``, all or nothing, without the read-only checks of
        :meth:`tx`; inside another, it is part of that one."""

    @abstractmethod
    def _columns(self, table: str) -> list[str]:
        """The columns of ``table``, in the table's order."""

    @abstractmethod
    def _replace_sql(self, table: str, key: Sequence[str], cols: Sequence[str],
                     named: bool = False) -> str:
        """The statement that inserts a row of ``cols`` into ``table``, replacing the row
        with the same ``key`` columns whole (columns not given are NULL); ``named``
        takes ``:col`` placeholders, else ``?``."""

    @classmethod
    @abstractmethod
    def _write_detached(cls, key: str, sql: str, rows: list[tuple]) -> None:
        """Run ``sql`` over ``rows`` in one transaction through a connection of its own
        to the catalog named ``key`` (when no catalog object is left, at exit); nothing
        when that catalog no longer exists."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    # -- what every database shares --------------------------------------------------------
    @property
    def home(self) -> Path:
        """The SubZero home the catalog belongs to (the folder of its file)."""
        return self.path.parent

    @property
    def location(self) -> str:
        """What names the catalog in messages (its file)."""
        return str(self.path)

    def _ddl(self, stmt: str) -> str:
        """A statement of :mod:`.schema` as this database takes it (SQLite's as it is)."""
        return stmt

    def _migrate(self, version: int) -> None:
        """Bring a catalog of an older schema up to
        :data:`~subzero.engine.catalog.schema.SCHEMA_VERSION` (inside the opening
        transaction: all steps or none)."""
        for v in range(version + 1, SCHEMA_VERSION + 1):
            for stmt in MIGRATIONS.get(v, ()):
                stmt = self._ddl(stmt)
                added = re.fullmatch(r"ALTER TABLE (\w+) ADD COLUMN (\w+) .*", stmt)
                if added and added[2] in self._columns(added[1]):
                    continue  # the table is newer than the catalog (created just now)
                self.db.execute(stmt)
        self.db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                        (str(SCHEMA_VERSION),))

    def _recover(self) -> None:
        """What opening a writable catalog does once its tables are current; a concern
        adds its own (runs: mark the runs of dead processes failed)."""

    @property
    def schema_version(self) -> int:
        """The version of the catalog's tables (``meta.schema_version``)."""
        return int(self.db.execute("SELECT value FROM meta WHERE key='schema_version'")
                   .fetchone()["value"])

    def tx(self) -> AbstractContextManager[Any]:
        """One IMMEDIATE transaction: all or nothing (``with cat.tx() as db:``).

        Returns
        -------
        contextlib.AbstractContextManager
            Gives the connection; a transaction opened inside another is part of it.

        Raises
        ------
        NoSpaceError
            The home's disk is full.
        CatalogError
            The home is read-only here.
        """
        if self.full:
            raise no_space("the catalog", self.home)
        if self.readonly:
            raise CatalogError(f"the SubZero home {self.home} is read-only here; "
                               "a command that records something needs a writable home")
        return self._transaction()

    def _skip(self, what: str) -> bool:
        """True (and said once per process) when the catalog is read-only: ``what`` is
        not recorded."""
        if self.readonly:
            if self._key not in _SAID_READONLY:
                _SAID_READONLY.add(self._key)
                why = "its disk is full" if self.full else "it is read-only here"
                print(f"subzero: note: the home {self.home} cannot be written ({why}); "
                      f"{what} and the like are not recorded", file=sys.stderr)
            return True
        return False
