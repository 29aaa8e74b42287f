"""The lineage checker: is an operator's declared lineage right? (issue 17, part 2)

:func:`check_operator` runs one operator on numpy inputs on the driver, chunk by chunk as
the executor slices blocks (:func:`subzero.testing.run_chunked`; no Spark, no store), and
for every lineage mode the operator supports (``MAP``, ``FULL``, ``PAY``, ``COMP``):

1. samples output cells: the array's corners and edges, cells on both sides of chunk
   borders, cells whose value is rare in the output (a flagged pixel, a star) or in an
   input (a rare mask value, an extreme pixel), cells whose declared lineage has an unusual
   size for the operator (a few cells declared wider, or narrower, than the rest), cells
   that carry a payload, and random ones;
2. **soundness**: for each sampled cell, changes *every* input cell outside its declared
   backward lineage (random changes as :func:`subzero.testing.perturb` makes them, and
   structured ones: everything outside set to a low or a high constant, or shifted), re-runs
   the operator and compares the cell. A cell whose output changed is *unsound*; the
   checker shrinks the change that broke it (bisection, then one cell at a time) to a small
   example: the input cells, their old and new values, the output before and after;
3. **forward/backward agreement**: for the sampled output cells and the input cells of
   their lineage (plus random input cells), ``c`` is in the backward lineage of ``o``
   exactly when ``o`` is in the forward lineage of ``c``;
4. **tightness**: per sampled cell, the declared cells against the *influential* ones: the
   input cells whose change alone (a few values each) changes the output. Only cells inside
   the declared lineage are tried (outside it, soundness says nothing changes).

:func:`check_on_crops` checks an operator of a stored run the same way, on crops of the
run's own arrays around cells sampled from them (each crop the cell's declared lineage
and halo plus a margin, the operator re-bound to the crop's shapes), so that a run's
large arrays are never run whole; an operator that cannot be cropped (a global one) is
checked on the whole arrays when they are small enough, and the report says so.

The declared lineage is read the way queries read it: mapping functions for ``MAP`` (and
the ``COMP`` default), region pairs for ``FULL``, ``map_p`` of stored payloads for ``PAY``
and ``COMP``. The checker lives in the core (it needs only the operator contract and the
runtime); naming operators (``MedianFilter``, ``module:Class``) and generating their inputs
is :mod:`workflows.checkable`'s, and ``subzero.check_lineage`` / ``subzero check-lineage``
put the two together.

>>> import numpy as np
>>> from subzero.testing import bind                            # doctest: +SKIP
>>> rep = check_operator(bind(MyUDF(), x), [x], samples=16)     # doctest: +SKIP
>>> rep.sound, rep.modes[0].tightness                           # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from subzero.cells import Box, as_linear, to_coords
from subzero.chunking import Chunking, chunk_grid, task_grid
from subzero.errors import SubZeroError
from subzero.frontier import Frontier, mask_from_linear
from subzero.lineage import PairBatch, payload_lineage
from subzero.modes import Mode
from subzero.testing import perturb, run_chunked

#: Modes the checker reads lineage from, in report order.
CHECKED_MODES = (Mode.MAP, Mode.FULL, Mode.PAY, Mode.COMP)

Backward = Callable[[np.ndarray, int], np.ndarray]


class CheckError(SubZeroError):
    """An operator or inputs the lineage checker cannot check as asked."""


#: the share of perturbed runs that may raise (and be skipped) for a mode still to count
#: as checked
MAX_SKIPPED = 0.1
#: the share of an input's cells taken as its extreme values (each tail), for sampling
EXTREME_QUANTILE = 0.005

#: at most one progress line this often
PROGRESS_EVERY_S = 2.0

#: the most cells of the largest array of a run's operator checked on whole arrays (a
#: global operator, or a cell whose crop would be the whole array)
WHOLE_MAX_CELLS = 1 << 20
#: the most cells of a run's output (and of each input) read whole for rare values;
#: larger arrays are read in a random set of their chunks up to this many cells
SCAN_MAX_CELLS = 1 << 24
#: the smallest margin (cells per axis) around a crop's declared lineage and halo
CROP_MARGIN = 2

#: output cells whose declared lineage size is computed, per mode, to find unusual sizes
SIZE_SAMPLE = 2048
#: the share of the time budget left that sizing declared lineages may take, per mode
SIZE_SHARE = 0.1


class _Clock:
    """The check's time budget (None: none) and its progress lines (``progress(line)``,
    at most every :data:`PROGRESS_EVERY_S`)."""

    def __init__(self, budget_s: float | None,
                 progress: Callable[[str], None] | None) -> None:
        self.t0 = self.last = time.monotonic()
        self.deadline = None if budget_s is None else self.t0 + float(budget_s)
        self.progress = progress

    def over(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def say(self, text: str) -> None:
        now = time.monotonic()
        if self.progress is not None and now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.progress(f"{text} ({now - self.t0:.0f} s)")


# ---------------------------------------------------------------------------------------
# reports
# ---------------------------------------------------------------------------------------


@dataclass
class CellCheck:
    """One sampled output cell in one mode."""

    cell: tuple[int, ...]
    #: how it was sampled: corner, edge, border, rare, rare input, unusual lineage size,
    #: payload, random, given
    why: str
    declared: int  # input cells in its declared backward lineage (all inputs)
    influential: int | None = None  # input cells whose change alone changes it
    unsound: bool = False
    #: a small change outside the declared lineage that changes the cell (when unsound)
    example: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"cell": list(self.cell), "why": self.why, "declared": self.declared,
               "influential": self.influential, "unsound": self.unsound}
        if self.example is not None:
            out["example"] = self.example
        return out


@dataclass
class ModeCheck:
    """The check of one lineage mode."""

    mode: Mode
    cells: list[CellCheck] = field(default_factory=list)
    disagreements: int = 0
    pairs_compared: int = 0
    disagreement_example: dict[str, Any] | None = None
    runs: int = 0
    #: the share of the declared cells tried alone for tightness (1.0 unless over budget)
    influence_tried: float = 1.0
    #: runs on changed inputs that raised (skipped), and the first error
    failed_runs: int = 0
    failure: str | None = None
    #: what the time budget cut short, one phrase per phase ("soundness: 10 of 24 cells")
    cut: list[str] = field(default_factory=list)

    @property
    def unsound(self) -> list[CellCheck]:
        return [c for c in self.cells if c.unsound]

    @property
    def checked(self) -> bool:
        """Whether enough perturbed runs ran: more than :data:`MAX_SKIPPED` of them raising
        (skipped) leaves the mode not checked, whatever the rest found."""
        return self.failed_runs <= MAX_SKIPPED * max(1, self.runs)

    @property
    def sound(self) -> bool:
        return not self.unsound and self.checked

    @property
    def verdict(self) -> str:
        """``sound``, ``UNSOUND`` or ``NOT CHECKED`` (too many perturbed runs raised)."""
        if self.unsound:
            return "UNSOUND"
        return "sound" if self.checked else "NOT CHECKED"

    @property
    def measured(self) -> list[CellCheck]:
        return [c for c in self.cells if c.influential is not None]

    @property
    def declared(self) -> int:
        return sum(c.declared for c in self.measured)

    @property
    def influential(self) -> int:
        return sum(c.influential or 0 for c in self.measured)

    @property
    def tightness(self) -> float | None:
        """Declared over influential cells, summed over the sampled cells (1.0: exact)."""
        return self.declared / self.influential if self.influential else None

    @property
    def worst(self) -> float | None:
        """The largest declared/influential ratio of one sampled cell."""
        r = [c.declared / c.influential for c in self.measured if c.influential]
        return max(r) if r else None

    @property
    def widest(self) -> CellCheck | None:
        """The sampled cell with the largest declared lineage (what a scientist sees at worst)."""
        m = self.measured
        return max(m, key=lambda c: (c.declared, -(c.influential or 0))) if m else None

    def to_json(self) -> dict[str, Any]:
        w = self.widest
        return {
            "mode": self.mode.value, "sound": self.sound, "verdict": self.verdict,
            "checked": self.checked, "samples": len(self.cells),
            "unsound": [c.to_json() for c in self.unsound],
            "disagreements": self.disagreements, "pairs_compared": self.pairs_compared,
            "disagreement_example": self.disagreement_example,
            "declared": self.declared, "influential": self.influential,
            "tightness": self.tightness, "worst": self.worst,
            "widest": None if w is None else w.to_json(),
            "runs": self.runs, "influence_tried": round(self.influence_tried, 4),
            "failed_runs": self.failed_runs, "failure": self.failure, "cut": self.cut,
            "cells": [c.to_json() for c in self.cells],
        }


@dataclass
class LineageCheck:
    """What :func:`check_operator` found, per mode. ``sound`` is False when any sampled
    cell of any mode changed although only cells outside its lineage were changed, or when
    the operator could not be checked at all (``not_checked``)."""

    operator: str
    in_shapes: list[tuple[int, ...]]
    modes: list[ModeCheck]
    seed: int
    #: how the check was made, one line each ("checked on crops of 9x9 cells ...")
    notes: list[str] = field(default_factory=list)
    #: why nothing was checked (one line), or None
    not_checked: str | None = None

    @property
    def sound(self) -> bool:
        return self.not_checked is None and all(m.sound for m in self.modes)

    @property
    def agrees(self) -> bool:
        return all(m.disagreements == 0 for m in self.modes)

    def mode(self, mode: Mode | str) -> ModeCheck:
        want = Mode(mode) if isinstance(mode, str) else mode
        for m in self.modes:
            if m.mode is want:
                return m
        raise CheckError(f"operator {self.operator} was not checked in mode {want.value}")

    def to_json(self) -> dict[str, Any]:
        return {"operator": self.operator, "inputs": [list(s) for s in self.in_shapes],
                "seed": self.seed, "sound": self.sound, "agrees": self.agrees,
                "notes": self.notes, "not_checked": self.not_checked,
                "verdict": self.verdict(), "modes": [m.to_json() for m in self.modes]}

    def verdict(self, most: int = 4) -> str:
        """The check in one line: ``sound``, ``NOT CHECKED`` and why, or ``UNSOUND`` and
        the unsound cells of each mode (the first ``most``, how each was sampled).

        >>> LineageCheck("op", [(4, 4)], [], 0, not_checked="too large").verdict()
        'NOT CHECKED: too large'
        """
        if self.not_checked is not None:
            return f"NOT CHECKED: {self.not_checked}"
        bad = [m for m in self.modes if m.unsound]
        if bad:
            parts = []
            for m in bad:
                cells = ", ".join(f"{list(c.cell)} ({c.why})" for c in m.unsound[:most])
                more = f" and {len(m.unsound) - most} more" if len(m.unsound) > most else ""
                parts.append(f"{m.mode.value} {len(m.unsound)} of {len(m.cells)} cells: "
                             f"{cells}{more}")
            return "UNSOUND: " + "; ".join(parts)
        unchecked = [m.mode.value for m in self.modes if not m.checked]
        if unchecked:
            return f"NOT CHECKED: mode {', '.join(unchecked)} (too many runs raised)"
        if not self.modes:
            return "sound: no lineage mode to check"
        return (f"sound: {sum(len(m.cells) for m in self.modes)} sampled cells of "
                f"{', '.join(m.mode.value for m in self.modes)}")

    def lines(self) -> list[str]:
        """A human-readable report, one line per mode plus the unsound examples."""
        shapes = ", ".join("x".join(map(str, s)) or "scalar" for s in self.in_shapes)
        out = [f"{self.operator} on {shapes} (seed {self.seed})"]
        out += [f"  {n}" for n in self.notes]
        if self.not_checked is not None:
            out.append(f"  not checked: {self.not_checked}")
        elif not self.modes:
            out.append("  no lineage mode to check (BLACKBOX only: queries re-execute it)")
        for m in self.modes:
            t = "n/a" if m.tightness is None else f"{m.tightness:.2f}x"
            w = m.widest
            widest = "" if w is None else (
                f", widest cell {list(w.cell)} ({w.why}): {w.declared} declared, "
                f"{w.influential} influential")
            out.append(
                f"  {m.mode.value:5s} {m.verdict:7s} "
                f"{len(m.cells)} cells, {len(m.unsound)} unsound, {m.disagreements} "
                f"forward/backward disagreements; declared {m.declared} / influential "
                f"{m.influential} cells = {t}{widest}")
            for c in m.unsound[:5]:
                ex = c.example or {}
                out.append(f"    unsound {list(c.cell)} ({c.why}): changing "
                           f"{ex.get('summary', 'cells outside its lineage')}")
            if m.disagreement_example:
                out.append(f"    disagreement: {m.disagreement_example['summary']}")
            if m.cut:
                out.append(f"    cut by the time budget: {'; '.join(m.cut)} (--budget)")
            if m.failed_runs and not m.checked:
                out.append(f"    not checked: {m.failed_runs} of {m.runs} runs on changed "
                           f"inputs raised and were skipped, more than a tenth "
                           f"({m.failure}); give inputs the operator accepts changed "
                           "(--input)")
            elif m.failed_runs:
                out.append(f"    note: {m.failed_runs} of {m.runs} run(s) on changed inputs "
                           f"raised and were skipped ({m.failure})")
        return out


# ---------------------------------------------------------------------------------------
# the declared lineage of each mode, as the query executor reads it
# ---------------------------------------------------------------------------------------


def _full_lookup(pairs: PairBatch | None, key_side: Any, val_side: Any, want: np.ndarray,
                 size: int) -> np.ndarray:
    """Cells of ``val_side`` in pairs whose ``key_side`` meets ``want`` (linear), a mask."""
    res = np.zeros(size, dtype=bool)
    if pairs is None or len(key_side.values) == 0:
        return res
    hit = np.isin(key_side.values, want)
    rows = np.zeros(len(key_side), dtype=bool)
    rows[key_side.row_ids()[hit]] = True
    if len(val_side.values):
        res[val_side.values[rows[val_side.row_ids()]].astype(np.intp)] = True
    return res


def _problem(e: BaseException) -> str:
    """``Type: first line of the message``."""
    msg = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


#: the lineage functions whose failures the checker names (a user's bug, not SubZero's)
_LINEAGE_FUNCTIONS = frozenset({"map_b", "map_f", "map_b_lin", "map_f_lin", "map_p",
                                "map_p_hits", "map_p_rows", "map_p_rows_hits"})


class _Checked:
    """An operator whose lineage functions' failures are a :class:`CheckError` naming the
    operator and the function, and whose ``map_b`` / ``map_f`` answers must have the
    shape of the input / output they map to."""

    def __init__(self, op: Any) -> None:
        self._op = op

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._op, name)
        if name not in _LINEAGE_FUNCTIONS:
            return attr
        op = self._op

        def call(*args: Any) -> Any:
            try:
                got = attr(*args)
            except CheckError:
                raise
            except Exception as e:  # noqa: BLE001 - the user's lineage function, in one line
                raise CheckError(f"operator {op.name!r}: {name} failed: {_problem(e)}"
                                 ) from None
            if name in ("map_b", "map_f"):
                want = tuple(op.in_shapes[args[1]] if name == "map_b" else op.out_shape)
                if tuple(np.shape(got)) != want:
                    raise CheckError(
                        f"operator {op.name!r}: {name} returned shape {tuple(np.shape(got))} "
                        f"for input {args[1]}; expected {want}")
            return got
        return call


class _Lineage:
    """Backward and forward lineage of one operator in one mode, read as queries read it:
    the mapping functions (``MAP``), region pairs (``FULL``), or the run's payload pairs
    through :func:`subzero.lineage.payload_lineage` (``PAY``, ``COMP``)."""

    def __init__(self, op: Any, mode: Mode, full: PairBatch | None,
                 pays: PairBatch | None) -> None:
        self.op, self.mode, self.full, self.pays = _Checked(op), mode, full, pays
        self.covered = np.zeros(int(np.prod(op.out_shape)), dtype=bool)
        if mode in (Mode.PAY, Mode.COMP) and pays is not None and len(pays):
            self.covered[pays.out.values.astype(np.intp)] = True

    def _pairs_for(self, out_lin: np.ndarray | None, _f: Frontier | None
                   ) -> PairBatch | None:
        if self.pays is None or out_lin is None:
            return self.pays
        return self.pays.restrict(out_lin)

    def _payload(self, f: np.ndarray, i: int, backward: bool) -> np.ndarray:
        shape = f.shape
        front = Frontier(shape, lin=np.flatnonzero(f).astype(np.uint64))
        got = payload_lineage(self._pairs_for, self.op, i, backward, front,
                              self.mode is Mode.COMP)
        return got.mask

    def backward(self, f_out: np.ndarray, i: int) -> np.ndarray:
        op, shape = self.op, self.op.in_shapes[i]
        if self.mode is Mode.MAP:
            return np.asarray(op.map_b(f_out, i), dtype=bool)
        if self.mode is Mode.FULL:
            return _full_lookup(self.full, self.full.out if self.full else None,
                                self.full.ins[i] if self.full else None,
                                np.flatnonzero(f_out), int(np.prod(shape))).reshape(shape)
        return self._payload(f_out, i, True)

    def forward(self, f_in: np.ndarray, i: int) -> np.ndarray:
        op = self.op
        if self.mode is Mode.MAP:
            return np.asarray(op.map_f(f_in, i), dtype=bool)
        if self.mode is Mode.FULL:
            return _full_lookup(self.full, self.full.ins[i] if self.full else None,
                                self.full.out if self.full else None, np.flatnonzero(f_in),
                                int(np.prod(op.out_shape))).reshape(op.out_shape)
        return self._payload(f_in, i, False)


# ---------------------------------------------------------------------------------------
# sampling
# ---------------------------------------------------------------------------------------


def _edge_cells(shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], str]]:
    out = []
    for corner in np.ndindex(*(2,) * len(shape)):
        out.append((tuple((n - 1) * c for n, c in zip(shape, corner)), "corner"))
    for d, n in enumerate(shape):  # the middle of each face
        for v in (0, n - 1):
            out.append((tuple(v if k == d else m // 2 for k, m in enumerate(shape)), "edge"))
    return out


def _border_cells(op: Any, split: Any, rng: np.random.Generator,
                  chunks: Sequence[int] | None = None) -> list[tuple[tuple[int, ...], str]]:
    """Cells on both sides of the borders of the chunk grid ``split`` makes (or of chunks
    of shape ``chunks``: a run's own grid)."""
    shape = op.out_shape
    cshape = tuple(chunks) if chunks is not None else Chunking(split=split).chunk_shape(shape)
    out = []
    for _, box in task_grid(op, cshape):
        for d in range(len(shape)):
            for v in (box.lo[d], box.hi[d] - 1):
                if 0 < v < shape[d] - 1 and (v == box.lo[d] or v + 1 < shape[d]):
                    c = [int(rng.integers(lo, hi)) for lo, hi in zip(box.lo, box.hi)]
                    c[d] = int(v)
                    out.append((tuple(c), "border"))
    return out


def _rare_cells(out: np.ndarray) -> np.ndarray:
    """Linear indices of cells whose value is rarer than the output's most common one."""
    flat = out.reshape(-1)
    if flat.size == 0:
        return np.empty(0, dtype=np.int64)
    try:
        vals, inv, counts = np.unique(flat, return_inverse=True, return_counts=True)
    except TypeError:  # values numpy cannot order (objects): no rare cells
        return np.empty(0, dtype=np.int64)
    if len(vals) < 2 or len(vals) > flat.size // 2:  # continuous values: nothing is rare
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(counts[inv.reshape(-1)] < counts.max())


def _rare_input_cells(shape: Sequence[int], inputs: Sequence[np.ndarray]
                      ) -> list[np.ndarray]:
    """Per input shaped like the output (of ``shape``), linear indices of the cells where
    it takes a rare value: an integer or boolean value rarer than its most common one (a
    flagged pixel of a mask, a label), or a float in either extreme tail
    (:data:`EXTREME_QUANTILE`). Operators that lie about lineage often do so only there (a
    cleaner that declares itself elementwise but replaces flagged pixels by their
    neighbours' median). Each input has its own list, so that an image's bright tail does
    not crowd out a mask's few flags."""
    shape = tuple(shape)
    found = []
    for a in inputs:
        if tuple(a.shape) != shape or a.size == 0:
            continue
        if a.dtype.kind in "biu":
            found.append(_rare_cells(a).astype(np.int64))
        elif a.dtype.kind == "f":
            flat = a.reshape(-1)
            finite = np.isfinite(flat)
            if finite.sum() < 2:
                continue
            lo, hi = np.quantile(flat[finite], [EXTREME_QUANTILE, 1 - EXTREME_QUANTILE])
            found.append(np.flatnonzero(finite & ((flat <= lo) | (flat >= hi))))
    return [f for f in found if len(f)]


def _interleave(parts: Sequence[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """The cells of ``parts``, each part shuffled, taken one from each part in turn."""
    parts = [rng.permutation(np.asarray(p, dtype=np.int64)) for p in parts if len(p)]
    if not parts:
        return np.empty(0, dtype=np.int64)
    longest = max(len(p) for p in parts)
    grid = np.full((longest, len(parts)), -1, dtype=np.int64)
    for k, p in enumerate(parts):
        grid[:len(p), k] = p
    flat = grid.reshape(-1)
    return flat[flat >= 0]


def _declared_sizes(lineage: _Lineage, lins: np.ndarray, deadline: float | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The declared backward lineage size (input cells, summed over the inputs) of output
    cells ``lins``: the cells sized (fewer than asked once ``deadline`` has passed) and
    their sizes.

    ``FULL`` reads every cell's size off the region pairs at once (a cell in several pairs
    counts each pair's cells: an upper bound); ``MAP`` asks ``map_b_lin`` when the operator
    has it, else ``map_b`` of the one cell; ``PAY`` and ``COMP`` ask the payload lineage
    of the one cell."""
    op, shape = lineage.op, tuple(lineage.op.out_shape)
    n_in = len(op.in_shapes)
    if lineage.mode is Mode.FULL:
        sizes = np.zeros(int(np.prod(shape)), dtype=np.int64)
        full = lineage.full
        if full is not None and len(full):
            per_pair = np.zeros(len(full), dtype=np.int64)
            for side in full.ins or ():
                per_pair += side.lengths
            np.add.at(sizes, full.out.values.astype(np.intp), per_pair[full.out.row_ids()])
        return lins, sizes[lins]
    got: list[int] = []
    for lin in lins:
        if deadline is not None and time.monotonic() > deadline:
            break
        total = 0
        for i in range(n_in):
            cells = None
            if lineage.mode is Mode.MAP:
                cells = op.map_b_lin(np.array([lin], dtype=np.uint64), i)
            if cells is not None:
                total += len(np.unique(np.asarray(cells)))
            else:
                total += int(np.count_nonzero(
                    lineage.backward(mask_from_linear(np.array([lin]), shape), i)))
        got.append(total)
    return lins[:len(got)], np.array(got, dtype=np.int64)


def _unusual_sizes(lineage: _Lineage, rng: np.random.Generator, clock: _Clock,
                   covered: np.ndarray | None = None) -> np.ndarray:
    """Output cells whose declared lineage has an unusual size for the operator, most
    unusual first (linear indices; none when every size is the same).

    The sizes of a cheap sample of cells are computed (every cell of a small output, else
    :data:`SIZE_SAMPLE` random ones and the payload cells among them; for at most
    :data:`SIZE_SHARE` of what is left of the time budget). Every cell whose size is not
    the most common one is unusual: the rarer its size, and then the farther from the
    median, the more unusual. Lies where most cells are declared one way and a few
    another (a handful of cells declaring a wide box that is still too small, or a
    single cell) show there."""
    shape = tuple(lineage.op.out_shape)
    size = int(np.prod(shape)) if shape else 0
    if size < 2:
        return np.empty(0, dtype=np.int64)
    if size <= SIZE_SAMPLE:
        cand = np.arange(size, dtype=np.int64)
    else:
        cand = rng.choice(size, SIZE_SAMPLE, replace=False).astype(np.int64)
        if covered is not None:
            pays = np.flatnonzero(covered)
            if len(pays) > SIZE_SAMPLE // 2:
                pays = rng.choice(pays, SIZE_SAMPLE // 2, replace=False)
            cand = np.unique(np.concatenate([pays.astype(np.int64), cand]))[:SIZE_SAMPLE]
    deadline = None
    if clock.deadline is not None:
        deadline = time.monotonic() + SIZE_SHARE * max(0.0, clock.deadline - time.monotonic())
    clock.say(f"{lineage.mode.value}: sizing the declared lineage of {len(cand)} cells")
    lins, sizes = _declared_sizes(lineage, cand, deadline)
    if len(sizes) < 2:
        return np.empty(0, dtype=np.int64)
    vals, inv, counts = np.unique(sizes, return_inverse=True, return_counts=True)
    if len(vals) < 2:
        return np.empty(0, dtype=np.int64)
    inv = inv.reshape(-1)
    common = vals[np.argmax(counts)]
    far = np.abs(np.log1p(sizes.astype(np.float64)) - np.log1p(float(np.median(sizes))))
    order = np.lexsort((rng.random(len(sizes)), -far, counts[inv]))
    order = order[sizes[order] != common]
    return lins[order]


def sample_cells(op: Any, out: np.ndarray | None, samples: int, rng: np.random.Generator,
                 split: Any = 2, covered: np.ndarray | None = None,
                 inputs: Sequence[np.ndarray] = (), unusual: np.ndarray | None = None,
                 rare: dict[str, np.ndarray] | None = None,
                 chunks: Sequence[int] | None = None) -> list[tuple[tuple[int, ...], str]]:
    """Up to ``samples`` distinct output cells: corners and edges, chunk borders, rare
    values of the output, rare values of the inputs (:func:`_rare_input_cells`), cells of
    an unusual declared lineage size (``unusual``, most unusual first:
    :func:`_unusual_sizes`), payload cells, random (in that order of priority, each kind a
    share).

    ``rare`` gives the rare-value cells already found (linear indices under the key
    ``"rare"``, and a list of them, one per input, under ``"rare input"``) instead of
    searching ``out`` and ``inputs``;
    ``chunks`` the chunk shape whose borders are sampled instead of ``split``'s.
    """
    shape = tuple(op.out_shape)
    size = int(np.prod(shape))
    picked: dict[int, str] = {}

    def take(cells: list[tuple[tuple[int, ...], str]], limit: int) -> None:
        n = 0
        for c, why in cells:
            lin = int(np.ravel_multi_index(c, shape)) if shape else 0
            if lin not in picked and len(picked) < samples and n < limit:
                picked[lin] = why
                n += 1

    def from_lin(lin: np.ndarray, why: str, k: int) -> list[tuple[tuple[int, ...], str]]:
        if len(lin) == 0:
            return []
        lin = rng.choice(lin, size=min(k, len(lin)), replace=False)
        return [(tuple(int(v) for v in np.unravel_index(int(x), shape)), why) for x in lin]

    def in_order(lin: np.ndarray, why: str) -> list[tuple[tuple[int, ...], str]]:
        return [(tuple(int(v) for v in np.unravel_index(int(x), shape)), why) for x in lin]

    share = max(1, samples // 6)
    edges = _edge_cells(shape) if shape else [((), "corner")]
    take([edges[k] for k in rng.permutation(len(edges))], share)
    borders = _border_cells(op, split, rng, chunks) if shape else []
    take([borders[k] for k in rng.permutation(len(borders))], share)
    if rare is None:
        rare = {"rare": _rare_cells(out) if out is not None else np.empty(0, np.int64),
                "rare input": _rare_input_cells(shape, inputs) if shape else []}
    take(from_lin(np.asarray(rare.get("rare", ()), dtype=np.int64), "rare", share), share)
    if shape:
        take(in_order(_interleave(rare.get("rare input", []), rng), "rare input"), share)
    if unusual is not None and shape:
        take(in_order(unusual, "unusual lineage size"), share)
    if covered is not None:
        take(from_lin(np.flatnonzero(covered), "payload", share), share)
    take(from_lin(np.arange(size), "random", samples), samples)
    return [(tuple(int(v) for v in np.unravel_index(lin, shape)) if shape else (), why)
            for lin, why in picked.items()]


# ---------------------------------------------------------------------------------------
# perturbations
# ---------------------------------------------------------------------------------------


def _structured(arr: np.ndarray, keep: np.ndarray) -> list[np.ndarray]:
    """Changes random noise rarely makes: everything outside ``keep`` set to a low or a
    high constant, or shifted together (medians, thresholds and connectivity react)."""
    if arr.dtype == bool:
        return [np.where(keep, arr, v) for v in (True, False)]
    if arr.dtype.kind == "f":
        finite = arr[np.isfinite(arr)]
        span = float(np.ptp(finite)) if finite.size else 1.0
        span = span or 1.0
        lo = float(finite.min()) if finite.size else 0.0
        hi = float(finite.max()) if finite.size else 0.0
        return [np.where(keep, arr, v) for v in (lo - span, hi + span, 0.0)] + [
            np.where(keep, arr, arr + d) for d in (-0.1 * span, 0.1 * span)]
    if arr.dtype.kind in "iu":
        info = np.iinfo(arr.dtype)
        return [np.where(keep, arr, np.array(v, dtype=arr.dtype))
                for v in (info.min, info.max, 0)]
    return []


def _drawn(arr: np.ndarray, keep: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Every cell outside ``keep`` given a value drawn from the array itself (its values
    shuffled): a mask gains and loses flags, labels move, where random noise would make
    values the operator never sees."""
    if arr.size == 0:
        return arr.copy()
    drawn = rng.permutation(arr.reshape(-1)).reshape(arr.shape)
    return np.where(keep, arr, drawn)


def _vocabulary(arr: np.ndarray, most: int = 32) -> list[Any]:
    """The most common values of a text or object array (a categorical cell matters only
    when it takes one of the values the operator looks for)."""
    if arr.dtype.kind not in "OTUS" or arr.size == 0:
        return []
    vals, counts = np.unique(arr.astype(object).astype("U").reshape(-1), return_counts=True)
    return [str(v) for v in vals[np.argsort(-counts, kind="stable")][:most]]


def _single_values(arr: np.ndarray, lin: int, rng: np.random.Generator,
                   vocab: Sequence[Any] = ()) -> list[Any]:
    """A few new values for one cell: a random change, far below / far above and NaN for
    numbers, the array's common values for text."""
    flat = arr.reshape(-1)
    old = flat[lin]
    keep = np.ones(flat.shape, dtype=bool)
    keep[lin] = False
    vals = [perturb(flat, keep, rng)[lin]]
    if arr.dtype.kind == "f":
        finite = flat[np.isfinite(flat)]
        span = (float(np.ptp(finite)) if finite.size else 1.0) or 1.0
        base = float(old) if np.isfinite(old) else 0.0
        vals += [base - span, base + span, np.nan]
    elif arr.dtype.kind in "iu":
        info = np.iinfo(arr.dtype)
        vals += [info.min if old != info.min else info.max, 0 if old != 0 else 1]
    elif vocab:
        vals += [v for v in vocab if v != str(old)]
    return vals


def _same(a: np.ndarray, b: np.ndarray, rtol: float) -> np.ndarray:
    """Elementwise: unchanged (NaN equals NaN; exact unless ``rtol``)."""
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        eq = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
        if rtol:
            eq |= np.isclose(a64, b64, rtol=rtol, atol=0)
        return eq
    if a.dtype.kind in "OTUS" or b.dtype.kind in "OTUS":
        return np.array([x == y for x, y in zip(a.astype(object), b.astype(object))], bool)
    return a == b


# ---------------------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------------------


class _Runner:
    """Runs the operator on (changed) inputs and reads the sampled output cells: on the
    check's chunk grid, or as one block (``whole``: the cheaper runs of the tightness
    measurement, compared with a one-block run of the unchanged inputs)."""

    def __init__(self, op: Any, inputs: Sequence[np.ndarray], split: Any, rtol: float) -> None:
        self.op, self.inputs, self.split, self.rtol = op, list(inputs), split, rtol
        self.runs = 0
        self.failed = 0  # runs on changed inputs that raised
        self.failure: str | None = None
        self._base: dict[bool, np.ndarray] = {}
        try:
            self.base = self._run(self.inputs, False)
        except (SubZeroError, MemoryError):  # out of memory: the caller names the parameters
            raise
        except Exception as e:  # noqa: BLE001 - the user's operator, named in one line
            raise CheckError(f"operator {op.name!r} fails on its inputs: {_problem(e)}"
                             ) from None

    def _run(self, inputs: Sequence[np.ndarray], whole: bool) -> np.ndarray:
        self.runs += 1
        with np.errstate(all="ignore"):  # NaN and extreme values are the point here
            out, _, _ = run_chunked(self.op, list(inputs), 1 if whole else self.split)
        return out

    def outputs(self, inputs: Sequence[np.ndarray], lin: np.ndarray,
                whole: bool = False) -> np.ndarray | None:
        """The outputs at ``lin``, or None when the operator raised on these inputs (counted
        in ``failed``: a changed input it refuses tells nothing about its lineage)."""
        try:
            return self._run(inputs, whole).reshape(-1)[lin]
        except Exception as e:  # noqa: BLE001 - the user's operator may reject NaN etc.
            self.failed += 1
            if self.failure is None:
                self.failure = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return None

    def changed(self, inputs: Sequence[np.ndarray], lin: np.ndarray,
                whole: bool = False) -> np.ndarray:
        """Bool per cell of ``lin``: its output differs from the unchanged run's (all False
        when the run raised)."""
        if whole not in self._base:
            self._base[whole] = self.base if not whole else self._run(self.inputs, True)
        got = self.outputs(inputs, lin, whole)
        if got is None:
            return np.zeros(len(lin), dtype=bool)
        return ~_same(self._base[whole].reshape(-1)[lin], got, self.rtol)


#: changed input cells: (input index per cell, linear index per cell), in input then
#: cell order
Cells = tuple[np.ndarray, np.ndarray]


def _apply(inputs: Sequence[np.ndarray], variant: Sequence[np.ndarray],
           cells: Cells) -> list[np.ndarray]:
    """``inputs`` with only ``cells`` taken from ``variant``."""
    which, lin = cells
    out = [a.copy() for a in inputs]
    for i in range(len(out)):
        mine = lin[which == i]
        if len(mine):
            out[i].reshape(-1)[mine] = variant[i].reshape(-1)[mine]
    return out


def _shrink(runner: _Runner, variant: Sequence[np.ndarray], lin: int) -> Cells:
    """A small set of changed cells of ``variant`` that still changes output ``lin``:
    halve while one half alone does it, then drop single cells (at most 32 tries)."""
    want = np.array([lin])
    diff = [np.flatnonzero(~_same(a.reshape(-1), v.reshape(-1), 0.0))
            for a, v in zip(runner.inputs, variant)]
    which = np.repeat(np.arange(len(diff), dtype=np.int64), [len(d) for d in diff])
    cells = np.concatenate(diff).astype(np.int64) if diff else np.empty(0, np.int64)
    while len(cells) > 1:
        half = len(cells) // 2
        for part in (slice(None, half), slice(half, None)):
            if runner.changed(_apply(runner.inputs, variant, (which[part], cells[part])),
                              want)[0]:
                which, cells = which[part], cells[part]
                break
        else:
            break
    alive = np.ones(len(cells), dtype=bool)
    for k in range(min(len(cells), 32)):
        if alive.sum() == 1:
            break
        alive[k] = False
        if not runner.changed(_apply(runner.inputs, variant, (which[alive], cells[alive])),
                              want)[0]:
            alive[k] = True
    return which[alive], cells[alive]


def _example(runner: _Runner, variant: Sequence[np.ndarray], cell: tuple[int, ...],
             lin: int) -> dict[str, Any]:
    cells = _shrink(runner, variant, lin)
    changed = _apply(runner.inputs, variant, cells)
    got = runner.outputs(changed, np.array([lin]))
    after = None if got is None else got[0]
    before = runner.base.reshape(-1)[lin]
    n = len(cells[1])
    shown = []
    for i, c in zip(cells[0][:8].tolist(), cells[1][:8].tolist()):
        coord = [int(v) for v in np.unravel_index(c, runner.inputs[i].shape)]
        shown.append({"input": i, "cell": coord,
                      "old": _plain(runner.inputs[i].reshape(-1)[c]),
                      "new": _plain(variant[i].reshape(-1)[c])})
    ex = {"cells": shown, "n_cells": n, "before": _plain(before), "after": _plain(after)}
    return dict(ex, summary=_example_summary(ex))


def _example_summary(ex: dict[str, Any]) -> str:
    """One phrase for an unsound example: the changed cells (three at most) and the output
    before and after."""
    n, shown = ex["n_cells"], ex["cells"]
    where = "; ".join(f"input {s['input']} {s['cell']} {s['old']!r} -> {s['new']!r}"
                      for s in shown[:3])
    more = f" and {n - 3} more" if n > 3 else ""
    return (f"{n} input cell(s) outside its lineage ({where}{more}) changes the "
            f"output {ex['before']!r} -> {ex['after']!r}")


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return round(v, 6)
    return v if isinstance(v, (int, bool, str)) or v is None else str(v)


def _check_mode(op: Any, runner: _Runner, lineage: _Lineage,
                cells: list[tuple[tuple[int, ...], str]], seed: int, trials: int,
                max_influence_runs: int, clock: _Clock | None = None) -> ModeCheck:
    rng = np.random.default_rng(seed)
    res = ModeCheck(lineage.mode)
    before, failed_before = runner.runs, runner.failed
    inputs = runner.inputs
    shape = op.out_shape
    n_in = len(inputs)
    lins = [int(np.ravel_multi_index(c, shape)) if shape else 0 for c, _ in cells]
    masks = [mask_from_linear(np.array([lin]), shape) for lin in lins]
    lineages = [[lineage.backward(m, i) for i in range(n_in)] for m in masks]
    clock = clock or _Clock(None, None)
    for n, ((cell, why), lin, keep) in enumerate(zip(cells, lins, lineages)):
        if clock.over():
            res.cut.append(f"soundness: {n} of {len(cells)} cells checked")
            lins, lineages = lins[:n], lineages[:n]
            break
        clock.say(f"{lineage.mode.value}: {n} of {len(cells)} cells checked for soundness")
        chk = CellCheck(cell, why, int(sum(int(k.sum()) for k in keep)))
        variants = [[perturb(a, k, rng) for a, k in zip(inputs, keep)] for _ in range(trials)]
        structured = [_structured(a, k) + [_drawn(a, k, rng)] for a, k in zip(inputs, keep)]
        n_struct = max((len(s) for s in structured), default=0)
        for j in range(n_struct):
            variants.append([s[j % len(s)] if s else a
                             for a, s in zip(inputs, structured)])
        for v in variants:
            if runner.changed(v, np.array([lin]))[0]:
                chk.unsound = True
                chk.example = _example(runner, v, cell, lin)
                break
        res.cells.append(chk)
    _agreement(op, lineage, res, lins, lineages, rng)
    _influence(runner, res, lins, lineages, rng, max_influence_runs, clock)
    res.runs = runner.runs - before
    res.failed_runs = runner.failed - failed_before
    res.failure = runner.failure if res.failed_runs else None
    return res


def _agreement(op: Any, lineage: _Lineage, res: ModeCheck, lins: list[int],
               lineages: list[list[np.ndarray]], rng: np.random.Generator,
               per_input: int = 96) -> None:
    """``c`` in backward(``o``) exactly when ``o`` in forward(``c``), for the sampled ``o``
    and input cells from their lineages and from anywhere."""
    out_lin = np.array(lins, dtype=np.int64)
    for i, shape in enumerate(op.in_shapes):
        size = int(np.prod(shape))
        union = np.zeros(size, dtype=bool)
        for keep in lineages:
            union |= keep[i].reshape(-1)
        cand = np.flatnonzero(union)
        if len(cand) > per_input:
            cand = rng.choice(cand, per_input, replace=False)
        extra = rng.choice(size, min(size, per_input // 3), replace=False)
        for c in np.unique(np.concatenate([cand, extra])).astype(np.int64):
            fwd = lineage.forward(mask_from_linear(np.array([c]), shape), i).reshape(-1)
            for k, o in enumerate(out_lin):
                b = bool(lineages[k][i].reshape(-1)[c])
                f = bool(fwd[o])
                res.pairs_compared += 1
                if b != f:
                    res.disagreements += 1
                    if res.disagreement_example is None:
                        oc = [int(v) for v in np.unravel_index(int(o), op.out_shape)]
                        ic = [int(v) for v in np.unravel_index(int(c), shape)]
                        ex = {"output": oc, "input": i, "input_cell": ic, "backward": b,
                              "forward": f}
                        res.disagreement_example = dict(ex, summary=_disagreement_summary(ex))


def _disagreement_summary(ex: dict[str, Any]) -> str:
    said = ("in the backward lineage of output {o} but its forward lineage misses {o}"
            if ex["backward"] else
            "not in the backward lineage of output {o} but its forward lineage holds {o}")
    return f"input {ex['input']} cell {ex['input_cell']} is " + said.format(o=ex["output"])


def _influence(runner: _Runner, res: ModeCheck, lins: list[int],
               lineages: list[list[np.ndarray]], rng: np.random.Generator,
               max_runs: int, clock: _Clock | None = None) -> None:
    """Per sampled cell, how many of its declared input cells change it alone: each cell
    of the union of the declared lineages is changed alone (a few values), one run each,
    and every sampled output is compared at once. Beyond ``max_runs`` runs the union is
    sampled and the counts scaled (the cells report an estimate)."""
    inputs = runner.inputs
    out_lin = np.array(lins, dtype=np.int64)
    todo: list[tuple[int, int]] = []
    for i in range(len(inputs)):
        union = np.zeros(inputs[i].size, dtype=bool)
        for keep in lineages:
            union |= keep[i].reshape(-1)
        todo += [(i, int(c)) for c in np.flatnonzero(union)]
    n_vals = 4
    scale = 1.0
    if len(todo) * n_vals > max_runs:
        keep_n = max(1, max_runs // n_vals)
        idx = np.sort(rng.choice(len(todo), keep_n, replace=False))
        scale = len(todo) / keep_n
        todo = [todo[k] for k in idx]
    hits = np.zeros(len(lins), dtype=np.int64)
    vocab = [_vocabulary(a) for a in inputs]
    clock = clock or _Clock(None, None)
    for n, (i, c) in enumerate(todo):
        if clock.over():  # a partial count would understate it: tightness not measured
            res.cut.append(f"tightness: {n} of {len(todo)} input cells tried, not measured")
            return
        clock.say(f"{res.mode.value}: {n} of {len(todo)} input cells tried for tightness")
        declared_by = np.array([bool(lg[i].reshape(-1)[c]) for lg in lineages])
        moved = np.zeros(len(lins), dtype=bool)
        for v in _single_values(inputs[i], c, rng, vocab[i]):
            changed = [a.copy() if k == i else a for k, a in enumerate(inputs)]
            changed[i].reshape(-1)[c] = v
            moved |= runner.changed(changed, out_lin, whole=True)
            if moved[declared_by].all():
                break
        hits += moved & declared_by
    res.influence_tried = 1.0 / scale
    for chk, h in zip(res.cells, hits):
        chk.influential = int(round(h * scale))


def _parse_samples(samples: int) -> int:
    if samples < 1:
        raise CheckError(f"samples must be a positive integer. Got {samples!r}.")
    return samples


def _parse_budget(budget_s: float | None) -> float | None:
    if budget_s is not None and not budget_s > 0:
        raise CheckError(f"the time budget must be a positive number of seconds. "
                         f"Got {budget_s!r}.")
    return budget_s


def _wanted_modes(op: Any, modes: Sequence[Mode | str] | None) -> list[Mode]:
    """The modes to check: ``modes`` (each one the operator supports), or every mode of
    :data:`CHECKED_MODES` it supports."""
    supported = op.supported_modes()
    if modes is None:
        return [m for m in CHECKED_MODES if m in supported]
    want = []
    for m in modes:
        try:
            mm = Mode(m) if isinstance(m, str) else m
        except ValueError:
            raise CheckError(f"unknown lineage mode {m!r} (expected one of "
                             f"{', '.join(x.value for x in CHECKED_MODES)})") from None
        if mm not in supported or mm not in CHECKED_MODES:
            raise CheckError(f"operator {op.name!r} does not produce {mm.value} lineage "
                             f"(it supports {', '.join(sorted(x.value for x in supported))})")
        want.append(mm)
    return want


def _given_cells(cells: Any, shape: Sequence[int]) -> list[tuple[tuple[int, ...], str]] | None:
    """Cells to check instead of sampled ones (sorted, unique), or None."""
    if cells is None:
        return None
    lin = np.unique(as_linear(cells, shape, "cells to check"))
    if len(lin) == 0:
        raise CheckError("no cells to check were given")
    return [(tuple(int(v) for v in np.unravel_index(int(x), shape)), "given") for x in lin]


def check_operator(op: Any, inputs: Sequence[np.ndarray], samples: int = 24, seed: int = 0,
                   modes: Sequence[Mode | str] | None = None, split: Any = 2,
                   trials: int = 2, rtol: float = 0.0,
                   max_influence_runs: int = 2000, cells: Any = None,
                   budget_s: float | None = None,
                   progress: Callable[[str], None] | None = None) -> LineageCheck:
    """Check a *bound* operator's declared lineage on ``inputs`` (see the module docstring).

    Parameters
    ----------
    op : an operator bound to the inputs' shapes and dtypes
        (:func:`subzero.testing.bind`).
    inputs : one numpy array per input.
    samples : output cells checked per mode.
    seed : seeds the sampling and the perturbations (a check is reproducible).
    modes : the modes to check (default: every one the operator supports but BLACKBOX).
    split : the chunk grid the operator runs on (as ``--chunks``; 2 = two chunks per axis),
        so that chunk borders and stencil halos are exercised.
    trials : random perturbations per sampled cell (structured ones are always added).
    rtol : compare floating-point outputs with this relative tolerance (0: bit for bit).
    max_influence_runs : a budget for the tightness measurement.
    cells : check these output cells (coordinates, in any form
        :func:`subzero.cells.as_linear` takes) instead of sampling.
    budget_s : a time budget for the whole check (None: none). Once it is spent, each
        phase stops where it is, and each mode says what was cut (:attr:`ModeCheck.cut`).
    progress : hears a line now and then on how far the check is.
    """
    _parse_samples(samples)
    inputs = [np.asarray(a) for a in inputs]
    if len(inputs) != len(op.in_shapes) or any(
            tuple(a.shape) != tuple(s) for a, s in zip(inputs, op.in_shapes)):
        raise CheckError(
            f"operator {op.name!r} is bound to inputs {[tuple(s) for s in op.in_shapes]}; got "
            f"{[tuple(a.shape) for a in inputs]}")
    want = _wanted_modes(op, modes)
    given = _given_cells(cells, op.out_shape)
    clock = _Clock(_parse_budget(budget_s), progress)
    runner = _Runner(op, inputs, split, rtol)
    report = LineageCheck(op.name, [tuple(s) for s in op.in_shapes], [], seed)
    rng = np.random.default_rng(seed)
    for k, mode in enumerate(want):
        full = pays = None
        if mode in (Mode.FULL, Mode.PAY, Mode.COMP):
            try:
                _, full, pays = run_chunked(op, inputs, split, (mode,))
            except CheckError:
                raise
            except Exception as e:  # noqa: BLE001 - the user's operator, named in one line
                raise CheckError(f"operator {op.name!r} fails recording its {mode.value} "
                                 f"lineage: {_problem(e)}") from None
        lineage = _Lineage(op, mode, full, pays)
        covered = lineage.covered if mode in (Mode.PAY, Mode.COMP) else None
        if given:
            cells = given
        else:
            unusual = _unusual_sizes(lineage, rng, clock, covered)
            cells = sample_cells(op, runner.base, samples, rng, split, covered, inputs,
                                 unusual=unusual)
        report.modes.append(_check_mode(op, runner, lineage, cells, seed + 101 * (k + 1),
                                        trials, max_influence_runs, clock))
    return report


# ---------------------------------------------------------------------------------------
# an operator of a stored run, on crops of its arrays
# ---------------------------------------------------------------------------------------

#: ``read(i, box)``: the cells of ``box`` of a run's input ``i`` (``None``: its output)
Read = Callable[[int | None, Box], np.ndarray]


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(int(v)) for v in shape) or "scalar"


def _croppable(op: Any) -> str | None:
    """None when a run's operator can be checked on crops of its arrays, else why not
    (a phrase after the operator's name)."""
    kind = op.parallelism.kind
    if not op.out_shape:
        return "has a 0-d output"
    if kind == "global":
        return "is global (one task sees its whole inputs)"
    if kind == "blockwise":
        return "is blockwise (its input blocks are not crops around its output's)"
    if any(tuple(s) != tuple(op.out_shape) for s in op.in_shapes):
        return "has an input not shaped like its output"
    return None


def _halo(op: Any) -> tuple[int, ...]:
    """The operator's halo per axis (0 unless it is a stencil)."""
    nd = len(op.out_shape)
    if op.parallelism.kind != "stencil":
        return (0,) * nd
    d = tuple(int(v) for v in op.parallelism.depth)
    return d * nd if len(d) == 1 else d


def _maps(op: Any) -> bool:
    """Whether the operator has mapping functions to read (MAP, or COMP's default)."""
    return bool({Mode.MAP, Mode.COMP} & set(op.supported_modes()))


def _declared_cells(op: Any, lin: int, i: int) -> np.ndarray:
    """Linear indices (sorted, unique) of input ``i`` that output cell ``lin`` declares,
    through the mapping functions (``map_b_lin`` when the operator has it)."""
    chk = _Checked(op)
    got = chk.map_b_lin(np.array([lin], dtype=np.uint64), i)
    if got is not None:
        return np.unique(np.asarray(got).astype(np.int64))
    return np.flatnonzero(chk.map_b(mask_from_linear(np.array([lin]), op.out_shape), i))


def _crop_around(op: Any, cell: tuple[int, ...], declared: list[np.ndarray] | None) -> Box:
    """The crop checking ``cell`` needs: the cell's declared lineage (``declared``, per
    input) and its halo, grown by a margin of the halo (at least :data:`CROP_MARGIN`) so
    that the cells just outside both are there to be changed; clipped to the arrays."""
    shape = tuple(op.out_shape)
    halo = _halo(op)
    lo = [c - d for c, d in zip(cell, halo)]
    hi = [c + d + 1 for c, d in zip(cell, halo)]
    for lins in declared or []:
        if len(lins):
            coords = to_coords(lins, shape)
            lo = [min(a, int(b)) for a, b in zip(lo, coords.min(axis=0))]
            hi = [max(a, int(b) + 1) for a, b in zip(hi, coords.max(axis=0))]
    return Box(lo, hi).dilate([max(d, CROP_MARGIN) for d in halo], shape)


def _shift_cell(cell: Sequence[int], lo: Sequence[int]) -> list[int]:
    return [int(c) + int(o) for c, o in zip(cell, lo)]


def _merge_crop(into: dict[Mode, ModeCheck], rep: LineageCheck, lo: Sequence[int],
                why: str | None) -> None:
    """Add a crop's check to the run's, in the run's coordinates (cells, examples), each
    cell sampled for ``why`` (None: as the check says)."""
    for m in rep.modes:
        res = into[m.mode]
        for c in m.cells:
            c.cell = tuple(_shift_cell(c.cell, lo))
            c.why = why if why is not None else c.why
            if c.example is not None:
                for shown in c.example["cells"]:
                    shown["cell"] = _shift_cell(shown["cell"], lo)
                c.example["summary"] = _example_summary(c.example)
            res.cells.append(c)
        res.disagreements += m.disagreements
        res.pairs_compared += m.pairs_compared
        if res.disagreement_example is None and m.disagreement_example is not None:
            ex = dict(m.disagreement_example)
            ex["output"] = _shift_cell(ex["output"], lo)
            ex["input_cell"] = _shift_cell(ex["input_cell"], lo)
            ex["summary"] = _disagreement_summary(ex)
            res.disagreement_example = ex
        res.runs += m.runs
        res.failed_runs += m.failed_runs
        res.failure = res.failure or m.failure
        res.influence_tried = min(res.influence_tried, m.influence_tried)
        res.cut += [f"crop at {[int(v) for v in lo]}: {c}" for c in m.cut]


def _stored_samples(op: Any, read: Read, samples: int, rng: np.random.Generator,
                    chunks: Sequence[int] | None, scan_max_cells: int, want: Sequence[Mode],
                    clock: _Clock, notes: list[str]) -> list[tuple[tuple[int, ...], str]]:
    """Output cells of a run to check, sampled as :func:`sample_cells` does from the
    stored arrays: its chunk grid's borders, rare values of the output and of the inputs
    (read whole up to ``scan_max_cells`` cells each, else in a random set of chunks), and
    unusual declared lineage sizes (from the mapping functions)."""
    shape = tuple(op.out_shape)
    size = int(np.prod(shape))
    cshape = tuple(int(c) for c in chunks) if chunks else shape
    if size <= scan_max_cells:
        boxes = [Box.full(shape)]
    else:
        grid = chunk_grid(shape, cshape)
        k = max(1, scan_max_cells // int(np.prod(cshape)))
        boxes = [grid[j][1] for j in np.sort(rng.choice(len(grid), min(k, len(grid)),
                                                          replace=False))]
        notes.append(f"rare values searched in {len(boxes)} of {len(grid)} chunks of the "
                     f"run's arrays (at most {scan_max_cells:,} cells each)")
    rare: list[np.ndarray] = []
    rare_in: dict[int, list[np.ndarray]] = {}
    for box in boxes:
        clock.say(f"reading the run's arrays for rare values ({_shape_text(box.shape)})")
        lo = np.asarray(box.lo, dtype=np.int64)

        def glob(local: np.ndarray, box: Box = box, lo: np.ndarray = lo) -> np.ndarray:
            return as_linear(to_coords(local, box.shape) + lo, shape).astype(np.int64)

        rare.append(glob(_rare_cells(np.asarray(read(None, box)))))
        for i in range(len(op.in_shapes)):  # one input in memory at a time
            for found in _rare_input_cells(box.shape, [np.asarray(read(i, box))]):
                rare_in.setdefault(i, []).append(glob(found))
    unusual = None
    if _maps(op) and (Mode.MAP in want or Mode.COMP in want):
        unusual = _unusual_sizes(_Lineage(op, Mode.MAP, None, None), rng, clock)
    return sample_cells(op, None, samples, rng, chunks=cshape, unusual=unusual,
                        rare={"rare": np.concatenate(rare),
                              "rare input": [np.concatenate(v) for v in rare_in.values()]})


def _check_whole(op: Any, read: Read, what: str, note: str, whole_max_cells: int,
                 **kwargs: Any) -> LineageCheck:
    """Check a run's operator on its whole arrays when the largest has at most
    ``whole_max_cells`` cells (``note``, its ``{where}`` filled in, says so); else say in
    one line, beginning with ``what``, what was not checked."""
    shapes = [tuple(s) for s in op.in_shapes]
    biggest = max([int(np.prod(s)) for s in [*shapes, tuple(op.out_shape)]])
    if biggest > whole_max_cells:
        said = (f"{what}: its largest array has {biggest:,} cells, more than the "
                f"{whole_max_cells:,} checked whole (check it with --input on crops of your "
                "own)")
        return LineageCheck(op.name, shapes, [], int(kwargs.get("seed", 0)), not_checked=said)
    inputs = [np.asarray(read(i, Box.full(s))) for i, s in enumerate(shapes)]
    rep = check_operator(op, inputs, **kwargs)
    where = f"the run's whole arrays ({', '.join(_shape_text(s) for s in shapes)})"
    rep.notes.append(note.format(where=where))
    return rep


def check_on_crops(op: Any, read: Read, samples: int = 24, seed: int = 0,
                   modes: Sequence[Mode | str] | None = None, split: Any = 2,
                   trials: int = 2, rtol: float = 0.0, max_influence_runs: int = 2000,
                   cells: Any = None, budget_s: float | None = None,
                   progress: Callable[[str], None] | None = None,
                   chunks: Sequence[int] | None = None,
                   whole_max_cells: int | None = None,
                   scan_max_cells: int | None = None) -> LineageCheck:
    """Check an operator of a stored run on crops of the run's own arrays around sampled
    cells, instead of on the whole arrays.

    Output cells are sampled from the stored arrays (:func:`_stored_samples`), or given.
    For each, the crop around it (:func:`_crop_around`: its declared lineage and halo,
    plus a margin) is read, the operator is bound to the crop's shapes and checked on it
    at the cell (:func:`check_operator`), and the crops' checks are merged in the run's
    coordinates. A cell whose crop is the whole array, or whose declared lineage on the
    crop is not its lineage on the run's arrays moved with the crop (an operator that
    depends on where a cell is), is checked on the whole arrays; so is every cell of an
    operator that cannot be cropped (global, blockwise, or with inputs of other shapes:
    :func:`_croppable`).

    Parameters
    ----------
    op : the run's operator, bound to the run's shapes and dtypes.
    read : ``read(i, box)`` returns the cells of ``box`` of the run's input ``i`` (``None``:
        of the operator's output).
    samples, seed, modes, split, trials, rtol, max_influence_runs, cells, budget_s, progress
        as for :func:`check_operator`; ``cells`` are of the run's output, and the budget
        is shared by every crop.
    chunks : the run's chunk shape of the output (whose borders are sampled).
    whole_max_cells : the most cells of the largest array for a check on whole arrays
        (default :data:`WHOLE_MAX_CELLS`); beyond it, what was not checked is said.
    scan_max_cells : the most cells of each array read to find rare values (default
        :data:`SCAN_MAX_CELLS`); beyond it, a random set of chunks is read.

    Returns
    -------
    LineageCheck
        In the run's coordinates; its :attr:`LineageCheck.notes` say how the check was
        made (the crops' sizes, what was checked on whole arrays and why), and
        :attr:`LineageCheck.not_checked` why nothing was.
    """
    _parse_samples(samples)
    whole_max_cells = WHOLE_MAX_CELLS if whole_max_cells is None else int(whole_max_cells)
    scan_max_cells = SCAN_MAX_CELLS if scan_max_cells is None else int(scan_max_cells)
    want = _wanted_modes(op, modes)
    shape = tuple(op.out_shape)
    given = _given_cells(cells, shape)
    clock = _Clock(_parse_budget(budget_s), progress)
    common = {"samples": samples, "seed": seed, "modes": want, "split": split,
              "trials": trials, "rtol": rtol, "max_influence_runs": max_influence_runs}
    if not want:  # BLACKBOX only: nothing to read, nothing to run
        return LineageCheck(op.name, [tuple(s) for s in op.in_shapes], [], seed)
    why_not = _croppable(op)
    if why_not is not None:
        what = f"operator {op.name!r} {why_not}"
        return _check_whole(op, read, what, what + ": checked on {where}", whole_max_cells,
                            cells=cells, budget_s=budget_s, progress=progress, **common)
    notes: list[str] = []
    rng = np.random.default_rng(seed)
    picked = given or _stored_samples(op, read, samples, rng, chunks, scan_max_cells, want,
                                      clock, notes)
    merged = {m: ModeCheck(m) for m in want}
    n_in = len(op.in_shapes)
    crops: list[tuple[int, ...]] = []
    whole: list[tuple[tuple[int, ...], str]] = []
    reasons: dict[str, int] = {}  # why cells fall back to the whole arrays, and how many
    differ = 0
    cut = None
    for k, (cell, why) in enumerate(picked):
        left = None if clock.deadline is None else clock.deadline - time.monotonic()
        if left is not None and left <= 0:
            cut = f"crops: {k} of {len(picked)} cells checked"
            break
        clock.say(f"{k} of {len(picked)} crops checked")
        lin = int(np.ravel_multi_index(cell, shape))
        declared = [_declared_cells(op, lin, i) for i in range(n_in)] if _maps(op) else None
        box = _crop_around(op, cell, declared)
        if box.shape == shape or box.size > whole_max_cells:
            whole.append((cell, why))
            said = ("need a crop as large as the whole array" if box.shape == shape else
                    f"need a crop of more than {whole_max_cells:,} cells")
            reasons[said] = reasons.get(said, 0) + 1
            continue
        try:
            cop = op.bind(op.name, [box.shape] * n_in, op.in_dtypes)
        except SubZeroError:  # the operator refuses arrays this small: the whole ones
            whole.append((cell, why))
            said = "have a crop the operator refuses"
            reasons[said] = reasons.get(said, 0) + 1
            continue
        local = tuple(int(c - lo) for c, lo in zip(cell, box.lo))
        if declared is not None:
            here = int(np.ravel_multi_index(local, box.shape))
            for i in range(n_in):
                mine = _declared_cells(cop, here, i)
                back = as_linear(to_coords(mine, box.shape) + np.asarray(box.lo), shape)
                if not np.array_equal(np.sort(back.astype(np.int64)), declared[i]):
                    break
            else:
                mine = None
            if mine is not None:  # where the cell is changes its lineage: no crop fits
                whole.append((cell, why))
                said = ("declare another lineage on a crop than on the whole arrays (the "
                        "operator depends on where a cell is)")
                reasons[said] = reasons.get(said, 0) + 1
                continue
        blocks = [np.asarray(read(i, box)) for i in range(n_in)]
        share = None if left is None else left / (len(picked) - k)
        rep = check_operator(cop, blocks, cells=[local], budget_s=share,
                             **dict(common, seed=seed + k))
        with np.errstate(all="ignore"):
            here_out = run_chunked(cop, blocks, split)[0][local]
        stored = np.asarray(read(None, Box(cell, tuple(c + 1 for c in cell)))).reshape(-1)
        if not _same(np.asarray([here_out]), stored[:1], rtol)[0]:
            differ += 1
        _merge_crop(merged, rep, box.lo, why)
        crops.append(box.shape)
    report = LineageCheck(op.name, [tuple(s) for s in op.in_shapes], list(merged.values()),
                          seed, notes)
    if crops:
        sizes = sorted(set(crops), key=lambda s: (int(np.prod(s)), s))
        said = (_shape_text(sizes[0]) if len(sizes) == 1 else
                f"{_shape_text(sizes[0])} to {_shape_text(sizes[-1])}")
        report.notes.insert(0, f"checked on crops of {said} cells around {len(crops)} "
                               f"{'given' if given else 'sampled'} cells of the run's "
                               f"{_shape_text(shape)} arrays")
    if differ:
        report.notes.append(f"{differ} crop(s) computed another value at their cell than "
                            "the run stored (the operator reads beyond its halo, or its "
                            "code changed since the run)")
    if whole and cut is None:
        left = None if clock.deadline is None else clock.deadline - time.monotonic()
        if left is not None and left <= 0:
            cut = f"crops: {len(picked) - len(whole)} of {len(picked)} cells checked"
        else:
            because = "; ".join(f"{n} {r}" for r, n in reasons.items())
            rest = _check_whole(op, read, f"{len(whole)} cell(s) ({because})",
                                f"{len(whole)} cell(s) checked on {{where}}: {because}",
                                whole_max_cells, cells=[c for c, _ in whole], budget_s=left,
                                **common)
            report.notes += rest.notes
            if rest.not_checked is not None and not crops:
                report.not_checked = rest.not_checked
            elif rest.not_checked is not None:
                report.notes.append(f"not checked: {rest.not_checked}")
            whys = dict(whole)
            for m in rest.modes:
                for c in m.cells:
                    c.why = whys.get(tuple(c.cell), c.why)
            _merge_crop(merged, rest, (0,) * len(shape), None)
    if cut is not None:
        for m in report.modes:
            m.cut.append(cut)
    return report


__all__ = ["CHECKED_MODES", "CellCheck", "CheckError", "LineageCheck", "ModeCheck",
           "check_on_crops", "check_operator", "sample_cells"]
