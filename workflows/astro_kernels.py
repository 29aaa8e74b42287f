"""The astronomy workflow's kernels: pure numpy (and scipy) functions on 2-d images.

Nothing here knows about chunks, tasks or lineage storage; the operators of
:mod:`workflows.astro_udfs` call these on a block and record lineage from what they return
(the payload formats are :mod:`workflows.astro_payloads`'s).

- cosmic-ray detection: :func:`lacosmic` (one gated pass of L.A.Cosmic, with the
  intermediate quantities that decide each flag) and :func:`detect_cosmic_rays` (its mask);
- cosmic-ray removal: :func:`remove_cosmic_rays` (the median of a flagged pixel's unflagged
  neighbours);
- star detection: :func:`label_stars` (8-connected components above a threshold, labelled
  by position; a large image in bands of rows on several threads), and
  :func:`star_pixels` / :func:`group_stars` (each star's pixels);
- the window gathers the filters are built from (:func:`window_indices`,
  :func:`laplacian_plus`), evaluated only at the pixels asked for.

Examples
--------
>>> import numpy as np
>>> x = np.zeros((12, 12)); x[4, 7] = 900.0
>>> np.argwhere(detect_cosmic_rays(x)).tolist()
[[4, 7]]
>>> int(label_stars(x, 200.0)[4, 7])  # a star's label: 1 + its first pixel's linear index
56
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from subzero import settings
from subzero.cells import Ragged, dilate, run_starts
from subzero.errors import ShapeError
from subzero.pools import thread_pool

Shape = tuple[int, ...]

#: Backward radius of a cosmic-ray candidate's output at most (see
#: :class:`workflows.astro_udfs.CosmicRayDetect`).
CR_RADIUS = 6
#: Reach of S' (and of the fine-structure ratio) at one pixel: the box that decides it.
SP_RADIUS = 4
#: Half-width of the cosmic-ray removal window (5 x 5).
RMCR_RADIUS = 2

_BATCH = 1 << 17  # window gathers run in batches of this many centres (bounded memory)


# ---------------------------------------------------------------------------------------
# window gathers (vectorized over centres; 2-d, C order)
# ---------------------------------------------------------------------------------------


def _mirror(i: np.ndarray, n: int) -> np.ndarray:
    """Indices reflected into ``0..n-1`` about the edge pixels (scipy's ``mode="mirror"``:
    -1 -> 1, n -> n - 2). A mirrored index lies within the window's radius of its centre.

    >>> _mirror(np.array([-2, -1, 0, 4, 5, 6]), 5).tolist()
    [2, 1, 0, 4, 3, 2]
    """
    if n == 1:
        return np.zeros_like(i)
    period = 2 * (n - 1)
    if i.size and (i.min() < -(n - 1) or i.max() > period):  # beyond one reflection
        m = np.abs(i) % period
        return np.where(m > n - 1, period - m, m)
    return np.where(i < 0, -i, np.where(i > n - 1, period - i, i))


def window_indices(centres: np.ndarray, shape: Shape, radius: int, boundary: str
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """Flat indices of the ``(2r+1)^2`` window around each centre.

    The rows and columns are reflected or clamped once per centre (``2r+1`` of each), then
    combined.

    Parameters
    ----------
    centres : np.ndarray
        Flat indices of the centres, ``(n,)``.
    shape : tuple of int
        The 2-d image's shape.
    radius : int
        The window's half-width ``r``.
    boundary : {"mirror", "nearest", "valid"}
        ``"mirror"`` reflects about the edge pixels, ``"nearest"`` clamps, ``"valid"``
        clamps and also returns which window cells are inside the image.

    Returns
    -------
    indices : np.ndarray
        ``(n, (2r+1)^2)`` int64, row by row (offsets ``dy`` slowest, ``dx`` fastest).
    valid : np.ndarray or None
        With ``"valid"``, ``(n, (2r+1)^2)`` bool: the window cells inside the image.

    Examples
    --------
    >>> window_indices(np.array([0]), (3, 3), 1, "mirror")[0].tolist()
    [[4, 3, 4, 1, 0, 1, 4, 3, 4]]
    """
    h, w = shape
    cy, cx = np.divmod(np.asarray(centres, dtype=np.int64), w)
    r = np.arange(-radius, radius + 1)
    ys, xs = cy[:, None] + r, cx[:, None] + r
    valid = None
    if boundary == "mirror":
        ys, xs = _mirror(ys, h), _mirror(xs, w)
    else:
        if boundary == "valid":
            valid = (((ys >= 0) & (ys < h))[:, :, None]
                     & ((xs >= 0) & (xs < w))[:, None, :]).reshape(len(cy), -1)
        ys, xs = np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)
    return (ys[:, :, None] * w + xs[:, None, :]).reshape(len(cy), -1), valid


def _window_median(values: np.ndarray, centres: np.ndarray, shape: Shape, radius: int
                   ) -> np.ndarray:
    """The median of the mirrored ``(2r+1)^2`` window of ``values`` (flat) at each centre:
    what ``scipy.ndimage.median_filter(size=2r+1, mode="mirror")`` gives there (an odd
    count, so an exact selection), computed only where asked.

    A centre whose window lies inside the image gathers it at fixed offsets from its own
    index (nothing is reflected, and the image is neither copied nor padded: the centres
    are few, the image large); only the centres within ``r`` of an edge reflect their
    window's rows and columns (:func:`window_indices`)."""
    out = np.empty(len(centres), dtype=values.dtype)
    mid = (2 * radius + 1) ** 2 // 2
    h, w = shape
    flat = np.asarray(values).reshape(-1)
    centres = np.asarray(centres, dtype=np.int64)
    cy, cx = np.divmod(centres, w)
    inside = (cy >= radius) & (cy < h - radius) & (cx >= radius) & (cx < w - radius)
    r = np.arange(-radius, radius + 1)
    offsets = (r[:, None] * w + r[None, :]).reshape(-1)
    for at in (np.flatnonzero(inside), np.flatnonzero(~inside)):
        for s in range(0, len(at), _BATCH):
            sel = at[s:s + _BATCH]
            if inside[sel[0]]:
                win = centres[sel, None] + offsets[None, :]
            else:
                win, _ = window_indices(centres[sel], shape, radius, "mirror")
            vals = flat[win]  # gathered: a copy of its own, partitioned in place
            vals.partition(mid, axis=1)
            out[sel] = vals[:, mid]
    return out


def _reach(centres: np.ndarray, shape: Shape, radius: int) -> np.ndarray:
    """Flat indices (sorted, unique) of every cell in the mirrored windows of ``centres``:
    the centres' box dilation clipped to the image (a reflected cell lies between its
    centre and the edge, so inside that box; every cell of the box is some centre's
    unreflected window cell).

    >>> _reach(np.array([0]), (4, 4), 1).tolist()
    [0, 1, 4, 5]

    Few centres set their windows' cells in a mask directly, one offset at a time (each
    row and column clamped to the image, which stays inside the clipped box); many dilate
    the mask of centres instead (shifts of the whole image).
    """
    h, w = shape
    need = np.zeros(h * w, dtype=bool)
    centres = np.asarray(centres, dtype=np.int64)
    if len(centres) * (2 * radius + 1) ** 2 > need.size // 4:
        need[centres] = True
        return np.flatnonzero(dilate(need.reshape(shape), radius))
    cy, cx = np.divmod(centres, w)
    cols = [np.clip(cx + d, 0, w - 1) for d in range(-radius, radius + 1)]
    for dy in range(-radius, radius + 1):
        row = np.clip(cy + dy, 0, h - 1) * w
        for col in cols:
            need[row + col] = True
    return np.flatnonzero(need)


#: the 3 x 3 neighbourhood (the cell itself included) as row and column offsets
_NEAR_DY, _NEAR_DX = (a.reshape(-1) for a in np.mgrid[-1:2, -1:2])


def _near(at: np.ndarray, shape: Shape) -> np.ndarray:
    """Flat indices (sorted, unique) of the cells within one step (3 x 3, clipped to the
    image) of the cells ``at``: a box dilation by 1 of a few cells, without touching the
    image's other cells.

    >>> _near(np.array([0]), (3, 3)).tolist()
    [0, 1, 3, 4]
    """
    h, w = shape
    cy, cx = np.divmod(np.asarray(at, dtype=np.int64), w)
    ys, xs = cy[:, None] + _NEAR_DY, cx[:, None] + _NEAR_DX
    inside = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
    return np.unique((ys * w + xs)[inside])


def laplacian_plus(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """L.A.Cosmic's L+ at the centres: upsample 2x (nearest), convolve with the Laplacian
    ``[[0,-1,0],[-1,4,-1],[0,-1,0]]`` (reflecting at the border), clip below at 0, average
    each 2x2 block back. Done without building the upsampled image: a sub-pixel's two
    in-block neighbours equal its own value ``v``, so its Laplacian is ``2v - a - b`` with
    ``a``, ``b`` the adjacent pixels across its two outer edges (the pixel itself at the
    border). Mathematically the same as the literal recipe (the tests compare).

    Parameters
    ----------
    x : np.ndarray
        The 2-d image.
    centres : np.ndarray
        Flat indices of the pixels to evaluate L+ at.

    Returns
    -------
    np.ndarray
        L+ at each centre, float64.

    Examples
    --------
    >>> x = np.zeros((3, 3)); x[1, 1] = 4.0
    >>> laplacian_plus(x, np.array([4, 0])).tolist()
    [8.0, 0.0]
    """
    h, w = x.shape
    flat = x.reshape(-1)
    cy, cx = np.divmod(np.asarray(centres, dtype=np.int64), w)
    v2 = 2.0 * flat[centres]
    up = flat[np.maximum(cy - 1, 0) * w + cx]
    down = flat[np.minimum(cy + 1, h - 1) * w + cx]
    left = flat[cy * w + np.maximum(cx - 1, 0)]
    right = flat[cy * w + np.minimum(cx + 1, w - 1)]
    acc = np.maximum(v2 - up - left, 0.0)
    acc += np.maximum(v2 - up - right, 0.0)
    acc += np.maximum(v2 - down - left, 0.0)
    acc += np.maximum(v2 - down - right, 0.0)
    return acc * 0.25


# ---------------------------------------------------------------------------------------
# kernels (pure: numpy in, numpy out)
# ---------------------------------------------------------------------------------------


def default_gate(gain: float = 2.2, readnoise: float = 10.0, sigclip: float = 5.0,
                 sky: float = 0.0) -> float:
    """The candidate threshold (counts above background) :class:`CosmicRayDetect` uses by
    default: ``sigclip`` times the noise model's sky noise, ``sqrt(gain*sky + rn^2)/gain``.

    >>> round(default_gate(sky=600.0), 2)
    85.64
    """
    return float(sigclip * np.sqrt(gain * sky + readnoise**2) / gain)


def detect_cosmic_rays(x: np.ndarray, gain: float = 2.2, readnoise: float = 10.0,
                       sigclip: float = 5.0, sigfrac: float = 0.3, objlim: float = 5.0,
                       sky: float = 0.0, gate: float | None = None) -> np.ndarray:
    """One pass of L.A.Cosmic (van Dokkum 2001) on a background-subtracted image, gated.

    Steps, as in WORKFLOWS.md: ``L+`` (2x upsample, Laplacian, clip at 0, block average);
    noise ``N = sqrt(gain*(m5 + sky) + readnoise^2)/gain`` with ``m5`` the 5x5 median (floored
    at 1e-5 counts); significance ``S = L+/(2N)`` minus its 5x5 median, ``S'``; candidates
    ``S' > sigclip`` whose fine-structure ratio ``S'/F > objlim``, ``F = (m3 - m7(m3))/N``
    floored at 0.01; grow with a 3x3 box keeping ``S' > sigclip``, grow again keeping
    ``S' > sigclip*sigfrac``. Medians reflect at the border (``mirror``); nothing is
    truncated to integers. Finally the mask is ANDed with the *gate* ``x > gate``.

    Only cells within reach of a gated pixel are computed (the filters are evaluated at
    those centres by gathering windows), so the cost follows the number of bright pixels.

    Parameters
    ----------
    x : 2-d image in counts, background subtracted (the workflow's ``rmbg``).
    gain, readnoise : electrons per count; read noise in electrons.
    sigclip, sigfrac, objlim : L.A.Cosmic's detection limit, growth fraction, and
        fine-structure contrast limit.
    sky : counts the upstream background subtraction removed; the noise model adds them
        back (0 for an image that still holds its sky).
    gate : candidate threshold in counts (default :func:`default_gate`); ``-inf`` makes
        every pixel a candidate (plain L.A.Cosmic, every pixel with a 13x13 lineage).

    Returns
    -------
    bool array of ``x``'s shape: True where a cosmic ray is detected.

    Examples
    --------
    >>> x = np.zeros((12, 12)); x[4, 7] = 900.0
    >>> np.argwhere(detect_cosmic_rays(x)).tolist()
    [[4, 7]]
    """
    return lacosmic(x, gain, readnoise, sigclip, sigfrac, objlim, sky, gate).mask


@dataclass(frozen=True)
class LACosmic:
    """:func:`lacosmic`'s result: the mask and the intermediate quantities that decide it
    (2-d, the image's shape), which :class:`CosmicRayDetect` records lineage from.

    ``sp`` is S' where it was computed (within 2 of a gated pixel), ``-inf`` elsewhere
    (``s``: S, 0 where not computed);
    ``cand`` the candidates (S' > sigclip and fine-structure ratio > objlim); ``grow1`` the
    first growth (next to a candidate and S' > sigclip)."""

    mask: np.ndarray
    sp: np.ndarray
    cand: np.ndarray
    grow1: np.ndarray
    s: np.ndarray  # S = L+ / 2N where computed, 0 elsewhere
    gated: np.ndarray | None = None  # x > gate: the pixels that may be flagged
    noise: np.ndarray | None = None  # N where S was computed, 0 elsewhere


def lacosmic(x: np.ndarray, gain: float = 2.2, readnoise: float = 10.0, sigclip: float = 5.0,
             sigfrac: float = 0.3, objlim: float = 5.0, sky: float = 0.0,
             gate: float | None = None) -> LACosmic:
    """:func:`detect_cosmic_rays`, also returning what decided each flag."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ShapeError(f"detect_cosmic_rays needs a 2-d image. Got shape {x.shape}.")
    if gate is None:
        gate = default_gate(gain, readnoise, sigclip, sky)
    shape = x.shape
    size = x.size
    gated = x > gate
    if not gated.any():
        none = np.zeros(shape, dtype=bool)
        return LACosmic(none, np.full(shape, -np.inf), none, none, np.zeros(shape), gated)
    flat = x.reshape(-1)
    # where each quantity is needed: the final mask only on gated pixels; S' (and the
    # candidates) within 2 of them (two 3x3 growths); S in the 5x5 windows of those.
    sp_at = _reach(np.flatnonzero(gated), shape, 2)
    s_at = _reach(sp_at, shape, 2)
    m5 = _window_median(flat, s_at, shape, 2)
    noise = np.zeros(size)
    noise[s_at] = np.sqrt(gain * np.maximum(m5 + sky, 1e-5) + readnoise * readnoise) / gain
    s = np.zeros(size)
    s[s_at] = laplacian_plus(x, s_at) / (2.0 * noise[s_at])
    sp = np.full(size, -np.inf)
    sp[sp_at] = s[sp_at] - _window_median(s, sp_at, shape, 2)
    cand_at = sp_at[sp[sp_at] > sigclip]
    if len(cand_at):
        # fine structure: 3x3 median of x, then the 7x7 median of that, at the candidates
        m3 = np.zeros(size)
        m3_at = _reach(cand_at, shape, 3)
        m3[m3_at] = _window_median(flat, m3_at, shape, 1)
        f = (m3[cand_at] - _window_median(m3, cand_at, shape, 3)) / noise[cand_at]
        f = np.maximum(f, 0.01)
        cand_at = cand_at[sp[cand_at] / f > objlim]
    # the two growths, from the few candidates (S' is -inf where not computed)
    grow1_at = _near(cand_at, shape)
    grow1_at = grow1_at[sp[grow1_at] > sigclip]
    grow_at = _near(grow1_at, shape)
    grow_at = grow_at[(sp[grow_at] > sigclip * sigfrac) & (flat[grow_at] > gate)]
    cand, grow1, mask = (np.zeros(size, dtype=bool) for _ in range(3))
    cand[cand_at] = grow1[grow1_at] = mask[grow_at] = True
    return LACosmic(mask.reshape(shape), sp.reshape(shape), cand.reshape(shape),
                    grow1.reshape(shape), s.reshape(shape), gated, noise.reshape(shape))


def remove_cosmic_rays(image: np.ndarray, mask: np.ndarray, radius: int = RMCR_RADIUS
                       ) -> np.ndarray:
    """Replace each flagged pixel by the median of the *unflagged* pixels of the centred
    ``(2r+1)^2`` window (clipped at the border; an even count averages the middle two, as
    ``np.median``); other pixels pass through. A flagged pixel whose window holds no
    unflagged (non-NaN) pixel keeps its own value: there is nothing local to replace it
    with (L.A.Cosmic falls back to the global sky level, which would make every cleaned
    pixel depend on the whole image).

    >>> img = np.arange(25.0).reshape(5, 5); m = np.zeros((5, 5), bool); m[2, 2] = True
    >>> float(remove_cosmic_rays(img, m)[2, 2])
    12.0
    >>> m[:] = True; float(remove_cosmic_rays(img, m)[2, 2])
    12.0
    """
    img = np.asarray(image, dtype=np.float64)
    flag = np.asarray(mask) != 0
    if img.ndim != 2 or flag.shape != img.shape:
        raise ShapeError(
            f"remove_cosmic_rays needs a 2-d image and a mask of its shape. Got {img.shape} "
            f"and {flag.shape}.")
    out = img.copy()
    at = np.flatnonzero(flag)
    if len(at) == 0:
        return out
    win, valid = window_indices(at, img.shape, radius, "valid")
    vals = img.reshape(-1)[win]
    vals[~valid | flag.reshape(-1)[win]] = np.nan
    vals.sort(axis=1)  # NaN sorts last
    k = np.count_nonzero(~np.isnan(vals), axis=1)
    rows = np.arange(len(at))
    lo = vals[rows, np.maximum((k - 1) // 2, 0)]
    hi = vals[rows, np.maximum(k // 2, 0)]
    out.reshape(-1)[at] = np.where(k > 0, 0.5 * (lo + hi), img.reshape(-1)[at])
    return out


def label_stars(x: np.ndarray, threshold: float = 100.0) -> np.ndarray:
    """Label the connected components (8-connected in 2-d; full connectivity in n-d) of
    pixels brighter than ``threshold``.

    A star's label is ``1 + the smallest linear index of its pixels``, so it depends on the
    star alone and not on how many other stars there are; background pixels are 0.

    >>> x = np.array([[200, 0, 0], [0, 200, 0], [0, 0, 0], [300, 300, 0]])
    >>> label_stars(x).tolist()
    [[1, 0, 0], [0, 1, 0], [0, 0, 0], [10, 10, 0]]
    """
    return labelled_pixels(x, threshold)[0]


#: an image of at least this many cells is labelled in bands of rows on several threads
#: (:func:`labelled_pixels`): ``clust`` is global, one task whose core works alone at the
#: end of a run, so labelling in bands puts the other cores to work; below it, starting the
#: threads and joining the bands' seams costs more than the labelling they share
LABEL_BAND_CELLS = settings.define(
    "ASTRONOMY_LABEL_BAND_CELLS", 1 << 22, int,
    "Images of at least this many cells are labelled for star detection in bands of rows "
    "on several threads; smaller ones on one, where the threads cost more than they save.",
    benchmark="benchmarks/bench_scale.py", module=__name__)
#: the most bands (threads) an image is labelled in: beyond a few, the bands' labelling
#: competes for memory bandwidth and the seams to join grow
LABEL_MAX_BANDS = settings.define(
    "ASTRONOMY_LABEL_MAX_BANDS", 4, int,
    "The most bands of rows (threads) star detection labels a large image in; also never "
    "more than the cores this process may use.",
    benchmark="benchmarks/bench_scale.py", module=__name__)


def _label_bands(x: np.ndarray) -> int:
    """How many bands of rows :func:`labelled_pixels` splits ``x`` into: one below
    :data:`LABEL_BAND_CELLS` or beyond 2-d, else one per core this process may use (at most
    :data:`LABEL_MAX_BANDS`, at least two rows each)."""
    if x.ndim != 2 or x.size < LABEL_BAND_CELLS:
        return 1
    return max(1, min(settings.cores(), LABEL_MAX_BANDS, x.shape[0] // 2))


def labelled_pixels(x: np.ndarray, threshold: float, bands: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`label_stars`'s labels, with the star pixels (linear indices, ascending) and
    each one's label, which a caller would otherwise find again by scanning the labels.

    A large 2-d image is labelled in ``bands`` bands of rows at once (default
    :func:`_label_bands`; scipy's labelling lets other threads run), the components that
    cross a band's last row joined afterwards: the same labels, as a star's is its smallest
    linear index plus one whichever band found it.

    Parameters
    ----------
    x : np.ndarray
        The image.
    threshold : float
        Pixels above it are star pixels.
    bands : int, optional
        Bands of rows to label at once (a 2-d image only); default from the image's size.

    Returns
    -------
    labels : np.ndarray
        :func:`label_stars`'s labels, int64 of ``x``'s shape.
    pixels : np.ndarray
        The star pixels' linear indices, ascending.
    pixel_labels : np.ndarray
        Each star pixel's label.

    Examples
    --------
    >>> x = np.zeros((4, 4)); x[2:, 1] = 500.0
    >>> [a.tolist() for a in labelled_pixels(x, 100.0)[1:]]
    [[9, 13], [10, 10]]
    """
    x = np.asarray(x)
    bands = _label_bands(x) if bands is None else int(bands)
    if bands > 1 and x.ndim == 2 and x.shape[0] > 1:
        return _labelled_in_bands(x, threshold, min(bands, x.shape[0]))
    bright = x > threshold
    out = np.zeros(x.shape, dtype=np.int64)
    from scipy import ndimage  # scipy (slow to import) only in the kernels

    lab, n = ndimage.label(bright, structure=np.ones((3,) * x.ndim, dtype=bool))
    if n == 0:
        return out, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    # the labelled pixels (a scan of the bool mask, not of the labels), ascending: so a
    # label's first hit is its smallest index
    pix = np.flatnonzero(bright)
    lab_of = lab.reshape(-1)[pix]
    uniq, first = np.unique(lab_of, return_index=True)
    ids = np.zeros(n + 1, dtype=np.int64)
    ids[uniq] = pix[first] + 1
    labels = ids[lab_of]
    out.reshape(-1)[pix] = labels
    return out, pix, labels


@dataclass
class _Band:
    """One band of rows of :func:`_labelled_in_bands`: its components (scipy's labels
    1..n), its star pixels (linear indices in the whole image, ascending) with each one's
    band label, each label's first pixel, and the band's first and last rows of labels."""

    n: int
    pix: np.ndarray
    lab_of: np.ndarray
    first: np.ndarray
    top: np.ndarray
    bottom: np.ndarray


def _label_band(x: np.ndarray, threshold: float, r0: int, r1: int) -> _Band:
    from scipy import ndimage

    bright = x[r0:r1] > threshold
    lab, n = ndimage.label(bright, structure=np.ones((3, 3), dtype=bool))
    pix = np.flatnonzero(bright)
    lab_of = lab.reshape(-1)[pix].astype(np.int64)
    first = np.empty(n, dtype=np.int64)
    if n:
        uniq, at = np.unique(lab_of, return_index=True)
        first[uniq - 1] = pix[at]
    off = r0 * x.shape[1]
    return _Band(n, pix + off, lab_of, first + off, lab[0].copy(), lab[-1].copy())


def _seam_edges(above: np.ndarray, below: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (label above, label below) pairs of 8-connected star pixels across a seam:
    ``above`` is the last row of labels of one band, ``below`` the first of the next."""
    cols = len(above)
    ups, downs = [], []
    for d in (-1, 0, 1):  # the pixel below-left, below, below-right
        a = above[max(0, -d):cols - max(0, d)]
        b = below[max(0, d):cols - max(0, -d)]
        both = (a > 0) & (b > 0)
        ups.append(a[both])
        downs.append(b[both])
    return np.concatenate(ups).astype(np.int64), np.concatenate(downs).astype(np.int64)


def _roots(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per node of a graph of ``n`` nodes with edges ``(a[i], b[i])``, the smallest node
    of its connected component: roots hooked onto the smaller root across every edge, then
    every node's pointer followed until it points at a root, until no edge joins two roots.

    >>> _roots(5, np.array([3, 1, 4]), np.array([4, 3, 2])).tolist()
    [0, 1, 1, 1, 1]
    """
    root = np.arange(n, dtype=np.int64)
    while len(a):
        ra, rb = root[a], root[b]
        if np.array_equal(ra, rb):
            break
        low = np.minimum(ra, rb)
        np.minimum.at(root, ra, low)
        np.minimum.at(root, rb, low)
        while True:
            up = root[root]
            if np.array_equal(up, root):
                break
            root = up
    return root


def _labelled_in_bands(x: np.ndarray, threshold: float, bands: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`labelled_pixels` of a 2-d image in ``bands`` bands of rows labelled at once."""
    edges = np.linspace(0, x.shape[0], bands + 1).astype(np.int64).tolist()
    pool = thread_pool(f"subzero-label-{bands}", bands)  # anew after a fork
    parts = list(pool.map(lambda i: _label_band(x, threshold, edges[i], edges[i + 1]),
                          range(bands)))
    out = np.zeros(x.shape, dtype=np.int64)
    offsets = np.cumsum([0] + [p.n for p in parts])
    total = int(offsets[-1])
    if total == 0:
        return out, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    # one node per band label (band i's label l: offsets[i] + l - 1), joined across seams
    seams = [_seam_edges(parts[i].bottom, parts[i + 1].top) for i in range(bands - 1)]
    a = np.concatenate([up - 1 + offsets[i] for i, (up, _) in enumerate(seams)])
    b = np.concatenate([down - 1 + offsets[i + 1] for i, (_, down) in enumerate(seams)])
    root = _roots(total, a, b)
    first = np.full(total, np.iinfo(np.int64).max)
    np.minimum.at(first, root, np.concatenate([p.first for p in parts]))
    star = first[root] + 1  # each node's star label: its component's first pixel + 1
    flat = out.reshape(-1)

    def fill(i: int) -> np.ndarray:
        labels = star[parts[i].lab_of - 1 + offsets[i]]
        flat[parts[i].pix] = labels
        return labels

    labels = list(pool.map(fill, range(bands)))
    return out, np.concatenate([p.pix for p in parts]), np.concatenate(labels)


# ---------------------------------------------------------------------------------------
# star regions: each star's pixels (vectorized over stars)
# ---------------------------------------------------------------------------------------


def star_pixels(labels: np.ndarray) -> tuple[np.ndarray, Ragged]:
    """Stars of a label image: their labels (sorted) and, per star, the linear indices
    of its pixels (a :class:`Ragged`, ascending within each row)."""
    pix = np.flatnonzero(labels)
    return group_stars(pix, labels.reshape(-1)[pix])


def group_stars(pix: np.ndarray, lab_of: np.ndarray) -> tuple[np.ndarray, Ragged]:
    """:func:`star_pixels` from the star pixels and their labels (what
    :func:`labelled_pixels` gives), without scanning the label image again.

    Parameters
    ----------
    pix : np.ndarray
        The star pixels' linear indices, ascending.
    lab_of : np.ndarray
        Each one's label.

    Returns
    -------
    labels : np.ndarray
        The stars' labels, sorted.
    pixels : Ragged
        Per star, the linear indices of its pixels (ascending).

    Examples
    --------
    >>> labels, pixels = group_stars(np.array([1, 2, 7]), np.array([3, 2, 3]))
    >>> labels.tolist(), pixels.row(1).tolist()
    ([2, 3], [1, 7])
    """
    order = np.argsort(lab_of, kind="stable")
    sl = lab_of[order]  # the sort gives the labels and counts too (np.unique sorts again)
    starts = run_starts(sl)
    return sl[starts], Ragged.from_lengths(pix[order].astype(np.uint64),
                                           np.diff(np.append(starts, len(sl))))


__all__ = [
    "CR_RADIUS", "LABEL_BAND_CELLS", "LABEL_MAX_BANDS", "RMCR_RADIUS", "SP_RADIUS",
    "LACosmic", "default_gate", "detect_cosmic_rays", "group_stars", "label_stars",
    "labelled_pixels", "lacosmic", "laplacian_plus", "remove_cosmic_rays", "star_pixels",
    "window_indices",
]
