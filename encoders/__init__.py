"""Lineage storage (paper VI-B): one module per encoding, registered here.

===============  ======================================================================  =========
encoding         layout                                                                  keyed by
===============  ======================================================================  =========
``FullOne``      one index item per key cell -> shared record of the other side          out | in
``FullMany``     one entry per region pair (both cell sets) + R-tree on key boxes;       out | in
                 one-output-cell pairs grouped by their relative offsets per tile
``FullCompact``  key cells sharing a relative or absolute pattern as groups              out | in
                 (runs of cells + the pattern); the other cells as FullOne stores them
``PayOne``       one index item per output cell -> shared payload record                 out
``PayMany``      one entry per region pair (output cells + payload) + R-tree             out
===============  ======================================================================  =========

=================================  ==========================================================
module                             holds
=================================  ==========================================================
:mod:`~encoders.base`              interfaces only: Encoding, ShardData, EncodedShard
:mod:`~encoders.full_one`,         one module per encoding
:mod:`~encoders.full_many`,
:mod:`~encoders.full_compact`,
:mod:`~encoders.pay_one`,
:mod:`~encoders.pay_many`
:mod:`~encoders.registry`          encoding names and strategies -> Encoding classes
:mod:`~encoders.layouts`           shard layouts: pairs, key spaces, the cell index (*One),
                                   the pair table and grouped entries (*Many)
:mod:`~encoders.formats`           byte formats: CSR batches, varints, the cell-set codec,
                                   row hashing, payload sections
:mod:`~encoders.store`             the LMDB/R-tree store (the only module touching files)
:mod:`~encoders.sink`              the sink the engine writes shards through
:mod:`~encoders.lookup`            batched lookups on published shards
:mod:`~encoders.sizes`             the linear size/time model (features, default
                                   coefficients; :mod:`optimizer.calibrate` fits them)
=================================  ==========================================================

Importing this package registers every encoding (:mod:`encoders.registry`).
"""

from encoders.base import Encoding, LookupTimeout
from encoders.full_compact import FullCompact
from encoders.full_many import FullMany
from encoders.full_one import FullOne
from encoders.pay_many import PayMany
from encoders.pay_one import PayOne
from encoders.registry import encoding_for, register
from encoders.sink import ShardSink, make_sink, write_shard

for _cls in (FullOne, FullMany, FullCompact, PayOne, PayMany):
    register(_cls)

__all__ = ["Encoding", "FullOne", "FullMany", "FullCompact", "PayOne", "PayMany", "LookupTimeout",
           "ShardSink", "encoding_for", "make_sink", "write_shard"]
