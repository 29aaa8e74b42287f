"""Declaring a workflow: a DAG of operators over named arrays.

>>> import numpy as np
>>> from operators import Affine, Convolve
>>> wf = Workflow("tiny")
>>> wf.input("image", shape=(8, 8), dtype="float64",
...          source=lambda: np.arange(64.0).reshape(8, 8))
'image'
>>> wf.add("scaled", Affine(2.0), "image")
'scaled'
>>> wf.add("smooth", Convolve(np.ones((3, 3)) / 9), "scaled")
'smooth'
>>> wf.validate().order
['scaled', 'smooth']

Every operator's output array is named after the operator. Operators may be declared in
any order; :meth:`Workflow.validate` checks, before anything runs, that every input exists,
the graph has no cycle, names are unique and shapes fit, and binds each operator to its
input shapes. :meth:`Workflow.plan` turns a workflow-level strategy name (``subzero``,
``blackbox``, ``full-one``...) or an explicit plan into one list of strategies per operator
and checks each against the modes the operator supports.
"""

from __future__ import annotations

import re
from functools import partial
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from subzero.cells import Box, size_of
from subzero.errors import ModeError, ShapeError, StoreError, WorkflowError
from subzero.modes import (
    BLACKBOX, COMP_MANY_BWD, COMP_ONE_BWD, FULL_COMPACT_BWD, FULL_MANY_BWD, FULL_ONE_BWD,
    FULL_ONE_FWD, MAP, PAY_MANY_BWD, PAY_ONE_BWD, Mode, Strategy, capture_modes,
)
from subzero.operator import Operator

Shape = tuple[int, ...]
Plan = dict[str, list[Strategy]]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def parse_name(name: str, what: str = "name") -> str:
    """An array/operator name usable as a file name, or an error naming it."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise StoreError(
            f"{what} {name!r} is not valid: use letters, digits, '_', '-' or '.', "
            "starting with a letter or '_'"
        )
    return name


@dataclass
class InputSpec:
    """A workflow input: its shape and dtype, and where its data comes from by default.

    ``blocks(box)`` generates any box of the input (deterministic, and the same values
    however the array is cut): the engine's tasks call it chunk by chunk, so a large
    generated input never exists whole on the driver. ``source()`` gives the whole array
    at once (derived from ``blocks`` when only that is given); ``loader(path)`` reads a user
    file whole (without one, the engine reads ``.npy`` and FITS files chunk by chunk).
    ``path`` is a file read by default, like ``--input NAME=PATH`` (e.g. real data the
    workflow found); ``origin`` says how the default data is made, for the catalog
    (e.g. ``"generated, seed 0, shape 2001x513"``).
    """

    name: str
    shape: Shape
    dtype: np.dtype
    source: Callable[[], np.ndarray] | None = None
    loader: Callable[[str], np.ndarray] | None = None
    description: str = ""
    #: a constant the workflow supplies itself (a mask, a calibration frame): stored like
    #: any input but not counted in the run's input bytes
    auxiliary: bool = False
    blocks: Callable[[Box], np.ndarray] | None = None
    path: str | None = None
    origin: str = ""

    def __post_init__(self) -> None:
        if self.source is None and self.blocks is not None:
            self.source = partial(_whole, self.blocks, self.shape)


def _whole(blocks: Callable[[Box], np.ndarray], shape: Shape) -> np.ndarray:
    return np.asarray(blocks(Box.full(shape)))


@dataclass
class OpNode:
    name: str
    op: Operator  # unbound until validate
    inputs: tuple[str, ...]


@dataclass
class NamedQuery:
    """A lineage query a workflow ships with (``subzero query RUN --named NAME``).

    ``cells(run)`` returns the query cells (chosen with a fixed seed) given the finished
    run (a :class:`subzero.api.Run`), so that queries can pick, e.g., star pixels.
    """

    name: str
    direction: str  # "backward" | "forward"
    start: str
    cells: Callable[[Any], Any]
    to: str | None = None
    path: list[tuple[str, int]] | None = None
    description: str = ""


#: the longest axis a shape parameter may ask for (2**31 - 1 cells)
MAX_AXIS = 2 ** 31 - 1


def parse_shape_param(value: Any, ndim: int = 2, minimum: int = 1) -> Shape:
    """A workflow's shape parameter from the CLI (``"2001x513"``) or Python (a tuple).

    >>> parse_shape_param("2001x513")
    (2001, 513)
    """
    given = value
    if isinstance(value, str):
        value = value.lower().replace(",", "x").split("x")
    try:
        shape = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        shape = ()
    if len(shape) != ndim or min(shape) < minimum or max(shape) > MAX_AXIS:
        example = "x".join(["2001", "513"][:ndim]) if ndim <= 2 else "x".join(["8"] * ndim)
        raise WorkflowError(f"shape must be {ndim} ints >= {minimum} like {example} (at most "
                            f"{MAX_AXIS} per axis). Got {given!r}.")
    return shape


class Workflow:
    """A workflow specification (paper section IV: ``W = (N, E)``)."""

    def __init__(self, name: str, description: str = "", params: Mapping[str, Any] | None = None
                 ) -> None:
        self.name = name
        self.description = description
        self.params: dict[str, Any] = dict(params or {})
        self.inputs: dict[str, InputSpec] = {}
        self.nodes: dict[str, OpNode] = {}
        self.plans: dict[str, Callable[[Any], list[Strategy]]] = dict(GENERIC_PLANS)
        self.queries: dict[str, NamedQuery] = {}
        self.order: list[str] = []
        self.ops: dict[str, Operator] = {}  # bound operators, after validate()
        #: where the workflow came from (``{"target": "pkg.mod:build", "params": {...}}``),
        #: recorded in a run's manifest
        self.source: dict[str, Any] | None = None
        self._valid = False

    # -- declaring -------------------------------------------------------------------------
    def _check_new(self, name: str) -> str:
        parse_name(name, "array name")
        if name in self.inputs or name in self.nodes:
            raise WorkflowError(f"duplicate name {name!r} in workflow {self.name!r}")
        return name

    def input(self, name: str, shape: Sequence[int], dtype: Any = "float64",
              source: Callable[[], np.ndarray] | None = None,
              loader: Callable[[str], np.ndarray] | None = None, description: str = "",
              auxiliary: bool = False,
              blocks: Callable[[Box], np.ndarray] | None = None, path: str | None = None,
              origin: str = "") -> str:
        """Declare an input array (``auxiliary``: a constant not counted as input data;
        ``blocks``: a generator of any box; ``path``: a file read by default; ``origin``:
        how the default data is made; see :class:`InputSpec`)."""
        self._check_new(name)
        try:
            shp = tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            raise ShapeError(f"input {name!r}: shape must be ints. Got {shape!r}.") from None
        if any(s < 0 for s in shp):
            raise ShapeError(f"input {name!r}: shape must be non-negative. Got {shp}.")
        self.inputs[name] = InputSpec(name, shp, np.dtype(dtype), source, loader, description,
                                      auxiliary, blocks, path, origin)
        self._valid = False
        return name

    def add(self, name: str, op: Any, *inputs: str) -> str:
        """Add operator ``op`` named ``name`` reading the named arrays, in input order.
        ``op`` is an operator, or an operator class made with its defaults (a function
        decorated with :mod:`operators.udf`)."""
        self._check_new(name)
        if isinstance(op, type) and issubclass(op, Operator):
            op = op()  # an operator class taking no parameters (a decorated function)
        if not isinstance(op, Operator):
            raise WorkflowError(
                f"operator {name!r} must be an operators.Operator instance. Got {op!r}."
            )
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        self.nodes[name] = OpNode(name, op, tuple(inputs))
        self._valid = False
        return name

    def plan_named(self, name: str, rule: Callable[[Any], list[Strategy]]) -> None:
        """Register a workflow-level strategy: ``rule(bound_op) -> strategies``."""
        self.plans[name] = rule

    def query(self, q: NamedQuery) -> None:
        self.queries[q.name] = q

    # -- validating ------------------------------------------------------------------------
    def validate(self) -> "Workflow":
        """Check the DAG and bind every operator; raise naming the culprit."""
        if self._valid:
            return self
        if not self.nodes:
            raise WorkflowError(f"workflow {self.name!r} has no operators")
        known = set(self.inputs) | set(self.nodes)
        for node in self.nodes.values():
            if not node.inputs:
                raise WorkflowError(f"operator {node.name!r} has no inputs")
            for src in node.inputs:
                if src not in known:
                    raise WorkflowError(
                        f"operator {node.name!r} reads unknown array {src!r} "
                        f"(known: {', '.join(sorted(known))})"
                    )
        # Kahn's algorithm, keeping declaration order among ready operators
        indeg = {n: sum(1 for s in node.inputs if s in self.nodes)
                 for n, node in self.nodes.items()}
        users: dict[str, list[str]] = {n: [] for n in self.nodes}
        for n, node in self.nodes.items():
            for s in node.inputs:
                if s in self.nodes:
                    users[s].append(n)
        ready = [n for n in self.nodes if indeg[n] == 0]
        order: list[str] = []
        while ready:
            n = ready.pop(0)
            order.append(n)
            for u in users[n]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if len(order) != len(self.nodes):
            stuck = sorted(n for n in self.nodes if n not in order)
            raise WorkflowError(
                f"workflow {self.name!r} has a cycle through operator(s) {', '.join(stuck)}"
            )
        shapes: dict[str, Shape] = {n: s.shape for n, s in self.inputs.items()}
        dtypes: dict[str, np.dtype] = {n: s.dtype for n, s in self.inputs.items()}
        ops: dict[str, Any] = {}
        for n in order:
            node = self.nodes[n]
            try:
                bound = node.op.bind(n, [shapes[s] for s in node.inputs],
                                     [dtypes[s] for s in node.inputs])
            except ShapeError as e:
                msg = str(e)
                raise ShapeError(msg if repr(n) in msg else f"operator {n!r}: {msg}") from None
            shapes[n] = bound.out_shape
            dtypes[n] = bound.out_dtype
            ops[n] = bound
        self.order, self.ops = order, ops
        self._valid = True
        return self

    # -- introspection ---------------------------------------------------------------------
    def array_shape(self, name: str) -> Shape:
        self.validate()
        if name in self.inputs:
            return self.inputs[name].shape
        if name in self.ops:
            return self.ops[name].out_shape
        raise WorkflowError(f"workflow {self.name!r} has no array {name!r}")

    def parts(self) -> list[list[str]]:
        """The workflow's independent parts: its operators grouped by connection (an
        operator reading another's output joins its part; inputs, which parts may share,
        such as a visit's calibration frames, join none), largest first by output cells.

        >>> wf = Workflow("w"); _ = wf.input("x", (4,)); _ = wf.input("y", (2,))
        >>> from operators.elementwise import Unary
        >>> for a, b, src in (("a", "b", "x"), ("c", "d", "y")):
        ...     _ = wf.add(a, Unary("negative"), src); _ = wf.add(b, Unary("negative"), a)
        >>> wf.parts()
        [['a', 'b'], ['c', 'd']]
        """
        self.validate()
        root = {n: n for n in self.order}

        def find(n: str) -> str:
            while root[n] != n:
                root[n] = root[root[n]]
                n = root[n]
            return n

        for n in self.order:
            for src in self.nodes[n].inputs:
                if src in self.nodes:
                    root[find(src)] = find(n)
        groups: dict[str, list[str]] = {}
        for n in self.order:
            groups.setdefault(find(n), []).append(n)
        return sorted(groups.values(), key=lambda g: -sum(size_of(self.ops[n].out_shape)
                                                          for n in g))

    def producers(self) -> dict[str, str | None]:
        return {**{n: None for n in self.inputs}, **{n: n for n in self.nodes}}

    def consumers(self, array: str) -> list[tuple[str, int]]:
        """Operators reading ``array``, with the input index they read it at."""
        return [(n, i) for n, node in self.nodes.items() for i, s in enumerate(node.inputs)
                if s == array]

    # -- plans -----------------------------------------------------------------------------
    def plan(self, strategy: str | Mapping[str, Sequence[str | Strategy]] | None) -> Plan:
        """Resolve a workflow-level strategy name or an explicit ``{op: [strategy, ...]}``
        plan (operators left out get ``map`` where supported, else ``blackbox``) into a
        checked plan for every operator."""
        self.validate()
        if strategy is None:
            strategy = "subzero"
        if isinstance(strategy, str):
            if strategy not in self.plans:
                raise ModeError(
                    f"unknown strategy {strategy!r} for workflow {self.name!r}; expected one "
                    f"of {', '.join(sorted(self.plans))}"
                )
            rule = self.plans[strategy]
            raw = {n: rule(self.ops[n]) for n in self.order}
        else:
            for n in strategy:
                if n not in self.ops:
                    raise WorkflowError(
                        f"plan names operator {n!r}, which is not in workflow {self.name!r}"
                    )
            raw = {}
            for n in self.order:
                given = strategy.get(n)
                raw[n] = ([Strategy.parse(s) for s in given] if given
                          else plan_blackbox_opt(self.ops[n]))
        return {n: check_strategies(self.ops[n], ss) for n, ss in raw.items()}


def check_strategies(op: Any, strategies: Sequence[Strategy]) -> list[Strategy]:
    """Dedupe ``strategies`` and check each against what ``op`` supports."""
    out: list[Strategy] = []
    for s in strategies:
        s = Strategy.parse(s) if not isinstance(s, Strategy) else s
        if s not in out:
            out.append(s)
    if not out:
        raise ModeError(f"operator {op.name!r} needs at least one strategy")
    sup = op.supported_modes() | {Mode.BLACKBOX}
    for s in out:
        if s.mode not in sup:
            raise ModeError(
                f"operator {op.name!r} does not support mode {s.mode} for strategy {s.name} "
                f"(supports {', '.join(sorted(m.value for m in sup))})"
            )
    capture_modes(out)  # rejects PAY together with COMP
    return out


# ---------------------------------------------------------------------------------------
# workflow-level strategies (paper Table II), usable by every workflow
# ---------------------------------------------------------------------------------------


def _sup(op: Any) -> frozenset[Mode]:
    return op.supported_modes()


def plan_blackbox(op: Any) -> list[Strategy]:
    return [BLACKBOX]


def plan_blackbox_opt(op: Any) -> list[Strategy]:
    return [MAP] if Mode.MAP in _sup(op) else [BLACKBOX]


class _udf_rule:
    """Mapping where the operator has it, else the first of ``choices`` (a mode and its
    strategies) that the operator supports, else black box. A class, not a closure, so
    that a bound workflow pickles without cloudpickle (and loads without pyspark)."""

    def __init__(self, *choices: tuple[Mode, list[Strategy]]) -> None:
        self.choices = choices

    def __call__(self, op: Any) -> list[Strategy]:
        if Mode.MAP in _sup(op):
            return [MAP]
        for mode, strategies in self.choices:
            if mode in _sup(op):
                return list(strategies)
        return [BLACKBOX]


GENERIC_PLANS: dict[str, Callable[[Any], list[Strategy]]] = {
    "blackbox": plan_blackbox,
    "blackbox-opt": plan_blackbox_opt,
    "full-one": _udf_rule((Mode.FULL, [FULL_ONE_BWD])),
    "full-many": _udf_rule((Mode.FULL, [FULL_MANY_BWD])),
    "full-compact": _udf_rule((Mode.FULL, [FULL_COMPACT_BWD])),
    "full-forw": _udf_rule((Mode.FULL, [FULL_ONE_FWD])),
    "full-both": _udf_rule((Mode.FULL, [FULL_ONE_BWD, FULL_ONE_FWD])),
    "pay-one": _udf_rule((Mode.PAY, [PAY_ONE_BWD]), (Mode.FULL, [FULL_ONE_BWD])),
    "pay-many": _udf_rule((Mode.PAY, [PAY_MANY_BWD]), (Mode.FULL, [FULL_MANY_BWD])),
    "pay-both": _udf_rule((Mode.PAY, [PAY_ONE_BWD, FULL_ONE_FWD]),
                          (Mode.FULL, [FULL_ONE_BWD, FULL_ONE_FWD])),
    "comp-many": _udf_rule((Mode.COMP, [COMP_MANY_BWD]), (Mode.PAY, [PAY_MANY_BWD]),
                           (Mode.FULL, [FULL_MANY_BWD])),
    # SubZero's own choice (paper Table II "Subzero"): mapping for built-ins, composite
    # lineage where the operator has it, else payload, else full
    "subzero": _udf_rule((Mode.COMP, [COMP_ONE_BWD]), (Mode.PAY, [PAY_ONE_BWD]),
                         (Mode.FULL, [FULL_ONE_BWD])),
}
