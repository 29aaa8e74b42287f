"""A small example workflow on a generated star field.

::

    image ──► calibrate (elementwise) ──► smooth (3x3 stencil) ──► background (global mean)
                                               │                         │
                                               └──► residual = smooth - background ◄┘
    threshold (1x1) ─────────────────────────────► bright = residual > threshold

It has one operator of each parallelization (elementwise, stencil with a halo, global) and
a 1x1 input broadcast over the image, so it exercises halos across chunk borders and the
mapping functions of each kind. :func:`reference` computes the same arrays with plain numpy.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Mapping

import numpy as np

from operators import Affine, Binary, Convolve, MeanBroadcast
from subzero.workflow import Workflow, parse_shape_param
from workflows.params import parse_float, parse_seed

NAME = "example"
DESCRIPTION = "calibrate, 3x3 smooth, subtract the global mean, threshold (generated image)"

GAIN = 2.0
BIAS = 1000.0
KERNEL = np.array([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]) / 16.0


def generate_image(shape: tuple[int, int], seed: int = 0, n_stars: int | None = None) -> np.ndarray:
    """A sky of ~1600 counts with Poisson-like noise and Gaussian stars, as uint16."""
    rng = np.random.default_rng(seed)
    h, w = shape
    img = rng.normal(1600.0, 40.0, size=shape)
    n = n_stars if n_stars is not None else max(1, h * w // 4000)
    ys = rng.uniform(0, h, n)
    xs = rng.uniform(0, w, n)
    amp = rng.uniform(2000, 30000, n)
    sigma = rng.uniform(1.0, 2.5, n)
    yy, xx = np.mgrid[0:h, 0:w]
    for y, x, a, s in zip(ys, xs, amp, sigma):
        r = int(4 * s) + 1
        y0, y1 = max(0, int(y) - r), min(h, int(y) + r + 1)
        x0, x1 = max(0, int(x) - r), min(w, int(x) + r + 1)
        img[y0:y1, x0:x1] += a * np.exp(
            -((yy[y0:y1, x0:x1] - y) ** 2 + (xx[y0:y1, x0:x1] - x) ** 2) / (2 * s * s))
    return np.clip(img, 0, 65535).astype(np.uint16)


def build(inputs: Mapping[str, str] | None = None, shape: Any = (2001, 513), seed: Any = 0,
          threshold: Any = 200.0) -> Workflow:
    shape = parse_shape_param(shape)
    seed, threshold = parse_seed(seed), parse_float(threshold, "threshold", "200")
    wf = Workflow(NAME, DESCRIPTION,
                  params={"shape": list(shape), "seed": seed, "threshold": threshold})
    wf.input("image", shape, "uint16", source=partial(generate_image, shape, seed),
             description="raw exposure (generated star field unless --input image=PATH)",
             origin=f"generated star field, seed {seed}, shape {shape[0]}x{shape[1]}")
    wf.input("threshold", (1, 1), "float64", source=partial(np.full, (1, 1), threshold),
             description="detection threshold above background (1x1)",
             origin=f"constant {threshold:g}")
    wf.add("calibrate", Affine(scale=1.0 / GAIN, offset=-BIAS / GAIN), "image")
    wf.add("smooth", Convolve(KERNEL, boundary="reflect"), "calibrate")
    wf.add("background", MeanBroadcast(), "smooth")
    wf.add("residual", Binary("subtract"), "smooth", "background")
    wf.add("bright", Binary("greater"), "residual", "threshold")
    return wf


def reference(image: np.ndarray, threshold: np.ndarray) -> dict[str, np.ndarray]:
    """The workflow in plain numpy (whole arrays, no chunks): the executor must agree."""
    from scipy import ndimage  # scipy only for the reference result

    calibrate = image.astype(np.float64) * (1.0 / GAIN) + (-BIAS / GAIN)
    smooth = ndimage.convolve(calibrate, KERNEL, mode="reflect")
    background = np.full(smooth.shape, smooth.mean())
    residual = smooth - background
    bright = residual > threshold
    return {"calibrate": calibrate, "smooth": smooth, "background": background,
            "residual": residual, "bright": bright}
