"""Query paths through a workflow's DAG (paper IV): checked explicit paths, and the steps
of every path between two arrays.

A path is a list of ``(operator, input index)`` steps. A query given a target instead
(``to=``) follows every path between its start and target; lineage distributes over
unions, so walking the operators between them once, in (reverse) topological order, gives
the union of the per-path answers: :func:`dag_steps` lists those steps, for the query
executor and for the optimizer's workload alike.
"""

from __future__ import annotations

from typing import Sequence

from subzero.errors import QueryError
from subzero.workflow import Workflow


def check_array(wf: Workflow, run: str, name: str) -> None:
    """Raise unless ``name`` is an array (input or operator output) of the workflow."""
    if name not in wf.inputs and name not in wf.ops:
        raise QueryError(f"run {run} has no array {name!r} "
                         f"(arrays: {', '.join([*wf.inputs, *wf.order])})")


def check_path(wf: Workflow, run: str, direction: str, path: Sequence[tuple[str, int]],
               start: str | None) -> tuple[list[tuple[str, int]], str, str]:
    """``(steps, start array, target array)`` of an explicit path, or an error naming the
    step that does not connect."""
    steps = []
    for k, step in enumerate(path):
        try:
            op_name, idx = step
            idx = int(idx)
        except (TypeError, ValueError):
            raise QueryError(f"path step {k + 1} must be (operator, input index). "
                             f"Got {step!r}.") from None
        if op_name not in wf.ops:
            raise QueryError(f"operator {op_name!r} is not in run {run} "
                             f"(operators: {', '.join(wf.order)})")
        n_in = len(wf.nodes[op_name].inputs)
        if not 0 <= idx < n_in:
            raise QueryError(f"operator {op_name!r} has {n_in} input(s); input index {idx} "
                             f"is out of range")
        steps.append((op_name, idx))
    if not steps:
        raise QueryError("the path is empty")
    if direction == "backward":
        first = steps[0][0]
        if start is not None and start != first:
            raise QueryError(f"a backward path starts at the operator that produced the "
                             f"cells: path starts at {first!r}, cells are in {start!r}")
        for k in range(len(steps) - 1):
            (op, i), (nxt, _) = steps[k], steps[k + 1]
            src = wf.nodes[op].inputs[i]
            if src != nxt:
                raise QueryError(f"impossible path at step {k + 2}: input {i} of {op!r} is "
                                 f"{src!r}, not the output of {nxt!r}")
        last_op, last_i = steps[-1]
        return steps, first, wf.nodes[last_op].inputs[last_i]
    first_op, first_i = steps[0]
    src = wf.nodes[first_op].inputs[first_i]
    if start is not None and start != src:
        raise QueryError(f"a forward path's first step reads the start array: input "
                         f"{first_i} of {first_op!r} is {src!r}, not {start!r}")
    for k in range(len(steps) - 1):
        (op, _), (nxt, j) = steps[k], steps[k + 1]
        if wf.nodes[nxt].inputs[j] != op:
            raise QueryError(f"impossible path at step {k + 2}: input {j} of {nxt!r} is "
                             f"{wf.nodes[nxt].inputs[j]!r}, not the output of {op!r}")
    return steps, src, steps[-1][0]


def arrays_between(wf: Workflow, direction: str, start: str, target: str) -> set[str]:
    """The arrays on some path between ``start`` and ``target`` (both included)."""
    parents = {n: set(wf.nodes[n].inputs) for n in wf.order}

    def ancestors(a: str) -> set[str]:
        seen, todo = {a}, [a]
        while todo:
            for p in parents.get(todo.pop(), ()):
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return seen

    lo, hi = (target, start) if direction == "backward" else (start, target)
    between = {a for a in ancestors(hi) if lo in ancestors(a)}
    if lo not in between or hi not in between or lo == hi:
        word = "back to" if direction == "backward" else "forward to"
        raise QueryError(f"no path from {start!r} {word} {target!r} in workflow "
                         f"{wf.name!r}")
    return between


def dag_steps(wf: Workflow, direction: str, start: str, target: str) -> list[tuple[str, int]]:
    """Every ``(operator, input)`` on some path from ``start`` to ``target``, in the order
    a walk visits them: reverse topological backward, topological forward, so each step's
    frontier is complete when it is taken."""
    between = arrays_between(wf, direction, start, target)
    backward = direction == "backward"
    steps = []
    for op in (reversed(wf.order) if backward else wf.order):
        if op not in between or (backward and op == target):
            continue
        steps += [(op, i) for i, src in enumerate(wf.nodes[op].inputs) if src in between]
    return steps


def simple_paths(wf: Workflow, direction: str, start: str, target: str,
                 limit: int = 64) -> list[list[tuple[str, int]]]:
    """The paths from ``start`` to ``target`` one by one (at most ``limit``, shortest
    first), each a list of ``(operator, input index)`` steps as :func:`check_path` takes
    them: what a query given a target unions, for choosing one."""
    between = arrays_between(wf, direction, start, target)
    users: dict[str, list[tuple[str, int]]] = {}
    for op in wf.order:
        for i, src in enumerate(wf.nodes[op].inputs):
            users.setdefault(src, []).append((op, i))
    out: list[list[tuple[str, int]]] = []

    def walk(array: str, steps: list[tuple[str, int]]) -> None:
        if len(out) >= limit:
            return
        if array == target:
            out.append(list(steps))
            return
        if direction == "backward":
            nxt = [((array, i), src) for i, src in enumerate(wf.nodes[array].inputs)
                   if src in between] if array in wf.nodes else []
        else:
            nxt = [((op, i), op) for op, i in users.get(array, ()) if op in between]
        for step, there in nxt:
            walk(there, steps + [step])

    walk(start, [])
    return sorted(out, key=len)
