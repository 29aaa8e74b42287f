"""Hypothesis strategies for lineage storage tests: shapes and batches of region pairs.

Pairs mix every case an encoder must get right: empty cell sets, huge fanin (a whole-array
box), full rectangles (stored as boxes), boxes clipped at the border, repeated key cells
(collisions across pairs) and duplicate cells within one set (lwrite accepts them).
:func:`per_cell_pairs` draws the per-pixel lineage FullMany groups relative to each cell:
identity, stencil boxes clipped at the border, fixed linear offsets that wrap around rows,
several inputs with different relative sets, mixed with multi-cell pairs.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from subzero.cells import Box, Ragged, to_coords
from subzero.lineage import PairBatch

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


PER_CELL_KINDS = ("identity", "box", "window", "shift", "empty", "random")


def _per_cell_set(kind: str, k: int, coords: np.ndarray, r: int, shift: np.ndarray,
                  shape: tuple[int, ...], same: bool, rng_cells: np.ndarray) -> np.ndarray:
    """Input cells of output cell ``k`` (coordinates ``coords`` in the output) for one
    input of ``shape`` (``same``: shaped like the output)."""
    size = int(np.prod(shape))
    if kind == "empty":
        return np.empty(0, dtype=np.uint64)
    if kind == "random":
        return rng_cells
    if not same:  # only linear arithmetic makes sense across shapes
        kind = "shift" if kind in ("box", "window") else kind
    if kind == "identity":
        return np.array([k % size], dtype=np.uint64)
    if kind in ("box", "window"):
        rad = r if kind == "box" else r + 1
        return Box(coords - rad, coords + rad + 1).clip(shape).linear(shape)
    cells = (k + shift) % size  # linear offsets: wrap around rows (and the array)
    return np.unique(cells).astype(np.uint64)


@st.composite
def per_cell_pairs(draw, out_shape, in_shapes, max_cells: int = 200) -> PairBatch:
    """Per-pixel lineage: one pair per output cell of a run of cells, each input's set
    drawn from a few kinds per cell (so cells sharing a kind share relative offsets),
    plus a few multi-cell pairs and repeated cells."""
    size = int(np.prod(out_shape))
    a = draw(st.integers(0, size - 1))
    z = draw(st.integers(a + 1, min(size, a + max_cells)))
    cells = np.arange(a, z, dtype=np.uint64)
    coords = to_coords(cells, out_shape)
    r = draw(st.integers(0, 2))
    per_input = []
    for s in in_shapes:
        kinds = draw(st.lists(st.sampled_from(PER_CELL_KINDS), min_size=1, max_size=3))
        shift = np.asarray(draw(st.lists(st.integers(-12, 12), min_size=1, max_size=4)))
        choice = draw(st.lists(st.integers(0, len(kinds) - 1), min_size=len(cells),
                               max_size=len(cells)))
        same = tuple(s) == tuple(out_shape)
        rnd = draw(cell_sets(tuple(s)))
        per_input.append([_per_cell_set(kinds[c], int(k), xy, r, shift, tuple(s), same, rnd)
                          for c, k, xy in zip(choice, cells.tolist(), coords)])
    outs = [cells[j:j + 1] for j in range(len(cells))]
    n_multi = draw(st.integers(0, 3))
    for _ in range(n_multi):  # a star: several output cells, its own input sets
        outs.append(draw(cell_sets(tuple(out_shape), 6)))
        for sets, s in zip(per_input, in_shapes):
            sets.append(draw(cell_sets(tuple(s))))
    if draw(st.booleans()):  # a cell in two pairs
        j = draw(st.integers(0, len(cells) - 1))
        outs.append(cells[j:j + 1])
        for sets, s in zip(per_input, in_shapes):
            sets.append(draw(cell_sets(tuple(s))))
    return PairBatch(Ragged.from_rows(outs), ins=tuple(Ragged.from_rows(x) for x in per_input))


@st.composite
def region_pairs(draw, out_shape, in_shapes, payload: bool = False, max_pairs: int = 12
                 ) -> PairBatch:
    """A batch of full (or payload) region pairs, with deliberate key collisions."""
    if not payload:
        kind = draw(st.integers(0, 5))
        if kind == 0:
            out, *ins = draw(stencil_pairs(out_shape, in_shapes))
            return PairBatch(out, ins=tuple(ins))
        if kind == 1:
            return draw(per_cell_pairs(out_shape, in_shapes, 60))
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
    kind = draw(st.sampled_from(["few", "few", "none", "all", "some"]))
    if kind == "none":
        return np.empty(0, dtype=np.uint64)
    if kind == "all":
        return np.arange(size, dtype=np.uint64)
    cells = draw(st.lists(st.integers(0, size - 1), min_size=1,
                          max_size=8 if kind == "few" else 100))
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
