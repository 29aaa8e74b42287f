"""The query executor: walk a path (or every path of the DAG) one operator at a time.

A query starts from cells of one array and follows a *path*, a list of ``(operator, input
index)`` steps as in the paper, or every path to a target array (``to=``; paths are
unioned, :func:`subzero.query.paths.dag_steps`). Each step maps a frontier through one
operator with the method :class:`~subzero.query.choice.MethodChoice` picks:

``map``
    the operator's vectorized mapping function (nothing stored);
``stored:<strategy>``
    lineage read from its shards (:mod:`subzero.query.stored`);
``reexec``
    the operator re-executed in tracing mode on the tiles the frontier touches
    (:mod:`subzero.query.reexec`). An operator with exact mapping functions that cannot
    trace (``MAP`` but not ``FULL``) is not re-executed: its mapping functions give what
    tracing it reports (:meth:`~subzero.operator.Operator.trace_mapped`), without running it,
    and the step says ``map`` with the note :data:`MAPPED_NOTE`;
``entire-array``
    the frontier is full and the operator's ``all_to_all(i)`` says the result is full too.

Empty frontiers end a query early; a step stops reading shards once its result is full.
Every query is logged in the catalog (the optimizer's workload).

Scope: a step through input ``i`` of an operator whose ``whole_input(i)`` holds (a global
mean, a model fitted on the whole input) would reach a whole array from any cell, which
swamps the local lineage the other paths find. In scope ``local`` (the default) a query
given a target does not take such a step: the answer lists it as a
:class:`~subzero.query.results.GlobalDependency` and keeps what the other paths reach.
Scope ``all`` takes every step. An explicit path takes the steps it names in either scope;
those steps, like every whole-input step taken, are marked ``global``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from encoders.base import LookupTimeout
from subzero.engine.catalog import Catalog
from subzero.engine.homeconfig import open_catalog
from subzero.engine.runs import LoadedRun
from subzero.errors import DamagedError, QueryError
from subzero.frontier import Frontier, start_frontier
from subzero.modes import Mode, Strategy
from subzero.operator import Operator
from subzero.query.choice import METHODS, MethodChoice
from subzero.query.costs import QueryCosts, load_costs
from subzero.query.paths import check_array, check_path, dag_steps
from subzero.query.reexec import chunks_touched, reexecute_join
from subzero.query.results import GlobalDependency, LineageResult, Step, parse_scope
from subzero.query.stored import ShardReaders, read_full, read_payload

#: the note of a black-box step that an operator's mapping functions answered
MAPPED_NOTE = "black box: answered with its mapping functions"


def maps_instead_of_tracing(op: Operator) -> bool:
    """Whether a black-box step of ``op`` is answered with its mapping functions: it
    supports ``MAP`` (exact mapping functions) but not ``FULL``, so tracing it reports
    what they map (:meth:`~subzero.operator.Operator.trace_mapped`), one cell at a time.

    >>> from subzero.modes import Mode
    >>> class Op:
    ...     def __init__(self, *modes): self.modes = frozenset(modes)
    ...     def supported_modes(self): return self.modes
    >>> maps_instead_of_tracing(Op(Mode.MAP, Mode.BLACKBOX))
    True
    >>> maps_instead_of_tracing(Op(Mode.MAP, Mode.FULL, Mode.BLACKBOX))
    False
    """
    modes = op.supported_modes()
    return Mode.MAP in modes and Mode.FULL not in modes


class QueryExecutor:
    """Answers lineage queries on one finished run.

    Parameters
    ----------
    run : the run (:func:`subzero.engine.runs.load_run`).
    catalog : for statistics and the query log (opened from the run's home if None).
    where : where re-execution runs: ``"auto"`` (Spark for large re-executions when a
        session is already running, else this process), ``"driver"`` or ``"spark"``.
    log : record each query in the catalog's query log.
    costs : the cost constants (default: the calibrated ones, :func:`load_costs`).
    tile_cells : output cells per re-executed tile, at most.
    min_switch_s : never abandon stored lineage sooner than this (re-execution estimates
        are rough).
    entire_array : apply the entire-array optimization (off only to measure what it saves).
    """

    def __init__(self, run: LoadedRun, catalog: Catalog | None = None, where: str = "auto",
                 log: bool = True, costs: QueryCosts | None = None, tile_cells: int = 1 << 16,
                 min_switch_s: float = 0.05, entire_array: bool = True) -> None:
        self.run = run
        self._own_catalog = catalog is None
        self.catalog = catalog or open_catalog(run.home)
        self.log = log
        self.min_switch_s = float(min_switch_s)
        self.entire_array = bool(entire_array)
        self.readers = ShardReaders(str(run.home))
        self.choice = MethodChoice(run, self.catalog, costs or load_costs(), self.readers,
                                   where, tile_cells)
        # (direction, start, target) -> the steps of every path between them
        self._dag_steps: dict[tuple[str, str, str], list[tuple[str, int]]] = {}

    @property
    def costs(self) -> QueryCosts:
        return self.choice.costs

    def close(self) -> None:
        if self._own_catalog:
            self.catalog.close()

    # -- public ----------------------------------------------------------------------------
    def backward(self, cells: Any, start: str | None = None,
                 path: Sequence[tuple[str, int]] | None = None, to: str | None = None,
                 method: str = "auto", scope: str = "local") -> LineageResult:
        return self.query("backward", cells, start, path, to, method, scope=scope)

    def forward(self, cells: Any, start: str | None = None,
                path: Sequence[tuple[str, int]] | None = None, to: str | None = None,
                method: str = "auto", scope: str = "local") -> LineageResult:
        return self.query("forward", cells, start, path, to, method, scope=scope)

    def check_array(self, name: str) -> None:
        """Raise unless ``name`` is an array of the run."""
        check_array(self.run.workflow, self.run.id, name)

    def query(self, direction: str, cells: Any, start: str | None,
              path: Sequence[tuple[str, int]] | None, to: str | None,
              method: str = "auto",
              before_step: Callable[[str, int, Sequence[Step]], None] | None = None,
              scope: str = "local") -> LineageResult:
        """Trace ``cells`` of array ``start`` along ``path``, or along every path to array
        ``to``.

        Parameters
        ----------
        direction : ``"backward"`` or ``"forward"``.
        cells : the start cells (coordinates, a bool mask, a :class:`~subzero.cells.Box`).
        start : the array holding them (a path's own start when None).
        path : ``(operator, input index)`` steps; exactly one of ``path`` and ``to``.
        to : the target array: every path from ``start`` to it, unioned.
        method : the preferred access method per step (``auto``: the cheapest).
        before_step : called as ``before_step(operator, input, steps_done)`` before each
            step; whatever it raises ends the query there (how ``subzero serve`` stops a
            query past its time limit or whose client left).
        scope : ``"local"`` (default): with ``to``, a whole-input step
            (:meth:`~subzero.operator.Operator.whole_input`) is listed in the answer's
            ``global_deps`` instead of taken; ``"all"``: every step is taken.

        Returns
        -------
        LineageResult

        Raises
        ------
        QueryError
            A bad direction, method, scope, path or array.
        """
        t0 = time.perf_counter()
        if direction not in ("backward", "forward"):
            raise QueryError(f"direction must be 'backward' or 'forward'. Got {direction!r}.")
        if method not in METHODS:
            raise QueryError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
        scope = parse_scope(scope)
        if (path is None) == (to is None):
            raise QueryError("give either a path or a target (to=...), not both or neither")
        wf = self.run.workflow
        if path is not None:
            steps, start, target = check_path(wf, self.run.id, direction, path, start)
        else:
            if start is None:
                raise QueryError("a query with to=... needs the start array (from)")
            self.check_array(start)
            self.check_array(to)
            key = (direction, start, to)
            if key not in self._dag_steps:  # a DAG search per query: once per key
                self._dag_steps[key] = dag_steps(wf, direction, start, to)
            steps, target = self._dag_steps[key], to
        if method in ("map", "stored"):
            self._check_forced(method, steps)
        f0 = start_frontier(wf.array_shape(start), cells)
        skip_global = scope == "local" and path is None  # a path's steps were asked for
        got, done, along, globals_ = self._walk(direction, start, target, steps, f0, method,
                                                before_step, skip_global)
        res = LineageResult(self.run.id, direction, target, got, done,
                            time.perf_counter() - t0, start, along, scope, globals_)
        if self.log:
            self.catalog.log_query(
                self.run.id, direction, start, target,
                [[s.operator, s.input] for s in done], f0.n, res.count, res.elapsed_s,
                [s.to_json() for s in done])
        return res

    def _check_forced(self, method: str, steps: Sequence[tuple[str, int]]) -> None:
        """``--method map`` or ``stored`` where no operator on the path has it is an
        error, not a silent fallback (operators that lack it still use what they have)."""
        ops = list(dict.fromkeys(op for op, _ in steps))
        if ops and not any(kind == method for op in ops for kind, _ in self.methods(op)):
            what = "stores no lineage" if method == "stored" else "has no mapping function"
            names = ", ".join(ops[:4]) + (f" and {len(ops) - 4} more" if len(ops) > 4 else "")
            raise QueryError(f"--method {method}: run {self.run.id} {what} for any operator "
                             f"on the path ({names}); expected --method auto or reexec")

    # -- walking ---------------------------------------------------------------------------
    def _walk(self, direction: str, start: str, target: str, steps: list[tuple[str, int]],
              f0: Frontier, method: str,
              before_step: Callable[[str, int, Sequence[Step]], None] | None = None,
              skip_global: bool = False
              ) -> tuple[Frontier, list[Step], dict[str, Frontier], list[GlobalDependency]]:
        """Propagate frontiers along ``steps``, in order: each step reads the frontier of
        the array it starts from and adds its answer to the array it reaches (a union where
        paths meet). With ``skip_global``, a whole-input step that some cell reaches is
        listed instead of taken. Returns the target's frontier, the steps, the frontier
        reached in every array along the way, and the global dependencies listed."""
        wf = self.run.workflow
        backward = direction == "backward"
        fronts: dict[str, Frontier] = {start: f0}
        done: list[Step] = []
        globals_: list[GlobalDependency] = []
        for op_name, i in steps:
            src = wf.nodes[op_name].inputs[i]
            here, there = (op_name, src) if backward else (src, op_name)
            if here not in fronts:
                continue
            op = self.run.op(op_name)
            whole = op.whole_input(i)
            if whole and skip_global:
                if fronts[here].n:
                    globals_.append(global_dependency(op, i, backward, there))
                continue
            if before_step is not None:
                before_step(op_name, i, tuple(done))
            got, step = self._step(op_name, i, backward, fronts[here], method)
            step.is_global = whole
            done.append(step)
            fronts[there] = fronts[there].union(got) if there in fronts else got
        empty = Frontier(wf.array_shape(target), lin=np.empty(0, dtype=np.uint64))
        return fronts.get(target, empty), done, fronts, globals_

    # -- one step --------------------------------------------------------------------------
    def methods(self, op_name: str) -> list[tuple[str, Strategy | None]]:
        """The access methods this run has for an operator (re-execution always)."""
        return self.choice.methods(op_name)

    def tiles(self, op: Operator, i: int, backward: bool, mask: np.ndarray
              ) -> tuple[list, int]:
        """The tiles a re-execution for the frontier ``mask`` runs, and their cells."""
        return self.choice.tiles(op, i, backward, mask)

    def step(self, op_name: str, i: int, direction: str, f: Any, method: str = "auto",
             n_in: int | None = None) -> tuple[np.ndarray, Step]:
        """Map frontier ``f`` (a bool mask or a :class:`~subzero.frontier.Frontier`) through
        input ``i`` of ``op_name`` (backward: output -> input i; forward: input i ->
        output); returns the mask reached. ``n_in``: ``f``'s cell count, when known."""
        front = Frontier.of(f, n_in)
        got, step = self._step(op_name, i, direction == "backward", front, method)
        return got.mask, step

    def reach(self, op_name: str, i: int, direction: str, f: Any, method: str = "auto"
              ) -> Frontier:
        """:meth:`step`'s answer as a :class:`~subzero.frontier.Frontier`, in whichever
        form it came (a few cells stay indices: no mask of the array is built)."""
        return self._step(op_name, i, direction == "backward", Frontier.of(f), method)[0]

    def _step(self, op_name: str, i: int, backward: bool, f: Frontier, method: str
              ) -> tuple[Frontier, Step]:
        t0 = time.perf_counter()
        op = self.run.op(op_name)
        out_shape = op.in_shapes[i] if backward else op.out_shape
        n_in = f.n
        note = ""
        if n_in == 0:
            res, used = Frontier(out_shape, lin=np.empty(0, dtype=np.uint64)), "empty"
        elif self.entire_array and n_in == f.size and op.all_to_all(i):
            res, used = Frontier.everything(out_shape), "entire-array"
        else:
            (kind, strategy), budget = self.choice.choose(op, i, backward, f, method)
            if kind == "map":
                res, used = self._map(op, i, backward, f, out_shape), "map"
            elif kind == "stored":
                deadline = (time.perf_counter() + max(budget, self.min_switch_s)
                            if budget is not None else None)
                used = f"stored:{strategy.name}"
                try:
                    res = self._stored(op, i, backward, f, strategy, deadline)
                except DamagedError as e:
                    if method != "auto":
                        raise
                    res, used, _ = self._blackbox(op, i, backward, f)
                    instead = ("answered with its mapping functions" if used == "map"
                               else "re-executed")
                    note = (f"{str(e).split(';')[0]}; {instead} instead (run "
                            f"'subzero verify {self.run.id}')")
                    return res, Step(op_name, i, used, n_in, res.n, time.perf_counter() - t0,
                                     note, self._ran_changed_code(op_name, used))
                if res is None:  # reading cost more than re-executing would
                    note = (f"switched from stored:{strategy.name} after "
                            f"{max(budget, self.min_switch_s):.3f} s")
                    try:
                        res, used, how = self._blackbox(op, i, backward, f)
                        note = _notes(note, how)
                    except DamagedError as e:  # an array it reads is damaged: read on
                        if method != "auto":
                            raise
                        res = self._stored(op, i, backward, f, strategy, None)
                        note = (f"{str(e).split(';')[0]}; read stored lineage to the end "
                                "instead")
            else:
                try:
                    res, used, note = self._blackbox(op, i, backward, f)
                except DamagedError as e:  # an array it reads is damaged: stored lineage?
                    stored = [s for kind, s in self.methods(op_name) if kind == "stored"]
                    if method != "auto" or not stored:
                        raise
                    res = self._stored(op, i, backward, f, stored[0], None)
                    used = f"stored:{stored[0].name}"
                    note = f"{str(e).split(';')[0]}; read stored lineage instead"
        return res, Step(op_name, i, used, n_in, res.n, time.perf_counter() - t0, note,
                         self._ran_changed_code(op_name, used))

    def _ran_changed_code(self, op_name: str, used: str) -> bool:
        """Whether a step that ``used`` a method ran the operator's changed code (all but
        stored pairs, which the run wrote, and the methods that read nothing)."""
        if op_name not in self.run.changed_code:
            return False
        return not (used in ("empty", "entire-array") or used.startswith("stored:full"))

    @staticmethod
    def _map(op: Operator, i: int, backward: bool, f: Frontier, out_shape: tuple
             ) -> Frontier:
        """A mapping function: on the few cells of a sparse frontier when the operator
        maps linear indices (in time proportional to the cells), else on the mask."""
        if f.sparse:
            lin = op.map_b_lin(f.lin, i) if backward else op.map_f_lin(f.lin, i)
            if lin is not None:
                return Frontier(out_shape, lin=np.asarray(lin, dtype=np.uint64))
        m = op.map_b(f.mask, i) if backward else op.map_f(f.mask, i)
        return Frontier(out_shape, mask=np.asarray(m, dtype=bool))

    def _stored(self, op: Operator, i: int, backward: bool, f: Frontier, s: Strategy,
                deadline: float | None) -> Frontier | None:
        """Answer from stored lineage; None if ``deadline`` passed (switch to reexec)."""
        readers = [self.readers.reader(row) for row in self.choice.shards[(op.name, s.name)]]
        try:
            if s.mode is Mode.FULL:
                out_shape = op.in_shapes[i] if backward else op.out_shape
                return read_full(readers, f, i, backward, out_shape, deadline)
            return read_payload(readers, op, i, backward, f, s.mode is Mode.COMP, deadline)
        except LookupTimeout:
            return None

    def _blackbox(self, op: Operator, i: int, backward: bool, f: Frontier
                  ) -> tuple[Frontier, str, str]:
        """A black-box step: ``(answer, method, note)``. An operator whose mapping
        functions are what tracing it reports (:func:`maps_instead_of_tracing`) is answered
        with them, on the frontier's cells, instead of re-executed; any other is
        re-executed on the tiles the frontier touches."""
        if maps_instead_of_tracing(op):
            out_shape = op.in_shapes[i] if backward else op.out_shape
            return self._map(op, i, backward, f, out_shape), "map", MAPPED_NOTE
        return self._reexec(op, i, backward, f), "reexec", ""

    def _reexec(self, op: Operator, i: int, backward: bool, front: Frontier) -> Frontier:
        f = front.mask
        tiles, cells = self.tiles(op, i, backward, f)
        where = "spark" if self.choice.use_spark(cells, len(tiles), op) else "driver"
        if where == "spark" and op.parallelism.kind != "global":
            # few large tasks, not many small ones
            tiles = chunks_touched(op, self.run.chunks(op.name), i, backward, f)
        t0 = time.perf_counter()
        res = reexecute_join(self.run, op, i, backward, f, tiles, where)
        if where == "driver" and tiles:
            self.choice.record_reexec(op.name, cells, time.perf_counter() - t0)
        return Frontier(res.shape, mask=res)


def global_dependency(op: Operator, i: int, backward: bool, array: str) -> GlobalDependency:
    """What a query lists for the whole-input step through input ``i`` of ``op`` that it
    does not take, toward ``array`` (the input backward, the output forward); its
    description is the first sentence of the operator's class docstring."""
    shape = op.in_shapes[i] if backward else op.out_shape
    para = (type(op).__doc__ or "").strip().split("\n\n")[0]
    first = " ".join(para.replace("``", "").split()).split(". ")[0].rstrip(".")
    return GlobalDependency(op.name, i, array, int(np.prod(shape, dtype=np.int64)),
                            type(op).__name__, first)


def _notes(*notes: str) -> str:
    """A step's notes in one line, the empty ones left out."""
    return "; ".join(n for n in notes if n)
