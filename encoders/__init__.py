"""Lineage storage (paper VI-B): one module per encoding, registered here.

=============  =================================================================  =========
encoding       layout                                                             keyed by
=============  =================================================================  =========
``FullOne``    one index item per key cell -> shared record of the other side     out | in
``FullMany``   one entry per region pair (both cell sets) + R-tree on key boxes;   out | in
               one-output-cell pairs grouped by their relative offsets per tile
``PayOne``     one index item per output cell -> shared payload record            out
``PayMany``    one entry per region pair (output cells + payload) + R-tree         out
=============  =================================================================  =========

Modules: :mod:`~encoders.base` (interfaces only), one module per encoding
(:mod:`~encoders.full_one`, :mod:`~encoders.full_many`, :mod:`~encoders.pay_one`,
:mod:`~encoders.pay_many`) on two shared layouts (:mod:`~encoders.cellindex`,
:mod:`~encoders.pairtable`; FullMany's grouped entries: :mod:`~encoders.relgroups`), byte
codecs (:mod:`~encoders.codec` for cell sets, :mod:`~encoders.varint`,
:mod:`~encoders.hashing`, :mod:`~encoders.csr`, :mod:`~encoders.payloads`), the LMDB/R-tree
store (:mod:`~encoders.store`), the sink the engine writes through (:mod:`~encoders.sink`),
batched lookups (:mod:`~encoders.lookup`) and a size/cost model (:mod:`~encoders.cost`).

Importing this package registers every encoding (:mod:`encoders.registry`).
"""

from encoders.base import Encoding, LookupTimeout
from encoders.full_many import FullMany
from encoders.full_one import FullOne
from encoders.pay_many import PayMany
from encoders.pay_one import PayOne
from encoders.registry import encoding_for, register
from encoders.sink import ShardSink, make_sink, write_shard

for _cls in (FullOne, FullMany, PayOne, PayMany):
    register(_cls)

__all__ = ["Encoding", "FullOne", "FullMany", "PayOne", "PayMany", "LookupTimeout",
           "ShardSink", "encoding_for", "make_sink", "write_shard"]
