"""Whether a run fits this machine, checked before anything is written.

A run stores every array it computes, and a global operator's task holds its whole inputs
and output in memory. Both are known from the bound workflow's shapes and dtypes before a
single task runs, so a workflow scaled past the disk or the memory (``--param shape=...``,
``ccds=...``) fails at once with one line naming its size and the limit, instead of after
hours with a full disk and a broken run.

The folders of failed runs hold space the new run may have: they do not count against it
(:func:`check_fits` removes them when the run needs their space). The check also finishes
removals of runs that were interrupted (:mod:`subzero.engine.remove`) before a new run
is given an id, which may be a removed run's.

>>> from operators import Cast
>>> wf = Workflow("w")
>>> _ = wf.input("x", (1000, 1000), "uint16")
>>> _ = wf.add("f", Cast("float64"), "x")
>>> array_bytes(wf.validate())  # 2 MB of input, 8 MB of output
10000000
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from subzero.engine import arrays
from subzero.engine.remove import make_room
from subzero.errors import StoreError, WorkflowError
from subzero.sizes import human_bytes
from subzero.workflow import Workflow

#: a global task's working set, in multiples of its inputs and output (kernels' temporaries)
WORKING_SET = 3
#: bytes per cell a whole-array input source may hold on the driver while it makes the
#: array (a generator's float64 image and coordinate grids, the cast to the input's dtype)
WHOLE_INPUT_CELL_BYTES = 32


def _what(wf: Workflow) -> str:
    shown = {k: v for k, v in wf.params.items() if k in ("shape", "ccds", "scale")}
    if "shape" in shown and isinstance(shown["shape"], (list, tuple)):
        shown["shape"] = "x".join(str(v) for v in shown["shape"])
    args = ", ".join(f"{k}={v}" for k, v in shown.items())
    return f"workflow {wf.name!r}" + (f" with {args}" if args else "")


def array_bytes(wf: Workflow) -> int:
    """Bytes of every array a run of the validated ``wf`` stores, uncompressed."""
    total = sum(arrays.logical_bytes(s.shape, s.dtype) for s in wf.inputs.values())
    return total + sum(arrays.logical_bytes(op.out_shape, op.out_dtype)
                       for op in wf.ops.values())


def global_task_bytes(wf: Workflow) -> tuple[int, str | None]:
    """The largest working set of one global operator's task, and that operator."""
    best, who = 0, None
    for name in wf.order:
        op = wf.ops[name]
        if op.parallelism.kind != "global":
            continue
        need = arrays.logical_bytes(op.out_shape, op.out_dtype) + sum(
            arrays.logical_bytes(s, d) for s, d in zip(op.in_shapes, op.in_dtypes))
        if need > best:
            best, who = need, name
    return best * WORKING_SET, who


def whole_input_bytes(wf: Workflow, paths: Mapping[str, str] | None = None
                      ) -> tuple[int, str | None]:
    """The largest input the driver makes whole (a ``source`` without ``blocks``, or a
    file read by a ``loader``), in bytes of memory while it is made, and its name."""
    best, who = 0, None
    for name, spec in wf.inputs.items():
        if spec.blocks is not None and name not in (paths or {}):
            continue  # made box by box in the tasks
        if name in (paths or {}) and spec.loader is None:
            continue  # a file read chunk by chunk through a memory map
        cells = int(np.prod(spec.shape, dtype=np.int64))
        need = max(arrays.logical_bytes(spec.shape, spec.dtype), cells * WHOLE_INPUT_CELL_BYTES)
        if need > best:
            best, who = need, name
    return best, who


def physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 0


def free_disk(home: Path) -> int:
    p = Path(home)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def check_fits(wf: Workflow, home: Path, paths: Mapping[str, str] | None = None,
               notify: Callable[[str], None] | None = None) -> None:
    """Raise a one-line error when a run of ``wf`` (with input files ``paths``) cannot fit
    on the home's disk or in this machine's memory.

    The folders of failed runs do not count against the disk: when the run lacks space
    that they hold, they are removed, oldest first, until it fits
    (:func:`subzero.engine.remove.make_room`, which also finishes removals that were
    interrupted); ``notify`` hears each one. They are removed only once every other check
    passed, and none is when they would not free enough.
    """
    need = array_bytes(wf)
    free = free_disk(home)
    room = make_room(home, need - free, dry_run=True) if need > free else 0
    if need > free + room:
        raise StoreError(
            f"{_what(wf)} would store up to {human_bytes(need)} of arrays; the home {home} has "
            f"{human_bytes(free + room)} free ('subzero gc --older-than AGE' or 'subzero rm "
            "RUN' frees the space of runs you no longer need)")
    task, who = global_task_bytes(wf)
    mem = physical_memory()
    if mem and task > mem:
        raise WorkflowError(
            f"{_what(wf)} is too large for this machine: operator {who!r} sees whole "
            f"arrays in one task and needs about {human_bytes(task)} of memory; this machine "
            f"has {human_bytes(mem)}")
    whole, name = whole_input_bytes(wf, paths)
    if mem and whole > mem:
        raise WorkflowError(
            f"{_what(wf)} is too large for this machine: input {name!r} is made whole in "
            f"the driver's memory and needs about {human_bytes(whole)}; this machine has "
            f"{human_bytes(mem)}")
    make_room(home, need - free, notify)
