"""The catalog: one database per home recording runs, arrays, operators, shards,
statistics and the query log.

=====================  ==================================================================
``base``               :class:`CatalogBackend`, the interface every concern stands on
``schema``             the schema version, its tables and the migrations to it
``runs``               runs and their status, and derived runs
``contents``           what a run recorded of its workflow: its arrays and operators
``shards``             lineage shards' rows (:func:`shard_row`)
``statistics``         operator profiles and the costs the optimizer learns from
``querylog``           the query log and the start cells of named queries
``sqlite``             the SQLite backend, and :class:`Catalog`: every concern over it
``postgres``           the PostgreSQL backend, and :class:`PostgresCatalog`: every concern
                       over it (imported, with psycopg, when first asked for)
=====================  ==================================================================
"""

from typing import Any

from subzero.engine.catalog.base import CatalogBackend
from subzero.engine.catalog.contents import RunContents
from subzero.engine.catalog.querylog import QueryLog
from subzero.engine.catalog.runs import Runs
from subzero.engine.catalog.schema import MIGRATIONS, SCHEMA_VERSION
from subzero.engine.catalog.shards import Shards, shard_row
from subzero.engine.catalog.sqlite import Catalog, SQLiteBackend, damaged_catalog, is_damage
from subzero.engine.catalog.statistics import Statistics

# PostgresCatalog and PostgresBackend are not in __all__: ``import *`` would import psycopg
__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Catalog", "CatalogBackend", "QueryLog",
           "RunContents", "Runs", "SQLiteBackend", "Shards", "Statistics", "damaged_catalog",
           "is_damage", "shard_row"]


def __getattr__(name: str) -> Any:
    """:class:`~subzero.engine.catalog.postgres.PostgresCatalog` and
    :class:`~subzero.engine.catalog.postgres.PostgresBackend`, imported when first asked
    for: a SQLite catalog never imports psycopg."""
    if name in ("PostgresCatalog", "PostgresBackend"):
        from subzero.engine.catalog import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
