"""FullMany's grouped entries (encoders/layouts/relgroups.py) against brute force, both
directions."""

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from encoders.full_many import FullMany
from encoders.layouts import pairtable, relgroups
from encoders.layouts.keyspace import coords
from encoders.lookup import open_shard
from encoders.sink import ShardSink
from operators.base import box_neighbours
from subzero import frontier
from subzero.cells import Box, Ragged, dilate, to_coords
from subzero.engine.layout import shard_spec
from subzero.errors import ModeError
from subzero.frontier import Members, mask_from_linear
from subzero.lineage import PairBatch
from subzero.modes import Strategy
from subzero.testing import brute_backward, brute_forward
from tests.encoders.conformance import SETTINGS, check_full_lookups
from tests.encoders.strategies import per_cell_pairs, queries, shapes


def write(home, direction, pairs, out_shape, in_shapes, **options) -> dict:
    """Write ``pairs`` through the real sink with a FullMany of the given options."""
    strategy = Strategy.parse(f"full-many-{direction}")
    spec = shard_spec(home, "r1", "op", strategy, (0,), Box.full(out_shape),
                     tuple(out_shape), tuple(tuple(s) for s in in_shapes), 0)
    sink = ShardSink(spec, encoding=FullMany(direction, **options))
    sink.write(pairs)
    return sink.close()


def per_pixel(shape, radius, flagged=None):
    """Identity lineage, and the clipped box of ``radius`` for the ``flagged`` cells."""
    cells = np.arange(int(np.prod(shape)), dtype=np.uint64)
    box = box_neighbours(to_coords(cells, shape), (radius,) * len(shape), shape)
    flagged = np.ones(len(cells), bool) if flagged is None else flagged
    rows = [box.row(k) if flagged[k] else cells[k:k + 1] for k in range(len(cells))]
    return PairBatch(Ragged.from_singletons(cells), ins=(Ragged.from_rows(rows),))


def dilated(q, shape, radius):
    return np.flatnonzero(dilate(mask_from_linear(q, shape), radius)).tolist()


@pytest.fixture(params=[False, True], ids=["scan-or-probe", "always-probe"])
def probe(request, monkeypatch):
    """Run once as shipped, once with every lookup forced through the R-trees (small shards
    are otherwise scanned, which would leave the group boxes untested)."""
    if request.param:
        monkeypatch.setattr(pairtable, "PROBE_PER_ENTRY", 0.0)
    return request.param


# ---------------------------------------------------------------------------------------
# against brute force
# ---------------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data(), out_shape=shapes, n_inputs=st.integers(1, 2),
       direction=st.sampled_from(["bwd", "fwd"]), relative=st.sampled_from(["auto", "always"]),
       tile=st.sampled_from([4, 16, 4096]), force_probe=st.booleans(), sketch=st.booleans())
def test_grouped_lookups_match_brute_force(data, out_shape, n_inputs, direction, relative,
                                           tile, force_probe, sketch):
    in_shapes = [out_shape] + [data.draw(shapes) for _ in range(n_inputs - 1)]
    pairs = data.draw(per_cell_pairs(out_shape, in_shapes))
    home = tempfile.mkdtemp(prefix="sz-relg-")
    saved = pairtable.PROBE_PER_ENTRY, relgroups.SKETCH_MIN
    try:
        if force_probe:
            pairtable.PROBE_PER_ENTRY = 0.0
        if sketch:  # weed out lone pairs by their sketch whatever their length
            relgroups.SKETCH_MIN = 0
        st_ = write(home, direction, pairs, out_shape, in_shapes, relative=relative, tile=tile)
        with open_shard(st_["path"]) as r:
            assert r.meta.get("groups", 0) + r.meta.get("entries", 0) == st_["records"]
            for _ in range(2):
                q = data.draw(queries(out_shape))
                check_full_lookups(r, pairs, q, in_shapes, data)
    finally:
        pairtable.PROBE_PER_ENTRY, relgroups.SKETCH_MIN = saved
        shutil.rmtree(home, ignore_errors=True)


@SETTINGS
@given(data=st.data(), shape=st.sampled_from([(7,), (5, 6), (3, 4, 5)]),
       fill=st.floats(0.0, 1.0))
def test_large_frontiers_scan_with_a_dense_mask_and_stay_exact(data, shape, fill):
    size = int(np.prod(shape))
    pairs = data.draw(per_cell_pairs(shape, [shape, shape]))
    q = np.flatnonzero(np.random.default_rng(size).random(size) < fill).astype(np.uint64)
    home = tempfile.mkdtemp(prefix="sz-relg-")
    saved = frontier.DENSE_MIN, relgroups._CHUNK
    try:
        # a mask for every frontier, and tiny expansion chunks: the scan paths of big shards
        frontier.DENSE_MIN, relgroups._CHUNK = 0, 3
        for direction in ("bwd", "fwd"):
            st_ = write(Path(home) / direction, direction, pairs, shape, [shape, shape],
                        relative="always", tile=8)
            with open_shard(st_["path"]) as r:
                for i in (0, 1):
                    assert set(r.backward(q, i).tolist()) == brute_backward(pairs, q, i)
                    assert set(r.forward(q, i).tolist()) == brute_forward(pairs, q, i)
    finally:
        frontier.DENSE_MIN, relgroups._CHUNK = saved
        shutil.rmtree(home, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["bwd", "fwd"])
def test_identity_lineage_is_one_group_per_tile(tmp_path, direction, probe):
    cells = np.arange(1000, dtype=np.uint64)
    pairs = PairBatch(Ragged.from_singletons(cells), ins=(Ragged.from_singletons(cells),))
    st_ = write(tmp_path, direction, pairs, (1000,), [(1000,)], tile=256)
    assert st_["records"] == 4 and st_["index_bytes"] > 0  # 1000 cells over 4 tiles
    with open_shard(st_["path"]) as r:
        assert r.meta["entries"] == 0 and r.meta["grouped_pairs"] == 1000
        q = np.array([0, 17, 255, 256, 999], np.uint64)
        assert r.backward(q, 0).tolist() == r.forward(q, 0).tolist() == q.tolist()
        assert r.backward(np.array([1000], np.uint64), 0).tolist() == []


@pytest.mark.parametrize("direction", ["bwd", "fwd"])
def test_clipped_stencil_boxes_group_by_their_offsets(tmp_path, direction, probe):
    shape = (20, 20)
    st_ = write(tmp_path, direction, per_pixel(shape, 1), shape, [shape])
    # interior, 4 edges, 4 corners: 9 offset sets, all 400 cells in one 4096-cell tile
    assert st_["records"] == 9
    rng = np.random.default_rng(0)
    with open_shard(st_["path"]) as r:
        for n in (1, 5, 60, 400):
            q = np.unique(rng.integers(0, 400, n)).astype(np.uint64)
            assert r.backward(q, 0).tolist() == dilated(q, shape, 1)
            assert r.forward(q, 0).tolist() == dilated(q, shape, 1)


def test_multi_cell_pairs_stay_plain_entries(tmp_path):
    # a "star" (2 output cells -> star + ring) next to identity pixels
    cells = np.array([0, 1, 2, 3, 7, 8, 9], np.uint64)
    out = Ragged.from_rows([[4, 5], *[[c] for c in cells]])
    ins = Ragged.from_rows([[3, 4, 5, 6], *[[c] for c in cells]])
    st_ = write(tmp_path, "bwd", PairBatch(out, ins=(ins,)), (10,), [(10,)])
    with open_shard(st_["path"]) as r:
        assert (r.meta["entries"], r.meta["groups"]) == (1, 1)
        assert r.backward(np.array([4], np.uint64), 0).tolist() == [3, 4, 5, 6]
        assert r.backward(np.array([3, 9], np.uint64), 0).tolist() == [3, 9]
        assert r.forward(np.array([3], np.uint64), 0).tolist() == [3, 4, 5]


def test_auto_leaves_lone_offsets_plain_and_always_groups_them(tmp_path):
    # cell 5 alone depends on cell 0: its offset set {-5} is shared by no other cell
    out = Ragged.from_singletons(np.arange(6, dtype=np.uint64))
    ins = Ragged.from_rows([[0], [1], [2], [3], [4], [0]])
    pairs = PairBatch(out, ins=(ins,))
    auto = write(tmp_path / "a", "bwd", pairs, (6,), [(6,)])
    always = write(tmp_path / "b", "bwd", pairs, (6,), [(6,)], relative="always")
    never = write(tmp_path / "c", "bwd", pairs, (6,), [(6,)], relative="never")
    for st_, groups, entries in ((auto, 1, 1), (always, 2, 0), (never, 0, 6)):
        with open_shard(st_["path"]) as r:
            assert (r.meta["groups"], r.meta["entries"]) == (groups, entries)
            assert r.backward(np.array([4, 5], np.uint64), 0).tolist() == [0, 4]
            assert r.forward(np.array([0], np.uint64), 0).tolist() == [0, 5]


def test_pairs_alike_in_their_sketch_but_not_their_offsets_stay_apart(tmp_path):
    # 20 odd offsets, and the same with one gap widened in the middle: the sampled tokens
    # agree (so the cheap sketch pairs them up), the exact offsets do not. Cells 0 and 50
    # share a 4096-cell tile, 5000 and 5100 (both with the odd offsets) the next one.
    a = np.arange(1, 41, 2)
    b = np.r_[a[:7], a[7:] + 1]
    out = Ragged.from_rows([[0], [50], [5000], [5100]])
    ins = Ragged.from_rows([a, 50 + b, 5000 + a, 5100 + a])
    st_ = write(tmp_path, "bwd", PairBatch(out, ins=(ins,)), (10000,), [(10000,)])
    with open_shard(st_["path"]) as r:
        assert (r.meta["groups"], r.meta["entries"]) == (1, 2)
        assert r.backward(np.array([50], np.uint64), 0).tolist() == (50 + b).tolist()
        assert r.backward(np.array([5100], np.uint64), 0).tolist() == (5100 + a).tolist()


def test_each_input_keeps_its_own_offsets(tmp_path):
    # rmcr-like: a flagged pixel reads the 3x3 window of input 0 and itself in input 1
    shape = (6, 6)
    flagged = np.zeros(36, bool)
    flagged[[7, 14, 21, 28]] = True
    win = per_pixel(shape, 1, flagged).ins[0]
    cells = np.arange(36, dtype=np.uint64)
    pairs = PairBatch(Ragged.from_singletons(cells), ins=(win, Ragged.from_singletons(cells)))
    st_ = write(tmp_path, "fwd", pairs, shape, [shape, shape])
    with open_shard(st_["path"]) as r:
        assert r.meta["groups"] == 2 and r.meta["entries"] == 0  # window+self, self+self
        assert r.backward(np.array([14], np.uint64), 0).tolist() == [7, 8, 9, 13, 14, 15,
                                                                      19, 20, 21]
        assert r.backward(np.array([14], np.uint64), 1).tolist() == [14]
        assert r.forward(np.array([8], np.uint64), 0).tolist() == [7, 8, 14]
        assert r.forward(np.array([8], np.uint64), 1).tolist() == [8]


def test_groups_are_far_smaller_than_one_entry_per_pair(tmp_path):
    shape = (64, 64)
    flagged = np.random.default_rng(1).random(64 * 64) < 0.05
    pairs = per_pixel(shape, 3, flagged)
    auto = write(tmp_path / "a", "bwd", pairs, shape, [shape])
    never = write(tmp_path / "n", "bwd", pairs, shape, [shape], relative="never")
    assert never["records"] == 4096 and auto["records"] < 60
    assert auto["data_bytes"] + auto["index_bytes"] < (never["data_bytes"]
                                                       + never["index_bytes"]) / 10


def test_shards_written_before_groups_existed_still_read(tmp_path):
    st_ = write(tmp_path, "bwd", per_pixel((8, 8), 1), (8, 8), [(8, 8)], relative="never")
    meta_file = Path(st_["path"]) / "meta.json"
    meta = json.loads(meta_file.read_text())
    for key in ("groups", "tile", "grouped_pairs"):
        del meta[key]
    meta_file.write_text(json.dumps(meta))
    with open_shard(st_["path"]) as r:
        assert r.backward(np.array([9], np.uint64), 0).tolist() == dilated([9], (8, 8), 1)


def test_unknown_relative_policy_is_a_one_line_error():
    with pytest.raises(ModeError, match="Got 'sometimes' instead"):
        FullMany("bwd", relative="sometimes")


# ---------------------------------------------------------------------------------------
# pieces
# ---------------------------------------------------------------------------------------


def test_cell_sets_choose_runs_or_a_delta_list_and_decode_back():
    # group 0: 0..99 (one run); group 1: every third cell (a list); group 2: two runs
    kk = np.concatenate([np.arange(100), np.arange(0, 30, 3), [5, 6, 7, 20, 21]])
    gid = np.repeat([0, 1, 2], [100, 10, 5])
    newg = np.r_[True, gid[1:] != gid[:-1]]
    tok, off = relgroups._key_tokens(kk.astype(np.uint64), gid, newg, 3)
    assert tok[off[:-1]].tolist() == [(1 << 1) | 1, (10 << 1) | 0, (2 << 1) | 1]
    assert tok[off[0]:off[1]].tolist() == [3, 0, 99]
    assert tok[off[2]:off[3]].tolist() == [5, 5, 2, 11, 1]
    d = relgroups.decode_keys(tok, off[:-1])
    cells = np.repeat(d.starts, d.lengths) + (
        np.arange(d.lengths.sum()) - np.repeat(np.cumsum(d.lengths) - d.lengths,
                                               d.lengths)).astype(np.uint64)
    assert cells.tolist() == kk.tolist()
    assert d.kmin.tolist() == [0, 0, 5] and d.kmax.tolist() == [99, 27, 21]
    assert d.sets_at.tolist() == (off[1:]).tolist()


def test_range_cover_narrows_an_axis_only_while_earlier_axes_are_fixed():
    lo = np.array([7, 5, 7], np.uint64)
    hi = np.array([9, 17, 7], np.uint64)
    mins, maxs = relgroups.range_cover(lo, hi, (4, 6))
    # 7..9 stay in row 1 (cols 1..3); 5..17 span rows 0..2 (all columns); 7 is one cell
    assert mins.tolist() == [[1, 1], [0, 0], [1, 1]]
    assert maxs.tolist() == [[1, 3], [2, 5], [1, 1]]


def test_offsets_that_wrap_around_a_row_get_a_box_of_their_linear_range(tmp_path, probe):
    # cells at the end of rows 0-2 of a 4 x 5 image depend on the next four cells: (r, 4)
    # + 1 is (r + 1, 0), which the coordinate step (0, +1) seen from cell (r, 3) would miss
    cells = np.array([3, 4, 8, 9, 13, 14], np.uint64)
    ins = Ragged.from_rows([c + np.arange(1, 5) for c in cells.tolist()])
    pairs = PairBatch(Ragged.from_singletons(cells), ins=(ins,))
    for direction in ("fwd", "bwd"):
        st_ = write(tmp_path / direction, direction, pairs, (4, 5), [(4, 5)], tile=32)
        with open_shard(st_["path"]) as r:
            assert r.meta["groups"] == 1
            assert r.forward(np.array([10], np.uint64), 0).tolist() == [8, 9]
            assert r.forward(np.array([5, 18], np.uint64), 0).tolist() == [3, 4, 14]
            assert r.backward(np.array([4], np.uint64), 0).tolist() == [5, 6, 7, 8]
    # cells 0 and 4 of row 0 read the next four cells: seen from cell 0 every step stays
    # in row 0, yet 4 + 2 = 6 is in row 1 (a box from those steps would hide it)
    cells = np.array([0, 4], np.uint64)
    ins = Ragged.from_rows([c + np.arange(1, 5) for c in cells.tolist()])
    pairs = PairBatch(Ragged.from_singletons(cells), ins=(ins,))
    st_ = write(tmp_path / "row", "fwd", pairs, (4, 5), [(4, 5)])
    with open_shard(st_["path"]) as r:
        assert r.meta["groups"] == 1
        assert r.forward(np.array([6], np.uint64), 0).tolist() == [4]
        assert r.forward(np.array([3], np.uint64), 0).tolist() == [0]


@SETTINGS
@given(data=st.data(), shape=st.sampled_from([(9,), (4, 5), (3, 3, 4)]),
       tile=st.sampled_from([4, 16, 64]))
def test_input_boxes_cover_every_input_cell_of_their_group(data, shape, tile):
    pairs = data.draw(per_cell_pairs(shape, [shape, (50,)]))
    from encoders.formats.codec import set_tokens

    out, ins = pairs.out, pairs.ins
    one = np.flatnonzero(out.lengths == 1)
    out, ins = out.take(one), [r.take(one) for r in ins]
    anchors = out.values[out.offsets[:-1]]
    toks = [set_tokens(ins[0].values, ins[0].offsets, shape, anchors),
            set_tokens(ins[1].values, ins[1].offsets, (50,))]
    g = relgroups.build(out, ins, toks, [True, False], [shape, (50,)], shape, "always", tile)
    if g is None:
        return
    for i, s in enumerate([shape, (50,)]):
        rows, mins, maxs = relgroups.input_boxes(g, ins[i], s, shape)
        for gi, lo, hi in zip(rows, mins, maxs):
            members = g.keys.values[g.keys.offsets[gi]:g.keys.offsets[gi + 1]]
            offs = (ins[i].row(int(g.rep_rows[gi])).astype(np.int64)
                    - np.int64(g.rep_cells[gi]))
            cells = (members.astype(np.int64)[:, None] + offs[None, :]).reshape(-1)
            c = coords(cells.astype(np.uint64), s)
            assert ((c >= lo) & (c <= hi)).all()


def test_members_answers_alike_with_a_mask_or_a_binary_search():
    q = np.array([3, 8, 9], np.uint64)
    x = np.array([0, 3, 8, 10, 9], np.uint64)
    sparse, dense = Members(q, 1 << 30), Members(q, 16)
    dense._dense = True  # a mask even for three cells
    assert sparse(x).tolist() == dense(x).tolist() == [False, True, True, False, True]
    assert sparse.mask is None and dense.mask is not None
    big = Members(np.arange(0, 20000, 2, dtype=np.uint64), 20000)
    assert big(np.array([4, 5], np.uint64)).tolist() == [True, False]
    assert big.mask is not None
