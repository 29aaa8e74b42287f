"""Every built-in operator of the two benchmark workflows (shared/WORKFLOWS.md) is expressible
with the library: the chains run chunk by chunk equal plain numpy, and lineage walks the
paper's way (FQ0 lights up the whole image through the overscan branch)."""

import numpy as np

from operators import (Binary, Cast, Classify, Copy, Logistic, MaskReplace, MeanBroadcast,
                       Reduce, Subarray, Transpose)
from subzero.testing import run_chunked
from subzero.workflow import Workflow

S = np.dtypes.StringDType()
SHAPE = (23, 11)


def astronomy_builtins() -> Workflow:
    """The built-in part of the astronomy workflow, both exposures, without the UDFs."""
    wf = Workflow("astro-builtins")
    for name in ("exp1", "exp2"):
        wf.input(name, SHAPE, "uint16")
    for name in ("satmask", "biasmask", "darkmask", "flatmask"):
        wf.input(name, SHAPE, "float64")
    for e in ("1", "2"):
        wf.add(f"linearity{e}", Cast("float64"), f"exp{e}")
        wf.add(f"addmaskattr{e}", Copy(), f"linearity{e}")
        wf.add(f"badpixrm{e}", MaskReplace(90.0, bad_values=[0]), f"addmaskattr{e}", "satmask")
        wf.add(f"overscanimg{e}", Subarray("0:1, 0:1"), f"badpixrm{e}")
        wf.add(f"meanoverscan{e}", Reduce("mean"), f"overscanimg{e}")
        wf.add(f"rmoverscan{e}", Binary("subtract"), f"badpixrm{e}", f"meanoverscan{e}")
        wf.add(f"biascorrect{e}", Binary("subtract"), f"rmoverscan{e}", "biasmask")
        wf.add(f"darkcorrect{e}", Binary("subtract"), f"biascorrect{e}", "darkmask")
        wf.add(f"flatcorrect{e}", Binary("divide"), f"darkcorrect{e}", "flatmask")
        wf.add(f"bgmean{e}", MeanBroadcast(), f"flatcorrect{e}")
        wf.add(f"rmbg{e}", Binary("subtract"), f"flatcorrect{e}", f"bgmean{e}")
        wf.add(f"cr{e}", Binary("greater"), f"rmbg{e}", "biasmask")  # stand-in for UDF A/B
    wf.add("sumexp", Binary("add"), "rmbg1", "rmbg2")
    wf.add("maskexp", Binary("logical_and"), "cr1", "cr2")
    return wf.validate()


def run_all(wf: Workflow, data: dict, split: int) -> dict:
    arrays = dict(data)
    for name in wf.order:
        op = wf.ops[name]
        arrays[name], _, _ = run_chunked(op, [arrays[s] for s in wf.nodes[name].inputs], split)
    return arrays


def astronomy_data() -> dict:
    rng = np.random.default_rng(5)
    exps = {f"exp{e}": rng.integers(0, 3000, SHAPE).astype(np.uint16) for e in "12"}
    exps["exp1"][0, 0] = 1650
    sat = (rng.random(SHAPE) < 0.05).astype(np.float64)
    return {**exps, "satmask": sat, "biasmask": np.zeros(SHAPE), "darkmask": np.zeros(SHAPE),
            "flatmask": np.ones(SHAPE)}


def test_astronomy_builtins_equal_numpy_for_any_chunking():
    wf = astronomy_builtins()
    data = astronomy_data()
    ref = {}
    for e in "12":
        x = data[f"exp{e}"].astype(np.float64)
        bad = np.where((x == 0) | (data["satmask"] != 0), 90.0, x)
        flat = (bad - bad[0:1, 0:1].mean()) / 1.0
        ref[e] = flat - flat.mean()
    for split in (1, 3):
        got = run_all(wf, data, split)
        assert np.array_equal(got["rmbg1"], ref["1"]) and np.array_equal(got["rmbg2"], ref["2"])
        assert np.array_equal(got["sumexp"], ref["1"] + ref["2"])
        assert got["meanoverscan1"].shape == (1, 1)


def test_fq0_corner_of_exp1_reaches_the_whole_image_through_the_overscan_branch():
    wf = astronomy_builtins()
    f = np.zeros(SHAPE, bool)
    f[:10, :10] = True
    for name, i in [("linearity1", 0), ("addmaskattr1", 0), ("badpixrm1", 0),
                    ("overscanimg1", 0), ("meanoverscan1", 0), ("rmoverscan1", 1)]:
        f = wf.ops[name].map_f(f, i)
    assert f.shape == SHAPE and f.all()
    # ... while a block away from the corner never reaches the overscan value
    g = np.zeros(SHAPE, bool)
    g[5:, 5:] = True
    assert not wf.ops["overscanimg1"].map_f(g, 0).any()


def test_backward_from_one_rmbg_pixel_is_that_pixel_plus_the_overscan_corner_and_all():
    wf = astronomy_builtins()
    f = np.zeros(SHAPE, bool)
    f[7, 3] = True
    via_image = f
    for name in ("rmbg1", "flatcorrect1", "darkcorrect1", "biascorrect1"):
        via_image = wf.ops[name].map_b(via_image, 0)
    assert np.argwhere(via_image).tolist() == [[7, 3]]
    corner = wf.ops["overscanimg1"].map_b(wf.ops["meanoverscan1"].map_b(
        wf.ops["rmoverscan1"].map_b(via_image, 1), 0), 0)
    assert np.argwhere(corner).tolist() == [[0, 0]]
    bg = wf.ops["rmbg1"].map_b(f, 1)
    assert np.argwhere(bg).tolist() == [[7, 3]]
    assert wf.ops["bgmean1"].map_b(bg, 0).all()  # through the global mean: every pixel


def genomics_table(n_features: int = 6, n_patients: int = 5) -> np.ndarray:
    rng = np.random.default_rng(2)
    meta = np.array([[f"F{i}", f"desc {i}", "clinical", "-"] for i in range(n_features)])
    vals = rng.choice(["Y", "N", "NA", "c1", "0"], (n_features, n_patients))
    return np.concatenate([meta, vals], axis=1).astype(S)


def test_genomics_builtins_names_subsample_transpose_and_the_prediction_tail():
    table = genomics_table()
    wf = Workflow("geno-builtins")
    wf.input("table", table.shape, S)
    wf.input("predict", (5, 3), "float64")  # stands in for UDF H's log-odds per feature
    wf.add("names", Subarray(":, 0", axes=(1, 0)), "table")
    wf.add("subsample", Subarray("0:6, 4:"), "table")
    wf.add("transpose", Transpose(), "subsample")
    wf.add("cumodds", Reduce("sum", axis=1), "predict")
    wf.add("prob", Logistic(), "cumodds")
    wf.add("klass", Classify(0.5), "prob")
    wf.validate()
    predict = np.array([[0.5, 0.25, -0.1], [-2.0, 0.1, 0.0], [0.0, 0.0, 0.0],
                        [1.0, 1.0, 1.0], [-0.5, 0.2, 0.2]])
    for split in (1, 2):
        got = run_all(wf, {"table": table, "predict": predict}, split)
        assert got["names"].tolist() == [[f"F{i}" for i in range(6)]]
        assert got["transpose"].tolist() == table[:, 4:].T.tolist()
        assert np.array_equal(got["cumodds"], predict.sum(axis=1, keepdims=True))
        assert got["klass"].tolist() == [["Y"], ["N"], ["N"], ["Y"], ["N"]]
    # a patient's class depends on its row of predictions only
    f = np.zeros((5, 1), bool)
    f[3, 0] = True
    for name in ("klass", "prob"):
        f = wf.ops[name].map_b(f, 0)
    assert np.argwhere(wf.ops["cumodds"].map_b(f, 0))[:, 0].tolist() == [3, 3, 3]
    # one training cell reaches one transposed cell
    cell = np.zeros(table.shape, bool)
    cell[2, 4 + 1] = True
    fwd = wf.ops["transpose"].map_f(wf.ops["subsample"].map_f(cell, 0), 0)
    assert np.argwhere(fwd).tolist() == [[1, 2]]
