"""What a run is asked to do: :class:`RunSpec`, built and checked once where the request
enters (the command line, :mod:`subzero.api`), then handed to
:func:`subzero.engine.runner.execute`. A spec says what the run should be; what a run in
progress has done so far is the runner's own state.

Strategy names (a workflow-level strategy such as ``subzero``, or a plan's
``{op: ["full-one-bwd", ...]}``) become :class:`~subzero.modes.Strategy` values here, so an
unknown or unsupported name is refused before anything starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

from subzero import manifest
from subzero.chunking import Chunking
from subzero.engine import layout
from subzero.engine.homeconfig import prepare_catalog
from subzero.engine.placement import check_where
from subzero.modes import Strategy
from subzero.workflow import Plan, Workflow


@dataclass(frozen=True)
class RunSpec:
    """What a run is asked to do, checked once where it is built (:meth:`build`).

    Parameters
    ----------
    workflow : the workflow, validated.
    home : the SubZero home the run is recorded in (resolved).
    plan : every operator's strategies, checked against what it supports.
    label : the run's strategy as the catalog names it (``subzero``, ``plan``...).
    strategy : the workflow-level strategy asked for (``subzero``, ``full-one``...), None
        when an explicit plan was given.
    inputs : input name to file path, for the inputs given as files.
    chunking : how arrays are cut into chunks (the default is sized to the cores).
    master : the Spark master asked for (None: ``$SUBZERO_SPARK_MASTER`` or local).
    max_disk : a budget in bytes on disk for the run's lineage (see
        :func:`subzero.engine.runner.execute`).
    fuse : whether consecutive chunk-aligned operators share one task per chunk.
    workers : how many stages may run at once (None: from the cores).
    where : ``"auto"``, ``"spark"`` or ``"driver"`` (:mod:`subzero.engine.placement`).
    ship_env : pack this virtualenv and ship it to the executors
        (:mod:`subzero.engine.shipenv`), for a cluster whose nodes do not have it.

    Examples
    --------
    >>> from operators.elementwise import Unary
    >>> wf = Workflow("w"); _ = wf.input("x", (4,)); _ = wf.add("a", Unary("negative"), "x")
    >>> spec = RunSpec.build(wf, "/tmp/sz-spec", strategy="blackbox")
    >>> spec.label, [s.name for s in spec.plan["a"]]
    ('blackbox', ['blackbox'])
    >>> RunSpec.build(wf, "/tmp/sz-spec", where="gpu")
    Traceback (most recent call last):
    ...
    subzero.errors.SubZeroError: where 'gpu': expected one of auto, spark, driver
    """

    workflow: Workflow
    home: Path
    plan: Mapping[str, tuple[Strategy, ...]]
    label: str | None
    strategy: str | None = None
    inputs: Mapping[str, str] | None = None
    chunking: Chunking = field(default_factory=Chunking)
    master: str | None = None
    max_disk: int | None = None
    fuse: bool = True
    workers: int | None = None
    where: str = "auto"
    ship_env: bool = False

    @classmethod
    def build(cls, wf: Workflow, home: str | os.PathLike | None = None,
              inputs: Mapping[str, str] | None = None, strategy: str | None = "subzero",
              plan: Mapping[str, Sequence[str | Strategy]] | Plan | None = None,
              chunking: Chunking | None = None, master: str | None = None,
              max_disk: int | None = None, label: str | None = None, fuse: bool = True,
              workers: int | None = None, where: str = "auto", ship_env: bool = False
              ) -> "RunSpec":
        """Check a run's request and resolve its strategies.

        ``strategy`` names a workflow-level strategy (``subzero``, ``blackbox``...);
        ``plan`` (``{op: [strategy names or Strategy values]}``) overrides it: both become
        every operator's :class:`~subzero.modes.Strategy` values here, so a bad name is
        refused before anything runs. ``label`` defaults to the strategy, or ``plan``.

        Raises
        ------
        SubZeroError
            An invalid workflow, an unknown strategy or one an operator cannot keep, an
            operator that cannot be recorded as data, or a bad ``where``.
        """
        wf.validate()
        resolved = wf.plan(plan if plan is not None else strategy)
        manifest.workflow_manifest(wf)  # what cannot be data is refused before anything else
        if ship_env:  # before the environment is packed (a minute) or anything runs
            from subzero.engine.shipenv import check_ship_master
            from subzero.engine.spark import resolve_master

            check_ship_master(resolve_master(master))
        home = layout.resolve_home(home)
        prepare_catalog(home)  # a catalog elsewhere: reachable, and this home's
        return cls(wf, home,
                   MappingProxyType({n: tuple(ss) for n, ss in resolved.items()}),
                   label or ("plan" if plan is not None else strategy),
                   strategy if plan is None else None,
                   None if inputs is None else MappingProxyType(dict(inputs)),
                   chunking or Chunking(), master, max_disk, fuse, workers,
                   check_where(where), bool(ship_env))
