"""Hypothesis strategies for lineage storage tests: shapes and batches of region pairs.

Pairs mix every case an encoder must get right: empty cell sets, huge fanin (a whole-array
box), full rectangles (stored as boxes), boxes clipped at the border, repeated key cells
(collisions across pairs) and duplicate cells within one set (lwrite accepts them).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from subzero.cells import Box, Ragged, to_coords
from subzero.runtime import PairBatch

shapes = st.one_of(
    st.just(()),
    st.tuples(st.integers(1, 40)),
    st.tuples(st.integers(1, 9), st.integers(1, 9)),
    st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
)


@st.composite
def cell_sets(draw, shape: tuple[int, ...], max_cells: int = 12) -> np.ndarray:
    """One cell set (linear uint64 indices, maybe unsorted with duplicates)."""
    size = int(np.prod(shape))
    kind = draw(st.sampled_from(["empty", "random", "box", "huge", "around"]))
    if kind == "empty":
        return np.empty(0, dtype=np.uint64)
    if kind == "huge":
        return Box.full(shape).linear(shape)
    if kind in ("box", "around"):
        lo = [draw(st.integers(0, n - 1)) for n in shape]
        if kind == "around":  # a radius-1 box around a cell, clipped at the border
            return Box([v - 1 for v in lo], [v + 2 for v in lo]).clip(shape).linear(shape)
        hi = [draw(st.integers(v + 1, n)) for v, n in zip(lo, shape)]
        return Box(lo, hi).linear(shape)
    cells = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=max_cells))
    return np.asarray(cells, dtype=np.uint64)


@st.composite
def stencil_pairs(draw, out_shape, in_shapes) -> list[Ragged]:
    """Per-cell lineage of an image operator: every output cell of a random run depends on
    the box of radius ``r`` around it (clipped at the border) in same-shaped inputs."""
    size = int(np.prod(out_shape))
    a = draw(st.integers(0, size - 1))
    z = draw(st.integers(a + 1, size))
    cells = np.arange(a, z, dtype=np.uint64)
    r = draw(st.integers(0, 2))
    coords = to_coords(cells, out_shape)
    out = [cells[k:k + 1] for k in range(len(cells))]
    ins = []
    for s in in_shapes:
        if tuple(s) == tuple(out_shape):
            ins.append([Box(c - r, c + r + 1).clip(s).linear(s) for c in coords])
        else:
            ins.append([draw(cell_sets(s)) for _ in cells])
    return [Ragged.from_rows(out)] + [Ragged.from_rows(x) for x in ins]


@st.composite
def region_pairs(draw, out_shape, in_shapes, payload: bool = False, max_pairs: int = 12
                 ) -> PairBatch:
    """A batch of full (or payload) region pairs, with deliberate key collisions."""
    if not payload and draw(st.integers(0, 3)) == 0:
        out, *ins = draw(stencil_pairs(out_shape, in_shapes))
        return PairBatch(out, ins=tuple(ins))
    n = draw(st.integers(1, max_pairs))
    outs = [draw(cell_sets(out_shape, 6)) for _ in range(n)]
    if n > 1 and draw(st.integers(0, 3)) > 0:  # repeat a key cell, or a whole key set
        if len(outs[0]) == 0:
            outs[0] = np.array([draw(st.integers(0, int(np.prod(out_shape)) - 1))], np.uint64)
        k = draw(st.integers(1, n - 1))
        outs[k] = outs[0].copy() if draw(st.booleans()) else np.append(outs[k], outs[0][:1])
    out = Ragged.from_rows(outs)
    if payload:
        vocab = [b"", b"\x01", b"\x02\x03", bytes(range(20))]
        pays = [draw(st.sampled_from(vocab)) for _ in range(n)]
        return PairBatch(out, payload=Ragged.from_rows(
            [np.frombuffer(p, dtype=np.uint8) for p in pays], np.uint8))
    ins = tuple(Ragged.from_rows([draw(cell_sets(s)) for _ in range(n)]) for s in in_shapes)
    return PairBatch(out, ins=ins)


@st.composite
def queries(draw, shape: tuple[int, ...]) -> np.ndarray:
    """Sorted unique query cells: none, a few, or all of them."""
    size = int(np.prod(shape))
    kind = draw(st.sampled_from(["few", "few", "none", "all"]))
    if kind == "none":
        return np.empty(0, dtype=np.uint64)
    if kind == "all":
        return np.arange(size, dtype=np.uint64)
    cells = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=8))
    return np.unique(np.asarray(cells, dtype=np.uint64))


def split_batch(b: PairBatch, parts: int) -> list[PairBatch]:
    """The batch cut into ``parts`` consecutive batches (several ``sink.write`` calls)."""
    bounds = np.linspace(0, len(b), parts + 1).astype(int)
    out = []
    for a, z in zip(bounds[:-1], bounds[1:]):
        rows = np.arange(a, z)
        if b.is_payload:
            out.append(PairBatch(b.out.take(rows), payload=b.payload.take(rows)))
        else:
            out.append(PairBatch(b.out.take(rows), ins=tuple(r.take(rows) for r in b.ins)))
    return out
