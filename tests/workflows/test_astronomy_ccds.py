"""The astronomy workflow with many CCDs (``ccds``), and its inputs made box by box."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from optimizer.workload import from_queries
from subzero.cells import Box
from subzero.errors import WorkflowError
import workflows
from workflows import astronomy
from workflows.astro_data import ExposureField, generate_exposures

#: The one-CCD workflow's operators and named queries, as they were before ``ccds``.
CHAIN = ["linearity", "addmaskattr", "badpixrm", "overscanimg", "meanoverscan", "rmoverscan",
         "biascorrect", "darkcorrect", "flatcorrect", "bgmean", "rmbg", "cr"]
OPERATORS = {f"{n}{e}" for e in (1, 2) for n in CHAIN} | {"sumexp", "maskexp", "rmcr", "clust"}
QUERIES = ["BQ0", "BQ1", "BQ2", "BQ3", "BQ4", "FQ0"]
AUXILIARY = ["satmask", "biasmask", "darkmask", "flatmask"]


def walk(wf, q) -> str:
    """Follow a named query's path through the workflow; the array it ends at."""
    cur = q.start
    for op, i in q.path:
        node = wf.nodes[op]
        if q.direction == "backward":
            assert op == cur, (q.name, op, cur)
            cur = node.inputs[i]
        else:
            assert node.inputs[i] == cur, (q.name, op, cur)
            cur = op
    return cur


class Arrays:
    """A stand-in for a finished run: arrays by name, and the workflow."""

    def __init__(self, wf, arrays):
        self.workflow, self.arrays = wf, arrays

    def array(self, name):
        return self.arrays[name]


# ---------------------------------------------------------------------------------------
# one CCD: as before
# ---------------------------------------------------------------------------------------


def test_one_ccd_keeps_its_names_queries_and_params():
    wf = astronomy.build(shape="64x48").validate()
    assert set(wf.order) == OPERATORS and len(wf.order) == 28
    assert list(wf.inputs) == ["exp1", "exp2", *AUXILIARY]
    assert list(wf.queries) == QUERIES
    assert wf.params == {"seed": 0, "shape": [64, 48], "sky": 600.0, "threshold": 100.0,
                         "mask": "and", "data": "generated", "ccds": 1}
    assert [walk(wf, wf.queries[q]) for q in QUERIES] == [
        "exp1", "exp2", "exp2", "exp1", "sumexp", "rmoverscan1"]
    assert wf.queries["BQ0"].path[:3] == [("rmcr", 1), ("maskexp", 0), ("cr1", 0)]
    assert astronomy.build(shape="64x48", ccds="1").params["ccds"] == 1


def test_one_ccd_exposures_are_the_generated_pair_box_by_box():
    wf = astronomy.build(shape="64x48", seed=5)
    exp1, exp2 = generate_exposures(5, (64, 48))
    box = Box((3, 7), (50, 40))
    assert np.array_equal(wf.inputs["exp1"].blocks(box), exp1[box.slices])
    assert np.array_equal(wf.inputs["exp2"].source(), exp2)
    assert wf.inputs["exp1"].loader is None  # files: the engine reads them chunk by chunk


def test_auxiliary_masks_are_constant_blocks():
    wf = astronomy.build(shape="64x48")
    box = Box((10, 0), (12, 5))
    for name, dtype, fill in (("satmask", "uint8", 0), ("biasmask", "float32", 0.0),
                              ("darkmask", "float32", 0.0), ("flatmask", "float32", 1.0)):
        spec = wf.inputs[name]
        got = spec.blocks(box)
        assert spec.auxiliary and got.dtype == np.dtype(dtype) and got.shape == (2, 5)
        assert np.all(got == fill) and spec.source().shape == (64, 48)


# ---------------------------------------------------------------------------------------
# many CCDs
# ---------------------------------------------------------------------------------------


def test_three_ccds_are_three_prefixed_pipelines():
    wf = astronomy.build(shape="64x48", ccds=3).validate()
    assert len(wf.order) == 3 * 28
    assert set(wf.order) == {f"c{k}.{n}" for k in (1, 2, 3) for n in OPERATORS}
    assert list(wf.inputs) == [f"c{k}.exp{e}" for k in (1, 2, 3) for e in (1, 2)] + AUXILIARY
    assert list(wf.queries) == [f"c{k}.{q}" for k in (1, 2, 3) for q in QUERIES]
    assert wf.params["ccds"] == 3 and wf.params["data"] == "generated"
    # each CCD reads only its own arrays, and the visit's shared masks
    for k in (1, 2, 3):
        for n in OPERATORS:
            for src in wf.nodes[f"c{k}.{n}"].inputs:
                assert src.startswith(f"c{k}.") or src in AUXILIARY, (n, src)
    assert wf.nodes["c2.biascorrect1"].inputs == ("c2.rmoverscan1", "biasmask")


@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_ccds_named_queries_walk_its_own_pipeline(k):
    wf = astronomy.build(shape="64x48", ccds="3").validate()
    p = f"c{k}."
    ends = [walk(wf, wf.queries[p + q]) for q in QUERIES]
    assert ends == [p + "exp1", p + "exp2", p + "exp2", p + "exp1", p + "sumexp",
                    p + "rmoverscan1"]
    for q in QUERIES:  # and the optimizer's workload accepts them
        assert from_queries([{"named": p + q}], wf).total == 1.0


def test_query_cells_come_from_that_ccds_arrays():
    wf = astronomy.build(shape="64x48", ccds=2)
    zero = np.zeros((64, 48), dtype=bool)
    clust = np.zeros((64, 48), dtype=np.int64)
    clust[20:23, 30:33] = 4
    mask = zero.copy()
    mask[5, 6] = True
    run = Arrays(wf, {"c1.clust": np.zeros_like(clust), "c2.clust": clust,
                      "c1.maskexp": zero, "c1.cr1": zero, "c2.maskexp": mask})
    assert {tuple(c) for c in wf.queries["c2.BQ1"].cells(run)} == {
        (r, c) for r in range(20, 23) for c in range(30, 33)}
    assert wf.queries["c2.BQ0"].cells(run).tolist() == [[5, 6]]
    with pytest.raises(WorkflowError, match=r"no stars in CCD 1 of this run: c1.BQ1/c1.BQ3"):
        wf.queries["c1.BQ3"].cells(run)
    with pytest.raises(WorkflowError, match=r"no cosmic-ray pixels in CCD 1 of this run"):
        wf.queries["c1.BQ2"].cells(run)
    assert wf.queries["c2.FQ0"].cells(run) == Box((0, 0), (10, 10))


def test_each_ccd_has_its_own_generated_pair_and_ccd_1_is_the_one_ccd_pair():
    one = astronomy.build(shape="64x48", seed=4)
    many = astronomy.build(shape="64x48", seed=4, ccds=3)
    pairs = {k: [many.inputs[f"c{k}.exp{e}"].source() for e in (1, 2)] for k in (1, 2, 3)}
    assert np.array_equal(pairs[1][0], one.inputs["exp1"].source())
    assert not np.array_equal(pairs[1][0], pairs[2][0])
    assert not np.array_equal(pairs[2][1], pairs[3][1])
    want = generate_exposures(astronomy.ccd_seed(4, 3), (64, 48))
    assert np.array_equal(pairs[3][0], want[0]) and np.array_equal(pairs[3][1], want[1])


@settings(max_examples=30, deadline=None)
@given(data=st.data(), rows=st.integers(8, 150), cols=st.integers(8, 60),
       k=st.integers(1, 3), e=st.sampled_from([1, 2]))
def test_blocks_of_any_ccd_are_slices_of_its_whole_exposure(data, rows, cols, k, e):
    wf = astronomy.build(shape=f"{rows}x{cols}", seed=11, ccds=3)
    spec = wf.inputs[f"c{k}.exp{e}"]
    r0, r1 = sorted(data.draw(st.tuples(st.integers(0, rows), st.integers(0, rows))))
    c0, c1 = sorted(data.draw(st.tuples(st.integers(0, cols), st.integers(0, cols))))
    box = Box((r0, c0), (r1, c1))
    assert np.array_equal(spec.blocks(box), spec.source()[box.slices])


def test_the_workflow_pickles_small():
    """Inputs are generators of boxes (seed and shape), never arrays in the workflow."""
    from pyspark import cloudpickle

    wf = astronomy.build(ccds=4)
    field = wf.inputs["c4.exp2"].blocks.func.__self__
    assert isinstance(field, ExposureField) and field.shape == (2001, 513)
    assert len(cloudpickle.dumps(wf)) < 100_000  # the exposures: 4 x 2 x 2001 x 513 x 2 bytes


# ---------------------------------------------------------------------------------------
# parameters and files
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["0", "-2", "abc", "1.5", "", 0, -1, 1.5, True, "1025"])
def test_ccds_must_be_a_positive_integer(bad):
    with pytest.raises(WorkflowError) as err:
        astronomy.build(shape="64x48", ccds=bad)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("ccds must be an integer from 1 to 1024")
    assert msg.endswith(f"Got {bad!r}.")


@pytest.mark.parametrize("bad", ["-1", "x", 2.5, "1_000", np.float32(2.0), True])
@pytest.mark.parametrize("workflow", ["astronomy", "example", "genomics"])
def test_seed_must_be_a_non_negative_integer_in_every_workflow(bad, workflow):
    """One parser (workflows.params) for every workflow's integers: the same values are
    refused everywhere, with the same words."""
    with pytest.raises(WorkflowError, match=r"seed must be an integer from 0 to "):
        workflows.build(workflow, seed=bad)


def test_shape_is_still_checked_with_many_ccds():
    with pytest.raises(WorkflowError, match="shape must be 2 ints >= 8"):
        astronomy.build(shape="4x4", ccds=2)
    with pytest.raises(WorkflowError, match="shape must be 2 ints >= 8"):
        astronomy.build(shape="0x600", ccds=2)


def test_exposure_files_per_ccd():
    f = "/data/e.fits"
    wf = astronomy.build(inputs={"c2.exp1": f, "c2.exp2": f}, ccds=3)
    assert wf.params["data"] == "mixed"  # CCDs 1 and 3 are generated
    assert wf.inputs["c1.exp1"].blocks is not None
    files = {f"c{k}.exp{e}": f for k in (1, 2) for e in (1, 2)}
    assert astronomy.build(inputs=files, ccds=2).params["data"] == "files"
    assert astronomy.build(inputs={"exp1": f, "exp2": f}).params["data"] == "files"
    # the visit's masks may come from files too
    assert astronomy.build(inputs={"satmask": f}, ccds=2).params["data"] == "generated"


@pytest.mark.parametrize("inputs, ccds, match", [
    ({"c2.exp1": "/a.fits"}, 3,
     r"give both exposures of CCD 2: --input c2.exp1=PATH --input c2.exp2=PATH "
     r"\(missing c2.exp2\)"),
    ({"exp2": "/a.fits"}, 1,
     r"give both exposures: --input exp1=PATH --input exp2=PATH \(missing exp1\)"),
    ({"exp1": "/a.fits", "exp2": "/b.fits"}, 2,
     r"--input exp1: unknown input 'exp1'; the astronomy workflow with ccds=2 reads "
     r"c1.exp1, c1.exp2 ... c2.exp2"),
    ({"c4.exp1": "/a.fits", "c4.exp2": "/a.fits"}, 3, r"--input c4.exp1: .* with ccds=3"),
    ({"c1.exp1": "/a.fits"}, 1, r"--input c1.exp1: .* with ccds=1 reads exp1, exp2"),
    ({"c0.exp1": "/a.fits"}, 2, r"--input c0.exp1"),
])
def test_bad_exposure_file_names(inputs, ccds, match):
    with pytest.raises(WorkflowError, match=match) as err:
        astronomy.build(inputs=inputs, ccds=ccds)
    assert "\n" not in str(err.value)


def test_shape_applies_to_generated_exposures_only():
    with pytest.raises(WorkflowError, match="shape applies to generated exposures only"):
        astronomy.build(inputs={"c1.exp1": "/a", "c1.exp2": "/b"}, shape="64x48", ccds=2)


# ---------------------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.slow
def test_two_ccds_run_and_answer_the_second_ccds_queries(spark, tmp_path):
    import workflows
    from subzero.api import Home

    run = Home(tmp_path).run("astronomy", strategy="subzero", shape="64x48", ccds="2",
                             seed=1)
    assert {f"c{k}.rmcr" for k in (1, 2)} <= set(run.arrays)
    res = run.named_query("c2.BQ1")
    assert res.count > 0 and res.steps[0].operator == "c2.clust"
    assert all(s.operator.startswith("c2.") for s in res.steps)
    # the answer reaches c2's exposure 2 at the star pixels it started from
    cells = run.named_query_cells("c2.BQ1")
    assert res.array == "c2.exp2" and res.mask[tuple(cells.T)].all()
    assert run.named_query("c1.FQ0").mask.all()  # the overscan branch, as with one CCD
    # CCD 2's arrays are its generated pair's, not CCD 1's
    assert np.array_equal(run.array("c2.exp1"),
                          generate_exposures(astronomy.ccd_seed(1, 2), (64, 48))[0])
    clusts = [run.array(f"c{k}.clust") for k in (1, 2)]
    crs = [sum(int(run.array(f"c{k}.cr{e}").sum()) for k in (1, 2)) for e in (1, 2)]
    stars = sum(len(np.unique(c[c > 0])) for c in clusts)
    (line,) = workflows.summary("astronomy", run)
    assert line == (f"2 CCDs: cosmic rays: {crs[0]:,} pixels flagged in exp1, {crs[1]:,} in "
                    f"exp2; stars: {stars:,} detected")


def stored_run(wf, arrays, root, chunk_rows, ours=False):
    """A finished run (:class:`subzero.engine.runs.LoadedRun`) of workflow ``wf`` whose
    arrays are zarr arrays on disk, which the workflow reads through the run's public
    reading methods. ``ours``: arrays as a run stores them (Blosc, read chunk by chunk
    without zarr); else zarr's default codecs (read through zarr)."""
    import zarr

    from subzero.engine import layout
    from subzero.engine.arrays import create_array, open_array
    from subzero.engine.runs import LoadedRun

    run = LoadedRun(root, "r1", {"id": "r1"}, wf, {}, {})
    for name, a in arrays.items():
        path = layout.array_path(root, run.id, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        chunks = (chunk_rows, a.shape[1])
        if ours:
            create_array(path, a.shape, a.dtype, chunks)
            open_array(path, "r+")[...] = a  # every chunk, as a run writes
        else:
            zarr.create_array(store=str(path), shape=a.shape, dtype=a.dtype,
                              chunks=chunks)[...] = a
        run.arrays[name] = {"shape": a.shape, "chunks": chunks}
    return run


@pytest.mark.parametrize("scan_cells,keep_hits,ours", [
    (1, 1 << 22, False), (100, 1 << 22, True), (100, 5, True), (1 << 22, 0, False),
    (1 << 22, 1 << 22, True)])
def test_query_cells_and_summary_read_row_blocks_like_the_whole_array(
        tmp_path, monkeypatch, scan_cells, keep_hits, ours):
    """The named cells and the summary from row blocks (read through zarr, or chunk by
    chunk; the cells found kept from one pass, or the chosen blocks read again) are
    those of the whole array: k of its hits in row-major order, chosen with the seed."""
    monkeypatch.setattr(astronomy, "SCAN_CELLS", scan_cells)
    monkeypatch.setattr(astronomy, "KEEP_HITS", keep_hits)
    wf = astronomy.build(shape="64x48", ccds=2)
    rng = np.random.default_rng(3)
    arrays = {}
    for k in (1, 2):
        arrays[f"c{k}.clust"] = (rng.random((64, 48)) < 0.05) * rng.integers(1, 30, (64, 48))
        for name in ("maskexp", "cr1", "cr2"):
            arrays[f"c{k}.{name}"] = rng.random((64, 48)) < 0.02
    stored = stored_run(wf, arrays, tmp_path, chunk_rows=7, ours=ours)
    whole = Arrays(wf, arrays)
    for q, source, seed in (("c1.BQ0", "c1.maskexp", 7), ("c2.BQ2", "c2.maskexp", 7),
                            ("c1.BQ3", "c1.clust", 8), ("c2.BQ1", "c2.clust", 8)):
        got = wf.queries[q].cells(stored)
        assert len(got) == 10 and np.array_equal(got, wf.queries[q].cells(whole)), q
        hits = np.argwhere(arrays[source] > 0)  # the brute-force model
        pick = np.sort(np.random.default_rng(seed).choice(len(hits), 10, replace=False))
        assert np.array_equal(got, hits[pick]), q
    (line,) = astronomy.summary(stored)
    crs = [sum(int(arrays[f"c{k}.cr{e}"].sum()) for k in (1, 2)) for e in (1, 2)]
    stars = sum(len(np.unique(arrays[f"c{k}.clust"][arrays[f"c{k}.clust"] > 0]))
                for k in (1, 2))
    assert line == (f"2 CCDs: cosmic rays: {crs[0]:,} pixels flagged in exp1, {crs[1]:,} in "
                    f"exp2; stars: {stars:,} detected")


def test_queries_starting_from_the_same_cells_scan_the_array_once(tmp_path, monkeypatch):
    """BQ1 and BQ3 start from the same 10 star pixels (BQ0 and BQ2 from the same cleaned
    ones): choosing them reads clust (maskexp) once per run, not once per query."""
    wf = astronomy.build(shape="64x48")
    rng = np.random.default_rng(4)
    arrays = {"clust": (rng.random((64, 48)) < 0.05) * rng.integers(1, 30, (64, 48)),
              "maskexp": rng.random((64, 48)) < 0.02}
    stored = stored_run(wf, arrays, tmp_path, chunk_rows=7, ours=True)
    scans = []
    real = astronomy._row_blocks

    def spy(run, name, only=None):
        scans.append(name)
        return real(run, name, only)

    monkeypatch.setattr(astronomy, "_row_blocks", spy)
    got = {q: wf.queries[q].cells(stored) for q in ("BQ0", "BQ1", "BQ2", "BQ3")}
    assert scans == ["maskexp", "clust"]
    assert np.array_equal(got["BQ1"], got["BQ3"]) and np.array_equal(got["BQ0"], got["BQ2"])
    got["BQ1"][0, 0] = -1  # a caller's copy: the remembered cells stay as chosen
    assert np.array_equal(wf.queries["BQ3"].cells(stored),
                          wf.queries["BQ3"].cells(Arrays(wf, arrays)))


@pytest.mark.parametrize("ours", [True, False])
def test_a_run_reads_row_ranges_and_boxes_of_its_arrays(tmp_path, ours):
    """The reading methods the workflow scans arrays with: rows clipped to the array,
    boxes, the whole array, and a clear error for an array the run does not have."""
    from subzero.errors import StoreError

    wf = astronomy.build(shape="64x48")
    a = np.arange(20 * 6, dtype=np.int64).reshape(20, 6)
    run = stored_run(wf, {"clust": a}, tmp_path, chunk_rows=7, ours=ours)
    assert run.shape("clust") == (20, 6)
    assert np.array_equal(run.read_rows("clust", 5, 9), a[5:9])
    assert np.array_equal(run.read_rows("clust", 14, 100), a[14:])
    assert run.read_rows("clust", 30, 40).shape == (0, 6)
    assert np.array_equal(run.read_box("clust", Box((1, 2), (3, 5))), a[1:3, 2:5])
    assert np.array_equal(run.read_box("clust"), a)
    with pytest.raises(StoreError, match="nope"):
        run.read_rows("nope", 0, 1)
