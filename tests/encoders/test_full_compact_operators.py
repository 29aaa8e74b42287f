"""FullCompact stores the FULL lineage of every built-in and every shipped astronomy UDF
exactly: lookups on its shards (both directions keyed) equal brute force over the pairs the
operator traced. The pairs themselves are checked sound by perturbation elsewhere
(tests/operators/test_library.py, tests/workflows/test_astro_udfs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from encoders.lookup import open_shard
from subzero.cells import Ragged
from subzero.lineage import PairBatch
from subzero.modes import Mode
from subzero.testing import bind, run_chunked
from tests.encoders.conformance import write_shard
from tests.operators.cases import CASES, Case


def brute(pairs: PairBatch, q: np.ndarray, i: int, backward: bool) -> np.ndarray:
    """The cells of the other side of every pair whose key side meets ``q`` (numpy)."""
    key, val = (pairs.out, pairs.ins[i]) if backward else (pairs.ins[i], pairs.out)
    kv, ko = np.asarray(key.values), np.asarray(key.offsets)
    hit_rows = np.repeat(np.arange(len(ko) - 1), np.diff(ko))[np.isin(kv, q)]
    vv, vo = np.asarray(val.values, dtype=np.uint64), np.asarray(val.offsets)
    rows = np.unique(hit_rows)
    take = np.zeros(len(vv), dtype=bool)
    owner = np.repeat(np.arange(len(vo) - 1), np.diff(vo))
    take[np.isin(owner, rows)] = True
    return np.unique(vv[take])


def frontiers(size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A cell, a few cells, a tenth, everything."""
    return [np.array([rng.integers(0, size)], dtype=np.uint64),
            np.unique(rng.integers(0, size, 5)).astype(np.uint64),
            np.unique(rng.integers(0, size, max(1, size // 10))).astype(np.uint64),
            np.arange(size, dtype=np.uint64)]


def check_stored(tmp_path, op, pairs: PairBatch | None) -> None:
    rng = np.random.default_rng(0)
    out_size = int(np.prod(op.out_shape))
    for direction in ("bwd", "fwd"):
        st_ = write_shard(tmp_path / direction, f"full-compact-{direction}", pairs,
                          tuple(op.out_shape), [tuple(s) for s in op.in_shapes])
        with open_shard(st_["path"]) as r:
            for i, s in enumerate(op.in_shapes):
                for q in frontiers(out_size, rng):
                    want = (np.empty(0, np.uint64) if pairs is None
                            else brute(pairs, q, i, True))
                    assert np.array_equal(r.backward(q, i), want), (direction, i, len(q))
                for q in frontiers(int(np.prod(s)), rng):
                    want = (np.empty(0, np.uint64) if pairs is None
                            else brute(pairs, q, i, False))
                    assert np.array_equal(r.forward(q, i), want), (direction, i, len(q))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_builtin_full_lineage_round_trips(tmp_path, case: Case):
    op = bind(case.make(), *case.inputs)
    _, pairs, _ = run_chunked(op, case.inputs, 2, modes=(Mode.FULL,))
    check_stored(tmp_path, op, pairs)


@pytest.mark.parametrize("name", ["cr", "rmcr", "clust"])
def test_astronomy_udf_full_lineage_round_trips(tmp_path, name):
    from tests.workflows import test_astro_udfs as astro

    make, inputs, _, split = astro.CASES[name]
    op = bind(make(), *inputs)
    _, pairs, _ = run_chunked(op, inputs, split, modes=(Mode.FULL,))
    assert pairs is not None and len(pairs)
    check_stored(tmp_path, op, pairs)


def test_brute_reads_pairs_both_ways():
    pairs = PairBatch(Ragged.from_rows([np.array([0, 1]), np.array([2])], np.uint64),
                      ins=(Ragged.from_rows([np.array([5]), np.array([5, 6])], np.uint64),))
    assert brute(pairs, np.array([1], np.uint64), 0, True).tolist() == [5]
    assert brute(pairs, np.array([5], np.uint64), 0, False).tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------
# soundness: the lineage read back from FullCompact shards, perturbation-tested
# ---------------------------------------------------------------------------------------


def _shard_backward(tmp_path, op, pairs, direction: str, swapped: str):
    """``backward(frontier_mask, i)`` answered by a FullCompact shard of ``pairs``."""
    from unittest import mock

    from encoders import full_compact

    with mock.patch.object(full_compact, "SWAPPED", swapped):
        st_ = write_shard(tmp_path / f"{direction}-{swapped}", f"full-compact-{direction}",
                          pairs, tuple(op.out_shape), [tuple(s) for s in op.in_shapes])
    reader = open_shard(st_["path"])

    def backward(f: np.ndarray, i: int) -> np.ndarray:
        q = np.flatnonzero(np.asarray(f).reshape(-1)).astype(np.uint64)
        mask = np.zeros(int(np.prod(op.in_shapes[i])), dtype=bool)
        mask[reader.backward(q, i).astype(np.intp)] = True
        return mask.reshape(op.in_shapes[i])

    return reader, backward


@pytest.mark.parametrize("direction,swapped", [("bwd", "auto"), ("fwd", "auto"),
                                               ("fwd", "always")])
@pytest.mark.parametrize("name", ["cr", "rmcr", "clust"])
def test_astronomy_udf_lineage_from_compact_shards_is_sound_by_perturbation(
        tmp_path, name, direction, swapped):
    """Inputs changed outside what a FullCompact shard answers for a few output cells leave
    those cells' values unchanged: the stored forms (boxes minus holes, anchored and
    swapped groups, the residue) lose no dependency of the shipped UDFs."""
    from subzero.testing import assert_sound_by_perturbation
    from tests.workflows import test_astro_udfs as astro

    make, inputs, _, split = astro.CASES[name]
    op = bind(make(), *inputs)
    _, pairs, _ = run_chunked(op, inputs, split, modes=(Mode.FULL,))
    reader, backward = _shard_backward(tmp_path, op, pairs, direction, swapped)
    try:
        rng = np.random.default_rng(3)
        size = int(np.prod(op.out_shape))
        for cells in (np.unique(rng.integers(0, size, 3)), np.unique(rng.integers(0, size, 40))):
            assert_sound_by_perturbation(op, inputs, cells.astype(np.uint64),
                                         backward=backward, split=split, trials=2)
    finally:
        reader.close()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_builtin_lineage_from_compact_shards_is_sound_by_perturbation(tmp_path, case: Case):
    """As above for every built-in operator, its forward shard stored swapped where a
    group forms."""
    from subzero.testing import assert_sound_by_perturbation

    op = bind(case.make(), *case.inputs)
    _, pairs, _ = run_chunked(op, case.inputs, 2, modes=(Mode.FULL,))
    if pairs is None or not len(pairs):
        pytest.skip("no pairs traced")
    reader, backward = _shard_backward(tmp_path, op, pairs, "fwd", "always")
    try:
        size = int(np.prod(op.out_shape))
        cells = np.unique(np.random.default_rng(0).integers(0, size, 4)).astype(np.uint64)
        assert_sound_by_perturbation(op, case.inputs, cells, backward=backward, split=2,
                                     trials=1)
    finally:
        reader.close()
