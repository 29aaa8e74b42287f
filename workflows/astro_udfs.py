"""The four UDFs of the astronomy workflow (WORKFLOWS.md, "Astronomy"; paper Figure 1 A-D).

- ``cr1``, ``cr2``: :class:`CosmicRayDetect`, the bool cosmic-ray mask of one
  background-subtracted exposure (one pass of L.A.Cosmic);
- ``rmcr``: :class:`CosmicRayRemove`, flagged pixels of the summed image replaced by the
  median of their unflagged 5x5 neighbours;
- ``clust``: :class:`StarDetect`, star labels: 8-connected components above a threshold.

:func:`astronomy_udfs` builds the four with the parameters the workflow uses. Each class is
a :class:`operators.base.UDF` with a pure numpy kernel (:func:`detect_cosmic_rays`,
:func:`remove_cosmic_rays`, :func:`label_stars`) and *honest* lineage: for every output
cell ``c`` and every mode the UDF supports, changing any input cells outside the reported
backward lineage of ``c`` leaves the output at ``c`` unchanged (the tests check this by
perturbation). Where WORKFLOWS.md's simplified lineage fails that test, the class docstring
says how and what it does instead.

All three use the *composite* shape the paper describes: the default mapping (``map_b`` /
``map_f``) is the identity, and only the few interesting pixels (cosmic-ray candidates,
flagged pixels, stars) store a small payload.

This module holds the operator classes: their parameters, planning, and what each task
records. The kernels are :mod:`workflows.astro_kernels`'s and the payload formats with their
``map_p`` functions :mod:`workflows.astro_payloads`'s; their public names are importable from
here as well. A run's manifest names each operator ``workflows.astro_udfs:<Class>``, so the
classes stay defined here.

Examples
--------
>>> import numpy as np
>>> from subzero.testing import bind, run_chunked
>>> x = np.zeros((20, 20)); x[5, 5] = 5000.0            # one sharp hit on a flat sky
>>> op = bind(CosmicRayDetect(), x)
>>> mask, _, pays = run_chunked(op, [x], split=2, modes=(Mode.COMP,))
>>> np.argwhere(mask).tolist(), len(pays), pays.payload_bytes(0)  # flagged: its 9x9 box
([[5, 5]], 1, b'\\x04\\x04\\x04\\x04\\x04')
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from operators.base import UDF, box_neighbours
from subzero.cells import cells_where
from subzero.errors import ShapeError, WorkflowError
from subzero.modes import Mode
from subzero.operator import GLOBAL, Parallelism, stencil
from subzero.runtime import TaskContext
# the kernels and payload formats, also importable from here as before the split
from workflows.astro_kernels import (CR_RADIUS, RMCR_RADIUS, SP_RADIUS, LACosmic,
                                     default_gate, detect_cosmic_rays, group_stars,
                                     label_stars, labelled_pixels, lacosmic,
                                     remove_cosmic_rays, star_pixels)
from workflows.astro_payloads import (TAG_CELLS, TAG_IDENTITY, TAG_STAR, PathPayload,
                                      RadiusPayload, StarPayload, cr_cell_masks, cr_lineage,
                                      cr_paths, cr_payloads, decode_star, encode_stars,
                                      star_lineage)

Shape = tuple[int, ...]


# ---------------------------------------------------------------------------------------
# parameter checks
# ---------------------------------------------------------------------------------------


def _parse_positive(name: str, value: Any, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise WorkflowError(f"{name} must be a number. Got {value!r} instead.") from None
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        want = "non-negative" if allow_zero else "positive"
        raise WorkflowError(f"{name} must be a finite {want} number. Got {value!r} instead.")
    return v


def _parse_number(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise WorkflowError(f"{name} must be a number. Got {value!r} instead.") from None


def _check_2d(op: UDF, shapes: Sequence[Shape]) -> Shape:
    for s in shapes:
        if len(s) != 2:
            raise ShapeError(
                f"operator {op.name!r} ({type(op).__name__}) works on 2-d images; got an input "
                f"of shape {tuple(s)}")
    if any(tuple(s) != tuple(shapes[0]) for s in shapes[1:]):
        raise ShapeError(
            f"operator {op.name!r} ({type(op).__name__}): input shapes "
            f"{', '.join(str(tuple(s)) for s in shapes)} must be equal")
    return tuple(shapes[0])


# ---------------------------------------------------------------------------------------
# UDFs
# ---------------------------------------------------------------------------------------


class _IdentityDefault:
    """The composite default of all three UDFs: an output cell depends on the input cell
    at its own coordinates (and vice versa)."""

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        return np.array(frontier_out, dtype=bool, copy=True)

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        return np.array(frontier_in, dtype=bool, copy=True)

    def map_b_lin(self, out_lin: np.ndarray, i: int) -> np.ndarray:
        return out_lin

    def map_f_lin(self, in_lin: np.ndarray, i: int) -> np.ndarray:
        return in_lin

    def all_to_all(self, i: int) -> bool:
        return False


class CosmicRayDetect(PathPayload, _IdentityDefault, UDF):
    """Cosmic-ray detection (UDF A/B, ``cr1``/``cr2``): :func:`detect_cosmic_rays`.

    Input: one background-subtracted exposure (``rmbg``). Output: bool mask.

    Lineage (honest composite, identity default)
        A pixel is a *candidate* when its own input value exceeds ``gate``. A non-candidate
        is 0 whatever its neighbours are, so it depends on itself only (the identity
        default; nothing stored). A candidate's output depends at most on the box of radius
        :data:`CR_RADIUS` = 6 around it (clipped), the composed reach of the filters:
        L+ 1 (the Laplacian on the upsampled grid touches the 4-neighbours), noise 2 (5x5
        median), S 2, S' = S - 5x5 median of S: 4, fine structure 1 + 3 = 4, candidates 4,
        first growth 5, second growth 6. Each candidate records only the cells that decided
        its output (:func:`cr_paths`, :func:`cr_cell_masks`): a flagged pixel the boxes of
        radius :data:`SP_RADIUS` = 4 around itself, the first-growth neighbour and the
        candidate that grew it; a rejected one its cross (or its cross and the 13 largest
        pixels of its 5x5 median window) when S alone rules out growth, its 9x9 box when
        S' does, the 11x11 box when no neighbour's S' can grow, else the 13x13 box. In
        ``COMP`` mode every candidate stores a 5-byte payload saying which
        (:func:`cr_payloads`; the 1-byte radius of older runs still decodes); ``FULL``
        writes the same cells, one pair per pixel.

    Deviations from WORKFLOWS.md, and why
        - Its "7x7 box (radius 3) around a cosmic-ray pixel, itself elsewhere" is not sound:
          the growth steps make a pixel's flag depend on pixels 6 away, and an unflagged
          pixel next to a cosmic ray depends on its neighbours too. The gate is what makes
          "itself" true for most pixels.
        - The gate (default: ``sigclip`` times the sky noise of the noise model,
          :func:`default_gate`) is an addition to L.A.Cosmic. On a background-subtracted
          image L.A.Cosmic's noise model sees no sky and flags sky noise all over the
          image; a cosmic ray is a pixel well above the sky, and the gate says so.
        - ``sky``: the counts removed upstream, added back in the noise model (see
          :func:`astronomy_udfs` for the workflow's value). The missing sky, not the
          original's truncation of the upsampled image to integers, is what made the
          original flag sky noise all over real exposure 1: ungated with ``sky=0`` this code
          flags about as many pixels, truncating or not; with the sky and the gate, a small
          fraction of them (``tests/workflows/test_astro_udfs.py``,
          ``test_real_exposure_flags_far_fewer_than_the_original``). Nothing is truncated
          here.

    Parallelization: ``stencil(6)``; a halo of the lineage radius makes chunked execution
    bit-identical to the whole image (every value a chunk uses for its interior is
    computed from the same cells in the same order).

    Examples
    --------
    >>> from subzero.testing import bind
    >>> op = bind(CosmicRayDetect(sky=600.0), np.zeros((8, 8)), name="cr1")
    >>> op.out_dtype, sorted(m.value for m in op.supported_modes())
    (dtype('bool'), ['BLACKBOX', 'COMP', 'FULL'])
    """

    n_inputs = 1
    parallelism: Parallelism = stencil(CR_RADIUS)

    def __init__(self, gain: float = 2.2, readnoise: float = 10.0, sigclip: float = 5.0,
                 sigfrac: float = 0.3, objlim: float = 5.0, sky: float = 0.0,
                 gate: float | None = None) -> None:
        self.gain = _parse_positive("gain", gain)
        self.readnoise = _parse_positive("readnoise", readnoise, allow_zero=True)
        self.sigclip = _parse_positive("sigclip", sigclip)
        self.sigfrac = _parse_positive("sigfrac", sigfrac)
        self.objlim = _parse_positive("objlim", objlim)
        self.sky = _parse_positive("sky", sky, allow_zero=True)
        self.gate = (default_gate(self.gain, self.readnoise, self.sigclip, self.sky)
                     if gate is None else _parse_number("gate", gate))
        if np.isnan(self.gate):
            raise WorkflowError(f"gate must be a number of counts. Got {gate!r} instead.")

    def params(self) -> dict[str, Any]:
        return {"gain": self.gain, "readnoise": self.readnoise, "sigclip": self.sigclip,
                "sigfrac": self.sigfrac, "objlim": self.objlim, "sky": self.sky,
                "gate": self.gate}

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.COMP, Mode.FULL, Mode.BLACKBOX})

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        return _check_2d(self, in_shapes)

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype(bool)

    def kernel(self, x: np.ndarray) -> np.ndarray:
        """The whole computation on one block (pure)."""
        return detect_cosmic_rays(x, self.gain, self.readnoise, self.sigclip, self.sigfrac,
                                  self.objlim, self.sky, self.gate)

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        inner = ctx.chunk.interior(0)
        if not (ctx.composite or ctx.full):
            return self.kernel(x)[inner]
        det = lacosmic(x, self.gain, self.readnoise, self.sigclip, self.sigfrac, self.objlim,
                       self.sky, self.gate)
        out = det.mask[inner]
        cand = det.gated[inner]  # x > gate: the test the kernel gates with
        local = cells_where(cand)
        cells = ctx.chunk.out_cells(local)
        if len(cells):
            # the block's coordinates: the interior's offset in the block plus local
            off = np.array([sl.start for sl in inner], dtype=np.int64)
            cy, cx = local[:, 0] + off[0], local[:, 1] + off[1]
            paths = cr_paths(det, cy, cx, self.sigclip, self.sigfrac)
            masks = cr_cell_masks(det, x, cy, cx, self.gain, self.readnoise, self.sigclip,
                                  self.sigfrac)
            if ctx.composite:
                ctx.lwrite_pairs(cells, payloads=cr_payloads(paths, masks))
            if ctx.full:
                ctx.lwrite_pairs(cells, cr_lineage(cells, paths, masks, self.in_shapes[0]))
        if ctx.full:
            rest = ctx.chunk.out_box.linear(self.out_shape)[~cand.reshape(-1)]
            if len(rest):
                ctx.lwrite_pairs(rest, rest)
        return out


class CosmicRayRemove(RadiusPayload, _IdentityDefault, UDF):
    """Cosmic-ray removal (UDF C, ``rmcr``): :func:`remove_cosmic_rays` on inputs
    ``(image, mask)``; the window is the centred 5x5 one (the original's was mis-anchored).

    Lineage (honest composite, identity default)
        A flagged pixel depends on its centred 5x5 window (clipped) in input 0 *and* in
        input 1: which neighbours are flagged decides which values enter the median.
        (WORKFLOWS.md's "itself in input 1" is not sound: unflag a neighbour and the
        output changes.) An unflagged pixel passes through and depends on itself in both
        inputs. ``COMP`` stores the 1-byte payload ``2`` (the radius, for both inputs) per
        flagged pixel; ``FULL`` writes one pair per pixel.

    Parallelization: ``stencil(2)``.

    Examples
    --------
    >>> from subzero.testing import bind
    >>> img, m = np.zeros((6, 6)), np.zeros((6, 6), bool)
    >>> op = bind(CosmicRayRemove(), img, m, name="rmcr")
    >>> op.out_shape, op.parallelism.depth
    ((6, 6), (2,))
    """

    n_inputs = 2
    parallelism: Parallelism = stencil(RMCR_RADIUS)

    def params(self) -> dict[str, Any]:
        return {"radius": RMCR_RADIUS}

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.COMP, Mode.FULL, Mode.BLACKBOX})

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        return _check_2d(self, in_shapes)

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype(np.float64)

    def kernel(self, image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return remove_cosmic_rays(image, mask, RMCR_RADIUS)

    def run(self, ctx: TaskContext, image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        inner = ctx.chunk.interior(0)
        out = self.kernel(image, mask)[inner]
        if ctx.composite or ctx.full:
            flag = np.asarray(mask)[inner] != 0
            cells = ctx.chunk.out_cells(cells_where(flag))
            if ctx.composite and len(cells):
                ctx.lwrite_pairs(cells, payloads=bytes([RMCR_RADIUS]))
            if ctx.full:
                if len(cells):
                    box = box_neighbours(cells, (RMCR_RADIUS,) * 2, self.out_shape)
                    ctx.lwrite_pairs(cells, box, box)
                rest = ctx.chunk.out_box.linear(self.out_shape)[~flag.reshape(-1)]
                if len(rest):
                    ctx.lwrite_pairs(rest, rest, rest)
        return out


class StarDetect(StarPayload, _IdentityDefault, UDF):
    """Star detection (UDF D, ``clust``): :func:`label_stars`, true connected components
    (the original forgot to merge provisional labels) with position-based labels.

    Lineage (honest; payload or composite)
        Every pixel of star X depends on X's pixels and the 1-pixel ring around X (the ring
        pixels being below the threshold is what stops X from being larger). A background
        pixel depends on itself (it is 0 because it is dim). WORKFLOWS.md's "star X depends
        on star X" misses the ring, and its "below threshold: no lineage" is not sound
        (brighten the pixel and its output changes); both are fixed here.

        - payload per star: bounding box + bit-packed pixel mask (:func:`encode_stars`);
          ``map_p`` (:class:`~workflows.astro_payloads.StarPayload`) decodes it and adds
          the ring;
        - ``COMP``: identity default, one payload per star (one ``lwrite_pairs`` call);
        - ``PAY``: every output cell needs a payload, so the star payloads plus one pair
          with the identity payload (``b"\\x00"``) for all background pixels;
        - ``FULL``: one region pair per star (star -> star + ring) and identity pairs for
          the background, in bulk.

    Parallelization: global (a star may cross any chunk border).

    Examples
    --------
    >>> from subzero.testing import bind, run_chunked
    >>> x = np.zeros((5, 5)); x[1:3, 1:3] = 500.0
    >>> op = bind(StarDetect(threshold=100.0), x, name="clust")
    >>> out, _, pays = run_chunked(op, [x], modes=(Mode.COMP,))
    >>> int(out[2, 2]), len(pays), op.map_p(np.array([[2, 2]]), pays.payload_bytes(0), 0).shape
    (7, 1, (16, 2))
    """

    n_inputs = 1
    parallelism: Parallelism = GLOBAL
    imports = ("scipy.ndimage",)

    def __init__(self, threshold: float = 100.0) -> None:
        self.threshold = _parse_number("threshold", threshold)
        if not np.isfinite(self.threshold):
            raise WorkflowError(f"threshold must be finite. Got {threshold!r} instead.")

    def params(self) -> dict[str, Any]:
        return {"threshold": self.threshold}

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.PAY, Mode.COMP, Mode.FULL, Mode.BLACKBOX})

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        if len(in_shapes[0]) < 1:
            raise ShapeError(f"operator {self.name!r} (StarDetect) needs an array, not a scalar")
        return tuple(in_shapes[0])

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype(np.int64)

    def kernel(self, x: np.ndarray) -> np.ndarray:
        return label_stars(x, self.threshold)

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        box = ctx.chunk.out_box
        if box.shape != tuple(self.out_shape):
            raise ShapeError(f"operator {self.name!r} is global; got a partial block {box}")
        labels, pix, lab_of = labelled_pixels(x, self.threshold)
        if not (ctx.composite or ctx.payload or ctx.full):
            return labels
        _, stars = group_stars(pix, lab_of)
        if (ctx.composite or ctx.payload) and len(stars):
            ctx.lwrite_pairs(stars, payloads=encode_stars(stars, self.out_shape))
        if ctx.payload or ctx.full:  # every other cell (non-negative: the same bits)
            dark = np.ones(labels.size, dtype=bool)
            dark[pix] = False
            background = np.flatnonzero(dark).view(np.uint64)
        else:
            background = np.empty(0, dtype=np.uint64)
        if ctx.payload and len(background):
            ctx.lwrite(background, payload=bytes([TAG_IDENTITY]))
        if ctx.full:
            if len(stars):
                ctx.lwrite_pairs(stars, star_lineage(stars, self.out_shape))
            if len(background):
                ctx.lwrite_pairs(background, background)
        return labels


def astronomy_udfs(sky: float = 600.0, threshold: float = 100.0) -> dict[str, UDF]:
    """The workflow's four UDFs, by operator name, with its parameters.

    ``sky`` is the background level (counts above bias) that ``rmbg`` removed; 600 fits
    the real LSST exposures (median 1601, overscan 1007) and the generated ones
    (:data:`workflows.astro_data.SKY`). ``threshold`` is clust's, on the summed image.

    >>> sorted(astronomy_udfs())
    ['clust', 'cr1', 'cr2', 'rmcr']
    """
    return {"cr1": CosmicRayDetect(sky=sky), "cr2": CosmicRayDetect(sky=sky),
            "rmcr": CosmicRayRemove(), "clust": StarDetect(threshold=threshold)}


__all__ = [
    "CR_RADIUS", "RMCR_RADIUS", "SP_RADIUS", "TAG_CELLS", "TAG_IDENTITY", "TAG_STAR",
    "CosmicRayDetect", "CosmicRayRemove", "LACosmic", "StarDetect", "astronomy_udfs",
    "cr_cell_masks", "cr_lineage", "cr_paths", "cr_payloads", "decode_star", "default_gate",
    "detect_cosmic_rays", "encode_stars", "label_stars", "lacosmic", "remove_cosmic_rays",
    "star_lineage", "star_pixels",
]
