"""Deliberately wrong UDFs: operators whose declared lineage lies, for the lineage checker.

Each class here is a small :class:`operators.UDF` whose kernel is fine but whose declared
lineage (mapping functions, region pairs or payloads) is wrong in one typical way; its
docstring says what it claims and what it really does. ``subzero check-lineage`` must find
every one with its default options (exit 1, naming the unsound cells) and call the honest
controls sound (exit 0)::

    subzero check-lineage workflows.lies:MaskedMedianCleaner     # exit 1
    subzero check-lineage workflows.lies:HonestCleaner           # exit 0

Every class has :meth:`example_inputs`, the kind of data it is meant for (an image with
hot and saturated pixels, a sparse bad-pixel mask, a flat field), which ``check-lineage``
uses for a ``module:Class`` target given neither ``--input`` nor ``--shape``.

The module is also a workflow (:func:`build`: every lie and control on one generated image)
so that ``check-lineage RUN:OP`` can be tried on a run::

    subzero run workflows.lies --where driver
    subzero check-lineage latest:lies:cleaner

:data:`LIES` names each lie's kind; :data:`CONTROLS` the honest ones.

>>> from subzero.testing import bind, run_chunked
>>> x, = ShiftedByOne.example_inputs(seed=0)
>>> out = run_chunked(bind(ShiftedByOne(), x), [x], split=2)[0]
>>> bool((out[:, 1:] == x[:, :-1]).all())     # each cell is its left neighbour
True
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import numpy as np

from operators.base import UDF, box_neighbours
from subzero.cells import dilate, to_coords
from subzero.errors import ShapeError
from subzero.modes import Mode
from subzero.operator import ELEMENTWISE, GLOBAL, Parallelism, stencil
from subzero.runtime import TaskContext
from subzero.workflow import Workflow, parse_shape_param
from workflows.params import parse_seed

NAME = "lies"
DESCRIPTION = "deliberately wrong UDFs (and honest controls) on a generated image"

Shape = tuple[int, ...]

#: The shape of :meth:`example_inputs` (large enough that a ~1% rate marks a dozen
#: pixels or more, small enough for the checker's many re-runs).
SHAPE = (48, 40)
#: Sky level and noise of the generated image.
SKY, NOISE = 100.0, 5.0
#: Pixels above this are "bright" (:class:`PayloadRadiusLie`): ~1% hot pixels.
BRIGHT = 130.0
#: Pixels above this are "saturated": ~0.3% of them.
SATURATED = 600.0
#: The share of pixels a bad-pixel mask flags.
FLAG_RATE = 0.008
#: The anchor grid of :class:`AnchorBinning`: every ``ANCHOR_STEP``-th pixel from
#: ``ANCHOR_AT`` on each axis.
ANCHOR_STEP, ANCHOR_AT = 16, (5, 11)


# ---------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------


def make_image(shape: Shape = SHAPE, seed: int = 0) -> np.ndarray:
    """A flat sky with noise, ~1% hot pixels (between :data:`BRIGHT` and
    :data:`SATURATED`) and ~0.3% saturated ones (above it).

    >>> x = make_image((100, 100))
    >>> 50 < int(((x > BRIGHT) & (x < SATURATED)).sum()) < 200, 0 < int((x > SATURATED).sum()) < 60
    (True, True)
    """
    rng = np.random.default_rng(seed)
    img = rng.normal(SKY, NOISE, shape)
    hot = rng.random(shape) < 0.01
    img[hot] += rng.uniform(60.0, 300.0, int(hot.sum()))
    sat = rng.random(shape) < 0.003
    img[sat] = rng.uniform(2 * SATURATED, 4 * SATURATED, int(sat.sum()))
    return img


def make_mask(shape: Shape = SHAPE, seed: int = 0) -> np.ndarray:
    """A bad-pixel mask flagging :data:`FLAG_RATE` of the pixels (at least one)."""
    rng = np.random.default_rng(seed + 1)
    mask = rng.random(shape) < FLAG_RATE
    if not mask.any():
        mask.reshape(-1)[int(rng.integers(0, mask.size))] = True
    return mask


def make_flat(shape: Shape = SHAPE, seed: int = 0) -> np.ndarray:
    """A flat field near 1 (pixel-to-pixel sensitivity)."""
    return np.random.default_rng(seed + 2).normal(1.0, 0.02, shape)


# ---------------------------------------------------------------------------------------
# shared pieces
# ---------------------------------------------------------------------------------------


def _check_2d(op: UDF, shapes: Sequence[Shape]) -> Shape:
    for s in shapes:
        if len(s) != 2:
            raise ShapeError(f"operator {op.name!r} ({type(op).__name__}) works on 2-d "
                             f"images; got an input of shape {tuple(s)}")
    if any(tuple(s) != tuple(shapes[0]) for s in shapes[1:]):
        raise ShapeError(f"operator {op.name!r} ({type(op).__name__}): input shapes "
                         f"{', '.join(str(tuple(s)) for s in shapes)} must be equal")
    return tuple(shapes[0])


def _box_mean(x: np.ndarray, radius: int) -> np.ndarray:
    """The mean of each pixel's ``(2r+1)^2`` box, the edge pixels repeated beyond the
    border (``nearest``). Each mean adds its own box's values in a fixed order (a running
    sum, as ``scipy.ndimage.uniform_filter`` keeps, would make the last bits of every
    output depend on the whole row)."""
    pad = np.pad(x, radius, mode="edge")
    h, w = x.shape
    k = 2 * radius + 1
    return sum(pad[dy:dy + h, dx:dx + w] for dy in range(k) for dx in range(k)) / k ** 2


def _clean(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``image`` with the pixels ``mask`` flags replaced by the median of their 5x5 box
    (edge pixels repeated beyond the border)."""
    from scipy import ndimage

    return np.where(mask != 0, ndimage.median_filter(image, size=5, mode="nearest"), image)


def _box_cells(outcells: np.ndarray, radius: int, shape: Shape) -> np.ndarray:
    """Linear indices of the clipped boxes of ``radius`` around ``outcells``."""
    return box_neighbours(outcells, (radius,) * len(shape), shape).values


class _Lie(UDF):
    """A 2-d UDF on same-shape float images, with example inputs."""

    n_inputs = 1
    imports = ("scipy.ndimage",)

    def output_shape(self, in_shapes: Sequence[Shape]) -> Shape:
        return _check_2d(self, in_shapes)

    def output_dtype(self, in_dtypes: Sequence[np.dtype]) -> np.dtype:
        return np.dtype(np.float64)

    @classmethod
    def example_inputs(cls, seed: int = 0) -> list[np.ndarray]:
        """The inputs the operator is meant for (one generated image by default)."""
        return [make_image(SHAPE, seed)]


class _Identity:
    """Declares that each output cell depends on the same cell of every input."""

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        return np.array(frontier_out, dtype=bool, copy=True)

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        return np.array(frontier_in, dtype=bool, copy=True)


class _ClippedBox:
    """Declares that each output cell depends on the clipped box of ``declared`` around it
    in input 0."""

    declared = 1

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        return dilate(frontier_out, self.declared)

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        return dilate(frontier_in, self.declared)


# ---------------------------------------------------------------------------------------
# the lies
# ---------------------------------------------------------------------------------------


class MaskedMedianCleaner(_Identity, _Lie):
    """Bad-pixel cleaning that declares itself elementwise.

    Claims
        Output cell ``c`` depends on cell ``c`` of the image and of the mask (``MAP``,
        identity in both inputs).
    Really
        Pixels the mask flags (a rare value: :data:`FLAG_RATE` of them) are replaced by the
        median of their 5x5 box of the image; the rest pass through. The lie shows only at
        flagged pixels, which random sampling seldom picks.
    """

    n_inputs = 2
    parallelism: Parallelism = stencil(2)

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return _clean(image, mask)[ctx.chunk.interior(0)]

    @classmethod
    def example_inputs(cls, seed: int = 0) -> list[np.ndarray]:
        return [make_image(SHAPE, seed), make_mask(SHAPE, seed)]


class NarrowStencil(_ClippedBox, _Lie):
    """A box mean that declares a smaller box than it averages.

    Claims
        Output cell ``c`` depends on the clipped 3x3 box around ``c`` (``MAP``, and the same
        boxes as region pairs in ``FULL``).
    Really
        It averages the 5x5 box (radius 2; its halo is right, its lineage is not): the ring
        of 16 cells between the two boxes is missing from every cell's lineage.
    """

    parallelism: Parallelism = stencil(2)
    declared = 1

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.FULL, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        out = _box_mean(x, 2)[ctx.chunk.interior(0)]
        if ctx.full:
            cells = to_coords(ctx.chunk.out_box.linear(self.out_shape), self.out_shape)
            ctx.lwrite_pairs(cells, box_neighbours(cells, (self.declared,) * 2,
                                                   self.out_shape))
        return out


class ForgottenInput(_Lie):
    """Flat-field correction that forgets the flat in its lineage.

    Claims
        Output cell ``c`` depends on cell ``c`` of the image, and on nothing of input 1 (the
        flat field's backward and forward mappings are empty).
    Really
        ``image / flat``, cell by cell: every output cell depends on the flat too.
    """

    n_inputs = 2
    parallelism: Parallelism = ELEMENTWISE

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, image: np.ndarray, flat: np.ndarray) -> np.ndarray:
        return image / flat

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        if i == 1:
            return np.zeros(self.in_shapes[1], dtype=bool)
        return np.array(frontier_out, dtype=bool, copy=True)

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        if i == 1:
            return np.zeros(self.out_shape, dtype=bool)
        return np.array(frontier_in, dtype=bool, copy=True)

    @classmethod
    def example_inputs(cls, seed: int = 0) -> list[np.ndarray]:
        return [make_image(SHAPE, seed), make_flat(SHAPE, seed)]


class RowBackground(_Identity, _Lie):
    """Row-by-row background subtraction declared elementwise.

    Claims
        Output cell ``c`` depends on cell ``c`` of the image only (``MAP``, identity).
    Really
        Each pixel minus the mean of its row: every output cell depends on its whole row.
    """

    parallelism: Parallelism = GLOBAL

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        return x - x.mean(axis=1, keepdims=True)


class ShiftedByOne(_Identity, _Lie):
    """A copy that is off by one column.

    Claims
        Output cell ``(i, j)`` is input cell ``(i, j)`` (``MAP``, identity).
    Really
        Output ``(i, j)`` is input ``(i, j - 1)`` (column 0 is copied as is): a wrong
        offset, honest only in column 0.
    """

    parallelism: Parallelism = stencil(1)

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        shifted = x.copy()
        shifted[:, 1:] = x[:, :-1]
        return shifted[ctx.chunk.interior(0)]


class PayloadRadiusLie(_Identity, _Lie):
    """A composite operator whose payload decoder is wrong for one kind of payload.

    Claims
        ``COMP``: a pixel above :data:`BRIGHT` stores a 1-byte payload, the radius of the
        box its output depends on; ``map_p`` decodes it but caps it at 3 (a decoder written
        when the widest window was 7x7). Every other pixel depends on itself (the identity
        default).
    Really
        A bright pixel becomes the median of its box of radius 1, a saturated one (above
        :data:`SATURATED`) of its box of radius 4, and stores that radius: right for the
        hot pixels' payload ``1``, too small for the saturated pixels' ``4``.
    """

    parallelism: Parallelism = stencil(4)
    #: the widest radius ``map_p`` decodes
    cap = 3

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.COMP, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        from scipy import ndimage

        inner = ctx.chunk.interior(0)
        radius = np.where(x > SATURATED, 4, np.where(x > BRIGHT, 1, 0))[inner]
        out = np.array(x[inner], dtype=np.float64)
        for r in (1, 4):
            med = ndimage.median_filter(x, size=2 * r + 1, mode="nearest")[inner]
            out = np.where(radius == r, med, out)
        if ctx.composite:
            local = np.argwhere(radius > 0)
            if len(local):
                cells = ctx.chunk.out_cells(local)
                pays = radius[tuple(local.T)].astype(np.uint8)[:, None]
                ctx.lwrite_pairs(cells, payloads=pays)
        return out

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> Any:
        return _box_cells(outcells, min(payload[0], self.cap), self.in_shapes[i])


class WrapAroundBlur(_ClippedBox, _Lie):
    """A 3x3 box mean that wraps around the image while declaring a clipped box.

    Claims
        Output cell ``c`` depends on the 3x3 box around ``c`` clipped at the border
        (``MAP``: a corner depends on 4 cells).
    Really
        The box mean with ``np.roll``: at the border the box wraps to the far side of the
        image. Inside it is honest; only edge and corner cells show the lie.
    """

    parallelism: Parallelism = GLOBAL
    declared = 1

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        total = sum(np.roll(x, (dy, dx), axis=(0, 1)) for dy in (-1, 0, 1) for dx in (-1, 0, 1))
        return total / 9.0


class HiddenThreshold(_Identity, _Lie):
    """A per-pixel detection whose threshold is a global statistic.

    Claims
        Output cell ``c`` (1.0 detected, 0.0 not) depends on cell ``c`` only (``MAP``).
    Really
        A pixel is detected when it is 3 sigma above the image's median (sigma from the
        median absolute deviation): every output depends on the whole image, though only
        through two numbers.
    """

    parallelism: Parallelism = GLOBAL

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        med = np.median(x)
        sigma = 1.4826 * np.median(np.abs(x - med))
        return (x > med + 3.0 * sigma).astype(np.float64)


class AnchorBinning(_Lie):
    """Binning that writes each 7x7 tile's mean at the tile's anchor pixel, declaring a
    5x5 box there.

    Claims
        An anchor pixel (every :data:`ANCHOR_STEP`-th row and column from
        :data:`ANCHOR_AT`) depends on the 5x5 box around it; every other pixel on itself.
    Really
        An anchor is the mean of its 7x7 box: its declared lineage, already much larger than
        any other pixel's, still misses the box's outer ring. The anchors are few and lie
        at no rare value, chunk border or edge: only their unusual lineage size singles
        them out.
    """

    parallelism: Parallelism = stencil(3)
    #: the declared radius at an anchor (the real one is 3)
    declared = 2

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.BLACKBOX})

    def _anchors(self, shape: Shape) -> np.ndarray:
        out = np.zeros(shape, dtype=bool)
        out[ANCHOR_AT[0]::ANCHOR_STEP, ANCHOR_AT[1]::ANCHOR_STEP] = True
        return out

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        inner = ctx.chunk.interior(0)
        out = np.array(x[inner], dtype=np.float64)
        anchor = self._anchors(self.out_shape)[ctx.chunk.out_box.slices]
        return np.where(anchor, _box_mean(x, 3)[inner], out)

    def map_b(self, frontier_out: np.ndarray, i: int) -> np.ndarray:
        anchor = self._anchors(frontier_out.shape)
        return dilate(frontier_out & anchor, self.declared) | (frontier_out & ~anchor)

    def map_f(self, frontier_in: np.ndarray, i: int) -> np.ndarray:
        anchor = self._anchors(frontier_in.shape)
        return (dilate(frontier_in, self.declared) & anchor) | (frontier_in & ~anchor)


# ---------------------------------------------------------------------------------------
# honest controls
# ---------------------------------------------------------------------------------------


class HonestBoxMean(_ClippedBox, _Lie):
    """A 3x3 box mean (edge pixels repeated beyond the border) that declares the clipped
    3x3 box, in ``MAP`` and as ``FULL`` region pairs: the truth."""

    parallelism: Parallelism = stencil(1)
    declared = 1

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.MAP, Mode.FULL, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, x: np.ndarray) -> np.ndarray:
        out = _box_mean(x, 1)[ctx.chunk.interior(0)]
        if ctx.full:
            cells = to_coords(ctx.chunk.out_box.linear(self.out_shape), self.out_shape)
            ctx.lwrite_pairs(cells, box_neighbours(cells, (1, 1), self.out_shape))
        return out


class HonestCleaner(_Identity, _Lie):
    """:class:`MaskedMedianCleaner` with honest composite lineage.

    A flagged pixel stores the payload ``2``: it depends on its clipped 5x5 box of the
    image and on its own mask cell (which is what makes it flagged); every other pixel
    depends on itself in both inputs (the identity default).
    """

    n_inputs = 2
    parallelism: Parallelism = stencil(2)

    def supported_modes(self) -> frozenset[Mode]:
        return frozenset({Mode.COMP, Mode.BLACKBOX})

    def run(self, ctx: TaskContext, image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = _clean(image, mask)[ctx.chunk.interior(0)]
        if ctx.composite:
            local = np.argwhere(np.asarray(mask)[ctx.chunk.interior(1)] != 0)
            if len(local):
                ctx.lwrite_pairs(ctx.chunk.out_cells(local), payloads=b"\x02")
        return out

    def map_p(self, outcells: np.ndarray, payload: bytes, i: int) -> Any:
        return _box_cells(outcells, payload[0] if i == 0 else 0, self.in_shapes[i])

    @classmethod
    def example_inputs(cls, seed: int = 0) -> list[np.ndarray]:
        return MaskedMedianCleaner.example_inputs(seed)


#: Every lie, by class name: the kind of lie (one phrase).
LIES: dict[str, str] = {
    "MaskedMedianCleaner": "elementwise claimed; a rare mask value pulls in a 5x5 median",
    "NarrowStencil": "stencil declares radius 1, uses radius 2",
    "ForgottenInput": "an input it uses is left out of its lineage",
    "RowBackground": "row reduction declared elementwise",
    "ShiftedByOne": "wrong offset: identity declared, shifted by one column",
    "PayloadRadiusLie": "map_p wrong for one payload value (radius 4 decoded as 3)",
    "WrapAroundBlur": "wraps at the border (np.roll), declares a clipped box",
    "HiddenThreshold": "per-pixel output thresholded on a global statistic",
    "AnchorBinning": "a few cells declare a wide box that is still too small",
}
#: The honest controls, by class name.
CONTROLS: dict[str, str] = {
    "HonestBoxMean": "honest 3x3 box mean (MAP, FULL)",
    "HonestCleaner": "honest composite cleaner (COMP)",
}

# node name in :func:`build` -> (class name, inputs)
_NODES: dict[str, tuple[str, tuple[str, ...]]] = {
    "cleaner": ("MaskedMedianCleaner", ("image", "mask")),
    "narrow": ("NarrowStencil", ("image",)),
    "flatfield": ("ForgottenInput", ("image", "flat")),
    "rowbg": ("RowBackground", ("image",)),
    "shifted": ("ShiftedByOne", ("image",)),
    "payload": ("PayloadRadiusLie", ("image",)),
    "wrap": ("WrapAroundBlur", ("image",)),
    "threshold": ("HiddenThreshold", ("image",)),
    "anchors": ("AnchorBinning", ("image",)),
    "honest_box": ("HonestBoxMean", ("image",)),
    "honest_cleaner": ("HonestCleaner", ("image", "mask")),
}


def build(shape: Any = "48x40", seed: Any = 0) -> Workflow:
    """Every lie and control of this module on one generated image (with its bad-pixel
    mask and flat field), one operator each, as a workflow to run and check by
    ``check-lineage RUN:OP``.

    >>> wf = build("24x20")
    >>> wf.nodes["cleaner"].inputs
    ('image', 'mask')
    """
    shape = parse_shape_param(shape)
    seed = parse_seed(seed)
    wf = Workflow(NAME, DESCRIPTION, params={"shape": list(shape), "seed": seed})
    origin = f"generated, seed {seed}, shape {shape[0]}x{shape[1]}"
    wf.input("image", shape, "float64", source=partial(make_image, shape, seed),
             description="sky with hot and saturated pixels", origin=origin)
    wf.input("mask", shape, "bool", source=partial(make_mask, shape, seed),
             description="sparse bad-pixel mask", origin=origin)
    wf.input("flat", shape, "float64", source=partial(make_flat, shape, seed),
             description="flat field near 1", origin=origin)
    for node, (cls, inputs) in _NODES.items():
        wf.add(node, globals()[cls](), *inputs)
    return wf


__all__ = ["AnchorBinning", "CONTROLS", "ForgottenInput", "HiddenThreshold", "HonestBoxMean",
           "HonestCleaner", "LIES", "MaskedMedianCleaner", "NarrowStencil", "PayloadRadiusLie",
           "RowBackground", "ShiftedByOne", "WrapAroundBlur", "build", "make_flat",
           "make_image", "make_mask"]
