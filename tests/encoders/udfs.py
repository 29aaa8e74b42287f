"""A tiny payload UDF for the storage tests (importable by Spark workers as tests.*).

``Spots`` replaces every pixel above ``threshold`` by the maximum of its (2r+1)^2 window
(clipped at the border) and passes the others through. Lineage: a spot depends on its
window, any other pixel on itself. PAY writes a payload for every output cell: one pair
holding all the spots of the chunk (payload ``r``, high fanout) and one pair per other pixel
(payload ``0``); COMP writes the spots only (the mapping default is the identity).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from operators import UDF, stencil
from subzero.cells import dilate
from subzero.modes import Mode


class Spots(UDF):
    n_inputs = 1

    def __init__(self, threshold: float = 0.0, radius: int = 1) -> None:
        self.threshold = float(threshold)
        self.radius = int(radius)

    @property
    def parallelism(self):
        return stencil(self.radius)

    def params(self):
        return {"threshold": self.threshold, "radius": self.radius}

    def supported_modes(self):
        return frozenset({Mode.PAY, Mode.COMP, Mode.BLACKBOX})

    def output_shape(self, shapes):
        return tuple(shapes[0])

    def output_dtype(self, dtypes):
        return np.dtype("float64")

    def run(self, ctx, x):
        x = np.asarray(x, dtype=np.float64)
        window = ndimage.maximum_filter(x, size=2 * self.radius + 1, mode="nearest")
        inner = ctx.chunk.interior(0)
        flag = x[inner] > self.threshold
        if ctx.payload or ctx.composite:
            spots = ctx.chunk.out_cells(np.argwhere(flag))
            if len(spots):
                ctx.lwrite(spots, payload=bytes([self.radius]))
        if ctx.payload:
            ctx.lwrite_pairs(ctx.chunk.out_cells(np.argwhere(~flag)), payloads=b"\x00")
        return np.where(flag, window[inner], x[inner])

    def map_b(self, f, i):
        return f.copy()

    def map_f(self, f, i):
        return f.copy()

    def map_p(self, outcells, payload, i):
        m = np.zeros(self.in_shapes[i], dtype=bool)
        m[tuple(np.asarray(outcells).T)] = True
        return dilate(m, payload[0]) if payload[0] else m
