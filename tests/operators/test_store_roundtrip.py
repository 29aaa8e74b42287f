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


def _stored_task(tmp: Path):
    """One chunk of an elementwise operator that stores FullOne lineage, run on the driver."""
    from operators import Affine
    from subzero.modes import FULL_ONE_BWD

    op = bind(Affine(scale=2.0), NUM)
    src, out = tmp / "in0.zarr", tmp / "out.zarr"
    arrays.write_array(src, NUM, NUM.shape)
    arrays.create_array(out, op.out_shape, op.out_dtype, NUM.shape)
    jobs = make_jobs(tmp, "r1", op, [src], out, task_grid(op, NUM.shape), (FULL_ONE_BWD,),
                     frozenset({Mode.FULL}))
    return jobs, out


def test_a_task_that_stores_lineage_writes_its_chunk_beside_the_store(tmp_path):
    jobs, out = _stored_task(tmp_path)
    (res,) = run_jobs(jobs, None)
    assert "error" not in res, res.get("error")
    assert np.array_equal(arrays.read_array(out), 2.0 * NUM)
    assert len(res["shards"]) == 1 and res["shards"][0]["strategy"] == "full-one-bwd"
    assert res["write_s"] > 0 and res["store_s"] > 0


def test_a_failed_write_or_store_fails_the_task_after_both_ended(tmp_path, monkeypatch):
    from subzero.engine import tasks

    def no_disk(*a, **k):
        raise OSError(28, "No space left on device")

    jobs, out = _stored_task(tmp_path / "w")
    monkeypatch.setattr(arrays, "write_block", no_disk)
    (res,) = run_jobs(jobs, None)
    assert "No space left on device" in res["error"]
    monkeypatch.undo()

    ended = []

    def slow_write(*a, **k):
        import time
        time.sleep(0.2)
        ended.append(True)
        return write(*a, **k)

    write = arrays.write_block
    jobs, out = _stored_task(tmp_path / "s")
    monkeypatch.setattr(arrays, "write_block", slow_write)
    monkeypatch.setattr(tasks, "store_shards", lambda *a, **k: no_disk())
    (res,) = run_jobs(jobs, None)
    assert "No space left on device" in res["error"]
    assert ended  # the task waited for its chunk before it reported
    assert np.array_equal(arrays.read_array(out), 2.0 * NUM)
