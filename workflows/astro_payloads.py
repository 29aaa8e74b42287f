"""The astronomy operators' lineage payloads: their byte formats and ``map_p`` functions.

Each operator of :mod:`workflows.astro_udfs` stores, in ``COMP`` (and ``PAY``) mode, a small
payload for each of its few interesting output cells; a query decodes it into the input
cells that decided the output (``map_p``), or tests it against a frontier (``map_p_hits``).
The formats, by operator:

=================  ======================================================================
operator           payload
=================  ======================================================================
``cr1``, ``cr2``   5 bytes per cosmic-ray candidate (:func:`cr_payloads`): a witness path
                   (a radius and steps, :func:`cr_paths`) or a 25-bit mask of the 5x5 box
                   (first byte :data:`TAG_CELLS`, :func:`cr_cell_masks`); an older run's
                   1-byte radius decodes as a path without steps
``rmcr``           1 byte per flagged pixel: the radius of its window, in both inputs
``clust``          per star: tag :data:`TAG_STAR`, its bounding box and a bit-packed pixel
                   mask (:func:`encode_stars`); :data:`TAG_IDENTITY` (1 byte) for a
                   background pixel in ``PAY`` mode
=================  ======================================================================

The mixins :class:`PathPayload`, :class:`RadiusPayload` and :class:`StarPayload` give an
operator the matching ``map_p`` functions.

Examples
--------
>>> import numpy as np
>>> p = encode_stars(Ragged.from_rows([np.array([5, 6, 10])]), (4, 4))
>>> star_cells(p.row(0).tobytes(), (4, 4)).shape  # the star and its ring
(15, 2)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterator

import numpy as np

from operators.base import box_neighbours
from subzero.cells import Ragged, as_linear, dilate, to_coords, unique
from subzero.errors import CellError
from workflows.astro_kernels import (CR_RADIUS, SP_RADIUS, LACosmic, laplacian_plus,
                                     window_indices)

Shape = tuple[int, ...]

#: Payload tags of :class:`workflows.astro_udfs.StarDetect`: a background pixel's (it
#: depends on itself), and a star's.
TAG_IDENTITY = 0
TAG_STAR = 1

_FEW = 8  # payload lineage of at most this many cells is tested in plain Python


# ---------------------------------------------------------------------------------------
# star payloads: bounding box and pixel mask, lineage (vectorized over stars)
# ---------------------------------------------------------------------------------------


def _neighbourhood_offsets(ndim: int) -> np.ndarray:
    grids = np.meshgrid(*[np.arange(-1, 2)] * ndim, indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=1).astype(np.int64)


def star_lineage(pixels: Ragged, shape: Shape) -> Ragged:
    """Per star, its pixels plus the 1-pixel ring around them (clipped at the border), as
    sorted unique linear indices: the input cells that decide the star's extent."""
    shape = tuple(shape)
    n = len(pixels)
    if n == 0:
        return Ragged.empty()
    size = int(np.prod(shape))
    coords = to_coords(pixels.values, shape)
    neigh = coords[:, None, :] + _neighbourhood_offsets(len(shape))[None, :, :]
    ok = ((neigh >= 0) & (neigh < np.asarray(shape))).all(axis=2)
    rid = np.repeat(pixels.row_ids(), neigh.shape[1]).reshape(ok.shape)[ok]
    lin = np.ravel_multi_index(tuple(neigh[ok].T), shape)
    key = np.unique(rid * size + lin)
    rows, vals = np.divmod(key, size)
    return Ragged.from_lengths(vals.astype(np.uint64), np.bincount(rows, minlength=n))


def encode_stars(pixels: Ragged, shape: Shape) -> Ragged:
    """Star payloads, one row of bytes per star: tag 1, ndim, the bounding box's low
    corner and extent (uint32 little-endian each), then the star's pixels inside the box
    as a bit-packed C-order mask. Vectorized over stars.

    >>> p = encode_stars(Ragged.from_rows([np.array([5, 6, 10])]), (4, 4))
    >>> lo, mask = decode_star(p.row(0).tobytes())
    >>> lo.tolist(), mask.astype(int).tolist()
    ([[1, 1]], [[1, 1], [0, 1]])
    """
    shape = tuple(shape)
    nd = len(shape)
    n = len(pixels)
    if n == 0:
        return Ragged.empty(dtype=np.uint8)
    # an axis at a time, in contiguous 1-d arrays, not (n, ndim) ones summed across rows
    cols = np.unravel_index(np.asarray(pixels.values, dtype=np.int64), shape)
    starts = pixels.offsets[:-1]
    counts = pixels.lengths
    lo = np.stack([np.minimum.reduceat(c, starts) for c in cols], axis=1)
    ext = np.stack([np.maximum.reduceat(c, starts) for c in cols], axis=1) + 1 - lo
    # position of each pixel inside its star's box, C order
    local = np.zeros(len(cols[0]), dtype=np.int64)
    for d, c in enumerate(cols):
        if d:
            local *= np.repeat(ext[:, d], counts)
        local += c - np.repeat(lo[:, d], counts)
    rid = pixels.row_ids()
    nbytes = (np.prod(ext, axis=1) + 7) // 8
    byte_off = np.concatenate([[0], np.cumsum(nbytes)[:-1]])
    bits = np.zeros(int(nbytes.sum()) * 8, dtype=np.uint8)
    bits[byte_off[rid] * 8 + local] = 1
    packed = np.packbits(bits)
    head = np.concatenate([
        np.full((n, 1), TAG_STAR, np.uint8), np.full((n, 1), nd, np.uint8),
        lo.astype("<u4").view(np.uint8).reshape(n, 4 * nd),
        ext.astype("<u4").view(np.uint8).reshape(n, 4 * nd)], axis=1)
    hlen = head.shape[1]
    lengths = hlen + nbytes
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.empty(int(offsets[-1]), dtype=np.uint8)
    values[(offsets[:-1, None] + np.arange(hlen)[None, :]).reshape(-1)] = head.reshape(-1)
    brow = np.repeat(np.arange(n), nbytes)
    values[offsets[brow] + hlen + np.arange(len(packed)) - byte_off[brow]] = packed
    return Ragged(values, offsets)


def decode_star(payload: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`encode_stars` for one payload: ``(low corner (1, ndim), bool mask
    of the bounding box)``. Raises :class:`CellError` on a malformed payload."""
    buf = np.frombuffer(bytes(payload), dtype=np.uint8)
    if len(buf) < 2 or buf[0] != TAG_STAR:
        raise CellError(f"not a star payload: {bytes(payload[:8])!r}...")
    nd = int(buf[1])
    hlen = 2 + 8 * nd
    if len(buf) < hlen:
        raise CellError(f"star payload of {len(buf)} bytes is shorter than its header")
    lo = buf[2:2 + 4 * nd].view("<u4").astype(np.int64)
    ext = buf[2 + 4 * nd:hlen].view("<u4").astype(np.int64)
    nbits = int(np.prod(ext))
    if len(buf) != hlen + (nbits + 7) // 8:
        raise CellError(f"star payload of {len(buf)} bytes does not match its box {ext}")
    mask = np.unpackbits(buf[hlen:], count=nbits).astype(bool).reshape(tuple(ext))
    return lo[None, :], mask


def star_cells(payload: bytes, shape: Shape) -> np.ndarray:
    """A star payload's lineage: the star's pixels and their ring, clipped to ``shape``.

    Parameters
    ----------
    payload : bytes
        One payload of :func:`encode_stars`.
    shape : tuple of int
        The input's shape.

    Returns
    -------
    np.ndarray
        The cells, ``(n, ndim)`` int64, in C order.

    Raises
    ------
    CellError
        The payload is not a star's.

    Examples
    --------
    >>> p = encode_stars(Ragged.from_rows([np.array([0])]), (3, 3))
    >>> star_cells(p.row(0).tobytes(), (3, 3)).tolist()
    [[0, 0], [0, 1], [1, 0], [1, 1]]
    """
    lo, mask = decode_star(payload)
    # the box grown by one cell a side, dilated by shifted ORs (numpy only: a query need
    # not import scipy; np.pad and a general dilation cost more than the star is big)
    grown = np.zeros(tuple(n + 2 for n in mask.shape), dtype=bool)
    grown[tuple(slice(1, n + 1) for n in mask.shape)] = mask
    for ax in range(mask.ndim):
        src = grown.copy()
        lo_sl = [slice(None)] * mask.ndim
        hi_sl = [slice(None)] * mask.ndim
        lo_sl[ax], hi_sl[ax] = slice(1, None), slice(None, -1)
        grown[tuple(lo_sl)] |= src[tuple(hi_sl)]
        grown[tuple(hi_sl)] |= src[tuple(lo_sl)]
    cells = np.argwhere(grown) + lo - 1
    ok = ((cells >= 0) & (cells < np.asarray(shape))).all(axis=1)
    return cells[ok]


# ---------------------------------------------------------------------------------------
# radius payloads: the box of a radius around the cell
# ---------------------------------------------------------------------------------------


def _radius_cells(outcells: np.ndarray, radius: int, shape: Shape) -> Any:
    """The clipped boxes of ``radius`` around ``outcells``: box lists for a few cells, a
    dilated mask for many."""
    outcells = np.asarray(outcells, dtype=np.int64).reshape(-1, len(shape))
    if radius == 0:
        return outcells
    if len(outcells) * (2 * radius + 1) ** len(shape) < int(np.prod(shape)) // 8:
        return box_neighbours(outcells, (radius,) * len(shape), shape).values
    m = np.zeros(shape, dtype=bool)
    m[tuple(outcells.T)] = True
    return dilate(m, radius)


def _radius_hits(outcells: np.ndarray, radius: int, frontier_in: np.ndarray) -> np.ndarray:
    """Which ``outcells`` have an input within ``radius`` (a box) in ``frontier_in``."""
    outcells = np.asarray(outcells, dtype=np.int64).reshape(-1, frontier_in.ndim)
    shape = frontier_in.shape
    if len(outcells) <= _FEW:  # a forward scan calls this once per distinct payload
        return np.array([bool(frontier_in[tuple(slice(max(int(v) - radius, 0), int(v) + radius + 1)
                                                     for v in c)].any()) for c in outcells],
                        dtype=bool)
    if len(outcells) * (2 * radius + 1) ** len(shape) < frontier_in.size // 8:
        boxes = box_neighbours(outcells, (radius,) * len(shape), shape)
        return boxes.any_in(frontier_in.reshape(-1))
    return dilate(frontier_in, radius)[tuple(outcells.T)]


def _radius_payload(payload: bytes) -> int:
    if len(payload) != 1:
        raise CellError(f"expected a 1-byte radius payload. Got {len(payload)} bytes.")
    return int(payload[0])


# ---------------------------------------------------------------------------------------
# cosmic-ray witness paths: the cells that decided a flag (payload codec, lineage)
# ---------------------------------------------------------------------------------------

#: Neighbour steps, nearest first; a step's code is ``(dy + 1) * 3 + (dx + 1)`` (4: stay).
_STEPS = ((0, 0), (-1, 0), (0, -1), (0, 1), (1, 0), (-1, -1), (-1, 1), (1, -1), (1, 1))
_STAY = 4


def _first_step(mask: np.ndarray, cy: np.ndarray, cx: np.ndarray,
                above: float | None = None) -> np.ndarray:
    """Per cell ``(cy, cx)``, the code of the nearest 3x3 neighbour (itself first) where
    ``mask`` holds (with ``above``: where ``mask``, then an array of values, is above it;
    compared at the neighbours only, not over the whole image), or -1.

    The steps are tried farthest first, each overwriting the code where it hits, so the
    nearest hit stays; a neighbour beyond the border is clamped into the image, onto a
    nearer step of the same cell (a diagonal onto a side or the cell, a side onto the
    cell), which overwrites whatever it hit: no bounds masks, one flat gather a step.
    (:func:`window_indices` with ``"nearest"`` clamps alike, but builds an (n, 9) index
    array and reads it by strided columns, which this avoids.)"""
    h, w = mask.shape
    flat = mask.reshape(-1)
    cy, cx = np.asarray(cy, dtype=np.int64), np.asarray(cx, dtype=np.int64)
    rows = {d: np.clip(cy + d, 0, h - 1) * w for d in (-1, 0, 1)}
    cols = {d: np.clip(cx + d, 0, w - 1) for d in (-1, 0, 1)}
    code = np.full(len(cy), -1, dtype=np.int64)
    for dy, dx in reversed(_STEPS):
        got = flat[rows[dy] + cols[dx]]
        code[got if above is None else got > above] = (dy + 1) * 3 + (dx + 1)
    return code


def cr_paths(det: LACosmic, cy: np.ndarray, cx: np.ndarray, sigclip: float,
             sigfrac: float) -> np.ndarray:
    """What decided the output of each candidate ``(cy, cx)`` (gated pixels, in ``det``'s
    coordinates), as an ``(n, 3)`` uint8 array ``[radius, step to q, step from q to r]``:

    - flagged: S' at p above ``sigclip*sigfrac``, a neighbour q in the first growth (S' >
      sigclip) and a candidate r next to q: the flag holds whatever happens outside the
      boxes of radius :data:`SP_RADIUS` around p, q and r (they fix S' at p, q, r and the
      fine-structure ratio at r; the rest can only add growth). Nearest q and r first;
    - rejected with S' at p at most ``sigclip*sigfrac``: it cannot grow, whatever its
      neighbours: the box of radius :data:`SP_RADIUS` around p;
    - rejected with S' at most ``sigclip`` at p and each neighbour: no neighbour can be in
      the first growth: the boxes of radius :data:`SP_RADIUS` around them, i.e. radius 5;
    - other rejected: no neighbour grew for want of a candidate next to it; that depends on
      every pixel within 2: the box of radius :data:`CR_RADIUS`.
    """
    n = len(cy)
    out = np.zeros((n, 3), dtype=np.uint8)
    out[:, 1:] = _STAY
    # flat gathers: one index array, where 2-D fancy indexing builds one from two
    lin = np.asarray(cy, dtype=np.int64) * det.mask.shape[1] + cx
    flagged = det.mask.reshape(-1)[lin]
    low = ~flagged & (det.sp.reshape(-1)[lin] <= sigclip * sigfrac)
    calm = np.zeros(n, dtype=bool)
    rest = np.flatnonzero(~flagged & ~low)  # only these can be calm
    calm[rest] = _first_step(det.sp, cy[rest], cx[rest], above=sigclip) < 0
    out[:, 0] = np.where(flagged | low, SP_RADIUS, np.where(calm, SP_RADIUS + 1, CR_RADIUS))
    if flagged.any():
        fy, fx = cy[flagged], cx[flagged]
        q = _first_step(det.grow1, fy, fx)
        qy, qx = fy + q // 3 - 1, fx + q % 3 - 1
        r = _first_step(det.cand, qy, qx)
        if (q < 0).any() or (r < 0).any():  # cannot be: the flag needs both
            raise AssertionError("a flagged pixel without a growth witness")
        out[flagged, 1] = q
        out[flagged, 2] = r
    return out


#: First byte of a cell-mask payload (radii are at most 8): then a 25-bit mask, little
#: endian, of the 5x5 box around the pixel (bit ``(dy + 2) * 5 + (dx + 2)``).
TAG_CELLS = 0x80
_CROSS_BITS = sum(1 << ((dy + 2) * 5 + (dx + 2)) for dy, dx in ((-1, 0), (0, -1), (0, 0), (0, 1),
                                                                 (1, 0)))


def cr_cell_masks(det: LACosmic, x: np.ndarray, cy: np.ndarray, cx: np.ndarray, gain: float,
                  readnoise: float, sigclip: float, sigfrac: float) -> np.ndarray:
    """For rejected candidates whose S at the pixel alone rules out any growth, the few
    cells that prove it, as 25-bit masks of the 5x5 box (0: no such proof, use the path).

    S' = S - median(S) and every S is >= 0 (L+ is a sum of parts clipped at 0), so S <=
    ``sigclip*sigfrac`` at p keeps p from growing whatever its neighbours do. S = L+ / 2N:

    - L+ at p is fixed by p and its 4 neighbours (the cross);
    - N >= its floor ``sqrt(gain*1e-5 + readnoise^2)/gain`` whatever the image: when L+
      over twice the floor is already low enough, the cross is the whole proof;
    - else N >= its value as long as the 13 largest of the 25 values of p's 5x5 median
      window stay (the median cannot fall below the 13th largest): the cross and those.
    """
    n = len(cy)
    masks = np.zeros(n, dtype=np.uint32)
    limit = sigclip * sigfrac
    lin = cy.astype(np.int64) * x.shape[1] + cx
    rejected = ~det.mask.reshape(-1)[lin]
    lp = np.zeros(n)
    if det.noise is not None:  # L+ = 2NS as lacosmic had it (2 gathers, not 5; rounding
        at = lin[rejected]     # is far inside the test's 1e-9 margin)
        lp[rejected] = 2.0 * det.s.reshape(-1)[at] * det.noise.reshape(-1)[at]
    else:
        lp[rejected] = laplacian_plus(x, lin[rejected])
    floor = np.sqrt(gain * 1e-5 + readnoise * readnoise) / gain
    cross = rejected & (lp / (2.0 * floor) < limit * (1.0 - 1e-9))
    masks[cross] = _CROSS_BITS
    window = rejected & ~cross & (det.s.reshape(-1)[lin] <= limit)
    if window.any():
        centres = lin[window]
        win, _ = window_indices(centres, x.shape, 2, "mirror")
        top = np.argsort(-x.reshape(-1)[win], axis=1, kind="stable")[:, :13]
        cells = np.take_along_axis(win, top, axis=1)
        wy, wx = np.divmod(cells, x.shape[1])
        bits = (wy - cy[window, None] + 2) * 5 + (wx - cx[window, None] + 2)
        got = np.zeros(len(centres), dtype=np.uint32)
        for k in range(bits.shape[1]):
            got |= (np.uint32(1) << bits[:, k].astype(np.uint32))
        masks[window] = got | np.uint32(_CROSS_BITS)
    return masks


def cr_payloads(paths: np.ndarray, masks: np.ndarray) -> Ragged:
    """One 5-byte payload per candidate: a cell mask (``TAG_CELLS`` and 4 bytes) where
    ``masks`` has one, else the ``cr_paths`` row (the radius, two steps) and two stays. One
    width for all, so that a query groups them in one vectorized pass (older runs stored
    the 1-byte radius alone, which decodes the same way)."""
    n = len(paths)
    rows = np.zeros((n, 5), dtype=np.uint8)
    rows[:, :3] = paths
    has = masks != 0
    rows[has, 0] = TAG_CELLS
    rows[~has, 3:] = _STAY
    rows[has, 1:] = masks[has].astype("<u4").view(np.uint8).reshape(-1, 4)
    return Ragged.from_lengths(rows.reshape(-1), np.full(n, 5, dtype=np.int64))


@lru_cache(maxsize=4096)
def _mask_offsets(mask: int) -> np.ndarray:
    bits = np.flatnonzero((int(mask) >> np.arange(25)) & 1)
    return np.stack([bits // 5 - 2, bits % 5 - 2], axis=1).astype(np.int64)


@lru_cache(maxsize=4096)
def _mask_steps(mask: int) -> tuple[tuple[int, int], ...]:
    return tuple((b // 5 - 2, b % 5 - 2) for b in range(25) if (mask >> b) & 1)


def _mask_cells(outcells: np.ndarray, mask: int, shape: Shape) -> tuple[np.ndarray, np.ndarray]:
    """``(n, k)`` linear cells of the mask around each of ``outcells`` and which are in the
    image."""
    outcells = np.asarray(outcells, dtype=np.int64).reshape(-1, 2)
    off = _mask_offsets(mask)
    yy = outcells[:, 0, None] + off[None, :, 0]
    xx = outcells[:, 1, None] + off[None, :, 1]
    ok = (yy >= 0) & (yy < shape[0]) & (xx >= 0) & (xx < shape[1])
    return np.where(ok, yy * shape[1] + xx, 0), ok


def _decode_mask(payload: bytes) -> int:
    if len(payload) != 5:
        raise CellError(f"expected a cosmic-ray cell-mask payload of 5 bytes. Got "
                        f"{bytes(payload)!r}.")
    return int.from_bytes(bytes(payload[1:]), "little")


def cr_lineage(cells: np.ndarray, paths: np.ndarray, masks: np.ndarray, shape: Shape) -> Ragged:
    """Per candidate (global ``(n, 2)``), the input cells its payload names, as sorted
    linear indices: the region pairs of ``FULL`` mode, in bulk."""
    n = len(cells)
    size = int(np.prod(shape))
    keys = [rid.astype(np.int64) * size + lin
            for rid, lin in _cr_pieces(cells, paths, masks, shape)]
    key = np.unique(np.concatenate(keys)) if keys else np.empty(0, np.int64)
    rid, lin = np.divmod(key, size)
    return Ragged.from_lengths(lin.astype(np.uint64), np.bincount(rid, minlength=n))


def _box_union(centres: np.ndarray, radius: int, shape: Shape) -> np.ndarray:
    """The sorted linear indices of the union of the ``(2 radius + 1)``-square boxes around
    ``centres`` (``(n, 2)`` int64, possibly just outside the image), clipped to ``shape``.

    A box is a row interval swept down a column interval, so the union is drawn an axis at
    a time with the repeats dropped in between: the centres of a cosmic ray's path overlap
    so much that this sorts a few times the answer's cells instead of every box's.

    >>> _box_union(np.array([[0, 0], [0, 1], [5, 5]]), 1, (4, 4)).tolist()
    [0, 1, 2, 4, 5, 6]
    """
    h, w = int(shape[0]), int(shape[1])
    off = np.arange(-radius, radius + 1, dtype=np.int64)
    ys = centres[:, 0, None] + np.zeros_like(off)
    xs = centres[:, 1, None] + off
    keep = (xs >= 0) & (xs < w) & (ys >= -radius) & (ys < h + radius)
    # rows start at -radius: the key stays non-negative for centres above the image
    rows = unique((ys[keep] + radius) * w + xs[keep])
    ys = (rows // w - radius)[:, None] + off
    xs = np.broadcast_to((rows % w)[:, None], ys.shape)
    keep = (ys >= 0) & (ys < h)
    return unique(ys[keep] * w + xs[keep])


def _cr_pieces(cells: np.ndarray, paths: np.ndarray, masks: np.ndarray, shape: Shape,
               which: bool = True) -> Iterator[tuple[np.ndarray | None, np.ndarray]]:
    """``(candidate row, input linear index)`` pieces of :func:`cr_lineage` (repeats
    included): each box of a path, and the cell masks. Without ``which``, the rows are
    None (a union needs only the cells)."""
    has = masks != 0
    for radius in np.unique(paths[~has, 0]):
        rows = np.flatnonzero(~has & (paths[:, 0] == radius))
        centre = cells[rows].astype(np.int64)
        moved = np.ones(len(rows), dtype=bool)
        centres = []  # a union needs no rows: every step's boxes in one call
        for k in range(paths.shape[1]):  # the radius, then each step
            if k:
                step = paths[rows, k].astype(np.int64)
                centre = centre + np.stack([step // 3 - 1, step % 3 - 1], axis=1)
                moved = step != 4  # a stay (code 4) repeats the box before it
                if not moved.any():
                    continue
            if not which:
                centres.append(centre[moved])
                continue
            boxes = box_neighbours(centre[moved], (int(radius),) * 2, shape)
            yield rows[moved][boxes.row_ids()], boxes.values.astype(np.int64)
        if centres:
            yield None, _box_union(np.concatenate(centres), int(radius), shape)
    rows = np.flatnonzero(has)
    if len(rows):
        bits = ((masks[rows, None].astype(np.int64) >> np.arange(25)[None, :]) & 1).astype(bool)
        dy, dx = np.divmod(np.arange(25), 5)
        yy = cells[rows, 0, None].astype(np.int64) + (dy - 2)[None, :]
        xx = cells[rows, 1, None].astype(np.int64) + (dx - 2)[None, :]
        ok = bits & (yy >= 0) & (yy < shape[0]) & (xx >= 0) & (xx < shape[1])
        yield (np.broadcast_to(rows[:, None], ok.shape)[ok] if which else None,
               (yy * shape[1] + xx)[ok])


def _decode_path(payload: bytes) -> tuple[int, list[tuple[int, int]]]:
    if not 1 <= len(payload) <= 5 or any(b > 8 for b in payload[1:]):
        raise CellError(f"expected a cosmic-ray path payload (a radius and up to 4 steps). "
                        f"Got {bytes(payload)!r}.")
    steps = [_STEPS_BY_CODE[b] for b in payload[1:]]
    return int(payload[0]), steps


_STEPS_BY_CODE = {(dy + 1) * 3 + (dx + 1): (dy, dx) for dy, dx in _STEPS}


def _path_centres(outcells: np.ndarray, payload: bytes) -> tuple[int, list[np.ndarray]]:
    radius, steps = _decode_path(payload)
    centres = [np.asarray(outcells, dtype=np.int64).reshape(-1, 2)]
    for dy, dx in steps:
        centres.append(centres[-1] + np.array([dy, dx], dtype=np.int64))
    return radius, centres


def _path_cells(outcells: np.ndarray, payload: bytes, shape: Shape) -> np.ndarray:
    """The cells a :func:`cr_payloads` payload names around each of ``outcells``, linear:
    the cell mask's, or the union of the path's boxes."""
    few = len(outcells) <= _FEW  # a query maps each distinct payload once: keep it cheap
    if len(payload) and payload[0] == TAG_CELLS:
        mask = _decode_mask(payload)
        if few:
            h, w = shape
            got = {(y + dy) * w + x + dx for y, x in np.asarray(outcells).reshape(-1, 2).tolist()
                   for dy, dx in _mask_steps(mask) if 0 <= y + dy < h and 0 <= x + dx < w}
            return np.array(sorted(got), dtype=np.uint64)
        lin, ok = _mask_cells(outcells, mask, shape)
        return np.unique(lin[ok]).astype(np.uint64)
    radius, centres = _path_centres(outcells, payload)
    if few:
        h, w = shape
        boxes = {(max(y - radius, 0), min(y + radius + 1, h), max(x - radius, 0),
                  min(x + radius + 1, w)) for c in centres for y, x in c.tolist()}
        parts = [np.add.outer(np.arange(y0, y1) * w, np.arange(x0, x1)).reshape(-1)
                 for y0, y1, x0, x1 in boxes]
        lin = parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts))
        return lin.astype(np.uint64)
    parts = [as_linear(_radius_cells(c, radius, shape), shape) for c in centres]
    return np.unique(np.concatenate(parts))


def _rows_decoded(outcells: np.ndarray, rows: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """5-byte payload rows as :func:`cr_lineage` takes them: ``(cells, paths, masks, which
    rows name any cell)``; None for another width."""
    rows = np.asarray(rows, dtype=np.uint8)
    if rows.ndim != 2 or rows.shape[1] != 5:
        return None
    is_mask = rows[:, 0] == TAG_CELLS
    bad = ~is_mask & (rows[:, 1:] > 8).any(axis=1)
    if bad.any():
        raise CellError(f"expected a cosmic-ray path payload (a radius and up to 4 steps). "
                        f"Got {rows[np.argmax(bad)].tobytes()!r}.")
    masks = np.where(is_mask, rows[:, 1:].astype(np.int64) @ (256 ** np.arange(4)), 0)
    paths = rows.astype(np.int64)
    paths[is_mask] = 0
    cells = np.asarray(outcells, dtype=np.int64).reshape(-1, 2)
    return cells, paths, masks, ~(is_mask & (masks == 0))  # an empty mask names no cell


def _rows_union(outcells: np.ndarray, rows: np.ndarray, shape: Shape) -> np.ndarray | None:
    """The union of what the payload rows name, linear (repeats included: the caller sorts
    once), without keeping which row named what."""
    dec = _rows_decoded(outcells, rows)
    if dec is None:
        return None
    cells, paths, masks, some = dec
    lins = [lin for _, lin in _cr_pieces(cells[some], paths[some], masks[some], shape,
                                         which=False)]
    return np.concatenate(lins).astype(np.uint64) if lins else np.empty(0, np.uint64)


def _rows_lineage(outcells: np.ndarray, rows: np.ndarray, shape: Shape) -> Ragged | None:
    """Per row of ``outcells``, the input cells its 5-byte payload row names (a cell mask,
    or a radius and 4 steps), sorted linear: :func:`cr_lineage` over decoded payloads, all
    at once. None for payloads of another width (older runs' 1-byte radii)."""
    dec = _rows_decoded(outcells, rows)
    if dec is None:
        return None
    cells, paths, masks, some = dec
    if some.all():
        return cr_lineage(cells, paths, masks, shape)
    rag = cr_lineage(cells[some], paths[some], masks[some], shape)
    lengths = np.zeros(len(cells), dtype=np.int64)
    lengths[some] = rag.lengths
    return Ragged.from_lengths(rag.values, lengths)


def _rows_hits(outcells: np.ndarray, rows: np.ndarray, frontier_in: np.ndarray
               ) -> np.ndarray | None:
    """Which rows' payload lineage meets ``frontier_in``: only rows whose cell lies within
    the farthest reach of a payload (the largest radius plus 4 steps) of the frontier are
    decoded."""
    rows = np.asarray(rows, dtype=np.uint8)
    if rows.ndim != 2 or rows.shape[1] != 5:
        return None
    outcells = np.asarray(outcells, dtype=np.int64).reshape(-1, 2)
    shape = frontier_in.shape
    paths = rows[:, 0] != TAG_CELLS
    reach = max(2, int(rows[paths, 0].max()) + 4 if paths.any() else 2)
    near = dilate(frontier_in, reach)[outcells[:, 0], outcells[:, 1]]
    hits = np.zeros(len(outcells), dtype=bool)
    idx = np.flatnonzero(near)
    if len(idx):
        rag = _rows_lineage(outcells[idx], rows[idx], shape)
        meet = frontier_in.reshape(-1)[rag.values.astype(np.intp)]
        hits[idx] = np.bincount(rag.row_ids(), weights=meet, minlength=len(idx)) > 0
    return hits


def _path_hits(outcells: np.ndarray, payload: bytes, frontier_in: np.ndarray) -> np.ndarray:
    if len(payload) and payload[0] == TAG_CELLS:
        mask = _decode_mask(payload)
        if len(outcells) <= _FEW:  # once per distinct payload in a forward scan: no numpy
            h, w = frontier_in.shape
            return np.array([any(0 <= y + dy < h and 0 <= x + dx < w and
                                 frontier_in[y + dy, x + dx] for dy, dx in _mask_steps(mask))
                             for y, x in np.asarray(outcells, dtype=np.int64).reshape(-1, 2)
                             .tolist()], dtype=bool)
        lin, ok = _mask_cells(outcells, mask, frontier_in.shape)
        return (frontier_in.reshape(-1)[lin] & ok).any(axis=1)
    radius, centres = _path_centres(outcells, payload)
    hits = np.zeros(len(centres[0]), dtype=bool)
    for c in centres:
        hits |= _radius_hits(c, radius, frontier_in)
    return hits


# ---------------------------------------------------------------------------------------
# the payload mixins: an operator's map_p functions for its format
# ---------------------------------------------------------------------------------------


class RadiusPayload:
    """``map_p`` of a 1-byte radius payload: the output cell depends on the clipped box of
    that radius around it, in every input (``rmcr``'s flagged pixels).

    Examples
    --------
    >>> class Op(RadiusPayload):
    ...     in_shapes = ((20, 20), (20, 20))
    >>> Op().map_p(np.array([[0, 0]]), bytes([1]), 1).tolist()  # linear indices
    [0, 1, 20, 21]
    """

    in_shapes: tuple[Shape, ...]

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> Any:
        return _radius_cells(outcells, _radius_payload(payload), self.in_shapes[i])

    def map_p_hits(self, outcells: np.ndarray, payload: bytes, i: int,
                   frontier_in: np.ndarray) -> np.ndarray:
        return _radius_hits(outcells, _radius_payload(payload), frontier_in)


class PathPayload:
    """``map_p`` of a :func:`cr_payloads` payload: the output cell depends on the boxes of
    the path's radius around itself and the cells its steps lead to (or on the cells of its
    5x5 mask), in its one input; the batch forms decode many 5-byte payloads at once.

    Examples
    --------
    >>> class Op(PathPayload):
    ...     in_shapes = ((6, 6),)
    >>> Op().map_p(np.array([[0, 0]]), bytes([1, 4, 4, 4, 4]), 0).tolist()
    [0, 1, 6, 7]
    """

    in_shapes: tuple[Shape, ...]

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> Any:
        return _path_cells(outcells, payload, self.in_shapes[i])

    def map_p_hits(self, outcells: np.ndarray, payload: bytes, i: int,
                   frontier_in: np.ndarray) -> np.ndarray:
        return _path_hits(outcells, payload, frontier_in)

    def map_p_rows(self, outcells: np.ndarray, payloads: np.ndarray, i: int
                   ) -> np.ndarray | None:
        return _rows_union(outcells, payloads, self.in_shapes[i])

    def map_p_rows_hits(self, outcells: np.ndarray, payloads: np.ndarray, i: int,
                        frontier_in: np.ndarray) -> np.ndarray | None:
        return _rows_hits(outcells, payloads, frontier_in)


class StarPayload:
    """``map_p`` of a star payload (:func:`encode_stars`): every pixel of the star depends
    on the star's pixels and the 1-pixel ring around them; the identity payload
    (:data:`TAG_IDENTITY`) on the pixel itself.

    Examples
    --------
    >>> class Op(StarPayload):
    ...     in_shapes = ((3, 3),)
    >>> Op().map_p(np.array([[1, 2]]), bytes([TAG_IDENTITY]), 0).tolist()
    [[1, 2]]
    """

    in_shapes: tuple[Shape, ...]

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> Any:
        if len(payload) == 1 and payload[0] == TAG_IDENTITY:
            return np.asarray(outcells, dtype=np.int64)
        return star_cells(payload, self.in_shapes[i])

    def map_p_hits(self, outcells: np.ndarray, payload: bytes, i: int,
                   frontier_in: np.ndarray) -> np.ndarray:
        outcells = np.asarray(outcells, dtype=np.int64).reshape(-1, frontier_in.ndim)
        if len(payload) == 1 and payload[0] == TAG_IDENTITY:
            return frontier_in[tuple(outcells.T)].copy()
        cells = star_cells(payload, self.in_shapes[i])
        # all pixels of a star share one lineage: all hit or none
        return np.full(len(outcells), bool(frontier_in[tuple(cells.T)].any()))


__all__ = [
    "TAG_CELLS", "TAG_IDENTITY", "TAG_STAR", "PathPayload", "RadiusPayload", "StarPayload",
    "cr_cell_masks", "cr_lineage", "cr_paths", "cr_payloads", "decode_star", "encode_stars",
    "star_cells", "star_lineage",
]
