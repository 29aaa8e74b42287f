"""ds9 region files for 2-d masks: a query's answer as boxes to load into ds9, and regions
drawn in ds9 as a query's start cells.

Coordinates are ds9's ``image`` system: 1-based, pixel centres at integers, ``x`` the
column and ``y`` the row, so the array cell ``(r, c)`` is centred at ``x = c + 1``,
``y = r + 1``. A cell is inside a region when its centre is: a box covers the centres
``xc - w/2 <= x < xc + w/2`` (likewise ``y``; so ``box(5,5,2,2,0)`` covers exactly 2 x 2
cells), a circle or ellipse the centres at most its radius away, a polygon the centres
inside it (even-odd rule), a point the cell it falls in. A cell is selected when it is in
some included region and in no excluded one (``-box(...)``), whatever their order.

``physical`` coordinates are taken as ``image`` ones (the arrays here carry no ``LTV`` or
``LTM`` keywords: the two systems agree). Regions in sky coordinates (``fk5``, ``icrs``,
``galactic``...) are refused: convert them to image coordinates in ds9 first.

>>> m = np.zeros((4, 6), bool); m[1:3, 2:5] = True
>>> print(mask_to_ds9(m, m.shape).splitlines()[-1])
box(4,2.5,3,2,0)
>>> bool((ds9_to_mask(mask_to_ds9(m, m.shape), m.shape) == m).all())
True
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from subzero.errors import CellError

HEADER = "# Region file format: DS9 version 4.1"
#: coordinate systems that name sky positions (a region in one is refused)
SKY_SYSTEMS = {"fk4", "fk5", "icrs", "galactic", "ecliptic", "j2000", "b1950", "wcs"}
#: systems ds9 knows that are neither image nor sky
OTHER_SYSTEMS = {"linear", "amplifier", "detector"}
#: shapes that mark no area: skipped
ANNOTATIONS = {"text", "line", "vector", "ruler", "compass", "projection"}
#: the shapes read, with their number of parameters (polygon: pairs, three or more)
SHAPES = {"box": (4, 5), "circle": (3, 3), "ellipse": (4, 5), "point": (2, 2),
          "polygon": (6, None)}
_SHAPE = re.compile(r"([+-]?)\s*([a-z]+)\s*(?:\((.*)\)|\s+(.*)|)\s*$")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[ip]?")


class RegionError(CellError):
    """Region text that is not ds9 image regions (one line)."""


@dataclass(frozen=True)
class Region:
    """One ds9 region in image coordinates: its shape, its numbers as written (degrees
    for angles) and whether it excludes."""

    shape: str
    args: tuple[float, ...]
    exclude: bool = False

    def bounds(self) -> tuple[float, float, float, float]:
        """``(xmin, xmax, ymin, ymax)`` of the region in image coordinates."""
        a = self.args
        if self.shape == "polygon":
            xs, ys = a[0::2], a[1::2]
            return min(xs), max(xs), min(ys), max(ys)
        if self.shape == "point":
            return a[0] - 0.5, a[0] + 0.5, a[1] - 0.5, a[1] + 0.5
        if self.shape == "circle":
            return a[0] - a[2], a[0] + a[2], a[1] - a[2], a[1] + a[2]
        half = (a[2] / 2, a[3] / 2) if self.shape == "box" else (a[2], a[3])
        reach = math.hypot(*half)  # rotated: within the circle through its corners
        if len(a) < 5 or a[4] % 90 == 0:
            hx, hy = half if len(a) < 5 or a[4] % 180 == 0 else half[::-1]
            return a[0] - hx, a[0] + hx, a[1] - hy, a[1] + hy
        return a[0] - reach, a[0] + reach, a[1] - reach, a[1] + reach

    def inside(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Whether the points ``(x, y)`` (image coordinates, broadcast) are inside."""
        a = self.args
        if self.shape == "point":
            return (np.floor(x - 0.5) == math.floor(a[0] - 0.5)) & \
                (np.floor(y - 0.5) == math.floor(a[1] - 0.5))
        if self.shape == "circle":
            return (x - a[0]) ** 2 + (y - a[1]) ** 2 <= a[2] ** 2
        if self.shape == "polygon":
            return _in_polygon(np.asarray(a[0::2]), np.asarray(a[1::2]), x, y)
        # box and ellipse: in the frame turned by the region's angle (a quarter turn is
        # the sides swapped, so that such a box covers whole cells as an upright one does)
        angle = a[4] % 180 if len(a) > 4 else 0.0
        w, h = (a[3], a[2]) if angle == 90 else (a[2], a[3])
        t = 0.0 if angle in (0, 90) else math.radians(angle)
        dx, dy = x - a[0], y - a[1]
        u = dx * math.cos(t) + dy * math.sin(t)
        v = -dx * math.sin(t) + dy * math.cos(t)
        if self.shape == "ellipse":
            return (u / w) ** 2 + (v / h) ** 2 <= 1.0
        return (-w / 2 <= u) & (u < w / 2) & (-h / 2 <= v) & (v < h / 2)


def _in_polygon(px: np.ndarray, py: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Even-odd rule: a point is inside when a ray toward +x crosses the edges an odd
    number of times (an edge counts when it spans the point's ``y``, half-open)."""
    x, y = np.broadcast_arrays(x, y)
    odd = np.zeros(x.shape, dtype=bool)
    for k in range(len(px)):
        x0, y0, x1, y1 = px[k - 1], py[k - 1], px[k], py[k]
        if y0 == y1:
            continue  # a horizontal edge crosses no ray
        spans = (y0 <= y) != (y1 <= y)
        at = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
        odd ^= spans & (x < at)
    return odd


def _numbers(shape: str, text: str, line: str) -> tuple[float, ...]:
    parts = [p for p in re.split(r"[\s,]+", text.strip()) if p]
    values = []
    for p in parts:
        if not _NUMBER.fullmatch(p):
            if re.search(r"[:\"'dhms]", p):
                raise RegionError(f"region {line[:80]!r} in sky coordinates; expected image "
                                  "coordinates")
            raise RegionError(f"region {line[:80]!r}: {p[:40]!r} is not a number")
        values.append(float(p.rstrip("ip")))
    least, most = SHAPES[shape]
    if len(values) < least or (most is not None and len(values) > most) or \
            (shape == "polygon" and len(values) % 2):
        want = ("x1,y1,x2,y2,x3,y3,..." if shape == "polygon" else
                {"box": "x,y,width,height[,angle]", "circle": "x,y,radius",
                 "ellipse": "x,y,rx,ry[,angle]", "point": "x,y"}[shape])
        raise RegionError(f"region {line[:80]!r}: expected {shape}({want})")
    if not all(math.isfinite(v) for v in values):
        raise RegionError(f"region {line[:80]!r}: expected finite numbers")
    if shape in ("box", "ellipse", "circle") and min(values[2:4]) <= 0:
        raise RegionError(f"region {line[:80]!r}: expected sizes > 0")
    return tuple(values)


def parse_ds9(text: str) -> list[Region]:
    """The regions of ds9 region text (see the module docstring); comments, ``global``
    lines and annotations (text, line, vector...) are skipped.

    Raises
    ------
    RegionError
        A region in sky (or another non-image) coordinates, a shape not read here, or a
        line that is no region, naming it.

    Examples
    --------
    >>> parse_ds9("image\\n-circle(3,4,2) # color=red")
    [Region(shape='circle', args=(3.0, 4.0, 2.0), exclude=True)]
    """
    if not isinstance(text, str):
        raise RegionError(f"region {str(text)[:60]!r}: expected ds9 region text")
    system = "image"
    out = []
    for line in text.splitlines():
        for part in line.split("#", 1)[0].split(";"):
            item = part.strip()
            low = item.lower()
            if not item or low.startswith("global"):
                continue
            if low in ("image", "physical") or low in SKY_SYSTEMS or low in OTHER_SYSTEMS \
                    or re.fullmatch(r"wcs[a-z]", low):
                system = low
                continue
            m = _SHAPE.fullmatch(low)
            if m is None:
                raise RegionError(f"region line {item[:80]!r}: expected a ds9 region such as "
                                  "box(x,y,w,h,0)")
            sign, shape, args = m.group(1), m.group(2), m.group(3) or m.group(4) or ""
            if shape in ANNOTATIONS:
                continue
            if shape not in SHAPES:
                raise RegionError(f"region shape {shape!r} in {item[:60]!r} is not read here; "
                                  "expected box, circle, ellipse, polygon or point")
            if system in SKY_SYSTEMS or system.startswith("wcs"):
                raise RegionError(f"region {item[:80]!r} in sky coordinates ({system}); "
                                  "expected image coordinates")
            if system in OTHER_SYSTEMS:
                raise RegionError(f"region {item[:80]!r} in {system} coordinates; expected "
                                  "image coordinates")
            out.append(Region(shape, _numbers(shape, args, item), sign == "-"))
    return out


def window(regions: Sequence[Region], shape: Sequence[int]) -> tuple[int, int, int, int]:
    """The rows ``r0:r1`` and columns ``c0:c1`` of the array of ``shape`` (rows, columns)
    whose cells the included regions may hold (empty when none)."""
    rows, cols = (int(s) for s in shape)
    r0 = c0 = None
    r1 = c1 = 0
    for reg in regions:
        if reg.exclude:
            continue
        xmin, xmax, ymin, ymax = reg.bounds()
        # a cell c is centred at x = c + 1: the cells whose centres lie in [xmin, xmax]
        a, b = max(0, math.ceil(xmin) - 1), min(cols, math.floor(xmax))
        e, f = max(0, math.ceil(ymin) - 1), min(rows, math.floor(ymax))
        if a >= b or e >= f:
            continue
        c0, c1 = (a, b) if c0 is None else (min(c0, a), max(c1, b))
        r0, r1 = (e, f) if r0 is None else (min(r0, e), max(r1, f))
    return (0, 0, 0, 0) if r0 is None or c0 is None else (r0, r1, c0, c1)


def rasterise(regions: Sequence[Region], win: tuple[int, int, int, int]) -> np.ndarray:
    """The selected cells in window ``win`` (:func:`window`), a bool mask of its shape."""
    r0, r1, c0, c1 = win
    y = (np.arange(r0, r1, dtype=float) + 1.0)[:, None]
    x = (np.arange(c0, c1, dtype=float) + 1.0)[None, :]
    mask = np.zeros((r1 - r0, c1 - c0), dtype=bool)
    for keep in (True, False):  # every inclusion first, then every exclusion
        for reg in regions:
            if reg.exclude != keep:
                hit = reg.inside(x, y)
                mask = mask | hit if keep else mask & ~hit
    return mask


def _shape2(shape: Sequence[int]) -> tuple[int, int]:
    shp = tuple(int(s) for s in shape)
    if len(shp) != 2 or min(shp) < 0:
        raise RegionError(f"shape {shp}: ds9 regions describe 2-d arrays (rows, columns)")
    return shp  # type: ignore[return-value]


def ds9_to_mask(text: str, shape: Sequence[int]) -> np.ndarray:
    """The cells of a 2-d array of ``shape`` that ds9 region ``text`` selects (see the
    module docstring), as a bool mask.

    Raises
    ------
    RegionError
        Text that is not ds9 image regions (:func:`parse_ds9`).

    Examples
    --------
    >>> ds9_to_mask("image; circle(2,2,1)", (3, 4)).astype(int)
    array([[0, 1, 0, 0],
           [1, 1, 1, 0],
           [0, 1, 0, 0]])
    """
    rows, cols = _shape2(shape)
    regions = parse_ds9(text)
    mask = np.zeros((rows, cols), dtype=bool)
    r0, r1, c0, c1 = win = window(regions, (rows, cols))
    if r1 > r0 and c1 > c0:
        mask[r0:r1, c0:c1] = rasterise(regions, win)
    return mask


def _num(v: float) -> str:
    """A coordinate as ds9 text: whole numbers without a point, halves as ``x.5``."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def mask_boxes(mask: np.ndarray) -> list[tuple[int, int, int, int]]:
    """The set cells of a 2-d mask as rectangles ``(r0, r1, c0, c1)`` (half-open): the runs
    of each row, a run with the same columns on the rows after it merged into one.

    >>> mask_boxes(np.array([[1, 1, 0], [1, 1, 0], [0, 1, 1]], bool))
    [(0, 2, 0, 2), (2, 3, 1, 3)]
    """
    m = np.asarray(mask, dtype=bool)
    rows = m.shape[0]
    edges = np.diff(np.pad(m, ((0, 0), (1, 1))).astype(np.int8), axis=1)
    r_on, c_on = np.nonzero(edges == 1)  # each run's start, in row order
    _, c_off = np.nonzero(edges == -1)  # and its end, in the same order
    starts = np.searchsorted(r_on, np.arange(rows + 1))
    done: list[tuple[int, int, int, int]] = []
    open_: dict[tuple[int, int], int] = {}  # a run's columns -> the row its box starts
    for r in range(rows + 1):
        here = set() if r == rows else set(zip(c_on[starts[r]:starts[r + 1]].tolist(),
                                               c_off[starts[r]:starts[r + 1]].tolist()))
        for span in [s for s in open_ if s not in here]:
            done.append((open_.pop(span), r, *span))
        for span in here:
            open_.setdefault(span, r)
    return sorted(done, key=lambda b: (b[0], b[2]))


def mask_to_ds9(mask: np.ndarray, shape: Sequence[int]) -> str:
    """A ds9 region file (image coordinates) of the set cells of ``mask`` (its cells in C
    order over ``shape``, rows by columns): one ``box`` per rectangle of
    :func:`mask_boxes`.

    Examples
    --------
    >>> print(mask_to_ds9(np.array([[0, 1, 1]], bool), (1, 3)), end="")
    # Region file format: DS9 version 4.1
    # 2 cells of a 1 x 3 array; a cell (row r, column c) is centred at x=c+1, y=r+1
    global color=green width=1
    image
    box(2.5,1,2,1,0)
    """
    rows, cols = _shape2(shape)
    m = np.asarray(mask, dtype=bool)
    if m.size != rows * cols:
        raise RegionError(f"mask of {m.size:,} cells for shape {rows} x {cols}")
    m = m.reshape(rows, cols)
    lines = [HEADER, f"# {int(m.sum()):,} cells of a {rows} x {cols} array; a cell (row r, "
             "column c) is centred at x=c+1, y=r+1", "global color=green width=1", "image"]
    for r0, r1, c0, c1 in mask_boxes(m):
        lines.append(f"box({_num((c0 + c1 + 1) / 2)},{_num((r0 + r1 + 1) / 2)},"
                     f"{c1 - c0},{r1 - r0},0)")
    return "\n".join(lines) + "\n"
