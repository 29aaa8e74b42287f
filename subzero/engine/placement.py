"""Where a run executes: as Spark jobs, or in this (the driver's) process.

A Spark job costs a fixed time before any of its work starts (scheduling, shipping the
closures, the Python workers' round trip), and a session's first Python jobs cost far more:
the JVM warms up and the Python workers start and import the task code. The work itself
costs a time per cell a stage reads or writes on one core; Spark's Python workers split it
over the cores, the driver's task threads over the cores less what they wait for each
other's GIL. So a small run finishes sooner in the driver, where it pays no job's fixed
cost, and a large one sooner as Spark jobs. The constants below model these costs; the
scale benchmark (``benchmarks/bench_scale.py``) fits them.

On a local master the tasks would run on this very machine, so ``where="auto"`` runs a run
whose modelled time is shorter in the driver (:func:`place`): the same tasks
(:func:`subzero.engine.tasks.run_group`), the same chunks, arrays and shards, on one task
thread per core, and no Spark job; when no session is running, none is started. A cluster
master (``spark://``, ``yarn``, ``k8s://``) always gets Spark jobs under ``auto``; ``"spark"``
and ``"driver"`` force either. The driver never runs a stage of more than
:data:`DRIVER_MAX_STAGE_CELLS` cells (its memory stays bounded whatever the run's size), and
a task that crashes the process (a segfault in native code) ends a run in the driver where
Spark would have tried the task again: ``where="spark"`` isolates such tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from subzero.errors import SubZeroError

WHERE = ("auto", "spark", "driver")
#: the time per cell a stage reads or writes, on one core, in seconds (the astronomy
#: workflow's runs in the driver, one task at a time; see benchmarks/bench_scale.py)
DRIVER_S_PER_CELL = 7e-9
#: what each core beyond the first adds to the driver's task threads, in cores (they share
#: the GIL), fitted on fresh black-box runs of benchmarks/bench_scale.py
DRIVER_CORE_SHARE = 0.6
#: a Spark job's fixed cost in seconds: scheduling, shipping the closures, the workers'
#: round trip (fresh black-box runs of benchmarks/bench_scale.py, less the modelled work
#: and first-jobs cost, per job)
SPARK_JOB_S = 0.09
#: what a session's first Python jobs cost beyond that, in seconds (workers start, import,
#: JIT): a fresh process's run against the same run in a warm session
#: (benchmarks/bench_scale.py)
SPARK_FIRST_S = 1.5
#: the most cells a stage run in the driver may read and write (2 GB of float64), so that
#: the driver's memory stays bounded: the largest scales' stages go to Spark
DRIVER_MAX_STAGE_CELLS = 1 << 28


@dataclass(frozen=True)
class Placement:
    """Where a run executes, and the modelled times that chose it."""

    where: str  # "spark" or "driver"
    driver_s: float
    spark_s: float
    why: str

    def to_json(self) -> dict[str, object]:
        return {"where": self.where, "driver_s": round(self.driver_s, 3),
                "spark_s": round(self.spark_s, 3), "why": self.why}


def check_where(where: str) -> str:
    """``where`` if it is one of :data:`WHERE`, else a one-line error naming it.

    >>> check_where("driver")
    'driver'
    >>> check_where("gpu")
    Traceback (most recent call last):
    ...
    subzero.errors.SubZeroError: where 'gpu': expected one of auto, spark, driver
    """
    if where not in WHERE:
        raise SubZeroError(f"where {where!r}: expected one of {', '.join(WHERE)}")
    return where


def driver_speedup(cores: int) -> float:
    """How many cores' work the driver's task threads do on ``cores`` cores.

    >>> driver_speedup(1), driver_speedup(2)
    (1.0, 1.6)
    """
    return 1.0 + DRIVER_CORE_SHARE * (max(1, cores) - 1)


def place(where: str, stage_cells: Sequence[int], jobs: int, cores: int, local: bool,
          warm: bool) -> Placement:
    """Where a run with stages of ``stage_cells`` (cells each reads and writes) executes.

    ``jobs``: the Spark jobs it would take; ``cores``: the tasks that run at once; ``local``:
    the master is a local one (this machine); ``warm``: a Spark session is already running.

    >>> place("auto", [10**6] * 17, 12, 2, local=True, warm=False).where
    'driver'
    >>> place("auto", [250_000_000] * 17, 12, 2, local=True, warm=False).where
    'spark'
    >>> place("auto", [10**6] * 17, 12, 2, local=False, warm=False).where
    'spark'
    """
    check_where(where)
    cells = sum(stage_cells)
    driver_s = DRIVER_S_PER_CELL * cells / driver_speedup(cores)
    spark_s = (DRIVER_S_PER_CELL * cells / max(1, cores) + SPARK_JOB_S * jobs
               + (0.0 if warm else SPARK_FIRST_S))
    biggest = max(stage_cells, default=0)
    if where != "auto":
        return Placement(where, driver_s, spark_s, f"asked for {where}")
    if not local:
        return Placement("spark", driver_s, spark_s, "a cluster master")
    if biggest > DRIVER_MAX_STAGE_CELLS:
        return Placement("spark", driver_s, spark_s,
                         f"a stage of {biggest:,} cells (the driver runs at most "
                         f"{DRIVER_MAX_STAGE_CELLS:,})")
    if driver_s < spark_s:
        return Placement("driver", driver_s, spark_s,
                         f"{cells / 1e6:.0f} M cells: about {driver_s:.1f} s of work here, "
                         f"{spark_s:.1f} s as {jobs} Spark jobs")
    return Placement("spark", driver_s, spark_s,
                     f"{cells / 1e6:.0f} M cells: about {spark_s:.1f} s as {jobs} Spark jobs, "
                     f"{driver_s:.1f} s here")
