"""Shard layouts: how the encodings arrange region pairs in LMDB tables, blobs and R-trees.

====================================  ========================================================
module                                holds
====================================  ========================================================
:mod:`~encoders.layouts.pairs`        region-pair batches: canonical rows, statistics, keys
:mod:`~encoders.layouts.keyspace`     key-space geometry: coordinates, runs, boxes, ranges
:mod:`~encoders.layouts.cellindex`    per-cell layout (FullOne, PayOne): cell index + heap
:mod:`~encoders.layouts.fewcells`     lookups of a few cells on it, in plain Python
:mod:`~encoders.layouts.pairtable`    per-pair layout (FullMany, PayMany): entries + R-trees
:mod:`~encoders.layouts.relgroups`    FullMany's grouped one-output-cell entries
====================================  ========================================================

Import the modules themselves (``from encoders.layouts import cellindex``); this package
holds nothing else.
"""
