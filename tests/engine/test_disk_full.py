"""A full disk is a clear error: a run, a replay or the catalog refused a write says so in
one line (exit 1, no "internal error"), the run is marked failed with nothing half
written, and reading commands still work on the full disk.

The homes live on a small tmpfs mounted for the test (skipped where it cannot mount).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from subzero.engine.diskfull import is_disk_full
from tests.conftest import run_cli


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


@pytest.fixture
def small_disk(tmp_path):
    """A 24 MB tmpfs (skipped where this process cannot mount one)."""
    target = tmp_path / "disk"
    target.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(target)],
                       capture_output=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({p.stderr.decode().strip()[:80]})")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte with one file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def one_line(p: subprocess.CompletedProcess, code: int) -> str:
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len([ln for ln in lines if ln.startswith("subzero: error")]) == 1, p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    return next(ln for ln in lines if ln.startswith("subzero: error"))


FILLPIPE = """
import numpy as np

from operators import Affine, UDF
from subzero import Workflow


def sky(shape):
    return np.random.default_rng(0).normal(100.0, 5.0, shape)


class FillDisk(UDF):
    \"\"\"Passes its input through, after filling the disk that holds ``filler``: another
    process taking the space while the run runs.\"\"\"

    n_inputs = 1

    def __init__(self, filler):
        self.filler = filler

    def run(self, ctx, x):
        with open(self.filler, "ab") as f:
            for size in (1 << 20, 4096, 1):
                try:
                    while True:
                        f.write(b"\\0" * size)
                        f.flush()
                except OSError:
                    pass
        return x


def build(filler: str = "", side: int = 256):
    from functools import partial

    wf = Workflow("fills")
    wf.input("sky", (side, side), "float64", source=partial(sky, (side, side)))
    wf.add("calib", Affine(2.0), "sky")
    wf.add("fill", FillDisk(filler), "calib")
    wf.add("after", Affine(0.5), "fill")
    return wf
"""


def test_a_run_that_fills_the_disk_fails_in_one_line_and_frees_what_it_wrote(small_disk,
                                                                             tmp_path):
    home, filler = small_disk / "home", small_disk / "filler"
    (tmp_path / "fillpipe.py").write_text(FILLPIPE)
    line = one_line(cli("run", str(tmp_path / "fillpipe.py"), "--param", f"filler={filler}",
                        "--where", "driver", "--home", str(home)), 1)
    assert "no space left on device while writing" in line and str(home) in line
    assert "run r1" in line
    assert not (home / "runs" / "r1").exists()  # nothing half written stays
    filler.unlink()  # the space comes back
    runs = cli("runs", "--json", "--home", str(home))
    assert runs.returncode == 0, runs.stderr
    (run,) = json.loads(runs.stdout)
    assert run["status"] == "failed" and run["error"], run
    ok = cli("run", "example", "--param", "shape=24x16", "--where", "driver", "--home",
             str(home))
    assert ok.returncode == 0, ok.stderr


def test_reading_commands_work_on_a_full_disk(small_disk, tmp_path):
    home = small_disk / "home"
    p = cli("run", "example", "--param", "shape=64x48", "--where", "driver", "--home",
            str(home), "--json")
    assert p.returncode == 0, p.stderr
    rid = json.loads(p.stdout)["run"]
    fill(small_disk)
    for args in (("query", rid, "backward", "--from", "bright", "--cells", "3,3", "--to",
                  "image"), ("runs",),
                 ("show", rid), ("verify", rid),
                 ("export", rid, "bright", str(tmp_path / "b.npy"))):
        q = cli(*args, "--home", str(home))
        assert q.returncode == 0, (args, q.stderr)
    # a run is refused before it starts, in one line naming the free space
    line = one_line(cli("run", "example", "--param", "shape=24x16", "--where", "driver",
                        "--home", str(home)), 2)
    assert "0 B free" in line
    # a replay neither
    line = one_line(cli("replay", rid, "--from", "image", "--cells", "1,1", "--set", "0",
                        "--home", str(home)), 1)
    assert "no space left" in line


@pytest.mark.parametrize("e, full", [
    (OSError(28, "No space left on device"), True),
    (OSError(122, "Disk quota exceeded"), True),
    (OSError(30, "Read-only file system"), True),
    (RuntimeError("operator 'x' failed in chunk 0.0: OSError: [Errno 28] No space left"), True),
    (OSError(2, "No such file or directory"), False),
    (ValueError("No space left on device"), False),
])
def test_what_counts_as_a_full_disk(e, full):
    assert is_disk_full(e) is full


def _damage(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


@pytest.mark.parametrize("where, data", [("header", b"\xff" * 50), ("page", b"\xa5" * 4096)])
def test_a_damaged_catalog_is_one_line_and_verify_names_it(tmp_path, where, data):
    home = tmp_path / "home"
    p = cli("run", "example", "--param", "shape=24x16", "--where", "driver", "--home",
            str(home), "--json")
    assert p.returncode == 0, p.stderr
    rid = json.loads(p.stdout)["run"]
    cat = home / "catalog.sqlite"
    assert cli("verify", rid, "--home", str(home)).returncode == 0
    for f in home.glob("catalog.sqlite-*"):
        f.unlink()  # checkpointed and closed: the damage is in the file itself
    _damage(cat, 20 if where == "header" else 4096 * 2, data)
    v = cli("verify", rid, "--home", str(home))
    assert v.returncode == 3, (v.stdout, v.stderr)
    assert "catalog" in v.stdout and "damaged" in v.stdout
    for args in (("runs",), ("show", rid),
                 ("query", rid, "backward", "--from", "bright", "--cells", "1,1", "--to",
                  "image")):
        q = cli(*args, "--home", str(home))
        if q.returncode != 0:  # a page the command needs: one line, pointing at verify
            line = one_line(q, 2)
            assert "damaged" in line and "subzero verify" in line
