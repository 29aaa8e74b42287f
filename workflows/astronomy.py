"""The LSST astronomy workflow (WORKFLOWS.md "Astronomy"; paper Figure 1, section VIII-A).

Two exposures of the same patch of sky are each calibrated and cleaned of cosmic rays, then
summed, cleaned of the cosmic rays both flagged, and searched for stars::

    exp{e} -> linearity{e} -> addmaskattr{e} -> badpixrm{e} (+satmask)
           -> overscanimg{e} -> meanoverscan{e} --\\
           -> rmoverscan{e} (badpixrm{e} - meanoverscan{e}) -> biascorrect{e} (-biasmask)
           -> darkcorrect{e} (-darkmask) -> flatcorrect{e} (/flatmask)
           -> bgmean{e} (global mean) ; rmbg{e} = flatcorrect{e} - bgmean{e} -> cr{e} (UDF)
    sumexp = rmbg1 + rmbg2 ; maskexp = cr1 AND cr2 ; rmcr (UDF) ; clust (UDF)

28 operators: 24 built-ins with mapping functions, 4 UDFs (cr1, cr2, rmcr, clust; see
:mod:`workflows.astro_udfs` for their honest composite lineage). Inputs ``exp1``/``exp2``
come from FITS files (``--input exp1=PATH``) or are generated with a fixed seed; the
auxiliary ``satmask``, ``biasmask``, ``darkmask`` (zero) and ``flatmask`` (one) are
constants of the image's shape and do not count as input data.

Strategies (paper Table II): ``blackbox`` (every operator re-executed), ``blackbox-opt``
(mapping for built-ins, UDFs black box), ``full-one`` / ``full-many`` (built-ins map, UDFs
backward Full lineage), ``subzero`` (built-ins map, the UDFs composite lineage with PayOne
payloads: cosmic-ray candidates, flagged pixels, star pixels), plus the generic ones.

Named queries (paper Figure 5(b)): BQ0/BQ2 trace 10 cosmic-ray-cleaned pixels of ``rmcr``
back to exp1/exp2 through maskexp and cr; BQ1/BQ3 trace 10 star pixels of ``clust`` back to
exp2/exp1; BQ4 traces a 25 x 20 block of ``rmcr`` one step back; FQ0 traces the 10 x 10
corner of exp1 forward through the overscan branch into rmoverscan1's input 1.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from operators import Binary, Cast, Copy, MaskReplace, MeanBroadcast, Reduce, Subarray
from subzero.cells import Box
from subzero.errors import WorkflowError
from subzero.workflow import NamedQuery, Workflow, parse_shape_param
from workflows.astro_data import (EXPOSURE_SHAPE, SKY, exposure_paths, generate_exposures,
                                  load_exposure)
from workflows.astro_udfs import astronomy_udfs

NAME = "astronomy"
DESCRIPTION = ("LSST image cleaning and star detection: 2 exposures, 28 operators, 4 UDFs "
               "(generated exposures unless --input exp1=... exp2=...)")
QUERY_SEED = 7

# the calibration chain of one exposure, in order: (name, operator factory, extra inputs)
_CHAIN = [
    ("linearity", lambda: Cast("float64"), ()),
    ("addmaskattr", lambda: Copy(), ()),
    ("badpixrm", lambda: MaskReplace(90.0, bad_values=[0]), ("satmask",)),
]


def real_inputs() -> dict[str, str] | None:
    """``{"exp1": path, "exp2": path}`` of the real LSST exposures when available."""
    paths = exposure_paths()
    return None if paths is None else {"exp1": str(paths[0]), "exp2": str(paths[1])}


def build(inputs: Mapping[str, str] | None = None, seed: Any = 0, shape: Any = None,
          sky: Any = SKY, threshold: Any = 100.0, mask: str = "and") -> Workflow:
    """The 28-operator workflow.

    Parameters
    ----------
    inputs : ``{"exp1": path, "exp2": path}`` FITS files (both or neither).
    seed, shape : for generated exposures (default shape 2001 x 513).
    sky : background level (counts) the cosmic-ray noise model adds back (see
        :class:`workflows.astro_udfs.CosmicRayDetect`).
    threshold : star detection threshold on the cleaned sum.
    mask : how ``maskexp`` combines the two cosmic-ray masks: ``and`` (the paper's workflow:
        only pixels flagged in both exposures) or ``or`` (either exposure).
    """
    inputs = dict(inputs or {})
    if inputs and set(inputs) != {"exp1", "exp2"}:
        missing = {"exp1", "exp2"} - set(inputs)
        if missing:
            raise WorkflowError(f"give both exposures: --input exp1=PATH --input exp2=PATH "
                                f"(missing {', '.join(sorted(missing))})")
    if mask not in ("and", "or"):
        raise WorkflowError(f"mask must be 'and' or 'or'. Got {mask!r}.")
    seed, sky, threshold = int(seed), float(sky), float(threshold)
    shp = EXPOSURE_SHAPE if shape is None else parse_shape_param(shape, minimum=8)
    if inputs and shape is not None and shp != EXPOSURE_SHAPE:
        raise WorkflowError("shape applies to generated exposures only")
    params = {"seed": seed, "shape": list(shp), "sky": sky, "threshold": threshold,
              "mask": mask, "data": "files" if inputs else "generated"}
    wf = Workflow(NAME, DESCRIPTION, params=params)

    cache: dict[str, np.ndarray] = {}

    def exposure(k: int) -> np.ndarray:
        if "pair" not in cache:
            cache["pair"] = generate_exposures(seed, shp)
        return cache["pair"][k]

    for e in (1, 2):
        wf.input(f"exp{e}", shp, "uint16", source=lambda k=e - 1: exposure(k),
                 loader=load_exposure, description=f"exposure {e} (uint16 counts)")
    wf.input("satmask", shp, "uint8", source=lambda: np.zeros(shp, np.uint8), auxiliary=True,
             description="saturation mask (all zero)")
    for name, fill in (("biasmask", 0.0), ("darkmask", 0.0), ("flatmask", 1.0)):
        wf.input(name, shp, "float32", source=lambda f=fill: np.full(shp, f, np.float32),
                 auxiliary=True, description=f"{name[:-4]} frame (all {fill:g})")

    udfs = astronomy_udfs(sky=sky, threshold=threshold)
    for e in (1, 2):
        prev = f"exp{e}"
        for name, make, extra in _CHAIN:
            wf.add(f"{name}{e}", make(), prev, *extra)
            prev = f"{name}{e}"
        wf.add(f"overscanimg{e}", Subarray("0:1, 0:1"), f"badpixrm{e}")
        wf.add(f"meanoverscan{e}", Reduce("mean", dtype="float64"), f"overscanimg{e}")
        wf.add(f"rmoverscan{e}", Binary("subtract"), f"badpixrm{e}", f"meanoverscan{e}")
        wf.add(f"biascorrect{e}", Binary("subtract"), f"rmoverscan{e}", "biasmask")
        wf.add(f"darkcorrect{e}", Binary("subtract"), f"biascorrect{e}", "darkmask")
        wf.add(f"flatcorrect{e}", Binary("divide"), f"darkcorrect{e}", "flatmask")
        wf.add(f"bgmean{e}", MeanBroadcast(), f"flatcorrect{e}")
        wf.add(f"rmbg{e}", Binary("subtract"), f"flatcorrect{e}", f"bgmean{e}")
        wf.add(f"cr{e}", udfs[f"cr{e}"], f"rmbg{e}")
    wf.add("sumexp", Binary("add"), "rmbg1", "rmbg2")
    wf.add("maskexp", Binary("logical_and" if mask == "and" else "logical_or"), "cr1", "cr2")
    wf.add("rmcr", udfs["rmcr"], "sumexp", "maskexp")
    wf.add("clust", udfs["clust"], "rmcr")
    for q in named_queries(shp):
        wf.query(q)
    return wf


# ---------------------------------------------------------------------------------------
# the paper's queries
# ---------------------------------------------------------------------------------------


def summary(run: Any) -> list[str]:
    """Cosmic-ray pixels flagged per exposure, and the stars detected."""
    crs = [int(np.count_nonzero(run.array(f"cr{e}"))) for e in (1, 2)]
    labels = np.asarray(run.array("clust"))
    stars = len(np.unique(labels[labels > 0]))
    return [f"cosmic rays: {crs[0]:,} pixels flagged in exp1, {crs[1]:,} in exp2; "
            f"stars: {stars:,} detected"]


def _calibration_path(e: int) -> list[tuple[str, int]]:
    """rmbg{e} back to exp{e} along input 0 of every calibration step."""
    names = ["rmbg", "flatcorrect", "darkcorrect", "biascorrect", "rmoverscan", "badpixrm",
             "addmaskattr", "linearity"]
    return [(f"{n}{e}", 0) for n in names]


def _pick(mask: np.ndarray, k: int, seed: int) -> np.ndarray:
    cells = np.argwhere(mask)
    if len(cells) <= k:
        return cells
    rng = np.random.default_rng(seed)
    return cells[np.sort(rng.choice(len(cells), size=k, replace=False))]


def _cleaned_pixels(run: Any) -> np.ndarray:
    """10 pixels rmcr cleaned (flagged in maskexp), chosen with the query seed."""
    m = run.array("maskexp").astype(bool)
    if not m.any():  # nothing flagged in both: fall back to exposure 1's cosmic rays
        m = run.array("cr1").astype(bool)
    if not m.any():
        raise WorkflowError("no cosmic-ray pixels in this run: BQ0/BQ2 have nothing to trace")
    return _pick(m, 10, QUERY_SEED)


def _star_pixels(run: Any) -> np.ndarray:
    m = run.array("clust") > 0
    if not m.any():
        raise WorkflowError("no stars in this run: BQ1/BQ3 have nothing to trace")
    return _pick(m, 10, QUERY_SEED + 1)


def named_queries(shape: tuple[int, int]) -> list[NamedQuery]:
    h, w = shape
    r0 = int(np.random.default_rng(QUERY_SEED).integers(0, max(1, h - 25)))
    c0 = int(np.random.default_rng(QUERY_SEED + 2).integers(0, max(1, w - 20)))
    out = []
    for name, e, side in (("BQ0", 1, 0), ("BQ2", 2, 1)):
        out.append(NamedQuery(
            name, "backward", "rmcr", _cleaned_pixels,
            path=[("rmcr", 1), ("maskexp", side), (f"cr{e}", 0), *_calibration_path(e)],
            description=f"10 cosmic-ray-cleaned pixels of rmcr back to exp{e}"))
    for name, e in (("BQ1", 2), ("BQ3", 1)):
        out.append(NamedQuery(
            name, "backward", "clust", _star_pixels,
            path=[("clust", 0), ("rmcr", 0), ("sumexp", e - 1), *_calibration_path(e)],
            description=f"10 star pixels of clust back to exp{e}"))
    out.append(NamedQuery(
        "BQ4", "backward", "rmcr", lambda run, b=Box((r0, c0), (r0 + 25, c0 + 20)): b,
        path=[("rmcr", 0)], description="a 25 x 20 block of rmcr one step back (to sumexp)"))
    out.append(NamedQuery(
        "FQ0", "forward", "exp1", lambda run: Box((0, 0), (10, 10)),
        path=[("linearity1", 0), ("addmaskattr1", 0), ("badpixrm1", 0), ("overscanimg1", 0),
              ("meanoverscan1", 0), ("rmoverscan1", 1)],
        description="the 10 x 10 corner of exp1 forward through the overscan branch"))
    out.sort(key=lambda q: q.name)
    return out
