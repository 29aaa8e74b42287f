"""``subzero query``'s text forms and its picture: paths need ``op:index``, the picture says
what red means (one cell, many cells) and whether the inputs were generated or real."""

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from subzero.cli import main
from subzero.query.paths import parse_path
from subzero.cli.render import cells_phrase, draw_mask, inputs_origin, lineage_legend
from subzero.errors import QueryError

ROOT = Path(__file__).resolve().parents[2]


def test_parse_path_reads_operator_and_input_index():
    assert parse_path("clust:0, rmcr:1,sumexp:0") == [("clust", 0), ("rmcr", 1), ("sumexp", 0)]


@pytest.mark.parametrize("text, bad", [("clust,rmcr", "'clust'"), ("clust:0,rmcr", "'rmcr'"),
                                       ("clust:x", "'clust:x'"), ("rmcr:", "'rmcr:'"),
                                       ("clust:-1", "'clust:-1'"), (":0", "':0'")])
def test_parse_path_refuses_a_step_without_an_input_index(text, bad):
    with pytest.raises(QueryError, match=re.escape(bad) + ".*expected op:index"):
        parse_path(text)


def test_query_path_without_index_is_one_line_naming_the_step(tmp_path, capsys):
    # refused before the run is even looked up: no home, no Spark needed
    code = main(["query", "latest", "backward", "--from", "clust", "--cells", "1,1",
                 "--path", "clust,rmcr", "--home", str(tmp_path / "h")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "'clust'" in err[0] and "op:index" in err[0]


@pytest.mark.parametrize("n, text", [(0, "0 cells"), (1, "1 cell"), (2, "2 cells"),
                                     (1234567, "1,234,567 cells")])
def test_cells_phrase_is_singular_for_one(n, text):
    assert cells_phrase(n) == text


@pytest.mark.parametrize("data, text", [("generated", "generated inputs"),
                                        ("files", "real inputs (files)"),
                                        ("file", "real inputs (file)"),
                                        ("mixed", "real and generated inputs"), (None, "")])
def test_inputs_origin_from_the_runs_data_parameter(data, text):
    assert inputs_origin({} if data is None else {"data": data}) == text
    assert inputs_origin(None) == ""


def _result(count, start_count):
    step = SimpleNamespace(in_count=start_count)
    return SimpleNamespace(count=count, array="exp1", direction="backward", start="clust",
                           steps=[step])


def test_lineage_legend_says_what_red_is():
    assert lineage_legend(_result(1, 1)) == (
        "red: 1 cell of exp1, the backward lineage of 1 cell of clust")
    assert lineage_legend(_result(97, 12)) == (
        "red: 97 cells of exp1, the backward lineage of 12 cells of clust")


def _texts(fig):
    return [t.get_text() for t in fig.texts] + [a.get_title() for a in fig.axes]


def test_picture_has_title_and_legend():
    import matplotlib.pyplot as plt

    data = np.arange(200 * 100, dtype=float).reshape(200, 100)
    mask = np.zeros((200, 100), bool)
    mask[30, 20] = True
    fig = draw_mask(data, mask, "run r1 (astronomy, generated inputs): backward lineage in exp1",
                    "red: 1 cell of exp1, the backward lineage of 1 cell of clust")
    texts = _texts(fig)
    plt.close(fig)
    assert "run r1 (astronomy, generated inputs): backward lineage in exp1" in texts
    legend = next(t for t in texts if t.startswith("red: "))
    assert legend.startswith("red: 1 cell of exp1, the backward lineage of 1 cell of clust")
    assert "yellow box: the zoomed area" in legend  # one cell is a small patch: zoomed


def test_picture_without_legend_counts_its_cells():
    import matplotlib.pyplot as plt

    mask = np.zeros((8, 8), bool)
    mask[:, :4] = True
    fig = draw_mask(np.ones((8, 8)), mask)
    texts = _texts(fig)
    plt.close(fig)
    assert "red: 32 cells" in texts and "32 cells" in texts


@pytest.mark.slow
def test_editable_install_prints_no_setuptools_warning_block(tmp_path):
    """The Makefile's editable install, run as `make demo` runs it (the project without its
    dependencies, into a fresh venv), is silent when it succeeds."""
    recipe = (ROOT / "Makefile").read_text()
    line = next(ln.strip() for ln in recipe.splitlines() if "pip install" in ln and " -e " in ln)
    args = line.split("-m pip install", 1)[1].split()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    up = subprocess.run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
                        capture_output=True, text=True, timeout=300, check=False)
    if up.returncode:
        pytest.skip(f"no package index reachable: {up.stderr.strip()[-200:]}")
    p = subprocess.run([py, "-m", "pip", "install", *[a.strip("'") for a in args], "--no-deps"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                       env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert p.returncode == 0, p.stderr
    out = p.stdout + p.stderr
    assert "!!" not in out and "Editable install" not in out, out
