"""Where on the sky an array's cells lie: the celestial WCS of a run's FITS inputs, carried
to the arrays that keep their pixel grid, and the TAN (gnomonic) projection from pixels to
sky coordinates in plain numpy.

A WCS travels to the web page normalised, so that the page needs no FITS parser::

    {"ctype": ["RA---TAN", "DEC--TAN"], "crval": [lon0, lat0], "crpix": [p1, p2],
     "cd": [[cd11, cd12], [cd21, cd22]], "radesys": "ICRS", "axes": "x=column,y=row"}

FITS pixel axis 1 is the column (``x``) and axis 2 the row (``y``); FITS pixels count from
1, so the array cell ``(row, col)`` is the FITS pixel ``(col + 1, row + 1)``. ``crpix`` is
FITS (1-based). ``cd`` is the CD matrix (degrees per pixel), made from ``PC`` times
``CDELT`` when the header gives those; ``crval`` is in degrees.

A header is read once per file (:data:`_HEADERS`), never the pixels.

Examples
--------
>>> wcs = {"ctype": ["RA---TAN", "DEC--TAN"], "crval": [10.0, 20.0], "crpix": [1.0, 1.0],
...        "cd": [[-1e-4, 0.0], [0.0, 1e-4]], "radesys": "ICRS", "axes": AXES}
>>> lon, lat = pixel_to_sky(wcs, [0], [0])
>>> round(float(lon[0]), 9), round(float(lat[0]), 9)
(10.0, 20.0)
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from subzero.errors import SubZeroError

#: what the normalised WCS says of its pixel axes (FITS axis 1 is the column)
AXES = "x=column,y=row"
#: suffixes of FITS files (as :data:`subzero.engine.inputs.FITS_SUFFIXES`)
FITS_SUFFIXES = (".fits", ".fit", ".fts")
#: the celestial WCS of each FITS file read so far, by (path, size, mtime): a run's inputs
#: never change, and every explorer thread of a server asks for the same few files
_HEADERS: dict[tuple[str, int, float], dict[str, Any] | None] = {}
_HEADERS_LOCK = threading.Lock()
#: the first four letters of latitude axis types (the other celestial axis is longitude)
_LATITUDES = ("DEC-", "GLAT", "ELAT", "SLAT", "HLAT")


class SkyError(SubZeroError):
    """A WCS the projection here cannot use."""


def normalise(w: Any) -> dict[str, Any] | None:
    """The normalised dict (see the module docstring) of an astropy celestial WCS, or None
    when it has no two celestial axes."""
    w = w.celestial
    if w.naxis != 2 or not w.has_celestial:
        return None
    cd = np.asarray(w.pixel_scale_matrix, dtype=float)  # CD, or PC times CDELT
    radesys = str(w.wcs.radesys).strip() or None
    return {"ctype": [str(c) for c in w.wcs.ctype], "crval": [float(v) for v in w.wcs.crval],
            "crpix": [float(v) for v in w.wcs.crpix], "cd": cd.tolist(),
            "radesys": radesys, "axes": AXES}


def header_wcs(header: Any) -> dict[str, Any] | None:
    """The normalised celestial WCS of a FITS header, or None when it has none (or one
    astropy cannot parse)."""
    from astropy.wcs import WCS  # astropy only when a run has FITS inputs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # astropy's notes on non-standard keywords
        try:
            return normalise(WCS(header))
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - astropy.wcs raises its own classes for bad headers
            return None


def file_wcs(path: str | Path, shape: Sequence[int], size: int | None = None
             ) -> dict[str, Any] | None:
    """The celestial WCS of the first image in FITS file ``path`` when that image is 2-d
    of ``shape`` (rows, columns), else None; None too when the file is gone, not FITS, or
    no longer ``size`` bytes (it changed since the run read it). Only headers are read,
    each file once (:data:`_HEADERS`)."""
    p = Path(path)
    if p.suffix.lower() not in FITS_SUFFIXES or len(shape) != 2:
        return None
    try:
        st = p.stat()
    except OSError:
        return None
    if size is not None and st.st_size != size:
        return None
    key = (str(p), st.st_size, st.st_mtime)
    with _HEADERS_LOCK:
        if key in _HEADERS:
            return _HEADERS[key]
    got = _read_wcs(p, tuple(int(s) for s in shape))
    with _HEADERS_LOCK:
        _HEADERS[key] = got
    return got


def _read_wcs(p: Path, shape: tuple[int, ...]) -> dict[str, Any] | None:
    from astropy.io import fits  # astropy only when a run has FITS inputs

    try:
        with warnings.catch_warnings(), fits.open(p, memmap=True, lazy_load_hdus=True) as hdul:
            warnings.simplefilter("ignore")
            for hdu in hdul:
                h = hdu.header
                if not getattr(hdu, "is_image", False) or int(h.get("NAXIS", 0)) == 0:
                    continue
                # the image the engine reads (the first with pixels), if it is this grid
                if int(h["NAXIS"]) == 2 and (h.get("NAXIS2"), h.get("NAXIS1")) == shape:
                    return header_wcs(h)
                return None
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return None
    return None


def carry(shapes: Mapping[str, Sequence[int]], sources: Mapping[str, Sequence[str]],
          known: Mapping[str, dict[str, Any] | None]) -> dict[str, dict[str, Any] | None]:
    """Each array's WCS: ``known`` for the inputs, then, in ``sources`` order (each
    computed array with the arrays it is computed from), the first WCS among its sources
    of the same shape: an operator that keeps the pixel grid keeps the sky. Any other
    array has None.

    >>> w = {"ctype": ["RA---TAN", "DEC--TAN"]}
    >>> carry({"a": (4, 4), "b": (4, 4), "c": (1, 1)}, {"b": ["a"], "c": ["b"]}, {"a": w})
    {'a': {'ctype': ['RA---TAN', 'DEC--TAN']}, 'b': {'ctype': ['RA---TAN', 'DEC--TAN']}, 'c': None}
    """
    out: dict[str, dict[str, Any] | None] = {n: known.get(n) for n in shapes
                                              if n not in sources}
    for name, inputs in sources.items():
        out[name] = next((out.get(i) for i in inputs if out.get(i) is not None
                          and tuple(shapes.get(i, ())) == tuple(shapes.get(name, ()))), None)
    return out


def pixel_to_sky(wcs_json: Mapping[str, Any], rows: Any, cols: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Sky coordinates (longitude in 0..360, latitude; degrees) of the centres of array
    cells ``(rows, cols)`` (0-based), by the TAN (gnomonic) projection of ``wcs_json`` (the
    normalised dict, see the module docstring).

    The steps, as the web page repeats them:

    1. FITS pixel: ``p1 = col + 1``, ``p2 = row + 1``;
    2. intermediate world coordinates in degrees: ``[x, y] = cd @ [p1 - crpix1, p2 - crpix2]``;
    3. ``xi``, ``eta`` = ``x``, ``y`` in radians (swapped when axis 1 is the latitude);
    4. with ``a0``, ``d0`` = ``crval`` in radians: ``den = cos(d0) - eta * sin(d0)``,
       ``lon = a0 + atan2(xi, den)``, ``lat = atan2(sin(d0) + eta * cos(d0),
       hypot(xi, den))``.

    Raises
    ------
    SkyError
        A projection other than TAN, or a dict without the keys above.
    """
    try:
        ctype = [str(c) for c in wcs_json["ctype"]]
        crval = np.asarray(wcs_json["crval"], dtype=float).reshape(2)
        crpix = np.asarray(wcs_json["crpix"], dtype=float).reshape(2)
        cd = np.asarray(wcs_json["cd"], dtype=float).reshape(2, 2)
    except (KeyError, TypeError, ValueError):
        raise SkyError(f"WCS {str(dict(wcs_json))[:80]}: expected ctype, crval, crpix and "
                       "cd of two axes") from None
    if len(ctype) != 2 or any(c[4:].rstrip() != "-TAN" for c in ctype):
        raise SkyError(f"projection {ctype!r}: only TAN (gnomonic) is supported")
    p1 = np.asarray(cols, dtype=float) + 1.0
    p2 = np.asarray(rows, dtype=float) + 1.0
    dx, dy = p1 - crpix[0], p2 - crpix[1]
    x = np.radians(cd[0, 0] * dx + cd[0, 1] * dy)
    y = np.radians(cd[1, 0] * dx + cd[1, 1] * dy)
    swapped = ctype[0][:4] in _LATITUDES
    xi, eta = (y, x) if swapped else (x, y)
    a0, d0 = np.radians(crval[1] if swapped else crval[0]), np.radians(
        crval[0] if swapped else crval[1])
    den = np.cos(d0) - eta * np.sin(d0)
    lon = np.degrees(a0 + np.arctan2(xi, den)) % 360.0
    lat = np.degrees(np.arctan2(np.sin(d0) + eta * np.cos(d0), np.hypot(xi, den)))
    return lon, lat
