"""Data for the astronomy workflow: the real LSST exposures, and generated ones like them.

The workflow (WORKFLOWS.md, "Astronomy") takes two exposures of the same patch of sky,
2001 x 513 uint16 images. The real ones (LSST ImSim, one CCD) live outside the repository
in ``../shared/data/lsst`` or ``$SUBZERO_DATA/lsst``; a new user has none, so
:func:`generate_exposures` makes a pair with the same shape and character:

- a bias of about 1007 counts and an overscan strip (row 0 and columns 0-3 hold bias and
  read noise only, like the real CCD; the workflow's ``overscanimg`` reads pixel (0, 0));
- a sky of about 600 counts above bias (median about 1600) with Poisson noise in electrons
  (gain 2.2) plus read noise (10 e-), so the sky noise is about 17 counts (the real
  exposures: about 19);
- stars with one Gaussian PSF (sigma 1.5 pixels), the *same* signal in both exposures;
- cosmic-ray hits (single pixels and 2-3 pixel tracks, much sharper than the PSF) that
  differ between the exposures; :func:`generate_scene` also returns where they are.

Examples
--------
>>> exp1, exp2 = generate_exposures(seed=1, shape=(60, 50))
>>> exp1.shape, exp1.dtype.name
((60, 50), 'uint16')
>>> scene = generate_scene(seed=1, shape=(60, 50))
>>> bool((scene.exp1 == exp1).all()), scene.cr1.shape
(True, (60, 50))
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from subzero.errors import SubZeroError

#: Shape of one LSST exposure (rows, columns).
EXPOSURE_SHAPE = (2001, 513)
#: The two real exposures and the small cosmic-ray test image, relative to the data folder.
EXPOSURE_FILES = (
    "lsst/imsim_85408556_R23_S11_C04_E000.fits",
    "lsst/imsim_85408556_R23_S11_C04_E001.fits",
)
CRTEST_FILE = "lsst/crtest.fits"

#: Detector and sky constants shared by the generator and the workflow's UDF parameters.
GAIN = 2.2  # electrons per count
READ_NOISE = 10.0  # electrons
BIAS = 1007.0  # counts (the real overscan reads 1003..1011)
SKY = 600.0  # counts above bias (real exposures: median 1601 - bias 1007)
PSF_SIGMA = 1.5  # pixels
OVERSCAN_ROWS = 1
OVERSCAN_COLS = 4
SATURATION = 65535


class ExposureError(SubZeroError):
    """An exposure file that is missing, unreadable, or not an LSST exposure."""


# ---------------------------------------------------------------------------------------
# real data
# ---------------------------------------------------------------------------------------


def data_dir() -> Path | None:
    """The shared data folder: ``$SUBZERO_DATA`` when set (even if it does not exist, so a
    wrong setting fails loudly when a file is read), else ``../shared/data`` next to the
    repository when present, else None.

    >>> d = data_dir()
    >>> d is None or isinstance(d, Path)
    True
    """
    env = os.environ.get("SUBZERO_DATA")
    if env:
        return Path(env)
    guess = Path(__file__).resolve().parents[2] / "shared" / "data"
    return guess if guess.is_dir() else None


def exposure_paths(data: str | Path | None = None) -> tuple[Path, Path] | None:
    """Paths of the two real exposures under ``data`` (default :func:`data_dir`), or None
    when there is no data folder or the files are not in it."""
    root = Path(data) if data is not None else data_dir()
    if root is None:
        return None
    paths = tuple(root / f for f in EXPOSURE_FILES)
    return paths if all(p.is_file() for p in paths) else None  # type: ignore[return-value]


def load_fits(path: str | Path) -> np.ndarray:
    """The first image HDU of a FITS file as a native-byte-order numpy array.

    Raises :class:`ExposureError` when the file is missing, is not FITS, or has no image.
    """
    from astropy.io import fits  # astropy only for FITS exposures

    p = Path(path)
    if not p.is_file():
        raise ExposureError(f"FITS file {str(p)!r} does not exist")
    try:
        with fits.open(p, memmap=False) as hdul:
            for hdu in hdul:
                if getattr(hdu, "is_image", False) and hdu.data is not None:
                    arr = np.asarray(hdu.data)
                    return arr.astype(arr.dtype.newbyteorder("="), copy=False)
    except (OSError, ValueError, TypeError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ExposureError(f"cannot read {str(p)!r} as FITS: {msg}") from None
    raise ExposureError(f"FITS file {str(p)!r} holds no image")


def load_exposure(path: str | Path,
                  shape: tuple[int, int] | None = EXPOSURE_SHAPE) -> np.ndarray:
    """Read one LSST exposure as a uint16 image.

    The files store BITPIX 16 with BZERO 32768, which astropy scales to uint16. Integer
    images in ``0..65535`` of another integer type are converted; anything else (floats,
    negative counts, another shape) raises :class:`ExposureError`. ``shape=None`` accepts
    any 2-d shape.

    >>> paths = exposure_paths()
    >>> paths is None or load_exposure(paths[0]).shape == EXPOSURE_SHAPE
    True
    """
    arr = load_fits(path)
    if arr.ndim != 2:
        raise ExposureError(f"exposure {str(path)!r} has {arr.ndim} axes; expected a 2-d image")
    if shape is not None and arr.shape != tuple(shape):
        raise ExposureError(
            f"exposure {str(path)!r} has shape {arr.shape}; expected {tuple(shape)}")
    if arr.dtype.kind not in "iu":
        raise ExposureError(
            f"exposure {str(path)!r} holds {arr.dtype} pixels; expected integer counts (uint16)")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > 65535):
        raise ExposureError(
            f"exposure {str(path)!r} has counts {int(arr.min())}..{int(arr.max())}; "
            "expected 0..65535 (uint16)")
    return arr.astype(np.uint16, copy=False)


# ---------------------------------------------------------------------------------------
# generated data
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scene:
    """A generated pair of exposures and what was put into them.

    Attributes
    ----------
    exp1, exp2 : the exposures (uint16).
    stars : the star signal in counts (float64, identical in both exposures).
    star_table : one row per star: ``(row, col, peak counts)``.
    cr1, cr2 : bool masks of the pixels hit by a cosmic ray in each exposure.
    """

    exp1: np.ndarray
    exp2: np.ndarray
    stars: np.ndarray
    star_table: np.ndarray
    cr1: np.ndarray
    cr2: np.ndarray


def _render_stars(shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray,
                  peaks: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian stars summed into an image, all at once (one stamp per star, bincount)."""
    h, w = shape
    img = np.zeros(h * w)
    if len(rows) == 0:
        return img.reshape(shape)
    r = int(np.ceil(5 * sigma))
    off = np.arange(-r, r + 1)
    cy = np.floor(rows).astype(np.int64)[:, None, None] + off[None, :, None]
    cx = np.floor(cols).astype(np.int64)[:, None, None] + off[None, None, :]
    val = peaks[:, None, None] * np.exp(
        -((cy - rows[:, None, None]) ** 2 + (cx - cols[:, None, None]) ** 2) / (2 * sigma**2))
    cy, cx = np.broadcast_arrays(cy, cx)
    ok = (cy >= 0) & (cy < h) & (cx >= 0) & (cx < w)
    img += np.bincount((cy * w + cx)[ok], weights=val[ok], minlength=h * w)
    return img.reshape(shape)


def _cosmic_rays(rng: np.random.Generator, shape: tuple[int, int], n: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` cosmic-ray hits: a point or a 2-3 pixel track in one of 8 directions, each
    pixel depositing 150..5000 counts (log-uniform). Returns (deposit image, hit mask)."""
    h, w = shape
    dep = np.zeros(h * w)
    if n == 0 or h * w == 0:
        return dep.reshape(shape), np.zeros(shape, dtype=bool)
    length = rng.integers(1, 4, n)  # 1, 2 or 3 pixels
    dirs = np.array([[0, 1], [1, 0], [1, 1], [1, -1], [0, -1], [-1, 0], [-1, -1], [-1, 1]])
    d = dirs[rng.integers(0, len(dirs), n)]
    y0, x0 = rng.integers(0, h, n), rng.integers(0, w, n)
    step = np.arange(3)
    ys = y0[:, None] + d[:, 0:1] * step[None, :]
    xs = x0[:, None] + d[:, 1:2] * step[None, :]
    use = (step[None, :] < length[:, None]) & (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
    energy = np.exp(rng.uniform(np.log(150.0), np.log(5000.0), ys.shape))
    dep += np.bincount((ys * w + xs)[use], weights=energy[use], minlength=h * w)
    return dep.reshape(shape), dep.reshape(shape) > 0


def generate_scene(seed: int = 0, shape: tuple[int, int] = EXPOSURE_SHAPE,
                   n_stars: int | None = None, n_cosmics: int | None = None) -> Scene:
    """Two exposures of one generated star field with different cosmic rays.

    Parameters
    ----------
    seed : random seed; the same seed gives the same scene.
    shape : image shape (rows, columns).
    n_stars : number of stars (default: one per 4,000 pixels, at least 1).
    n_cosmics : cosmic-ray hits per exposure (default: one per 20,000 pixels, at least 1).

    Examples
    --------
    >>> s = generate_scene(seed=3, shape=(40, 40), n_stars=2, n_cosmics=3)
    >>> s.star_table.shape, int(s.cr1.sum()) >= 3
    ((2, 3), True)
    """
    given = shape
    try:
        shape = tuple(int(v) for v in shape)
    except (TypeError, ValueError):
        shape = ()
    if len(shape) != 2 or min(shape) < 1:
        raise ExposureError(f"shape must be two positive ints. Got {given!r} instead.")
    h, w = shape
    rng = np.random.default_rng(seed)
    n_stars = max(1, h * w // 4000) if n_stars is None else int(n_stars)
    n_cosmics = max(1, h * w // 20000) if n_cosmics is None else int(n_cosmics)
    rows = rng.uniform(OVERSCAN_ROWS, h, n_stars)
    cols = rng.uniform(min(OVERSCAN_COLS, w - 1), w, n_stars)
    # star brightness: many faint, few bright (log-uniform peak, 60..58000 counts)
    peaks = np.exp(rng.uniform(np.log(60.0), np.log(58000.0), n_stars))
    stars = _render_stars(shape, rows, cols, peaks, PSF_SIGMA)
    sky = np.full(shape, SKY)
    sky[:OVERSCAN_ROWS, :] = 0.0
    sky[:, :OVERSCAN_COLS] = 0.0
    signal = sky + stars
    signal[:OVERSCAN_ROWS, :] = 0.0  # the overscan sees no light
    signal[:, :OVERSCAN_COLS] = 0.0
    exps, crs = [], []
    for _ in range(2):
        electrons = rng.poisson(signal * GAIN).astype(np.float64)
        counts = BIAS + electrons / GAIN + rng.normal(0.0, READ_NOISE / GAIN, shape)
        dep, hit = _cosmic_rays(rng, shape, n_cosmics)
        exps.append(np.clip(np.rint(counts + dep), 0, SATURATION).astype(np.uint16))
        crs.append(hit)
    table = np.stack([rows, cols, peaks], axis=1)
    return Scene(exps[0], exps[1], stars, table, crs[0], crs[1])


def generate_exposures(seed: int = 0, shape: tuple[int, int] = EXPOSURE_SHAPE
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Two uint16 exposures of the same generated sky (see :func:`generate_scene`).

    >>> a, b = generate_exposures(seed=0, shape=(100, 80))
    >>> 1500 < float(np.median(a)) < 1700, bool((a != b).any())
    (True, True)
    """
    s = generate_scene(seed, shape)
    return s.exp1, s.exp2


def subtract_background(exp: np.ndarray) -> np.ndarray:
    """The workflow's calibration chain up to ``rmbg``, in plain numpy (a reference).

    ``badpixrm`` (90 where a pixel is 0), minus the overscan pixel (0, 0), zero bias and
    dark, unit flat, minus the global mean. The result is what ``cr`` sees.

    >>> r = subtract_background(np.array([[10, 12], [14, 16]], dtype=np.uint16))
    >>> r.tolist()
    [[-3.0, -1.0], [1.0, 3.0]]
    """
    x = exp.astype(np.float64)
    x = np.where(x == 0, 90.0, x)
    x = x - x[0, 0]
    return x - x.mean()
