"""FullCompact's forward index built the other way round, its left-over output cells kept
keyed by output cell: lookups against FullOne and brute force, sizes against the
backward index."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encoders import full_compact
from encoders.full_compact import _in_reach, _reach
from encoders.layouts import fewcells
from encoders.layouts.pairs import group_keys
from encoders.lookup import open_shard
from subzero.cells import Ragged
from subzero.lineage import PairBatch
from subzero.testing import brute_backward, brute_forward
from tests.encoders.conformance import write_shard

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


def cosmic_rays(h: int, w: int, seed: int = 0, flagged: float = 0.02, radii=(1, 2, 3),
                irregular: float = 0.3) -> PairBatch:
    """Identity, but a flagged pixel reads a clipped box of a radius drawn from ``radii``,
    some (``irregular``) only a random part of it: few flagged pixels of a tile share a
    pattern, so most of them are left out of the groups."""
    rng = np.random.default_rng(seed)
    n = h * w
    rows = []
    for k in range(n):
        if rng.random() >= flagged:
            rows.append(np.array([k], dtype=np.uint64))
            continue
        i, j = divmod(k, w)
        r = int(rng.choice(radii))
        ii = np.arange(max(0, i - r), min(h, i + r + 1))
        jj = np.arange(max(0, j - r), min(w, j + r + 1))
        box = (ii[:, None] * w + jj[None, :]).reshape(-1)
        if rng.random() < irregular:
            box = box[rng.random(len(box)) < 0.5]
        rows.append(np.unique(np.append(box, k)).astype(np.uint64))
    cells = np.arange(n, dtype=np.uint64)
    ins = Ragged.from_rows(rows, np.uint64)
    return PairBatch(Ragged.from_singletons(cells), ins=(ins,))


def _answers_agree(compact: str, one: str, pairs: PairBatch, n_out: int, n_in: int,
                   rng: np.random.Generator, i: int = 0) -> None:
    """Every lookup of the FullCompact shard ``compact`` (few cells and many) equals
    FullOne's on ``one`` and brute force."""
    with open_shard(compact) as c, open_shard(one) as o:
        for n in (1, 3, 40, 500, None):
            q = (np.arange(n_out, dtype=np.uint64) if n is None
                 else np.unique(rng.integers(0, n_out, n)).astype(np.uint64))
            qi = (np.arange(n_in, dtype=np.uint64) if n is None
                  else np.unique(rng.integers(0, n_in, n)).astype(np.uint64))
            for few in (fewcells.FEW_CELLS, -1):
                with mock.patch.object(fewcells, "FEW_CELLS", few):
                    fw, bw = c.forward(qi, i), c.backward(q, i)
                    assert fw.dtype == np.uint64 and (np.diff(fw) > 0).all()
                    assert bw.dtype == np.uint64 and (np.diff(bw) > 0).all()
                    assert fw.tolist() == o.forward(qi, i).tolist()
                    assert bw.tolist() == o.backward(q, i).tolist()
                    if n is not None and n <= 40:
                        assert set(fw.tolist()) == brute_forward(pairs, qi, i)
                        assert set(bw.tolist()) == brute_backward(pairs, q, i)


# ---------------------------------------------------------------------------------------
# the reach of a residue keyed by output cell
# ---------------------------------------------------------------------------------------


def test_reach_is_the_least_and_greatest_offset_of_a_value_cell_from_its_key():
    keys = Ragged.from_singletons(np.array([5, 9, 20], dtype=np.uint64))
    vals = Ragged.from_rows([np.array([3, 5, 7]), np.array([9]), np.array([21, 26])],
                            np.uint64)
    assert _reach(group_keys(keys, [vals]), (30,)) == (-2, 6, [[-2, 6]])
    # on a 4 x 10 array: key (0, 5) reads (0, 3) and (1, 7); key (2, 0) reads (1, 9)
    keys = Ragged.from_singletons(np.array([5, 20], dtype=np.uint64))
    vals = Ragged.from_rows([np.array([3, 17]), np.array([19])], np.uint64)
    assert _reach(group_keys(keys, [vals]), (4, 10)) == (-2, 12, [[-1, 1], [-2, 9]])


def test_reach_of_keys_without_value_cells_is_empty():
    keys = Ragged.from_singletons(np.array([1, 2], dtype=np.uint64))
    vals = Ragged.from_rows([np.array([], dtype=np.uint64)] * 2, np.uint64)
    assert _reach(group_keys(keys, [vals]), (2, 3)) == (0, 0, [[0, 0], [0, 0]])


@SETTINGS
@given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=3), data=st.data())
def test_in_reach_keeps_exactly_the_keys_whose_box_of_reach_holds_a_query_cell(shape, data):
    n = int(np.prod(shape))
    nd = len(shape)
    cells = st.lists(st.integers(0, n - 1), max_size=12)
    keys = np.unique(data.draw(cells)).astype(np.uint64)
    q = np.unique(data.draw(cells)).astype(np.uint64)
    axes = []
    for _ in range(nd):
        a = data.draw(st.integers(-3, 3))
        axes.append([a, a + data.draw(st.integers(0, 3))])
    got = _in_reach(keys, q, axes, shape)
    kc = np.array(np.unravel_index(keys.astype(np.int64), shape)).T.reshape(-1, nd)
    qc = np.array(np.unravel_index(q.astype(np.int64), shape)).T.reshape(-1, nd)
    lo, hi = np.array(axes)[:, 0], np.array(axes)[:, 1]
    want = [bool(((d >= lo) & (d <= hi)).all(axis=1).any()) if len(q) else False
            for d in (qc[None, :, :] - kc[:, None, :])] if nd > 1 else [True] * len(keys)
    assert got.tolist() == want


def test_in_reach_keeps_every_key_when_the_rows_are_too_many_to_list():
    keys = np.array([0, 5], dtype=np.uint64)
    q = np.array([99], dtype=np.uint64)
    with mock.patch.object(full_compact, "REACH_ROWS", 1):
        assert _in_reach(keys, q, [[0, 1], [0, 0]], (10, 10)).tolist() == [True, True]
    assert _in_reach(keys, q, [[0, 1], [0, 0]], (10, 10)).tolist() == [False, False]


# ---------------------------------------------------------------------------------------
# lookups against FullOne
# ---------------------------------------------------------------------------------------


# the last: a few keys far apart, whose whole index is read
@pytest.mark.parametrize("h,w,flagged",
                         [(60, 70, 0.02), (130, 33, 0.02), (1000, 50, 0.0002)])
@pytest.mark.parametrize("outkeyed", ["always", "auto"])
def test_cosmic_rays_forward_answers_as_full_one_does(tmp_path, h, w, flagged, outkeyed):
    pairs = cosmic_rays(h, w, seed=h, flagged=flagged)
    with mock.patch.object(full_compact, "OUTKEYED", outkeyed):
        c = write_shard(tmp_path / "c", "full-compact-fwd", pairs, (h, w), [(h, w)])
    o = write_shard(tmp_path / "o", "full-one-fwd", pairs, (h, w), [(h, w)])
    with open_shard(c["path"]) as r:
        info = r.meta["compact"]["0"]
        assert info.get("swapped") and info.get("outkeyed") and not info["residue"]
    _answers_agree(c["path"], o["path"], pairs, h * w, h * w, np.random.default_rng(h))


@SETTINGS
@given(h=st.integers(1, 40), w=st.integers(1, 40), seed=st.integers(0, 50),
       flagged=st.sampled_from([0.01, 0.1, 0.5]), radii=st.sampled_from([(1,), (1, 2, 4)]),
       irregular=st.sampled_from([0.0, 0.5]))
def test_outkeyed_residue_answers_as_full_one_does(tmp_path_factory, h, w, seed, flagged,
                                                   radii, irregular):
    home = tmp_path_factory.mktemp("fc")
    pairs = cosmic_rays(h, w, seed, flagged, radii, irregular)
    with mock.patch.object(full_compact, "OUTKEYED", "always"), \
            mock.patch.object(full_compact, "SWAPPED", "always"):
        c = write_shard(home / "c", "full-compact-fwd", pairs, (h, w), [(h, w)])
    o = write_shard(home / "o", "full-one-fwd", pairs, (h, w), [(h, w)])
    _answers_agree(c["path"], o["path"], pairs, h * w, h * w, np.random.default_rng(seed))


def test_a_second_input_of_another_shape_keeps_its_input_keyed_residue(tmp_path):
    """An output cell's second input is a scalar: its side stays keyed by input cell,
    while the first input's left-over output cells are keyed by output cell."""
    h, w = 70, 60
    first = cosmic_rays(h, w, seed=4)
    scalar = Ragged.from_rows([np.zeros(1, dtype=np.uint64)] * (h * w), np.uint64)
    pairs = PairBatch(first.out, ins=(first.ins[0], scalar))
    shapes = [(h, w), (1, 1)]
    with mock.patch.object(full_compact, "OUTKEYED", "always"):
        c = write_shard(tmp_path / "c", "full-compact-fwd", pairs, (h, w), shapes)
    o = write_shard(tmp_path / "o", "full-one-fwd", pairs, (h, w), shapes)
    with open_shard(c["path"]) as r:
        assert r.meta["compact"]["0"].get("outkeyed")
        assert not r.meta["compact"].get("1", {}).get("outkeyed")
    rng = np.random.default_rng(0)
    _answers_agree(c["path"], o["path"], pairs, h * w, h * w, rng, 0)
    with open_shard(c["path"]) as cr, open_shard(o["path"]) as orr:
        q = np.unique(rng.integers(0, h * w, 50)).astype(np.uint64)
        zero = np.zeros(1, dtype=np.uint64)
        assert cr.forward(zero, 1).tolist() == orr.forward(zero, 1).tolist()
        assert cr.backward(q, 1).tolist() == orr.backward(q, 1).tolist()


# ---------------------------------------------------------------------------------------
# sizes
# ---------------------------------------------------------------------------------------


def _logical(tmp_path, strategy: str, pairs: PairBatch, shape) -> int:
    from encoders.registry import encoding_class
    from subzero.cells import Box
    from subzero.engine.layout import shard_spec
    from subzero.modes import Strategy

    s = Strategy.parse(strategy)
    spec = shard_spec(tmp_path, "r1", "op", s, (0,), Box.full(shape), tuple(shape),
                      (tuple(shape),), 0)
    enc = encoding_class(s.encoding)(s.direction)
    return enc.encode(pairs, spec).logical_bytes


def test_cosmic_rays_forward_is_no_bigger_than_their_backward(tmp_path):
    """Keyed by input cell, the left-over output cells' boxes of several sizes make a
    distinct set of output cells per input cell; keyed by output cell they are the
    backward index's residue."""
    h, w = 200, 150
    pairs = cosmic_rays(h, w, seed=1)
    fwd = _logical(tmp_path, "full-compact-fwd", pairs, (h, w))
    bwd = _logical(tmp_path, "full-compact-bwd", pairs, (h, w))
    with mock.patch.object(full_compact, "OUTKEYED", "never"):
        input_keyed = _logical(tmp_path, "full-compact-fwd", pairs, (h, w))
    assert fwd <= bwd < input_keyed, (fwd, bwd, input_keyed)
