"""Pieces of the statistics pass that need no Spark."""

import numpy as np

from optimizer.stats import ModeStats, _tile_stats, sample_boxes
from subzero.cells import Box, Ragged
from subzero.lineage import PairBatch
from subzero.runtime import ChunkContext


def test_mode_stats_round_trip_through_catalog_rows():
    ms = ModeStats(10, 20, 90, 20, 40, 0, 0, 0.5, (60.0, 30.0))
    row = ms.to_row()
    assert row["in_cells_0"] == 60 and row["in_cells_1"] == 30
    assert ModeStats.from_row(row) == ms
    assert ms.scaled(2).in_by_input == (120.0, 60.0) and ms.fanin == 4.5


def test_sample_tiles_are_whole_and_spread_over_the_array():
    boxes = sample_boxes((1000, 100), (500, 100), tiles=3, cells=10_000)
    assert len(boxes) == 3
    assert len({b.size for b in boxes}) == 1 and boxes[0].size <= 10_000
    assert boxes[0].lo == (0, 0) and boxes[1].lo[0] > 250 and boxes[2].lo[0] > 750
    # an array smaller than a tile is sampled whole
    assert sample_boxes((5, 5), (5, 5)) == [Box((0, 0), (5, 5))]


def test_tile_statistics_count_pairs_cells_and_distinct_cells():
    ch = ChunkContext((0, 0), Box((0, 0), (2, 2)), (Box((0, 0), (2, 2)),), (2, 2), ((2, 2),))
    out = Ragged.from_singletons(np.arange(4, dtype=np.uint64))
    ins = Ragged.from_rows([np.array([0, 1], np.uint64), np.array([1], np.uint64),
                            np.array([1, 2, 3], np.uint64), np.array([3], np.uint64)])
    pay = PairBatch(Ragged.from_rows([np.array([0, 1], np.uint64)]),
                    payload=Ragged.from_rows([np.array([7, 7, 7], np.uint8)], np.uint8))
    d = _tile_stats(ch, PairBatch(out, ins=(ins,)), pay)
    assert d["cells"] == 4
    assert d["full"] == {"pairs": 4, "out_cells": 4, "in_cells": 7, "out_distinct": 4,
                         "in_distinct": 4, "in_by_input": [7]}
    assert d["pay"]["payload_bytes"] == 3 and d["pay"]["payload_cell_bytes"] == 6
    assert _tile_stats(ch, None, None) == {"cells": 4}
