"""The UDFs :mod:`bench_udf` compares: one 3 x 3 median and one data-dependent cleaner,
each written the ways a user can write them (per-cell ``ctx.lwrite``, one
``ctx.lwrite_pairs`` call, the :mod:`operators.udf` decorators, no lineage at all).

They live in a module of their own so that a run records them as ``udf_cases:NAME``.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from operators import UDF, stencil, udf
from operators.base import box_neighbours
from subzero.cells import Box, Ragged
from subzero.modes import Mode
from subzero.workflow import Workflow

SHAPE = (2001, 513)
FLAGGED = 0.008  # the cleaner's share of flagged pixels


def image() -> np.ndarray:
    return np.random.default_rng(0).normal(1000.0, 30.0, SHAPE).astype(np.float32)


def mask() -> np.ndarray:
    return np.random.default_rng(1).random(SHAPE) < FLAGGED


def _median3(x: np.ndarray) -> np.ndarray:
    return ndimage.median_filter(x, size=3, mode="mirror")


class _Median(UDF):
    """A 3 x 3 median declaring FULL lineage; subclasses report it (:meth:`report`)."""

    n_inputs = 1
    parallelism = stencil(1)

    def supported_modes(self):
        return frozenset({Mode.FULL, Mode.BLACKBOX})

    def run(self, ctx, x):
        out = _median3(x)[ctx.chunk.interior(0)]
        if ctx.full:
            self.report(ctx, out.shape)
        return out


class PerCellMedian(_Median):
    """Each pixel's box reported with one ``ctx.lwrite`` call."""

    def report(self, ctx, block):
        h, w = self.out_shape
        box = ctx.chunk.out_box
        for r in range(box.lo[0], box.hi[0]):
            r0, r1 = max(r - 1, 0), min(r + 2, h)
            for c in range(box.lo[1], box.hi[1]):
                ctx.lwrite((r, c), Box((r0, max(c - 1, 0)), (r1, min(c + 2, w))))


class PairsMedian(_Median):
    """Every pixel's box reported in one ``ctx.lwrite_pairs`` call."""

    def report(self, ctx, block):
        lin = ctx.chunk.out_box.linear(self.out_shape)
        coords = ctx.chunk.out_cells(np.argwhere(np.ones(block, bool)))
        ctx.lwrite_pairs(lin, box_neighbours(coords, (1, 1), self.out_shape))


@udf.cells(default="none", halo=1)
def cells_median(x, *, lineage):
    """The median through the decorators' vectorized call: every pixel's 3 x 3 box."""
    out = _median3(x)
    lineage.around(np.ones(x.shape, bool), radius=1)
    return out


@udf.stencil(radius=1)
def stencil_median(x):
    """The median as what it is: a stencil (mapping functions, nothing stored)."""
    return _median3(x)


def _clean(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    out = x.copy()
    ys, xs = np.nonzero(m)
    if len(ys):
        med = ndimage.median_filter(x, size=5, mode="mirror")
        out[ys, xs] = med[ys, xs]
    return out


class FullCleaner(UDF):
    """The cleaner declared FULL by hand: a pixel depends on itself, a flagged pixel on its
    5 x 5 box, as one ``lwrite_pairs`` call per block."""

    n_inputs = 2
    parallelism = stencil(2)

    def supported_modes(self):
        return frozenset({Mode.FULL, Mode.BLACKBOX})

    def run(self, ctx, x, m):
        out = _clean(x, m)[ctx.chunk.interior(0)]
        if ctx.full:
            inner = m[ctx.chunk.interior(1)]
            coords = ctx.chunk.out_cells(np.argwhere(np.ones(out.shape, bool)))
            lin = ctx.chunk.out_box.linear(self.out_shape)
            flagged = inner.reshape(-1)
            plain = Ragged.from_singletons(lin[~flagged])
            ctx.lwrite_pairs(lin[~flagged], plain, plain)
            box = box_neighbours(coords[flagged], (2, 2), self.out_shape)
            ctx.lwrite_pairs(lin[flagged], box, box)
        return out


class BoxCleaner(FullCleaner):
    """The cleaner declared FULL by hand as boxes: ``ctx.lwrite_box`` per kind of pixel."""

    def run(self, ctx, x, m):
        out = _clean(x, m)[ctx.chunk.interior(0)]
        if ctx.full:
            flagged = m[ctx.chunk.interior(1)]
            ctx.lwrite_box(flagged, -2, 3)
            ctx.lwrite_box(~flagged, 0, 1)
        return out


@udf.cells(default="elementwise", halo=2)
def api_cleaner(x, m, *, lineage):
    """The cleaner through the decorators: flagged pixels read their 5 x 5 box."""
    lineage.around(np.nonzero(m), radius=2)
    return _clean(x, m)


@udf.blackbox(halo=2)
def blackbox_cleaner(x, m):
    """The cleaner with no lineage declared."""
    return _clean(x, m)


@udf.blackbox(halo=1)
def blackbox_median(x):
    """The median with no lineage declared."""
    return _median3(x)


def workflow(kind: str) -> Workflow:
    """A one-operator workflow over the generated image (and mask, for cleaners)."""
    op = {"percell": PerCellMedian(), "pairs": PairsMedian(), "cells": cells_median(),
          "stencil": stencil_median(), "median-blackbox": blackbox_median(),
          "cleaner-full": FullCleaner(), "cleaner-box": BoxCleaner(),
          "cleaner-api": api_cleaner(),
          "cleaner-blackbox": blackbox_cleaner()}[kind]
    wf = Workflow(f"udf-{kind}")
    wf.input("image", SHAPE, "float32", source=image)
    names = ["image"]
    if kind.startswith("cleaner"):
        wf.input("mask", SHAPE, "bool", source=mask)
        names.append("mask")
    wf.add("op", op, *names)
    return wf
