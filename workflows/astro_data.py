"""Data for the astronomy workflow: the real LSST exposures, and generated ones like them.

The workflow (WORKFLOWS.md, "Astronomy") takes two exposures of the same patch of sky,
2001 x 513 uint16 images. The real ones (LSST ImSim, one CCD) live outside the repository
in ``../shared/data/lsst`` or ``$SUBZERO_DATA/lsst``; a new user has none, so
:func:`generate_exposures` makes a pair with the same shape and character:

- a bias of about 1007 counts and an overscan strip (row 0 and columns 0-3 hold bias and
  read noise only, like the real CCD; the workflow's ``overscanimg`` reads pixel (0, 0));
- a sky of about 600 counts above bias (median about 1600) with shot noise in electrons
  (gain 2.2) plus read noise (10 e-), so the sky noise is about 17 counts (the real
  exposures: about 19); the shot noise is Poisson's normal approximation, one normal draw
  per pixel for both noises (at the sky's 1,320 electrons and above the two differ by
  skewness 0.03, while drawing Poisson would be a large share of a generated run's CPU);
- stars with one Gaussian PSF (sigma 1.5 pixels), the *same* signal in both exposures;
- cosmic-ray hits (single pixels and 2-3 pixel tracks, much sharper than the PSF) that
  differ between the exposures; :func:`generate_scene` also returns where they are.

:class:`ExposureField` makes any box of a generated exposure on its own (a workflow input's
``blocks``), so an exposure many times this size never exists whole in one process: the
star and cosmic-ray tables are small and come from the seed, and the noise is drawn in
bands of whole rows, each from its own generator. :func:`generate_scene` and
:func:`generate_exposures` are the same code over the whole image, so they agree exactly
with any box.

Examples
--------
>>> exp1, exp2 = generate_exposures(seed=1, shape=(60, 50))
>>> exp1.shape, exp1.dtype.name
((60, 50), 'uint16')
>>> scene = generate_scene(seed=1, shape=(60, 50))
>>> bool((scene.exp1 == exp1).all()), scene.cr1.shape
(True, (60, 50))
>>> part = ExposureField(seed=1, shape=(60, 50)).exposure(1, Box((20, 10), (40, 30)))
>>> bool((part == exp1[20:40, 10:30]).all())
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

from subzero.cells import Box
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

#: The noise of generated exposures is drawn in bands of this many whole rows, each from a
#: generator seeded by (seed, exposure, band): a box's values depend only on the bands it
#: overlaps, so any cut of the image gives the same pixels.
NOISE_BAND_ROWS = 64
_STREAM_STARS, _STREAM_COSMICS, _STREAM_NOISE = 0, 1, 2  # independent random streams
_STAMP = int(np.ceil(5 * PSF_SIGMA))  # a star is rendered out to 5 sigma (8 pixels)


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


def parse_exposure_shape(shape: Any) -> tuple[int, int]:
    """A generated exposure's shape: two positive ints.

    >>> parse_exposure_shape([60, "50"])
    (60, 50)
    """
    try:
        shp = tuple(int(v) for v in shape)
    except (TypeError, ValueError):
        shp = ()
    if len(shp) != 2 or min(shp) < 1:
        raise ExposureError(f"shape must be two positive ints. Got {shape!r} instead.")
    return shp  # type: ignore[return-value]


def _count(value: Any, what: str) -> int:
    """A non-negative int (a seed, a number of stars), or an error naming the value."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ExposureError(f"{what} must be a non-negative int. Got {value!r} instead.")
    if value < 0:
        raise ExposureError(f"{what} must be a non-negative int. Got {value!r} instead.")
    return int(value)


@dataclass(frozen=True)
class ExposureField:
    """A generated CCD: its star field and two exposures of it, made box by box.

    The star table and each exposure's cosmic-ray table come from ``seed`` (small: one
    star per 4,000 pixels and one hit per 20,000 by default); the noise is drawn in bands
    of :data:`NOISE_BAND_ROWS` whole rows (see there). So :meth:`exposure` gives, for any
    box, exactly that slice of the whole exposure, without making the whole image: a
    workflow input's ``blocks`` (see :meth:`blocks`). Pickles as its four fields (the
    tables are recomputed, in about a millisecond).

    Parameters
    ----------
    seed : random seed (a non-negative int); the same seed gives the same exposures.
    shape : image shape (rows, columns).
    n_stars : number of stars (default: one per 4,000 pixels, at least 1).
    n_cosmics : cosmic-ray hits per exposure (default: one per 20,000 pixels, at least 1).

    Examples
    --------
    >>> f = ExposureField(seed=1, shape=(60, 50))
    >>> whole = f.exposure(1, Box.full((60, 50)))
    >>> part = f.exposure(1, Box((10, 5), (30, 20)))
    >>> part.dtype.name, bool((part == whole[10:30, 5:20]).all())
    ('uint16', True)
    """

    seed: int = 0
    shape: tuple[int, int] = EXPOSURE_SHAPE
    n_stars: int | None = None
    n_cosmics: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", parse_exposure_shape(self.shape))
        object.__setattr__(self, "seed", _count(self.seed, "seed"))
        h, w = self.shape
        n_stars = max(1, h * w // 4000) if self.n_stars is None else self.n_stars
        n_cosmics = max(1, h * w // 20000) if self.n_cosmics is None else self.n_cosmics
        object.__setattr__(self, "n_stars", _count(n_stars, "n_stars"))
        object.__setattr__(self, "n_cosmics", _count(n_cosmics, "n_cosmics"))

    def __getstate__(self) -> dict[str, Any]:
        # only the fields: the cached tables are recomputed where the object is unpickled
        return {f: getattr(self, f) for f in ("seed", "shape", "n_stars", "n_cosmics")}

    # -- the tables ------------------------------------------------------------------------
    @cached_property
    def star_table(self) -> np.ndarray:
        """One row per star, sorted by row: ``(row, col, peak counts)`` (float64)."""
        h, w = self.shape
        n = self.n_stars
        rng = np.random.default_rng([self.seed, _STREAM_STARS])
        rows = rng.uniform(OVERSCAN_ROWS, h, n)
        cols = rng.uniform(min(OVERSCAN_COLS, w - 1), w, n)
        # star brightness: many faint, few bright (log-uniform peak, 60..58000 counts)
        peaks = np.exp(rng.uniform(np.log(60.0), np.log(58000.0), n))
        table = np.stack([rows, cols, peaks], axis=1)
        return table[np.argsort(rows, kind="stable")]

    @cached_property
    def _cosmic_tables(self) -> tuple[np.ndarray, np.ndarray]:
        return self._cosmic_table(1), self._cosmic_table(2)

    def _cosmic_table(self, e: int) -> np.ndarray:
        """Exposure ``e``'s cosmic-ray pixels ``(row, col, counts)``, sorted by row: each hit
        a point or a 2-3 pixel track in one of 8 directions, each pixel depositing 150..5000
        counts (log-uniform); track pixels off the image are dropped."""
        h, w = self.shape
        n = self.n_cosmics
        rng = np.random.default_rng([self.seed, _STREAM_COSMICS, e])
        length = rng.integers(1, 4, n)  # 1, 2 or 3 pixels
        dirs = np.array([[0, 1], [1, 0], [1, 1], [1, -1], [0, -1], [-1, 0], [-1, -1], [-1, 1]])
        d = dirs[rng.integers(0, len(dirs), n)]
        y0, x0 = rng.integers(0, h, n), rng.integers(0, w, n)
        step = np.arange(3)
        ys = y0[:, None] + d[:, 0:1] * step[None, :]
        xs = x0[:, None] + d[:, 1:2] * step[None, :]
        energy = np.exp(rng.uniform(np.log(150.0), np.log(5000.0), ys.shape))
        use = (step[None, :] < length[:, None]) & (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
        table = np.stack([ys[use], xs[use], energy[use]], axis=1).astype(np.float64)
        return table[np.argsort(table[:, 0], kind="stable")]

    def cosmic_table(self, e: int) -> np.ndarray:
        """The cosmic-ray pixels of exposure ``e`` (1 or 2): rows ``(row, col, counts)``; a
        pixel hit twice appears twice."""
        return self._cosmic_tables[_exposure_index(e)]

    # -- any box ---------------------------------------------------------------------------
    def _box(self, box: Box) -> Box:
        if not isinstance(box, Box):
            raise ExposureError(f"expected a subzero.cells.Box. Got {box!r} instead.")
        if box.ndim != 2 or any(not 0 <= lo <= hi <= n
                                for lo, hi, n in zip(box.lo, box.hi, self.shape)):
            raise ExposureError(f"box {box} does not fit in the exposure's shape {self.shape}")
        return box

    def stars(self, box: Box) -> np.ndarray:
        """The star signal in ``box`` (float64 counts above sky, the same in both exposures)."""
        return _render_stars(self._box(box), self.star_table, PSF_SIGMA)

    def deposit(self, e: int, box: Box) -> np.ndarray:
        """Cosmic-ray counts deposited in ``box`` of exposure ``e`` (float64)."""
        return _render_hits(self._box(box), self.cosmic_table(e))

    def cosmic_rays(self, e: int, box: Box) -> np.ndarray:
        """Bool mask of the pixels of ``box`` that a cosmic ray hit in exposure ``e``."""
        return self.deposit(e, box) > 0

    def exposure(self, e: int, box: Box) -> np.ndarray:
        """Exposure ``e`` (1 or 2) in ``box``: uint16 counts, the same as that slice of the
        whole exposure however the image is cut."""
        i = _exposure_index(e)
        box = self._box(box)
        out = np.empty(box.shape, dtype=np.uint16)
        (r0, c0), (r1, c1) = box.lo, box.hi
        if box.is_empty():
            return out
        h, w = self.shape
        b = NOISE_BAND_ROWS
        for band in range(r0 // b, (r1 - 1) // b + 1):
            lo, hi = band * b, min((band + 1) * b, h)
            counts = self._band_counts(i + 1, band, Box((lo, 0), (hi, w)))
            part = Box((max(lo, r0), c0), (min(hi, r1), c1))
            counts = counts[part.lo[0] - lo:part.hi[0] - lo, c0:c1]
            counts += _render_hits(part, self.cosmic_table(i + 1))
            out[part.lo[0] - r0:part.hi[0] - r0] = np.clip(np.rint(counts), 0, SATURATION)
        return out

    def _band_counts(self, e: int, band: int, box: Box) -> np.ndarray:
        """Sky, stars, shot and read noise of one whole band (float64 counts, without
        cosmic rays), from the band's own generator: ``signal + BIAS + sigma z`` with
        ``sigma**2 = signal / GAIN + (READ_NOISE / GAIN)**2`` (Poisson's normal approximation
        for the electrons; the overscan, with no light, has read noise only)."""
        signal = SKY + _render_stars(box, self.star_table, PSF_SIGMA)
        signal[:max(0, OVERSCAN_ROWS - box.lo[0]), :] = 0.0  # the overscan sees no light
        signal[:, :OVERSCAN_COLS] = 0.0
        rng = np.random.default_rng([self.seed, _STREAM_NOISE, e, band])
        sigma = np.sqrt(signal * (1.0 / GAIN) + (READ_NOISE / GAIN) ** 2)
        sigma *= rng.standard_normal(signal.shape)
        signal += BIAS
        signal += sigma
        return signal

    def blocks(self, e: int) -> Callable[[Box], np.ndarray]:
        """Exposure ``e`` as a workflow input's ``blocks(box)`` (small and picklable).

        >>> f = ExposureField(seed=2, shape=(20, 10))
        >>> f.blocks(2)(Box((0, 0), (2, 3))).shape
        (2, 3)
        """
        _exposure_index(e)
        return partial(self.exposure, e)


def _exposure_index(e: int) -> int:
    if e not in (1, 2):
        raise ExposureError(f"exposure must be 1 or 2. Got {e!r} instead.")
    return int(e) - 1


def _render_stars(box: Box, table: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian stars summed into ``box``, all at once (a stamp per star near the box,
    bincount). Only stars within the stamp radius of the box are rendered; each pixel sums
    its stars in table order, so any box gives the same values as the whole image."""
    (r0, c0), (r1, c1) = box.lo, box.hi
    h, w = box.shape
    img = np.zeros(h * w)
    fy = np.floor(table[:, 0]).astype(np.int64)
    first, last = np.searchsorted(fy, [r0 - _STAMP, r1 + _STAMP], side="left")
    near = table[first:last]
    fy = fy[first:last]
    fx = np.floor(near[:, 1]).astype(np.int64)
    keep = (fy + _STAMP >= r0) & (fy - _STAMP < r1) & (fx + _STAMP >= c0) & (fx - _STAMP < c1)
    if h * w == 0 or not keep.any():
        return img.reshape(box.shape)
    rows, cols, peaks = near[keep, 0], near[keep, 1], near[keep, 2]
    off = np.arange(-_STAMP, _STAMP + 1)
    cy = fy[keep][:, None, None] + off[None, :, None]
    cx = fx[keep][:, None, None] + off[None, None, :]
    val = peaks[:, None, None] * np.exp(
        -((cy - rows[:, None, None]) ** 2 + (cx - cols[:, None, None]) ** 2) / (2 * sigma**2))
    cy, cx = np.broadcast_arrays(cy, cx)
    ok = (cy >= r0) & (cy < r1) & (cx >= c0) & (cx < c1)
    img += np.bincount(((cy - r0) * w + (cx - c0))[ok], weights=val[ok], minlength=h * w)
    return img.reshape(box.shape)


def _render_hits(box: Box, table: np.ndarray) -> np.ndarray:
    """Cosmic-ray pixels ``(row, col, counts)`` summed into ``box`` (in table order)."""
    (r0, c0), (r1, c1) = box.lo, box.hi
    h, w = box.shape
    first, last = np.searchsorted(table[:, 0], [r0, r1], side="left")
    t = table[first:last]
    ys, xs = t[:, 0].astype(np.int64), t[:, 1].astype(np.int64)
    ok = (xs >= c0) & (xs < c1)
    dep = np.bincount(((ys - r0) * w + (xs - c0))[ok], weights=t[ok, 2], minlength=h * w)
    return dep.reshape(box.shape)


def generate_scene(seed: int = 0, shape: tuple[int, int] = EXPOSURE_SHAPE,
                   n_stars: int | None = None, n_cosmics: int | None = None) -> Scene:
    """Two exposures of one generated star field with different cosmic rays, whole (the
    :class:`ExposureField` of these arguments over its full box).

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
    field = ExposureField(seed, shape, n_stars, n_cosmics)
    full = Box.full(field.shape)
    return Scene(field.exposure(1, full), field.exposure(2, full), field.stars(full),
                 field.star_table, field.cosmic_rays(1, full), field.cosmic_rays(2, full))


def generate_exposures(seed: int = 0, shape: tuple[int, int] = EXPOSURE_SHAPE
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Two uint16 exposures of the same generated sky (see :func:`generate_scene`; for
    parts of large ones, :class:`ExposureField`).

    >>> a, b = generate_exposures(seed=0, shape=(100, 80))
    >>> 1500 < float(np.median(a)) < 1700, bool((a != b).any())
    (True, True)
    """
    field = ExposureField(seed, shape)
    full = Box.full(field.shape)
    return field.exposure(1, full), field.exposure(2, full)


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
