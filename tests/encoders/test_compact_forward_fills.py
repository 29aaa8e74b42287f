"""FullCompact's groups that also hold the key cells whose sets contain their pattern
(:func:`encoders.layouts.patterns._fills`): what they take, and lookups in both
directions against FullOne."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encoders.layouts import fewcells, patterns
from encoders.layouts.cellindex import record_tokens
from encoders.layouts.pairs import group_keys
from encoders.lookup import open_shard
from subzero.cells import Ragged
from subzero.lineage import PairBatch
from tests.encoders.conformance import write_shard

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


def with_exceptions(h: int, w: int, flagged: dict[int, list[int]], base: int = 0
                    ) -> PairBatch:
    """Every cell ``k`` of an ``h x w`` array reads its box of radius ``base`` (clipped),
    but the cells of ``flagged`` read the cells listed there."""
    rows = []
    for k in range(h * w):
        if k in flagged:
            rows.append(np.unique(np.asarray(flagged[k], dtype=np.uint64)))
            continue
        i, j = divmod(k, w)
        ii = np.arange(max(0, i - base), min(h, i + base + 1))
        jj = np.arange(max(0, j - base), min(w, j + base + 1))
        rows.append((ii[:, None] * w + jj[None, :]).reshape(-1).astype(np.uint64))
    cells = np.arange(h * w, dtype=np.uint64)
    ins = Ragged.from_rows(rows, np.uint64)
    return PairBatch(Ragged.from_singletons(cells), ins=(ins,))


def _groups(pairs: PairBatch, shape) -> tuple[patterns.Patterns, list[np.ndarray]]:
    """The groups of ``pairs`` keyed by output cell, and each group's decoded ``K``."""
    g = group_keys(pairs.out, list(pairs.ins))
    p = patterns.build(g.keys, g.src, g.values, shape, [shape], min_group=2, pay=False)
    tok, toff, _ = record_tokens(np.asarray(p.records, dtype=np.uint8),
                                 np.asarray(p.record_offsets, dtype=np.int64))
    d = patterns.decode_keys(tok, toff[:-1])
    ks = [patterns.expand_keys(d, np.arange(len(p)) == i) for i in range(len(p))]
    return p, [np.sort(k) for k in ks]


def test_an_identity_group_takes_the_exceptions_that_read_their_own_cell():
    """8 x 8 identity; cells 18 and 45 read their 3 x 3 box (their own cell in it): the
    identity group is the whole array, and they keep their boxes in their own group."""
    box = {k: [k + dr * 8 + dc for dr in (-1, 0, 1) for dc in (-1, 0, 1)] for k in (18, 45)}
    p, ks = _groups(with_exceptions(8, 8, box), (8, 8))
    assert sorted(p.rows.tolist()) == list(range(64))
    assert any(k.tolist() == list(range(64)) for k in ks)
    assert any(k.tolist() == [18, 45] for k in ks)


def test_an_exception_that_does_not_read_its_own_cell_stays_a_hole():
    """Cell 18 reads the row above it only: the identity group must leave it out."""
    flagged = {18: [9, 10, 11], 45: [k for k in range(36, 55) if k != 45]}
    _, ks = _groups(with_exceptions(8, 8, flagged), (8, 8))
    ident = [k for k in ks if len(k) > 50]
    assert len(ident) == 1 and 18 not in ident[0].tolist() and 45 not in ident[0].tolist()


def test_a_stencil_group_takes_the_cells_whose_larger_box_holds_its_box():
    """A 3 x 3 stencil whose flagged cells read a 5 x 5 box: the interior group holds
    them too."""
    h = w = 12
    flagged = {}
    for k in (40, 77, 100):
        i, j = divmod(k, w)
        flagged[k] = [r * w + c for r in range(max(0, i - 2), min(h, i + 3))
                      for c in range(max(0, j - 2), min(w, j + 3))]
    _, ks = _groups(with_exceptions(h, w, flagged, base=1), (h, w))
    interior = max(ks, key=len)
    assert {40, 77, 100} <= set(interior.tolist())


def test_no_fill_when_the_sides_have_another_shape():
    keys = np.arange(8, dtype=np.uint64)
    code = np.zeros(8, dtype=np.int64)
    code[3] = 1
    sets = Ragged.from_rows([np.array([k // 2]) for k in range(8)], np.uint64)
    got = patterns._fills(keys, code, np.ones(8, dtype=bool), np.zeros(8, dtype=np.int64),
                          np.arange(8), [sets], (8,), [(4,)])
    assert len(got[0]) == 0


# ---------------------------------------------------------------------------------------
# lookups against FullOne
# ---------------------------------------------------------------------------------------


def _agree(tmp_path, pairs: PairBatch, shape, strategy: str, rng) -> None:
    c = write_shard(tmp_path / "c", "full-compact-" + strategy, pairs, shape, [shape])
    o = write_shard(tmp_path / "o", "full-one-" + strategy, pairs, shape, [shape])
    n = int(np.prod(shape))
    with open_shard(c["path"]) as cr, open_shard(o["path"]) as orr:
        for size in (1, 4, 60, None):
            q = (np.arange(n, dtype=np.uint64) if size is None
                 else np.unique(rng.integers(0, n, size)).astype(np.uint64))
            for few in (fewcells.FEW_CELLS, -1):
                with mock.patch.object(fewcells, "FEW_CELLS", few):
                    assert cr.backward(q, 0).tolist() == orr.backward(q, 0).tolist()
                    assert cr.forward(q, 0).tolist() == orr.forward(q, 0).tolist()


@SETTINGS
@given(h=st.integers(2, 30), w=st.integers(2, 30), seed=st.integers(0, 99),
       base=st.sampled_from([0, 1]), share=st.sampled_from([0.02, 0.1, 0.3]),
       own=st.sampled_from([0.0, 0.5, 1.0]), direction=st.sampled_from(["bwd", "fwd"]),
       tile=st.sampled_from([16, 64, patterns.TILE]))
def test_filled_groups_answer_as_full_one_does(tmp_path_factory, h, w, seed, base, share,
                                               own, direction, tile):
    """Flagged cells read a random part of their 5 x 5 box, their own cell (and so the
    identity) with probability ``own``; the other cells their box of radius ``base``."""
    rng = np.random.default_rng(seed)
    flagged = {}
    for k in np.flatnonzero(rng.random(h * w) < share).tolist():
        i, j = divmod(k, w)
        box = [r * w + c for r in range(max(0, i - 2), min(h, i + 3))
               for c in range(max(0, j - 2), min(w, j + 3))]
        part = [c for c in box if c != k and rng.random() < 0.6]
        if rng.random() < own:
            part.append(k)
        flagged[k] = part or [k]
    pairs = with_exceptions(h, w, flagged, base)
    with mock.patch.object(patterns, "TILE", tile):
        _agree(tmp_path_factory.mktemp("fill"), pairs, (h, w), direction, rng)


@pytest.mark.parametrize("direction", ["bwd", "fwd"])
def test_a_cleaner_of_several_tiles_answers_as_full_one_does(tmp_path, direction):
    h, w = 90, 80
    rng = np.random.default_rng(5)
    flagged = {}
    for k in np.flatnonzero(rng.random(h * w) < 0.02).tolist():
        i, j = divmod(k, w)
        flagged[k] = [r * w + c for r in range(max(0, i - 2), min(h, i + 3))
                      for c in range(max(0, j - 2), min(w, j + 3))]
    with mock.patch.object(patterns, "TILE", 256):
        _agree(tmp_path, with_exceptions(h, w, flagged), (h, w), direction, rng)
