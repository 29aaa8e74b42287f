"""The lineage checker: is an operator's declared lineage right? (issue 17, part 2)

:func:`check_operator` runs one operator on numpy inputs on the driver, chunk by chunk as
the executor slices blocks (:func:`subzero.testing.run_chunked`; no Spark, no store), and
for every lineage mode the operator supports (``MAP``, ``FULL``, ``PAY``, ``COMP``):

1. samples output cells: the array's corners and edges, cells on both sides of chunk
   borders, cells whose value is rare in the output (a flagged pixel, a star), cells that
   carry a payload, and random ones;
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

from subzero.cells import as_linear
from subzero.chunking import Chunking, task_grid
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
    why: str  # how it was sampled: corner, edge, border, rare, payload, random, given
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
    cell of any mode changed although only cells outside its lineage were changed."""

    operator: str
    in_shapes: list[tuple[int, ...]]
    modes: list[ModeCheck]
    seed: int

    @property
    def sound(self) -> bool:
        return all(m.sound for m in self.modes)

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
                "modes": [m.to_json() for m in self.modes]}

    def lines(self) -> list[str]:
        """A human-readable report, one line per mode plus the unsound examples."""
        shapes = ", ".join("x".join(map(str, s)) or "scalar" for s in self.in_shapes)
        out = [f"{self.operator} on {shapes} (seed {self.seed})"]
        if not self.modes:
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


def _border_cells(op: Any, split: Any, rng: np.random.Generator
                  ) -> list[tuple[tuple[int, ...], str]]:
    shape = op.out_shape
    cshape = Chunking(split=split).chunk_shape(shape)
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


def _rare_input_cells(op: Any, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """Linear indices of output cells where an input shaped like the output takes a rare
    value: an integer or boolean value rarer than its most common one (a flagged pixel of
    a mask, a label), or a float in either extreme tail (:data:`EXTREME_QUANTILE`).
    Operators that lie about lineage often do so only there (a cleaner that declares
    itself elementwise but replaces flagged pixels by their neighbours' median)."""
    shape = tuple(op.out_shape)
    found = [np.empty(0, dtype=np.int64)]
    for a in inputs:
        if tuple(a.shape) != shape or a.size == 0:
            continue
        if a.dtype.kind in "biu":
            found.append(_rare_cells(a))
        elif a.dtype.kind == "f":
            flat = a.reshape(-1)
            finite = np.isfinite(flat)
            if finite.sum() < 2:
                continue
            lo, hi = np.quantile(flat[finite], [EXTREME_QUANTILE, 1 - EXTREME_QUANTILE])
            found.append(np.flatnonzero(finite & ((flat <= lo) | (flat >= hi))))
    return np.unique(np.concatenate(found)).astype(np.int64)


def sample_cells(op: Any, out: np.ndarray, samples: int, rng: np.random.Generator,
                 split: Any = 2, covered: np.ndarray | None = None,
                 inputs: Sequence[np.ndarray] = ()) -> list[tuple[tuple[int, ...], str]]:
    """Up to ``samples`` distinct output cells: corners and edges, chunk borders, rare
    values of the output, rare values of the inputs (:func:`_rare_input_cells`), payload
    cells, random (in that order of priority, each kind a share)."""
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

    share = max(1, samples // 6)
    edges = _edge_cells(shape) if shape else [((), "corner")]
    take([edges[k] for k in rng.permutation(len(edges))], share)
    borders = _border_cells(op, split, rng) if shape else []
    take([borders[k] for k in rng.permutation(len(borders))], share)
    take(from_lin(_rare_cells(out), "rare", share), share)
    if shape:
        take(from_lin(_rare_input_cells(op, inputs), "rare input", share), share)
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
    where = "; ".join(f"input {s['input']} {s['cell']} {s['old']!r} -> {s['new']!r}"
                      for s in shown[:3])
    more = f" and {n - 3} more" if n > 3 else ""
    summary = (f"{n} input cell(s) outside its lineage ({where}{more}) changes the "
               f"output {_plain(before)!r} -> {_plain(after)!r}")
    return {"cells": shown, "n_cells": n, "before": _plain(before),
            "after": _plain(after), "summary": summary}


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
                        said = ("in the backward lineage of output {o} but its forward "
                                "lineage misses {o}" if b else
                                "not in the backward lineage of output {o} but its forward "
                                "lineage holds {o}")
                        res.disagreement_example = {
                            "output": oc, "input": i, "input_cell": ic, "backward": b,
                            "forward": f,
                            "summary": f"input {i} cell {ic} is " + said.format(o=oc)}


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
    if samples < 1:
        raise CheckError(f"samples must be a positive integer. Got {samples!r}.")
    inputs = [np.asarray(a) for a in inputs]
    if len(inputs) != len(op.in_shapes) or any(
            tuple(a.shape) != tuple(s) for a, s in zip(inputs, op.in_shapes)):
        raise CheckError(
            f"operator {op.name!r} is bound to inputs {[tuple(s) for s in op.in_shapes]}; got "
            f"{[tuple(a.shape) for a in inputs]}")
    supported = op.supported_modes()
    if modes is None:
        want = [m for m in CHECKED_MODES if m in supported]
    else:
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
    given = None
    if cells is not None:
        lin = np.unique(as_linear(cells, op.out_shape, "cells to check"))
        if len(lin) == 0:
            raise CheckError("no cells to check were given")
        given = [(tuple(int(v) for v in np.unravel_index(int(x), op.out_shape)), "given")
                 for x in lin]
    if budget_s is not None and not budget_s > 0:
        raise CheckError(f"the time budget must be a positive number of seconds. "
                         f"Got {budget_s!r}.")
    clock = _Clock(budget_s, progress)
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
        cells = given or sample_cells(op, runner.base, samples, rng, split, covered, inputs)
        report.modes.append(_check_mode(op, runner, lineage, cells, seed + 101 * (k + 1),
                                        trials, max_influence_runs, clock))
    return report


__all__ = ["CHECKED_MODES", "CellCheck", "CheckError", "LineageCheck", "ModeCheck",
           "check_operator", "sample_cells"]
