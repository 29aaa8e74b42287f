"""The built-in library as test cases: each an operator, tiny inputs, and a plain-numpy
reference. ``test_library.py`` runs every case through the same conformance checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from scipy import ndimage, special

from operators import (Affine, Binary, Cast, Classify, Concatenate, Convolve, Copy, Logistic,
                       MaskReplace, MatMul, MeanBroadcast, MedianFilter, Reduce, Reshape, Scalar,
                       Subarray, Transpose, Unary, Where)

S = np.dtypes.StringDType()
RNG = np.random.default_rng(7)

IMG = RNG.normal(100.0, 10.0, (13, 9))
IMG2 = RNG.normal(100.0, 10.0, (13, 9))
ONE = np.array([[2.5]])
U16 = RNG.integers(0, 60000, (13, 9)).astype(np.uint16)
U16[RNG.random((13, 9)) < 0.2] = 0  # dead pixels for badpixrm
MASK = RNG.random((13, 9)) < 0.3
MASK2 = RNG.random((13, 9)) < 0.5
PROB = RNG.random((13, 9))
VEC = RNG.normal(size=11)
CUBE = RNG.normal(size=(5, 4, 6))
STR = np.array([[f"f{i}.{j}" for j in range(9)] for i in range(13)], dtype=S)
STR_U = np.array([[f"u{i}{j}" for j in range(7)] for i in range(13)])  # fixed-width '<U'
GENO = RNG.choice(np.array(["Y", "N", "NA", "c1", "0"], dtype=S), (6, 10))
INT_A = RNG.integers(-5, 6, (13, 5)).astype(np.float64)  # integer-valued: exact in BLAS
INT_B = RNG.integers(-5, 6, (5, 9)).astype(np.float64)


def lines(x: np.ndarray, axes: Sequence[int], fn: str) -> np.ndarray:
    """Reference of a per-axis reduction as the library defines it: the reduced axes moved
    last and flattened into one line per kept position (keepdims)."""
    kept = [d for d in range(x.ndim) if d not in axes]
    y = np.transpose(x, kept + list(axes)).reshape([x.shape[d] for d in kept] + [-1])
    return np.expand_dims(getattr(np, fn)(y, axis=-1), tuple(axes))


@dataclass
class Case:
    id: str
    make: Callable[[], Any]
    inputs: list[np.ndarray]
    reference: Callable[..., np.ndarray]

    def __str__(self) -> str:
        return self.id


CASES: list[Case] = [
    # -- elementwise ---------------------------------------------------------------------
    Case("unary-sqrt", lambda: Unary("sqrt"), [np.abs(IMG)], np.sqrt),
    Case("unary-not-3d", lambda: Unary("not"), [CUBE > 0], np.logical_not),
    Case("unary-isnan-1d", lambda: Unary("isnan"), [np.where(VEC > 1, np.nan, VEC)], np.isnan),
    Case("binary-subtract-1x1", lambda: Binary("subtract"), [IMG, ONE], np.subtract),
    Case("binary-1x1-minus-image", lambda: Binary("-"), [ONE, IMG], np.subtract),
    Case("binary-greater", lambda: Binary(">"), [IMG, IMG2], np.greater),
    Case("binary-less-1x1", lambda: Binary("less"), [IMG, np.array([[100.0]])], np.less),
    Case("binary-and", lambda: Binary("and"), [MASK, MASK2], np.logical_and),
    Case("binary-row-by-col", lambda: Binary("multiply"), [IMG[:, :1], IMG2[:1, :]],
         np.multiply),
    Case("binary-equal-strings", lambda: Binary("equal"), [STR, STR[::-1].copy()], np.equal),
    Case("scalar-multiply", lambda: Scalar("multiply", 2.0), [IMG], lambda x: x * 2.0),
    Case("scalar-left-subtract-1d", lambda: Scalar("subtract", 1.0, left=True), [VEC],
         lambda x: 1.0 - x),
    Case("scalar-equal-string", lambda: Scalar("equal", "NA"), [GENO], lambda x: x == "NA"),
    Case("affine-u16", lambda: Affine(0.5, -500.0), [U16],
         lambda x: x.astype(np.float64) * 0.5 - 500.0),
    Case("cast-float64", lambda: Cast("float64"), [U16], lambda x: x.astype(np.float64)),
    Case("cast-to-strings", lambda: Cast(str), [U16], lambda x: x.astype(S)),
    Case("copy-stringdtype", lambda: Copy(), [STR], lambda x: x),
    Case("copy-fixed-width", lambda: Copy(), [STR_U], lambda x: x),
    Case("logistic", lambda: Logistic(), [IMG - 100.0], special.expit),
    Case("classify", lambda: Classify(0.5), [PROB],
         lambda x: np.where(x > 0.5, "Y", "N").astype(S)),
    Case("classify-3-labels", lambda: Classify([-1, 1], ["lo", "mid", "hi"]), [VEC],
         lambda x: np.select([x > 1, x > -1], ["hi", "mid"], "lo")),
    # -- merge / mask ---------------------------------------------------------------------
    Case("where-1x1-else", lambda: Where(), [MASK, IMG, ONE], np.where),
    Case("where-strings", lambda: Where(), [MASK, STR, np.array([["-"]], dtype=S)], np.where),
    Case("mask-replace-badpixrm", lambda: MaskReplace(90.0, bad_values=[0]), [U16, MASK],
         lambda x, m: np.where((x == 0) | m, 90.0, x)),
    # -- subarray / transpose / reshape / concatenate -------------------------------------
    Case("subarray-overscan-corner", lambda: Subarray("0:1, 0:1"), [IMG], lambda x: x[0:1, 0:1]),
    Case("subarray-strided", lambda: Subarray("1:12:3, 2:"), [IMG], lambda x: x[1:12:3, 2:]),
    Case("subarray-names-column-as-row", lambda: Subarray(":, 0", axes=(1, 0)), [STR],
         lambda x: x[:, 0:1].T),
    Case("subarray-patient-block", lambda: Subarray("0:13, 4:"), [STR_U], lambda x: x[:, 4:]),
    Case("subarray-3d-negative", lambda: Subarray("-3:, 1:3, ::2", axes=(2, 0, 1)), [CUBE],
         lambda x: x[-3:, 1:3, ::2].transpose(2, 0, 1)),
    Case("subarray-1d", lambda: Subarray("2:-2"), [VEC], lambda x: x[2:-2]),
    Case("transpose-2d", lambda: Transpose(), [IMG], np.transpose),
    Case("transpose-strings", lambda: Transpose(), [STR], np.transpose),
    Case("transpose-3d", lambda: Transpose((1, 2, 0)), [CUBE], lambda x: x.transpose(1, 2, 0)),
    Case("reshape-2d", lambda: Reshape((9, 13)), [IMG], lambda x: x.reshape(9, 13)),
    Case("reshape-1d-to-2d", lambda: Reshape((-1, 3)), [np.arange(24.0)],
         lambda x: x.reshape(-1, 3)),
    Case("reshape-3d-to-2d", lambda: Reshape((6, -1)), [CUBE], lambda x: x.reshape(6, -1)),
    Case("reshape-strings-to-1d", lambda: Reshape(-1), [STR_U], lambda x: x.reshape(-1)),
    Case("concat-rows-3-inputs", lambda: Concatenate(0), [IMG, IMG2[:3], IMG[:5]],
         lambda *xs: np.concatenate(xs, 0)),
    Case("concat-columns-strings", lambda: Concatenate(-1), [STR, STR_U],
         lambda a, b: np.concatenate([a, b.astype(S)], 1)),
    Case("concat-1d", lambda: Concatenate(), [VEC, VEC[:4]], lambda *xs: np.concatenate(xs)),
    Case("concat-3d-axis1", lambda: Concatenate(1), [CUBE, CUBE[:, :1]],
         lambda *xs: np.concatenate(xs, 1)),
    # -- reductions -----------------------------------------------------------------------
    Case("reduce-meanoverscan-1x1", lambda: Reduce("mean"), [ONE],
         lambda x: x.mean(keepdims=True)),
    Case("reduce-global-max-keepdims", lambda: Reduce("max"), [IMG],
         lambda x: x.max(keepdims=True)),
    Case("reduce-cumodds-row-sum", lambda: Reduce("sum", axis=1), [IMG],
         lambda x: x.sum(axis=1, keepdims=True)),
    Case("reduce-column-min-squeezed", lambda: Reduce("min", axis=0, keepdims=False), [IMG],
         lambda x: x.min(axis=0)),
    Case("reduce-count-nonzero-3d", lambda: Reduce("count_nonzero", axis=(0, 2)), [CUBE > 0],
         lambda x: np.count_nonzero(x, axis=(0, 2), keepdims=True)),
    Case("reduce-mean-3d-broadcast", lambda: Reduce("mean", axis=(0, 2), broadcast=True), [CUBE],
         lambda x: np.broadcast_to(lines(x, (0, 2), "mean"), x.shape)),
    Case("reduce-row-median-broadcast", lambda: Reduce("median", axis=1, broadcast=True), [IMG],
         lambda x: np.broadcast_to(np.median(x, axis=1, keepdims=True), x.shape)),
    Case("reduce-1d-sum", lambda: Reduce("sum", dtype="float32"), [VEC],
         lambda x: x.sum(keepdims=True, dtype=np.float32)),
    Case("mean-broadcast-bgmean", lambda: MeanBroadcast(), [IMG],
         lambda x: np.full(x.shape, x.mean())),
    Case("mean-broadcast-per-row", lambda: MeanBroadcast(axis=1), [U16],
         lambda x: np.broadcast_to(x.mean(axis=1, keepdims=True), x.shape)),
    # -- stencils ------------------------------------------------------------------------
    Case("convolve-laplacian", lambda: Convolve([[0, -1, 0], [-1, 4, -1], [0, -1, 0]]), [IMG],
         lambda x: ndimage.convolve(x, np.array([[0, -1, 0], [-1, 4, -1], [0, -1, 0]], float),
                                    mode="reflect")),
    Case("median-5x5-nearest", lambda: MedianFilter(2, "nearest"), [IMG],
         lambda x: ndimage.median_filter(x, size=5, mode="nearest")),
    Case("median-3d", lambda: MedianFilter((1, 0, 1)), [CUBE],
         lambda x: ndimage.median_filter(x, size=(3, 1, 3), mode="reflect")),
    # -- matrix multiply -----------------------------------------------------------------
    Case("matmul", lambda: MatMul(), [INT_A, INT_B], np.matmul),
    Case("matmul-int", lambda: MatMul(), [INT_A.astype(np.int64).T, INT_A.astype(np.int64)],
         np.matmul),
]
