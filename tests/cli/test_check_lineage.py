"""The lineage checker (``subzero.check_lineage``, ``subzero check-lineage``): every built-in
operator and shipped UDF is sound by it, a UDF declaring too little is caught with a small
example, forward/backward disagreement is counted, tightness matches brute force, and bad
input is one line with exit 2."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import operators
import subzero
import workflows
from operators import Convolve, UDF
from subzero.cells import Ragged
from subzero.cli.main import main
from subzero.lineage import PairBatch
from subzero.modes import Mode
from subzero.operator import Operator, stencil
from subzero.testing import bind, run_chunked
from tests.conftest import run_cli
from workflows import lies
from workflows.checkable import CHECKED, SHIPPED_UDFS, default_inputs

# the slowest (a few seconds each: L.A.Cosmic re-run for every changed cell, the genomics
# pipeline to make inputs)
SLOW = {"CosmicRayDetect", "StarDetect", "Extract", "Model", "Predict", "Validate"}


class TooSmallBlur(UDF):
    """A 3x3 box blur that declares each output depends on its own input cell only: the
    kind of mistake the checker is for."""

    n_inputs = 1
    parallelism = stencil(1)

    def supported_modes(self):
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx, x):
        pad = np.pad(x, 1, mode="edge")
        h, w = x.shape
        out = sum(pad[dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3)) / 9.0
        return out[ctx.chunk.interior(0)]

    def map_b(self, frontier_out, i):
        return frontier_out.copy()

    def map_f(self, frontier_in, i):
        return frontier_in.copy()


class OneWayShift(UDF):
    """Output cell j is input cell j - 1 (cell 0 is 0); backward says so, forward wrongly
    says the identity: sound, but the two directions disagree."""

    n_inputs = 1
    parallelism = stencil(1)

    def supported_modes(self):
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx, x):
        lo = ctx.chunk.out_box.lo[0]
        ilo = ctx.chunk.in_boxes[0].lo[0]
        out = np.zeros(ctx.chunk.out_box.shape)
        for k in range(len(out)):
            j = lo + k
            out[k] = x[j - 1 - ilo] if j > 0 else 0.0
        return out

    def map_b(self, frontier_out, i):
        res = np.zeros_like(frontier_out)
        res[:-1] = frontier_out[1:]
        return res

    def map_f(self, frontier_in, i):
        return frontier_in.copy()


class RefusesNegative(UDF):
    """Elementwise square root that refuses negative inputs (as a user's kernel may)."""

    n_inputs = 1

    def supported_modes(self):
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx, x):
        if (x < 0).any():
            raise ValueError("negative input")
        return np.sqrt(x)

    def map_b(self, f, i):
        return f.copy()

    def map_f(self, f, i):
        return f.copy()


class AlwaysFails(RefusesNegative):
    def run(self, ctx, x):
        raise RuntimeError("kernel not implemented")


class NoBackward(RefusesNegative):
    """A UDF whose backward mapping is not written yet."""

    def map_b(self, f, i):
        raise NotImplementedError("backward mapping to do")


class WrongShape(RefusesNegative):
    """A UDF whose backward mapping answers for a flattened array."""

    def map_b(self, f, i):
        return f.reshape(-1)


class FailsRecording(RefusesNegative):
    """A UDF that runs, but raises when asked to record its full lineage."""

    def supported_modes(self):
        return frozenset({Mode.MAP, Mode.FULL, Mode.BLACKBOX})

    def run(self, ctx, x):
        if ctx.full:
            raise KeyError("lineage writer to do")
        return np.sqrt(x)


@pytest.mark.parametrize("cls, named", [
    ("NoBackward", ("NoBackward': map_b failed: NotImplementedError: backward "
                    "mapping to do")),
    ("WrongShape", "WrongShape': map_b returned shape (16,) for input 0; expected (4, 4)"),
    ("FailsRecording", ("FailsRecording' fails recording its FULL lineage: "
                        "KeyError: 'lineage writer to do'")),
])
def test_a_broken_lineage_function_is_bad_input_naming_it(cls, named, capsys, tmp_path):
    """A user's lineage function that raises or answers the wrong shape is exit 2 naming
    the operator and the function, not an internal error (nor exit 1, which is unsound)."""
    np.save(tmp_path / "x.npy", np.ones((4, 4)))
    code = main(["check-lineage", f"tests.cli.test_check_lineage:{cls}", "--input",
                 str(tmp_path / "x.npy")])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and named in err, err


def test_a_large_unsound_change_shrinks_to_the_cells_that_matter():
    """Every cell but one's own is changed (a 40x40 blur declaring itself only): the
    bisection still ends at one or two neighbours, which really move the output."""
    x = np.random.default_rng(7).normal(size=(40, 40))
    rep = subzero.check_lineage(TooSmallBlur, inputs=[x], samples=3, seed=2)
    op = bind(TooSmallBlur(), x)
    base = run_chunked(op, [x])[0]
    for c in rep.mode("MAP").unsound:
        ex = c.example
        assert 1 <= ex["n_cells"] <= 2 and len(ex["cells"]) == ex["n_cells"]
        y = x.copy()
        for cell in ex["cells"]:
            assert np.abs(np.array(cell["cell"]) - np.array(c.cell)).max() == 1
            y[tuple(cell["cell"])] = cell["new"]
        assert run_chunked(op, [y])[0][c.cell] != base[c.cell]
    assert len(rep.mode("MAP").unsound) == 3


def test_pair_restriction_matches_brute_force():
    """``PairBatch.restrict`` (the checker's in-memory stand-in for a shard's
    ``payload_pairs``) keeps the pairs meeting the cells, each cut to those cells, with
    its payload."""
    rng = np.random.default_rng(3)
    rows = [rng.choice(50, rng.integers(0, 5), replace=False) for _ in range(30)]
    pays = [rng.integers(0, 256, rng.integers(1, 4)) for _ in range(30)]
    b = PairBatch(Ragged.from_rows(rows), payload=Ragged.from_rows(pays, np.uint8))
    want = np.sort(rng.choice(50, 12, replace=False)).astype(np.uint64)
    got = b.restrict(want)
    expected = [(sorted(set(r.tolist()) & set(want.tolist())), p.tolist())
                for r, p in zip(rows, pays) if set(r.tolist()) & set(want.tolist())]
    assert [(sorted(o.tolist()), p.tolist())
            for o, p in zip(got.out.rows(), got.payload.rows())] == expected
    assert len(b.restrict(np.empty(0, np.uint64))) == 0


def test_runs_the_operator_refuses_are_skipped_counted_and_never_called_sound():
    """Half the perturbed runs raise (negative values): what ran found nothing, but the
    mode is "not checked", never "sound"."""
    x = np.abs(np.random.default_rng(2).normal(size=(6, 6)))
    rep = subzero.check_lineage(RefusesNegative(), inputs=[x], samples=6)
    m = rep.mode("MAP")
    assert m.failed_runs > 0 and "negative input" in m.failure and not m.unsound
    assert not m.checked and not rep.sound and m.verdict == "NOT CHECKED"
    assert all(c.influential == 1 for c in m.cells)  # the other values still move it
    assert any("not checked" in line and "more than a tenth" in line for line in rep.lines())
    assert rep.to_json()["modes"][0]["verdict"] == "NOT CHECKED"


class LyingCleaner(UDF):
    """Replaces the pixels its mask flags by the median of their 3 x 3 box, yet declares
    itself elementwise: a lie only a flagged pixel (a rare value of the mask) shows."""

    n_inputs = 2
    parallelism = stencil(1)

    def supported_modes(self):
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def output_dtype(self, dtypes):
        return np.dtype("float64")

    def run(self, ctx, x, mask):
        from scipy import ndimage

        med = ndimage.median_filter(x, size=3, mode="nearest")
        out = np.where(mask, med, x)
        return out[ctx.chunk.interior(0)]

    def map_b(self, f, i):
        return f.copy()

    def map_f(self, f, i):
        return f.copy()


def test_a_lie_triggered_by_a_rare_input_value_is_found_with_the_defaults():
    rng = np.random.default_rng(11)
    image = rng.normal(100.0, 5.0, size=(60, 40))
    mask = np.zeros(image.shape, dtype=bool)
    mask.reshape(-1)[rng.choice(mask.size, 19, replace=False)] = True  # 0.8%
    rep = subzero.check_lineage(LyingCleaner(), inputs=[image, mask])
    m = rep.mode("MAP")
    assert not rep.sound and m.unsound
    assert all(mask[c.cell] for c in m.unsound)  # the flagged pixels are the lies
    assert any(c.why == "rare input" for c in m.unsound)


def test_an_operator_failing_on_its_own_inputs_is_named(capsys, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4, 4)))
    code = main(["check-lineage", "tests.cli.test_check_lineage:AlwaysFails", "--input",
                 str(tmp_path / "x.npy")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "fails on its inputs: RuntimeError: kernel not implemented" in err


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in CHECKED])
def test_every_builtin_and_shipped_udf_is_sound(name):
    rep = subzero.check_lineage(name, samples=12, seed=1)
    assert rep.modes, name
    for m in rep.modes:
        assert m.sound, (name, m.mode, [c.example for c in m.unsound])
        assert m.disagreements == 0, (name, m.mode, m.disagreement_example)
        assert m.pairs_compared > 0
        # influential cells are a subset of the declared ones, and each cell was tried
        assert all(c.influential is not None and c.influential <= c.declared for c in m.cells)
    kinds = {c.why for m in rep.modes for c in m.cells}
    assert {"corner", "random"} <= kinds


def test_the_shipped_udfs_are_checked_on_their_own_kind_of_data():
    assert set(SHIPPED_UDFS) == {"CosmicRayDetect", "CosmicRayRemove", "StarDetect", "Extract",
                                 "Model", "Predict", "Validate"}
    rmbg, = default_inputs("CosmicRayDetect")
    op = bind(subzero.api.resolve("CosmicRayDetect"), rmbg)
    flagged, _, _ = run_chunked(op, [rmbg])
    assert flagged.any() and (rmbg > op.gate).sum() > flagged.sum()  # rejected candidates too


def test_a_too_small_lineage_is_unsound_with_a_minimal_example():
    x = np.random.default_rng(0).normal(size=(12, 10))
    rep = subzero.check_lineage(TooSmallBlur, inputs=[x], samples=10)
    assert not rep.sound
    m = rep.mode("MAP")
    assert len(m.unsound) == len(m.cells)  # every blurred cell depends on its neighbours
    for c in m.unsound:
        ex = c.example
        assert 1 <= ex["n_cells"] <= 2 and ex["before"] != ex["after"]
        for cell in ex["cells"]:
            d = np.abs(np.array(cell["cell"]) - np.array(c.cell))
            assert d.max() == 1  # a neighbour: outside the declared cell, inside the blur
        # the example really changes the output: apply it and re-run
        y = x.copy()
        for cell in ex["cells"]:
            y[tuple(cell["cell"])] = cell["new"]
        op = bind(TooSmallBlur(), x)
        assert run_chunked(op, [y])[0][c.cell] != run_chunked(op, [x])[0][c.cell]


def test_cli_exits_1_when_unsound_and_names_the_cells(capsys, tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(1).normal(size=(8, 8)))
    code = main(["check-lineage", "tests.cli.test_check_lineage:TooSmallBlur", "--input",
                 str(tmp_path / "x.npy"), "--samples", "6"])
    out = capsys.readouterr().out
    assert code == 1
    assert "MAP" in out and "NO" in out and "unsound [" in out and "outside its lineage" in out
    code = main(["check-lineage", "tests.cli.test_check_lineage:TooSmallBlur", "--input",
                 str(tmp_path / "x.npy"), "--samples", "6", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["sound"] is False
    assert doc["modes"][0]["unsound"][0]["example"]["cells"]


USER_MODULE = """
import numpy as np
from operators import UDF
from subzero.modes import Mode


class Doubler(UDF):
    n_inputs = 1

    def supported_modes(self):
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx, x):
        return 2 * x

    def map_b(self, f, i):
        return f.copy()

    def map_f(self, f, i):
        return f.copy()
"""


def test_a_users_module_is_found_in_the_current_directory(capsys, tmp_path, monkeypatch):
    (tmp_path / "my_udfs_for_check.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "my_udfs_for_check", raising=False)
    code = main(["check-lineage", "my_udfs_for_check:Doubler", "--shape", "6x5", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["sound"] and doc["inputs"] == [[6, 5]]


def test_cli_exits_0_when_sound(capsys):
    code = main(["check-lineage", "MedianFilter", "--param", "radius=1", "--samples", "8",
                 "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["sound"] and [m["mode"] for m in doc["modes"]] == ["MAP", "FULL"]
    assert all(m["samples"] == 8 and m["influential"] <= m["declared"] for m in doc["modes"])


def test_forward_backward_disagreement_is_counted():
    x = np.arange(1.0, 13.0)
    rep = subzero.check_lineage(OneWayShift(), inputs=[x], samples=8)
    m = rep.mode("MAP")
    assert m.sound and m.disagreements > 0
    ex = m.disagreement_example
    # backward: output j <- input j - 1; forward: input j -> output j
    assert ex["backward"] != ex["forward"]
    want = ex["output"][0] - 1 if ex["backward"] else ex["output"][0]
    assert ex["input_cell"][0] == want


def test_tightness_matches_brute_force_on_a_laplacian():
    """The Laplacian's corners are 0: declared the 3x3 box, influential only the cross.
    Brute force here: change each input cell alone and see which outputs move."""
    x = np.random.default_rng(4).normal(size=(9, 8))
    k = [[0, -1, 0], [-1, 4, -1], [0, -1, 0]]
    rep = subzero.check_lineage(Convolve(k), inputs=[x], samples=10, modes=["MAP"])
    op = bind(Convolve(k), x)
    base = run_chunked(op, [x])[0]
    for c in rep.mode("MAP").cells:
        moved = 0
        for j in range(x.size):
            y = x.copy()
            y.reshape(-1)[j] += 5.0
            moved += run_chunked(op, [y])[0][c.cell] != base[c.cell]
        assert c.influential == moved, c
        assert c.declared == int(op.map_b(_one(x.shape, c.cell), 0).sum())
    assert rep.mode("MAP").tightness > 1.0


def _one(shape, cell):
    m = np.zeros(shape, bool)
    m[cell] = True
    return m


def test_given_cells_are_checked_instead_of_samples(capsys, tmp_path):
    x = np.random.default_rng(5).normal(size=(10, 10))
    rep = subzero.check_lineage("MedianFilter", inputs=[x], cells=[(3, 3), (0, 9)])
    for m in rep.modes:
        assert [(c.cell, c.why) for c in m.cells] == [((0, 9), "given"), ((3, 3), "given")]
        assert [c.declared for c in m.cells] == [9, 25]  # a clipped and a whole 5x5 window
    np.save(tmp_path / "x.npy", x)
    code = main(["check-lineage", "MedianFilter", "--input", str(tmp_path / "x.npy"),
                 "--cells", "3,3", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and [m["samples"] for m in doc["modes"]] == [1, 1]


def test_text_cells_are_tried_with_the_values_the_operator_looks_for():
    """Extract finds its columns by name: a name changed to one of the wanted names moves
    the output, which random text never does; trying the array's own values finds it."""
    rep = subzero.check_lineage("Extract", samples=8, modes=["PAY"])
    m = rep.mode("PAY")
    names_cells = max(m.cells, key=lambda c: c.declared)
    assert names_cells.influential > names_cells.declared // 2


def test_a_check_is_reproducible_from_its_seed():
    a = subzero.check_lineage("Where", samples=10, seed=3).to_json()
    b = subzero.check_lineage("Where", samples=10, seed=3).to_json()
    assert a == b


@pytest.mark.parametrize("argv, named", [
    (["Nope"], "'Nope'"),
    (["subzero.cells:Box"], "'subzero.cells:Box' is not an operator"),
    (["no.such.module:Thing"], "'no.such.module'"),
    (["operators:NoSuch"], "'NoSuch'"),
    (["operators:UDF"], "'operators:UDF' is an abstract"),
    (["Binary", "--param", "ufunc=frob"], "'frob'"),
    (["Binary", "--param", "colour=red"], "colour"),
    (["MedianFilter", "--samples", "0"], "--samples 0"),
    (["MedianFilter", "--mode", "PAY"], "PAY"),
    (["MedianFilter", "--input", "x.txt"], "'x.txt'"),
    (["MedianFilter", "--input", "missing.npy"], "missing.npy: no such file"),
    (["MedianFilter", "--input", "e.npy"], "holds no cells"),
    (["MedianFilter", "--input", "s.npy"], "s.npy holds a 0-d array"),
    (["MedianFilter", "--input", "a.npy", "--cells", "1;1,2"], "'1,2' has 2 coordinates"),
    (["MedianFilter", "--seed", "-1"], "--seed -1"),
    (["MedianFilter", "--shape", "100000x100000"], "10,000,000,000 cells"),
    (["MedianFilter", "--rtol", "nan"], "--rtol nan"),
    (["MedianFilter", "--param", "radius=1e400"], "float infinity"),
    (["MedianFilter", "--rtol", "-1"], "--rtol -1"),
    (["Binary", "--input", "a.npy"], "takes 2 input"),
    (["MedianFilter", "--shape", "3xq"], "3xq"),
    (["MedianFilter", "--input", "a.npy", "--cells", "9,9"], "(9, 9)"),
    (["MedianFilter", "--input", "a.npy", "--cells", "x"], "'x'"),
    (["MedianFilter", "--cells", "1,1"], "--cells needs --input"),
    (["MedianFilter", "--whole"], "--whole applies to an operator of a run"),
])
def test_bad_input_is_one_line_and_exit_2(argv, named, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "a.npy", np.zeros((4, 4)))
    np.save(tmp_path / "e.npy", np.zeros((0, 4)))
    np.save(tmp_path / "s.npy", np.float64(3.0))
    code = main(["check-lineage", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("subzero: error:"), err
    assert named in err, err


def _concrete_operators():
    """Every concrete Operator class defined in the ``operators`` package and in the
    ``workflows/*_udfs.py`` modules, by name."""
    mods = [importlib.import_module(f"operators.{m.name}")
            for m in pkgutil.iter_modules(operators.__path__)]
    mods += [importlib.import_module(f"workflows.{p.stem}")
             for p in Path(workflows.__file__).parent.glob("*_udfs.py")]
    return {cls.__name__ for mod in mods for cls in vars(mod).values()
            if isinstance(cls, type) and issubclass(cls, Operator)
            and cls.__module__ == mod.__name__ and not inspect.isabstract(cls)
            and not cls.__name__.startswith("_")}


def test_every_builtin_and_shipped_udf_is_checked():
    """A new built-in or shipped UDF cannot go unchecked: it must be in CHECKED (with
    inputs of its own kind) to be in the soundness test above."""
    found = _concrete_operators()
    assert {"MedianFilter", "CosmicRayDetect", "Validate"} <= found  # the scan works
    assert sorted(found - set(CHECKED)) == []


class SlowIdentity(RefusesNegative):
    """Elementwise and honest, but slow: every run takes a while."""

    def run(self, ctx, x):
        import time

        time.sleep(0.02)
        return np.sqrt(np.abs(x))


def test_a_time_budget_bounds_every_phase_and_says_what_it_cut(monkeypatch):
    from subzero import lineagecheck

    monkeypatch.setattr(lineagecheck, "PROGRESS_EVERY_S", 0.0)  # every line, for the test
    x = np.abs(np.random.default_rng(4).normal(size=(12, 12)))
    lines: list[str] = []
    rep = subzero.check_lineage(SlowIdentity(), inputs=[x], samples=24, budget_s=0.5,
                                progress=lines.append)
    m = rep.mode("MAP")
    assert m.cut and m.cut[0].startswith("soundness: ") and len(m.cells) < 24
    assert any("cut by the time budget: soundness" in line for line in rep.lines())
    assert lines and all("cells checked for soundness" in ln or "sizing the declared" in ln
                         for ln in lines)
    whole = subzero.check_lineage(SlowIdentity(), inputs=[x], samples=4)
    assert not whole.mode("MAP").cut and whole.sound


def test_the_budget_is_a_time(capsys):
    for bad in ("soon", "-5s", "0", "nanm"):
        capsys.readouterr()
        assert main(["check-lineage", "MedianFilter", "--budget", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--budget" in err[0], err


def test_a_budget_spent_before_tightness_leaves_it_unmeasured_and_says_so():
    import time

    from subzero import lineagecheck as lc

    x = np.abs(np.random.default_rng(5).normal(size=(6, 6)))
    op = bind(SlowIdentity(), x)
    runner = lc._Runner(op, [x], 2, 0.0)
    res = lc.ModeCheck(Mode.MAP, cells=[lc.CellCheck((1, 1), "random", 1)])
    keep = [[op.map_b(lc.mask_from_linear(np.array([7]), (6, 6)), 0)]]
    clock = lc._Clock(1e-6, None)
    time.sleep(0.01)
    lc._influence(runner, res, [7], keep, np.random.default_rng(0), 100, clock)
    assert res.cut == ["tightness: 0 of 1 input cells tried, not measured"]
    assert res.cells[0].influential is None and res.tightness is None


# ---------------------------------------------------------------------------------------
# deliberately wrong UDFs (workflows.lies), unusual lineage sizes, a run's operator on crops
# ---------------------------------------------------------------------------------------

VERDICT = re.compile(r"^UNSOUND: (MAP|FULL|PAY|COMP) \d+ of \d+ cells: \[\d+, \d+\] \([a-z ]+\)")


@pytest.mark.parametrize("name", sorted(lies.LIES))
def test_every_lie_is_found_with_the_defaults(name, capsys):
    """Default samples, seed and budget, the lie's own kind of data (``example_inputs``):
    exit 1, and the last line names the unsound cells."""
    code = main(["check-lineage", f"workflows.lies:{name}"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1, "\n".join(out)
    assert VERDICT.match(out[-1]), out[-1]


@pytest.mark.parametrize("name", sorted(lies.CONTROLS))
def test_the_honest_controls_are_sound_with_the_defaults(name, capsys):
    code = main(["check-lineage", f"workflows.lies:{name}"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0, "\n".join(out)
    assert re.match(r"sound: (24|48) sampled cells of (MAP, FULL|COMP)$", out[-1]), out[-1]


def test_a_cleaner_is_caught_at_its_masks_rare_value_though_the_image_has_extremes():
    """The image's hot and saturated pixels are rare too; each input gets its share of
    the rare-input samples, so the mask's few flags are not crowded out."""
    cls = lies.MaskedMedianCleaner
    image, mask = cls.example_inputs()
    rep = subzero.check_lineage(cls(), inputs=[image, mask])
    unsound = rep.mode("MAP").unsound
    assert unsound and all(mask[c.cell] for c in unsound)
    assert any(c.why == "rare input" for c in unsound)


class OneNarrowCell(TooSmallBlur):
    """The same 3x3 box mean declaring the clipped 3x3 box, except at one cell, which
    declares only itself: one cell declared much smaller than all others."""

    cell = (13, 7)

    def map_b(self, f, i):
        from subzero.cells import dilate

        one = np.zeros(f.shape, bool)
        one[self.cell] = True
        return dilate(f & ~one, 1) | (f & one)

    def map_f(self, f, i):
        from subzero.cells import dilate

        out = dilate(f, 1)
        out[self.cell] = f[self.cell]
        return out


@pytest.mark.parametrize("cls, inputs", [
    (lies.AnchorBinning, lambda: lies.AnchorBinning.example_inputs()),
    (OneNarrowCell, lambda: [np.random.default_rng(3).normal(size=(30, 26))]),
])
def test_unusual_lineage_sizes_find_a_lie_the_other_samplers_miss(cls, inputs, monkeypatch):
    """A few cells declare a much larger (AnchorBinning) or much smaller (OneNarrowCell)
    lineage than the rest, still too small: the unusual-size sampler finds them, and
    without it the same check (every other sampler) calls the operator sound."""
    from subzero import lineagecheck as lc

    arrays = inputs()
    rep = subzero.check_lineage(cls(), inputs=arrays)
    m = rep.mode("MAP")
    assert m.unsound and {c.why for c in m.unsound} == {"unusual lineage size"}
    sizes = {c.cell: c.declared for c in m.cells}
    common = max(set(sizes.values()), key=list(sizes.values()).count)
    assert all(sizes[c.cell] != common for c in m.unsound)
    monkeypatch.setattr(lc, "_unusual_sizes", lambda *a, **k: np.empty(0, np.int64))
    blind = subzero.check_lineage(cls(), inputs=arrays)
    assert blind.sound and "unusual lineage size" not in {c.why for c in blind.modes[0].cells}


def test_unusual_sizes_are_the_rarest_sizes_first():
    """A 3x3 stencil on 8x6: 4 corners (4 cells declared), 20 edge cells (6), 24 inner
    (9): the corners come first, then the edge cells; inner cells are not unusual."""
    from subzero import lineagecheck as lc

    op = bind(Convolve(np.ones((3, 3))), np.zeros((8, 6)))
    lineage = lc._Lineage(op, Mode.MAP, None, None)
    got = lc._unusual_sizes(lineage, np.random.default_rng(0), lc._Clock(None, None))
    coords = [tuple(int(v) for v in np.unravel_index(x, (8, 6))) for x in got]
    assert len(coords) == 4 + 20
    assert set(coords[:4]) == {(0, 0), (0, 5), (7, 0), (7, 5)}
    assert all(r in (0, 7) or c in (0, 5) for r, c in coords[4:])


@pytest.fixture(scope="module")
def lies_run(tmp_path_factory):
    """A run of the ``workflows.lies`` workflow (every lie and control), in a home of
    its own; its path."""
    home = tmp_path_factory.mktemp("lies-home")
    p = run_cli("run", "workflows.lies", "--where", "driver", "--home", str(home), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    return home


def _check_run(capsys, home, op, *more):
    code = main(["check-lineage", f"latest:lies:{op}", "--home", str(home), "--json", *more])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("op", ["cleaner", "narrow", "payload", "anchors", "honest_cleaner",
                                "honest_box"])
def test_a_runs_operator_on_crops_has_the_verdict_it_has_on_whole_arrays(op, lies_run,
                                                                         capsys):
    code, doc = _check_run(capsys, lies_run, op)
    whole_code, whole = _check_run(capsys, lies_run, op, "--whole")
    assert code == whole_code == (0 if op.startswith("honest") else 1), (doc, whole)
    assert doc["verdict"].split(":")[0] == whole["verdict"].split(":")[0]
    assert re.match(r"checked on crops of \d+x\d+( to \d+x\d+)? cells around \d+ sampled "
                    r"cells of the run's 48x40 arrays", doc["notes"][0]), doc["notes"]
    assert not whole["notes"]  # --whole: the run's arrays as they are
    assert all(m["samples"] == 24 for m in doc["modes"])


def test_a_runs_operator_that_depends_on_where_a_cell_is_is_checked_whole(lies_run, capsys):
    """AnchorBinning's anchors are every 16th pixel of the array: on a crop they are not
    anchors, so those cells are checked on the whole (small) arrays, and still found."""
    code, doc = _check_run(capsys, lies_run, "anchors")
    assert code == 1
    assert any("checked on the run's whole arrays (48x40)" in n and "depends on where a "
               "cell is" in n for n in doc["notes"]), doc["notes"]
    assert {c["why"] for c in doc["modes"][0]["unsound"]} == {"unusual lineage size"}


def test_a_runs_global_operator_says_what_it_did(lies_run, capsys, monkeypatch):
    """A global operator cannot be cropped: checked on the run's whole arrays when they
    are small (and the lie found), else one line saying it was not checked (exit 1)."""
    from subzero import lineagecheck as lc

    code, doc = _check_run(capsys, lies_run, "wrap")
    assert code == 1 and doc["notes"] == [
        "operator 'wrap' is global (one task sees its whole inputs): checked on the run's "
        "whole arrays (48x40)"]
    assert doc["verdict"].startswith("UNSOUND: MAP")
    monkeypatch.setattr(lc, "WHOLE_MAX_CELLS", 1000)
    code = main(["check-lineage", "latest:lies:wrap", "--home", str(lies_run)])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1
    assert out[-1] == ("NOT CHECKED: operator 'wrap' is global (one task sees its whole "
                       "inputs): its largest array has 1,920 cells, more than the 1,000 "
                       "checked whole (check it with --input on crops of your own)")


def test_crops_read_only_what_they_need():
    """A run's 400x300 arrays in 50x50 chunks, scanned for rare values in at most 5000
    cells: no read is larger than a chunk, and the check says what it read."""
    from subzero.cells import Box
    from subzero.lineagecheck import check_on_crops

    x = np.random.default_rng(1).normal(100.0, 5.0, (400, 300))
    op = bind(lies.HonestBoxMean(), x, name="box")
    out = run_chunked(op, [x])[0]
    reads: list[int] = []

    def read(i, box: Box):
        reads.append(box.size)
        return (x if i is not None else out)[box.slices]

    rep = check_on_crops(op, read, chunks=(50, 50), scan_max_cells=5000)
    assert rep.sound and max(reads) <= 2500
    assert rep.notes[0].startswith("checked on crops of ")
    assert "rare values searched in 2 of 48 chunks" in rep.notes[1]
    kinds = {c.why for m in rep.modes for c in m.cells}
    assert {"corner", "border"} <= kinds
