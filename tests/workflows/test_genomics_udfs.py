"""The genomics UDFs: model values against pandas, predictions, and honest lineage."""

import numpy as np
import pandas as pd
import pytest

from subzero.errors import ShapeError
from subzero.frontier import frontier
from subzero.modes import Mode
from subzero.runtime import TaskContext
from subzero.testing import (assert_mapping_matches_trace, assert_sound_by_perturbation, bind,
                             full_backward, payload_backward, run_chunked)
from workflows.genomics_data import RELATIVE_PATH, generate_table, load_table, scale_table
from workflows.genomics_udfs import (
    CONDITIONED, LABEL, MISSING, MODEL_FEATURES, MODEL_SHAPE, MODEL_USED, N_SLOTS, STRING,
    SUBCLASS, SUBCLASSES, VOCAB, Extract, Model, Predict, Validate, describe_model_cell,
    find_columns, model_column,
)

K = {f: k for k, f in enumerate(MODEL_FEATURES)}
MODES = (Mode.PAY, Mode.FULL)


# -- building inputs ----------------------------------------------------------------------


def split_table(table):
    """(transpose P x F, names 1 x F), as the built-ins make them."""
    return (np.ascontiguousarray(np.asarray(table)[:, 4:].T),
            np.ascontiguousarray(np.asarray(table)[:, 0][None, :]))


def as_str(a):
    return np.asarray(a).astype(STRING) if np.asarray(a).dtype == object else np.asarray(a)


def klass_of(pred):
    """The built-ins after predict: row sum, logistic, > 0.5."""
    prob = 1.0 / (1.0 + np.exp(-pred.sum(axis=1)))
    return np.where(prob > 0.5, "Y", "N").astype(STRING)[:, None]


def pipeline(table, truth_column=None):
    """Every array of the workflow (black box), as a dict of bound ops and arrays."""
    t, names = split_table(table)
    d = {"transpose": t, "names": names}
    e = bind(Extract(), t, names, name="extract")
    d["extract"] = as_str(run_chunked(e, [t, names])[0])
    m = bind(Model(), d["extract"], t, names, name="model")
    d["model"] = run_chunked(m, [d["extract"], t, names])[0]
    h = bind(Predict(), d["model"], d["extract"], t, names, name="predict")
    d["predict"] = run_chunked(h, [d["model"], d["extract"], t, names])[0]
    d["klass"] = klass_of(d["predict"])
    j_r = int(find_columns(names[0], [LABEL])[0]) if truth_column is None else truth_column
    g = bind(Validate(j_r), d["klass"], t, name="validate")
    d["validate"] = run_chunked(g, [d["klass"], t])[0]
    d["ops"] = {"extract": (e, [t, names]), "model": (m, [d["extract"], t, names]),
                "predict": (h, [d["model"], d["extract"], t, names]),
                "validate": (g, [d["klass"], t])}
    return d


def small_table(shuffle: bool) -> np.ndarray:
    """12 generated patients with every edge case the kernels handle, optionally with the
    feature rows shuffled so that names lookups find columns far from 0."""
    t = generate_table(seed=5, patients=12).astype(object)
    row = {f: r for r, f in enumerate(t[:, 0])}
    t[row["HISTO"], 4] = MISSING          # unconditioned value missing
    t[row["mTOR_UP.v1"], 4] = MISSING     # conditioned value missing
    t[row[SUBCLASS], 5] = MISSING         # subclass missing
    t[row[LABEL], 6] = MISSING            # relapse unknown
    t[row["MET"], 7] = "weird"            # value outside the vocabulary
    t[row["COLLER_MYC"], 8] = "weird"
    if shuffle:
        t = t[np.random.default_rng(3).permutation(len(t))]
    return t.astype(STRING)


@pytest.fixture(scope="module", params=[False, True], ids=["ordered", "shuffled"])
def small(request):
    return pipeline(small_table(request.param))


@pytest.fixture(scope="module")
def real(shared_data):
    return load_table(shared_data / RELATIVE_PATH)


# -- model values against pandas ----------------------------------------------------------


def pandas_evidence(table) -> dict:
    """{(feature, subclass or None, value): evidence} and the prior, straight from pandas."""
    t = np.asarray(table).astype(object)
    df = pd.DataFrame(t[:, 4:].T, columns=t[:, 0])
    df = df[df[LABEL].isin(["Y", "N"])]
    out = {("prior", None, None): np.log(((df[LABEL] == "Y").sum() + 2)
                                         / ((df[LABEL] == "N").sum() + 2))}
    for f in MODEL_FEATURES[1:]:
        vocab = list(VOCAB[f])
        d = df[df[f].isin(vocab)]
        groups = ([(s, d[d[SUBCLASS] == s]) for s in SUBCLASSES] if f in CONDITIONED
                  else [(None, d)])
        for s, g in groups:
            ct = pd.crosstab(g[f], g[LABEL]).reindex(index=vocab, columns=["N", "Y"],
                                                      fill_value=0)
            p = (ct + 2) / (ct.sum(axis=0) + 2 * len(vocab))
            for v in vocab:
                out[(f, s, v)] = float(np.log(p.loc[v, "Y"]) - np.log(p.loc[v, "N"]))
    return out


def check_model_against_pandas(table, model):
    ev = pandas_evidence(table)
    assert model.shape == MODEL_SHAPE
    assert np.isnan(model[~MODEL_USED]).all()
    assert not np.isnan(model[MODEL_USED]).any()
    for r, c in np.argwhere(MODEL_USED):
        f, s, v = describe_model_cell(r, c)
        key = ("prior", None, None) if r == 0 else (f, s, v)
        assert model[r, c] == pytest.approx(ev.pop(key), rel=1e-12, abs=1e-12), key
    assert not ev, f"model lacks entries {list(ev)[:5]}"


def test_model_equals_pandas_on_the_real_table(real):
    check_model_against_pandas(real, pipeline(real)["model"])


@pytest.mark.parametrize("seed, patients", [(0, 96), (1, 300)])
def test_model_equals_pandas_on_generated_tables(seed, patients):
    table = generate_table(seed, patients)
    check_model_against_pandas(table, pipeline(table)["model"])


def test_model_equals_pandas_with_missing_and_unknown_values():
    table = small_table(shuffle=True)
    check_model_against_pandas(table, pipeline(table)["model"])


def test_model_layout_helpers():
    assert MODEL_SHAPE == (18, 42) and N_SLOTS == 6
    assert describe_model_cell(0, 0) == (LABEL, None, None)
    assert describe_model_cell(K["HISTO"], 2) == ("HISTO", None, "LCA")
    assert describe_model_cell(K["COLLER_MYC"], model_column(6, 1)) == ("COLLER_MYC", "c6", "L")
    # conditioned rows fill subclass blocks 1..6 only; the others block 0 only
    assert MODEL_USED[K["mTOR_UP.v1"]].sum() == 12 and not MODEL_USED[K["mTOR_UP.v1"], :6].any()
    assert MODEL_USED[K[SUBCLASS]].tolist() == [True] * 6 + [False] * 36
    assert MODEL_USED.sum() == 1 + 3 + 2 + 2 + 6 + 6 * 12 + 7 * 2


# -- predictions --------------------------------------------------------------------------


def test_prediction_sums_are_prior_plus_pandas_evidence(real):
    d = pipeline(real)
    ev = pandas_evidence(real)
    t = np.asarray(real).astype(object)
    df = pd.DataFrame(t[:, 4:].T, columns=t[:, 0])
    expected = np.full(len(df), ev[("prior", None, None)])
    for f in MODEL_FEATURES[1:]:
        sub = df[SUBCLASS] if f in CONDITIONED else [None] * len(df)
        expected += [ev.get((f, s, v), 0.0) for s, v in zip(sub, df[f])]
    assert np.allclose(d["predict"].sum(axis=1), expected, rtol=0, atol=1e-12)
    # a missing value contributes exactly 0
    na = df["Amp_8q24.21"].to_numpy() == MISSING
    assert na.any() and (d["predict"][na, K["Amp_8q24.21"]] == 0.0).all()


def test_predictions_are_bit_identical_across_runs_and_string_dtypes(real):
    a = pipeline(real)
    b = pipeline(real)
    c = pipeline(real.astype(object).astype("U"))
    assert a["predict"].tobytes() == b["predict"].tobytes() == c["predict"].tobytes()
    assert a["model"].tobytes() == c["model"].tobytes()


def test_training_accuracy_on_the_real_table_beats_the_majority_class(real, record_property):
    d = pipeline(real)
    (tp, fn), (fp, tn) = d["validate"].tolist()
    truth = real[0, 4:]
    assert tp + fn == int((truth == "Y").sum()) and fp + tn == int((truth == "N").sum())
    accuracy = (tp + tn) / (tp + fn + fp + tn)
    majority = max(tp + fn, fp + tn) / (tp + fn + fp + tn)
    record_property("training_accuracy", accuracy)
    print(f"\nreal table training accuracy {accuracy:.3f} (majority class {majority:.3f}); "
          f"confusion [[TP, FN], [FP, TN]] = {d['validate'].tolist()}")
    assert accuracy > majority + 0.05


def test_generated_table_is_learnable():
    d = pipeline(generate_table(seed=0, patients=960))
    (tp, fn), (fp, tn) = d["validate"].tolist()
    assert (tp + tn) / (tp + fn + fp + tn) > 0.7 > max(tp + fn, fp + tn) / 960


def test_validate_counts_only_known_truth_and_predictions():
    klass = np.array([["Y"], ["Y"], ["N"], ["N"], ["?"], ["Y"]], dtype=STRING)
    t = np.array([["Y"], ["N"], ["Y"], ["N"], ["Y"], [MISSING]], dtype=STRING)
    op = bind(Validate(), klass, t)
    out, _, _ = run_chunked(op, [klass, t])
    assert out.tolist() == [[1, 1], [1, 1]]


# -- string handling ----------------------------------------------------------------------


@pytest.mark.parametrize("cast", [lambda a: a.astype(object).astype("U"),
                                  lambda a: a.astype(object)], ids=["U", "object"])
def test_kernels_accept_fixed_width_and_object_strings(small, cast):
    for name, (op, inputs) in small["ops"].items():
        conv = [cast(a) if a.dtype == STRING else a for a in inputs]
        again = bind(type(op)(**op.params()), *conv, name=name)
        got = run_chunked(again, conv)[0]
        assert np.asarray(got).tolist() == np.asarray(small[name]).tolist() or (
            np.array_equal(got, small[name], equal_nan=True)), name


def test_extract_takes_the_model_columns_in_order(small):
    t, names = small["transpose"], small["names"]
    for k, f in enumerate(MODEL_FEATURES):
        j = names[0].tolist().index(f)
        assert small["extract"][:, k].tolist() == t[:, j].tolist()


def test_extract_gives_na_for_an_absent_feature_and_names_lineage_everywhere():
    t, names = split_table(small_table(shuffle=False))
    names = names.copy()
    names[0, names[0].tolist().index("MET")] = "not MET"
    op = bind(Extract(), t, names)
    out, full, pay = run_chunked(op, [t, names], modes=MODES)
    assert set(out[:, K["MET"]].tolist()) == {MISSING}
    f = frontier(op.out_shape, [(3, K["MET"])])
    assert not full_backward(full, f, 0, op.in_shapes[0]).any()
    assert full_backward(full, f, 1, op.in_shapes[1]).all()
    assert payload_backward(op, pay, f, 1, default=False).all()


def test_first_match_semantics_of_names():
    t, names = split_table(small_table(shuffle=False))
    j = names[0].tolist().index("HISTO")
    op = bind(Extract(), t, names)
    base = run_chunked(op, [t, names])[0][:, K["HISTO"]]
    later, earlier = names.copy(), names.copy()
    later[0, j + 1] = "HISTO"      # a later duplicate does not matter
    earlier[0, j - 1] = "HISTO"    # an earlier one wins: the prefix is lineage
    assert run_chunked(op, [t, later])[0][:, K["HISTO"]].tolist() == base.tolist()
    assert run_chunked(op, [t, earlier])[0][:, K["HISTO"]].tolist() == t[:, j - 1].tolist()


# -- lineage ------------------------------------------------------------------------------

CELLS = {
    "extract": [[(0, 0)], [(4, K["mTOR_UP.v1"])], [(11, 17)], [(0, 1), (5, K[SUBCLASS])],
                [(7, K["MET"])], [(p, 10) for p in range(12)]],
    "model": [[(0, 0)], [(K["HISTO"], 2)], [(K["mTOR_UP.v1"], model_column(3, 1))],
              [(K[SUBCLASS], 5)], [(K["MET"], 10)], [(K["Del_6q"], 0), (K["RIBAVIRIN_RSV"],
                                                                          model_column(6, 0))],
              [(K["GLI1_UP.v1_DN"], 0)]],
    "predict": [[(0, 0)], [(0, K["HISTO"])], [(0, K["mTOR_UP.v1"])], [(1, K["COLLER_MYC"])],
                [(8, K["COLLER_MYC"])], [(7, K["MET"])], [(5, K[SUBCLASS])], [(3, 11)],
                [(2, 2), (9, K["HISTIDINE_METABOLISM"]), (10, 0)]],
    "validate": [[(0, 0)], [(1, 0)], [(0, 1), (1, 1)]],
}
CASES = [(op, i) for op in CELLS for i in range(len(CELLS[op]))]


def lineage(op, inputs, mode):
    """backward(frontier, i) read from the pairs the op reports in ``mode``."""
    _, full, pay = run_chunked(op, inputs, modes=(mode,))
    if mode is Mode.PAY:
        assert pay is not None and full is None
        return lambda f, i: payload_backward(op, pay, f, i, default=False)
    assert full is not None and pay is None
    return lambda f, i: full_backward(full, f, i, op.in_shapes[i])


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("name, case", CASES)
def test_lineage_is_sound_by_perturbation(small, name, case, mode):
    op, inputs = small["ops"][name]
    cells = np.array(CELLS[name][case])
    assert_sound_by_perturbation(op, inputs, cells, backward=lineage(op, inputs, mode),
                                 trials=4, seed=case)


@pytest.mark.parametrize("name, case", CASES)
def test_payload_and_full_lineage_are_the_same_sets(small, name, case):
    op, inputs = small["ops"][name]
    f = frontier(op.out_shape, np.array(CELLS[name][case]))
    pay, full = lineage(op, inputs, Mode.PAY), lineage(op, inputs, Mode.FULL)
    for i in range(len(inputs)):
        assert np.array_equal(pay(f, i), full(f, i)), (name, i)


@pytest.mark.parametrize("name", ["extract", "model", "predict"])
def test_random_cells_are_sound_and_pay_equals_full(small, name):
    op, inputs = small["ops"][name]
    rng = np.random.default_rng(11)
    pay, full = lineage(op, inputs, Mode.PAY), lineage(op, inputs, Mode.FULL)
    for trial in range(4):
        cells = np.argwhere(rng.random(op.out_shape) < 0.05)
        f = frontier(op.out_shape, cells)
        assert all(np.array_equal(pay(f, i), full(f, i)) for i in range(len(inputs)))
        assert_sound_by_perturbation(op, inputs, cells, backward=pay, trials=2, seed=trial)


def cells_of(mask):
    return set(map(tuple, np.argwhere(mask).tolist()))


def test_exact_lineage_of_an_extract_cell(small):
    op, inputs = small["ops"]["extract"]
    j = small["names"][0].tolist().index("YU_CMYC")
    f = frontier(op.out_shape, [(6, K["YU_CMYC"])])
    back = lineage(op, inputs, Mode.PAY)
    assert cells_of(back(f, 0)) == {(6, j)}
    assert cells_of(back(f, 1)) == {(0, c) for c in range(j + 1)}


def test_exact_lineage_of_model_entries(small):
    op, inputs = small["ops"]["model"]
    names = small["names"][0].tolist()
    j_r, j_c = names.index(LABEL), names.index(SUBCLASS)
    back = lineage(op, inputs, Mode.FULL)
    p = small["transpose"].shape[0]
    cond = frontier(op.out_shape, [(K["COLLER_MYC"], model_column(2, 0))])
    assert cells_of(back(cond, 0)) == {(q, K["COLLER_MYC"]) for q in range(p)}
    assert cells_of(back(cond, 1)) == {(q, j) for q in range(p) for j in (j_r, j_c)}
    assert cells_of(back(cond, 2)) == {(0, c) for c in range(max(j_r, j_c) + 1)}
    prior = frontier(op.out_shape, [(0, 0)])
    assert not back(prior, 0).any()
    assert cells_of(back(prior, 1)) == {(q, j_r) for q in range(p)}
    unused = frontier(op.out_shape, np.argwhere(~MODEL_USED))
    assert not any(back(unused, i).any() for i in range(3))


def test_exact_lineage_of_predictions(small):
    op, inputs = small["ops"]["predict"]
    names = small["names"][0].tolist()
    j_c = names.index(SUBCLASS)
    back = lineage(op, inputs, Mode.PAY)
    mt = K["mTOR_UP.v1"]
    # patient 0 has mTOR missing: the contribution is 0 whatever the model or subclass
    f = frontier(op.out_shape, [(0, mt)])
    assert small["predict"][0, mt] == 0.0
    assert [cells_of(back(f, i)) for i in range(4)] == [set(), {(0, mt)}, set(), set()]
    # patient 1 has no subclass: no model entry, but its subclass cell and names matter
    f = frontier(op.out_shape, [(1, mt)])
    assert small["predict"][1, mt] == 0.0
    assert [cells_of(back(f, i)) for i in range(3)] == [set(), {(1, mt)}, {(1, j_c)}]
    assert cells_of(back(f, 3)) == {(0, c) for c in range(j_c + 1)}
    # a known value of a conditioned feature: the entry of the patient's subclass
    s = SUBCLASSES.index(str(small["extract"][3, K[SUBCLASS]]))
    v = VOCAB["mTOR_UP.v1"].index(str(small["extract"][3, mt]))
    f = frontier(op.out_shape, [(3, mt)])
    assert cells_of(back(f, 0)) == {(mt, model_column(s + 1, v))}
    # the prior column reads the prior only
    f = frontier(op.out_shape, [(5, 0)])
    assert [cells_of(back(f, i)) for i in range(4)] == [{(0, 0)}, set(), set(), set()]


def test_validate_mapping_functions_match_its_trace(small):
    op, inputs = small["ops"]["validate"]
    assert Mode.MAP in op.supported_modes()
    assert_mapping_matches_trace(op, inputs, split=1)
    assert op.all_to_all(0) and not op.all_to_all(1)


def test_payloads_are_small(small):
    limits = {"extract": 2, "model": 4, "predict": 3, "validate": 2}
    for name, (op, inputs) in small["ops"].items():
        _, _, pay = run_chunked(op, inputs, modes=(Mode.PAY,))
        assert pay.payload.lengths.max() <= limits[name], name
        assert len(pay) <= {"extract": 18, "model": 2}.get(name, len(pay))


def test_full_lineage_at_9600_patients_is_a_few_bulk_calls(monkeypatch):
    d = pipeline(scale_table(generate_table(seed=2, patients=96), 100))
    calls = []
    orig = TaskContext.lwrite_pairs
    monkeypatch.setattr(TaskContext, "lwrite_pairs",
                        lambda self, *a, **k: (calls.append(1), orig(self, *a, **k))[1])
    monkeypatch.setattr(TaskContext, "lwrite", lambda *a, **k: pytest.fail("per-pair lwrite"))
    for name, (op, inputs) in d["ops"].items():
        calls.clear()
        _, full, pay = run_chunked(op, inputs, modes=MODES)
        assert full is not None and pay is not None, name
        assert 2 <= len(calls) <= 4, name


# -- shapes -------------------------------------------------------------------------------


def test_shape_errors_name_the_shapes():
    t = np.full((4, 20), "L", dtype=STRING)
    names = np.full((1, 19), "x", dtype=STRING)
    with pytest.raises(ShapeError, match=r"\(4, 20\) and \(1, 19\)"):
        bind(Extract(), t, names)
    names = np.full((1, 20), "x", dtype=STRING)
    ext = np.full((4, 18), "L", dtype=STRING)
    with pytest.raises(ShapeError, match="model must be"):
        bind(Predict(), np.zeros((18, 40)), ext, t, names)
    with pytest.raises(ShapeError, match="extract must be"):
        bind(Model(), ext[:3], t, names)
    with pytest.raises(ShapeError, match="truth_column .* Got 20"):
        bind(Validate(20), np.full((4, 1), "Y", dtype=STRING), t)
