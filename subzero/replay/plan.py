"""What a replay may touch, from the workflow alone: which runs can be replayed, which
operators a change is replayed through, and which arrays it can be foreseen to reach
(before any lineage is read)."""

from __future__ import annotations

from typing import Any, Sequence

from subzero.engine.runs import LoadedRun
from subzero.errors import ReplayError, StoreError

__all__ = ["check_status", "check_replay", "needed", "foreseen", "last_reads", "sinks",
           "cells_of"]


def cells_of(shape: Sequence[int]) -> int:
    """The cells of an array of ``shape``.

    >>> cells_of((3, 4))
    12
    """
    n = 1
    for s in shape:
        n *= int(s)
    return n


def check_status(info: dict[str, Any]) -> None:
    """Only a complete run can be replayed.

    Parameters
    ----------
    info
        The run's catalog row.

    Raises
    ------
    ReplayError
        The run is not complete (failed, still running).

    Examples
    --------
    >>> check_status({"id": "r2", "status": "failed", "error": "killed"})
    Traceback (most recent call last):
    ...
    subzero.errors.ReplayError: run r2 is failed (killed); only a complete run can be replayed
    """
    status = info.get("status")
    if status != "complete":
        err = f" ({info['error']})" if info.get("error") else ""
        raise ReplayError(f"run {info['id']} is {status}{err}; only a complete run can be "
                          "replayed")


def check_replay(run: LoadedRun, array: str, to: Sequence[str] | None) -> None:
    """A run that can be replayed from ``array`` to ``to``: complete, holding them.

    Parameters
    ----------
    run
        The run to replay.
    array
        The array whose cells change.
    to
        The arrays the replay is limited to (None: everything downstream).

    Raises
    ------
    StoreError
        The run has no such array.
    ReplayError
        The run is not complete, an array of ``to`` is not downstream of ``array``, or the
        run lacks an array the replay needs (a derived run made with ``to``).
    """
    check_status(run.info)
    for name in [array, *(to or [])]:
        if name not in run.arrays:
            raise StoreError(f"run {run.id} has no array {name!r} (arrays: "
                             f"{', '.join(run.arrays)})")
    wf = run.workflow
    down = needed(wf, array, None)
    for t in to or []:
        if t not in down:
            raise ReplayError(f"--to {t}: array {t} is not downstream of {array} in run "
                              f"{run.id} (downstream: {', '.join(sorted(down)) or 'none'})")
    ops = needed(wf, array, to)
    for name in [n for n in wf.order if n in ops]:  # a derived run made with --to may
        for a in (*wf.nodes[name].inputs, name):     # lack some: the first one, in order
            if a not in run.arrays:
                raise ReplayError(f"run {run.id} has no array {a!r}, which replaying {array} "
                                  f"needs (left out of it by --to?); replay run "
                                  f"{run.info.get('parent') or 'its parent'} instead, or "
                                  "limit this replay with --to")


def needed(wf: Any, start: str, to: Sequence[str] | None) -> set[str]:
    """The operators to replay: downstream of ``start`` and, when ``to`` is given, upstream
    of (or one of) those arrays."""
    down: set[str] = set()
    for name in wf.order:
        if any(s == start or s in down for s in wf.nodes[name].inputs):
            down.add(name)
    if not to:
        return down
    up: set[str] = set()
    todo = [t for t in to if t in wf.nodes]
    while todo:
        n = todo.pop()
        if n not in up:
            up.add(n)
            todo.extend(s for s in wf.nodes[n].inputs if s in wf.nodes)
    return down & up


def foreseen(wf: Any, start: str, ops: set[str]) -> dict[str, bool]:
    """The replayed operators (``ops``) a change of some cells of ``start`` can be
    foreseen to reach, in run order, each with whether it reaches them whole (True) or
    only near the changed cells (False).

    Foreseen from the workflow alone, before any lineage is read: an operator of
    ``start``'s shape reading a reached array of that shape is reached near the cells; a
    global one reading a reached array, one reading an array reached whole, and one
    broadcasting a reached array (fewer cells than its output) is reached whole; any other
    (a subarray, a reduction's cell) may not be reached at all, and neither is what reads
    only it: a 1 x 1 overscan cut far from the changed cells does not make everything
    after its mean a whole read."""
    shape = tuple(wf.array_shape(start))
    state: dict[str, bool] = {start: False}  # reached array -> reached whole
    out: dict[str, bool] = {}
    for name in wf.order:
        if name not in ops:
            continue
        op = wf.ops[name]
        got = [s for s in wf.nodes[name].inputs if s in state]
        if not got:
            continue
        size = cells_of(op.out_shape)
        if (op.parallelism.kind == "global" or any(state[s] for s in got)
                or any(cells_of(wf.array_shape(s)) < size for s in got)):
            state[name] = out[name] = True
        elif tuple(op.out_shape) == shape and any(
                tuple(wf.array_shape(s)) == shape for s in got):
            state[name] = out[name] = False
    return out


def last_reads(wf: Any, start: str, ops: set[str]) -> dict[str, int]:
    """For each array a replay of ``ops`` may hold chunks of, the step (index in
    ``wf.order``) of the last operator that reads or makes it."""
    last: dict[str, int] = {start: -1}
    for step, name in enumerate(wf.order):
        if name in ops or name == start:
            for a in (*wf.nodes[name].inputs, name):
                last[a] = step
    return last


def sinks(wf: Any) -> list[str]:
    """The arrays of ``wf`` no operator reads, in run order."""
    used = {s for node in wf.nodes.values() for s in node.inputs}
    return [n for n in wf.order if n not in used]
