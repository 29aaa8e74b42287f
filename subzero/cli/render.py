"""Draw a lineage result over its array, so a scientist sees where the lineage lies.

The array is contrast-stretched (1st to 99.5th percentile, like an astronomer's display
stretch) in grey; result cells are painted red, and when they are few they are also ringed so
that single pixels stay visible on a large image. A legend under the picture says what the
red cells are (``legend``) and where the run's inputs came from (:func:`inputs_origin`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _as_image(data: np.ndarray) -> np.ndarray:
    if data.dtype.kind in "OTU":
        _, codes = np.unique(data.astype(object).astype("U"), return_inverse=True)
        data = codes.reshape(data.shape).astype(np.float64)
    data = np.asarray(data, dtype=np.float64)
    if data.ndim == 0:
        data = data.reshape(1, 1)
    elif data.ndim == 1:
        data = data.reshape(1, -1)
    elif data.ndim > 2:
        data = data.reshape(-1, data.shape[-1])
    return data


def _zoom_box(m: np.ndarray, pad: int = 12) -> tuple[slice, slice] | None:
    """The padded bounding box of the highlighted cells, when they are a small patch."""
    if not m.any():
        return None
    ys, xs = np.nonzero(m)
    y0, y1 = max(0, ys.min() - pad), min(m.shape[0], ys.max() + pad + 1)
    x0, x1 = max(0, xs.min() - pad), min(m.shape[1], xs.max() + pad + 1)
    if (y1 - y0) * (x1 - x0) > 0.25 * m.size:
        return None
    return slice(y0, y1), slice(x0, x1)


#: ``params["data"]`` of a run (astronomy: files/mixed; genomics: file) -> what the inputs were
_ORIGINS = {"generated": "generated inputs", "files": "real inputs (files)",
            "file": "real inputs (file)", "mixed": "real and generated inputs"}


def cells_phrase(n: int) -> str:
    """``n`` cells in words, singular when one.

    >>> cells_phrase(1), cells_phrase(12345)
    ('1 cell', '12,345 cells')
    """
    return f"{n:,} cell" + ("" if n == 1 else "s")


def inputs_origin(params: dict[str, Any] | None) -> str:
    """Whether a run's inputs were generated or real files, from the workflow parameter
    ``data`` the shipped workflows record; ``""`` when the run does not say.

    >>> inputs_origin({"data": "generated"}), inputs_origin({"data": "files"}), inputs_origin({})
    ('generated inputs', 'real inputs (files)', '')
    """
    return _ORIGINS.get(str((params or {}).get("data", "")), "")


def lineage_legend(res: Any) -> str:
    """What the red cells of a lineage result's picture are, e.g. ``red: 97 cells of exp1,
    the backward lineage of 12 cells of clust``."""
    start_n = res.steps[0].in_count if res.steps else None
    of = (f" of {cells_phrase(start_n)} of {res.start}" if start_n is not None and res.start
          else f" of {res.start}" if res.start else "")
    return f"red: {cells_phrase(res.count)} of {res.array}, the {res.direction} lineage{of}"


def render_mask(data: np.ndarray, mask: np.ndarray, path: str | Path, title: str = "",
                legend: str = "") -> Path:
    """Write a PNG of ``data`` with ``mask`` highlighted, ``title`` above and ``legend`` (what
    red means; default: the count of red cells) under the picture; when the highlighted cells
    form a small patch, a second panel zooms in on it."""
    fig = draw_mask(data, mask, title, legend)
    import matplotlib.pyplot as plt  # matplotlib only when a picture is asked for (slow)

    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def draw_mask(data: np.ndarray, mask: np.ndarray, title: str = "", legend: str = "") -> Any:
    """The matplotlib figure :func:`render_mask` writes."""
    import matplotlib  # matplotlib only when a picture is asked for (slow to import)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img = _as_image(data)
    m = _as_image(mask.astype(np.uint8)) > 0
    finite = img[np.isfinite(img)]
    lo, hi = (np.percentile(finite, [1.0, 99.5]) if finite.size else (0.0, 1.0))
    if hi <= lo:
        hi = lo + 1.0
    grey = np.clip((img - lo) / (hi - lo), 0.0, 1.0)
    rgb = np.dstack([grey, grey, grey])
    rgb[m] = 0.35 * rgb[m] + 0.65 * np.array([1.0, 0.1, 0.1])
    h, w = img.shape
    zoom = _zoom_box(m)
    scale = 8.0 / max(h, w)
    width = max(3.0, w * scale) + 0.5
    fig, axes = plt.subplots(1, 2 if zoom else 1, dpi=120, squeeze=False,
                             figsize=(width * (2.2 if zoom else 1), max(3.0, h * scale) + 0.8))
    ax = axes[0, 0]
    ax.imshow(rgb, interpolation="nearest", aspect="auto" if min(h, w) < 4 else "equal")
    count = int(m.sum())
    if 0 < count <= 2000 and count < 0.01 * m.size:
        ys, xs = np.nonzero(m)
        ax.scatter(xs, ys, s=60, facecolors="none", edgecolors="red", linewidths=1.0)
    ax.set_title(title or cells_phrase(count), fontsize=9)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    if zoom:
        zy, zx = zoom
        z = axes[0, 1]
        extent = (zx.start - 0.5, zx.stop - 0.5, zy.stop - 0.5, zy.start - 0.5)
        # the zoom shows the data itself, the lineage as an outline and a light tint
        z.imshow(grey[zy, zx], cmap="gray", vmin=0, vmax=1, interpolation="nearest",
                 extent=extent)
        tint = np.zeros((*m[zy, zx].shape, 4))
        tint[m[zy, zx]] = (1.0, 0.1, 0.1, 0.25)
        z.imshow(tint, interpolation="nearest", extent=extent)
        ys_, xs_ = np.mgrid[zy, zx]
        z.contour(xs_, ys_, m[zy, zx].astype(float), levels=[0.5], colors="red",
                  linewidths=1.0)
        z.set_title(f"zoom: rows {zy.start}:{zy.stop}, columns {zx.start}:{zx.stop}",
                    fontsize=9)
        z.set_xlabel("column")
        ax.add_patch(plt.Rectangle((zx.start, zy.start), zx.stop - zx.start,
                                   zy.stop - zy.start, fill=False, edgecolor="yellow"))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    legend = (legend or f"red: {cells_phrase(count)}") + (
        "; yellow box: the zoomed area" if zoom else "")
    fig.text(0.01, 0.015, legend, fontsize=9, ha="left",
             va="bottom", color="black",
             bbox={"facecolor": "white", "edgecolor": "red", "boxstyle": "round,pad=0.3"})
    return fig


def describe(res: Any) -> str:
    return (f"{res.direction} lineage in {res.array}: {cells_phrase(res.count)} of "
            f"{res.mask.size:,}")
