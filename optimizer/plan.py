"""From statistics, a workload and budgets to a strategy plan for the next run.

:func:`optimize` is the whole pipeline: take the operators' statistics from a finished run
(sampling the ones never sampled, :mod:`optimizer.stats`), the workload (query log, a file
of sample queries, or "every operator both ways" when nothing is known), price every
candidate strategy (:mod:`optimizer.costs`), solve the ILP (:mod:`optimizer.ilp`) and
return a :class:`PlanResult` whose :meth:`PlanResult.to_json` is the plan file that
``subzero run --plan`` applies (``{"plan": {op: [strategies]}, "max_disk": bytes, ...}``).

Candidates per operator: black box; map where supported; every Full encoding in both
directions; every Pay/Comp encoding (backward-keyed). The ILP may pick one backward- and
one forward-keyed strategy together.

>>> from subzero.api import Home                                   # doctest: +SKIP
>>> res = optimize(workflows.build("example"), "/tmp/home", max_disk=10**8)  # doctest: +SKIP
>>> res.plan["smooth"]                                              # doctest: +SKIP
['map']
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from optimizer import ilp
from optimizer.calibration import Calibration, load_calibration
from optimizer.costs import DIRECTIONS, CostModel, direction_of, summarize
from optimizer.stats import OpProfile, load_profiles
from optimizer.workload import Workload, everything, from_file, from_query_log
from subzero.engine import datastore, layout
from subzero.engine.catalog import Catalog
from subzero.engine.homeconfig import home_exists, open_catalog
from subzero.engine.runs import load_run
from subzero.errors import CatalogError, SubZeroError
from subzero.modes import BLACKBOX, STRATEGIES, Mode, Strategy
from subzero.sizes import human_bytes

CANDIDATE_ORDER = ("blackbox", "map", "full-one-bwd", "full-many-bwd", "full-compact-bwd",
                   "full-one-fwd", "full-many-fwd", "full-compact-fwd", "pay-one-bwd",
                   "pay-many-bwd", "comp-one-bwd", "comp-many-bwd")
CANDIDATES = tuple(STRATEGIES[n] for n in CANDIDATE_ORDER)


def candidates(prof: OpProfile) -> list[Strategy]:
    """Every strategy the operator supports (each encoding backward, Full also forward)."""
    return [s for s in CANDIDATES if prof.supports(s)]


@dataclass
class PlanResult:
    """The optimizer's answer and what it predicts for it."""

    workflow: str
    params: dict[str, Any]
    run: str
    plan: dict[str, list[str]]
    max_disk: int | None
    max_runtime: float | None
    pins: dict[str, list[str]]
    workload: Workload
    rows: list[dict[str, Any]]
    totals: dict[str, float]
    solver: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    calibration: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow, "params": self.params, "run": self.run,
            "plan": self.plan, "max_disk": self.max_disk, "max_runtime": self.max_runtime,
            "pins": self.pins, "workload": self.workload.to_json(),
            "predicted": {r["operator"]: {k: v for k, v in r.items() if k != "operator"}
                          for r in self.rows},
            "totals": self.totals, "solver": self.solver, "notes": self.notes,
            "calibration": self.calibration,
        }


# ---------------------------------------------------------------------------------------
# building the ILP from profiles
# ---------------------------------------------------------------------------------------


def build_choices(profiles: Mapping[str, OpProfile], workload: Workload, model: CostModel,
                  pins: Mapping[str, Sequence[str]] | None = None
                  ) -> tuple[list[ilp.OpChoices], list[str]]:
    """One :class:`ilp.OpChoices` per operator; notes on candidates left out."""
    pins = pins or {}
    out, notes = [], []
    for name, prof in profiles.items():
        weight = {d: workload.p(name, d) for d in DIRECTIONS}
        sizes = {d: workload.sizes(name, d) for d in DIRECTIONS}
        reexec = {d: model.expected_query_cost(prof, BLACKBOX, d, sizes[d])
                  for d in DIRECTIONS if weight[d] > 0}
        options, missing = [], set()
        for s in candidates(prof):
            if s.stored and s.mode not in prof.modes and s.name not in prof.measured:
                missing.add(s.mode.value)
                if s.name not in pins.get(name, ()):
                    continue
            est = model.estimate(prof, s)
            query = {d: model.expected_query_cost(prof, s, d, sizes[d])
                     for d in DIRECTIONS if weight[d] > 0}
            options.append(ilp.Option(s.name, s.mode.value if s.stored else None,
                                      direction_of(s), est.disk, est.store_s, query))
        if missing:
            notes.append(f"{name}: no statistics for mode(s) {', '.join(sorted(missing))}; "
                         "those strategies were not considered")
        capture = {m.value: model.capture_s(prof, m) for m in (Mode.FULL, Mode.PAY, Mode.COMP)}
        out.append(ilp.OpChoices(name, options, capture, weight, reexec,
                                 list(pins.get(name, ())), Mode.MAP in prof.supported))
    return out, notes


def _check_pins(pins: Mapping[str, Sequence[str]], profiles: Mapping[str, OpProfile]
                ) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for op, names in pins.items():
        if op not in profiles:
            raise SubZeroError(f"--pin {op}=...: no operator {op!r} in the workflow "
                               f"(operators: {', '.join(profiles)})")
        for n in names:
            s = Strategy.parse(n)
            if not profiles[op].supports(s):
                sup = ", ".join(sorted(m.value for m in profiles[op].supported))
                raise SubZeroError(f"--pin {op}={s.name}: operator {op!r} does not support "
                                   f"mode {s.mode} (supports {sup})")
            out.setdefault(op, [])
            if s.name not in out[op]:
                out[op].append(s.name)
    return out


def fallback_plan(profiles: Mapping[str, OpProfile]) -> dict[str, list[str]]:
    """Store nothing: map where supported, else black box."""
    return {n: ["map"] if Mode.MAP in p.supported else ["blackbox"] for n, p in profiles.items()}


def plan_profiles(profiles: Mapping[str, OpProfile], workload: Workload,
                  model: CostModel | None = None, max_disk: float | None = None,
                  max_runtime: float | None = None,
                  pins: Mapping[str, Sequence[str]] | None = None, fallback: bool = False,
                  run: str = "", workflow: str = "", params: Mapping[str, Any] | None = None
                  ) -> PlanResult:
    """Solve for ``profiles`` (already measured). ``max_runtime`` is a factor of the
    workflow's runtime without lineage (1.5: at most 50% slower)."""
    model = model or CostModel()
    if max_runtime is not None and not max_runtime >= 1.0:
        raise SubZeroError(f"--max-runtime must be a factor >= 1 of the black-box runtime. "
                           f"Got {max_runtime}.")
    if max_disk is not None and max_disk < 0:
        raise SubZeroError(f"--max-disk must be non-negative. Got {max_disk}.")
    pins = _check_pins(pins or {}, profiles)
    base = sum(p.runtime_s for p in profiles.values())
    max_over = None if max_runtime is None else (max_runtime - 1.0) * base
    choices, notes = build_choices(profiles, workload, model, pins)
    try:
        sol = ilp.solve(choices, max_disk, max_over)
        plan, status = sol.plan, sol.status
        solver = {"status": status, "solve_s": sol.solve_s, "variables": sol.variables,
                  "pruned": sol.pruned}
    except ilp.InfeasibleError as e:
        hint = []
        if e.min_disk is not None:
            hint.append(f"the smallest feasible --max-disk is {human_bytes(e.min_disk)} "
                        f"({int(e.min_disk)} bytes)")
        if e.min_overhead is not None and base > 0:
            hint.append(f"the smallest feasible --max-runtime is "
                        f"{1.0 + e.min_overhead / base:.3f}")
        why = "; ".join(hint) or "drop a pin"
        budget = (f"--max-disk {human_bytes(max_disk)}" if max_disk is not None else "")
        if max_runtime is not None:
            budget += (" and " if budget else "") + f"--max-runtime {max_runtime:g}"
        msg = f"no plan fits {budget or 'the budgets'} with the pinned strategies: {why}"
        if not fallback:
            raise SubZeroError(msg + " (or pass --fallback to store nothing)") from None
        plan, status = fallback_plan(profiles), "fallback"
        notes.append(msg + "; fell back to black box (map where supported)")
        solver = {"status": status, "solve_s": None, "variables": None, "pruned": {}}
    rows = []
    tot = {"disk": 0.0, "overhead_s": 0.0, "runtime_s": 0.0, "query_cost": 0.0}
    for name, prof in profiles.items():
        sizes = {d: workload.sizes(name, d) for d in DIRECTIONS}
        chosen = [STRATEGIES[n] for n in plan[name]]  # the solver's names, all candidates
        fig = summarize(model, prof, chosen, sizes)
        p = {d: workload.p(name, d) for d in DIRECTIONS}
        q = sum(p[d] * fig[f"q_{d}"] for d in DIRECTIONS)
        sources = sorted({model.estimate(prof, s).source for s in chosen} - {"none"})
        rows.append({"operator": name, "strategies": plan[name], "disk": fig["disk"],
                     "overhead_s": fig["overhead_s"], "runtime_s": fig["runtime_s"],
                     "q_backward": fig["q_backward"], "q_forward": fig["q_forward"],
                     "p_backward": p["backward"], "p_forward": p["forward"],
                     "source": ",".join(sources) or "-"})
        tot["disk"] += fig["disk"]
        tot["overhead_s"] += fig["overhead_s"]
        tot["runtime_s"] += fig["runtime_s"]
        tot["query_cost"] += q
    tot["runtime_factor"] = tot["runtime_s"] / base if base > 0 else 1.0
    return PlanResult(workflow, dict(params or {}), run, plan,
                      None if max_disk is None else int(max_disk), max_runtime, pins, workload,
                      rows, tot, solver, notes, str(model.calibration.meta.get("source", "")))


# ---------------------------------------------------------------------------------------
# from a home
# ---------------------------------------------------------------------------------------


def _shapes_match(wf: Any, arrays: Mapping[str, Any]) -> bool:
    names = [*wf.inputs, *wf.order]
    return all(n in arrays and tuple(arrays[n]["shape"]) == tuple(wf.array_shape(n))
               for n in names)


def newest_run(cat: Catalog, wf: Any) -> str:
    """The newest complete run of ``wf`` (same name and array shapes) in the catalog."""
    wf.validate()
    same_name = [r for r in reversed(cat.runs()) if r["workflow"] == wf.name]
    for r in same_name:
        if r["status"] == "complete" and _shapes_match(wf, cat.arrays(r["id"])):
            return r["id"]
    home = datastore.home_name(cat.home)
    if same_name:
        raise CatalogError(
            f"no complete run of workflow {wf.name!r} with these parameters in {home} to take "
            f"statistics from (runs of it: {', '.join(r['id'] for r in same_name[:5])}); run "
            f"it once first, e.g. subzero run {wf.name} --strategy blackbox")
    raise CatalogError(
        f"no complete run of workflow {wf.name!r} in {home} to take statistics from; run it "
        f"once first, e.g. subzero run {wf.name} --strategy blackbox")


def _record(cat: Catalog, rid: str, profiles: Mapping[str, OpProfile], model: CostModel,
            workload: Workload) -> None:
    """Keep the model's per-(op, strategy) predictions in the statistics table."""
    for name, prof in profiles.items():
        for s in candidates(prof):
            est = model.estimate(prof, s)
            vals = {"pred_disk": est.disk, "pred_capture_s": est.capture_s,
                    "pred_store_s": est.store_s,
                    "pred_runtime_s": model.runtime_with(prof, [s])}
            for d in DIRECTIONS:
                sz = workload.sizes(name, d)
                if sz:
                    vals[f"pred_q_{d}"] = model.expected_query_cost(prof, s, d, sz)
            cat.set_statistics(rid, name, s.name, vals)


def optimize(wf: Any = None, home: Any = None, run: str | None = None,
             workload: str | os.PathLike | Workload | None = None,
             max_disk: float | None = None, max_runtime: float | None = None,
             pins: Mapping[str, Sequence[str]] | None = None, fallback: bool = False,
             calibration: Calibration | None = None, sample: bool = True) -> PlanResult:
    """Plan the next run of ``wf`` (or of run ``run``'s workflow) from the home's catalog.

    Statistics come from ``run`` or the newest complete run of ``wf``; the workload from
    ``workload`` (a file or a :class:`Workload`), else the query log of the workflow's runs,
    else every operator both ways.
    """
    home = layout.resolve_home(home)
    if not home_exists(home):
        if wf is not None:
            raise CatalogError(
                f"no complete run of workflow {wf.name!r} in {datastore.home_name(home)} to "
                "take statistics from "
                f"(no SubZero home there); run it once first, e.g. subzero run {wf.name} "
                "--strategy blackbox")
        raise CatalogError(f"no SubZero home at {datastore.home_name(home)} (run a workflow "
                           "first, or pass --home)")
    cat = open_catalog(home)
    try:
        rid = run if run is not None else newest_run(cat, wf)
        loaded = load_run(home, rid, catalog=cat)
        if wf is None:
            wf = loaded.workflow
        elif wf.name != loaded.workflow.name:
            raise SubZeroError(f"run {loaded.id} is of workflow {loaded.workflow.name!r}, "
                               f"not {wf.name!r}")
        profiles = load_profiles(home, loaded.id, sample=sample, catalog=cat)
        if isinstance(workload, Workload):
            wl = workload
        elif workload is not None:
            wl = from_file(workload, wf, profiles, loaded)
        else:
            wl = from_query_log(cat, wf.name, list(profiles))
            if wl.empty:
                wl = everything(list(profiles))
        model = CostModel(calibration or load_calibration())
        res = plan_profiles(profiles, wl, model, max_disk, max_runtime, pins, fallback,
                            loaded.id, wf.name, wf.params)
        _record(cat, loaded.id, profiles, model, wl)
        return res
    finally:
        cat.close()


def plan_from_catalog(wf: Any, home: Any, max_disk: float | None = None,
                      max_runtime: float | None = None) -> dict[str, list[str]]:
    """``subzero run --strategy optimized``: the optimizer's plan for ``wf`` from the
    newest complete run's statistics and the query log. Without ``max_disk`` the budget
    the newest run of the workflow was given (if any) applies."""
    home = layout.resolve_home(home)
    if max_disk is None:
        if home_exists(home):
            cat = open_catalog(home)
            try:
                rid = newest_run(cat, wf)
                got = [r["value"] for r in cat.statistics(rid)
                       if r["op"] == "*" and r["key"] == "max_disk"]
                max_disk = got[0] if got else None
            finally:
                cat.close()
    return optimize(wf, home, max_disk=max_disk, max_runtime=max_runtime).plan
