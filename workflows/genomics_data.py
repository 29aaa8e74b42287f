"""The medulloblastoma patient-feature table: load the real one, scale it, or generate one.

The table (``MD_train_set.txt``) is tab-separated: a header row, then one row per feature
(56 in the real file); columns 0..3 are Feature, Description, Type, Context, then one
column per patient (96). Values are short strings (Y/N, L/H, 0/1, c1..c6, CLASSIC/DESMO/LCA,
survival months) or ``NA``.

In SubZero the table is a 2-d string array (numpy StringDType, as zarr stores it) of shape
``(features, 4 + patients)`` **without the header row**, so that row ``i`` is feature ``i``
and the workflow's ``names`` (column 0) and ``subsample`` (rows 0.., columns 4..) operators
index it directly. Cells are stripped of surrounding whitespace (the real file has a stray
``"A "``).

>>> t = generate_table(seed=1, patients=10)
>>> t.shape, str(t[0, 0]), str(t[0, 1])
((56, 14), 'RELAPSE', 'target')
>>> scale_table(t, 3).shape
(56, 34)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from subzero.errors import SubZeroError
from workflows.genomics_udfs import (
    CONDITIONED, GENOMIC, LABEL, MISSING, MODEL_FEATURES, STRING, SUBCLASSES, VOCAB,
)

#: The four descriptive columns before the patients.
DESCRIPTION_COLUMNS = ("Feature", "Description", "Type", "Context")
N_DESCRIPTION = len(DESCRIPTION_COLUMNS)
#: Where the real table lives under a data directory.
RELATIVE_PATH = Path("medulloblastoma") / "MD_train_set.txt"
#: The shared data directory next to the repository (used when $SUBZERO_DATA is unset).
SHARED_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"


class TableError(SubZeroError):
    """A patient-feature table that is missing or malformed."""


# ---------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------


def data_path() -> Path | None:
    """The real table: ``$SUBZERO_DATA/medulloblastoma/MD_train_set.txt`` if it exists,
    else ``../shared/data/...`` next to the repository if present, else None."""
    env = os.environ.get("SUBZERO_DATA")
    for base in ([Path(env)] if env else []) + [SHARED_DATA_DIR]:
        p = base / RELATIVE_PATH
        if p.is_file():
            return p
    return None


def load_table(path: str | os.PathLike, require_model_features: bool = True) -> np.ndarray:
    """Read a patient-feature table into a ``(features, 4 + patients)`` StringDType array
    (header row dropped, cells stripped).

    Raises :class:`TableError` when the file is missing, unreadable, empty, has a header
    that does not start with Feature, Description, Type, Context, rows of different widths,
    no patient column, or (with ``require_model_features``) lacks or repeats one of the 18
    model features.

    >>> p = data_path()
    >>> load_table(p).shape if p else (56, 100)
    (56, 100)
    """
    p = Path(path)
    if not p.is_file():
        raise TableError(f"no patient-feature table at {str(p)!r}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TableError(f"cannot read table {str(p)!r}: {e}") from None
    lines = [ln.rstrip("\r\n") for ln in text.splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise TableError(f"table {str(p)!r} is empty")
    header = [c.strip() for c in lines[0].split("\t")]
    if tuple(header[:N_DESCRIPTION]) != DESCRIPTION_COLUMNS:
        raise TableError(
            f"table {str(p)!r}: header must start with {', '.join(DESCRIPTION_COLUMNS)} "
            f"(tab-separated). Got {header[:N_DESCRIPTION]}."
        )
    if len(header) <= N_DESCRIPTION:
        raise TableError(f"table {str(p)!r} has no patient columns after "
                         f"{', '.join(DESCRIPTION_COLUMNS)}")
    rows = [ln.split("\t") for ln in lines[1:]]
    if not rows:
        raise TableError(f"table {str(p)!r} has a header but no feature rows")
    for n, r in enumerate(rows, start=2):
        if len(r) != len(header):
            raise TableError(
                f"table {str(p)!r} line {n}: {len(r)} tab-separated fields; the header has "
                f"{len(header)}"
            )
    table = np.strings.strip(np.array(rows, dtype=STRING))
    if require_model_features:
        check_model_features(table, str(p))
    return table


def check_model_features(table: np.ndarray, where: str = "table") -> None:
    """Raise :class:`TableError` unless each of the 18 model features is a feature row
    exactly once."""
    names = np.asarray(table)[:, 0].astype(STRING)
    missing = [f for f in MODEL_FEATURES if not (names == f).any()]
    if missing:
        raise TableError(f"{where}: model features missing from column 0: {', '.join(missing)}")
    twice = [f for f in MODEL_FEATURES if int((names == f).sum()) > 1]
    if twice:
        raise TableError(f"{where}: model features listed more than once: {', '.join(twice)}")


def check_values(table: np.ndarray, where: str = "table") -> None:
    """Raise :class:`TableError` when a model feature's row holds a value outside its
    vocabulary (``VOCAB``; other features may hold anything): ``NA`` or an empty cell is
    a missing value, except for the label, which every patient needs."""
    names = np.asarray(table)[:, 0].tolist()
    for f in MODEL_FEATURES:
        if f not in names:
            continue
        row = np.asarray(table)[names.index(f), N_DESCRIPTION:].tolist()
        allowed = set(VOCAB[f]) | (set() if f == LABEL else {MISSING, ""})
        bad = [(k, v) for k, v in enumerate(row) if v not in allowed]
        if bad:
            k, v = bad[0]
            raise TableError(f"{where}: feature {f} has value {v!r} for patient {k + 1} "
                             f"({len(bad)} such); expected one of "
                             f"{', '.join(sorted(allowed - {''}))}")


def scale_table(table: np.ndarray, n: int) -> np.ndarray:
    """The table with its patient columns repeated ``n`` times (``n = 100``: 9,600 patients).

    >>> t = np.array([["F", "", "discrete", "", "a", "b"]], dtype=STRING)
    >>> scale_table(t, 2)[0, 4:].tolist()
    ['a', 'b', 'a', 'b']
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise TableError(f"scale factor must be a positive int. Got {n!r}.")
    t = np.asarray(table)
    if t.ndim != 2 or t.shape[1] <= N_DESCRIPTION:
        raise TableError(
            f"a table is 2-d with {N_DESCRIPTION} description columns and patients. "
            f"Got shape {t.shape}."
        )
    return np.concatenate([t[:, :N_DESCRIPTION], np.tile(t[:, N_DESCRIPTION:], (1, int(n)))],
                          axis=1)


# ---------------------------------------------------------------------------------------
# generation
# ---------------------------------------------------------------------------------------

#: The 56 feature rows of the real table, in order.
TABLE_FEATURES = (
    "RELAPSE", "STATUS", "SURVIVAL", "HISTO", "MET", "YU_CMYC", "TRANSLATION_FACTORS",
    "BRCA_BRCA1_POS", "FLUMAZENILPATHWAY", "AGUIRRE_PANCREAS_CHR8", "MENSSEN_MYC_UP",
    "PENG_RAPAMYCIN_DN", "DSRNA", "HINATA_NFKB_DN", "P53_DN.v2", "IL22BPPATHWAY",
    "ABBUD_LIF_GH3_DN", "NGUYEN_KERATO", "POMEROY_DESMOPLASIC_VS_CLASSIC_MD_UP",
    "HSA04340_HEDGEHOG_SIGNALING_PATHWAY", "HINATA_NFKB", "RADAEVA_IFNA_DN", "RORIE_ES_PNET_UP",
    "SARCOMAS_LIPOSARCOMA", "GPCRS_CLASS_C_METABOTROPIC_GLUTAMATE_PHEROMONE",
    "DFOSB_BRAIN_2WKS_UP", "PARKINPATHWAY", "HSA05020_PARKINSONS_DISEASE", "MITRPATHWAY",
    "HSA04080_NEUROACTIVE_LIGAND_RECEPTOR_INTERACTION", "PHOTO_DN.v1", "CRX_DN.v1",
    "CtIP_DN.v1", "NRL_DN.v1", "WNT_UP.v1", "CHREBPPATHWAY", "NEUROTRANSMITTERSPATHWAY",
    "BCAT_UP.v1_UP", "ST_WNT_BETA_CATENIN_PATHWAY", "LEF1_UP.v1_UP", "TGFBETA_LATE_UP",
    "UVB_NHEK3_C6", "C6_CLUSTER", "mTOR_UP.v1", "HOGERKORP_CD44_UP", "COLLER_MYC",
    "HISTIDINE_METABOLISM", "GLI1_UP.v1_DN", "RIBAVIRIN_RSV", "Amp_8q24.21", "Amp_2p24.3",
    "Del_6q", "Del_16q", "Del_16q23.3", "Amp_7q21.3", "Amp_3q26.32",
)

# Counts in the real table (96 patients: 55 relapse N, 41 relapse Y), learned once from its
# structure and kept here because a new user's machine has no real file.
N_PATIENTS_REAL = 96
P_RELAPSE = 41 / 96
#: Features whose distribution depends on relapse: value counts (NA included) among the
#: relapse-N and the relapse-Y patients. This is the generator's signal.
BY_RELAPSE: dict[str, tuple[dict[str, int], dict[str, int]]] = {
    "HISTO": ({"CLASSIC": 37, "DESMO": 9, "LCA": 8, MISSING: 1},
              {"CLASSIC": 28, "DESMO": 4, "LCA": 8, MISSING: 1}),
    "MET": ({"N": 46, "Y": 7, MISSING: 2}, {"N": 26, "Y": 9, MISSING: 6}),
    "YU_CMYC": ({"H": 18, "L": 37}, {"H": 24, "L": 17}),
    "C6_CLUSTER": ({"c1": 5, "c2": 11, "c3": 14, "c4": 12, "c5": 5, "c6": 8},
                   {"c1": 9, "c2": 6, "c3": 14, "c4": 6, "c5": 4, "c6": 2}),
}
#: Genomic features are measured for some patients only (all NA otherwise): the share of
#: profiled patients among relapse N and Y, and the count of "1" among the profiled ones.
PROFILED = ((27, 55), (11, 41))
GENOMIC_ONES: dict[str, tuple[int, int]] = {
    "Amp_8q24.21": (2, 1), "Amp_2p24.3": (8, 6), "Del_6q": (5, 1), "Del_16q": (6, 8),
    "Del_16q23.3": (7, 8), "Amp_7q21.3": (7, 7), "Amp_3q26.32": (3, 5),
}
#: The six pathway.dep.outcome features: count of "H" over all patients. Their evidence
#: changes direction between subclasses (which is why the model conditions them on it).
CONDITIONED_H: dict[str, int] = {
    "mTOR_UP.v1": 40, "HOGERKORP_CD44_UP": 55, "COLLER_MYC": 41, "HISTIDINE_METABOLISM": 54,
    "GLI1_UP.v1_DN": 55, "RIBAVIRIN_RSV": 54,
}
CONDITIONED_EFFECT = 0.1  # P(H) moves by +-0.1 with relapse, the sign set by the subclass
#: Features independent of relapse: value counts over all 96 patients.
MARGINAL: dict[str, dict[str, int]] = {
    "STATUS": {"A": 65, "D": 29, MISSING: 2},
    **{f: {"L": 96 - h, "H": h} for f, h in {
        "TRANSLATION_FACTORS": 13, "BRCA_BRCA1_POS": 14, "FLUMAZENILPATHWAY": 14,
        "AGUIRRE_PANCREAS_CHR8": 14, "MENSSEN_MYC_UP": 15, "PENG_RAPAMYCIN_DN": 13,
        "DSRNA": 17, "HINATA_NFKB_DN": 18, "P53_DN.v2": 17, "IL22BPPATHWAY": 18,
        "ABBUD_LIF_GH3_DN": 17, "NGUYEN_KERATO": 18, "POMEROY_DESMOPLASIC_VS_CLASSIC_MD_UP": 28,
        "HSA04340_HEDGEHOG_SIGNALING_PATHWAY": 27, "HINATA_NFKB": 28, "RADAEVA_IFNA_DN": 29,
        "RORIE_ES_PNET_UP": 28, "SARCOMAS_LIPOSARCOMA": 27,
        "GPCRS_CLASS_C_METABOTROPIC_GLUTAMATE_PHEROMONE": 17, "DFOSB_BRAIN_2WKS_UP": 19,
        "PARKINPATHWAY": 20, "HSA05020_PARKINSONS_DISEASE": 19, "MITRPATHWAY": 18,
        "HSA04080_NEUROACTIVE_LIGAND_RECEPTOR_INTERACTION": 19, "PHOTO_DN.v1": 10,
        "CRX_DN.v1": 9, "CtIP_DN.v1": 8, "NRL_DN.v1": 8, "WNT_UP.v1": 9, "CHREBPPATHWAY": 8,
        "NEUROTRANSMITTERSPATHWAY": 10, "BCAT_UP.v1_UP": 9, "ST_WNT_BETA_CATENIN_PATHWAY": 11,
        "LEF1_UP.v1_UP": 10, "TGFBETA_LATE_UP": 10, "UVB_NHEK3_C6": 10,
    }.items()},
}
SURVIVAL_MONTHS = (4, 186)  # range of the real survival times
SURVIVAL_NA = 2 / 96


def _draw(rng: np.random.Generator, counts: dict[str, int], n: int) -> np.ndarray:
    """``n`` values drawn with the frequencies of ``counts`` (object array of str)."""
    values = np.array(list(counts), dtype=object)
    p = np.array(list(counts.values()), dtype=np.float64)
    return values[rng.choice(len(values), size=n, p=p / p.sum())]


def _by_class(rng: np.random.Generator, y: np.ndarray, counts: tuple[dict, dict]) -> np.ndarray:
    out = np.empty(len(y), dtype=object)
    for c in (0, 1):
        out[y == c] = _draw(rng, counts[c], int((y == c).sum()))
    return out


def generate_table(seed: int = 0, patients: int = 96) -> np.ndarray:
    """A synthetic table with the real one's schema: the same 56 features in the same order,
    the same value vocabularies and NA rates, and relapse signal in the model features
    (clinical, pathway, subclass and genomic features follow the real per-relapse
    frequencies; the six pathway.dep.outcome features carry subclass-dependent signal).
    Shape ``(56, 4 + patients)``, StringDType, deterministic for a seed.

    >>> a, b = generate_table(seed=3, patients=5), generate_table(seed=3, patients=5)
    >>> bool((a == b).all()), a.shape
    (True, (56, 9))
    """
    if isinstance(patients, bool) or not isinstance(patients, (int, np.integer)) or patients < 1:
        raise TableError(f"patients must be a positive int. Got {patients!r}.")
    n = int(patients)
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < P_RELAPSE).astype(np.int64)
    cols: dict[str, np.ndarray] = {LABEL: np.where(y == 1, "Y", "N").astype(object)}
    for f, counts in MARGINAL.items():
        cols[f] = _draw(rng, counts, n)
    months = rng.integers(SURVIVAL_MONTHS[0], SURVIVAL_MONTHS[1] + 1, n).astype(str)
    cols["SURVIVAL"] = np.where(rng.random(n) < SURVIVAL_NA, MISSING, months).astype(object)
    for f, counts in BY_RELAPSE.items():
        cols[f] = _by_class(rng, y, counts)
    sub = encode_subclass(cols["C6_CLUSTER"])
    for i, f in enumerate(CONDITIONED):
        base = CONDITIONED_H[f] / N_PATIENTS_REAL
        sign = np.where((sub + i) % 2 == 0, 1.0, -1.0)
        p_h = np.clip(base + CONDITIONED_EFFECT * sign * np.where(y == 1, 1.0, -1.0), 0.05, 0.95)
        cols[f] = np.where(rng.random(n) < p_h, "H", "L").astype(object)
    share = np.array([a / b for a, b in PROFILED])
    profiled = rng.random(n) < share[y]
    for f in GENOMIC:
        ones = np.array([GENOMIC_ONES[f][c] / PROFILED[c][0] for c in (0, 1)])
        val = np.where(rng.random(n) < ones[y], "1", "0")
        cols[f] = np.where(profiled, val, MISSING).astype(object)
    table = np.empty((len(TABLE_FEATURES), N_DESCRIPTION + n), dtype=object)
    table[:, 0] = TABLE_FEATURES
    table[:, 1] = ""
    table[0, 1] = "target"
    table[:, 2] = "discrete"
    table[:, 3] = ""
    for r, f in enumerate(TABLE_FEATURES):
        table[r, N_DESCRIPTION:] = cols[f]
    return table.astype(STRING)


def encode_subclass(values: np.ndarray) -> np.ndarray:
    """0..5 for c1..c6, -1 otherwise."""
    out = np.full(len(values), -1, dtype=np.int64)
    for i, s in enumerate(SUBCLASSES):
        out[np.asarray(values, dtype=object) == s] = i
    return out


__all__ = [
    "TableError", "data_path", "load_table", "check_model_features", "scale_table",
    "generate_table", "TABLE_FEATURES", "DESCRIPTION_COLUMNS", "SHARED_DATA_DIR",
]
