"""The medulloblastoma table: loading, scaling, generating, finding the real file."""

from pathlib import Path

import numpy as np
import pytest

from subzero.errors import SubZeroError
from workflows import genomics_data as gd
from workflows.genomics_data import (
    RELATIVE_PATH, TABLE_FEATURES, TableError, data_path, generate_table, load_table,
    scale_table,
)
from workflows.genomics_udfs import MISSING, MODEL_FEATURES, STRING, VOCAB

HEADER = "Feature\tDescription\tType\tContext"


def write_table(path: Path, features=MODEL_FEATURES, patients=("p1", "p2"), value="NA",
                newline="\n") -> Path:
    lines = [HEADER + "".join(f"\t{p}" for p in patients)]
    lines += [f"{f}\t\tdiscrete\t" + "".join(f"\t{value}" for _ in patients) for f in features]
    path.write_text(newline.join(lines) + newline)
    return path


@pytest.fixture(scope="module")
def real(shared_data):
    return load_table(shared_data / RELATIVE_PATH)


def non_missing_values(row: np.ndarray) -> set[str]:
    return set(row.tolist()) - {MISSING}


# -- the real file ----------------------------------------------------------------------


def test_real_table_is_56_features_by_4_plus_96_patients_of_strings(real):
    assert real.shape == (56, 100)
    assert real.dtype == STRING
    assert tuple(real[:, 0].tolist()) == TABLE_FEATURES
    assert real[0, 1] == "target" and set(real[:, 2].tolist()) == {"discrete"}


def test_real_table_cells_are_stripped(real):
    # the file has a stray "A " in STATUS; stripping makes it the value "A"
    cells = real.astype(object)
    assert all(c == c.strip() for c in cells.reshape(-1))
    assert set(real[1, 4:].tolist()) == {"A", "D", MISSING}


def test_real_model_feature_vocabularies_are_the_hardcoded_ones(real):
    names = real[:, 0].tolist()
    for f in MODEL_FEATURES:
        assert non_missing_values(real[names.index(f), 4:]) == set(VOCAB[f]), f


# -- errors -------------------------------------------------------------------------------


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(TableError, match="no patient-feature table at .*nope.txt"):
        load_table(tmp_path / "nope.txt")
    with pytest.raises(SubZeroError):
        load_table(tmp_path)  # a directory


@pytest.mark.parametrize("text, message", [
    ("", "is empty"),
    ("\n\n", "is empty"),
    ("Name\tDescription\tType\tContext\tp1\nRELAPSE\t\t\t\tY\n", "header must start with"),
    (HEADER + "\n" + "RELAPSE\t\t\t\n", "no patient columns"),
    (HEADER + "\tp1\n", "no feature rows"),
    (HEADER + "\tp1\tp2\nRELAPSE\t\t\t\tY\tN\nHISTO\t\t\t\tLCA\n", "line 3: 5 .*header has 6"),
])
def test_malformed_tables_raise_one_line_errors(tmp_path, text, message):
    p = tmp_path / "t.txt"
    p.write_text(text)
    with pytest.raises(TableError, match=message) as err:
        load_table(p, require_model_features=False)
    assert "\n" not in str(err.value)


def test_non_utf8_file_is_a_table_error(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes(b"Feature\tDescription\tType\tContext\tp\xff\n")
    with pytest.raises(TableError, match="cannot read"):
        load_table(p)


def test_missing_and_repeated_model_features_are_refused(tmp_path):
    p = write_table(tmp_path / "a.txt", features=[f for f in MODEL_FEATURES if f != "MET"])
    with pytest.raises(TableError, match="missing from column 0: MET"):
        load_table(p)
    assert load_table(p, require_model_features=False).shape == (17, 6)
    q = write_table(tmp_path / "b.txt", features=[*MODEL_FEATURES, "HISTO"])
    with pytest.raises(TableError, match="more than once: HISTO"):
        load_table(q)


def test_crlf_and_trailing_blank_lines_load_like_lf(tmp_path):
    a = load_table(write_table(tmp_path / "lf.txt", value="Y"))
    b = load_table(write_table(tmp_path / "crlf.txt", value="Y", newline="\r\n"))
    (tmp_path / "blank.txt").write_text((tmp_path / "lf.txt").read_text() + "\n\n")
    c = load_table(tmp_path / "blank.txt")
    assert a.shape == (18, 6)
    assert a.tolist() == b.tolist() == c.tolist()


# -- scaling ------------------------------------------------------------------------------


def test_scale_table_repeats_patient_columns_only():
    t = generate_table(seed=2, patients=5)
    s = scale_table(t, 3)
    assert s.shape == (56, 4 + 15)
    assert s[:, :4].tolist() == t[:, :4].tolist()
    for r in range(3):
        assert s[:, 4 + 5 * r : 9 + 5 * r].tolist() == t[:, 4:].tolist()
    assert scale_table(t, 1).tolist() == t.tolist()


@pytest.mark.parametrize("n", [0, -2, 1.5, True, "2"])
def test_scale_factor_must_be_a_positive_int(n):
    with pytest.raises(TableError, match="scale factor"):
        scale_table(generate_table(patients=2), n)


def test_scale_table_refuses_a_table_without_patients():
    with pytest.raises(TableError, match="Got shape"):
        scale_table(np.array([["RELAPSE", "", "discrete", ""]], dtype=STRING), 2)


# -- generation ---------------------------------------------------------------------------


def test_generated_table_is_deterministic_per_seed():
    a, b, c = generate_table(7, 30), generate_table(7, 30), generate_table(8, 30)
    assert a.dtype == STRING and a.shape == (56, 34)
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()


@pytest.mark.parametrize("patients", [0, -1, 2.0])
def test_generate_refuses_bad_patient_counts(patients):
    with pytest.raises(TableError, match="patients must be a positive int"):
        generate_table(patients=patients)


def test_generated_model_features_use_exactly_the_model_vocabularies():
    t = generate_table(seed=0, patients=960)
    names = t[:, 0].tolist()
    for f in MODEL_FEATURES:
        assert non_missing_values(t[names.index(f), 4:]) == set(VOCAB[f]), f


def test_generated_table_has_the_real_schema_and_na_rates(real):
    gen = generate_table(seed=0, patients=4800)
    assert gen[:, :4].tolist() == real[:, :4].tolist()
    for r, f in enumerate(TABLE_FEATURES):
        g, v = gen[r, 4:], real[r, 4:]
        if f == "SURVIVAL":
            assert all(float(x) > 0 for x in non_missing_values(g))
        else:
            assert non_missing_values(g) == non_missing_values(v), f
        na_gen, na_real = float(np.mean(g == MISSING)), float(np.mean(v == MISSING))
        assert abs(na_gen - na_real) < 0.03, (f, na_gen, na_real)


def test_generated_genomic_features_are_missing_for_the_same_patients():
    t = generate_table(seed=4, patients=200)
    names = t[:, 0].tolist()
    na = np.stack([t[names.index(f), 4:] == MISSING for f in gd.GENOMIC])
    assert na.any() and (na == na[0]).all()


# -- finding the real file ----------------------------------------------------------------


def test_data_path_prefers_subzero_data(tmp_path, monkeypatch):
    write_table((tmp_path / RELATIVE_PATH.parent).mkdir(parents=True) or tmp_path / RELATIVE_PATH)
    monkeypatch.setenv("SUBZERO_DATA", str(tmp_path))
    assert data_path() == tmp_path / RELATIVE_PATH


def test_data_path_falls_back_to_shared_dir_then_none(tmp_path, monkeypatch):
    empty, shared = tmp_path / "empty", tmp_path / "shared"
    empty.mkdir()
    monkeypatch.setenv("SUBZERO_DATA", str(empty))
    monkeypatch.setattr(gd, "SHARED_DATA_DIR", shared)
    assert data_path() is None
    (shared / RELATIVE_PATH.parent).mkdir(parents=True)
    write_table(shared / RELATIVE_PATH)
    assert data_path() == shared / RELATIVE_PATH
    monkeypatch.delenv("SUBZERO_DATA")
    assert data_path() == shared / RELATIVE_PATH
