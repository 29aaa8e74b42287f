"""The CLI: commands, --json shapes, one-line errors with exit code 2."""

import json

import numpy as np
import pytest

from subzero.cli import main
from subzero.cli.common import CliError, output_file
from tests.conftest import run_cli


@pytest.mark.parametrize("args, msg", [
    (["run", "nope"], "unknown workflow 'nope'"),
    (["run", "example", "--strategy", "fast"], "unknown strategy 'fast'"),
    (["run", "example", "--param", "shape=3"], "shape must be 2 ints >= 1"),
    (["run", "example", "--param", "colour=red"], "no parameter 'colour'"),
    (["run", "example", "--input", "image"], "--input 'image': expected NAME=VALUE"),
    (["run", "example", "--input", "sky=/x.npy"], "workflow 'example' has no input 'sky'"),
    (["run", "example", "--input", "image=/no/such.npy"], "does not exist"),
    (["run", "example", "--chunks", "a,b"], "bad chunking 'a,b'"),
    (["run", "example", "--plan", "/no/plan.json"], "no such file"),
    (["runs", "--bogus"], "unrecognized arguments: --bogus"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_input_gives_one_line_and_exit_2(tmp_path, args, msg):
    p = run_cli(*args, "--home", str(tmp_path / "h"))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_input_with_wrong_shape_is_refused(tmp_path):
    f = tmp_path / "img.npy"
    np.save(f, np.zeros((5, 5), np.uint16))
    p = run_cli("run", "example", "--param", "shape=8x8", "--input", f"image={f}",
                "--home", str(tmp_path / "h"))
    assert p.returncode == 2
    assert "has shape (5, 5); workflow 'example' expects (8, 8)" in p.stderr


def test_help_lists_commands():
    p = run_cli("--help")
    assert p.returncode == 0
    for c in ("workflows", "run", "runs", "export"):
        assert c in p.stdout


def test_workflows_json(capsys):
    assert main(["workflows", "--json"]) == 0
    names = [w["name"] for w in json.loads(capsys.readouterr().out)]
    assert "example" in names


@pytest.mark.spark
def test_run_json_runs_and_export(spark, home, capsys, tmp_path):
    assert main(["run", "example", "--param", "shape=40x30", "--home", str(home), "--json",
                 "--strategy", "blackbox-opt", "--chunks", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"run", "workflow", "strategy", "runtime_s", "input_bytes",
                        "lineage_bytes", "operators", "summary", "stages", "concurrency",
                        "driver_peak_rss", "inputs", "placement"}
    assert doc["placement"]["where"] in ("driver", "spark") and doc["placement"]["why"]
    assert doc["inputs"]["image"]["kind"] == "workflow"  # generated, no file
    assert doc["stages"] >= 1 and doc["driver_peak_rss"] > 0
    assert doc["workflow"] == "example" and doc["strategy"] == "blackbox-opt"
    assert set(doc["operators"][0]) == {"name", "runtime_s", "lineage_s", "lineage_bytes",
                                        "strategies"}
    assert main(["runs", "--home", str(home), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert runs[-1]["run"] == doc["run"] and runs[-1]["status"] == "complete"
    out = tmp_path / "smooth.npy"
    assert main(["export", doc["run"], "smooth", str(out), "--home", str(home)]) == 0
    assert np.load(out).shape == (40, 30)
    fits = tmp_path / "bright.fits"
    assert main(["export", "latest", "bright", str(fits), "--home", str(home)]) == 0
    from astropy.io import fits as pf

    assert pf.getdata(fits).shape == (40, 30)
    capsys.readouterr()
    assert main(["export", "latest", "nope", str(out), "--home", str(home)]) == 2
    assert "has no array 'nope'" in capsys.readouterr().err


def test_an_output_is_replaced_only_when_written_whole(tmp_path):
    """CLI outputs (query --out/--png, export, optimize --out) are written beside the target
    and renamed over it: a write that fails half-way leaves the old file and no stray."""
    target = tmp_path / "mask.npy"
    target.write_bytes(b"the old mask")
    with pytest.raises(RuntimeError):
        with output_file(target, "--out") as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("killed while writing")
    assert target.read_bytes() == b"the old mask" and sorted(tmp_path.iterdir()) == [target]
    with output_file(target, "--out") as tmp:
        assert tmp.suffix == ".npy" and tmp.parent == tmp_path
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new" and sorted(tmp_path.iterdir()) == [target]
    (tmp_path / "dir.npy").mkdir()
    with pytest.raises(CliError, match=r"--out .*dir\.npy: could not write it"):
        with output_file(tmp_path / "dir.npy", "--out") as tmp:
            tmp.write_bytes(b"x")


def test_python_dash_m_subzero_is_the_command_line():
    """``python -m subzero`` runs the same command line as the ``subzero`` script."""
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-m", "subzero", "workflows", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert "astronomy" in [w["name"] for w in json.loads(got.stdout)]
    bad = subprocess.run([sys.executable, "-m", "subzero", "nosuchcommand"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nosuchcommand" in bad.stderr


def test_a_bad_tuning_variable_is_one_line_and_exit_2(tmp_path):
    """A ``SUBZERO_*`` setting that cannot be read is bad input, named in one line."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, SUBZERO_RAW_BELOW="abc")
    p = subprocess.run([sys.executable, "-m", "subzero.cli", "runs", "--home",
                        str(tmp_path / "home")], env=env, capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == ("subzero: error: SUBZERO_RAW_BELOW='abc' is not a valid "
                                "value; expected a non-negative number")
