"""The strategy ILP (paper VII), solved with PuLP and its bundled CBC.

For operator ``i`` and candidate strategy ``j``, ``x_ij`` says whether ``i`` stores ``j``.
The paper's objective

    min  sum_i p_i * min_{j | x_ij = 1} q_ij  +  eps * sum_ij (disk_ij + beta * run_ij) x_ij

is linearized with *selector* variables over the strategy sets an operator can store:
binary ``s_ik`` picks set ``k`` of operator ``i`` (``sum_k s_ik = 1``) and ties the
paper's variables to it, ``x_ij = sum_{k ∋ j} s_ik``. A set's query cost per direction is
the min over its strategies and re-execution (always available at query time: the executor
switches), so the min term becomes ``sum_ik (sum_d p_id q_ikd) s_ik``, exactly. A set is
black box (or map), one stored strategy, or one backward- plus one forward-keyed strategy
(a second one keyed the same way could never be selected); PAY and COMP never together (an
operator runs in one of them). Capturing a mode costs the same however many strategies
store it, so a set's runtime overhead counts each mode's capture once.

Constraints: ``sum_ij disk_ij x_ij <= MaxDISK``; ``sum_ik run_ik s_ik <= MaxRUNTIME``; at
least one strategy per operator (every set has one; black box counts); pinned strategies
``x_ij = 1`` (a pinned ``map`` or ``blackbox`` is the operator's only strategy).

This is the same optimum as the textbook linearization with one continuous selector per
(operator, direction, strategy) and ``y <= x`` (:func:`solve_per_strategy`, kept to check
it), but its LP relaxation is a multiple-choice knapsack's, which CBC closes at the root:
30 operators with every candidate solve in tens of milliseconds instead of hundreds.

Before building the problem, :func:`prune` removes candidates that can never win: over a
budget on their own; never faster than re-execution in the directions the workload
traverses (which removes the paper's "wrong direction for the workload" whenever it truly
cannot help: a forward-keyed shard can still answer backward queries by a scan, and on a
tight budget that scan may beat re-execution); dominated by a sibling of the same mode and
key direction; or anything but ``map`` where map is supported (the paper's "mapping
functions over all other classes"). Apart from the last (the paper's rule), pruning never
changes the optimum. Dominated strategy sets (no less disk, runtime and expected query
cost than another) are dropped too.

>>> op = OpChoices("f", [Option("blackbox"), Option("full-one-bwd", "FULL", "backward",
...                disk=100.0, query={"backward": 0.01})], capture={"FULL": 0.1},
...                weight={"backward": 1.0}, reexec={"backward": 1.0})
>>> solve([op], max_disk=1000).plan
{'f': ['full-one-bwd']}
>>> solve([op], max_disk=10).plan
{'f': ['blackbox']}
"""

from __future__ import annotations

import math
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from subzero.errors import SubZeroError

EPSILON = 1e-6  # seconds of query cost worth spending the whole disk (or runtime) scale
BETA = 1.0
EXCLUSIVE = ("map", "blackbox")


class InfeasibleError(SubZeroError):
    """No plan meets the budgets with the pinned strategies."""

    def __init__(self, message: str, min_disk: float | None = None,
                 min_overhead: float | None = None) -> None:
        super().__init__(message)
        self.min_disk = min_disk
        self.min_overhead = min_overhead


@dataclass(frozen=True)
class Option:
    """One candidate strategy of one operator, with the cost model's figures.

    ``mode`` is the capture mode it feeds from (None for map and black box); ``direction``
    the direction it is keyed for (None when it stores nothing); ``query`` the expected
    query cost per direction (seconds, only for directions the workload traverses).
    """

    name: str
    mode: str | None = None
    direction: str | None = None
    disk: float = 0.0
    store_s: float = 0.0
    query: dict[str, float] = field(default_factory=dict)

    @property
    def stored(self) -> bool:
        return self.mode is not None


@dataclass
class OpChoices:
    """An operator's candidates, the shared capture cost per mode, the workload weight
    ``p_id`` and the re-execution cost per direction, and the pinned strategy names."""

    op: str
    options: list[Option]
    capture: dict[str, float] = field(default_factory=dict)
    weight: dict[str, float] = field(default_factory=dict)
    reexec: dict[str, float] = field(default_factory=dict)
    pinned: list[str] = field(default_factory=list)
    map_supported: bool = False

    def option(self, name: str) -> Option:
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(name)

    def overhead(self, o: Option) -> float:
        """Runtime overhead of ``o`` stored alone."""
        return o.store_s + (self.capture.get(o.mode, 0.0) if o.mode else 0.0)


@dataclass
class Solution:
    plan: dict[str, list[str]]
    status: str
    objective: float
    query_cost: float
    disk: float
    overhead_s: float
    solve_s: float
    variables: int
    pruned: dict[str, list[str]] = field(default_factory=dict)


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def _dominating(oc: OpChoices, o: Option) -> str | None:
    """Another candidate of the same mode and key direction that is no worse than ``o`` in
    disk, store time and every traversed direction's query cost, and better in one (so
    swapping it in never hurts any plan ``o`` is part of); ties go to the first listed."""
    if not o.stored:
        return None
    dirs = [d for d, p in oc.weight.items() if p > 0]
    for b in oc.options:
        if b is o or b.mode != o.mode or b.direction != o.direction:
            continue
        mine = (o.disk, o.store_s, *[o.query.get(d, math.inf) for d in dirs])
        theirs = (b.disk, b.store_s, *[b.query.get(d, math.inf) for d in dirs])
        if all(t <= m for t, m in zip(theirs, mine)) and (
                theirs != mine or oc.options.index(b) < oc.options.index(o)):
            return b.name
    return None


def prune(ops: Sequence[OpChoices], max_disk: float | None = None,
          max_overhead: float | None = None) -> tuple[list[OpChoices], dict[str, list[str]]]:
    """Drop candidates that can never be part of an optimal plan; pinned ones always stay.

    Returns the reduced problem and, per operator, ``"strategy: reason"`` strings.
    """
    out, why = [], {}
    for oc in ops:
        keep, gone = [], []
        for o in oc.options:
            if o.name in oc.pinned:
                keep.append(o)
                continue
            reason = None
            if oc.map_supported and o.name != "map":
                reason = "map is supported"
            elif _finite(max_disk) and o.disk > max_disk:
                reason = "over the disk budget alone"
            elif _finite(max_overhead) and oc.overhead(o) > max_overhead:
                reason = "over the runtime budget alone"
            elif o.stored and all(o.query.get(d, math.inf) >= oc.reexec.get(d, math.inf)
                                  for d, p in oc.weight.items() if p > 0):
                # covers the paper's "wrong direction for the workload": keyed for queries
                # nobody makes and no faster than re-execution for the ones they do (a
                # mismatched scan that beats re-execution can still win on a tight budget)
                reason = ("never faster than re-execution" if oc.weight.get(o.direction, 0) > 0
                          else f"keyed for {o.direction} queries, which the workload never "
                          "makes, and no faster than re-execution for the others")
            else:
                better = _dominating(oc, o)
                if better is not None:
                    reason = f"dominated by {better}"
            if reason is None:
                keep.append(o)
            else:
                gone.append(f"{o.name}: {reason}")
        if not any(o.name in EXCLUSIVE for o in keep) and not any(o.stored for o in keep):
            keep.append(Option("blackbox"))
        out.append(replace(oc, options=keep))
        if gone:
            why[oc.op] = gone
    return out, why


@contextmanager
def _quiet() -> Iterator[None]:
    """PuLP 3 warns that direct LpVariable construction and PULP_CBC_CMD (its bundled CBC,
    which is what we want) go away in PuLP 4; say it once in the docs, not per solve."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"pulp(\..*)?")
        yield


def _cbc() -> Any:
    import pulp  # PuLP only when solving: it is slow to import

    # the feasibility pump only slows these small knapsacks down; CBC 2.10.3's
    # preprocessing (the one PuLP bundles) can fix a selector wrongly and report a worse
    # plan as optimal (two operators, disk 4, runtime 1: 15.5 instead of 8.5; found by
    # test_solve_matches_brute_force_and_the_per_strategy_formulation)
    return pulp.PULP_CBC_CMD(msg=False, gapRel=0.0, options=["feas off", "preprocess off"])


@dataclass(frozen=True)
class StrategySet:
    """One set of strategies an operator may store, with its exact totals."""

    names: tuple[str, ...]
    disk: float
    overhead: float
    cost: float  # sum over directions of p_d * min(q of its strategies, re-execution)


def strategy_sets(oc: OpChoices) -> list[StrategySet]:
    """Every set the operator may store (respecting pins), minus dominated ones."""
    excl = [o for o in oc.options if o.name in EXCLUSIVE]
    base = ([o for o in excl if o.name == "map"] or excl or [Option("blackbox")])[0]
    stored = [o for o in oc.options if o.stored]
    bwd = [o for o in stored if o.direction == "backward"]
    fwd = [o for o in stored if o.direction == "forward"]
    raw: list[tuple[Option, ...]] = [(base,)]
    if not any(p in EXCLUSIVE for p in oc.pinned):
        raw += [(o,) for o in stored] + [(a, b) for a in bwd for b in fwd]
    out = []
    for members in raw:
        modes = {o.mode for o in members if o.mode}
        if {"PAY", "COMP"} <= modes:
            continue
        names = {o.name for o in members}
        if not set(oc.pinned) <= names | {base.name}:
            continue
        if members[0] is not base and base.name == "map":
            members = (base, *members)  # mapping functions cost nothing to keep alongside
        cost = 0.0
        for d, p in oc.weight.items():
            if p > 0:
                cost += p * min([oc.reexec.get(d, 0.0)]
                                + [o.query[d] for o in members if d in o.query])
        out.append(StrategySet(
            tuple(o.name for o in members if o.name != "blackbox" or len(members) == 1),
            sum(o.disk for o in members),
            sum(o.store_s for o in members) + sum(oc.capture.get(m, 0.0) for m in modes),
            cost))
    # a set no better than another in disk, runtime and query cost can always be swapped
    # for it (ties: keep the first)
    figs = [(st.disk, st.overhead, st.cost) for st in out]
    return [st for k, st in enumerate(out) if not any(
        all(b <= a for b, a in zip(figs[j], figs[k])) and (figs[j] != figs[k] or j < k)
        for j in range(len(out)) if j != k)]


def _scales(sets: Sequence[Sequence[StrategySet]], max_disk: float | None,
            max_overhead: float | None) -> tuple[float, float]:
    disk = max_disk if _finite(max_disk) and max_disk > 0 else max(
        1.0, sum(max(s.disk for s in ss) for ss in sets))
    run = max_overhead if _finite(max_overhead) and max_overhead > 0 else max(
        1e-3, sum(max(s.overhead for s in ss) for ss in sets))
    return disk, run


def _build(ops: Sequence[OpChoices], sets: Sequence[Sequence[StrategySet]],
           max_disk: float | None, max_overhead: float | None, epsilon: float, beta: float,
           objective: str = "query") -> tuple[Any, list[list[Any]]]:
    """The PuLP problem; ``objective="disk"``/``"overhead"`` minimizes that instead (to
    find the smallest feasible budget)."""
    import pulp  # PuLP only when solving: it is slow to import

    prob = pulp.LpProblem("subzero_strategies", pulp.LpMinimize)
    disk_scale, run_scale = _scales(sets, max_disk, max_overhead)
    sel: list[list[Any]] = []
    query, disk, run = [], [], []
    for a, (oc, ss) in enumerate(zip(ops, sets)):
        s_vars = [pulp.LpVariable(f"s_{a}_{k}", cat="Binary") for k in range(len(ss))]
        sel.append(s_vars)
        prob += pulp.lpSum(s_vars) == 1, f"pick_{a}"
        # the paper's x_ij, tied to the selectors
        for b, o in enumerate(oc.options):
            ks = [k for k, st in enumerate(ss) if o.name in st.names]
            x = pulp.LpVariable(f"x_{a}_{b}", lowBound=0, upBound=1)
            prob += x == pulp.lpSum(s_vars[k] for k in ks), f"x_{a}_{b}"
            if o.name in oc.pinned:
                prob += x == 1, f"pin_{a}_{b}"
        for k, st in enumerate(ss):
            # sum_k disk_k s_ik == sum_j disk_ij x_ij; written on the selectors so that
            # CBC sees a multiple-choice knapsack
            query.append(st.cost * s_vars[k])
            disk.append(st.disk * s_vars[k])
            run.append(st.overhead * s_vars[k])
    disk_e, run_e = pulp.lpSum(disk), pulp.lpSum(run)
    if objective == "disk":
        prob += disk_e + epsilon * run_e / run_scale
    elif objective == "overhead":
        prob += run_e + epsilon * disk_e / disk_scale
    else:
        prob += pulp.lpSum(query) + epsilon * (disk_e / disk_scale + beta * run_e / run_scale)
    if _finite(max_disk) and objective != "disk":
        prob += disk_e <= max_disk, "max_disk"
    if _finite(max_overhead) and objective != "overhead":
        prob += run_e <= max_overhead, "max_runtime"
    return prob, sel


def _status(prob: Any) -> str:
    import pulp  # PuLP only when solving: it is slow to import

    return pulp.LpStatus.get(prob.status, str(prob.status))


def _chosen(sets: Sequence[Sequence[StrategySet]], sel: Sequence[Sequence[Any]]
            ) -> list[StrategySet]:
    return [ss[max(range(len(ss)), key=lambda k: sv[k].value() or 0.0)]
            for ss, sv in zip(sets, sel)]


def _minimum(ops: Sequence[OpChoices], sets: Sequence[Sequence[StrategySet]], what: str,
             max_disk: float | None, max_overhead: float | None) -> float | None:
    """The least total disk (``what="disk"``) or overhead that any plan with the pins
    needs, keeping the other budget; None if even that is infeasible."""
    prob, sel = _build(ops, sets, max_disk, max_overhead, EPSILON, BETA, objective=what)
    prob.solve(_cbc())
    if _status(prob) != "Optimal":
        return None
    got = _chosen(sets, sel)
    return float(sum(s.disk if what == "disk" else s.overhead for s in got))


def _check_pins(ops: Sequence[OpChoices]) -> None:
    for oc in ops:
        names = {o.name for o in oc.options}
        for n in oc.pinned:
            if n not in names:
                raise SubZeroError(f"pinned strategy {n!r} is not a candidate of operator "
                                   f"{oc.op!r} (candidates: {', '.join(sorted(names))})")
        excl = [n for n in oc.pinned if n in EXCLUSIVE]
        if excl and len(oc.pinned) > 1:
            others = ", ".join(p for p in oc.pinned if p != excl[0])
            raise SubZeroError(f"operator {oc.op!r}: pinned {excl[0]} stores nothing and "
                               f"cannot be combined with {others}")
        keyed = {}
        for n in oc.pinned:
            o = next(o for o in oc.options if o.name == n)
            if o.direction in keyed:
                raise SubZeroError(f"operator {oc.op!r}: pinned {keyed[o.direction]} and {n} "
                                   f"are both {o.direction}-keyed; pin at most one each way")
            if o.direction:
                keyed[o.direction] = n
        modes = {next(o for o in oc.options if o.name == n).mode for n in oc.pinned}
        if {"PAY", "COMP"} <= modes:
            raise SubZeroError(f"operator {oc.op!r}: pinned PAY and COMP strategies cannot "
                               "be stored in the same run")


def solve(ops: Sequence[OpChoices], max_disk: float | None = None,
          max_overhead: float | None = None, epsilon: float = EPSILON, beta: float = BETA,
          do_prune: bool = True) -> Solution:
    """Pick strategies for every operator. Raises :class:`InfeasibleError` (with the
    smallest feasible budget) when the pinned strategies cannot fit."""
    with _quiet():
        return _solve(ops, max_disk, max_overhead, epsilon, beta, do_prune)


def _solve(ops: Sequence[OpChoices], max_disk: float | None, max_overhead: float | None,
           epsilon: float, beta: float, do_prune: bool) -> Solution:
    t0 = time.perf_counter()
    _check_pins(ops)
    pruned: dict[str, list[str]] = {}
    if do_prune:
        ops, pruned = prune(ops, max_disk, max_overhead)
    sets = [strategy_sets(oc) for oc in ops]
    prob, sel = _build(ops, sets, max_disk, max_overhead, epsilon, beta)
    prob.solve(_cbc())
    status = _status(prob)
    if status != "Optimal":
        solve_s = time.perf_counter() - t0
        raise InfeasibleError(
            f"no plan fits the budgets with the pinned strategies (solver: {status}, "
            f"{solve_s:.3f} s)", _minimum(ops, sets, "disk", None, max_overhead),
            _minimum(ops, sets, "overhead", max_disk, None))
    got = _chosen(sets, sel)
    import pulp  # PuLP only when solving: it is slow to import

    return Solution({oc.op: list(st.names) for oc, st in zip(ops, got)}, status,
                    float(pulp.value(prob.objective) or 0.0), sum(s.cost for s in got),
                    sum(s.disk for s in got), sum(s.overhead for s in got),
                    time.perf_counter() - t0, len(prob.variables()), pruned)


def solve_per_strategy(ops: Sequence[OpChoices], max_disk: float | None = None,
                       max_overhead: float | None = None, epsilon: float = EPSILON,
                       beta: float = BETA) -> Solution:
    """The textbook formulation, for checking :func:`solve`: binary ``x_ij``, binary
    capture ``z_im >= x_ij``, and per (operator, direction) continuous selectors
    ``y_idj <= x_ij`` summing to one (plus one for re-execution, always allowed)."""
    with _quiet():
        return _solve_per_strategy(ops, max_disk, max_overhead, epsilon, beta)


def _solve_per_strategy(ops: Sequence[OpChoices], max_disk: float | None,
                        max_overhead: float | None, epsilon: float, beta: float) -> Solution:
    import pulp  # PuLP only when solving: it is slow to import

    t0 = time.perf_counter()
    _check_pins(ops)
    prob = pulp.LpProblem("subzero_per_strategy", pulp.LpMinimize)
    x: dict[tuple[int, int], Any] = {}
    z: dict[tuple[int, str], Any] = {}
    terms, disk, run = [], [], []
    for a, oc in enumerate(ops):
        for b, o in enumerate(oc.options):
            x[a, b] = pulp.LpVariable(f"x_{a}_{b}", cat="Binary")
            disk.append(o.disk * x[a, b])
            run.append(o.store_s * x[a, b])
            if o.name in oc.pinned:
                prob += x[a, b] == 1
            if any(p in EXCLUSIVE for p in oc.pinned) and o.name not in oc.pinned:
                prob += x[a, b] == 0
        prob += pulp.lpSum(x[a, b] for b in range(len(oc.options))) >= 1
        for m in sorted({o.mode for o in oc.options if o.mode}):
            z[a, m] = pulp.LpVariable(f"z_{a}_{m}", cat="Binary")
            run.append(oc.capture.get(m, 0.0) * z[a, m])
            for b, o in enumerate(oc.options):
                if o.mode == m:
                    prob += x[a, b] <= z[a, m]
        if (a, "PAY") in z and (a, "COMP") in z:
            prob += z[a, "PAY"] + z[a, "COMP"] <= 1
        for d in ("backward", "forward"):
            keyed = [x[a, b] for b, o in enumerate(oc.options) if o.direction == d]
            if len(keyed) > 1:
                prob += pulp.lpSum(keyed) <= 1
        for d, p in sorted(oc.weight.items()):
            if p <= 0:
                continue
            ys = [pulp.LpVariable(f"y_{a}_{d[0]}_r", lowBound=0)]
            cs = [oc.reexec.get(d, 0.0)]
            for b, o in enumerate(oc.options):
                if d in o.query and o.name != "blackbox":
                    y = pulp.LpVariable(f"y_{a}_{d[0]}_{b}", lowBound=0)
                    prob += y <= x[a, b]
                    ys.append(y)
                    cs.append(o.query[d])
            prob += pulp.lpSum(ys) == 1
            terms.append(p * pulp.lpSum(c * y for c, y in zip(cs, ys)))
    sets = [[StrategySet((), max(o.disk for o in oc.options), max(oc.overhead(o) for o in
                                                                   oc.options), 0.0)]
            for oc in ops]
    disk_scale, run_scale = _scales(sets, max_disk, max_overhead)
    disk_e, run_e = pulp.lpSum(disk), pulp.lpSum(run)
    prob += pulp.lpSum(terms) + epsilon * (disk_e / disk_scale + beta * run_e / run_scale)
    if _finite(max_disk):
        prob += disk_e <= max_disk
    if _finite(max_overhead):
        prob += run_e <= max_overhead
    prob.solve(_cbc())
    status = _status(prob)
    if status != "Optimal":
        raise InfeasibleError(f"no plan fits the budgets (solver: {status})")
    plan, tot_disk, tot_run, qcost = {}, 0.0, 0.0, 0.0
    for a, oc in enumerate(ops):
        chosen = [o for b, o in enumerate(oc.options) if (x[a, b].value() or 0) > 0.5]
        names = [o.name for o in chosen if o.name != "blackbox"] or ["blackbox"]
        plan[oc.op] = names
        tot_disk += sum(o.disk for o in chosen)
        tot_run += sum(o.store_s for o in chosen) + sum(
            oc.capture.get(m, 0.0) for m in {o.mode for o in chosen if o.mode})
        for d, p in oc.weight.items():
            if p > 0:
                qcost += p * min([oc.reexec.get(d, 0.0)] + [
                    o.query[d] for o in chosen if d in o.query and o.name != "blackbox"])
    return Solution(plan, status, float(pulp.value(prob.objective) or 0.0), qcost, tot_disk,
                    tot_run, time.perf_counter() - t0, len(prob.variables()))
