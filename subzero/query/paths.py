"""Query paths through a workflow's DAG (paper IV): checked explicit paths, and the steps
of every path between two arrays.

A path is a list of ``(operator, input index)`` steps. A query given a target instead
(``to=``) follows every path between its start and target; lineage distributes over
unions, so walking the operators between them once, in (reverse) topological order, gives
the union of the per-path answers: :func:`dag_steps` lists those steps, for the query
executor and for the optimizer's workload alike.
"""

from __future__ import annotations

import heapq
import itertools
import re
from collections import deque
from typing import Callable, Sequence

from subzero.errors import QueryError
from subzero.workflow import Workflow


def parse_path(text: str, what: str = "--path") -> list[tuple[str, int]]:
    """Text form ``op:index,op:index,...``: each step names an operator and which of its
    inputs the path goes through (0 for the first). A step without ``:index`` is refused
    rather than guessed, since guessing input 0 of a binary operator traces the wrong branch.
    ``what`` names the field in errors (``--path`` for the CLI, ``path`` for the API).

    >>> parse_path("clust:0,rmcr:0")
    [('clust', 0), ('rmcr', 0)]
    """
    out = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        name, colon, idx = (s.strip() for s in part.partition(":"))
        if not colon or not name or not re.fullmatch(r"\d+", idx):
            raise QueryError(f"{what} step {part[:80]!r}: expected op:index, an operator and "
                             f"the input it goes through (e.g. {name[:40] or 'op'}:0)")
        out.append((name, int(idx)))
    if not out:
        raise QueryError(f"{what} {text[:80]!r}: expected op:index,op:index,...")
    return out


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
    # each array's next (step, array) inside ``between``, and its distance to the target
    nxt: dict[str, list[tuple[tuple[str, int], str]]] = {}
    for array in between:
        if direction == "backward":
            nxt[array] = [((array, i), src) for i, src in enumerate(wf.nodes[array].inputs)
                          if src in between] if array in wf.nodes else []
        else:
            nxt[array] = [((op, i), op) for op, i in users.get(array, ()) if op in between]
    back: dict[str, list[str]] = {}
    for array, moves in nxt.items():
        for _, there in moves:
            back.setdefault(there, []).append(array)
    dist, todo = {target: 0}, deque([target])
    while todo:
        a = todo.popleft()
        for b in back.get(a, ()):
            if b not in dist:
                dist[b] = dist[a] + 1
                todo.append(b)
    # best first on (length so far + shortest rest): with that exact estimate, paths come out
    # shortest first and each takes at most its length in pops
    out: list[list[tuple[str, int]]] = []
    heap: list[tuple[int, int, int, str, list[tuple[str, int]]]] = []
    count = itertools.count()
    heapq.heappush(heap, (dist[start], 0, next(count), start, []))
    while heap and len(out) < limit:
        *_, array, steps = heapq.heappop(heap)
        if array == target:
            out.append(steps)
            continue
        for step, there in nxt[array]:
            if there in dist:
                g = len(steps) + 1
                heapq.heappush(heap, (g + dist[there], -g, next(count), there, steps + [step]))
    return out


def path_labels(wf: Workflow, paths: Sequence[Sequence[tuple[str, int]]],
                whole: Callable[[str, int], bool]) -> list[str]:
    """For each path, what sets it apart from the others: its steps that are not on every
    path, as ``"via a, b:1, c (global)"``. A step is named by its operator, with the input
    index when the operator is on every path (then the input is the difference) or takes
    more than one input through these paths; ``(global)`` marks a whole-input step
    (``whole(operator, input)``, :meth:`subzero.operator.Operator.whole_input`). A single
    path is ``"the only path"``.

    >>> from operators import Binary, MeanBroadcast
    >>> wf = Workflow("w")
    >>> _ = wf.input("x", (2, 2), "f8"), wf.add("m", MeanBroadcast(), "x")
    >>> _ = wf.add("d", Binary("subtract"), "x", "m")
    >>> path_labels(wf, [[("d", 0)], [("d", 1), ("m", 0)]], lambda op, i: op == "m")
    ['via d:0', 'via d:1, m (global)']
    """
    if len(paths) <= 1:
        return ["the only path"] * len(paths)
    common = set.intersection(*(set(p) for p in paths))
    ops_everywhere = set.intersection(*({op for op, _ in p} for p in paths))
    inputs_used: dict[str, set[int]] = {}
    for p in paths:
        for op, i in p:
            inputs_used.setdefault(op, set()).add(i)
    out = []
    for p in paths:
        names = []
        for op, i in p:
            if (op, i) in common:
                continue
            name = f"{op}:{i}" if op in ops_everywhere or len(inputs_used[op]) > 1 else op
            names.append(name + (" (global)" if whole(op, i) else ""))
        out.append("via " + ", ".join(names) if names else "the shared steps only")
    return out
