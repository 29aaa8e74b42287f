"""The catalog's tables: the schema version, the statements that create its tables, and
the migrations that bring an older catalog up to this version.

The statements are SQLite's (:mod:`subzero.engine.catalog.sqlite` runs them).
PostgreSQL keeps the same tables and :data:`SCHEMA_VERSION` with its own types
(:func:`postgres_sql`, :data:`PG_SCHEMA`; :mod:`subzero.engine.catalog.postgres`).
"""

from __future__ import annotations

import re

#: the version of the tables below, kept in ``meta.schema_version``
SCHEMA_VERSION = 6

#: the statements that create every table of a catalog of :data:`SCHEMA_VERSION`
SCHEMA = """
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


#: SQLite's column types and PostgreSQL's for them (:func:`postgres_sql`)
_PG_TYPES = (
    (r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b",
     "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (r"\bINTEGER\b", "BIGINT"),
    (r"\bREAL\b", "DOUBLE PRECISION"),
    (r"\bBLOB\b", "BYTEA"),
    # text compared and ordered by its bytes, as SQLite does, whatever the database's locale
    (r"\bTEXT\b", 'TEXT COLLATE "C"'),
)


def postgres_sql(stmt: str) -> str:
    """A statement of :data:`SCHEMA` or :data:`MIGRATIONS` with PostgreSQL's types:
    BIGINT for INTEGER, DOUBLE PRECISION for REAL, BYTEA for BLOB, an identity column
    for an AUTOINCREMENT key, and TEXT in the "C" collation (SQLite's order).

    Parameters
    ----------
    stmt : str
        SQLite's statement.

    Returns
    -------
    str
        PostgreSQL's.

    Examples
    --------
    >>> postgres_sql("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, x REAL)")
    'CREATE TABLE t (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, x DOUBLE PRECISION)'
    >>> postgres_sql("ALTER TABLE named_cells ADD COLUMN cells BLOB")
    'ALTER TABLE named_cells ADD COLUMN cells BYTEA'
    >>> postgres_sql("ALTER TABLE runs ADD COLUMN manifest TEXT")
    'ALTER TABLE runs ADD COLUMN manifest TEXT COLLATE "C"'
    """
    for sqlite, postgres in _PG_TYPES:
        stmt = re.sub(sqlite, postgres, stmt)
    return stmt


#: the statements that create every table of a catalog of :data:`SCHEMA_VERSION` in
#: PostgreSQL
PG_SCHEMA = postgres_sql(SCHEMA)
