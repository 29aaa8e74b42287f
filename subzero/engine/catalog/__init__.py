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
=====================  ==================================================================
"""

from subzero.engine.catalog.base import CatalogBackend
from subzero.engine.catalog.contents import RunContents
from subzero.engine.catalog.querylog import QueryLog
from subzero.engine.catalog.runs import Runs
from subzero.engine.catalog.schema import MIGRATIONS, SCHEMA_VERSION
from subzero.engine.catalog.shards import Shards, shard_row
from subzero.engine.catalog.sqlite import Catalog, SQLiteBackend, damaged_catalog, is_damage
from subzero.engine.catalog.statistics import Statistics

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Catalog", "CatalogBackend", "QueryLog",
           "RunContents", "Runs", "SQLiteBackend", "Shards", "Statistics", "damaged_catalog",
           "is_damage", "shard_row"]
