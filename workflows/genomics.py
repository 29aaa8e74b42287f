"""The medulloblastoma relapse-prediction workflow (WORKFLOWS.md "Genomics"; paper Fig. 2).

A naive-Bayes model of relapse is trained on a patients x features table and applied to the
same patients::

    table (F x (4 + P) strings)
      -> names     = column 0 transposed (1 x F)                      built-in (subarray)
      -> subsample = rows 0..F-1, columns 4..  (F x P)                 built-in (subarray)
      -> transpose (P x F)                                             built-in
    extract  (transpose, names)                        -> P x 18       UDF E
    model    (extract, transpose, names)               -> 18 x 42      UDF F
    predict  (model, extract, transpose, names)        -> P x 18       UDF H
    cumodds  = per-patient row sum (P x 1); prob = logistic; klass = "Y" if prob > 0.5
    validate (klass, transpose)                        -> 2 x 2        UDF G

10 operators, 4 of them UDFs (:mod:`workflows.genomics_udfs` documents their layouts and
lineage). The table is the real file (``--input table=PATH``; by default
``$SUBZERO_DATA/medulloblastoma/MD_train_set.txt`` or ``../shared/data`` when present), or a
generated table of the same schema; its patient columns are repeated ``scale`` times
(default 100: 9,600 patients).

Strategies (paper Table II, genomics): ``blackbox`` (UDFs black box, built-ins map),
``full-one``, ``full-many``, ``full-compact``, ``full-forw``, ``full-both``, ``pay-one``,
``pay-many``, ``pay-both``, and ``optimized`` (``subzero run genomics --strategy
optimized`` plans with the strategy optimizer under a disk budget).

Named queries (paper Figure 6): ``bad-hospital`` traces one training cell forward to the
model; ``full`` traces a block of 50 training cells forward to the predictions (klass);
``high-likelihood`` traces the model entry with the strongest evidence back to the training
matrix; ``relapse`` traces one patient predicted to relapse back to the training matrix.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Mapping

import numpy as np

from operators import Classify, Logistic, Reduce, Subarray, Transpose
from subzero import settings
from subzero.cells import Box
from subzero.errors import WorkflowError
from subzero.modes import (BLACKBOX, FULL_COMPACT_BWD, FULL_MANY_BWD, FULL_ONE_BWD,
                           FULL_ONE_FWD, PAY_MANY_BWD, PAY_ONE_BWD)
from subzero.workflow import NamedQuery, Workflow, plan_blackbox_opt
from workflows.genomics_data import (N_DESCRIPTION, check_values, data_path, generate_table,
                                     load_table,
                                     scale_table)
from workflows.params import parse_int, parse_seed
from workflows.genomics_udfs import (LABEL, MODEL_FEATURES, MODEL_USED, Extract, Model,
                                     Predict, Validate)

NAME = "genomics"
DESCRIPTION = ("medulloblastoma relapse prediction: naive-Bayes model, 10 operators, 4 UDFs "
               "(real table when available, patients x100)")
QUERY_SEED = 11


#: bytes a table cell takes in the driver's memory while the table is built (StringDType
#: cell, its copies while scaled and cast), for refusing a ``scale`` that cannot fit
CELL_BYTES = 64


def _table_memory() -> int:
    """half of this machine's memory (of 16 GiB when it is unknown)"""
    return (settings.memory() or 1 << 34) // 2


#: the memory the driver may give the table while it builds it: the rest is the JVM's,
#: Spark's and the run's own
TABLE_MEMORY = settings.define(
    "GENOMICS_TABLE_MEMORY", _table_memory, settings.size,
    "Memory the genomics workflow's table may take in the driver while it is built; a "
    "scale whose table would not fit is refused.",
    module=__name__)


def check_scale(scale: int, rows: int, patients: int) -> None:
    """Refuse a ``scale`` whose table (``rows`` x (4 + ``patients`` x scale) cells) cannot
    fit in :data:`TABLE_MEMORY`, naming the largest that can."""
    limit = TABLE_MEMORY
    need = rows * (N_DESCRIPTION + patients * scale) * CELL_BYTES
    if need > limit:
        most = max(1, (limit // (rows * CELL_BYTES) - N_DESCRIPTION) // max(1, patients))
        raise WorkflowError(f"scale={scale} makes a table of {patients * scale:,} patients, "
                            f"about {need / 2 ** 30:,.0f} GiB in memory; expected a scale of "
                            f"at most {most:,} on this machine")


def build(inputs: Mapping[str, str] | None = None, scale: Any = 100, seed: Any = 0,
          patients: Any = 96) -> Workflow:
    """The 10-operator workflow.

    Parameters
    ----------
    inputs : ``{"table": path}`` of a tab-separated table like MD_train_set.txt.
    scale : how many times the patient columns are repeated (100 -> 9,600 patients).
    seed, patients : for the generated table, when no real one is found.
    """
    inputs = dict(inputs or {})
    unknown = set(inputs) - {"table"}
    if unknown:
        raise WorkflowError(f"workflow 'genomics' has no input {sorted(unknown)[0]!r} "
                            "(inputs: table)")
    scale = parse_int(scale, "scale", 1)
    seed, patients = parse_seed(seed), parse_int(patients, "patients", 1)
    path = inputs.get("table") or (str(data_path()) if data_path() else None)
    if not path:
        check_scale(1, len(MODEL_FEATURES), patients)
    base = load_table(path) if path else generate_table(seed, patients)
    if path:
        check_values(base, path)
    check_scale(scale, base.shape[0], base.shape[1] - N_DESCRIPTION)
    table = scale_table(base, scale)
    names_col = list(np.asarray(table[:, 0]).tolist())
    if LABEL not in names_col:
        raise WorkflowError(f"the table has no {LABEL} feature row")
    truth = names_col.index(LABEL)
    n_feat, width = table.shape
    params = {"scale": scale, "data": "file" if path else "generated",
              "patients": (width - N_DESCRIPTION), "seed": seed}
    wf = Workflow(NAME, DESCRIPTION, params=params)
    wf.input("table", table.shape, table.dtype,
             source=partial(_given, table) if "table" not in inputs else None,
             loader=partial(_scaled_table, scale=scale),
             description="feature rows x (4 description columns + patients), strings",
             origin=(f"{path}, x{scale}" if path
                     else f"generated, seed {seed}, {width - N_DESCRIPTION} patients"))
    wf.add("names", Subarray(":, 0", axes=(1, 0)), "table")
    wf.add("subsample", Subarray(f"0:{n_feat}, {N_DESCRIPTION}:"), "table")
    wf.add("transpose", Transpose(), "subsample")
    wf.add("extract", Extract(), "transpose", "names")
    wf.add("model", Model(), "extract", "transpose", "names")
    wf.add("predict", Predict(), "model", "extract", "transpose", "names")
    wf.add("cumodds", Reduce("sum", axis=1), "predict")
    wf.add("prob", Logistic(), "cumodds")
    wf.add("klass", Classify(0.5), "prob")
    wf.add("validate", Validate(truth_column=truth), "klass", "transpose")
    for name, rule in genomics_plans().items():
        wf.plan_named(name, rule)
    feature_cols = [names_col.index(f) for f in MODEL_FEATURES]
    for q in named_queries(width - N_DESCRIPTION, feature_cols):
        wf.query(q)
    return wf


def genomics_plans() -> dict[str, Any]:
    """Table II for genomics: built-ins keep their mapping functions, every UDF (validate
    included, though its lineage is data-independent) stores what the strategy names."""
    table = {
        "blackbox": [BLACKBOX],
        "full-one": [FULL_ONE_BWD], "full-many": [FULL_MANY_BWD],
        "full-compact": [FULL_COMPACT_BWD], "full-forw": [FULL_ONE_FWD],
        "full-both": [FULL_ONE_BWD, FULL_ONE_FWD],
        "pay-one": [PAY_ONE_BWD], "pay-many": [PAY_MANY_BWD],
        "pay-both": [PAY_ONE_BWD, FULL_ONE_FWD],
    }
    return {name: partial(_udf_strategies, ss) for name, ss in table.items()}


def _udf_strategies(strategies: list, op: Any) -> list:
    """A genomics plan's rule: built-ins keep their mapping, a UDF stores ``strategies``
    (those of its modes)."""
    if op.kind != "udf":
        return plan_blackbox_opt(op)
    return [s for s in strategies if s.mode in op.supported_modes()] or [BLACKBOX]


# ---------------------------------------------------------------------------------------
# the paper's queries
# ---------------------------------------------------------------------------------------


def summary(run: Any) -> list[str]:
    """The model's training accuracy: predictions (``klass``) against RELAPSE."""
    (tp, fn), (fp, tn) = np.asarray(run.array("validate")).tolist()
    n = tp + fn + fp + tn
    if n == 0:
        return ["validate: no patient with both a prediction and a known RELAPSE"]
    return [f"model: training accuracy {(tp + tn) / n:.3f} on {n:,} patients with a known "
            f"RELAPSE (TP {tp}, FN {fn}, FP {fp}, TN {tn})"]


def _strongest_entry(run: Any) -> np.ndarray:
    model = run.array("model")
    ev = np.where(MODEL_USED, np.abs(np.nan_to_num(model, nan=0.0)), -1.0)
    ev[0, 0] = -1.0  # the prior is not a feature's evidence
    return np.array([np.unravel_index(int(np.argmax(ev)), model.shape)])


def _relapse_patient(run: Any) -> np.ndarray:
    klass = run.array("klass").astype(object).astype("U")
    rows = np.flatnonzero(klass[:, 0] == "Y")
    if not len(rows):
        rows = np.arange(klass.shape[0])
    rng = np.random.default_rng(QUERY_SEED)
    return np.array([[int(rng.choice(rows)), 0]])


def _given(value: Any, *_: Any) -> Any:
    """``value`` itself (an input's data, a query's fixed cells): a module-level function, so
    that the bound workflow pickles without cloudpickle."""
    return value


def _scaled_table(path: str, scale: Any) -> np.ndarray:
    return scale_table(load_table(path), scale)


def named_queries(patients: int, feature_cols: list[int]) -> list[NamedQuery]:
    rng = np.random.default_rng(QUERY_SEED)
    # one training value of a clinical feature of one patient ("a bad hospital's record")
    p = int(rng.integers(0, patients))
    hospital = np.array([[p, feature_cols[MODEL_FEATURES.index("HISTO")]]])
    # a block of 50 training cells: 10 patients x 5 consecutive model-feature columns
    p0 = int(rng.integers(0, max(1, patients - 10)))
    cols = sorted(feature_cols[1:])
    c0 = cols[int(rng.integers(0, max(1, len(cols) - 5)))]
    block = Box((p0, c0), (min(patients, p0 + 10), c0 + 5))
    return [
        NamedQuery("bad-hospital", "forward", "transpose", partial(_given, hospital),
                   to="model", description="one training value forward to the model"),
        NamedQuery("full", "forward", "transpose", partial(_given, block), to="klass",
                   description="a block of 50 training values forward to the predictions"),
        NamedQuery("high-likelihood", "backward", "model", _strongest_entry, to="transpose",
                   description="the strongest model entry back to the training matrix"),
        NamedQuery("relapse", "backward", "klass", _relapse_patient, to="transpose",
                   description="one predicted relapse back to the training matrix"),
    ]
