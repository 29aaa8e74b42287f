"""Chunk files written past the page cache (subzero.engine.direct): the same bytes as an
ordinary write, a file system without O_DIRECT, a failed write, and which arrays a run
writes that way."""

import os
import re
from pathlib import Path

import numpy as np
import pytest

import workflows
from subzero.cells import Box
from subzero.chunking import Chunking
from subzero.engine import arrays
from subzero.engine import direct as direct_io
from subzero.engine.chunkstore import ChunkFiles
from subzero.engine.runner import direct_arrays
from subzero.engine.stages import plan_stages


@pytest.fixture(autouse=True)
def every_chunk_direct(monkeypatch):
    """Tiny arrays here: every chunk file past the page cache, however small."""
    monkeypatch.setattr(direct_io, "DIRECT_MIN_BYTES", 0)


def _array(path: Path, data: np.ndarray, chunks: tuple[int, ...]) -> ChunkFiles:
    arrays.write_array(path, np.zeros_like(data), chunks)
    files = arrays.direct_files(path)
    assert files is not None  # written chunk by chunk, as a run's arrays are
    return files


def _chunk_bytes(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes()
            for p in sorted(path.glob("c/**/*")) if p.is_file()}


@pytest.mark.parametrize("dtype, shape, chunks", [
    ("float64", (300, 70), (100, 70)),   # noisy floats: raw chunks, not 4096-byte multiples
    ("int32", (64, 64), (64, 64)),       # compressible: one small compressed chunk
    ("bool", (5, 3), (5, 3)),            # far below one aligned block
])
def test_direct_writes_leave_the_bytes_an_ordinary_write_leaves(tmp_path, dtype, shape,
                                                                 chunks):
    rng = np.random.default_rng(7)
    data = (rng.normal(size=shape) * 100).astype(dtype) if dtype != "bool" \
        else rng.random(shape) > 0.5
    plain, direct = tmp_path / "plain.zarr", tmp_path / "direct.zarr"
    _array(plain, data, chunks)
    _array(direct, data, chunks)
    box = Box.full(shape)
    arrays.write_block(plain, box, data)
    pending: list = []
    arrays.write_block(direct, box, data, pending)
    assert pending  # one future per chunk file
    direct_io.wait_written(pending)
    assert pending == []
    assert _chunk_bytes(direct) == _chunk_bytes(plain)
    assert len(_chunk_bytes(direct)) == len(arrays.grid_keys(shape, chunks))
    assert np.array_equal(arrays.read_array(direct), data)
    assert not list(direct.glob("c/**/.*.tmp"))


@pytest.mark.parametrize("refuses", ["open", "write"])
def test_a_file_system_refusing_o_direct_gets_an_ordinary_write(tmp_path, monkeypatch,
                                                                 refuses):
    """A file system that refuses O_DIRECT (tmpfs: at the open; some others: at the write
    itself, EINVAL) gets an ordinary write, and is asked once."""
    real = {"open": os.open, "write": os.write}[refuses]
    refused = []

    def picky(*a):
        direct = (a[1] & os.O_DIRECT) if refuses == "open" else True
        if direct and not refused:
            refused.append(a[0])
            raise OSError(22, "Invalid argument")
        return real(*a)

    monkeypatch.setattr(direct_io, "_direct_writes", direct_io.DirectWrites())
    monkeypatch.setattr(os, refuses, picky)
    data = np.arange(3000.0).reshape(60, 50)  # two chunk files
    path = tmp_path / "a.zarr"
    _array(path, data, (30, 50))
    pending: list = []
    arrays.write_block(path, Box.full(data.shape), data, pending)
    direct_io.wait_written(pending)
    assert len(refused) == 1  # the second chunk went straight to an ordinary write
    assert np.array_equal(arrays.read_array(path), data)
    assert not list(path.glob("c/**/.*.tmp"))


def test_a_failed_write_raises_and_leaves_no_file(tmp_path, monkeypatch):
    data = np.arange(2000.0).reshape(40, 50)
    path = tmp_path / "a.zarr"
    _array(path, data, (20, 50))
    before = _chunk_bytes(path)

    def full_disk(fd, buf):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    pending: list = []
    arrays.write_block(path, Box.full(data.shape), data + 1, pending)
    with pytest.raises(OSError, match="No space left"):
        direct_io.wait_written(pending)
    monkeypatch.undo()
    assert _chunk_bytes(path) == before  # the chunks as they were, no temporary left
    assert not list(path.glob("c/**/.*.tmp"))


@pytest.mark.parametrize("stops", [False, True])
def test_a_short_write_is_finished_or_refused_never_renamed_short(tmp_path, monkeypatch,
                                                                  stops):
    """``os.write`` may take less than it is given: the rest is written after it, and a
    write that takes nothing fails, the chunk as it was."""
    data = np.random.default_rng(1).normal(size=(40, 512))  # raw chunks of 80 KB
    path = tmp_path / "a.zarr"
    _array(path, data, (20, 512))
    before = _chunk_bytes(path)
    real = os.write

    def short(fd, buf):  # an aligned piece at a time, or nothing at all
        return 0 if stops else real(fd, memoryview(buf)[:8192])

    monkeypatch.setattr(direct_io, "_direct_writes", direct_io.DirectWrites())
    monkeypatch.setattr(os, "write", short)
    pending: list = []
    arrays.write_block(path, Box.full(data.shape), data, pending)
    if stops:
        with pytest.raises(OSError, match="stopped after 0 of"):
            direct_io.wait_written(pending)
        monkeypatch.undo()
        assert _chunk_bytes(path) == before
    else:
        direct_io.wait_written(pending)
        monkeypatch.undo()
        assert np.array_equal(arrays.read_array(path), data)
    assert not list(path.glob("c/**/.*.tmp"))


def test_a_run_writes_past_the_page_cache_only_what_no_later_stage_reads():
    wf = workflows.build("astronomy", shape="200x100").validate()
    stages = plan_stages(wf, set(wf.inputs), Chunking().with_tasks(2).chunk_shape)
    direct = direct_arrays(wf, stages)
    stage_of = {n: st.id for st in stages for n in st.names}
    for st in stages:
        for n in st.names:
            for src in wf.nodes[n].inputs if n in wf.nodes else ():
                if stage_of[src] != st.id:  # read from its files by a later stage
                    assert src not in direct, (src, n)
    # e.g. rmcr is read by clust (a global stage), cr1 only inside its fused stage
    assert "rmcr" not in direct and "cr1" in direct and "clust" in direct
    assert not set(wf.inputs) & direct  # inputs are written by the driver or input tasks


def test_a_run_whose_chunk_write_fails_fails_in_one_line_and_says_why(tmp_path,
                                                                       monkeypatch):
    """A write past the page cache that fails fails its task (the task waits for it before
    it returns): the run stops with the reason, as a failed ordinary write would."""
    from subzero.engine.runner import run_workflow
    from subzero.errors import NoSpaceError
    from workflows import astronomy

    def full_disk(self, tmp, dest, buf, n, size):
        with self._cond:
            self._free.append(buf)
            self._held -= size
            self._cond.notify_all()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(direct_io.DirectWrites, "_write", full_disk)
    wf = astronomy.build(shape=(40, 24))
    with pytest.raises(NoSpaceError, match="no space left on device") as e:
        run_workflow(wf, tmp_path / "home", strategy="blackbox", where="driver")
    # the first operator whose chunks go past the page cache (either exposure's: their
    # stages run side by side), named with the reason, in one line
    assert re.match(r"no space left on device while writing operator 'linearity[12]' "
                    r"\(chunk 0\.0\) of run r1", str(e.value)), str(e.value)
    assert "\n" not in str(e.value)


def test_a_run_with_its_chunks_past_the_page_cache_equals_one_without(tmp_path,
                                                                      monkeypatch):
    """The same workflow run with and without direct writes: the same arrays and shards."""
    from subzero.engine import runner
    from tests.conftest import assert_same_runs
    from workflows import astronomy

    home = tmp_path / "home"
    wf = astronomy.build(shape=(200, 96))
    with_direct = runner.run_workflow(wf, home, strategy="subzero", where="driver")
    assert runner.direct_arrays(wf.validate(), runner.plan_stages(
        wf, set(wf.inputs), Chunking().with_tasks(2).chunk_shape))  # some are
    monkeypatch.setattr(runner, "direct_arrays", lambda wf, stages: frozenset())
    without = runner.run_workflow(astronomy.build(shape=(200, 96)), home, strategy="subzero",
                                  where="driver")
    assert_same_runs(home, with_direct.run, without.run, wf)


def test_a_small_chunk_file_goes_to_the_page_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(direct_io, "DIRECT_MIN_BYTES", 1 << 20)
    data = np.arange(2000.0).reshape(40, 50)  # 8 KB chunks
    path = tmp_path / "a.zarr"
    _array(path, data, (20, 50))
    pending: list = []
    arrays.write_block(path, Box.full(data.shape), data, pending)
    assert pending == []  # written at once, as without direct
    assert np.array_equal(arrays.read_array(path), data)
