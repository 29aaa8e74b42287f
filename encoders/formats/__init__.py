"""Byte formats of lineage shards: pure numpy, vectorized over batches, no I/O.

=================================  ===========================================================
module                             holds
=================================  ===========================================================
:mod:`~encoders.formats.csr`       CSR batches of variable-length rows (values + offsets)
:mod:`~encoders.formats.varint`    LEB128 varints and zigzag codes, in bulk
:mod:`~encoders.formats.codec`     cell sets as delta lists or boxes, absolute or relative
:mod:`~encoders.formats.hashing`   64-bit row fingerprints and exact deduplication of rows
:mod:`~encoders.formats.payloads`  payload sections inside records (PayOne, PayMany)
=================================  ===========================================================

Import the modules themselves (``from encoders.formats import codec``); this package holds
nothing else.
"""
