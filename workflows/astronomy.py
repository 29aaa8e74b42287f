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
come from FITS files (``--input exp1=PATH``, read chunk by chunk by the engine), or are
generated with a fixed seed, box by box in the tasks
(:class:`workflows.astro_data.ExposureField`); the auxiliary ``satmask``, ``biasmask``,
``darkmask`` (zero) and ``flatmask`` (one) are constants of the image's shape and do not
count as input data.

Which exposures (``data``, :func:`choose_real`): ``data=auto`` (the default) reads the real
LSST pair from ``$SUBZERO_DATA/lsst`` when that variable is set and holds both files and
nothing asks for generated ones (no ``--input``, ``shape``, ``seed`` or ``ccds``); otherwise
it generates them. ``data=real`` insists on the real pair (from ``$SUBZERO_DATA``, else
``../shared/data``), ``data=generated`` on generated ones. Each input records its origin
(``InputSpec.origin``: ``"generated, seed 0, shape 2001x513"``; a file's path and checksum
are the engine's).

Many CCDs (``--param ccds=N``, an LSST visit has 189): N independent copies of the 28
operators, CCD ``k`` (1-based) with its inputs, operators and named queries prefixed
``c{k}.`` (``c3.exp1``, ``c3.rmcr``, ``c3.BQ0``); the auxiliary masks are one set for the
visit. Each CCD's exposures are generated with its own seed (:func:`ccd_seed`; CCD 1 keeps
``seed``, so it is the one-CCD workflow's pair) unless given per CCD with ``--input
c{k}.exp1=PATH --input c{k}.exp2=PATH``; CCDs without files are generated. With
``ccds=1`` (the default) nothing is prefixed.

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

import os
import re
from functools import partial
from typing import Any, Iterator, Mapping

import numpy as np

from operators import Binary, Cast, Copy, MaskReplace, MeanBroadcast, Reduce, Subarray
from subzero import settings
from subzero.cells import Box, to_coords
from subzero.errors import WorkflowError
from subzero.workflow import NamedQuery, Workflow, parse_shape_param
from workflows.astro_data import (EXPOSURE_FILES, EXPOSURE_SHAPE, SKY, ExposureField,
                                  data_dir, exposure_paths)
from workflows.astro_udfs import astronomy_udfs
from workflows.params import parse_float, parse_int, parse_seed

NAME = "astronomy"
DESCRIPTION = ("LSST image cleaning and star detection: 2 exposures, 28 operators, 4 UDFs "
               "(the real exposures in $SUBZERO_DATA when set, else generated ones; "
               "--input exp1=... exp2=...; --param ccds=N for N CCDs)")
QUERY_SEED = 7
#: CCDs one workflow may hold (an LSST visit has 189): more is a mistake, not a visit.
MAX_CCDS = 1024
#: The visit's constant frames, shared by all CCDs: (name, dtype, value).
AUXILIARY = (("satmask", "uint8", 0), ("biasmask", "float32", 0.0),
             ("darkmask", "float32", 0.0), ("flatmask", "float32", 1.0))
#: Cells read at a time when a query or the summary scans an array: a block's memory is
#: bounded, and each block is large enough that reading it costs more than the call.
SCAN_CELLS = settings.define(
    "ASTRONOMY_SCAN_CELLS", 1 << 22, int,
    "Cells the astronomy workflow reads at a time when its summary or a named query scans "
    "an array (whole stored chunks at least); larger blocks take more memory.",
    module=__name__)
#: :func:`_pick` keeps the cells it finds in its first pass up to this many (as int64
#: indices), and reads the blocks of the chosen ones again beyond: memory stays bounded
KEEP_HITS = settings.define(
    "ASTRONOMY_KEEP_HITS", 1 << 22, int,
    "Cells the astronomy workflow's named queries keep in memory while they choose their "
    "start cells in one pass over an array; beyond, they read the chosen cells' blocks "
    "again.",
    module=__name__)

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


DATA_CHOICES = ("auto", "real", "generated")


def choose_real(data: Any, generated_asked: bool) -> tuple[dict[str, str] | None, str]:
    """The real exposures a run without ``--input`` files reads (``{"exp1": path, "exp2":
    path}``, or None to generate them), and why not when ``$SUBZERO_DATA`` is set but
    not used (for the generated inputs' origin; else ""). See the module docstring.

    >>> choose_real("generated", False)
    (None, '')
    """
    if data not in DATA_CHOICES:
        raise WorkflowError(f"data must be one of {', '.join(DATA_CHOICES)} (where the "
                            f"exposures come from). Got {data!r}.")
    env = os.environ.get("SUBZERO_DATA")
    if data == "generated" or (data == "auto" and not env):
        return None, ""
    if data == "real":
        if generated_asked:
            raise WorkflowError("data=real reads the real exposures: leave out shape, seed, "
                                "ccds and --input")
        found = real_inputs()
        if found is None:
            where = data_dir() or "$SUBZERO_DATA (not set) or ../shared/data"
            raise WorkflowError(f"data=real: no LSST exposures in {where} (expected "
                                f"{' and '.join(EXPOSURE_FILES)} there)")
        return found, ""
    if generated_asked:
        return None, ""
    paths = exposure_paths(env)
    if paths is None:
        return None, f"$SUBZERO_DATA={env} holds no {EXPOSURE_FILES[0]}"
    return {"exp1": str(paths[0]), "exp2": str(paths[1])}, ""


# ---------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------


def parse_ccds(value: Any) -> int:
    """The number of CCDs: a positive integer up to :data:`MAX_CCDS`.

    >>> parse_ccds("4"), parse_ccds(1)
    (4, 1)
    """
    return parse_int(value, "ccds", 1, MAX_CCDS, "4")


def ccd_prefix(k: int, ccds: int) -> str:
    """The prefix of CCD ``k``'s names (1-based): ``c{k}.``, or none with one CCD.

    >>> ccd_prefix(3, 4), ccd_prefix(1, 1)
    ('c3.', '')
    """
    return "" if ccds == 1 else f"c{k}."


def ccd_seed(seed: int, k: int) -> int:
    """The seed of CCD ``k``'s generated exposures: ``seed`` for CCD 1, else one derived
    from ``(seed, k)`` (so CCDs differ, and CCD 1 is the one-CCD workflow's pair).

    >>> ccd_seed(5, 1), ccd_seed(5, 2) == ccd_seed(5, 2) != ccd_seed(5, 3)
    (5, True)
    """
    if k == 1:
        return seed
    return int(np.random.SeedSequence([seed, k]).generate_state(1, np.uint64)[0])


def _exposure_files(inputs: Mapping[str, str], ccds: int) -> dict[int, dict[int, str]]:
    """The exposure files given per CCD (``{k: {e: path}}``), checked: names the workflow
    knows, and both exposures of a CCD or neither."""
    files: dict[int, dict[int, str]] = {}
    aux = {name for name, _, _ in AUXILIARY}
    for key, path in inputs.items():
        m = re.fullmatch(r"exp([12])" if ccds == 1 else r"c([1-9][0-9]*)\.exp([12])", key)
        if m and (ccds == 1 or int(m.group(1)) <= ccds):
            k, e = (1, int(m.group(1))) if ccds == 1 else (int(m.group(1)), int(m.group(2)))
            files.setdefault(k, {})[e] = path
        elif key not in aux:
            names = "exp1, exp2" if ccds == 1 else f"c1.exp1, c1.exp2 ... c{ccds}.exp2"
            raise WorkflowError(f"--input {key}: unknown input {key!r}; the astronomy workflow "
                                f"with ccds={ccds} reads {names} (and satmask, biasmask, "
                                "darkmask, flatmask)")
    for k, given in sorted(files.items()):
        if len(given) < 2:
            p = ccd_prefix(k, ccds)
            missing = f"{p}exp{3 - next(iter(given))}"
            ccd = "" if ccds == 1 else f" of CCD {k}"
            raise WorkflowError(f"give both exposures{ccd}: --input {p}exp1=PATH "
                                f"--input {p}exp2=PATH (missing {missing})")
    return files


# ---------------------------------------------------------------------------------------
# the workflow
# ---------------------------------------------------------------------------------------


def _constant(value: Any, dtype: str, box: Box) -> np.ndarray:
    """A constant frame's block (``blocks`` of the auxiliary inputs)."""
    return np.full(box.shape, value, dtype=dtype)


def build(inputs: Mapping[str, str] | None = None, seed: Any = None, shape: Any = None,
          sky: Any = SKY, threshold: Any = 100.0, mask: str = "and", ccds: Any = None,
          data: str = "auto") -> Workflow:
    """The 28-operator workflow, once per CCD.

    Parameters
    ----------
    inputs : FITS files by input name: ``{"exp1": path, "exp2": path}`` (both or neither);
        with ``ccds`` > 1, ``c{k}.exp1`` and ``c{k}.exp2`` per CCD (both or neither for
        each CCD; the others are generated).
    seed, shape : for generated exposures (default seed 0, shape 2001 x 513); CCD ``k``
        uses :func:`ccd_seed` ``(seed, k)``.
    sky : background level (counts) the cosmic-ray noise model adds back (see
        :class:`workflows.astro_udfs.CosmicRayDetect`).
    threshold : star detection threshold on the cleaned sum.
    mask : how ``maskexp`` combines the two cosmic-ray masks: ``and`` (the paper's workflow:
        only pixels flagged in both exposures) or ``or`` (either exposure).
    ccds : number of CCDs (independent copies of the pipeline), a positive integer
        (default 1).
    data : ``auto``, ``real`` or ``generated``: where exposures without ``inputs`` come
        from (see the module docstring).

    Examples
    --------
    >>> wf = build(shape="64x48", ccds=2).validate()
    >>> len(wf.order), list(wf.inputs)[:3], list(wf.queries)[:2]
    (56, ['c1.exp1', 'c1.exp2', 'c2.exp1'], ['c1.BQ0', 'c1.BQ1'])
    """
    n = parse_ccds(1 if ccds is None else ccds)
    files = _exposure_files(dict(inputs or {}), n)
    if mask not in ("and", "or"):
        raise WorkflowError(f"mask must be 'and' or 'or'. Got {mask!r}.")
    real, why_not = choose_real(data, bool(files) or any(
        v is not None for v in (seed, shape, ccds)))
    seed = 0 if seed is None else parse_seed(seed)
    sky, threshold = parse_float(sky, "sky", "1000"), parse_float(threshold, "threshold", "100")
    shp = EXPOSURE_SHAPE if shape is None else parse_shape_param(shape, minimum=8)
    if files and shape is not None and shp != EXPOSURE_SHAPE:
        raise WorkflowError("shape applies to generated exposures only")
    if real:
        files = {1: {1: real["exp1"], 2: real["exp2"]}}
    data = "generated" if not files else "files" if len(files) == n else "mixed"
    params = {"seed": seed, "shape": list(shp), "sky": sky, "threshold": threshold,
              "mask": mask, "data": data, "ccds": n}
    description = DESCRIPTION if n == 1 else f"{DESCRIPTION}; {n} CCDs"
    wf = Workflow(NAME, description, params=params)

    for k in range(1, n + 1):
        field = ExposureField(ccd_seed(seed, k), shp)
        of = "" if n == 1 else f" of CCD {k}"
        made = f"generated, seed {field.seed}, shape {shp[0]}x{shp[1]}"
        for e in (1, 2):
            # generated box by box in the tasks, unless --input (or data) gives the file
            wf.input(f"{ccd_prefix(k, n)}exp{e}", shp, "uint16", blocks=field.blocks(e),
                     description=f"exposure {e}{of} (uint16 counts)",
                     path=real[f"exp{e}"] if real and k == 1 else None,
                     origin=f"{made} ({why_not})" if why_not else made)
    for name, dtype, fill in AUXILIARY:
        what = ("saturation mask (all zero)" if name == "satmask"
                else f"{name[:-4]} frame (all {fill:g})")
        wf.input(name, shp, dtype, blocks=partial(_constant, fill, dtype), auxiliary=True,
                 description=what, origin=f"constant {what}")
    for k in range(1, n + 1):
        _add_pipeline(wf, ccd_prefix(k, n), sky, threshold, mask)
        for q in named_queries(shp, ccd_prefix(k, n)):
            wf.query(q)
    return wf


def _add_pipeline(wf: Workflow, p: str, sky: float, threshold: float, mask: str) -> None:
    """One CCD's 28 operators, named with prefix ``p``."""
    udfs = astronomy_udfs(sky=sky, threshold=threshold)
    for e in (1, 2):
        prev = f"{p}exp{e}"
        for name, make, extra in _CHAIN:
            wf.add(f"{p}{name}{e}", make(), prev, *extra)
            prev = f"{p}{name}{e}"
        wf.add(f"{p}overscanimg{e}", Subarray("0:1, 0:1"), f"{p}badpixrm{e}")
        wf.add(f"{p}meanoverscan{e}", Reduce("mean", dtype="float64"), f"{p}overscanimg{e}")
        wf.add(f"{p}rmoverscan{e}", Binary("subtract"), f"{p}badpixrm{e}",
               f"{p}meanoverscan{e}")
        wf.add(f"{p}biascorrect{e}", Binary("subtract"), f"{p}rmoverscan{e}", "biasmask")
        wf.add(f"{p}darkcorrect{e}", Binary("subtract"), f"{p}biascorrect{e}", "darkmask")
        wf.add(f"{p}flatcorrect{e}", Binary("divide"), f"{p}darkcorrect{e}", "flatmask")
        wf.add(f"{p}bgmean{e}", MeanBroadcast(), f"{p}flatcorrect{e}")
        wf.add(f"{p}rmbg{e}", Binary("subtract"), f"{p}flatcorrect{e}", f"{p}bgmean{e}")
        wf.add(f"{p}cr{e}", udfs[f"cr{e}"], f"{p}rmbg{e}")
    wf.add(f"{p}sumexp", Binary("add"), f"{p}rmbg1", f"{p}rmbg2")
    wf.add(f"{p}maskexp", Binary("logical_and" if mask == "and" else "logical_or"),
           f"{p}cr1", f"{p}cr2")
    wf.add(f"{p}rmcr", udfs["rmcr"], f"{p}sumexp", f"{p}maskexp")
    wf.add(f"{p}clust", udfs["clust"], f"{p}rmcr")


# ---------------------------------------------------------------------------------------
# reading a run's arrays in row blocks
# ---------------------------------------------------------------------------------------


def _row_blocks(run: Any, name: str, only: set[int] | None = None
                ) -> Iterator[tuple[int, np.ndarray]]:
    """Array ``name`` of a finished run in blocks of whole rows (about
    :data:`SCAN_CELLS` cells each, whole stored chunks), with each block's first row; the
    whole array at once when the run has no stored array to read (a stand-in). ``only``:
    the blocks (their places in that sequence) to read; the others are skipped unread."""
    loaded = getattr(run, "loaded", run)  # the API's Run holds the run it reads
    if not hasattr(loaded, "read_rows"):
        if only is None or 0 in only:
            yield 0, np.asarray(run.array(name))
        return
    shape = loaded.shape(name)
    if len(shape) == 0 or shape[0] == 0:
        if only is None or 0 in only:
            yield 0, loaded.read_box(name)
        return
    per_row = max(1, int(np.prod(shape[1:])))
    chunk = max(1, int(loaded.chunks(name)[0]))
    rows = max(chunk, SCAN_CELLS // per_row // chunk * chunk)
    for i, r in enumerate(range(0, shape[0], rows)):
        if only is None or i in only:
            yield r, loaded.read_rows(name, r, r + rows)


def _count(run: Any, name: str) -> int:
    """Nonzero cells of array ``name``, read in row blocks."""
    return sum(int(np.count_nonzero(b)) for _, b in _row_blocks(run, name))


def _labels(run: Any, name: str) -> int:
    """Distinct positive labels of array ``name``, read in row blocks (a bitmap of the
    labels seen: one pass, no sort)."""
    seen = np.zeros(1, dtype=bool)
    for _, b in _row_blocks(run, name):
        v = b[b > 0]
        if len(v):
            top = int(v.max())
            if top >= len(seen):
                seen = np.concatenate([seen, np.zeros(top + 1 - len(seen), dtype=bool)])
            seen[v] = True
    return int(np.count_nonzero(seen))


def _pick(run: Any, name: str, positive: bool, k: int, seed: int) -> np.ndarray:
    """``k`` cells of array ``name`` that are nonzero (``positive``: > 0), chosen with
    ``seed`` among all of them in row-major order (all when there are ``k`` or fewer).
    One pass over row blocks keeping the cells found while they are at most
    :data:`KEEP_HITS`; beyond, a second pass reads the blocks holding a chosen cell, so
    memory stays bounded. The run remembers the cells chosen (a finished run's arrays do
    not change), so queries that start from the same cells scan the array once."""
    memo = getattr(run, "__dict__", {}).setdefault("_astronomy_picks", {})
    key = (name, positive, k, seed)
    if key not in memo:  # BQ1 and BQ3 start from the same star pixels: one scan
        memo[key] = _pick_scan(run, name, positive, k, seed)
    return memo[key].copy()


def _pick_scan(run: Any, name: str, positive: bool, k: int, seed: int) -> np.ndarray:
    """:func:`_pick`, reading the array."""
    def hit(b: np.ndarray) -> np.ndarray:
        return b > 0 if positive else b.astype(bool)

    counts, kept, shape, rows = [], [], None, 0
    for r, b in _row_blocks(run, name):
        found = np.flatnonzero(hit(b))
        counts.append(len(found))
        shape, rows = b.shape[1:], r + len(b)
        if kept is not None:
            kept.append(found + r * int(np.prod(shape, dtype=np.int64)))
            if sum(counts) > KEEP_HITS:
                kept = None
    total = sum(counts)
    if total <= k:
        chosen = np.arange(total)
    else:
        rng = np.random.default_rng(seed)
        chosen = np.sort(rng.choice(total, size=k, replace=False))
    if shape is None:  # an array of no rows
        return np.zeros((0, 2), dtype=np.int64)
    if kept is not None:  # every cell found is at hand: no second pass
        return to_coords(np.concatenate([np.zeros(0, np.int64), *kept])[chosen],
                         (rows, *shape))
    out = [np.zeros((0, 2), dtype=np.int64)]
    starts = np.cumsum([0, *counts])
    where = np.searchsorted(starts, chosen, side="right") - 1  # each chosen cell's block
    for (r, b), i in zip(_row_blocks(run, name, only=set(where.tolist())), np.unique(where)):
        mine = chosen[where == i] - starts[i]
        cells = to_coords(np.flatnonzero(hit(b))[mine], b.shape)
        cells[:, 0] += r
        out.append(cells)
    return np.concatenate(out)


# ---------------------------------------------------------------------------------------
# the paper's queries
# ---------------------------------------------------------------------------------------


def summary(run: Any) -> list[str]:
    """Cosmic-ray pixels flagged per exposure, and the stars detected (totals over the
    CCDs); arrays are read in row blocks."""
    n = int(run.workflow.params.get("ccds", 1))
    prefixes = [ccd_prefix(k, n) for k in range(1, n + 1)]
    crs = [sum(_count(run, f"{p}cr{e}") for p in prefixes) for e in (1, 2)]
    stars = sum(_labels(run, f"{p}clust") for p in prefixes)
    line = (f"cosmic rays: {crs[0]:,} pixels flagged in exp1, {crs[1]:,} in exp2; "
            f"stars: {stars:,} detected")
    return [line if n == 1 else f"{n} CCDs: {line}"]


def _calibration_path(e: int, p: str = "") -> list[tuple[str, int]]:
    """rmbg{e} back to exp{e} along input 0 of every calibration step."""
    names = ["rmbg", "flatcorrect", "darkcorrect", "biascorrect", "rmoverscan", "badpixrm",
             "addmaskattr", "linearity"]
    return [(f"{p}{n}{e}", 0) for n in names]


def _cleaned_pixels(run: Any, prefix: str = "") -> np.ndarray:
    """10 pixels rmcr cleaned (flagged in maskexp), chosen with the query seed."""
    cells = _pick(run, f"{prefix}maskexp", False, 10, QUERY_SEED)
    if not len(cells):  # nothing flagged in both: fall back to exposure 1's cosmic rays
        cells = _pick(run, f"{prefix}cr1", False, 10, QUERY_SEED)
    if not len(cells):
        where = "this run" if not prefix else f"CCD {prefix[1:-1]} of this run"
        raise WorkflowError(f"no cosmic-ray pixels in {where}: {prefix}BQ0/{prefix}BQ2 have "
                            "nothing to trace")
    return cells


def _star_pixels(run: Any, prefix: str = "") -> np.ndarray:
    """10 star pixels of clust, chosen with the query seed."""
    cells = _pick(run, f"{prefix}clust", True, 10, QUERY_SEED + 1)
    if not len(cells):
        where = "this run" if not prefix else f"CCD {prefix[1:-1]} of this run"
        raise WorkflowError(f"no stars in {where}: {prefix}BQ1/{prefix}BQ3 have nothing to "
                            "trace")
    return cells


def _box(box: Box, run: Any) -> Box:
    """A fixed box as a query's cells."""
    return box


def named_queries(shape: tuple[int, int], prefix: str = "") -> list[NamedQuery]:
    """The paper's queries on one CCD (names, paths and arrays prefixed ``prefix``)."""
    h, w = shape
    p = prefix
    r0 = int(np.random.default_rng(QUERY_SEED).integers(0, max(1, h - 25)))
    c0 = int(np.random.default_rng(QUERY_SEED + 2).integers(0, max(1, w - 20)))
    out = []
    for name, e, side in (("BQ0", 1, 0), ("BQ2", 2, 1)):
        out.append(NamedQuery(
            f"{p}{name}", "backward", f"{p}rmcr", partial(_cleaned_pixels, prefix=p),
            path=[(f"{p}rmcr", 1), (f"{p}maskexp", side), (f"{p}cr{e}", 0),
                  *_calibration_path(e, p)],
            description=f"10 cosmic-ray-cleaned pixels of {p}rmcr back to {p}exp{e}"))
    for name, e in (("BQ1", 2), ("BQ3", 1)):
        out.append(NamedQuery(
            f"{p}{name}", "backward", f"{p}clust", partial(_star_pixels, prefix=p),
            path=[(f"{p}clust", 0), (f"{p}rmcr", 0), (f"{p}sumexp", e - 1),
                  *_calibration_path(e, p)],
            description=f"10 star pixels of {p}clust back to {p}exp{e}"))
    out.append(NamedQuery(
        f"{p}BQ4", "backward", f"{p}rmcr", partial(_box, Box((r0, c0), (r0 + 25, c0 + 20))),
        path=[(f"{p}rmcr", 0)],
        description=f"a 25 x 20 block of {p}rmcr one step back (to {p}sumexp)"))
    out.append(NamedQuery(
        f"{p}FQ0", "forward", f"{p}exp1", partial(_box, Box((0, 0), (10, 10))),
        path=[(f"{p}linearity1", 0), (f"{p}addmaskattr1", 0), (f"{p}badpixrm1", 0),
              (f"{p}overscanimg1", 0), (f"{p}meanoverscan1", 0), (f"{p}rmoverscan1", 1)],
        description=f"the 10 x 10 corner of {p}exp1 forward through the overscan branch"))
    out.sort(key=lambda q: q.name)
    return out
