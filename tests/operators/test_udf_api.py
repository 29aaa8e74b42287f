"""The UDF authoring API (:mod:`operators.udf`): each decorator's operator computes what
its function computes on the whole array, whatever the chunking; its lineage agrees with
the brute-force model and is sound by perturbation; its payloads answer like its full
pairs; bad declarations fail in one line naming the function and the value."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from scipy import ndimage

from operators import udf
from subzero.cells import as_linear, unique
from subzero.errors import SubZeroError
from subzero.frontier import mask_from_linear
from subzero.lineage import payload_lineage
from subzero.frontier import Frontier
from subzero.modes import Mode
from subzero.testing import (
    assert_mapping_matches_trace, assert_sound_by_perturbation, bind, full_backward,
    payload_backward, run_chunked,
)
from tests.conftest import run_cli


# the decorated functions live at module level, as a user's module holds them

@udf.elementwise
def calibrate(raw, flat, gain=2.0):
    return (raw - 100.0) / flat * gain


@udf.elementwise
def above(image, threshold=0.5):
    return image > threshold


@udf.stencil(radius=lambda size: size // 2)
def median(image, size=3):
    return ndimage.median_filter(image, size=size, mode="mirror")


@udf.stencil(radius=(1, 2))
def smear(image, weight):
    return ndimage.maximum_filter(image, size=(3, 5), mode="nearest") * weight


@udf.rows(out="keep")
def row_median(image):
    return np.median(image, axis=1, keepdims=True)


@udf.rows
def minus_row_median(image):
    return image - np.median(image, axis=1, keepdims=True)


@udf.columns(out="reduce")
def column_sum(image):
    return image.sum(axis=0)


@udf.along(0, out="same")
def cumulative(image):
    return np.cumsum(image, axis=0)


@udf.whole_array
def normalise(image):
    return image / image.mean()


@udf.whole_array(shape=lambda s: (2,))
def extremes(image):
    return np.array([image.min(), image.max()])


@udf.blackbox(halo=1)
def box_max(image):
    return ndimage.maximum_filter(image, size=3, mode="nearest")


@udf.blackbox
def sorted_values(image):
    return np.sort(image, axis=None).reshape(image.shape)


@udf.cells(default="elementwise", halo=2)
def clean(image, mask, *, lineage):
    """Flagged pixels become the median of their 5 x 5 box (mirrored at the edge)."""
    out = image.copy()
    ys, xs = np.nonzero(mask)
    if len(ys):
        med = ndimage.median_filter(image, size=5, mode="mirror")
        out[ys, xs] = med[ys, xs]
    lineage.around((ys, xs), radius=2)
    return out


@udf.cells(default="elementwise", halo="global", dtype="int64")
def source_size(image, threshold=0.5, *, lineage):
    """Each pixel above ``threshold``: the area of its 8-connected source (which depends
    on the source's bounding box and the ring around it); else 0 (the pixel alone)."""
    labels, n = ndimage.label(image > threshold, structure=np.ones((3, 3)))
    sizes = np.bincount(labels.reshape(-1))
    out = np.where(labels > 0, sizes[labels], 0)
    if lineage.wanted:
        for k, sl in enumerate(ndimage.find_objects(labels), start=1):
            ys, xs = np.nonzero(labels[sl] == k)
            lo = [max(0, s.start - 1) for s in sl]
            hi = [min(n_, s.stop + 1) for s, n_ in zip(sl, image.shape)]
            lineage.boxes((ys + sl[0].start, xs + sl[1].start), lo, hi)
    return out


@udf.cells(default=1, halo=1)
def peaks(image, *, lineage):
    """A pixel's 3 x 3 maximum, and for the brightest pixels (above 2.5) the cells of
    their 3 x 3 box listed one by one."""
    out = ndimage.maximum_filter(image, size=3, mode="nearest")
    ys, xs = np.nonzero(image > 2.5)
    dy, dx = np.mgrid[-1:2, -1:2]
    cells = np.stack([np.clip(ys[:, None] + dy.reshape(-1), 0, image.shape[0] - 1),
                      np.clip(xs[:, None] + dx.reshape(-1), 0, image.shape[1] - 1)], axis=2)
    lineage.cells((ys, xs), cells)
    return out


def _image(shape=(23, 17), seed=0):
    return np.random.default_rng(seed).normal(size=shape)


def _mask(shape=(23, 17), seed=1):
    m = np.random.default_rng(seed).random(shape) < 0.05
    m[0, 0] = m[-1, -1] = True  # corners: boxes clipped at the border
    return m


CASES = {
    "calibrate": (calibrate(gain=3.0), lambda: [_image() + 100, _image(seed=2) ** 2 + 1]),
    "above": (above, lambda: [_image()]),
    "median": (median(size=5), lambda: [_image()]),
    "smear": (smear, lambda: [_image(), _image(seed=3)]),
    "row_median": (row_median, lambda: [_image()]),
    "minus_row_median": (minus_row_median, lambda: [_image()]),
    "column_sum": (column_sum, lambda: [_image()]),
    "cumulative": (cumulative, lambda: [_image()]),
    "normalise": (normalise, lambda: [_image() + 5]),
    "extremes": (extremes, lambda: [_image()]),
    "box_max": (box_max, lambda: [_image()]),
    "sorted_values": (sorted_values, lambda: [_image()]),
    "clean": (clean, lambda: [_image(), _mask()]),
    "source_size": (source_size(threshold=1.0), lambda: [_image()]),
    "peaks": (peaks, lambda: [_image()]),
}


def _bound(name):
    op, make = CASES[name]
    op = op() if isinstance(op, type) else op
    ins = make()
    return bind(op, *ins, name=name), ins


@pytest.mark.parametrize("name", sorted(CASES))
def test_chunked_equals_whole(name):
    """Chunks (with halos) give what the function gives on the whole arrays."""
    op, ins = _bound(name)
    whole = np.asarray(type(op).function(*ins, **(
        {"lineage": udf.Lineage.ignored()} if "lineage" in type(op).function.__code__.co_varnames
        else {}), **op.values))
    for split in (1, 2, 3):
        out, _, _ = run_chunked(op, ins, split=split)
        assert out.dtype == op.out_dtype
        np.testing.assert_array_equal(out, np.broadcast_to(whole, op.out_shape).astype(
            op.out_dtype), err_msg=f"{name} split {split}")


@pytest.mark.parametrize("name", ["calibrate", "median", "smear", "row_median",
                                  "minus_row_median", "column_sum", "cumulative",
                                  "normalise", "extremes"])
def test_mapping_functions_match_traced_pairs(name):
    op, ins = _bound(name)
    assert Mode.MAP in op.supported_modes()
    assert_mapping_matches_trace(op, ins, split=3, max_cells=60)


BLACK_BOXES = {"box_max", "sorted_values"}


@pytest.mark.parametrize("name", sorted(BLACK_BOXES))
def test_black_boxes_declare_nothing_and_split_as_asked(name):
    """A black box supports only BLACKBOX and captures no pairs; with a halo it runs block
    by block (so a query re-runs only the blocks it touches), without one as one task."""
    op, ins = _bound(name)
    assert op.supported_modes() == frozenset({Mode.BLACKBOX})
    _, full, pay = run_chunked(op, ins, split=3, modes=(Mode.FULL,))
    assert full is None and pay is None
    assert str(op.parallelism) == ("stencil[1]" if name == "box_max" else "global")


@pytest.mark.parametrize("name", sorted(set(CASES) - BLACK_BOXES))
def test_sound_by_perturbation(name):
    """Changing every input cell outside a cell's declared lineage leaves it unchanged,
    for cells at corners, edges, chunk borders and (cleaner) flagged pixels."""
    op, ins = _bound(name)
    modes = op.supported_modes()
    out, full, pay = run_chunked(op, ins, split=3, modes=(Mode.FULL,))
    assert full is not None and len(full) > 0
    shape = op.out_shape
    picks = {(0,) * len(shape), tuple(s - 1 for s in shape), tuple(s // 2 for s in shape)}
    if name == "clean":
        picks |= {tuple(c) for c in np.argwhere(ins[1])[:4]}
    if name in ("source_size", "peaks"):
        picks |= {tuple(c) for c in np.argwhere(out > (0 if name == "source_size" else 2.5))[:4]}
    for cell in sorted(picks):
        lin = as_linear([cell], shape)

        def backward(f, i, full=full):
            return full_backward(full, f, i, op.in_shapes[i])

        assert_sound_by_perturbation(op, ins, lin, backward=backward, split=3, trials=2)
        if Mode.MAP in modes:
            assert_sound_by_perturbation(op, ins, lin, split=3, trials=2)


@pytest.mark.parametrize("name", ["clean", "source_size", "peaks"])
def test_payloads_answer_like_full_pairs(name):
    """COMP payloads (the mapping default and the recorded exceptions) give, cell by cell,
    the lineage of the FULL pairs; the batch form of ``map_p`` agrees with ``map_p``."""
    op, ins = _bound(name)
    _, full, _ = run_chunked(op, ins, split=3, modes=(Mode.FULL,))
    _, _, pay = run_chunked(op, ins, split=3, modes=(Mode.COMP,))
    assert pay is not None and len(pay) < int(np.prod(op.out_shape))
    rng = np.random.default_rng(0)
    recorded = unique(pay.out.values)
    cells = unique(np.concatenate([recorded[:20], rng.choice(int(np.prod(op.out_shape)), 20)
                                   .astype(np.uint64)]))
    for i in range(len(op.in_shapes)):
        for c in cells:
            f = mask_from_linear([c], op.out_shape)
            want = full_backward(full, f, i, op.in_shapes[i])
            got = payload_backward(op, pay, f, i, default=True)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} cell {c} input {i}")
        f = mask_from_linear(cells, op.out_shape)
        batch = payload_lineage(lambda lin, fr: pay if lin is None else pay.restrict(lin), op, i, True, Frontier(op.out_shape, mask=f),
                                composite=True)
        np.testing.assert_array_equal(batch.mask, full_backward(full, f, i, op.in_shapes[i]))
        fwd_in = np.zeros(op.in_shapes[i], bool)
        fwd_in[tuple(np.asarray(op.in_shapes[i]) // 2)] = True
        fwd = payload_lineage(lambda lin, fr: pay, op, i, False,
                              Frontier(op.in_shapes[i], mask=fwd_in), composite=True)
        want_f = np.zeros(op.out_shape, bool)
        for k in range(len(full)):
            if fwd_in.reshape(-1)[full.ins[i].row(k).astype(np.intp)].any():
                want_f.reshape(-1)[full.out.row(k).astype(np.intp)] = True
        np.testing.assert_array_equal(fwd.mask, want_f)


def test_decorated_object_is_a_class_with_its_function():
    assert isinstance(median, type) and median.__name__ == "median"
    assert median.__module__ == __name__ and median.__qualname__ == "median"
    op = median(size=7)
    assert op.params() == {"size": 7} and op.init_args == ((), {"size": 7})
    b = bind(op, _image())
    assert b.radius_for(2) == (3, 3)
    x = np.arange(9.0).reshape(3, 3)
    np.testing.assert_array_equal(median.function(x, size=3),
                                  ndimage.median_filter(x, size=3, mode="mirror"))
    assert bind(above(), _image()).out_dtype == bool


@pytest.mark.parametrize("make, text", [
    (lambda: udf.elementwise(lambda: 1), "takes no input array"),
    (lambda: udf.stencil(2)(lambda x, **kw: x), "**kw"),
    (lambda: udf.cells()(lambda x: x), "must take a keyword parameter 'lineage'"),
    (lambda: udf.elementwise(lambda x, *, lineage: x), "only udf.cells"),
    (lambda: udf.stencil(-1), "radius must be non-negative"),
    (lambda: udf.along(0, out="sideways"), "out must be one of"),
    (lambda: udf.cells(default="sometimes"), "default must be"),
    (lambda: median(width=3), "takes no parameter 'width'; its parameters are: size"),
    (lambda: median(3), "give its parameters by name"),
    (lambda: bind(median(size=41), _image()), "radius 20 on axis 1 does not fit"),
    (lambda: bind(smear(), np.zeros(5), np.zeros(5)), "radius (1, 2) has 2 axes"),
])
def test_bad_declarations_are_one_line_value_errors(make, text):
    with pytest.raises(ValueError) as e:
        make()
    assert isinstance(e.value, SubZeroError)
    msg = str(e.value)
    assert text in msg and "\n" not in msg


def test_lineage_outside_the_input_is_refused():
    @udf.cells(default="none")
    def wrong(image, *, lineage):
        lineage.boxes([[0, 0]], [0, 0], [3, image.shape[1] + 4])
        return image

    op = bind(wrong(), np.zeros((4, 4)), name="wrong")
    with pytest.raises(ValueError, match=r"operator 'wrong' .* outside input 0 of shape"):
        run_chunked(op, [np.zeros((4, 4))], modes=(Mode.FULL,))
    # without lineage asked for, the recorder is not consulted
    run_chunked(op, [np.zeros((4, 4))], modes=(Mode.BLACKBOX,))


USER_MODULE = textwrap.dedent('''
    """A user's pipeline written with the authoring API."""

    import numpy as np
    from scipy import ndimage

    from operators import udf
    from subzero import Workflow


    @udf.stencil(radius=1)
    def smooth(image):
        return ndimage.uniform_filter(image, size=3, mode="nearest")


    @udf.cells(default="elementwise", halo=2)
    def clean(image, mask, *, lineage):
        out = image.copy()
        ys, xs = np.nonzero(mask)
        out[ys, xs] = ndimage.median_filter(image, size=5, mode="mirror")[ys, xs]
        lineage.around((ys, xs), radius=2)
        return out


    def sky(shape=(64, 48)):
        rng = np.random.default_rng(0)
        return rng.normal(100.0, 5.0, shape)


    def hits(shape=(64, 48)):
        m = np.zeros(shape, bool)
        m[10, 10] = m[40, 7] = True
        return m


    def build(radius: int = 1):
        wf = Workflow("mine")
        wf.input("image", (64, 48), "float64", source=sky)
        wf.input("mask", (64, 48), "bool", source=hits)
        wf.add("smooth", smooth, "image")
        wf.add("clean", clean, "smooth", "mask")
        return wf
''')


def test_user_module_runs_queries_and_stores_payloads(tmp_path):
    """From the CLI: ``subzero`` stores the cleaner's exceptions as payloads (nothing for
    the stencil), ``full-one`` stores every pair; both answer a flagged pixel alike."""
    (tmp_path / "mine.py").write_text(USER_MODULE)
    home = tmp_path / "home"
    answers = {}
    for strategy in ("subzero", "full-one"):
        r = run_cli("run", str(tmp_path / "mine.py"), "--home", str(home), "--strategy",
                    strategy, "--chunks", "32,24", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        q = run_cli("query", "--home", str(home), "--json", "latest", "backward", "--from",
                    "clean", "--cells", "10,10", "--to", "image", cwd=tmp_path)
        assert q.returncode == 0, q.stderr
        answers[strategy] = q.stdout
    import json

    methods = {}
    for strategy, text in answers.items():
        got = json.loads(text)
        assert got["count"] == 49, (strategy, got)  # the 5x5 box through a 3x3 stencil
        assert sorted(map(tuple, got["cells"]))[0] == (7, 7)
        methods[strategy] = [s["method"] for s in got["steps"]]
    assert methods == {"subzero": ["stored:comp-one-bwd", "map"],
                       "full-one": ["stored:full-one-bwd", "map"]}


def test_bad_user_module_is_one_line_exit_2(tmp_path):
    (tmp_path / "bad.py").write_text(USER_MODULE.replace(
        "def smooth(image):", "def smooth(image, **options):"))
    r = run_cli("run", str(tmp_path / "bad.py"), "--home", str(tmp_path / "h"), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "**options" in r.stderr
    (tmp_path / "big.py").write_text(USER_MODULE.replace(
        "@udf.stencil(radius=1)", "@udf.stencil(radius=100)"))
    r = run_cli("run", str(tmp_path / "big.py"), "--home", str(tmp_path / "h"), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "radius 100 on axis 0 does not fit" in r.stderr and "'smooth'" in r.stderr


def test_lineage_outside_the_input_on_the_cli_is_one_line_exit_2(tmp_path):
    (tmp_path / "badlin.py").write_text(textwrap.dedent('''
        import numpy as np
        from operators import udf
        from subzero import Workflow

        @udf.cells(default="none")
        def wrong(image, *, lineage):
            lineage.boxes([[0, 0]], [0, 0], [3, image.shape[1] + 4])
            return image

        def build():
            wf = Workflow("badlin")
            wf.input("image", (8, 8), "float64", source=lambda: np.zeros((8, 8)))
            wf.add("wrong", wrong, "image")
            return wf
    '''))
    r = run_cli("run", "badlin", "--home", str(tmp_path / "h"), "--strategy", "full-one",
                cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    err = [line for line in r.stderr.splitlines() if "error" in line]
    assert err == ["subzero: error: operator 'wrong' (wrong): lineage box (0, 0)-(3, 12) of "
                   "output cell (0, 0) is outside input 0 of shape (8, 8)"]
