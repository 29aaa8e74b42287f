"""A run warns, once per operator, when an operator's lineage costs more than the operator.

The warning (:func:`subzero.engine.runner.lineage_warning`) reaches stderr through the
run's ``notify`` (``subzero: operator ...``), the result's ``warnings`` and the operator's
catalog note keep it; a strategy that stores nothing, and a cheap built-in workflow, say
nothing.
"""

from __future__ import annotations

import json
import re
import textwrap

import numpy as np
import pytest

from subzero.engine import layout
from subzero.engine.catalog import Catalog
from subzero.engine.runner import (WARN_MIN_LINEAGE_BYTES, WARN_MIN_RUNTIME_S,
                                   cheaper_lineage, lineage_warning)
from subzero.modes import COMP_ONE_BWD, FULL_ONE_BWD, MAP, PAY_ONE_BWD, Mode
from subzero.operator import Operator
from tests.conftest import run_cli

#: a UDF whose full lineage is far larger than its input: each output cell depends on
#: ``k`` input cells scattered over the whole input (no two cells share a set, so no
#: encoding shares records)
SCATTER = textwrap.dedent('''
    """Each output cell depends on k scattered input cells: lineage far larger than data."""

    from functools import partial

    import numpy as np

    from operators import UDF
    from subzero import Workflow
    from subzero.cells import Ragged
    from subzero.modes import Mode


    def make_sky(shape, seed):
        return np.random.default_rng(seed).normal(100.0, 5.0, shape)


    class Scatter(UDF):
        n_inputs = 1

        def __init__(self, k=32):
            self.k = k

        def params(self):
            return {"k": self.k}

        def supported_modes(self):
            return frozenset({Mode.FULL, Mode.BLACKBOX})

        def run(self, ctx, x):
            if ctx.full:
                box = ctx.chunk.out_box
                rng = np.random.default_rng(list(box.lo))
                n_in = int(np.prod(self.in_shapes[0]))
                ins = np.sort(rng.integers(0, n_in, size=(box.size, self.k)), axis=1)
                ctx.lwrite_pairs(box.coords(), Ragged.from_dense(ins.astype(np.uint64)))
            return 2.0 * x


    def build(shape="128x128", k=32):
        h, w = (int(v) for v in shape.split("x"))
        wf = Workflow("scatter", "lineage far larger than its input")
        wf.input("sky", (h, w), "float64", source=partial(make_sky, (h, w), 0))
        wf.add("scatter", Scatter(k=k), "sky")
        return wf
''')

LINE = re.compile(
    r"^subzero: operator 'scatter' \(Scatter\): capturing and storing its lineage took "
    r"[\d.]+ s of [\d.]+ s \(\d+%\) and ([\d.]+) MB, ([\d.]+)x its inputs' 131\.1 KB; "
    r"declare it as payloads \(COMP/PAY with map_p\) or a mapping function \(MAP with "
    r"map_b/map_f\) in its code \(see operators\.udf\), or cap the run's lineage with "
    r"--max-disk")


@pytest.fixture
def scatter(tmp_path):
    path = tmp_path / "scatter.py"
    path.write_text(SCATTER)
    return f"{path}:build"


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("subzero: operator ")]


def test_lineage_larger_than_its_input_is_said_once_with_its_figures(scatter, tmp_path):
    home = tmp_path / "home"
    p = run_cli("run", scatter, "--strategy", "full-one", "--where", "driver", "--home",
                str(home), "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    (line,) = _warnings(p.stderr)
    m = LINE.match(line)
    assert m, line
    doc = json.loads(p.stdout)
    (op,) = doc["operators"]
    stored_mb = doc["lineage_bytes"] / 1e6
    assert float(m[1]) == pytest.approx(stored_mb, abs=0.05)
    assert float(m[2]) == pytest.approx(doc["lineage_bytes"] / (128 * 128 * 8), abs=0.05)
    assert float(m[2]) > 1
    # the result and the catalog keep it: the line without the prefix, and the note
    assert doc["warnings"] == [line.removeprefix("subzero: ")]
    assert op["note"] == line.split("(Scatter): ", 1)[1]
    cat = Catalog(layout.catalog_path(home))
    try:
        assert cat.op_stats(doc["run"])["scatter"]["note"] == op["note"]
    finally:
        cat.close()


def test_a_strategy_that_stores_nothing_says_nothing(scatter, tmp_path):
    p = run_cli("run", scatter, "--strategy", "blackbox", "--where", "driver", "--home",
                str(tmp_path / "home"), "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert _warnings(p.stderr) == []
    assert "warnings" not in json.loads(p.stdout)


def test_a_cheap_builtin_workflow_says_nothing(tmp_path):
    p = run_cli("run", "example", "--param", "shape=40x30", "--where", "driver", "--home",
                str(tmp_path / "home"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert _warnings(p.stderr) == []


# -- the rule, on its own ----------------------------------------------------------------


class _Op(Operator):
    def __init__(self, *modes: Mode) -> None:
        self.modes = frozenset({*modes, Mode.BLACKBOX})

    def supported_modes(self):
        return self.modes

    def run(self, ctx, x):
        return x


def _bound(*modes: Mode) -> Operator:
    return _Op(*modes).bind("clean", [(100, 100)], [np.float64])


def test_time_over_half_warns_above_the_floor_only():
    op = _bound(Mode.FULL)
    assert lineage_warning(op, [FULL_ONE_BWD], 4.0, 3.1, 1000, 80_000).startswith(
        "capturing and storing its lineage took 3.1 s of 4.0 s (78%) and 1.0 KB, 0.013x "
        "its inputs' 80.0 KB; ")
    assert lineage_warning(op, [FULL_ONE_BWD], 4.0, 1.9, 1000, 80_000) is None
    short = WARN_MIN_RUNTIME_S / 2
    assert lineage_warning(op, [FULL_ONE_BWD], short, 0.9 * short, 1000, 80_000) is None


def test_size_over_the_inputs_warns_above_the_floor_only():
    op = _bound(Mode.FULL)
    big = WARN_MIN_LINEAGE_BYTES * 2
    assert f"2.0 MB, {big / 80_000:.1f}x its inputs' 80.0 KB;" in lineage_warning(
        op, [FULL_ONE_BWD], 0.05, 0.01, big, 80_000)
    assert lineage_warning(op, [FULL_ONE_BWD], 0.05, 0.01, big, 3 * big) is None
    small = WARN_MIN_LINEAGE_BYTES // 2
    assert lineage_warning(op, [FULL_ONE_BWD], 0.05, 0.01, small, 1000) is None


def test_an_operator_that_stored_nothing_gets_no_warning():
    op = _bound(Mode.FULL, Mode.MAP)
    assert lineage_warning(op, [MAP], 4.0, 3.9, 0, 80_000) is None
    assert lineage_warning(op, [FULL_ONE_BWD], 4.0, 3.9, 0, 80_000) is None  # over budget


@pytest.mark.parametrize("modes, strategy, words", [
    ((Mode.MAP, Mode.FULL), FULL_ONE_BWD, ("mapping functions store nothing", '["map"]')),
    ((Mode.COMP, Mode.FULL), FULL_ONE_BWD, ("composite lineage", '["comp-one-bwd"]',
                                            "--max-disk")),
    ((Mode.PAY, Mode.FULL), FULL_ONE_BWD, ("payloads instead of full pairs",
                                           '["pay-one-bwd"]', "--max-disk")),
    ((Mode.COMP, Mode.PAY), PAY_ONE_BWD, ("composite lineage", "--strategy subzero")),
    ((Mode.COMP,), COMP_ONE_BWD, ("cheapest lineage it declares", "blackbox",
                                  "--max-disk")),
    ((Mode.FULL,), FULL_ONE_BWD, ("COMP/PAY with map_p", "MAP with map_b/map_f",
                                  "operators.udf", "--max-disk")),
])
def test_the_advice_fits_what_the_operator_supports(modes, strategy, words):
    text = cheaper_lineage(_bound(*modes), [strategy])
    for w in words:
        assert w in text, (w, text)
