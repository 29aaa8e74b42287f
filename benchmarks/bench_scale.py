#!/usr/bin/env python
"""Scale: capture, storage and queries of the astronomy workflow from 1x to 64x one exposure.

    python benchmarks/bench_scale.py [--quick] [--out FILE.json] [--png DIR] [--repeat N]
        [--repeat-largest N] [--scales 1,2,4,8] [--ccds 1,4,16] [--base 2001x513]
        [--query-repeat 20] [--master URL]
    subzero bench scale [--quick] [--out FILE.json] [--png DIR]

Configurations: the generated astronomy workflow at ``shape`` (R k, C k) for k in
``--scales`` (1x, 4x, 16x, 64x the cells of one 2001 x 513 exposure), and at ``ccds`` N
for N in ``--ccds`` at 1x shape (N = 1 is the 1x configuration itself, not run twice).

For each configuration:

- black-box and subzero runtime: every run is a fresh CLI subprocess (``python -m
  subzero.cli run astronomy --home H --strategy S --param shape=RxC [--param ccds=N]
  --json``, so each has a fresh driver and Spark), the two strategies interleaved
  (alternating which goes first) ``--repeat`` times (default 4; ``--repeat-largest`` for
  the configurations of the largest cells, default the same). Give an even count (an odd
  one is said on stderr): each strategy then goes first as often as second, and on this
  machine the place matters (a run in the CLI's process right after the black box as
  Spark jobs, which sits between the two, took 0.70-0.81 s at 4x; one after another such
  run or a pause, 0.81-1.05 s: see ``host_reclaimed_bytes``). From each run's JSON:
  ``runtime_s``, ``input_bytes``, ``lineage_bytes``, ``driver_peak_rss`` (the driver's
  Python process; the JVM is not in it; the subprocess's own peak RSS from ``wait4`` when
  the engine reports none), ``stages``, ``concurrency``; and the subprocess's wall time,
  so ``overhead_s = wall - runtime`` (Python start, imports, Spark start, the catalog) is
  reported. Figures are medians over the repeats (peak RSS: the largest). A measured
  run's files are emptied after it and every home is removed when the benchmark ends
  (:func:`retire`: freeing thousands of inodes between runs slowed the next run's every
  new file 20-fold on this machine's journal-less ext4);
- ``host_reclaimed_bytes`` (each run's, and the median of each strategy's and of the
  reference's): the free memory the machine handed back to its host while the run ran
  (Linux free page reporting, :func:`host_reclaimed`; None where the kernel does not
  report it). On this machine, a virtual machine that reports, a page handed back costs
  a fault at the host when it is next touched: about 2.2 ms of CPU per MB of fresh
  memory, anonymous or page cache, against 0.1 ms for memory freed a moment before. A
  run's new memory and the page cache of the arrays it writes (900 MB at 16x) take
  fresh pages, so its time depends on what the machine freed in the seconds before it:
  the 16x black box ran in 2.49 s (4.90 s of CPU) right after a child process had
  touched 3 GB and exited, 3.34 s (6.84 s of CPU) after a 4 s pause (4 alternating
  pairs). That is one cause of the place effect above (the JVM of the Spark run frees
  GBs as it exits), not all of it: two black-box runs at 4x, each right after the same
  warm-up, still took 0.68 s first and 0.77 s second (medians of 5 pairs; 0.67 and 0.93
  s with the first run's files kept rather than emptied);
- the physical reference (``numpy``): the same kernels on whole numpy arrays (no Spark,
  no zarr) in a fresh process of their own, as every run is one
  (:func:`reference_process`), placed among each repeat's runs, a different place each
  pair of repeats (:func:`repeat_order`): the kernels' modules imported and the inputs
  generated (``generate_s``), then every operator of ``wf.order`` run once on the whole
  array, in black-box mode (``runtime_s``, the median; ``with_inputs_s``, of generation
  plus kernels, is what a run's runtime compares with, as a run generates its inputs in
  its tasks). The targets compare with it;
- the same reference in the benchmark's own process (``numpy_in_process``), after each
  repeat's runs, as the earlier results measured it: a process that has run before,
  whose time depends on what freed memory just before it (16x, six of each interleaved:
  1.29-1.55 s right after a fresh-process reference had exited, 2.07-2.40 s right after
  its own previous repeat; the fresh-process reference 1.62-2.57 s). Its final arrays
  are compared with the subzero run's (``matches_executor``);
- where the runs executed (``where``: ``driver`` when the CLI ran a small run in its own
  process, :mod:`subzero.engine.placement`); for such a configuration the black box also
  runs as Spark jobs (``--where spark``, ``blackbox_on_spark``, in every repeat between
  the two strategies) and ``spark_over_numpy`` is its runtime over the reference's
  (``numpy``; ``executor_over_numpy_in_process`` is the black box over the in-process one);
- queries, in this process through the Python API (``Home(H).get(run)``), on the first
  subzero run: BQ0-BQ4 and FQ0 (with N CCDs, CCD 1's ``c1.BQ0``... and those of one other
  CCD drawn at random), each called once (``first_s``, the cold call) then
  ``--query-repeat`` times in all (default 20), in blocks after each repeat's runs (this
  machine's load comes in phases of seconds that slow everything by up to 1.8x; a block
  timed at once landed whole in one): median and p95 of all. Query cells are chosen before
  timing, as in ``bench_astronomy``.

Then the fitted slopes (least squares of log time against log cells, over 4x..64x; over
every shape measured when fewer than two of them are at 4x or beyond, the range used is
recorded) and a ``targets`` block: each issue 14 target with its limit, the measured value,
where it was measured, and whether it is met (``null`` when not measured).

Output: the JSON printed and written to ``benchmarks/results/scale.json`` (``--out`` to
write elsewhere), the log-log plot to ``benchmarks/results/png/scale.png`` (``--png DIR``
elsewhere). Before anything is timed, the project's bytecode is compiled (as ``make
bytecode`` does: with ``PYTHONDONTWRITEBYTECODE`` set, each run and each Spark worker would
compile the project anew), the kernels run once on a tiny image (their lazy imports) and,
except with ``--quick``, one tiny CLI run fills the OS caches. ``--quick``
(tiny shapes: base 250 x 64, k = 1, 2, ccds 1, 2, one repeat) writes only where ``--out``
and ``--png`` say, never over the committed results. A configuration the workflow refuses
(e.g. ``ccds`` on a workflow without that parameter) or whose run fails is listed under
``skipped`` with the reason, and the rest goes on.

The full run is long (each 64x run takes minutes; ``--repeat-largest 1`` or ``--scales``
and ``--ccds`` for a subset) and its figures mean something only on an otherwise idle
machine: every figure is a median of side-by-side repeats, but a shared machine's load
lands in them all the same.
"""

from __future__ import annotations

import argparse
import compileall
import importlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, emit, parser, positive_int  # noqa: E402

import subzero  # noqa: E402,F401 - first: one OpenBLAS thread, as in the runs (see its __init__)
import numpy as np  # noqa: E402

import workflows  # noqa: E402
from subzero.api import Home, Run  # noqa: E402
from subzero.cells import Box  # noqa: E402
from subzero.errors import SubZeroError  # noqa: E402
from subzero.modes import Mode  # noqa: E402
from subzero.runtime import ChunkContext, TaskContext  # noqa: E402
from subzero.workflow import Workflow  # noqa: E402

WORKFLOW = "astronomy"
STRATEGIES = ("blackbox", "subzero")
#: the project's packages, compiled to bytecode before anything is timed
PACKAGES = ("subzero", "operators", "encoders", "optimizer", "workflows")
#: the black box forced onto Spark jobs (``--where spark``), measured too in configurations
#: whose runs the CLI placed in its own process (:mod:`subzero.engine.placement`)
ON_SPARK = "blackbox-on-spark"
NUMPY = "numpy"  # the reference in a fresh process, placed among the runs of a repeat
QUERIES = ("BQ0", "BQ1", "BQ2", "BQ3", "BQ4", "FQ0")
BASE = (2001, 513)
QUICK_BASE = (250, 64)
RESULTS = ROOT / "benchmarks" / "results"
CCD_SEED = 14  # which other CCD's queries are timed
BLACKBOX_ONLY = frozenset({Mode.BLACKBOX})

#: issue 14's targets: (key, what is measured, limit)
TARGETS = (
    ("executor_over_numpy_16x_plus",
     "black-box runtime / numpy (in a fresh process) at 16x and beyond", 1.5),
    ("executor_over_numpy_1x", "black-box runtime / numpy (in a fresh process) at 1x", 5.0),
    ("subzero_over_blackbox", "subzero runtime / black-box runtime, every configuration", 1.05),
    ("lineage_over_input", "subzero lineage bytes / input bytes, every configuration", 0.1),
    ("bq_median_s", "BQ0-BQ4 in-process median, every configuration", 0.005),
    ("fq0_median_s", "FQ0 in-process median, every configuration", 0.001),
    ("runtime_slope",
     "slope of log runtime against log cells, 4x..64x (black box and subzero)", 1.05),
    ("driver_rss_over_exposure",
     "driver peak RSS at 64x / bytes of one exposure (strictly below)", 2.0),
    ("cli_overhead_s", "subzero run wall time - reported runtime (median per configuration)",
     4.0),
)


class BenchError(Exception):
    """A configuration that could not be measured (reported under ``skipped``)."""


@dataclass(frozen=True)
class Config:
    """One measured configuration: the shape of each exposure and the number of CCDs."""

    name: str
    k: int  # the shape's factor per axis
    shape: tuple[int, int]
    ccds: int
    base_cells: int  # cells of one exposure at 1x

    @property
    def cells(self) -> int:
        """Cells of one exposure of every CCD (the plots' x axis)."""
        return self.shape[0] * self.shape[1] * self.ccds

    @property
    def factor(self) -> float:
        return self.cells / self.base_cells

    @property
    def exposure_bytes(self) -> int:
        """Bytes of one exposure (uint16) of one CCD."""
        return self.shape[0] * self.shape[1] * 2

    def params(self) -> dict[str, str]:
        """Workflow parameters, as the CLI would give them (``ccds`` only when > 1, so a
        workflow without the parameter still runs the shape configurations)."""
        out = {"shape": f"{self.shape[0]}x{self.shape[1]}"}
        if self.ccds > 1:
            out["ccds"] = str(self.ccds)
        return out


def configurations(base: tuple[int, int], scales: Sequence[int], ccds: Sequence[int]
                   ) -> list[Config]:
    """The shape configurations (ccds 1), then the CCD ones at 1x (ccds 1 is the 1x shape
    configuration, listed once)."""
    cells = base[0] * base[1]
    out = [Config(f"{k * k}x", k, (base[0] * k, base[1] * k), 1, cells) for k in scales]
    have = {(c.k, c.ccds) for c in out}
    for n in ccds:
        if (1, n) not in have:
            out.append(Config(f"1x-ccds{n}", 1, base, n, cells))
            have.add((1, n))
    return out


# ---------------------------------------------------------------------------------------
# runs: fresh CLI subprocesses
# ---------------------------------------------------------------------------------------


#: where a Linux guest with free page reporting (virtio-balloon) counts the free memory it
#: has handed back to its host, in KiB; absent elsewhere
REPORTED_KIB = Path("/sys/module/page_reporting/parameters/reported_kib")


def host_reclaimed() -> int | None:
    """Bytes of free memory this machine has handed back to its host so far (free page
    reporting), None where it does not report. Memory handed back costs its next user a
    fault at the host on first touch: on this machine a fresh page, anonymous or page
    cache, costs about 2.2 ms of CPU per MB where one freed a moment before costs 0.1-0.14
    (writing 800 MB to new files 1.8-2.1 s, overwriting cached pages 0.11 s; see the module
    docstring)."""
    try:
        return int(REPORTED_KIB.read_text()) * 1024
    except (OSError, ValueError):
        return None


def _reclaimed_since(before: int | None) -> int | None:
    after = host_reclaimed()
    return None if before is None or after is None else after - before


def cli_run(cfg: Config, strategy: str, home: Path, master: str | None = None,
            where: str = "auto") -> dict[str, Any]:
    """One ``subzero run`` in a fresh process; its JSON figures and its wall time."""
    cmd = [sys.executable, "-m", "subzero.cli", "run", WORKFLOW, "--home", str(home),
           "--strategy", strategy, "--json", "--where", where]
    for k, v in cfg.params().items():
        cmd += ["--param", f"{k}={v}"]
    if master:
        cmd += ["--master", master]
    home.mkdir(parents=True, exist_ok=True)
    out_path, err_path = home.parent / f"{home.name}.out", home.parent / f"{home.name}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        reclaimed = host_reclaimed()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage (peak RSS)
        wall = time.perf_counter() - t0
    reclaimed = _reclaimed_since(reclaimed)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    out_path.unlink()
    err_path.unlink()
    if proc.returncode != 0:
        lines = stderr.strip().splitlines() or [f"exit code {proc.returncode}"]
        raise BenchError(f"{strategy} run failed (exit {proc.returncode}): {lines[-1]}")
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as e:
        raise BenchError(f"{strategy} run printed no JSON ({e}): {stdout[:200]!r}") from None
    runtime = float(doc["runtime_s"])
    # wait4's ru_maxrss (KiB on Linux): the CLI process, until it exits (the summary
    # included). Linux carries a parent's peak into a forked child's ru_maxrss, so it is
    # at least this benchmark process's own peak at the fork (the numpy reference holds
    # whole arrays): only a fallback; the engine reports the driver's VmHWM, its own peak
    cli_rss = int(usage.ru_maxrss) * 1024
    engine_rss = doc.get("driver_peak_rss")
    return {
        "run": doc["run"], "runtime_s": runtime, "wall_s": wall, "overhead_s": wall - runtime,
        "input_bytes": int(doc["input_bytes"]), "lineage_bytes": int(doc["lineage_bytes"]),
        "driver_peak_rss": int(engine_rss) if engine_rss else cli_rss,
        "driver_rss_source": "engine" if engine_rss else "wait4",
        "cli_peak_rss": cli_rss,
        "stages": doc.get("stages"), "concurrency": doc.get("concurrency"),
        "operators": len(doc.get("operators", [])),
        "where": (doc.get("placement") or {}).get("where", "spark"),
        "host_reclaimed_bytes": reclaimed,
    }


def retire(home: Path) -> None:
    """Free a measured run's disk space without freeing its inodes: every file emptied,
    the folders kept, all removed when the benchmark ends. On a journal-less ext4 (this
    machine's disk) an inode freed in the last minute or more is skipped, one bitmap
    check at a time, by every new inode of its block group (``recently_deleted``): after
    a run's 2,400 files and folders were removed, the next run's each new file or folder
    cost 0.6-0.8 ms of kernel time where it costs 0.03 ms elsewhere on the same disk (200
    shard-like folders of 2 files: 3.2-3.7 against 0.13-0.25 ms each). Deleting each home
    after its run made every run pay for the one before, and a strategy storing shards
    more than another."""
    for dirpath, _, files in os.walk(home):
        for f in files:
            try:
                os.truncate(os.path.join(dirpath, f), 0)
            except OSError:
                pass


def _median_known(values: Sequence[int | None]) -> float | None:
    """The median of the values measured (None where none was)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a strategy's runs (peak RSS: the largest), with the runs under
    ``times`` (per-repeat figures, which compare.py does not compare)."""
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("runtime_s", "wall_s", "overhead_s")}
    rss = [r["driver_peak_rss"] for r in runs if r["driver_peak_rss"] is not None]
    last = runs[-1]
    return {**med, "host_reclaimed_bytes": _median_known(
                [r.get("host_reclaimed_bytes") for r in runs]),
            "input_bytes": last["input_bytes"], "lineage_bytes": last["lineage_bytes"],
            "lineage_over_input": last["lineage_bytes"] / last["input_bytes"],
            "driver_peak_rss": max(rss) if rss else None,
            "cli_peak_rss": max(r["cli_peak_rss"] for r in runs),
            "stages": last["stages"], "concurrency": last["concurrency"],
            "operators": last["operators"], "where": sorted({r["where"] for r in runs}),
            "times": runs}


# ---------------------------------------------------------------------------------------
# the physical reference: the same kernels on whole numpy arrays
# ---------------------------------------------------------------------------------------


def build(cfg: Config) -> Workflow:
    """The configuration's workflow, validated (a refused parameter raises SubZeroError)."""
    return workflows.build(WORKFLOW, **cfg.params()).validate()


def releases(wf: Workflow) -> list[list[str]]:
    """Per position in ``wf.order``: the arrays no later operator reads (dropped there, so
    the reference holds what a streaming executor would, not every intermediate)."""
    last: dict[str, int] = {}
    for pos, name in enumerate(wf.order):
        last[name] = pos  # an array nobody reads goes right after it is made
        for src in wf.nodes[name].inputs:
            last[src] = pos
    out: list[list[str]] = [[] for _ in wf.order]
    for name, pos in last.items():
        out[pos].append(name)
    return out


def run_kernels(wf: Workflow, inputs: dict[str, np.ndarray], drop: list[list[str]],
                keep: frozenset[str] = frozenset()) -> dict[str, np.ndarray]:
    """Every operator of ``wf`` once, on whole arrays, black box: what one Spark task
    does with a chunk that is the whole array, without zarr. Returns the ``keep`` arrays."""
    live = dict(inputs)
    kept = {}
    for pos, name in enumerate(wf.order):
        op = wf.ops[name]
        box = Box.full(op.out_shape)
        srcs = wf.nodes[name].inputs
        in_boxes = tuple(op.input_box(box, i) for i in range(len(srcs)))
        blocks = [live[s][b.slices] if b.ndim else live[s] for s, b in zip(srcs, in_boxes)]
        chunk = ChunkContext((0,) * len(op.out_shape), box, in_boxes, op.out_shape,
                             op.in_shapes)
        out = np.asarray(op.run(TaskContext(chunk, BLACKBOX_ONLY, name), *blocks))
        if out.dtype != op.out_dtype and op.out_dtype.kind not in "UOT":
            out = out.astype(op.out_dtype)  # as the executor's task does before writing
        live[name] = out
        if name in keep:
            kept[name] = out
        for done in drop[pos]:
            live.pop(done, None)
    return kept


def sinks(wf: Workflow) -> frozenset[str]:
    """The operators no other operator reads (the workflow's results)."""
    read = {s for node in wf.nodes.values() for s in node.inputs}
    return frozenset(n for n in wf.order if n not in read)


def reference_child(params: dict[str, str]) -> dict[str, Any]:
    """The reference as a fresh process measures it (what ``--reference-child`` prints):
    the kernels' modules imported (as a run imports them before its clock), the inputs
    generated (timed apart: ``generate_s``), then every kernel once (``runtime_s``, its
    CPU time ``cpu_s`` and what the machine handed back meanwhile)."""
    wf = workflows.build(WORKFLOW, **params).validate()
    for name in sorted({m for op in wf.ops.values() for m in op.imports}):
        importlib.import_module(name)
    t0 = time.perf_counter()
    inputs = {name: np.asarray(spec.source()) for name, spec in wf.inputs.items()}
    generate = time.perf_counter() - t0
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    reclaimed = host_reclaimed()
    t0 = time.perf_counter()
    run_kernels(wf, inputs, releases(wf))
    runtime = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"runtime_s": runtime, "generate_s": generate,
            "cpu_s": (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime),
            "host_reclaimed_bytes": _reclaimed_since(reclaimed)}


def reference_process(cfg: Config) -> dict[str, Any]:
    """One measurement of the reference in a fresh process (:func:`reference_child`), as
    every run is one: a process's first touch of memory the machine handed back costs it
    (``host_reclaimed_bytes``), and a fresh process touches all of its memory for the
    first time, where the in-process reference reuses memory freed around it."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--reference-child",
           json.dumps(cfg.params())]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines() or [f"exit code {p.returncode}"]
        raise BenchError(f"the numpy reference failed (exit {p.returncode}): {lines[-1]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def summarize_references(refs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the fresh-process references (``with_inputs_s``: of each one's
    generation plus kernels), with each one under ``times``."""
    med = {k: statistics.median(r[k] for r in refs) for k in ("runtime_s", "generate_s",
                                                              "cpu_s")}
    return {**med, "with_inputs_s": statistics.median(r["runtime_s"] + r["generate_s"]
                                                      for r in refs),
            "host_reclaimed_bytes": _median_known([r["host_reclaimed_bytes"] for r in refs]),
            "times": [r["runtime_s"] for r in refs], "runs": refs}


class Reference:
    """The numpy reference of one configuration in this process: inputs generated once,
    kernels timed (in a process that has run before, on memory freed around it: see
    :func:`reference_process` for the reference measured as the runs are)."""

    def __init__(self, cfg: Config) -> None:
        self.wf = build(cfg)
        t0 = time.perf_counter()
        self.inputs = {name: np.asarray(spec.source()) for name, spec in self.wf.inputs.items()}
        self.generate_s = time.perf_counter() - t0
        self.drop = releases(self.wf)
        self.keep = sinks(self.wf)
        self.times: list[float] = []
        self.reclaimed: list[int | None] = []  # host_reclaimed_bytes of each repeat
        self.outputs: dict[str, np.ndarray] = {}

    def measure(self) -> None:
        reclaimed = host_reclaimed()
        t0 = time.perf_counter()
        self.outputs = run_kernels(self.wf, self.inputs, self.drop, self.keep)
        self.times.append(time.perf_counter() - t0)
        self.reclaimed.append(_reclaimed_since(reclaimed))

    def summary(self) -> dict[str, Any]:
        return {"runtime_s": statistics.median(self.times), "times": self.times,
                "host_reclaimed_bytes": _median_known(self.reclaimed),
                "generate_s": self.generate_s, "operators": len(self.wf.order)}


def matches(run: Run, outputs: dict[str, np.ndarray]) -> dict[str, bool]:
    """Per final array: whether the executor's equals the reference's."""
    return {name: bool(np.array_equal(run.array(name), arr,
                                      equal_nan=arr.dtype.kind in "fc"))
            for name, arr in sorted(outputs.items())}


# ---------------------------------------------------------------------------------------
# queries, in process
# ---------------------------------------------------------------------------------------


def ccd_prefixes(names: Sequence[str], ccds: int, seed: int = CCD_SEED) -> list[str]:
    """The query-name prefixes to time: ``[""]`` with one CCD; else CCD 1's (``"c1."``,
    or the lowest there is) and one other drawn at random.

    >>> ccd_prefixes(["BQ0", "FQ0"], 1)
    ['']
    >>> ccd_prefixes(["c1.BQ0", "c2.BQ0", "c3.BQ0"], 3, seed=0)[0]
    'c1.'
    """
    if ccds <= 1:
        return [""]
    found = sorted({n.split(".", 1)[0] for n in names if "." in n},
                   key=lambda p: (len(p), p))
    if not found:
        return [""]
    first = "c1" if "c1" in found else found[0]
    others = [p for p in found if p != first]
    out = [first]
    if others:
        out.append(others[int(np.random.default_rng(seed).integers(len(others)))])
    return [f"{p}." for p in out]


def time_query(run: Run, name: str, repeat: int, first: bool = True) -> dict[str, Any]:
    """One named query: the cells chosen first (not timed), one cold call (``first``),
    then ``repeat`` timed calls."""
    cells = run.named_query_cells(name)
    t0 = time.perf_counter()
    res = run.named_query(name, cells=cells)
    cold = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run.named_query(name, cells=cells)
        times.append(time.perf_counter() - t0)
    out = {"median_s": statistics.median(times), "p95_s": float(np.percentile(times, 95)),
           "count": int(res.count), "array": res.array,
           "methods": [f"{s.operator}:{s.method}" for s in res.steps], "times": times}
    if first:
        out["first_s"] = cold
    return out


def _query_run(home: Path, rid: str) -> Run:
    """The run the benchmark queries (its queries stay out of the run's workload log)."""
    run = Home(home).get(rid)
    run.query_executor(log=False)
    return run


def time_queries(run: Run, ccds: int, repeat: int,
                 before: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every query of :data:`QUERIES` (of the CCDs :func:`ccd_prefixes` draws), timed
    ``repeat`` times; with ``before`` (an earlier block's records), this block's times are
    added to theirs and the median and p95 are of them all."""
    names = list(run.workflow.queries)
    out = []
    k = 0
    for prefix in ccd_prefixes(names, ccds):
        for q in QUERIES:
            name = prefix + q
            rec: dict[str, Any] = {"query": name, "kind": q, "ccd": prefix.rstrip(".") or None}
            old = before[k] if before is not None else None
            k += 1
            if name not in run.workflow.queries:
                rec["error"] = f"the run has no named query {name!r}"
            elif old is not None and "error" in old:
                rec["error"] = old["error"]
            else:
                try:
                    rec.update(time_query(run, name, repeat, first=old is None))
                except SubZeroError as e:  # e.g. no cosmic ray to trace in a tiny image
                    rec["error"] = str(e)
                if old is not None and "times" in rec:
                    times = old["times"] + rec["times"]
                    rec.update(old, times=times, median_s=statistics.median(times),
                               p95_s=float(np.percentile(times, 95)),
                               blocks=old.get("blocks", 1) + 1)
            out.append(rec)
    return out


# ---------------------------------------------------------------------------------------
# one configuration
# ---------------------------------------------------------------------------------------


def repeat_order(rep: int) -> list[str]:
    """What repeat ``rep`` runs, in order: the two strategies interleaved, alternating
    which goes first, so that load and place hit both alike; the black box as Spark jobs
    between them (where the CLI ran the configuration in its own process; skipped
    otherwise); the fresh-process reference in each place in turn, the same place for both
    halves of a pair of repeats.

    The place matters on this machine: a run right after the Spark run (whose JVM frees
    GBs as it exits) is the quick one. A first version moved the reference every repeat,
    which took that place from subzero twice in ten repeats and never from the black box:
    at 16x the black box ran 2.03-2.30 s in its five runs right after the Spark run and
    2.46-3.06 s elsewhere, and subzero over black box came out 1.12 (0.96 and 1.05 in the
    two runs before). Over each pair of repeats, every strategy now comes after the same
    runs as the other (:func:`predecessors`).

    >>> repeat_order(0)
    ['numpy', 'blackbox', 'blackbox-on-spark', 'subzero']
    >>> repeat_order(1)
    ['numpy', 'subzero', 'blackbox-on-spark', 'blackbox']
    >>> repeat_order(4)
    ['blackbox', 'blackbox-on-spark', 'numpy', 'subzero']
    """
    order = list(STRATEGIES if rep % 2 == 0 else STRATEGIES[::-1])
    order.insert(1, ON_SPARK)
    order.insert((rep // 2) % 4, NUMPY)
    return order


def predecessors(repeats: int, spark: bool = True) -> dict[str, list[str | None]]:
    """For each strategy, what ran right before each of its runs over ``repeats`` repeats
    (None: first of its repeat), sorted; ``spark`` False skips the Spark run, as a
    configuration the CLI sends to Spark anyway does."""
    out: dict[str, list[str | None]] = {s: [] for s in STRATEGIES}
    for rep in range(repeats):
        order = [s for s in repeat_order(rep) if spark or s != ON_SPARK]
        for i, s in enumerate(order):
            if s in out:
                out[s].append(order[i - 1] if i else None)
    return {s: sorted(v, key=str) for s, v in out.items()}


def measure(cfg: Config, tmp: Path, repeat: int, query_repeat: int, master: str | None,
            log: Callable[[str], None]) -> dict[str, Any]:
    """Every figure of one configuration (raises BenchError when it cannot be measured)."""
    try:
        ref = Reference(cfg)
    except SubZeroError as e:
        raise BenchError(f"the workflow refuses {cfg.params()}: {e}") from None
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in (*STRATEGIES, ON_SPARK)}
    fresh: list[dict[str, Any]] = []  # the reference in a fresh process, as the runs
    kept: Path | None = None  # the first subzero run's home, queried after each repeat
    run: Run | None = None
    queries: list[dict[str, Any]] | None = None
    try:
        for rep in range(repeat):
            for strategy in repeat_order(rep):
                if strategy == ON_SPARK and not (runs["blackbox"]
                                                 and runs["blackbox"][0]["where"] == "driver"):
                    continue
                if strategy == NUMPY:
                    fresh.append(reference_process(cfg))
                    log(f"{cfg.name} numpy (fresh process) #{rep}: "
                        f"{fresh[-1]['runtime_s']:.2f} s")
                    continue
                home = tmp / f"{cfg.name}-{strategy}-{rep}"
                r = cli_run(cfg, "blackbox" if strategy == ON_SPARK else strategy, home,
                            master, "spark" if strategy == ON_SPARK else "auto")
                log(f"{cfg.name} {strategy} #{rep}: runtime {r['runtime_s']:.2f} s, "
                    f"wall {r['wall_s']:.2f} s ({r['where']})")
                runs[strategy].append(r)
                if strategy == "subzero" and kept is None:
                    kept = home
                else:
                    retire(home)
            ref.measure()
            log(f"{cfg.name} numpy (this process) #{rep}: {ref.times[-1]:.2f} s")
            # the queries, a block of them after each repeat on the first subzero run:
            # spread over the configuration's minutes, so that a phase of a shared
            # machine's load lands in a few of their times, not all of them
            if kept is not None:
                run = run or _query_run(kept, runs["subzero"][0]["run"])
                queries = time_queries(run, cfg.ccds, max(1, -(-query_repeat // repeat)),
                                       queries)
        assert kept is not None and run is not None and queries is not None
        same = matches(run, ref.outputs)
    finally:
        if run is not None:
            run.query_executor().close()
        if kept is not None:
            retire(kept)
    bb, sz = summarize_runs(runs["blackbox"]), summarize_runs(runs["subzero"])
    on_spark = summarize_runs(runs[ON_SPARK]) if runs[ON_SPARK] else None
    npy, warm = summarize_references(fresh), ref.summary()
    rss = [v for v in (bb["driver_peak_rss"], sz["driver_peak_rss"]) if v is not None]
    overheads = [r["overhead_s"] for s in STRATEGIES for r in runs[s]]
    return {
        "name": cfg.name, "k": cfg.k, "shape": list(cfg.shape), "ccds": cfg.ccds,
        "cells": cfg.cells, "factor": cfg.factor, "exposure_bytes": cfg.exposure_bytes,
        "repeat": repeat, "blackbox": bb, "subzero": sz, "numpy": npy,
        "numpy_in_process": warm,
        "executor_over_numpy": bb["runtime_s"] / npy["runtime_s"],
        # a run's runtime includes producing its inputs (generated in its tasks); the
        # reference's kernels do not: this one compares like with like
        "executor_over_numpy_with_inputs": bb["runtime_s"] / npy["with_inputs_s"],
        # against the reference in this process (as the results before it was timed in
        # fresh processes)
        "executor_over_numpy_in_process": bb["runtime_s"] / warm["runtime_s"],
        "subzero_over_blackbox": sz["runtime_s"] / bb["runtime_s"],
        # where the CLI chose its own process (a small run): the black box as Spark jobs
        "blackbox_on_spark": on_spark,
        "spark_over_numpy": (on_spark or bb)["runtime_s"] / npy["runtime_s"],
        "lineage_over_input": sz["lineage_over_input"],
        "driver_peak_rss": max(rss) if rss else None,
        "rss_over_exposure": max(rss) / cfg.exposure_bytes if rss else None,
        "cli_overhead_s": statistics.median(overheads),
        "query_run": runs["subzero"][0]["run"], "queries": queries,
        "matches_executor": all(same.values()) if same else None, "final_arrays": same,
    }


# ---------------------------------------------------------------------------------------
# slopes and targets
# ---------------------------------------------------------------------------------------


def fit_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of log(y) against log(x); None with fewer than two distinct
    x or a non-positive value.

    >>> round(fit_slope([1, 4, 16], [2, 8, 32]), 6)
    1.0
    """
    pts = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if len({x for x, _ in pts}) < 2 or any(x <= 0 or y <= 0 for x, y in pts):
        return None
    lx, ly = np.log([x for x, _ in pts]), np.log([y for _, y in pts])
    return float(np.polyfit(lx, ly, 1)[0])


def _query_median(row: dict[str, Any], kind: str) -> float | None:
    """The median of query ``kind`` (BQ0...) on the first CCD timed."""
    for q in row["queries"]:
        if q["kind"] == kind and "median_s" in q:
            return q["median_s"]
    return None


def slopes(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Fitted slopes against cells: the shape series over 4x..64x (all its points when
    fewer than two are at 4x or beyond), and the CCD series (1x shape, every N)."""
    shape = sorted((r for r in rows if r["ccds"] == 1), key=lambda r: r["cells"])
    fit = [r for r in shape if r["factor"] >= 4] if sum(r["factor"] >= 4 for r in shape) >= 2 \
        else shape
    ccd = sorted((r for r in rows if r["k"] == 1), key=lambda r: r["ccds"])

    def series(rs: list[dict[str, Any]]) -> dict[str, Any]:
        xs = [r["cells"] for r in rs]
        out: dict[str, Any] = {
            "factors": [r["factor"] for r in rs],
            "blackbox_runtime": fit_slope(xs, [r["blackbox"]["runtime_s"] for r in rs]),
            "subzero_runtime": fit_slope(xs, [r["subzero"]["runtime_s"] for r in rs]),
            "numpy_runtime": fit_slope(xs, [r["numpy"]["runtime_s"] for r in rs]),
            "numpy_in_process_runtime": fit_slope(
                xs, [(r.get("numpy_in_process") or r["numpy"])["runtime_s"] for r in rs]),
            "driver_peak_rss": fit_slope(xs, [r["driver_peak_rss"] for r in rs]),
        }
        out["queries"] = {q: fit_slope(xs, [_query_median(r, q) for r in rs]) for q in QUERIES}
        return out

    return {"shape": series(fit), "ccds": series(ccd)}


def _target(limit: float, value: float | None, at: Any, strict: bool = False,
            note: str | None = None) -> dict[str, Any]:
    met = None if value is None else bool(value < limit if strict else value <= limit)
    out = {"limit": limit, "value": value, "at": at, "met": met}
    if note:
        out["note"] = note
    return out


def _worst(pairs: list[tuple[Any, float | None]]) -> tuple[Any, float | None]:
    """The (where, value) with the largest value, ignoring unmeasured ones."""
    have = [(w, v) for w, v in pairs if v is not None]
    return max(have, key=lambda p: p[1]) if have else (None, None)


def targets(rows: list[dict[str, Any]], fitted: dict[str, Any]) -> dict[str, Any]:
    """Issue 14's targets, evaluated on what was measured (never assumed): for each, the
    limit, the measured value (the worst where it applies to every configuration), where,
    and whether it is met (None when nothing was measured for it)."""
    shape = [r for r in rows if r["ccds"] == 1]
    limits = {key: limit for key, _, limit in TARGETS}
    what = {key: text for key, text, _ in TARGETS}
    out: dict[str, Any] = {}

    def warm(rs: list[dict[str, Any]]) -> str:
        """The same ratio against the reference in the benchmark's process."""
        have = [r["executor_over_numpy_in_process"] for r in rs
                if r.get("executor_over_numpy_in_process") is not None]
        return (f"against the reference in the benchmark's own process {max(have):.2f}x"
                if have else "")

    big = [r for r in shape if r["factor"] >= 16]
    at, v = _worst([(r["name"], r["executor_over_numpy"]) for r in big])
    out["executor_over_numpy_16x_plus"] = _target(
        limits["executor_over_numpy_16x_plus"], v, at,
        note=warm(big) or None if big else "no configuration at 16x or beyond was measured")
    one = [r for r in shape if r["factor"] == 1]
    at, v = _worst([(r["name"], r["executor_over_numpy"]) for r in one])
    spark = [r["spark_over_numpy"] for r in one if r.get("blackbox_on_spark")]
    notes = ([f"run in the CLI's own process (placement); as Spark jobs {max(spark):.2f}x"]
             if spark else []) + ([warm(one)] if warm(one) else [])
    out["executor_over_numpy_1x"] = _target(
        limits["executor_over_numpy_1x"], v, at, note="; ".join(notes) or None)
    for key in ("subzero_over_blackbox", "lineage_over_input", "cli_overhead_s"):
        at, v = _worst([(r["name"], r[key]) for r in rows])
        out[key] = _target(limits[key], v, at)
    bq = [(f"{r['name']}:{q['query']}", q.get("median_s")) for r in rows for q in r["queries"]
          if q["kind"].startswith("BQ")]
    fq = [(f"{r['name']}:{q['query']}", q.get("median_s")) for r in rows for q in r["queries"]
          if q["kind"] == "FQ0"]
    for key, pairs in (("bq_median_s", bq), ("fq0_median_s", fq)):
        at, v = _worst(pairs)
        missing = [w for w, m in pairs if m is None]
        out[key] = _target(limits[key], v, at,
                           note=f"not measured: {', '.join(missing)}" if missing else None)
    sh = fitted["shape"]
    at, v = _worst([("blackbox", sh["blackbox_runtime"]), ("subzero", sh["subzero_runtime"])])
    full = sh["factors"] and min(sh["factors"]) >= 4 and max(sh["factors"]) >= 64
    out["runtime_slope"] = _target(
        limits["runtime_slope"], v, {"strategy": at, "factors": sh["factors"]},
        note=None if full else "fitted over the shapes measured, not 4x..64x")
    largest = max(shape, key=lambda r: r["cells"], default=None)
    out["driver_rss_over_exposure"] = _target(
        limits["driver_rss_over_exposure"],
        None if largest is None else largest["rss_over_exposure"],
        None if largest is None else largest["name"], strict=True,
        note=None if largest is None or largest["factor"] >= 64
        else "64x not measured: at the largest shape measured")
    for key, t in out.items():
        t["target"] = what[key]
    return out


# ---------------------------------------------------------------------------------------
# the plot
# ---------------------------------------------------------------------------------------


def plot(doc: dict[str, Any], path: Path) -> None:
    """Log-log: runtimes (black box, subzero, numpy, and the black box as Spark jobs where
    the CLI ran in its own process) and query medians against cells; the shape series
    solid, the CCD series dashed."""
    # matplotlib only when a plot is written (pyplot's import costs about half a second)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["configurations"]
    series = [("shape", "-", "o", sorted((r for r in rows if r["ccds"] == 1),
                                         key=lambda r: r["cells"])),
              ("ccds", "--", "s", sorted((r for r in rows if r["k"] == 1),
                                         key=lambda r: r["ccds"]))]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = {"blackbox": "tab:blue", "subzero": "tab:orange", "numpy": "tab:green"}
    for label, ls, marker, rs in series:
        if not rs or (label == "ccds" and len(rs) < 2):
            continue
        xs = [r["cells"] for r in rs]
        for key, color in colors.items():
            axes[0].plot(xs, [r[key]["runtime_s"] for r in rs], ls, marker=marker,
                         color=color, label=f"{key} ({label})")
        warm = [(r["cells"], r["numpy_in_process"]["runtime_s"]) for r in rs
                if r.get("numpy_in_process")]
        if warm:
            axes[0].plot(*zip(*warm), ":", marker=marker, color="tab:olive",
                         label=f"numpy, the benchmark's process ({label})")
        # where the CLI ran in its own process: the black box as Spark jobs, for comparison
        spark = [(r["cells"], (r.get("blackbox_on_spark") or r["blackbox"])["runtime_s"])
                 for r in rs if r.get("blackbox_on_spark")]
        if spark:
            axes[0].plot(*zip(*spark), ls, marker="x", color="tab:purple",
                         label=f"blackbox as Spark jobs ({label})")
        for i, q in enumerate(QUERIES):
            ys = [_query_median(r, q) for r in rs]
            pts = [(x, y * 1e3) for x, y in zip(xs, ys) if y is not None]
            if pts:
                axes[1].plot(*zip(*pts), ls, marker=marker, color=f"C{i}",
                             label=f"{q} ({label})")
    axes[0].set_ylabel("workflow runtime (s)")
    axes[0].set_title("capture: runtime against cells")
    axes[1].set_ylabel("query median (ms)")
    axes[1].set_title("queries in process: median against cells")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("cells (one exposure x CCDs)")
        ax.legend(fontsize=7, ncol=2)
        ax.grid(True, which="both", alpha=0.3)
    factors = [r["factor"] for r in series[0][3]]
    span = f"{min(factors):g}x..{max(factors):g}x" if factors else "none"
    fig.suptitle(f"Astronomy at scale (solid: exposure shape {span}; dashed: CCDs at 1x)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    vals = [int(v) for v in text.split(",") if v.strip()]
    if not vals or min(vals) < 1:
        raise ValueError(text)
    return vals


def _shape(text: str) -> tuple[int, int]:
    r, c = (int(v) for v in text.lower().split("x"))
    return r, c


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--png", help="write the plot into this folder (default "
                   "benchmarks/results/png, not with --quick)")
    p.add_argument("--repeat", type=positive_int, help="runs per strategy and configuration, "
                   "an even count (default 4; --quick 1)")
    p.add_argument("--repeat-largest", type=positive_int,
                   help="runs per strategy for the largest configurations (default --repeat)")
    p.add_argument("--scales", type=_ints, help="shape factors per axis k: shape (R k, C k) "
                   "(default 1,2,4,8; --quick 1,2)")
    p.add_argument("--ccds", type=_ints, help="CCD counts at 1x (default 1,4,16; --quick 1,2)")
    p.add_argument("--base", type=_shape, help="the 1x exposure shape RxC (default 2001x513; "
                   "--quick 250x64)")
    p.add_argument("--query-repeat", type=int, default=20,
                   help="timed calls per query after the cold one (default 20)")
    p.add_argument("--master", help="Spark master URL for the runs (default the CLI's)")
    p.add_argument("--reference-child", help=argparse.SUPPRESS)  # reference_process's
    args = p.parse_args(argv)
    if args.reference_child:
        print(json.dumps(reference_child(json.loads(args.reference_child))))
        return
    quick = args.quick
    repeat = args.repeat or (1 if quick else 4)
    repeat_largest = args.repeat_largest or repeat
    base = args.base or (QUICK_BASE if quick else BASE)
    configs = configurations(base, args.scales or ([1, 2] if quick else [1, 2, 4, 8]),
                             args.ccds or ([1, 2] if quick else [1, 4, 16]))
    out = args.out or (None if quick else str(RESULTS / "scale.json"))
    png = args.png or (None if quick else str(RESULTS / "png"))
    largest = max(c.cells for c in configs)

    def log(msg: str) -> None:
        print(f"[scale] {msg}", file=sys.stderr, flush=True)

    if not quick and (repeat % 2 or repeat_largest % 2):
        log(f"an odd count of repeats ({repeat}, {repeat_largest} for the largest) lets one "
            "strategy go first once more than the other; the place matters here")

    tmp = Path(tempfile.mkdtemp(prefix="sz-bench-scale-"))
    rows, skipped = [], []
    t_start = time.perf_counter()
    try:
        for pkg in PACKAGES:  # what `make bytecode` does: runs and workers compile nothing
            compileall.compile_dir(str(ROOT / pkg), quiet=1)
        warm = Config("warm", 1, (200, 100), 1, 1)
        Reference(warm).measure()  # the kernels' lazy imports (scipy): not measured
        if not quick:  # fill the OS caches (jars, Python modules): not measured
            cli_run(warm, "subzero", tmp / "warm", args.master)
            retire(tmp / "warm")
        for cfg in configs:
            n = repeat_largest if cfg.cells == largest else repeat
            try:
                rows.append(measure(cfg, tmp, n, args.query_repeat, args.master, log))
            except BenchError as e:
                log(f"{cfg.name}: skipped: {e}")
                skipped.append({"name": cfg.name, "k": cfg.k, "ccds": cfg.ccds,
                                "shape": list(cfg.shape), "reason": str(e)})
    finally:  # every home at once, after the last measurement (see retire)
        shutil.rmtree(tmp, ignore_errors=True)
    fitted = slopes(rows)
    doc = {"benchmark": "scale", "workflow": WORKFLOW, "quick": quick, "base": list(base),
           "repeat": repeat, "repeat_largest": repeat_largest,
           "query_repeat": args.query_repeat, "master": args.master or "default",
           "configurations": rows, "skipped": skipped, "slopes": fitted,
           "targets": targets(rows, fitted),
           "total_s": time.perf_counter() - t_start}
    if png and rows:
        plot(doc, Path(png) / "scale.png")
    emit(doc, out)


if __name__ == "__main__":
    main()
