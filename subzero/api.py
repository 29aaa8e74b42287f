"""The Python API: a home directory, its runs, and lineage queries on them.

>>> import subzero
>>> home = subzero.Home("/tmp/sz-demo")                          # doctest: +SKIP
>>> run = home.run("example", strategy="subzero", shape="200x100")  # doctest: +SKIP
>>> run.arrays                                                  # doctest: +SKIP
['image', 'threshold', 'calibrate', 'smooth', 'background', 'residual', 'bright']
>>> res = run.backward("bright", [(10, 20)], to="image")         # doctest: +SKIP
>>> res.count                                                   # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import workflows
from optimizer.plan import plan_from_catalog
from subzero.chunking import Chunking
from subzero.engine import homeconfig, layout
from subzero.engine.catalog import Catalog
from subzero.engine.runner import RunResult, RunSpec, execute
from subzero.engine.runs import LoadedRun, load_run
from subzero.engine.spark import active_session, get_spark
from subzero.display import RunDisplay
from subzero.errors import StoreError, SubZeroError
from subzero.lineagecheck import LineageCheck, check_operator
from subzero.testing import bind
from subzero.frontier import start_frontier
from subzero.query import LineageResult, QueryExecutor
from subzero.query.named import choose_all, start_cells
from subzero.replay import ReplayResult, replay_run, replay_values
from subzero.workflow import Workflow
from workflows.checkable import default_inputs, resolve


class Home:
    """A SubZero home directory: catalog, runs, arrays and lineage."""

    def __init__(self, path: str | os.PathLike | None = None, catalog: str | None = None
                 ) -> None:
        self.path = layout.resolve_home(path)
        # a PostgreSQL catalog (postgresql://USER@HOST:PORT/DB) for a new home; an
        # existing home's own configuration names its catalog
        homeconfig.use_catalog(self.path, catalog)

    @property
    def catalog(self) -> Catalog:
        """A connection to the home's catalog (SQLite in the home, or the PostgreSQL
        database its configuration names); the caller closes it."""
        return homeconfig.open_catalog(self.path)

    def run(self, workflow: str | Workflow, strategy: str | None = "subzero",
            plan: Mapping[str, Sequence[str]] | None = None,
            inputs: Mapping[str, str] | None = None, chunks: Any = None, split: Any = None,
            master: str | None = None, max_disk: int | None = None,
            quiet: bool | None = None, where: str = "auto", ship_env: bool = False,
            **params: Any) -> "Run":
        """Run a workflow (a name from ``subzero workflows``, or a :class:`Workflow`).

        The run says on stderr where its inputs come from, whether it runs in this process
        or starts Spark, and how far it is (a progress bar on a terminal, a line every few
        seconds elsewhere); ``quiet=True`` (default: ``$SUBZERO_QUIET`` set to anything but
        0) silences it. ``where``: ``"auto"`` (a small run on a local master runs in this
        process when that is quicker), ``"spark"`` or ``"driver"``
        (:mod:`subzero.engine.placement`). ``ship_env=True`` packs this virtualenv and ships
        it to the executors (:mod:`subzero.engine.shipenv`): for a cluster whose nodes do not
        have it.
        """
        if isinstance(workflow, str):
            workflow = workflows.build(workflow, inputs=inputs, **params)
        elif params:
            raise SubZeroError("workflow parameters apply to workflows given by name")
        if quiet is None:
            quiet = os.environ.get("SUBZERO_QUIET", "0") not in ("", "0")
        chunking = Chunking(split=split, chunks=chunks) if (chunks or split) else Chunking()
        spec = RunSpec.build(workflow, self.path, inputs=inputs, strategy=strategy, plan=plan,
                             chunking=chunking, master=master, max_disk=max_disk, where=where,
                             ship_env=ship_env)
        if quiet:
            res = execute(spec)
        else:
            with RunDisplay(say) as shown:
                res = execute(spec, notify=shown.notify, on_progress=shown.progress)
        out = self.get(res.run)
        out.result = res
        out.choose_named_cells()
        return out

    def get(self, run_id: str = "latest", allow_changed_code: bool = False) -> "Run":
        """A finished run by id (``"latest"``: the newest complete run; ``"latest:NAME"``:
        the newest complete run of workflow NAME).

        The run's operators are rebuilt from its manifest. An operator whose code changed
        since the run (its module's SHA-256 differs from the recorded one) cannot run:
        queries that need its code (mapping functions, payloads, re-execution) and replays
        through it fail in one line naming it, while its stored lineage still answers.
        ``allow_changed_code=True`` uses the code as it is now, and every query answer
        that used it says so (:attr:`LineageResult.changed_code`).
        """
        return Run(load_run(self.path, run_id, allow_changed_code=allow_changed_code),
                   requested=run_id)

    def runs(self) -> list[dict[str, Any]]:
        cat = self.catalog
        try:
            return cat.runs()
        finally:
            cat.close()


class Run:
    """A finished run: its arrays, and lineage queries on them."""

    def __init__(self, loaded: LoadedRun, requested: str | None = None) -> None:
        self.loaded = loaded
        self.id = loaded.id
        self.workflow = loaded.workflow
        self.result: RunResult | None = None
        #: what the replay that made this run did (a run made by :meth:`replay`)
        self.replayed: ReplayResult | None = None
        #: how the run was asked for (``latest``, ``latest:astronomy``, ``r3``)
        self.requested = requested or loaded.id

    def check_array(self, name: str | None) -> None:
        """An error naming which run ``latest`` is when it lacks array ``name``."""
        if name is None or name in self.loaded.arrays:
            return
        cat = homeconfig.open_catalog(self.home)
        try:
            msg = cat.missing_array(self.requested, self.loaded.info, name, self.loaded.arrays)
        finally:
            cat.close()
        raise StoreError(msg)

    @property
    def home(self) -> Path:
        return self.loaded.home

    @property
    def arrays(self) -> list[str]:
        return list(self.loaded.arrays)

    def array(self, name: str) -> np.ndarray:
        """The whole array ``name`` of this run, as numpy."""
        self.check_array(name)
        return self.loaded.array(name)

    def shape(self, name: str) -> tuple[int, ...]:
        self.check_array(name)
        self.loaded.array_path(name)
        return tuple(self.loaded.arrays[name]["shape"])

    def __repr__(self) -> str:
        return f"Run({self.id!r}, workflow={self.workflow.name!r})"

    # -- lineage queries -------------------------------------------------------------------
    def query_executor(self, **kwargs: Any) -> QueryExecutor:
        """A :class:`subzero.query.QueryExecutor` on this run (kept for repeated queries)."""
        if getattr(self, "_qx", None) is None or kwargs:
            self._qx = QueryExecutor(self.loaded, **kwargs)
        return self._qx

    def backward(self, cells: Any, start: str | None = None,
                 path: Sequence[tuple[str, int]] | None = None, to: str | None = None,
                 method: str = "auto", scope: str = "local") -> LineageResult:
        """Backward lineage of ``cells`` of array ``start`` (coordinates, a bool mask or a
        :class:`subzero.Box`) along ``path`` (``[(operator, input index), ...]``) or every
        path ``to`` an ancestor array. Returns a :class:`subzero.query.LineageResult`.

        ``scope="local"`` (default) lists the whole-input steps on the way to ``to`` (a
        global mean) in the result's ``global_deps`` instead of taking them;
        ``scope="all"`` takes them too.

        >>> res = run.backward([(10, 20)], start="bright", to="image")   # doctest: +SKIP
        >>> res.count, res.coords[:2], [s.method for s in res.steps]     # doctest: +SKIP
        """
        self.check_array(start)
        self.check_array(to)
        return self.query_executor().backward(cells, start, path, to, method, scope)

    def forward(self, cells: Any, start: str | None = None,
                path: Sequence[tuple[str, int]] | None = None, to: str | None = None,
                method: str = "auto", scope: str = "local") -> Any:
        """Forward lineage of ``cells`` of array ``start`` along ``path`` or ``to`` a
        descendant array (``scope`` as in :meth:`backward`)."""
        self.check_array(start)
        self.check_array(to)
        return self.query_executor().forward(cells, start, path, to, method, scope)

    def named_query_cells(self, name: str) -> Any:
        """The cells a named query starts from (chosen from this run's data with the
        workflow's seed, once: they are kept in the catalog)."""
        cat = homeconfig.open_catalog(self.home)
        try:
            return start_cells(self, self.id, name, cat)
        finally:
            cat.close()

    def choose_named_cells(self) -> None:
        """Choose (and remember in the catalog) the start cells of every named query that
        picks them from the run's arrays, so that a later one-shot query reads no array."""
        cat = homeconfig.open_catalog(self.home)
        try:
            choose_all(self, self.id, cat)
        finally:
            cat.close()

    def named_query(self, name: str, method: str = "auto", cells: Any = None,
                    scope: str = "local") -> LineageResult:
        """Run one of the workflow's named queries (e.g. ``BQ3``); ``cells`` as returned by
        :meth:`named_query_cells` skips choosing them again; ``scope`` as in
        :meth:`backward` (a named query that follows a path takes its steps either way)."""
        if cells is None:
            cells = self.named_query_cells(name)
        q = self.workflow.queries[name]
        return self.query_executor().query(q.direction, cells, q.start, q.path, q.to, method,
                                           scope=scope)

    # -- what-if replay --------------------------------------------------------------------
    def _replay_session(self) -> tuple[Catalog, QueryExecutor]:
        """This thread's connection to the catalog, and an executor of this run's lineage
        on it (not part of the query workload), for :meth:`replay`: one connection for all
        a replay asks, kept for the next replay until :meth:`close`. Closing a process's
        last connection to the catalog checkpoints its write-ahead log, with an fsync of
        the home that makes the file system write out what the replay has just written,
        a large share of a small replay's time (benchmarks/bench_replay.py)."""
        sessions = self.__dict__.setdefault("_replay_sessions", {})
        key = threading.get_ident()
        got = sessions.get(key)
        if got is None:
            cat = homeconfig.open_catalog(self.home)
            got = sessions[key] = (cat, QueryExecutor(self.loaded, catalog=cat, log=False))
        return got

    def close(self) -> None:
        """Close the catalog connections this run keeps for replays (made in this thread;
        another thread's are closed when the run is garbage collected)."""
        sessions = self.__dict__.get("_replay_sessions", {})
        got = sessions.pop(threading.get_ident(), None)
        if got is not None:
            got[1].close()
            got[0].close()

    def replay(self, array: str, cells: Any, value: Any = None, values: Any = None,
               nan: bool = False, to: str | Sequence[str] | None = None,
               where: str = "auto", quiet: bool | None = None, compare_all: bool = False
               ) -> "Run":
        """What if ``cells`` of ``array`` (coordinates, a bool mask or a :class:`Box`) had
        held ``value`` (one for all), ``values`` (one per cell, C order of the cells) or
        NaN (``nan=True``)? Recomputes only the tiles the change reaches (forward lineage
        of this run) and returns the new run derived from this one; its ``replayed`` says
        which cells of each array changed and how much was recomputed. ``to``: replay only
        what these arrays need. An intermediate recomputed whole whose values are noisy
        (everything after a changed mean) is not compared with this run's, its ``changed``
        None, unless ``compare_all``. This run is never modified.

        >>> new = run.replay("exp1", subzero.Box((500, 200), (510, 210)), value=0)  # doctest: +SKIP
        >>> new.replayed.array_result("clust").changed                              # doctest: +SKIP
        """
        self.check_array(array)
        targets = [to] if isinstance(to, str) else list(to or [])
        for t in targets:
            self.check_array(t)
        wf = self.workflow
        dtype = wf.inputs[array].dtype if array in wf.inputs else wf.ops[array].out_dtype
        mask = start_frontier(wf.array_shape(array), cells).mask
        vals = replay_values(array, dtype, int(mask.sum()), value=value,
                             values=None if values is None else np.asarray(values), nan=nan)
        cat, qx = self._replay_session()
        if quiet is None:
            quiet = os.environ.get("SUBZERO_QUIET", "0") not in ("", "0")
        text = "NaN" if nan else ("given values" if values is not None else str(value))
        spark = active_session()
        if where == "spark" and spark is None:
            spark = get_spark(None, layout.logs_dir(self.home), notify=None if quiet else say)
        res = replay_run(self.loaded, array, mask, vals, to=targets or None,
                         value_text=text, spark=spark, where=where,
                         notify=None if quiet else say, catalog=cat, compare_all=compare_all,
                         executor=qx)
        # the derived run's workflow is a copy of this run's
        loaded = load_run(self.home, res.run, catalog=cat, workflow=wf)
        loaded.unavailable = dict(self.loaded.unavailable)
        loaded.changed_code = dict(self.loaded.changed_code)
        out = Run(loaded, requested=res.run)
        out.replayed = res
        return out


def say(line: str) -> None:
    """What a run says while it runs: one line on stderr (never stdout, which carries
    ``--json`` output and tables)."""
    print(f"subzero: {line}", file=sys.stderr, flush=True)


def optimized_plan(wf: Workflow, home: Any, max_disk: int | None = None
                   ) -> dict[str, list[str]]:
    """The optimizer's plan for ``wf`` from the catalog's statistics (``--strategy optimized``),
    under ``max_disk`` bytes when given."""
    return plan_from_catalog(wf, layout.resolve_home(home), max_disk=max_disk)


def check_lineage(operator: Any, inputs: Sequence[Any] | None = None, samples: int = 24,
                  seed: int = 0, params: Mapping[str, Any] | None = None,
                  modes: Sequence[str] | None = None, shape: Sequence[int] | None = None,
                  split: Any = 2, rtol: float = 0.0, cells: Any = None,
                  budget_s: float | None = None,
                  progress: Callable[[str], None] | None = None) -> LineageCheck:
    """Is an operator's declared lineage right? Checks it by perturbation on the driver
    (no Spark): see :mod:`subzero.lineagecheck` for what is sampled and measured.

    ``operator`` is a built-in or shipped UDF by class name (``"MedianFilter"``,
    ``"CosmicRayDetect"``), ``"module:Class"``, an operator class or an instance; ``params``
    its constructor's keyword arguments; ``inputs`` numpy arrays (default: the operator's
    own kind of data, or ``shape`` random floats per input, from ``seed``); ``cells`` output
    cells to check instead of sampled ones; ``budget_s`` a time budget in seconds for the
    whole check (each mode says what it cut); ``progress`` hears how far it is.

    >>> rep = subzero.check_lineage("CosmicRayDetect", samples=16)     # doctest: +SKIP
    >>> rep.sound, rep.mode("COMP").tightness                          # doctest: +SKIP
    """
    op = resolve(operator, params)
    name = operator if isinstance(operator, str) else type(op).__name__
    arrays: list[np.ndarray] = []
    try:
        if inputs is None:
            spec = operator if isinstance(operator, (str, type)) else op
            arrays = default_inputs(spec if not params else op, seed=seed, shape=shape)
        else:
            arrays = [np.asarray(a) for a in inputs]
        bound = bind(op, *arrays, name=name)
        return check_operator(bound, arrays, samples=samples, seed=seed, modes=modes,
                              split=split, rtol=rtol, cells=cells, budget_s=budget_s,
                              progress=progress)
    except MemoryError as e:  # parameters asking for more than the machine has
        raise SubZeroError(_out_of_memory(name, op, params, arrays, e)) from None


def _out_of_memory(name: str, op: Any, params: Mapping[str, Any] | None,
                   arrays: Sequence[np.ndarray], e: MemoryError) -> str:
    """The one line of a check that ran out of memory: the operator, its parameters (the
    likely cause), the inputs' shapes and what numpy could not allocate."""
    given = dict(params) if params else op.params()
    text = ", ".join(f"{k}={v!r}" for k, v in given.items()) or "none"
    if len(text) > 120:
        text = text[:117] + "..."
    shapes = ", ".join(str(tuple(a.shape)) for a in arrays) or "not made yet"
    why = str(e).splitlines()[0] if str(e) else "MemoryError"
    return (f"operator {name!r} with parameters {text} ran out of memory while being checked "
            f"on inputs of shape {shapes} ({why}); expected parameters whose work fits in "
            "this machine's memory")
