"""Box lineage (``ctx.lwrite_box``, identity ``lwrite_pairs``) stored unexpanded by
FullCompact answers exactly what its pairs answer, and every other encoding stores its pairs."""

from __future__ import annotations

import shutil
import tempfile
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from encoders.full_compact import FullCompact
from encoders.layouts import fewcells
from encoders.lookup import open_shard
from encoders.sink import ShardSink
from subzero.cells import Box, Ragged
from subzero.engine.layout import shard_spec
from subzero.lineage import BoxedPairs, BoxLineage, PairBatch
from subzero.modes import Mode, Strategy
from subzero.runtime import IDENTITY_MIN, ChunkContext, TaskContext
from subzero.testing import brute_backward, brute_forward

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def boxed(draw):
    """A random :class:`BoxedPairs` over one chunk of a 1-, 2- or 3-axis array: box parts
    (some overlapping each other) and explicit pairs (some on the parts' cells)."""
    nd = draw(st.sampled_from([1, 2, 2, 2, 3]))
    shape = tuple(draw(st.integers(1, 20 if nd < 3 else 5)) for _ in range(nd))
    lo = tuple(draw(st.integers(0, n // 3)) for n in shape)
    hi = tuple(draw(st.integers(max(a + 1, 2 * n // 3), n)) for a, n in zip(lo, shape))
    box = Box(lo, hi)
    n_in = draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    parts = []
    n_parts = draw(st.integers(1, 3))
    # mostly disjoint parts (a cleaner's identity and its flagged cells), some cells in two
    weights = rng.random(n_parts + 1) ** 2
    weights[0] *= draw(st.sampled_from([0.0, 0.1, 1.0]))  # cells in no part
    label = rng.choice(n_parts + 1, size=box.shape, p=weights / weights.sum())
    overlap = draw(st.sampled_from([0.0, 0.0, 0.05]))
    for j in range(n_parts):
        mask = (label == j + 1) | (rng.random(box.shape) < overlap)
        r_lo = tuple(-draw(st.integers(0, 2)) for _ in shape)
        r_hi = tuple(draw(st.integers(1, 3)) for _ in shape)
        flags = tuple(draw(st.booleans()) for _ in range(n_in - 1)) + (True,)
        if draw(st.integers(0, 9)) == 0:  # now and then a part without lineage
            flags = (False,) * n_in
        parts.append(BoxLineage(box, mask, r_lo, r_hi, flags, shape))
    size = int(np.prod(shape))
    explicit = None
    k = draw(st.integers(0, 6))
    if k:
        outs = box.linear(shape)[rng.integers(0, box.size, k)]
        ins = tuple(Ragged.from_rows([np.unique(rng.integers(0, size, 3)) for _ in range(k)])
                    for _ in range(n_in))
        explicit = PairBatch(Ragged.from_singletons(outs.astype(np.uint64)), ins=ins)
    return BoxedPairs(explicit, tuple(parts)), shape, box, n_in


def _store(home, enc, batch, shape, box, n_in) -> str:
    spec = shard_spec(home, "r1", "op", Strategy.parse(f"full-compact-{enc.direction.value}"),
                      (0,), box, shape, (shape,) * n_in)
    sink = ShardSink(spec, enc)
    sink.write(batch)
    return sink.close()["path"]


def _queries(rng, size: int) -> list[np.ndarray]:
    few = np.unique(rng.integers(0, size, 3)).astype(np.uint64)
    a = int(rng.integers(0, size))
    return [few, np.arange(a, size, dtype=np.uint64), np.arange(size, dtype=np.uint64)]


@SETTINGS
@given(case=boxed(), tile=st.sampled_from([4, 16, 4096]), min_group=st.sampled_from([1, 4]),
       compact=st.sampled_from(["auto", "always"]), direction=st.sampled_from(["bwd", "fwd"]))
def test_boxes_answer_what_their_pairs_answer(case, tile, min_group, compact, direction):
    batch, shape, box, n_in = case
    pairs = batch.expand()
    size = int(np.prod(shape))
    rng = np.random.default_rng(size)
    home = tempfile.mkdtemp(prefix="sz-boxed-")
    try:
        enc = FullCompact(direction, min_group=min_group, tile=tile, compact=compact)
        path = _store(home, enc, batch, shape, box, n_in)
        with open_shard(path) as r:
            for i in range(n_in):
                for q in _queries(rng, size):
                    for few in (fewcells.FEW_CELLS, -1):
                        with mock.patch.object(fewcells, "FEW_CELLS", few):
                            got = r.backward(q, i)
                            assert (np.diff(got.astype(np.int64)) > 0).all()
                            assert set(got.tolist()) == brute_backward(pairs, q, i)
                            got = r.forward(q, i)
                            assert (np.diff(got.astype(np.int64)) > 0).all()
                            assert set(got.tolist()) == brute_forward(pairs, q, i)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_identity_with_flagged_boxes_is_grouped_from_the_masks(tmp_path):
    """A cleaner's lineage as two box parts: the tiles' groups come from the masks, and
    only the flagged cells whose box the border clips are left as pairs."""
    shape = (300, 200)
    flagged = np.random.default_rng(0).random(shape) < 0.01
    box = Box.full(shape)
    batch = BoxedPairs(None, (BoxLineage(box, ~flagged, (0, 0), (1, 1), (True,), shape),
                              BoxLineage(box, flagged, (-2, -2), (3, 3), (True,), shape)))
    path = _store(tmp_path, FullCompact("bwd"), batch, shape, box, 1)
    with open_shard(path) as r:
        info = r.meta["compact"][""]
        edge = flagged.copy()
        edge[2:-2, 2:-2] = False
        assert info["residue"] <= int(edge.sum())
        assert r.meta["keys"] == shape[0] * shape[1]
        pairs = batch.expand()
        q = np.flatnonzero(flagged.reshape(-1))[:50].astype(np.uint64)
        assert set(r.backward(q, 0).tolist()) == brute_backward(pairs, q, 0)


def _ctx(shape, box=None, n_in=1) -> TaskContext:
    box = box or Box.full(shape)
    ch = ChunkContext((0,) * len(shape), box, (box,) * n_in, shape, (shape,) * n_in)
    return TaskContext(ch, frozenset({Mode.FULL}), "op")


def _pair_sets(p: PairBatch) -> dict[int, list[set[int]]]:
    out: dict[int, list[set[int]]] = {}
    for k, o in enumerate(p.out.rows()):
        for c in o.tolist():
            got = out.setdefault(c, [set() for _ in p.ins])
            for s, r in zip(got, p.ins):
                s.update(r.row(k).tolist())
    return out


def test_lwrite_box_records_the_clipped_boxes():
    shape = (6, 7)
    ctx = _ctx(shape, n_in=2)
    mask = np.zeros(shape, bool)
    mask[0, 0] = mask[3, 3] = True
    ctx.lwrite_box(mask, (-1, 0), (2, 2), inputs=1)
    full = ctx.full_lineage()
    assert isinstance(full, BoxedPairs) and len(full) == 2
    got = _pair_sets(ctx.full_pairs())
    assert got[0] == [set(), {0, 1, 7, 8}]
    assert got[3 * 7 + 3] == [set(), {2 * 7 + 3, 2 * 7 + 4, 3 * 7 + 3, 3 * 7 + 4,
                                      4 * 7 + 3, 4 * 7 + 4}]


def test_lwrite_box_takes_cells_and_refuses_bad_corners():
    shape = (5, 5)
    ctx = _ctx(shape, Box((0, 0), (3, 5)))
    ctx.lwrite_box(np.array([[1, 1], [4, 4]]), -1, 2)  # (4, 4) is beyond the block
    got = _pair_sets(ctx.full_pairs())
    assert sorted(got) == [6, 24]
    assert got[24] == [{18, 19, 23, 24}]
    with pytest.raises(Exception, match="must not exceed"):
        ctx.lwrite_box(np.ones((3, 5), bool), 1, 0)
    with pytest.raises(Exception, match="inputs"):
        ctx.lwrite_box(np.ones((3, 5), bool), 0, 1, inputs=3)


def test_lwrite_pairs_of_the_identity_are_kept_as_a_box():
    shape = (100, 100)
    ctx = _ctx(shape, n_in=2)
    lin = np.arange(IDENTITY_MIN + 10, dtype=np.uint64)[::-1]
    ctx.lwrite_pairs(lin, lin, None)
    full = ctx.full_lineage()
    assert isinstance(full, BoxedPairs) and full.parts[0].inputs == (True, False)
    p = ctx.full_pairs()
    assert sorted(p.out.values.tolist()) == sorted(lin.tolist())
    assert (p.ins[0].values == p.out.values).all() and len(p.ins[1].values) == 0


def test_lwrite_pairs_that_are_no_identity_stay_pairs():
    shape = (100, 100)
    ctx = _ctx(shape)
    lin = np.arange(IDENTITY_MIN + 10, dtype=np.uint64)
    ctx.lwrite_pairs(lin, lin + np.uint64(1))
    assert isinstance(ctx.full_lineage(), PairBatch)


@pytest.mark.parametrize("flagged", [0.0, 0.01, 0.3, 0.7])
@pytest.mark.parametrize("radius", [0, 1, 2])
@pytest.mark.parametrize("box", [Box((0, 0), (60, 45)), Box((7, 5), (50, 33))])
@pytest.mark.parametrize("direction", ["bwd", "fwd"])
def test_many_tiles_of_boxes_answer_what_their_pairs_answer(tmp_path, flagged, radius, box,
                                                            direction):
    """Tiles whole, with holes and with a few cells; a chunk inside the array; the
    identity beside a stencil's box on two inputs (one read by the box only); backward,
    and forward built the other way round from the masks."""
    shape = (60, 45)
    rng = np.random.default_rng(int(flagged * 10) + radius)
    flag = rng.random(box.shape) < flagged
    r = (radius, radius)
    batch = BoxedPairs(None, (
        BoxLineage(box, ~flag, (0, 0), (1, 1), (True, False), shape),
        BoxLineage(box, flag, tuple(-x for x in r), tuple(x + 1 for x in r), (True, True),
                   shape)))
    pairs = batch.expand()
    path = _store(tmp_path, FullCompact(direction, tile=64), batch, shape, box, 2)
    size = shape[0] * shape[1]
    with open_shard(path) as rd:
        info = rd.meta["compact"]
        assert info[""]["groups"] > 0 if direction == "bwd" else info["0"]["swapped"] > 0
        for i in range(2):
            for q in _queries(rng, size) + [np.flatnonzero(flag.reshape(-1)).astype(
                    np.uint64)[:7]]:
                for few in (fewcells.FEW_CELLS, -1):
                    with mock.patch.object(fewcells, "FEW_CELLS", few):
                        assert set(rd.backward(q, i).tolist()) == brute_backward(pairs, q, i)
                        assert set(rd.forward(q, i).tolist()) == brute_forward(pairs, q, i)


def test_identity_pairs_of_a_chunk_become_its_mask_and_cells_beyond_stay_pairs():
    shape = (130, 90)
    box = Box((10, 20), (120, 80))
    lin = box.linear(shape)
    ctx = _ctx(shape, box)
    ctx.lwrite_pairs(lin[::-1], lin[::-1])
    full = ctx.full_lineage()
    assert isinstance(full, BoxedPairs) and full.parts[0].mask.all()
    assert sorted(full.parts[0].keys().tolist()) == sorted(lin.tolist())
    ctx = _ctx(shape, box)
    beyond = np.append(lin, np.uint64(0))  # (0, 0) is outside the chunk
    ctx.lwrite_pairs(beyond, beyond)
    assert isinstance(ctx.full_lineage(), PairBatch)


@settings(max_examples=60, deadline=None)
@given(h=st.integers(66, 120), w=st.integers(66, 120), lo0=st.integers(-3, 0),
       lo1=st.integers(-3, 0), hi0=st.integers(1, 3), hi1=st.integers(1, 3),
       spoil=st.sampled_from([None, "drop", "add", "swap", "shift"]), seed=st.integers(0, 99))
def test_lwrite_pairs_of_boxes_are_kept_as_boxes_exactly(h, w, lo0, lo1, hi0, hi1, spoil, seed):
    """Pairs of one cell on its clipped box become a BoxLineage with that box; a batch with
    one set that is not its box (a cell missing or added, out of order, another offset)
    stays pairs; either way the pairs read back are the pairs written."""
    shape = (h, w)
    rng = np.random.default_rng(seed)
    n = h * w
    cells = np.sort(rng.choice(n, IDENTITY_MIN + 5, replace=False)).astype(np.uint64)
    c = np.stack(np.unravel_index(cells.astype(np.int64), shape), axis=1)
    lo, hi = np.array([lo0, lo1]), np.array([hi0, hi1])
    rows = [list(Box(tuple(np.maximum(x + lo, 0)), tuple(np.minimum(x + hi, shape)))
                 .linear(shape)) for x in c]
    k = int(rng.integers(0, len(rows)))
    if spoil == "drop" and len(rows[k]) > 1:
        rows[k] = rows[k][:-1]
    elif spoil == "add":
        rows[k] = sorted(set(rows[k]) | {int(rng.integers(0, n))})
    elif spoil == "swap" and len(rows[k]) > 1:
        rows[k] = rows[k][::-1]
    elif spoil == "shift":
        rows[k] = [v for v in rows[k] if v != int(cells[k])] or [int(cells[k]) ^ 1]
    ins = Ragged.from_rows([np.asarray(r, dtype=np.uint64) for r in rows])
    ctx = _ctx(shape)
    ctx.lwrite_pairs(cells, ins)
    want = {int(o): set(map(int, r)) for o, r in zip(cells, rows)}
    boxk = Box(tuple(np.maximum(c[k] + lo, 0)), tuple(np.minimum(c[k] + hi, shape)))
    kept = rows[k] == boxk.linear(shape).tolist()
    full = ctx.full_lineage()
    assert isinstance(full, BoxedPairs) == kept
    if kept:
        p = full.parts[0]
        # the box found is the narrowest that explains every set (clipping may hide an edge)
        assert all(a >= b for a, b in zip(p.lo, lo)) and all(a <= b for a, b in zip(p.hi, hi))
    got = {c_: s[0] for c_, s in _pair_sets(ctx.full_pairs()).items()}
    assert got == want


@pytest.mark.parametrize("shape, box", [((130, 90), Box((10, 20), (120, 80))),
                                        ((300, 300), Box((100, 150), (170, 220)))])
def test_identity_pairs_of_a_small_or_large_share_of_the_array(shape, box):
    """The block's cells found through a mask of the array (a fair share of it) or their
    coordinates (a small block of a large array), inside the block or not."""
    lin = box.linear(shape)
    ctx = _ctx(shape, box)
    ctx.lwrite_pairs(lin[::-1], lin[::-1])
    part = ctx.full_lineage().parts[0]
    assert part.mask.all() and part.keys().tolist() == lin.tolist()
    ctx = _ctx(shape, box)
    some = np.append(lin, lin[-1] + np.uint64(1))  # and the cell after the block's last
    assert len(some) >= IDENTITY_MIN
    ctx.lwrite_pairs(some, some)
    assert isinstance(ctx.full_lineage(), PairBatch)
