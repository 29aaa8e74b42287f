"""Which catalog a home uses: its configuration, written once in the home, and
:func:`open_catalog`, the one way every command opens a home's catalog.

A home's catalog is an SQLite file inside it (``catalog.sqlite``, the default) or a
PostgreSQL database that several processes and users share (``--catalog
postgresql://user@host:port/db`` or ``$SUBZERO_CATALOG``). A home made with a PostgreSQL
catalog says so in ``home.json``::

    {"version": 1, "id": "<uuid>", "catalog": "postgresql://user@host:5432/db"}

so that every later command finds the catalog from the home alone. The file never holds a
password: the catalog's URL is stored without one, and libpq's usual sources give it
(``PGPASSWORD``, ``~/.pgpass``). The catalog records the home's ``id`` too, and a catalog
that belongs to another home is refused rather than mixed with this one's files.

A home without ``home.json`` is an SQLite home, as every home made before this file was:
nothing changes for them.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from subzero.engine import datastore, layout
from subzero.engine.catalog import Catalog
from subzero.engine.catalog.base import without_password
from subzero.errors import CatalogError

#: the file in a home that names its catalog (absent: the SQLite catalog in the home)
CONFIG_FILE = "home.json"
CONFIG_VERSION = 1
#: the catalog URL schemes a home may name
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: the catalog this process was asked for on the command line (``--catalog``)
_requested: str | None = None
#: the catalog each home was opened with in this process (:func:`use_catalog`)
_per_home: dict[Path, str] = {}


@dataclass(frozen=True)
class HomeConfig:
    """What ``home.json`` says of a home.

    Attributes
    ----------
    id : str
        The home's identity, also recorded in its catalog.
    catalog : str
        ``"sqlite"`` (``catalog.sqlite`` in the home) or a PostgreSQL URL without a
        password.
    """

    id: str
    catalog: str = "sqlite"

    def to_json(self) -> dict[str, Any]:
        return {"version": CONFIG_VERSION, "id": self.id, "catalog": self.catalog}


def request_catalog(url: str | None) -> None:
    """Make ``url`` the catalog this process asks for (the CLI's ``--catalog``); None
    leaves ``$SUBZERO_CATALOG`` or the home's own configuration to decide."""
    global _requested
    _requested = check_catalog_url(url) if url else None


def use_catalog(home: Path, url: str | None) -> None:
    """Open ``home``'s catalog with ``url`` for the rest of this process (the Python API's
    ``Home(path, catalog=URL)``: a URL with a password need not be given again)."""
    if url:
        _per_home[Path(home)] = check_catalog_url(url)


def requested_catalog(url: str | None = None, home: Path | None = None) -> str | None:
    """The catalog asked for: ``url``, else the one ``home`` was opened with
    (:func:`use_catalog`), else ``--catalog``, else ``$SUBZERO_CATALOG`` (checked,
    :func:`check_catalog_url`), or None."""
    url = (url or (_per_home.get(Path(home)) if home is not None else None) or _requested
           or os.environ.get("SUBZERO_CATALOG") or None)
    return None if url is None else check_catalog_url(url)


def check_catalog_url(url: str) -> str:
    """``url`` if it names a catalog SubZero can use, else a one-line
    :class:`CatalogError`.

    Examples
    --------
    >>> check_catalog_url("postgresql://me@127.0.0.1:5432/lineage")
    'postgresql://me@127.0.0.1:5432/lineage'
    >>> check_catalog_url("sqlite")
    'sqlite'
    >>> check_catalog_url("mysql://db/x")
    Traceback (most recent call last):
    ...
    subzero.errors.CatalogError: catalog 'mysql://db/x': expected postgresql://USER@HOST:PORT/DATABASE (or sqlite, the catalog inside the home)
    """
    parts = urlsplit(url)
    if url == "sqlite" or (parts.scheme in POSTGRES_SCHEMES and parts.hostname
                           and parts.path.strip("/")):
        return url
    raise CatalogError(f"catalog {without_password(url)!r}: expected "
                       "postgresql://USER@HOST:PORT/DATABASE (or sqlite, the catalog inside "
                       "the home)")


def config_path(home: Path) -> Path:
    """The home's configuration file."""
    return Path(home) / CONFIG_FILE


def read_config(home: Path) -> HomeConfig | None:
    """What ``home.json`` says, or None when the home has none (an SQLite home).

    Raises
    ------
    CatalogError
        The file is not a configuration this SubZero reads.
    """
    path = config_path(home)
    try:
        if datastore.mounted(home) is not None:
            datastore.mounted(home).check()  # endpoint, credentials, bucket: one line
            if not datastore.pull(path):
                return None
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise CatalogError(f"{path} cannot be read ({e}); expected the home's "
                           "configuration as JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("id"), str) or not isinstance(
            doc.get("catalog"), str):
        raise CatalogError(f"{path} is not a SubZero home's configuration; expected "
                           '{"version": 1, "id": ..., "catalog": ...}')
    if int(doc.get("version", 1)) > CONFIG_VERSION:
        raise CatalogError(f"{path} has version {doc['version']}; this SubZero reads up to "
                           f"{CONFIG_VERSION} (upgrade SubZero)")
    return HomeConfig(id=doc["id"], catalog=check_catalog_url(doc["catalog"]))


def _write_config(home: Path, config: HomeConfig) -> None:
    """Write ``home.json`` whole (a temporary file renamed into place)."""
    path = config_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{CONFIG_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(config.to_json(), indent=1) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    datastore.push(path)


def home_exists(home: Path) -> bool:
    """Whether ``home`` holds a catalog (an SQLite file, or a configuration naming one;
    an object-store home's configuration is fetched)."""
    if datastore.mounted(home) is not None:
        return read_config(home) is not None
    return layout.catalog_path(home).is_file() or config_path(home).is_file()


def catalog_url(home: Path, url: str | None = None) -> str:
    """The catalog ``home`` uses, as its configuration and the request (``url``,
    ``--catalog``, ``$SUBZERO_CATALOG``) agree: ``"sqlite"`` or a PostgreSQL URL.

    Raises
    ------
    CatalogError
        The request names another catalog than the home's.
    """
    asked = requested_catalog(url, home)
    config = read_config(home)
    if config is not None:
        if asked is not None and without_password(asked) != config.catalog:
            raise CatalogError(
                f"the home {datastore.home_name(home)} uses the catalog {config.catalog}, not "
                f"{without_password(asked)} (leave --catalog and $SUBZERO_CATALOG out, or "
                "use another --home)")
        return asked or config.catalog  # the request may carry the password
    if asked is not None and asked != "sqlite" and layout.catalog_path(home).is_file():
        raise CatalogError(f"the home {datastore.home_name(home)} has its own SQLite catalog; "
                           f"it cannot use {without_password(asked)} (use another --home)")
    return asked or "sqlite"


def open_catalog(home: str | os.PathLike | Path, url: str | None = None, *,
                 create: bool = False) -> Any:
    """The catalog of ``home``: SQLite in the home, or the PostgreSQL database its
    configuration (or the request) names.

    Parameters
    ----------
    home : path-like
        The SubZero home (resolved already, :func:`~subzero.engine.layout.resolve_home`).
    url : str, optional
        The catalog asked for (else ``--catalog``, ``$SUBZERO_CATALOG``, the home's own).
    create : bool
        Make the home and its catalog where there is none (a run); a reading command never
        makes a home.

    Returns
    -------
    Catalog or PostgresCatalog
        The open catalog, with the same methods either way.

    Raises
    ------
    CatalogError
        No home at ``home`` (and not ``create``), a request for another catalog than the
        home's, an unreachable or refused catalog, or one that belongs to another home.
    """
    home = Path(home)
    if home.exists() and not home.is_dir():
        raise CatalogError(f"SubZero home {home} is a file; expected a folder (--home DIR)")
    if not create and not home_exists(home):
        raise CatalogError(f"no SubZero home at {datastore.home_name(home)} (run a "
                           "workflow first, or pass --home)")
    which = catalog_url(home, url)
    if which == "sqlite":
        if datastore.mounted(home) is not None:
            raise CatalogError(f"the object-store home {datastore.mounted(home).url} needs a "
                               "PostgreSQL catalog (--catalog postgresql://USER@HOST:PORT/DB "
                               "or $SUBZERO_CATALOG); an SQLite file cannot live there")
        return Catalog(layout.catalog_path(home))
    from subzero.engine.catalog.postgres import PostgresCatalog

    config = read_config(home)
    cat = PostgresCatalog(which, home)
    try:
        _claim(cat, home, config, which)
    except BaseException:
        cat.close()
        raise
    return cat


def prepare_catalog(home: str | os.PathLike | Path) -> None:
    """Before a run does anything: open the catalog ``home`` will use when it is not the
    SQLite one in the home (a PostgreSQL catalog), so that an unreachable or refused
    catalog is said in one line before inputs are read or Spark starts, and a new home
    claims its catalog. Nothing for an SQLite home (its file is made by the run)."""
    home = Path(home)
    if home.exists() and not home.is_dir():
        raise CatalogError(f"SubZero home {home} is a file; expected a folder (--home DIR)")
    if catalog_url(home) != "sqlite" or datastore.mounted(home) is not None:
        open_catalog(home, create=True).close()


def _claim(cat: Any, home: Path, config: HomeConfig | None, url: str) -> None:
    """Check that the PostgreSQL catalog ``cat`` belongs to ``home`` (its ``meta.home``
    is the home's id). A home made just now claims a catalog no home has claimed, in one
    transaction, then writes its configuration."""
    mine = config.id if config is not None else uuid.uuid4().hex
    owner_sql = "SELECT value FROM meta WHERE key = 'home'"
    if cat.readonly:
        row = cat.db.execute(owner_sql).fetchone()
        owner = None if row is None else row["value"]
        if config is None or owner not in (None, mine):
            raise CatalogError(f"the catalog {without_password(url)} cannot be written by "
                               "this user and does not belong to the home "
                               f"{datastore.home_name(home)}")
        return
    with cat.tx() as db:
        row = db.execute(owner_sql).fetchone()
        owner = None if row is None else row["value"]
        if owner is None:
            if config is None and db.execute("SELECT id FROM runs LIMIT 1").fetchone():
                raise CatalogError(
                    f"the catalog {without_password(url)} already records runs of another "
                    f"home; expected an empty database for {datastore.home_name(home)}")
            db.execute("INSERT INTO meta (key, value) VALUES ('home', ?)", (mine,))
            owner = mine
    if owner != mine:
        raise CatalogError(f"the catalog {without_password(url)} belongs to another SubZero "
                           f"home, not {datastore.home_name(home)} (give each home a database "
                           "of its own)")
    if config is None:
        _write_config(home, HomeConfig(id=mine, catalog=without_password(url)))
