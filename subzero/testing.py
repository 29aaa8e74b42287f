"""Test helpers for operators and lineage (the ``assert_lineage_eq`` of this project).

- :func:`run_chunked` runs a bound operator chunk by chunk on the driver (no Spark, no
  zarr), exactly as the executor slices blocks, and returns the output and captured pairs;
- :func:`brute_backward` / :func:`brute_forward` answer lineage queries from captured pairs
  by brute force (sets of linear indices);
- :func:`assert_mapping_matches_trace` checks that an operator's vectorized mapping
  functions agree with the region pairs it reports in tracing mode, cell by cell;
- :func:`assert_sound_by_perturbation` checks a backward lineage the way the paper defines
  it: change every input cell *outside* the lineage of ``C`` and re-run; the outputs at
  ``C`` must not change.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from subzero.cells import Box, as_linear, unique
from subzero.chunking import Chunking, task_grid
from subzero.frontier import mask_from_linear
from subzero.lineage import PairBatch
from subzero.modes import Mode
from subzero.runtime import ChunkContext, TaskContext


def bind(op: Any, *inputs: np.ndarray, name: str = "op") -> Any:
    """Bind an unbound operator to the shapes and dtypes of ``inputs``."""
    return op.bind(name, [a.shape for a in inputs], [a.dtype for a in inputs])


def run_chunked(op: Any, inputs: Sequence[np.ndarray], split: int | Sequence[int] = 1,
                modes: Sequence[Mode] = (Mode.BLACKBOX,)
                ) -> tuple[np.ndarray, PairBatch | None, PairBatch | None]:
    """Run a bound operator over a chunk grid on the driver.

    Returns ``(output, full_pairs, payload_pairs)`` concatenated over chunks.
    """
    cshape = Chunking(split=split).chunk_shape(op.out_shape) if op.out_shape else ()
    out = np.empty(op.out_shape, dtype=op.out_dtype if op.out_dtype.kind not in "UOT" else object)
    fulls, pays = [], []
    for idx, box in task_grid(op, cshape):
        in_boxes = tuple(op.input_box(box, i) for i in range(len(inputs)))
        ch = ChunkContext(idx, box, in_boxes, op.out_shape, op.in_shapes)
        blocks = [np.asarray(a[b.slices]) if b.ndim else np.asarray(a) for a, b in
                  zip(inputs, in_boxes)]
        ctx = TaskContext(ch, frozenset(modes), op.name)
        block = np.asarray(op.run(ctx, *blocks))
        assert block.shape == box.shape, f"{op.name}: block {block.shape} for box {box.shape}"
        out[box.slices] = block
        fulls.append(ctx.full_pairs())
        pays.append(ctx.payload_pairs())
    if out.dtype == object:
        out = out.astype(op.out_dtype) if op.out_dtype.kind != "T" else out
    return out, PairBatch.concat(fulls), PairBatch.concat(pays)


def brute_backward(pairs: PairBatch, out_lin: np.ndarray, i: int) -> set[int]:
    want = set(int(v) for v in out_lin)
    res: set[int] = set()
    for k in range(len(pairs)):
        if want.intersection(pairs.out.row(k).tolist()):
            res.update(pairs.ins[i].row(k).tolist())
    return res


def brute_forward(pairs: PairBatch, in_lin: np.ndarray, i: int) -> set[int]:
    want = set(int(v) for v in in_lin)
    res: set[int] = set()
    for k in range(len(pairs)):
        if want.intersection(pairs.ins[i].row(k).tolist()):
            res.update(pairs.out.row(k).tolist())
    return res


def payload_backward(op: Any, pairs: PairBatch | None, frontier_out: np.ndarray, i: int,
                     default: bool) -> np.ndarray:
    """Brute-force backward lineage of payload (``default=False``, PAY: cells without a
    payload have no lineage) or composite lineage (``default=True``, COMP: ``map_b`` for
    cells without a payload, ``map_p`` for those with one). One cell at a time."""
    res = np.zeros(op.in_shapes[i], dtype=bool)
    covered = np.zeros(op.out_shape, dtype=bool)
    flat_f = frontier_out.reshape(-1)
    if pairs is not None:
        for k in range(len(pairs)):
            outs = pairs.out.row(k)
            for o in outs.tolist():
                if flat_f[o]:
                    cell = np.array([np.unravel_index(o, op.out_shape)], dtype=np.int64)
                    got = as_linear(op.map_p(cell, pairs.payload_bytes(k), i), op.in_shapes[i])
                    res.reshape(-1)[got.astype(np.intp)] = True
            covered.reshape(-1)[outs.astype(np.intp)] = True
    if default:
        rest = frontier_out & ~covered
        for o in np.flatnonzero(rest):
            res |= np.asarray(op.map_b(mask_from_linear([o], op.out_shape), i), dtype=bool)
    return res


def full_backward(pairs: PairBatch | None, frontier_out: np.ndarray, i: int,
                  in_shape: Sequence[int]) -> np.ndarray:
    """Brute-force backward lineage of full region pairs, as a frontier of input ``i``."""
    res = np.zeros(tuple(in_shape), dtype=bool)
    if pairs is not None:
        got = brute_backward(pairs, np.flatnonzero(frontier_out), i)
        res.reshape(-1)[np.fromiter(got, dtype=np.intp, count=len(got))] = True
    return res


def assert_mapping_matches_trace(op: Any, inputs: Sequence[np.ndarray], split: int = 2,
                                 max_cells: int = 200, seed: int = 0) -> None:
    """For sampled single cells, ``map_b``/``map_f`` equal the traced region pairs."""
    _, full, _ = run_chunked(op, inputs, split, (Mode.FULL,))
    assert full is not None, f"{op.name}: tracing produced no pairs"
    rng = np.random.default_rng(seed)
    n_out = int(np.prod(op.out_shape))
    outs = rng.choice(n_out, size=min(max_cells, n_out), replace=False)
    for i, shape in enumerate(op.in_shapes):
        for o in outs:
            got = set(np.flatnonzero(op.map_b(mask_from_linear([o], op.out_shape), i)).tolist())
            exp = brute_backward(full, np.array([o]), i)
            assert got == exp, f"{op.name} map_b input {i} cell {o}: {sorted(got)[:10]} != " \
                               f"{sorted(exp)[:10]}"
        n_in = int(np.prod(shape))
        for c in rng.choice(n_in, size=min(max_cells, n_in), replace=False):
            got = set(np.flatnonzero(op.map_f(mask_from_linear([c], shape), i)).tolist())
            exp = brute_forward(full, np.array([c]), i)
            assert got == exp, f"{op.name} map_f input {i} cell {c}: {sorted(got)[:10]} != " \
                               f"{sorted(exp)[:10]}"


def perturb(arr: np.ndarray, keep: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A copy of ``arr`` with every cell outside ``keep`` changed to a different value."""
    out = arr.copy()
    change = ~keep
    n = int(change.sum())
    if n == 0:
        return out
    if arr.dtype == bool:
        out[change] = ~arr[change]
    elif arr.dtype.kind == "f":
        scale = float(np.nanstd(arr)) or 1.0
        out[change] = arr[change] + rng.uniform(0.5, 3.0, n) * scale * rng.choice([-1, 1], n)
    elif arr.dtype.kind in "iu":
        info = np.iinfo(arr.dtype)
        out[change] = rng.integers(info.min, info.max, n, dtype=arr.dtype, endpoint=True)
        same = out == arr
        out[same & change] = arr[same & change] ^ 1
    else:  # strings: a value from elsewhere in the array, or a new one
        vocab = np.unique(arr.astype(object).astype("U"))
        new = rng.choice(np.append(vocab, "PERTURBED"), n)
        out[change] = new
        same = (out.astype(object) == arr.astype(object)) & change
        out[same] = "PERTURBED"
    return out


def assert_sound_by_perturbation(
    op: Any, inputs: Sequence[np.ndarray], out_cells: Any,
    backward: Callable[[np.ndarray, int], np.ndarray] | None = None, trials: int = 3,
    split: int = 1, seed: int = 0, modes: Sequence[Mode] = (Mode.BLACKBOX,),
    rtol: float = 0.0,
) -> None:
    """Change every input cell outside the backward lineage of ``out_cells`` (in every input
    at once), re-run, and check the outputs at ``out_cells`` are unchanged.

    ``backward(frontier_out, i)`` gives the lineage to test (default: ``op.map_b``).
    Comparison is exact unless ``rtol`` is given (for kernels whose floating-point rounding
    depends on summation order beyond the window, such as running-sum filters).
    """
    backward = backward or op.map_b
    lin = unique(as_linear(out_cells, op.out_shape))
    f = mask_from_linear(lin, op.out_shape)
    keeps = [np.asarray(backward(f, i), dtype=bool) for i in range(len(inputs))]
    base, _, _ = run_chunked(op, inputs, split, modes)
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        pert = [perturb(a, k, rng) for a, k in zip(inputs, keeps)]
        again, _, _ = run_chunked(op, pert, split, modes)
        a, b = base.reshape(-1)[lin.astype(np.intp)], again.reshape(-1)[lin.astype(np.intp)]
        if a.dtype.kind == "f":
            ok = (np.array_equal(a, b, equal_nan=True) if rtol == 0
                  else np.allclose(a, b, rtol=rtol, atol=0, equal_nan=True))
        else:
            ok = a.tolist() == b.tolist()
        assert ok, f"{op.name}: outputs at the queried cells changed although only cells " \
                   "outside their backward lineage were perturbed"


def full_box(shape: Sequence[int]) -> Box:
    return Box.full(tuple(shape))
