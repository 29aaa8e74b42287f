"""Every array chunk carries its checksum (zarr's crc32c codec): a flipped byte is found
by verify, and every read (export, queries, re-execution) names the array and chunk in one
line instead of returning changed values; a query left free to choose answers from stored
lineage instead of re-executing through the damaged chunk."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from subzero.engine import arrays, layout
from tests.conftest import run_cli


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


@pytest.fixture
def damaged(tmp_path):
    """An astronomy run whose cleaned image ``rmcr`` has 5 bytes flipped in chunk 0.0."""
    home = tmp_path / "home"
    p = cli("run", "astronomy", "--param", "shape=200x120", "--param", "data=generated",
            "--where", "driver", "--home", str(home), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    rid = json.loads(p.stdout)["run"]
    chunk = arrays.chunk_file(layout.array_path(home, rid, "rmcr"), (0, 0))
    data = bytearray(chunk.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 5] = bytes(b ^ 0xFF for b in data[mid:mid + 5])
    chunk.write_bytes(bytes(data))
    return home, rid


def one_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout[-1000:], p.stderr[-1000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error" not in lines[0], p.stderr
    return lines[0]


def test_a_flipped_byte_in_a_chunk_is_named_by_every_read(damaged, tmp_path):
    home, rid = damaged
    h = ("--home", str(home))
    v = cli("verify", rid, *h)
    assert v.returncode == 3 and "rmcr chunk 0.0" in v.stdout, v.stdout
    line = one_line(cli("export", rid, "rmcr", str(tmp_path / "x.npy"), *h))
    assert "'rmcr' chunk 0.0" in line and "checksum" in line
    assert not (tmp_path / "x.npy").exists()
    q = ("query", rid, "backward", "--from", "clust", "--cells", "50,50", "--to", "rmcr")
    line = one_line(cli(*q, "--method", "reexec", *h))
    assert "'rmcr' chunk 0.0" in line
    auto = cli(*q, "--json", *h)
    assert auto.returncode == 0, auto.stderr
    steps = json.loads(auto.stdout)["steps"]
    assert steps[0]["method"].startswith("stored:")
    # the other arrays are whole
    assert cli("export", rid, "sumexp", str(tmp_path / "s.npy"), *h).returncode == 0
    assert np.load(tmp_path / "s.npy").shape == (200, 120)


def test_zarr_itself_refuses_the_damaged_chunk(damaged):
    import zarr

    home, rid = damaged
    arr = zarr.open_array(str(layout.array_path(home, rid, "rmcr")), mode="r")
    with pytest.raises(Exception, match="checksum"):
        arr[0:10, 0:10]
