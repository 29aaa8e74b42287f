"""FullCompact: regular lineage with exceptions, looked up in place, against brute force;
its size against FullOne's for the same pairs."""

from __future__ import annotations

import shutil
import tempfile
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from encoders import full_compact
from encoders.layouts import fewcells, fewpatterns, patterns
from encoders.lookup import open_shard
from subzero.cells import Ragged
from subzero.lineage import PairBatch
from subzero.testing import brute_backward, brute_forward
from tests.encoders.conformance import EncodingConformance, write_shard

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
KINDS = ("cleaner", "stencil3", "stencil9", "rowreduce", "transpose", "random")


# ---------------------------------------------------------------------------------------
# pair sets: one pair per output cell, built with array arithmetic
# ---------------------------------------------------------------------------------------


def _boxes(h: int, w: int, cells: np.ndarray, r: int) -> list[np.ndarray]:
    """The box of radius ``r`` around each cell of an ``h x w`` array, clipped."""
    out = []
    for k in cells.tolist():
        i, j = divmod(k, w)
        ii = np.arange(max(0, i - r), min(h, i + r + 1))
        jj = np.arange(max(0, j - r), min(w, j + r + 1))
        out.append((ii[:, None] * w + jj[None, :]).reshape(-1))
    return out


def pair_set(kind: str, h: int, w: int, seed: int = 0, flagged: float = 0.01
             ) -> tuple[PairBatch, tuple, list[tuple]]:
    """``(pairs, out_shape, in_shapes)`` of a workload (see :data:`KINDS`)."""
    rng = np.random.default_rng(seed)
    n = h * w
    cells = np.arange(n, dtype=np.uint64)
    if kind == "cleaner":  # identity, but a flagged pixel depends on its 5 x 5 box
        flag = rng.random(n) < flagged
        rows = [np.array([k]) for k in range(n)]
        for k, b in zip(np.flatnonzero(flag).tolist(), _boxes(h, w, np.flatnonzero(flag), 2)):
            rows[k] = b
        out_shape, in_shapes, outs = (h, w), [(h, w)], cells
    elif kind.startswith("stencil"):
        r = int(kind[len("stencil"):]) // 2
        rows = _boxes(h, w, cells, r)
        out_shape, in_shapes, outs = (h, w), [(h, w)], cells
    elif kind == "rowreduce":
        rows = [np.arange(i * w, (i + 1) * w) for i in range(h)]
        out_shape, in_shapes, outs = (h,), [(h, w)], np.arange(h, dtype=np.uint64)
    elif kind == "transpose":  # out (j, i) <- in (i, j)
        rows = [np.array([(k % h) * w + k // h]) for k in range(n)]
        out_shape, in_shapes, outs = (w, h), [(h, w)], cells
    elif kind == "random":
        rows = [rng.integers(0, n, 3) for _ in range(n)]
        out_shape, in_shapes, outs = (h, w), [(h, w)], cells
    else:
        raise ValueError(kind)
    ins = Ragged.from_rows([np.unique(np.asarray(r, dtype=np.uint64)) for r in rows],
                           np.uint64)
    return PairBatch(Ragged.from_singletons(outs), ins=(ins,)), out_shape, in_shapes


def _queries(data, size: int) -> list[np.ndarray]:
    """A few cells, a run, and the whole array."""
    few = data.draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=5))
    a = data.draw(st.integers(0, size - 1))
    b = data.draw(st.integers(a + 1, size))
    return [np.unique(np.asarray(few, dtype=np.uint64)), np.arange(a, b, dtype=np.uint64),
            np.arange(size, dtype=np.uint64)]


def _check(path: str, pairs: PairBatch, out_shape, in_shapes, data) -> None:
    n_out, n_in = int(np.prod(out_shape)), int(np.prod(in_shapes[0]))
    with open_shard(path) as r:
        for q, qi in zip(_queries(data, n_out), _queries(data, n_in)):
            for few in (fewcells.FEW_CELLS, -1):
                with mock.patch.object(fewcells, "FEW_CELLS", few):
                    got = r.backward(q, 0)
                    assert got.dtype == np.uint64 and (np.diff(got) > 0).all()
                    assert set(got.tolist()) == brute_backward(pairs, q, 0)
                    got = r.forward(qi, 0)
                    assert got.dtype == np.uint64 and (np.diff(got) > 0).all()
                    assert set(got.tolist()) == brute_forward(pairs, qi, 0)


# ---------------------------------------------------------------------------------------
# lookups against brute force
# ---------------------------------------------------------------------------------------


def _agrees_with_brute_force(r, pairs: PairBatch, out_shape, in_shapes) -> None:
    """Backward and forward lookups of 1, 7, 300 and every cell on the open shard ``r``
    answer what the pairs answer."""
    rng = np.random.default_rng(1)
    n_out, n_in = int(np.prod(out_shape)), int(np.prod(in_shapes[0]))
    for n in (1, 7, 300, None):
        q = (np.arange(n_out, dtype=np.uint64) if n is None
             else np.unique(rng.integers(0, n_out, n)).astype(np.uint64))
        qi = (np.arange(n_in, dtype=np.uint64) if n is None
              else np.unique(rng.integers(0, n_in, n)).astype(np.uint64))
        assert set(r.backward(q, 0).tolist()) == brute_backward(pairs, q, 0)
        assert set(r.forward(qi, 0).tolist()) == brute_forward(pairs, qi, 0)


@SETTINGS
@given(data=st.data(), kind=st.sampled_from(KINDS), h=st.integers(1, 24),
       w=st.integers(1, 24), seed=st.integers(0, 3), flagged=st.sampled_from([0.01, 0.2]),
       direction=st.sampled_from(["bwd", "fwd"]), always=st.booleans())
def test_regular_lineage_with_exceptions_matches_brute_force(data, kind, h, w, seed, flagged,
                                                             direction, always):
    pairs, out_shape, in_shapes = pair_set(kind, h, w, seed, flagged)
    home = tempfile.mkdtemp(prefix="sz-fc-")
    try:
        with mock.patch.object(full_compact, "COMPACT", "always" if always else "auto"):
            st_ = write_shard(home, f"full-compact-{direction}", pairs, out_shape, in_shapes)
        _check(st_["path"], pairs, out_shape, in_shapes, data)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("direction", ["bwd", "fwd"])
def test_groups_form_and_answer_like_brute_force(tmp_path, kind, direction):
    """At 40 x 48 the regular workloads do form groups, and every lookup still agrees."""
    pairs, out_shape, in_shapes = pair_set(kind, 40, 48)
    st_ = write_shard(tmp_path, f"full-compact-{direction}", pairs, out_shape, in_shapes)
    with open_shard(st_["path"]) as r:
        groups = r.meta["groups"]
    if kind in ("cleaner", "stencil3", "stencil9") or (kind == "rowreduce"
                                                        and direction == "fwd"):
        assert groups > 0
    if kind == "random":
        assert groups == 0
    with open_shard(st_["path"]) as r:
        _agrees_with_brute_force(r, pairs, out_shape, in_shapes)


# ---------------------------------------------------------------------------------------
# sizes against FullOne
# ---------------------------------------------------------------------------------------


def _logical(tmp_path, strategy: str, kind: str, h: int, w: int) -> int:
    pairs, out_shape, in_shapes = pair_set(kind, h, w)
    st_ = write_shard(tmp_path / strategy / kind, strategy, pairs, out_shape, in_shapes)
    return int(st_["logical_bytes"])


@pytest.mark.parametrize("kind,most", [("cleaner", 0.05), ("stencil3", 0.02),
                                       ("stencil9", 0.03)])
def test_identity_with_exceptions_and_stencils_are_a_tiny_fraction_of_full_one(
        tmp_path, kind, most):
    one = _logical(tmp_path, "full-one-bwd", kind, 128, 128)
    compact = _logical(tmp_path, "full-compact-bwd", kind, 128, 128)
    assert compact <= most * one, (compact, one)


@pytest.mark.parametrize("direction", ["bwd", "fwd"])
@pytest.mark.parametrize("kind", KINDS)
def test_never_bigger_than_full_one(tmp_path, kind, direction):
    one = _logical(tmp_path, f"full-one-{direction}", kind, 64, 64)
    compact = _logical(tmp_path, f"full-compact-{direction}", kind, 64, 64)
    assert compact <= one, (compact, one)


def test_random_sparse_pairs_are_stored_as_full_one_stores_them(tmp_path):
    assert (_logical(tmp_path, "full-compact-bwd", "random", 64, 64)
            == _logical(tmp_path, "full-one-bwd", "random", 64, 64))


def test_unknown_compact_policy_says_what_it_got():
    with pytest.raises(Exception, match="Got 'sometimes' instead"):
        full_compact.FullCompact("bwd", compact="sometimes")


# ---------------------------------------------------------------------------------------
# the conformance suite with every pattern grouped (tiny groups included)
# ---------------------------------------------------------------------------------------


class _Grouped:
    def setup_method(self, method):
        self._patches = [mock.patch.object(full_compact, "COMPACT", "always"),
                         mock.patch.object(patterns, "MIN_GROUP", 1)]
        for p in self._patches:
            p.start()

    def teardown_method(self, method):
        for p in self._patches:
            p.stop()


class TestFullCompactGroupedBackward(_Grouped, EncodingConformance):
    strategy = "full-compact-bwd"


class TestFullCompactGroupedForward(_Grouped, EncodingConformance):
    strategy = "full-compact-fwd"


# ---------------------------------------------------------------------------------------
# the workflow-level strategy
# ---------------------------------------------------------------------------------------


def test_full_compact_plan_stores_full_lineage_where_full_one_would():
    from workflows import astronomy

    wf = astronomy.build(shape="64x48").validate()
    one, compact = wf.plan("full-one"), wf.plan("full-compact")
    assert one.keys() == compact.keys()
    for name, ss in one.items():
        want = ["full-compact-bwd" if s.name == "full-one-bwd" else s.name for s in ss]
        assert [s.name for s in compact[name]] == want, name
    assert {compact[n][0].name for n in ("cr1", "cr2", "rmcr", "clust")} == {
        "full-compact-bwd"}


def test_one_pair_of_many_cells_is_grouped_without_expanding_it_per_key(tmp_path):
    """Every output cell of a 200 x 100 array depends on the whole input (one pair): the
    absolute pattern is tokenized once, not once per key (20,000 x 20,000 cells)."""
    shape = (200, 100)
    every = np.arange(20_000, dtype=np.uint64)
    pairs = PairBatch(Ragged.from_rows([every], np.uint64),
                      ins=(Ragged.from_rows([every], np.uint64),))
    for direction in ("bwd", "fwd"):
        st_ = write_shard(tmp_path / direction, f"full-compact-{direction}", pairs, shape,
                          [shape])
        with open_shard(st_["path"]) as r:
            assert 0 < r.meta["groups"] <= 8 and st_["logical_bytes"] < 4096
            q = np.array([5, 19_999], dtype=np.uint64)
            assert np.array_equal(r.backward(q, 0), every)
            assert np.array_equal(r.forward(q, 0), every)


# ---------------------------------------------------------------------------------------
# the key cells' forms
# ---------------------------------------------------------------------------------------


def _box_cells(lo, hi, width):
    return [r * width + c for r in range(lo[0], hi[0]) for c in range(lo[1], hi[1])]


@SETTINGS
@given(groups=st.lists(st.one_of(
    st.sets(st.integers(0, 400), min_size=1, max_size=40),
    st.tuples(st.integers(0, 6), st.integers(1, 6), st.integers(0, 9), st.integers(1, 9))
    .map(lambda t: set(_box_cells((t[0], t[2]), (t[0] + t[1], t[2] + t[3] // 2 + 1), 20))),
    st.tuples(st.integers(0, 6), st.integers(0, 9)).flatmap(
        lambda t: st.sets(st.integers(0, 99), max_size=4).map(
            lambda extra: set(_box_cells((t[0], t[1]), (t[0] + 5, t[1] + 6), 20)) | extra))),
    min_size=1, max_size=6))
def test_key_forms_decode_to_the_cells_they_encode(groups):
    """Lists, runs and strided runs (boxes, boxes with extra cells) round-trip."""
    from encoders.formats.varint import varint_encode
    from encoders.layouts.cellindex import record_tokens
    from encoders.formats.csr import offsets_from_lengths

    cells = [np.array(sorted(g), dtype=np.uint64) for g in groups]
    kk = np.concatenate(cells)
    gid = np.repeat(np.arange(len(cells)), [len(c) for c in cells])
    newg = np.zeros(len(kk), dtype=bool)
    newg[offsets_from_lengths(np.array([len(c) for c in cells]))[:-1]] = True
    tok, toff = patterns.key_tokens(kk, gid, newg, len(cells))
    b, blen = varint_encode(tok)
    body_off = offsets_from_lengths(blen)[toff]
    t, to, _ = record_tokens(b, body_off)
    d = patterns.decode_keys(t, to[:-1])
    got = patterns.expand_keys(d, np.ones(len(cells), dtype=bool))
    owner = np.repeat(d.group, d.lengths)
    for g, want in enumerate(cells):
        assert got[owner == g].tolist() == want.tolist()
        assert int(d.kmin[g]) == int(want[0]) and int(d.kmax[g]) == int(want[-1])
        # the few-cell path's membership test reads the same record
        test, _ = fewpatterns._key_test([int(x) for x in t[to[g]:to[g + 1]]])
        assert [c for c in range(int(want[-1]) + 60) if test(c)] == want.tolist()
    assert (d.sets_at == to[1:]).all()


def test_a_cell_just_after_a_strided_item_is_in_its_group():
    """Rows of one cell, 38 apart, then the next item starting where a fourth row would
    have had its gap: the few-cell path's test looks past the strided item's last run."""
    from encoders.layouts.cellindex import record_tokens
    from encoders.formats.varint import varint_encode

    kk = np.array([37, 75, 113] + [132 + 19 * k for k in range(10)], dtype=np.uint64)
    newg = np.zeros(len(kk), dtype=bool)
    newg[0] = True
    tok, toff = patterns.key_tokens(kk, np.zeros(len(kk), dtype=np.int64), newg, 1)
    b, blen = varint_encode(tok)
    from encoders.formats.csr import offsets_from_lengths
    t, to, _ = record_tokens(b, offsets_from_lengths(blen)[toff])
    assert int(t[0]) & 3 == patterns.STRIDE_FORM and int(t[0]) >> 2 == 2
    test, _ = fewpatterns._key_test([int(x) for x in t[to[0]:to[1]]])
    assert [c for c in range(400) if test(c)] == kk.tolist()


def test_a_box_of_key_cells_is_a_few_tokens():
    kk = np.array(_box_cells((3, 4), (40, 50), 64), dtype=np.uint64)
    newg = np.zeros(len(kk), dtype=bool)
    newg[0] = True
    tok, toff = patterns.key_tokens(kk, np.zeros(len(kk), dtype=np.int64), newg, 1)
    assert len(tok) <= 9  # header + the first row + the other rows as one strided item


def test_a_whole_array_dependency_of_a_large_array_is_a_few_groups(tmp_path):
    """Every cell of a 2001 x 513 output depends on the whole input (a global mean
    broadcast): a set of more than ``ABS_CELLS`` cells whose pattern is a box of a few
    tokens joins a group per tile, far smaller than the keys' entries in the residue."""
    shape = (2001, 513)
    n = shape[0] * shape[1]
    assert n > patterns.ABS_CELLS
    every = np.arange(n, dtype=np.uint64)
    pairs = PairBatch(Ragged.from_rows([every], np.uint64),
                      ins=(Ragged.from_rows([every], np.uint64),))
    for direction in ("bwd", "fwd"):
        one = write_shard(tmp_path / "one" / direction, f"full-one-{direction}", pairs,
                          shape, [shape])
        st_ = write_shard(tmp_path / "compact" / direction, f"full-compact-{direction}",
                          pairs, shape, [shape])
        assert st_["logical_bytes"] * 50 <= one["logical_bytes"]
        with open_shard(st_["path"]) as r:
            assert r.meta["groups"] > 0
            for q in (np.array([5], dtype=np.uint64), np.array([5, n - 1], dtype=np.uint64)):
                assert np.array_equal(r.backward(q, 0), every)
                assert np.array_equal(r.forward(q, 0), every)


def test_a_large_set_that_is_no_box_stays_in_the_residue(tmp_path):
    """A set of more than ``ABS_CELLS`` cells with many tokens (every other cell) shared
    by every key is kept once in the residue, as FullOne keeps it, not once per tile."""
    shape = (1001, 257)
    n = shape[0] * shape[1]
    half = np.arange(0, n, 2, dtype=np.uint64)
    assert len(half) > patterns.ABS_CELLS
    pairs = PairBatch(Ragged.from_rows([np.arange(n, dtype=np.uint64)], np.uint64),
                      ins=(Ragged.from_rows([half], np.uint64),))
    one = write_shard(tmp_path / "one", "full-one-bwd", pairs, shape, [shape])
    st_ = write_shard(tmp_path / "compact", "full-compact-bwd", pairs, shape, [shape])
    assert st_["logical_bytes"] <= one["logical_bytes"]
    with open_shard(st_["path"]) as r:
        assert not r.meta.get("groups")
        assert np.array_equal(r.backward(np.array([7], dtype=np.uint64), 0), half)
        assert np.array_equal(r.forward(np.array([2, 3], dtype=np.uint64), 0),
                              np.arange(n, dtype=np.uint64))


# ---------------------------------------------------------------------------------------
# box subsets: a box minus holes, sparse cells ranked in their box
# ---------------------------------------------------------------------------------------


def _round_trip(cells: list[np.ndarray], shape) -> np.ndarray:
    """Encode the groups ``cells`` with the key side's ``shape``, decode, check, and return
    each group's form."""
    from encoders.formats.csr import offsets_from_lengths
    from encoders.formats.varint import varint_encode
    from encoders.layouts.cellindex import record_tokens

    kk = np.concatenate(cells)
    gid = np.repeat(np.arange(len(cells)), [len(c) for c in cells])
    newg = np.zeros(len(kk), dtype=bool)
    newg[offsets_from_lengths(np.array([len(c) for c in cells]))[:-1]] = True
    tok, toff = patterns.key_tokens(kk, gid, newg, len(cells), shape)
    b, blen = varint_encode(tok)
    t, to, _ = record_tokens(b, offsets_from_lengths(blen)[toff])
    for pick in (np.arange(len(cells)), np.arange(len(cells))[1::2]):
        d = patterns.decode_keys(t, to[:-1][pick])
        assert (np.diff(d.group) >= 0).all()
        got = patterns.expand_keys(d, np.ones(len(pick), dtype=bool))
        owner = np.repeat(d.group, d.lengths)
        for i, g in enumerate(pick):
            assert got[owner == i].tolist() == cells[g].tolist()
            assert int(d.kmin[i]) == int(cells[g][0]) and int(d.kmax[i]) == int(cells[g][-1])
        assert (d.sets_at == to[1:][pick]).all()
    return (np.asarray(tok)[toff[:-1]] & 3).astype(int)


@SETTINGS
@given(shape=st.one_of(st.tuples(st.integers(1, 400)),
                       st.tuples(st.integers(1, 70), st.integers(1, 70)),
                       st.tuples(st.integers(1, 3), st.integers(1, 30), st.integers(1, 30))),
       specs=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1),
                                st.sampled_from([0.01, 0.05, 0.5, 0.95, 0.99, 1.0]),
                                st.integers(0, 9)), min_size=1, max_size=5))
def test_box_subsets_decode_to_the_cells_they_encode(shape, specs):
    """Groups drawn as a box with most cells (holes) or few cells (members) round-trip
    in whatever form the encoder picks, decoded together or alone."""
    cells = []
    for a, b, c, density, seed in specs:
        rng = np.random.default_rng(seed)
        m = np.zeros(shape, dtype=bool)
        lo = [int(a * (s - 1)) for s in shape]
        hi = [lo_ + 1 + int(b * (s - lo_ - 1)) for lo_, s in zip(lo, shape)]
        box = tuple(slice(x, y) for x, y in zip(lo, hi))
        m[box] = rng.random(m[box].shape) < density
        got = np.flatnonzero(m).astype(np.uint64)
        cells.append(got if len(got) else np.array([int(c * (m.size - 1))], np.uint64))
    _round_trip(cells, shape)


def test_identity_with_a_few_exceptions_is_a_box_minus_holes():
    """A 63 x 65 tile of a 2001 x 513 image minus 40 exceptions is its cover and 40 small
    ranks; the exceptions' own group is its cover and 40 ranks too."""
    shape = (2001, 513)
    rows, cols = np.meshgrid(np.arange(126, 189), np.arange(65, 130), indexing="ij")
    tile = np.sort((rows * 513 + cols).reshape(-1)).astype(np.uint64)
    rng = np.random.default_rng(0)
    flagged = np.zeros(len(tile), dtype=bool)
    flagged[rng.choice(len(tile), 40, replace=False)] = True
    forms = _round_trip([tile[~flagged], tile[flagged]], shape)
    assert forms.tolist() == [patterns.BOX_FORM, patterns.BOX_FORM]


# ---------------------------------------------------------------------------------------
# patterns relative to an anchor on aligned shapes (reductions, broadcasts)
# ---------------------------------------------------------------------------------------


def _aligned_pairs(kind: str, h: int, w: int) -> tuple[PairBatch, tuple, list[tuple]]:
    cells = np.arange(h * w, dtype=np.uint64)
    if kind == "rowsum":  # out (i, 0) <- in row i
        return (PairBatch(Ragged.from_singletons(np.arange(h, dtype=np.uint64)),
                          ins=(Ragged(cells, np.arange(h + 1, dtype=np.int64) * w),)),
                (h, 1), [(h, w)])
    if kind == "colsum":  # out (0, j) <- in column j
        col = (np.arange(h)[None, :] * w + np.arange(w)[:, None]).reshape(-1)
        return (PairBatch(Ragged.from_singletons(np.arange(w, dtype=np.uint64)),
                          ins=(Ragged(col.astype(np.uint64),
                                      np.arange(w + 1, dtype=np.int64) * h),)),
                (1, w), [(h, w)])
    # a broadcast: out (i, j) <- in (0, j)
    return (PairBatch(Ragged.from_singletons(cells),
                      ins=(Ragged.from_singletons((cells % np.uint64(w))),)),
            (h, w), [(1, w)])


@pytest.mark.parametrize("kind", ["rowsum", "colsum", "broadcast"])
@pytest.mark.parametrize("direction", ["bwd", "fwd"])
@pytest.mark.parametrize("h,w", [(1, 1), (5, 1), (1, 7), (40, 48), (130, 70)])
def test_reductions_and_broadcasts_share_one_anchored_pattern(tmp_path, kind, direction,
                                                               h, w):
    pairs, out_shape, in_shapes = _aligned_pairs(kind, h, w)
    one = write_shard(tmp_path / "one", f"full-one-{direction}", pairs, out_shape, in_shapes)
    st_ = write_shard(tmp_path / "c", f"full-compact-{direction}", pairs, out_shape,
                      in_shapes)
    assert st_["logical_bytes"] <= one["logical_bytes"]
    with open_shard(st_["path"]) as r:
        if h * w >= 40 * 48:
            assert r.meta["groups"] > 0 and r.meta["compact"][
                "" if direction == "bwd" else "0"]["residue"] == 0
        _agrees_with_brute_force(r, pairs, out_shape, in_shapes)


def test_anchor_cells_drop_the_axes_whose_extents_differ():
    keys = np.array([0, 5, 7], dtype=np.uint64)  # (0, 0), (2, 1), (3, 1) of (4, 2)
    assert patterns.anchor_cells(keys, (4, 2), (4, 2)).tolist() == [0, 5, 7]
    assert patterns.anchor_cells(keys, (4, 2), (4, 1)).tolist() == [0, 2, 3]
    assert patterns.anchor_cells(keys, (4, 2), (1, 2)).tolist() == [0, 1, 1]
    assert patterns.aligned((4, 2), (4, 1)) and patterns.aligned((1, 2), (4, 2))
    assert not patterns.aligned((4,), (4, 2)) and not patterns.aligned((4, 2), (2, 4))


# ---------------------------------------------------------------------------------------
# forward indexes built the other way round (groups of output cells, read by input cell)
# ---------------------------------------------------------------------------------------


class TestFullCompactSwappedForward(_Grouped, EncodingConformance):
    """Every forward shard whose output cells form a group is stored swapped."""

    strategy = "full-compact-fwd"

    def setup_method(self, method):
        super().setup_method(method)
        self._patches.append(mock.patch.object(full_compact, "SWAPPED", "always"))
        self._patches[-1].start()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("h,w", [(3, 4), (40, 48), (90, 70)])
def test_swapped_forward_index_answers_like_brute_force(tmp_path, kind, h, w):
    pairs, out_shape, in_shapes = pair_set(kind, h, w, flagged=0.05)
    with mock.patch.object(full_compact, "SWAPPED", "always"):
        st_ = write_shard(tmp_path, "full-compact-fwd", pairs, out_shape, in_shapes)
    with open_shard(st_["path"]) as r:
        if kind == "cleaner" and h * w > 1000:
            assert r.meta["compact"]["0"].get("swapped")
        _agrees_with_brute_force(r, pairs, out_shape, in_shapes)


def test_the_cleaner_forward_is_its_backward_grouping_read_the_other_way(tmp_path):
    """Keyed by input cell a flagged pixel's box is 25 patterns; keyed by output cell it is
    one: the forward index stores the latter, a small fraction of the former."""
    one = _logical(tmp_path, "full-one-fwd", "cleaner", 128, 128)
    compact = _logical(tmp_path, "full-compact-fwd", "cleaner", 128, 128)
    assert compact <= 0.05 * one, (compact, one)
