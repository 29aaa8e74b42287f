"""A run's workflow as data: the manifest (``runs/<run>/manifest.json``).

A run stores its workflow as JSON, never as a pickle: the DAG, each operator's class as an
import path (``package.module:Class``) with the arguments it was constructed with, each
input's origin, the named queries, and a record of every module those names point into
(file, SHA-256, distribution and version; :mod:`subzero.codeid`). Loading a run reads the
manifest, checks the module records, and imports the named classes through a
:class:`~subzero.codeid.CodeGate`; nothing in a home is unpickled.

Values are written as plain JSON where JSON has them, and as small tagged objects
otherwise:

=====================  ==================================================================
value                  stored as
=====================  ==================================================================
tuple, set             ``{"$tuple": [...]}``, ``{"$set": [...]}``
non-finite float       ``{"$float": "nan"}`` (and ``"inf"``, ``"-inf"``)
dict with other keys   ``{"$dict": [[key, value], ...]}``
numpy dtype, scalar    ``{"$dtype": "float64"}``, ``{"$scalar": "uint16", "value": 3}``
numpy array            ``{"$array": "float64", "shape": [2], "data": [1.0, 2.0]}``, or
                       ``{"$npy": "<sha256>.npy", ...}``: a file beside the manifest
                       (:data:`INLINE_MAX` cells and more, or non-finite floats)
numpy ufunc            ``{"$ufunc": "add"}``
module-level function  ``{"$ref": "package.module:name"}``
functools.partial      ``{"$partial": <function>, "args": [...], "kwargs": {...}}``
enum member            ``{"$enum": "package.module:Enum", "value": ...}``
operator, dataclass    ``{"$obj": "package.module:Class", "args": [...], "kwargs": {...}}``
=====================  ==================================================================

Anything else (a lambda, a class defined in ``__main__`` or inside a function, an open
file) cannot be written as data, and a run that would need it is refused before it starts,
in one line naming the operator and the parameter.

Decoding constructs only operators (:class:`Recorded` subclasses), dataclasses and enum
members, of modules the manifest records and the gate lets through; a function named by the
manifest is called only when the user asks for what it computes (a named query's cells).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import inspect
import io
import json
import math
import os
import sys
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from subzero.codeid import (ENGINE_PACKAGES, CodeGate, ModuleRecord, ancestors,
                            combined_digest, record)
from subzero.errors import CodeError
from subzero.modes import Mode
from subzero.operator import GLOBAL, Operator, Parallelism, stencil
from subzero.recorded import Recorded

FORMAT = "subzero-manifest"
VERSION = 1
#: arrays of this many cells or more are written to an ``.npy`` file beside the manifest
INLINE_MAX = 1024
_KINDS = "biuf"


# ---------------------------------------------------------------------------------------
# encoding values
# ---------------------------------------------------------------------------------------


class Encoder:
    """Writes values as JSON data, collecting the modules they name and the arrays that go
    beside the manifest (``blobs``, by file name)."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.blobs: dict[str, bytes] = {}

    def ref(self, obj: Any, where: str) -> str:
        """``module:qualname`` of a module-level function or class, or a one-line refusal."""
        module = getattr(obj, "__module__", None)
        qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
        what = "class" if isinstance(obj, type) else "function"
        if module == "__main__":
            raise CodeError(f"{where} is {what} {qualname} defined in __main__ (a script), "
                            "which a later command cannot import: define it in a module "
                            "and import it from there")
        if qualname is None or module is None or "<lambda>" in qualname:
            raise CodeError(f"{where} is a lambda, which cannot be stored as data: use a "
                            "function defined at the top of a module")
        if "<locals>" in qualname:
            raise CodeError(f"{where} is {what} {qualname.replace('.<locals>', '')} defined "
                            "inside a function, which a later command cannot import: define "
                            "it at the top of a module")
        found: Any = __import__(module, fromlist=["_"])
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is not obj:
            raise CodeError(f"{where} is {what} {qualname}, which module {module} does not "
                            f"hold under that name: define it at the top of {module}")
        self.modules.add(module)
        return f"{module}:{qualname}"

    def encode(self, v: Any, where: str) -> Any:
        """``v`` as JSON data; ``where`` names it in a refusal (``operator 'bg' parameter
        'kernel'``)."""
        if isinstance(v, enum.Enum):  # before str and int: Mode is a str, IntEnum an int
            return {"$enum": self.ref(type(v), where), "value": self.encode(v.value, where)}
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, str):
            return str(v)
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            return float(v) if math.isfinite(v) else {"$float": repr(float(v))}
        if isinstance(v, np.ndarray):
            return self._array(v, where)
        if isinstance(v, np.generic):
            if v.dtype.kind not in _KINDS:
                raise CodeError(f"{where} is a numpy {v.dtype} scalar; only booleans, "
                                "integers and floats can be stored as data")
            return {"$scalar": v.dtype.name, "value": self.encode(v.item(), where)}
        if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
            dt = np.dtype(v)
            if dt.kind not in _KINDS + "cSUMmT":
                raise CodeError(f"{where} is dtype {dt}, which cannot be stored as data")
            return {"$dtype": dtype_text(dt)}
        if isinstance(v, tuple) and not hasattr(v, "_fields"):
            return {"$tuple": [self.encode(x, f"{where}[{k}]") for k, x in enumerate(v)]}
        if isinstance(v, list):
            return [self.encode(x, f"{where}[{k}]") for k, x in enumerate(v)]
        if isinstance(v, (set, frozenset)):
            items = [self.encode(x, f"{where} item") for x in v]
            return {"$set": sorted(items, key=lambda x: json.dumps(x, sort_keys=True))}
        if isinstance(v, dict):
            if all(isinstance(k, str) and not k.startswith("$") for k in v):
                return {k: self.encode(x, f"{where}[{k!r}]") for k, x in v.items()}
            return {"$dict": [[self.encode(k, f"{where} key"), self.encode(x, f"{where}[{k!r}]")]
                              for k, x in v.items()]}
        if isinstance(v, os.PathLike):
            return {"$path": os.fspath(v)}
        if isinstance(v, np.ufunc):
            if getattr(np, v.__name__, None) is not v:
                raise CodeError(f"{where} is ufunc {v.__name__}, which is not numpy's")
            return {"$ufunc": v.__name__}
        if isinstance(v, functools.partial):
            return {"$partial": self.encode(v.func, where),
                    "args": [self.encode(x, f"{where} argument {k}")
                             for k, x in enumerate(v.args)],
                    "kwargs": {k: self.encode(x, f"{where} argument {k!r}")
                               for k, x in v.keywords.items()}}
        if isinstance(v, type) or inspect.isfunction(v) or inspect.isbuiltin(v):
            if inspect.isbuiltin(v) and getattr(v, "__self__", None) is not None and \
                    not inspect.ismodule(v.__self__):
                raise CodeError(f"{where} is a bound method, which cannot be stored as data: "
                                "use a function defined at the top of a module")
            return {"$ref": self.ref(v, where)}
        if isinstance(v, Recorded):
            args, kwargs = v.init_args
            return self.obj(type(v), args, kwargs, where)
        if dataclasses.is_dataclass(v):
            fields = {f.name: getattr(v, f.name) for f in dataclasses.fields(v) if f.init}
            return self.obj(type(v), (), fields, where)
        if inspect.ismethod(v):
            raise CodeError(f"{where} is a bound method, which cannot be stored as data: use "
                            "a function defined at the top of a module")
        if isinstance(v, io.IOBase):
            raise CodeError(f"{where} is an open file, which cannot be stored as data: pass "
                            "its path instead")
        raise CodeError(
            f"{where} is a {type(v).__module__}.{type(v).__qualname__}, which cannot be stored "
            "as data: use numbers, strings, lists, dicts, numpy arrays, module-level "
            "functions, or objects of classes that derive from subzero.manifest.Recorded")

    def obj(self, cls: type, args: Iterable[Any], kwargs: Mapping[str, Any], where: str
            ) -> dict[str, Any]:
        out: dict[str, Any] = {"$obj": self.ref(cls, where)}
        args = list(args)
        if args:
            out["args"] = [self.encode(x, f"{where} argument {k}") for k, x in enumerate(args)]
        if kwargs:
            out["kwargs"] = {k: self.encode(x, f"{where} parameter {k!r}")
                             for k, x in kwargs.items()}
        return out

    def _array(self, a: np.ndarray, where: str) -> dict[str, Any]:
        if a.dtype.kind not in _KINDS:
            raise CodeError(f"{where} is a numpy array of {a.dtype}; only booleans, integers "
                            "and floats can be stored as data")
        finite = a.dtype.kind != "f" or bool(np.isfinite(a).all())
        if a.size < INLINE_MAX and finite:
            return {"$array": a.dtype.name, "shape": list(a.shape), "data": a.ravel().tolist()}
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
        data = buf.getvalue()
        name = hashlib.sha256(data).hexdigest() + ".npy"
        self.blobs[name] = data
        return {"$npy": name, "dtype": a.dtype.name, "shape": list(a.shape)}


class Decoder:
    """Reads values :class:`Encoder` wrote; imports only through ``gate``.

    ``blobs(name)`` returns the bytes of an ``.npy`` file beside the manifest, which must
    hash to its name.
    """

    def __init__(self, gate: CodeGate, blobs: Callable[[str], bytes]) -> None:
        self.gate = gate
        self.blobs = blobs

    def decode(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [self.decode(x) for x in v]
        if not isinstance(v, dict):
            raise CodeError(f"the manifest holds {type(v).__name__} {v!r}, not a value")
        tags = [k for k in v if k.startswith("$")]
        if not tags:
            return {k: self.decode(x) for k, x in v.items()}
        tag = tags[0]
        x = v[tag]
        if tag == "$tuple":
            return tuple(self.decode(y) for y in _list(x, tag))
        if tag == "$set":
            return {self.decode(y) for y in _list(x, tag)}
        if tag == "$dict":
            return {self.decode(k): self.decode(y) for k, y in _list(x, tag)}
        if tag == "$float":
            if x not in ("nan", "inf", "-inf"):
                raise CodeError(f"the manifest holds float {x!r}")
            return float(x)
        if tag == "$path":
            return Path(str(x))
        if tag == "$dtype":
            return _dtype(x)
        if tag == "$scalar":
            return _dtype(x).type(self.decode(v.get("value")))
        if tag == "$array":
            dt = _dtype(x)
            shape = tuple(int(s) for s in _list(v.get("shape"), "shape"))
            return np.asarray(_list(v.get("data"), "data"), dtype=dt).reshape(shape)
        if tag == "$npy":
            return self._npy(str(x), v)
        if tag == "$ufunc":
            f = getattr(np, str(x), None)
            if not isinstance(f, np.ufunc):
                raise CodeError(f"the manifest names ufunc {x!r}, which numpy does not have")
            return f
        if tag == "$ref":
            return self._ref(x, callable_only=True)
        if tag == "$partial":
            func = self.decode(x)
            if not callable(func):
                raise CodeError("the manifest holds a partial of something not callable")
            return functools.partial(func, *self.decode(v.get("args", [])),
                                     **self.decode(v.get("kwargs", {})))
        if tag == "$enum":
            cls = self._ref(x)
            if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
                raise CodeError(f"the manifest names {x} as an enum; it is not one")
            return cls(self.decode(v.get("value")))
        if tag == "$obj":
            cls = self._ref(x)
            if not (isinstance(cls, type) and (issubclass(cls, Recorded)
                                               or dataclasses.is_dataclass(cls))):
                raise CodeError(f"the manifest asks to construct {x}, which is neither an "
                                "operator nor a dataclass; refusing")
            args = self.decode(v.get("args", []))
            kwargs = self.decode(v.get("kwargs", {}))
            try:
                return cls(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - the user's constructor, in one line
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise CodeError(f"{x} cannot be rebuilt from its recorded arguments "
                                f"({type(e).__name__}: {msg})") from None
        raise CodeError(f"the manifest holds an unknown tag {tag!r}")

    def _ref(self, path: Any, callable_only: bool = False) -> Any:
        if not isinstance(path, str):
            raise CodeError(f"the manifest names {path!r}; expected module:name")
        obj = self.gate.import_object(path)
        if callable_only and not callable(obj):
            raise CodeError(f"the manifest names {path}, which is not a function or class")
        return obj

    def _npy(self, name: str, v: Mapping[str, Any]) -> np.ndarray:
        if not (name.endswith(".npy") and len(name) == 68 and
                all(c in "0123456789abcdef" for c in name[:64])):
            raise CodeError(f"the manifest names array file {name!r}")
        data = self.blobs(name)
        if hashlib.sha256(data).hexdigest() != name[:64]:
            raise CodeError(f"array file {name} beside the manifest does not match its "
                            "checksum")
        try:
            return np.load(io.BytesIO(data), allow_pickle=False)
        except ValueError as e:
            raise CodeError(f"array file {name} cannot be read ({e})") from None


def _list(x: Any, what: str) -> list:
    if not isinstance(x, list):
        raise CodeError(f"the manifest's {what} is not a list")
    return x


def dtype_text(dt: Any) -> str:
    """A dtype as text :func:`np.dtype` reads back (``"<f8"``; ``"T"``: variable strings).

    >>> dtype_text(np.dtype("float64")), dtype_text(np.dtypes.StringDType())
    ('<f8', 'T')
    """
    dt = np.dtype(dt)
    return "T" if dt.kind == "T" else dt.str


def _dtype(x: Any) -> np.dtype:
    try:
        dt = np.dtype(str(x))
    except TypeError:
        raise CodeError(f"the manifest names dtype {x!r}") from None
    if dt.kind == "O" or dt.fields is not None:
        raise CodeError(f"the manifest names dtype {x!r}, which is not plain data")
    return dt


def same_data(a: Any, b: Any) -> bool:
    """Whether two values hold the same data (numpy arrays by value, NaN equal to NaN);
    values of other kinds (objects built by a constructor) count as the same."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        try:
            return (np.asarray(a).shape == np.asarray(b).shape
                    and bool(np.array_equal(a, b, equal_nan=np.asarray(a).dtype.kind == "f")))
        except (TypeError, ValueError):
            return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(
            same_data(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_data(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (bool, int, float, str, bytes, type(None), np.generic, np.dtype)):
        return type(a) is type(b) and bool(a == b)
    return True


# ---------------------------------------------------------------------------------------
# the workflow as a manifest
# ---------------------------------------------------------------------------------------

#: attributes binding sets on an operator (not constructor state)
_BOUND = frozenset({"name", "in_shapes", "in_dtypes", "out_shape", "out_dtype", "imports",
                    "_init_args"})


def _check_rebuilt(name: str, op: Any, cls_path: str) -> None:
    """Refuse an operator whose state its constructor arguments do not rebuild (an
    attribute set after it was made): the manifest would rebuild a different operator."""
    args, kwargs = op.init_args
    try:
        again = type(op)(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CodeError(f"operator {name!r} ({cls_path}) cannot be rebuilt from the arguments "
                        f"it was made with ({type(e).__name__}: {msg})") from None
    mine = {k: v for k, v in vars(op).items() if k not in _BOUND}
    theirs = {k: v for k, v in vars(again).items() if k not in _BOUND}
    for k in sorted(set(mine) | set(theirs)):
        if k not in mine or k not in theirs or not same_data(mine[k], theirs[k]):
            raise CodeError(f"operator {name!r} ({cls_path}): attribute {k!r} was changed "
                            "after the operator was made, so the run could not rebuild it; "
                            "pass it to the constructor instead")


def _operator_modules(op: Any) -> list[str]:
    """The modules whose code an operator runs: its class's and its base classes' (but
    SubZero's own and the built-ins'), and the helper modules they import from their own
    package or from files outside any installed distribution (a workflow's kernels module),
    so that a change to a helper is seen like a change to the class."""
    return list(_class_modules(type(op)))


@functools.lru_cache(maxsize=None)
def _class_modules(klass: type) -> tuple[str, ...]:
    """:func:`_operator_modules` of an operator class (a module's imports do not change
    while a process runs)."""
    out: list[str] = []
    for cls in klass.__mro__:
        m = cls.__module__
        if m in ("builtins", "abc") or m.split(".")[0] in ENGINE_PACKAGES:
            continue
        if m not in out:
            out.append(m)
    tops = {m.split(".")[0] for m in out}
    todo = list(out)
    while todo:
        for m in _imported(todo.pop()):
            if m not in out and _helper(m, tops):
                out.append(m)
                todo.append(m)
    return tuple(out)


#: SubZero's own packages below the operators, never a workflow's helper
_SUBZERO_LIBRARIES = ("encoders", "optimizer")


def _imported(module: str) -> set[str]:
    """The modules ``module`` uses by name: imported modules and the modules of the
    functions and classes it imports."""
    mod = sys.modules.get(module)
    got: set[str] = set()
    for v in vars(mod).values() if mod is not None else ():
        if isinstance(v, ModuleType):
            got.add(v.__name__)
        elif isinstance(v, (type, FunctionType)) and isinstance(v.__module__, str):
            got.add(v.__module__)
    got.discard(module)
    return got


def _helper(module: str, tops: set[str]) -> bool:
    """Whether ``module`` is user code an operator's module relies on: in the same top-level
    package, or a file on the import path that no installed distribution provides."""
    top = module.split(".")[0]
    if (top in ENGINE_PACKAGES or top in _SUBZERO_LIBRARIES or top in sys.stdlib_module_names
            or module == "__main__"):
        return False
    if top in tops:
        return True
    path = getattr(sys.modules.get(module), "__file__", None)
    return (path is not None and path.endswith(".py")
            and not any(p in ("site-packages", "dist-packages") for p in Path(path).parts))


def workflow_manifest(wf: Any, source: Mapping[str, Any] | None = None,
                      origins: Mapping[str, Any] | None = None
                      ) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Workflow ``wf`` (validated) as a manifest document and the array files beside it.

    ``source`` says where the workflow came from (``{"target": "pkg.mod:build",
    "params": {...}}``), and ``origins`` where each input's data came from in this run
    (:func:`subzero.engine.inputs.input_origins`: a file's path, size and checksum, or how
    the workflow made it), for the record. Raises :class:`~subzero.errors.CodeError` in one
    line for an operator or parameter that cannot be written as data.
    """
    wf.validate()
    enc = Encoder()
    ops = []
    for name in wf.order:
        node, bound = wf.nodes[name], wf.ops[name]
        op = node.op
        where = f"operator {name!r}"
        cls_path = enc.ref(type(op), where)
        args, kwargs = op.init_args if isinstance(op, Recorded) else ((), {})
        before = set(enc.modules)
        entry: dict[str, Any] = {
            "name": name, "class": cls_path, "inputs": list(node.inputs),
            "args": [enc.encode(x, f"{where} ({cls_path}) argument {k}")
                     for k, x in enumerate(args)],
            "kwargs": {k: enc.encode(x, f"{where} ({cls_path}) parameter {k!r}")
                       for k, x in kwargs.items()},
        }
        _check_rebuilt(name, op, cls_path)
        modules = sorted(set(_operator_modules(op)) | (enc.modules - before))
        enc.modules.update(modules)
        entry["modules"] = modules
        entry.update(out_shape=list(bound.out_shape), out_dtype=dtype_text(bound.out_dtype),
                     parallelism=str(bound.parallelism), kind=str(bound.kind),
                     supported_modes=sorted(m.value for m in bound.supported_modes()),
                     all_to_all=[bool(_safe_all_to_all(bound, i))
                                 for i in range(len(node.inputs))])
        ops.append(entry)
    inputs = []
    for name, spec in wf.inputs.items():
        entry = {"name": name, "shape": list(spec.shape), "dtype": dtype_text(spec.dtype),
                 "description": spec.description, "auxiliary": bool(spec.auxiliary),
                 "path": spec.path,
                 "origin": (origins or {}).get(name) or spec.origin}
        gen = spec.blocks or spec.source
        if gen is not None:
            trial = Encoder()
            try:
                entry["generator"] = trial.encode(gen, f"input {name!r}")
            except CodeError:
                entry["generator"] = None  # kept as the stored array, not as code
            else:
                if trial.blobs:
                    entry["generator"] = None  # data given in Python: the stored array
                else:
                    enc.modules.update(trial.modules)
        inputs.append(entry)
    queries = []
    for q in wf.queries.values():
        queries.append({
            "name": q.name, "direction": q.direction, "start": q.start, "to": q.to,
            "path": None if q.path is None else [[o, int(i)] for o, i in q.path],
            "description": q.description,
            "cells": enc.encode(q.cells, f"named query {q.name!r} cells")})
    doc: dict[str, Any] = {
        "format": FORMAT, "version": VERSION,
        "workflow": {"name": wf.name, "description": wf.description,
                     "params": enc.encode(dict(wf.params), "workflow parameter")},
        "source": None if source is None else enc.encode(dict(source), "workflow source"),
        "inputs": inputs, "operators": ops, "queries": queries,
    }
    records = {}
    for m in sorted(enc.modules):
        for name in [*ancestors(m), m]:
            if name not in records:
                records[name] = record(name)
    for entry in ops:
        entry["digest"] = combined_digest(
            records[n] for m in entry["modules"] for n in [*ancestors(m), m])
        rec = records[entry["class"].split(":")[0]]
        entry["distribution"], entry["version"] = rec.distribution, rec.version
    doc["modules"] = {m: r.to_json() for m, r in records.items()}
    return doc, enc.blobs


def _safe_all_to_all(op: Any, i: int) -> bool:
    try:
        return bool(op.all_to_all(i))
    except Exception:  # noqa: BLE001 - an operator that cannot say is not all-to-all
        return False


def dumps(doc: Mapping[str, Any]) -> bytes:
    """The manifest's bytes (strict JSON: no NaN)."""
    return (json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n").encode()


def loads(data: bytes, what: str = "the manifest") -> dict[str, Any]:
    """A manifest document from its bytes, its format checked."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CodeError(f"{what} is not valid JSON ({e})") from None
    except RecursionError:
        raise CodeError(f"{what} is nested too deeply to be a manifest") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CodeError(f"{what} is not a SubZero manifest")
    if doc.get("version") != VERSION:
        raise CodeError(f"{what} has version {doc.get('version')!r}; this SubZero reads "
                        f"version {VERSION}")
    for key, kind in (("workflow", dict), ("inputs", list), ("operators", list),
                      ("queries", list), ("modules", dict)):
        if not isinstance(doc.get(key), kind):
            raise CodeError(f"{what} has no valid {key!r}")
    return doc


def module_records(doc: Mapping[str, Any]) -> dict[str, ModuleRecord]:
    """The manifest's module records, each checked for form."""
    return {m: ModuleRecord.from_json(m, r) for m, r in doc["modules"].items()}


# ---------------------------------------------------------------------------------------
# a workflow from its manifest
# ---------------------------------------------------------------------------------------


class Unavailable(Operator):
    """Stands in for an operator whose code a loaded run cannot use (its class does not
    import, or its module changed since the run): it answers what the manifest recorded
    (shapes, modes, parallelism, where it is all-to-all), so that stored lineage still
    answers, and raises :class:`~subzero.errors.CodeError` with the reason wherever the
    operator's own code would run (re-execution, mapping functions, payloads).
    """

    kind = "unavailable"

    def __init__(self, cls_path: str, reason: str, entry: Mapping[str, Any]) -> None:
        self.cls_path = cls_path
        self.reason = reason
        self.recorded_shape = tuple(int(v) for v in entry.get("out_shape", ()))
        self.recorded_dtype = np.dtype(entry.get("out_dtype", "float64"))
        self.recorded_modes = frozenset(Mode(m) for m in entry.get("supported_modes", [])
                                        if m in {x.value for x in Mode})
        self.recorded_all = tuple(bool(b) for b in entry.get("all_to_all", []))
        self.parallelism = _parallelism(str(entry.get("parallelism", "global")))

    def refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise CodeError(f"operator {self.name!r} ({self.cls_path}) cannot run here: "
                        f"{self.reason}")

    run = map_b = map_f = map_p = map_p_hits = refuse
    partial = combine = run_combined = refuse

    def supported_modes(self) -> frozenset[Mode]:
        return self.recorded_modes | {Mode.BLACKBOX}

    def output_shape(self, in_shapes: Any) -> tuple[int, ...]:
        return self.recorded_shape

    def output_dtype(self, in_dtypes: Any) -> np.dtype:
        return self.recorded_dtype

    def all_to_all(self, i: int) -> bool:
        return self.recorded_all[i] if i < len(self.recorded_all) else False

    def map_b_lin(self, lin: Any, i: int) -> Any:
        return self.refuse()

    def map_f_lin(self, lin: Any, i: int) -> Any:
        return self.refuse()


def _parallelism(text: str) -> Parallelism:
    if text.startswith("stencil"):
        try:
            return stencil(json.loads(text[len("stencil"):]))
        except (ValueError, TypeError):
            return GLOBAL
    return Parallelism(text) if text in ("elementwise", "blockwise", "global") else GLOBAL


def _origin_text(origin: Any) -> str:
    """An input's origin for :class:`~subzero.workflow.InputSpec` (the run's record is a
    dict: a file, or how the workflow made the data)."""
    if isinstance(origin, dict):
        return str(origin.get("path") or origin.get("description") or "")
    return str(origin or "")


class DeferredCells:
    """A named query's cells, decoded from the manifest only when the query runs (listing
    a run's named queries imports nothing)."""

    def __init__(self, data: Any, decoder: Decoder, name: str) -> None:
        self.data, self.decoder, self.name = data, decoder, name

    def __call__(self, run: Any) -> Any:
        try:
            fn = self.decoder.decode(self.data)
        except (KeyError, TypeError, ValueError, RecursionError) as e:
            raise CodeError(f"named query {self.name!r}: its cells in the manifest are "
                            f"malformed ({type(e).__name__})") from None
        if not callable(fn):
            return fn
        return fn(run)


def workflow_from_manifest(doc: Mapping[str, Any], gate: CodeGate,
                           blobs: Callable[[str], bytes]) -> tuple[Any, dict[str, str]]:
    """The workflow a manifest describes, bound, and the operators that stand in for
    code that cannot be used (:class:`Unavailable`), with the reason, by name.

    Operator classes are imported through ``gate``; an operator that does not import or
    rebuild becomes :class:`Unavailable`, so that only what needs its code fails.
    """
    from subzero.workflow import NamedQuery, Workflow

    dec = Decoder(gate, blobs)
    meta = doc["workflow"]
    try:
        wf = Workflow(str(meta["name"]), str(meta.get("description", "")),
                      params=dec.decode(meta.get("params") or {}))
        for entry in doc["inputs"]:
            wf.input(str(entry["name"]), [int(s) for s in entry["shape"]],
                     _dtype(entry["dtype"]), description=str(entry.get("description", "")),
                     auxiliary=bool(entry.get("auxiliary")), path=entry.get("path"),
                     origin=_origin_text(entry.get("origin")))
        missing: dict[str, str] = {}
        for entry in doc["operators"]:
            name, cls_path = str(entry["name"]), str(entry["class"])
            try:
                for m in entry.get("modules", []):  # all its code, before any is imported
                    gate.check(str(m))
                op = dec.decode({"$obj": cls_path, "args": entry.get("args", []),
                                 "kwargs": entry.get("kwargs", {})})
            except CodeError as e:
                missing[name] = str(e)
                op = Unavailable(cls_path, str(e), entry)
            wf.add(name, op, *[str(s) for s in entry["inputs"]])
        for entry in doc["queries"]:
            path = entry.get("path")
            wf.query(NamedQuery(
                str(entry["name"]), str(entry["direction"]), str(entry["start"]),
                DeferredCells(entry.get("cells"), dec, str(entry["name"])),
                to=entry.get("to"),
                path=None if path is None else [(str(o), int(i)) for o, i in path],
                description=str(entry.get("description", ""))))
    except (KeyError, TypeError, ValueError, RecursionError) as e:
        raise CodeError(f"the manifest is malformed ({type(e).__name__}: "
                        f"{str(e)[:200]})") from None
    wf.validate()
    return wf, missing


def operator_code(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each operator's code as the catalog records it: class, digest of the modules it
    runs, and the distribution and version its class came from."""
    return {str(e["name"]): {k: e.get(k) for k in ("class", "digest", "modules",
                                                   "distribution", "version")}
            for e in doc["operators"]}
