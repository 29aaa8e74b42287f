"""Structural built-ins through the real task path (zarr blocks in, zarr chunk out, on the
driver): string arrays survive, and chunks that overlap nothing of an input read an empty
block."""

from pathlib import Path

import numpy as np
import pytest

from operators import Classify, Concatenate, Copy, Reshape, Subarray, Transpose, Where
from subzero.chunking import Chunking, task_grid
from subzero.engine import arrays
from subzero.engine.tasks import make_jobs, run_jobs
from subzero.modes import Mode
from subzero.testing import bind

S = np.dtypes.StringDType()
STR = np.array([[f"s{i}.{j}" for j in range(5)] for i in range(7)], dtype=S)
NUM = np.arange(35.0).reshape(7, 5)


def run_via_store(op, inputs, split: int, tmp: Path) -> np.ndarray:
    chunking = Chunking(split=split)
    paths = []
    for k, a in enumerate(inputs):
        paths.append(tmp / f"in{k}.zarr")
        arrays.write_array(paths[-1], a, chunking.chunk_shape(a.shape))
    out = tmp / "out.zarr"
    cshape = chunking.chunk_shape(op.out_shape)
    arrays.create_array(out, op.out_shape, op.out_dtype, cshape)
    jobs = make_jobs(tmp, "r1", op, paths, out, task_grid(op, cshape), (),
                     frozenset({Mode.BLACKBOX}))
    for r in run_jobs(jobs, None):
        assert "error" not in r, r.get("error")
    return arrays.read_array(out)


@pytest.mark.parametrize("make, inputs, expected", [
    (lambda: Transpose(), [STR], STR.T),
    (lambda: Subarray(":, 0", axes=(1, 0)), [STR], STR[:, :1].T),
    (lambda: Subarray("1:7:2, 2:"), [STR], STR[1:7:2, 2:]),
    (lambda: Reshape((5, 7)), [STR], STR.reshape(5, 7)),
    (lambda: Concatenate(0), [STR, STR[:2].astype("U8")], np.concatenate([STR, STR[:2]])),
    (lambda: Concatenate(1), [NUM, NUM[:, :1]], np.concatenate([NUM, NUM[:, :1]], 1)),
    (lambda: Copy(), [STR.astype("U8")], STR),
    (lambda: Classify(), [NUM / 35.0], np.where(NUM / 35.0 > 0.5, "Y", "N")),
    (lambda: Where(), [NUM > 10, STR, np.array([["-"]], dtype=S)],
     np.where(NUM > 10, STR, "-")),
])
@pytest.mark.parametrize("split", [1, 3])
def test_blocks_through_zarr_equal_numpy(make, inputs, expected, split, tmp_path):
    op = bind(make(), *inputs)
    got = run_via_store(op, inputs, split, tmp_path)
    assert got.tolist() == np.asarray(expected).tolist()
