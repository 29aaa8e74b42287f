"""A test UDF with payload and composite lineage, and a workflow using it.

``Flare`` brightens every pixel above a threshold with the mean of its (2r+1)^2 box; other
pixels pass through. Its honest lineage: a flared pixel depends on its box, any other pixel
on itself. It supports COMP (identity default, payload = radius for flared pixels), PAY
(payload for every pixel: radius or 0), FULL and BLACKBOX.
"""

import numpy as np
from scipy import ndimage

from operators import Affine, Binary, Convolve, MeanBroadcast, UDF, stencil
from operators.base import box_neighbours
from subzero.cells import dilate
from subzero.modes import Mode
from subzero.workflow import Workflow


class Flare(UDF):
    n_inputs = 1

    def __init__(self, threshold: float = 0.0, radius: int = 2) -> None:
        self.threshold = threshold
        self.radius = radius

    @property
    def parallelism(self):
        return stencil(self.radius)

    def params(self):
        return {"threshold": self.threshold, "radius": self.radius}

    def supported_modes(self):
        return frozenset({Mode.COMP, Mode.PAY, Mode.FULL, Mode.BLACKBOX})

    def output_shape(self, s):
        return tuple(s[0])

    def output_dtype(self, d):
        return np.dtype("float64")

    def run(self, ctx, x):
        x = x.astype(np.float64)
        # correlate sums each window directly, so a cell's value depends on its window only
        # (uniform_filter's running sums would let far cells change the last bit)
        w = np.ones((2 * self.radius + 1,) * 2)
        mean = (ndimage.correlate(x, w, mode="constant")
                / ndimage.correlate(np.ones_like(x), w, mode="constant"))
        inner = ctx.chunk.interior(0)
        flag = x[inner] > self.threshold
        out = np.where(flag, mean[inner], x[inner])
        local = np.argwhere(flag)
        cells = ctx.chunk.out_cells(local)
        if ctx.composite or ctx.payload:
            ctx.lwrite_pairs(cells, payloads=bytes([self.radius]))
        if ctx.payload:
            ctx.lwrite_pairs(ctx.chunk.out_cells(np.argwhere(~flag)), payloads=b"\x00")
        if ctx.full:
            # two bulk calls: flared pixels -> their box, the others -> themselves
            ctx.lwrite_pairs(cells, box_neighbours(cells, (self.radius,) * 2, self.out_shape))
            rest = ctx.chunk.out_cells(np.argwhere(~flag))
            ctx.lwrite_pairs(rest, rest)
        return out

    # the composite default: identity
    def map_b(self, f, i):
        return f.copy()

    def map_f(self, f, i):
        return f.copy()

    def map_p(self, outcells, payload, i):
        r = payload[0]
        m = np.zeros(self.in_shapes[i], dtype=bool)
        m[tuple(np.asarray(outcells).T)] = True
        return dilate(m, r) if r else m


def flare_workflow(shape=(30, 24), seed=1) -> Workflow:
    rng = np.random.default_rng(seed)
    img = rng.normal(0.0, 1.0, shape)
    img[rng.integers(0, shape[0], 6), rng.integers(0, shape[1], 6)] += 8.0
    wf = Workflow("flares")
    wf.input("sky", shape, "float64", source=lambda: img)
    wf.add("lin", Affine(1.0, 0.0), "sky")
    wf.add("flare", Flare(threshold=3.0, radius=2), "lin")
    wf.add("blur", Convolve(np.ones((3, 3)) / 9), "flare")
    wf.add("mean", MeanBroadcast(), "blur")
    wf.add("resid", Binary("subtract"), "blur", "mean")
    return wf
