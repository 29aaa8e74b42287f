"""The four UDFs of the genomics workflow (medulloblastoma relapse; WORKFLOWS.md "Genomics").

The workflow trains a naive-Bayes relapse model on a patients x features string matrix and
applies it to the same patients (UDFs marked, inputs in brackets)::

    names       (1 x F)   [table]                                built-in
    transpose   (P x F)   [subsample of table]                   built-in
    extract  E  (P x 18)  [transpose, names]                     UDF
    model    F  (18 x 42) [extract, transpose, names]            UDF
    predict  H  (P x 18)  [model, extract, transpose, names]     UDF
    cumodds, prob, klass (P x 1)  [predict]                      built-ins
    validate G  (2 x 2)   [klass, transpose]                     UDF

``F`` is the number of feature rows of the table (56 in the real one), ``P`` the number of
patients. Every UDF here runs as one task (:data:`operators.base.GLOBAL`): extract and
predict are row-parallel in principle, but their inputs are not blocks of their outputs,
which is what the finer parallelizations of :mod:`operators.base` assume.

Arrays and layouts
------------------
``transpose`` : P x F strings, one row per patient, one column per table feature.
``names`` : 1 x F strings, the feature names (column 0 of the table, transposed).
``extract`` (:class:`Extract`) : P x 18 strings, column ``k`` is feature
    ``MODEL_FEATURES[k]`` (column 0 is RELAPSE). A model feature absent from ``names`` gives
    a column of ``"NA"`` (the workflow's loader refuses such tables; the kernel stays total
    so that lineage tests may perturb names freely).
``model`` (:class:`Model`) : 18 x 42 float64, the evidence table. Row ``k`` belongs to
    ``MODEL_FEATURES[k]``; column ``block * 6 + slot`` holds the evidence for value
    ``VOCAB[feature][slot]`` among the patients of ``block``: block 0 is all patients,
    block ``b`` in 1..6 is subclass ``SUBCLASSES[b - 1]`` (C6_CLUSTER == "c<b>").
    Unconditioned features fill block 0 only; the six pathway.dep.outcome features
    (:data:`CONDITIONED`) fill blocks 1..6 only. Row 0 (RELAPSE) holds the prior log-odds
    of relapse at column 0. Every other cell is NaN; :data:`MODEL_USED` marks the used ones.
``predict`` (:class:`Predict`) : P x 18 float64. Column 0 is the prior log-odds
    (``model[0, 0]``) for every patient, column ``k >= 1`` the log-odds contribution of the
    patient's value of feature ``k``: ``model[k, block * 6 + slot]``, or 0 when the value is
    missing (``"NA"`` or outside the vocabulary) or, for a conditioned feature, when the
    patient's subclass is. A row sums to the posterior log-odds of relapse.
``klass`` : P x 1 strings ``"Y"``/``"N"`` (built-ins: row sum, logistic, > 0.5).
``validate`` (:class:`Validate`) : 2 x 2 int64 confusion counts
    ``[[TP, FN], [FP, TN]]``: rows are the true class (Y, N), columns the predicted class
    (Y, N). Patients whose truth or prediction is neither Y nor N are not counted.

The model
---------
For predictive feature ``f`` with vocabulary ``V`` (:data:`VOCAB`), among the patients of a
block whose RELAPSE is Y or N and whose value of ``f`` is in ``V``::

    n_c(v) = number of those patients with relapse c and value v      (c in {Y, N})
    N_c    = sum over v in V of n_c(v)
    P(v | c) = (n_c(v) + 2) / (N_c + 2 |V|)          # pseudo-count 2 added to every value
    evidence(v) = log P(v | Y) - log P(v | N)

and the prior is ``log((N_Y + 2) / (N_N + 2))`` over all patients with RELAPSE Y or N.
RELAPSE and C6_CLUSTER are read from ``transpose`` through ``names`` (first column whose
name matches); the predictive features' values from ``extract`` by position.

Lineage (what each payload stores, and what its payload function returns)
--------------------------------------------------------------------------
Names are matched to the *first* equal cell, scanning from column 0, so a lookup that found
column ``j`` depends on names cells ``0..j`` (an earlier cell equal to the name would have
won; later cells cannot matter). A name that is absent depends on the whole names row.

PAY writes one pair per distinct payload (18, 2, about 20 and 1 pairs for E, F, H, G);
FULL writes region pairs in two bulk calls at most, one pair per cell for the per-patient
inputs and one pair per group of cells for the shared ones (names, whole columns).

* Extract, output ``(p, k)``: transpose ``(p, j_k)`` and names ``0..j_k``, where ``j_k`` is
  the column of ``MODEL_FEATURES[k]`` (absent: names only, all of them).
  Payload: ``j_k`` as ``<u2`` (2 bytes), one pair per output column.
* Model, used entry ``(k, c)``: extract column ``k`` (all patients; none for the prior row),
  the RELAPSE column ``j_R`` of transpose (all patients), for a conditioned feature also the
  C6_CLUSTER column ``j_C`` (all patients), and names ``0..max(j_R, j_C)``. For a
  conditioned feature this over-approximates slightly: the values of patients outside the
  entry's subclass do not matter, but which patients those are depends on the data.
  Unused (NaN) entries have no lineage. Payload: ``(j_R, j_C)`` as two ``<u2`` (4 bytes;
  ``j_C = 0xFFFF`` for unconditioned rows); the row ``k`` comes from the entry itself.
* Predict, output ``(p, 0)``: model ``(0, 0)``. Output ``(p, k)``, ``k >= 1``: extract
  ``(p, k)``; if that value is in the vocabulary and ``k`` is conditioned, also transpose
  ``(p, j_C)`` and names ``0..j_C``; if a model entry was looked up, model ``(k, c)``.
  Payload: ``(c, j_C)`` as ``<u1`` and ``<u2`` (3 bytes; ``c = 0xFF`` when no entry was
  used, ``j_C = 0xFFFF`` when the subclass was not read).
* Validate, every output: all of klass and the truth column of transpose (all patients).
  Payload: the truth column as ``<u2``. Its lineage does not depend on data, so it also
  has mapping functions (MAP).

Example
-------
>>> import numpy as np
>>> names = np.array([list(MODEL_FEATURES)], dtype=STRING)
>>> transpose = np.full((3, 18), "NA", dtype=STRING)
>>> extract_kernel(transpose, find_columns(names[0], MODEL_FEATURES)).shape
(3, 18)
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import UDF, Shape
from subzero.cells import Ragged
from subzero.errors import ShapeError
from subzero.modes import Mode
from subzero.operator import GLOBAL
from subzero.runtime import TaskContext

STRING = np.dtypes.StringDType()
MISSING = "NA"
PSEUDO = 2.0

LABEL = "RELAPSE"
SUBCLASS = "C6_CLUSTER"
CLINICAL = ("HISTO", "MET")
PATHWAY = ("YU_CMYC",)
CONDITIONED = ("mTOR_UP.v1", "HOGERKORP_CD44_UP", "COLLER_MYC", "HISTIDINE_METABOLISM",
               "GLI1_UP.v1_DN", "RIBAVIRIN_RSV")
GENOMIC = ("Amp_8q24.21", "Amp_2p24.3", "Del_6q", "Del_16q", "Del_16q23.3", "Amp_7q21.3",
           "Amp_3q26.32")
#: The 18 model features, in the column order of ``extract`` and the row order of ``model``.
MODEL_FEATURES = (LABEL, *CLINICAL, *PATHWAY, SUBCLASS, *CONDITIONED, *GENOMIC)
SUBCLASSES = ("c1", "c2", "c3", "c4", "c5", "c6")
#: Value vocabulary of every model feature (sorted); other values count as missing.
VOCAB: dict[str, tuple[str, ...]] = {
    LABEL: ("N", "Y"),
    "HISTO": ("CLASSIC", "DESMO", "LCA"),
    "MET": ("N", "Y"),
    "YU_CMYC": ("H", "L"),
    SUBCLASS: SUBCLASSES,
    **{f: ("H", "L") for f in CONDITIONED},
    **{f: ("0", "1") for f in GENOMIC},
}
N_FEATURES = len(MODEL_FEATURES)
N_SLOTS = max(len(v) for v in VOCAB.values())  # 6
N_BLOCKS = 1 + len(SUBCLASSES)  # all patients, then one block per subclass
MODEL_SHAPE = (N_FEATURES, N_BLOCKS * N_SLOTS)  # (18, 42)
IS_CONDITIONED = np.array([f in CONDITIONED for f in MODEL_FEATURES])

NONE8 = 0xFF
NONE16 = 0xFFFF


def model_column(block: int, slot: int) -> int:
    """Column of the model holding ``slot`` of ``block`` (0 = all patients, b = subclass b).

    >>> model_column(2, 1)
    13
    """
    return block * N_SLOTS + slot


def _model_used() -> np.ndarray:
    used = np.zeros(MODEL_SHAPE, dtype=bool)
    used[0, 0] = True  # the prior
    for k, f in enumerate(MODEL_FEATURES[1:], start=1):
        blocks = range(1, N_BLOCKS) if IS_CONDITIONED[k] else (0,)
        for b in blocks:
            used[k, model_column(b, 0) : model_column(b, len(VOCAB[f]))] = True
    return used


#: Which model cells hold evidence (the others are NaN and have no lineage).
MODEL_USED = _model_used()


def describe_model_cell(row: int, col: int) -> tuple[str, str | None, str | None]:
    """``(feature, subclass or None, value or None)`` of a model cell; ``value`` is None for
    the prior and for unused cells.

    >>> describe_model_cell(5, model_column(3, 0))
    ('mTOR_UP.v1', 'c3', 'H')
    """
    f = MODEL_FEATURES[row]
    block, slot = divmod(col, N_SLOTS)
    sub = SUBCLASSES[block - 1] if block else None
    if not MODEL_USED[row, col] or row == 0:
        return f, sub, None
    return f, sub, VOCAB[f][slot]


# ---------------------------------------------------------------------------------------
# pure kernels (numpy in, numpy out)
# ---------------------------------------------------------------------------------------


def as_strings(a: Any) -> np.ndarray:
    """``a`` as a StringDType array (accepts StringDType, ``<U`` and object arrays of str)."""
    a = np.asarray(a)
    return a if a.dtype == STRING else a.astype(STRING)


def find_columns(names_row: np.ndarray, wanted: Sequence[str]) -> np.ndarray:
    """Index of the first cell of ``names_row`` equal to each wanted name, or
    ``len(names_row)`` when absent (int64).

    >>> find_columns(np.array(["a", "b", "a"]), ["a", "b", "z"]).tolist()
    [0, 1, 3]
    """
    row = as_strings(names_row).reshape(-1)
    eq = row[None, :] == np.asarray(list(wanted), dtype=STRING)[:, None]
    found = eq.any(axis=1)
    return np.where(found, eq.argmax(axis=1), len(row)).astype(np.int64)


def encode(values: np.ndarray, vocab: Sequence[str]) -> np.ndarray:
    """Slot of each value in ``vocab``; -1 for ``"NA"`` and any value outside it (int64)."""
    values = as_strings(values)
    codes = np.full(values.shape, -1, dtype=np.int64)
    for c, v in enumerate(vocab):  # at most 6 vectorized comparisons
        codes[values == v] = c
    return codes


def column_codes(transpose: np.ndarray, j: int, vocab: Sequence[str]) -> np.ndarray:
    """Codes of transpose column ``j`` against ``vocab``; all -1 when the column is absent."""
    if j >= transpose.shape[1]:
        return np.full(transpose.shape[0], -1, dtype=np.int64)
    return encode(transpose[:, j], vocab)


def extract_kernel(transpose: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Columns ``cols`` of ``transpose`` (``"NA"`` where a column is absent), StringDType."""
    t = as_strings(transpose)
    found = cols < t.shape[1]
    picked = t[:, np.where(found, cols, 0)] if t.shape[1] else np.full(
        (t.shape[0], len(cols)), MISSING, dtype=STRING)
    return np.where(found[None, :], picked, np.asarray(MISSING, dtype=STRING)).astype(STRING)


def _evidence(counts: np.ndarray, n_vocab: int) -> np.ndarray:
    """Log-likelihood ratios from counts ``[..., class (N, Y), value]`` (pseudo-count 2)."""
    counts = counts.astype(np.float64)
    tot = counts.sum(axis=-1, keepdims=True)
    p = (counts + PSEUDO) / (tot + PSEUDO * n_vocab)
    return np.log(p[..., 1, :]) - np.log(p[..., 0, :])


def model_kernel(extract: np.ndarray, labels: np.ndarray, subclass: np.ndarray) -> np.ndarray:
    """The evidence table (layout in the module docstring).

    Parameters
    ----------
    extract : P x 18 strings (columns in :data:`MODEL_FEATURES` order; column 0 unused).
    labels : P ints, 0 = N, 1 = Y, -1 = missing (the RELAPSE codes).
    subclass : P ints, 0..5 = c1..c6, -1 = missing (the C6_CLUSTER codes).
    """
    model = np.full(MODEL_SHAPE, np.nan)
    ok = labels >= 0
    n_y = int((labels == 1).sum())
    model[0, 0] = np.log((n_y + PSEUDO) / (int(ok.sum()) - n_y + PSEUDO))
    nb = len(SUBCLASSES)
    for k in range(1, N_FEATURES):
        vocab = VOCAB[MODEL_FEATURES[k]]
        nv = len(vocab)
        c = encode(extract[:, k], vocab)
        if IS_CONDITIONED[k]:
            keep = ok & (c >= 0) & (subclass >= 0)
            key = (subclass[keep] * 2 + labels[keep]) * nv + c[keep]
            counts = np.bincount(key, minlength=nb * 2 * nv).reshape(nb, 2, nv)
            ev = _evidence(counts, nv)  # (subclass, value)
            for b in range(nb):
                model[k, model_column(b + 1, 0) : model_column(b + 1, nv)] = ev[b]
        else:
            keep = ok & (c >= 0)
            counts = np.bincount(labels[keep] * nv + c[keep], minlength=2 * nv).reshape(2, nv)
            model[k, 0:nv] = _evidence(counts, nv)
    return model


def predict_kernel(model: np.ndarray, extract: np.ndarray, subclass: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per patient and feature, the log-odds contribution looked up in ``model``.

    Returns ``(out, mcol, used_sub)``: the P x 18 contributions, the model column each
    cell looked up (-1: none, the contribution is 0) and whether the cell read the
    patient's subclass (P x 18 bool).
    """
    p = extract.shape[0]
    mcol = np.full((p, N_FEATURES), -1, dtype=np.int64)
    used_sub = np.zeros((p, N_FEATURES), dtype=bool)
    mcol[:, 0] = 0
    for k in range(1, N_FEATURES):
        c = encode(extract[:, k], VOCAB[MODEL_FEATURES[k]])
        if IS_CONDITIONED[k]:
            used_sub[:, k] = c >= 0
            block = subclass + 1  # 0 when the subclass is missing
            mcol[:, k] = np.where((c >= 0) & (block > 0), block * N_SLOTS + c, -1)
        else:
            mcol[:, k] = np.where(c >= 0, c, -1)
    rows = np.broadcast_to(np.arange(N_FEATURES), mcol.shape)
    looked = np.asarray(model, dtype=np.float64)[rows, np.maximum(mcol, 0)]
    out = np.where(mcol >= 0, looked, 0.0)
    return out, mcol, used_sub


def confusion(klass: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """``[[TP, FN], [FP, TN]]`` of predictions ``klass`` against ``truth`` (Y/N strings)."""
    t = encode(truth, ("Y", "N"))
    q = encode(klass, ("Y", "N"))
    ok = (t >= 0) & (q >= 0)
    return np.bincount(t[ok] * 2 + q[ok], minlength=4).reshape(2, 2).astype(np.int64)


# ---------------------------------------------------------------------------------------
# lineage helpers
# ---------------------------------------------------------------------------------------


def _prefix(j: int, width: int) -> np.ndarray:
    """Names cells (linear indices in a 1 x width row) read to look a name up at ``j``."""
    return np.arange(min(int(j), width - 1) + 1, dtype=np.uint64)


def _column(j: int, shape: Shape) -> np.ndarray:
    """Linear indices of column ``j`` of a 2-d array (empty when ``j`` is out of range)."""
    if j >= shape[1]:
        return np.empty(0, dtype=np.uint64)
    return (np.arange(shape[0], dtype=np.uint64) * np.uint64(shape[1]) + np.uint64(j))


def _group(out_lin: np.ndarray, keys: np.ndarray) -> tuple[Ragged, np.ndarray]:
    """Group output cells by an integer key: (Ragged of cells per key, the unique keys)."""
    uniq, inv = np.unique(keys, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    return Ragged.from_lengths(out_lin[order], np.bincount(inv, minlength=len(uniq))), uniq


def _u16(values: Sequence[int] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype="<u2").reshape(-1, 1).view(np.uint8)


def _check_names_width(op: UDF, width: int) -> None:
    if width >= NONE16:
        raise ShapeError(
            f"operator {op.name!r}: at most {NONE16 - 1} features fit the 2-byte payloads. "
            f"Got {width}."
        )


def _check_table_pair(op: UDF, transpose: Shape, names: Shape) -> None:
    if len(transpose) != 2 or len(names) != 2 or names[0] != 1 or names[1] != transpose[1]:
        raise ShapeError(
            f"operator {op.name!r}: expected transpose (patients, F) and names (1, F). Got "
            f"{tuple(transpose)} and {tuple(names)}."
        )
    _check_names_width(op, names[1])


class _GenomicsUDF(UDF):
    parallelism = GLOBAL

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.PAY, Mode.FULL, Mode.BLACKBOX})


# ---------------------------------------------------------------------------------------
# E: extract
# ---------------------------------------------------------------------------------------


class Extract(_GenomicsUDF):
    """UDF E: the 18 model features as columns (RELAPSE first).

    Inputs ``(transpose P x F, names 1 x F)``; output P x 18 strings. Output ``(p, k)``
    depends on transpose ``(p, j_k)`` and names ``0..j_k``; payload ``j_k`` (``<u2``).

    >>> from subzero.testing import bind, run_chunked
    >>> names = np.array([["X", *MODEL_FEATURES]], dtype=STRING)
    >>> t = np.array([["x", *(["NA"] * 18)]], dtype=STRING)
    >>> op = bind(Extract(), t, names)
    >>> out, _, pay = run_chunked(op, [t, names], modes=(Mode.PAY,))
    >>> op.map_p(np.array([[0, 0]]), pay.payload_bytes(0), 1).tolist()
    [0, 1]
    """

    n_inputs = 2

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        _check_table_pair(self, in_shapes[0], in_shapes[1])
        return (in_shapes[0][0], N_FEATURES)

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype(STRING)

    def run(self, ctx: TaskContext, transpose: np.ndarray, names: np.ndarray) -> np.ndarray:
        cols = find_columns(names[0], MODEL_FEATURES)
        out = extract_kernel(transpose, cols)
        p, width = out.shape[0], self.in_shapes[1][1]
        lin = np.arange(p * N_FEATURES, dtype=np.uint64).reshape(p, N_FEATURES)
        by_column = Ragged.from_dense(np.ascontiguousarray(lin.T))
        if ctx.payload:
            ctx.lwrite_pairs(by_column, payloads=_u16(cols))
        if ctx.full:
            found = cols < width
            # one pair per cell for the patient's value; one per column for the names read
            cells = lin[:, found].reshape(-1)
            src = (np.arange(p, dtype=np.uint64)[:, None] * np.uint64(width)
                   + cols[found].astype(np.uint64)[None, :]).reshape(-1)
            ctx.lwrite_pairs(Ragged.from_singletons(cells), Ragged.from_singletons(src), None)
            ctx.lwrite_pairs(by_column, None,
                             Ragged.from_rows([_prefix(j, width) for j in cols]))
        return out

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        j = int(np.frombuffer(payload, dtype="<u2")[0])
        width = self.in_shapes[1][1]
        if i == 1:
            return _prefix(j, width)
        if j >= width:
            return np.empty(0, dtype=np.uint64)
        rows = np.unique(np.asarray(outcells, dtype=np.int64)[:, 0]).astype(np.uint64)
        return rows * np.uint64(width) + np.uint64(j)


# ---------------------------------------------------------------------------------------
# F: model
# ---------------------------------------------------------------------------------------


class Model(_GenomicsUDF):
    """UDF F: the naive-Bayes evidence table (18 x 42 float64; layout in the module doc).

    Inputs ``(extract P x 18, transpose P x F, names 1 x F)``. A used entry ``(k, c)``
    depends on extract column ``k``, the RELAPSE (and, if conditioned, C6_CLUSTER) column of
    transpose and names ``0..max(j_R, j_C)``; payload ``(j_R, j_C)`` (two ``<u2``).
    """

    n_inputs = 3

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        ext, t, names = in_shapes
        _check_table_pair(self, t, names)
        if tuple(ext) != (t[0], N_FEATURES):
            raise ShapeError(
                f"operator {self.name!r}: extract must be (patients, {N_FEATURES}) with the "
                f"patients of transpose {tuple(t)}. Got {tuple(ext)}."
            )
        return MODEL_SHAPE

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype(np.float64)

    def run(self, ctx: TaskContext, extract: np.ndarray, transpose: np.ndarray,
            names: np.ndarray) -> np.ndarray:
        t = as_strings(transpose)
        j_r, j_c = (int(v) for v in find_columns(names[0], (LABEL, SUBCLASS)))
        labels = column_codes(t, j_r, VOCAB[LABEL])
        sub = column_codes(t, j_c, SUBCLASSES)
        model = model_kernel(as_strings(extract), labels, sub)
        if ctx.payload:
            cells = np.flatnonzero(MODEL_USED).astype(np.uint64)
            rows = cells // np.uint64(MODEL_SHAPE[1])
            key = IS_CONDITIONED[rows.astype(np.intp)].astype(np.int64)
            groups, uniq = _group(cells, key)
            pay = _u16([[j_r, j_c if u else NONE16] for u in uniq]).reshape(len(uniq), 4)
            ctx.lwrite_pairs(groups, payloads=pay)
        if ctx.full:
            ext_shape, t_shape = self.in_shapes[0], self.in_shapes[1]
            width = self.in_shapes[2][1]
            outs, exts, ts, ns = [], [], [], []
            for k in range(N_FEATURES):
                outs.append(np.flatnonzero(MODEL_USED[k]).astype(np.uint64)
                            + np.uint64(k * MODEL_SHAPE[1]))
                exts.append(_column(k, ext_shape) if k else np.empty(0, dtype=np.uint64))
                cols = [j_r, j_c] if IS_CONDITIONED[k] else [j_r]
                ts.append(np.concatenate([_column(j, t_shape) for j in cols]))
                ns.append(_prefix(max(cols), width))
            ctx.lwrite_pairs(Ragged.from_rows(outs), Ragged.from_rows(exts),
                             Ragged.from_rows(ts), Ragged.from_rows(ns))
        return model

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        j_r, j_c = (int(v) for v in np.frombuffer(payload, dtype="<u2")[:2])
        cols = [j_r] if j_c == NONE16 else [j_r, j_c]
        if i == 2:
            return _prefix(max(cols), self.in_shapes[2][1])
        if i == 1:
            return np.concatenate([_column(j, self.in_shapes[1]) for j in cols])
        rows = np.unique(np.asarray(outcells, dtype=np.int64)[:, 0])
        rows = rows[rows > 0]  # the prior does not read extract
        return np.concatenate([_column(int(k), self.in_shapes[0]) for k in rows]
                              + [np.empty(0, dtype=np.uint64)])


# ---------------------------------------------------------------------------------------
# H: predict
# ---------------------------------------------------------------------------------------


class Predict(_GenomicsUDF):
    """UDF H: per patient and feature, the log-odds contribution (P x 18 float64).

    Inputs ``(model 18 x 42, extract P x 18, transpose P x F, names 1 x F)``. Output
    ``(p, k)`` depends on extract ``(p, k)``, on the model entry looked up, and, for a
    conditioned feature with a known value, on the patient's C6_CLUSTER cell and names
    ``0..j_C``; ``(p, 0)`` on model ``(0, 0)`` only. Payload ``(c, j_C)`` (3 bytes).
    """

    n_inputs = 4

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        model, ext, t, names = in_shapes
        _check_table_pair(self, t, names)
        if tuple(model) != MODEL_SHAPE:
            raise ShapeError(f"operator {self.name!r}: model must be {MODEL_SHAPE}. "
                             f"Got {tuple(model)}.")
        if tuple(ext) != (t[0], N_FEATURES):
            raise ShapeError(
                f"operator {self.name!r}: extract must be (patients, {N_FEATURES}) with the "
                f"patients of transpose {tuple(t)}. Got {tuple(ext)}."
            )
        return (t[0], N_FEATURES)

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype(np.float64)

    def run(self, ctx: TaskContext, model: np.ndarray, extract: np.ndarray,
            transpose: np.ndarray, names: np.ndarray) -> np.ndarray:
        t = as_strings(transpose)
        j_c = int(find_columns(names[0], (SUBCLASS,))[0])
        sub = column_codes(t, j_c, SUBCLASSES)
        out, mcol, used_sub = predict_kernel(model, as_strings(extract), sub)
        p = out.shape[0]
        lin = np.arange(p * N_FEATURES, dtype=np.uint64)
        if ctx.payload:
            code = np.where(mcol >= 0, mcol, NONE8).reshape(-1)
            jc = np.where(used_sub, j_c, NONE16).reshape(-1)
            groups, uniq = _group(lin, code * 65536 + jc)
            pay = np.empty((len(uniq), 3), dtype=np.uint8)
            pay[:, 0] = uniq // 65536
            pay[:, 1:] = _u16(uniq % 65536)
            ctx.lwrite_pairs(groups, payloads=pay)
        if ctx.full:
            t_shape, width = self.in_shapes[2], self.in_shapes[3][1]
            rows = np.broadcast_to(np.arange(N_FEATURES), mcol.shape)
            has_m = (mcol >= 0).reshape(-1)
            m_lin = (rows * MODEL_SHAPE[1] + mcol).reshape(-1)[has_m].astype(np.uint64)
            has_e = (rows > 0).reshape(-1)
            has_t = used_sub.reshape(-1) & (j_c < t_shape[1])
            t_lin = (np.arange(p, dtype=np.uint64)[:, None] * np.uint64(t_shape[1])
                     + np.uint64(min(j_c, t_shape[1] - 1)))
            t_lin = np.broadcast_to(t_lin, mcol.shape).reshape(-1)[has_t]
            ctx.lwrite_pairs(
                Ragged.from_singletons(lin),
                Ragged.from_lengths(m_lin, has_m.astype(np.int64)),
                Ragged.from_lengths(lin[has_e], has_e.astype(np.int64)),
                Ragged.from_lengths(t_lin, has_t.astype(np.int64)),
                None,
            )
            # every cell that read the subclass read the same names: one pair
            sub_cells = lin[used_sub.reshape(-1)]
            if len(sub_cells):
                ctx.lwrite_pairs(Ragged.from_rows([sub_cells]), None, None, None,
                                 Ragged.from_rows([_prefix(j_c, width)]))
        return out

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        cells = np.asarray(outcells, dtype=np.int64).reshape(-1, 2)
        c = payload[0]
        j_c = int(np.frombuffer(payload[1:3], dtype="<u2")[0])
        if i == 0:
            if c == NONE8:
                return np.empty(0, dtype=np.uint64)
            return (cells[:, 1] * MODEL_SHAPE[1] + c).astype(np.uint64)
        if i == 1:
            keep = cells[cells[:, 1] > 0]
            return (keep[:, 0] * N_FEATURES + keep[:, 1]).astype(np.uint64)
        if j_c == NONE16:
            return np.empty(0, dtype=np.uint64)
        if i == 3:
            return _prefix(j_c, self.in_shapes[3][1])
        width = self.in_shapes[2][1]
        if j_c >= width:
            return np.empty(0, dtype=np.uint64)
        rows = np.unique(cells[:, 0]).astype(np.uint64)
        return rows * np.uint64(width) + np.uint64(j_c)


# ---------------------------------------------------------------------------------------
# G: validate
# ---------------------------------------------------------------------------------------


class Validate(_GenomicsUDF):
    """UDF G: confusion counts ``[[TP, FN], [FP, TN]]`` of klass against the truth.

    Inputs ``(klass P x 1, transpose P x F)``; the truth is transpose column
    ``truth_column`` (0: RELAPSE is the table's first feature row, and validate has no
    names input to look it up). Every count depends on all of klass and the whole truth
    column; payload: ``truth_column`` (``<u2``). The lineage does not depend on data, so
    MAP works too.

    >>> v = Validate()
    >>> v.params()
    {'truth_column': 0}
    """

    n_inputs = 2

    def __init__(self, truth_column: int = 0) -> None:
        self.truth_column = int(truth_column)

    def params(self) -> dict[str, Any]:
        return {"truth_column": self.truth_column}

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.PAY, Mode.FULL, Mode.BLACKBOX})

    def whole_input(self, i: int) -> bool:
        # every count reads every prediction; of transpose it reads one column only
        return i == 0

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        klass, t = in_shapes
        if len(klass) != 2 or len(t) != 2 or klass != (t[0], 1):
            raise ShapeError(
                f"operator {self.name!r}: expected klass (patients, 1) and transpose "
                f"(patients, F). Got {tuple(klass)} and {tuple(t)}."
            )
        if not 0 <= self.truth_column < min(t[1], NONE16):
            raise ShapeError(
                f"operator {self.name!r}: truth_column must be a column of transpose "
                f"{tuple(t)}. Got {self.truth_column}."
            )
        return (2, 2)

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype(np.int64)

    def run(self, ctx: TaskContext, klass: np.ndarray, transpose: np.ndarray) -> np.ndarray:
        out = confusion(np.asarray(klass)[:, 0], np.asarray(transpose)[:, self.truth_column])
        box = ctx.chunk.out_box
        if ctx.payload:
            ctx.lwrite_pairs(Ragged.from_rows([box.linear(self.out_shape)]),
                             payloads=_u16([self.truth_column]).reshape(1, 2))
        if ctx.full:
            ctx.lwrite_pairs(Ragged.from_rows([box.linear(self.out_shape)]),
                             Ragged.from_rows([np.arange(self.in_shapes[0][0])]),
                             Ragged.from_rows([_column(self.truth_column, self.in_shapes[1])]))
        return out[box.slices]

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> np.ndarray:
        if i == 0:
            return np.arange(self.in_shapes[0][0], dtype=np.uint64)
        return _column(int(np.frombuffer(payload, dtype="<u2")[0]), self.in_shapes[1])

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        hit = bool(frontier_out.any())
        if i == 0:
            return np.full(self.in_shapes[0], hit)
        res = np.zeros(self.in_shapes[1], dtype=bool)
        res[:, self.truth_column] = hit
        return res

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        hit = frontier_in.any() if i == 0 else frontier_in[:, self.truth_column].any()
        return np.full(self.out_shape, bool(hit))

    def all_to_all(self, i: int) -> bool:
        return i == 0


__all__ = [
    "Extract", "Model", "Predict", "Validate", "MODEL_FEATURES", "VOCAB", "SUBCLASSES", "GENOMIC",
    "CONDITIONED", "LABEL", "SUBCLASS", "MODEL_SHAPE", "MODEL_USED", "N_SLOTS", "N_BLOCKS",
    "model_column", "describe_model_cell", "find_columns", "encode", "extract_kernel",
    "model_kernel", "predict_kernel", "confusion", "as_strings", "STRING", "MISSING",
    "PSEUDO",
]
