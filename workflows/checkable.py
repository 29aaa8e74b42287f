"""Operators the lineage checker can name, and inputs to check them on (issue 17, part 2).

:func:`resolve` turns what a scientist types into an operator instance: a built-in by class
name (``MedianFilter``, from :mod:`operators`), a shipped UDF by class name
(``CosmicRayDetect``, ``StarDetect``, ``Extract``...) or any operator class as
``module:Class`` (``mypkg.udfs:MyDetector``; the module is imported, from the current
directory too). :func:`default_inputs`
gives each built-in and shipped UDF small inputs of the kind it sees in the workflows (a
star field with cosmic rays for the astronomy UDFs, a generated patient table run through
the genomics pipeline for its UDFs); any other operator gets ``shape`` random floats per
input. :data:`CHECKED` lists every built-in and shipped UDF the test suite and the README
table check.

>>> op = resolve("MedianFilter", {"radius": 1})
>>> type(op).__name__, op.params()["radius"]
('MedianFilter', [1])
>>> [a.shape for a in default_inputs("Binary")]
[(24, 20), (24, 20)]
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import operators
from operators import (Affine, Binary, Cast, Classify, Concatenate, Convolve, Copy, Logistic,
                       MaskReplace, MatMul, MeanBroadcast, MedianFilter, Reduce, Reshape, Scalar,
                       Subarray, Transpose, Unary, Where)
from subzero.errors import SubZeroError
from subzero.operator import Operator
from subzero.testing import bind, run_chunked
from workflows.astro_data import SKY, generate_scene, subtract_background
from workflows.astro_udfs import (CosmicRayDetect, CosmicRayRemove, StarDetect,
                                  detect_cosmic_rays, remove_cosmic_rays)
from workflows.genomics_data import generate_table
from workflows.genomics_udfs import LABEL, STRING, Extract, Model, Predict, Validate, find_columns

Inputs = Callable[[np.random.Generator], list[np.ndarray]]

#: Shape of generated inputs for operators without a default (``--shape``).
DEFAULT_SHAPE = (24, 20)


class OperatorSpecError(SubZeroError):
    """An operator name, class or parameters the checker cannot use."""


# ---------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------


def _img(rng: np.random.Generator, shape: tuple[int, ...] = DEFAULT_SHAPE) -> np.ndarray:
    return rng.normal(100.0, 10.0, shape)


def _u16(rng: np.random.Generator) -> np.ndarray:
    x = rng.integers(0, 60000, DEFAULT_SHAPE).astype(np.uint16)
    x[rng.random(DEFAULT_SHAPE) < 0.2] = 0  # dead pixels, as badpixrm sees
    return x


def _mask(rng: np.random.Generator, p: float = 0.3) -> np.ndarray:
    return rng.random(DEFAULT_SHAPE) < p


def _astro(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A small star field with cosmic rays (some on or next to stars), as the workflow's
    UDFs see it: background subtracted, the detections, the cleaned sum."""
    scene = generate_scene(seed=int(rng.integers(0, 1 << 16)), shape=(60, 50), n_stars=3,
                           n_cosmics=6)
    r1, r2 = subtract_background(scene.exp1), subtract_background(scene.exp2)
    mask = detect_cosmic_rays(r1, sky=SKY) | detect_cosmic_rays(r2, sky=SKY)
    total = r1 + r2
    return {"rmbg": r1, "sum": total, "mask": mask, "clean": remove_cosmic_rays(total, mask)}


def _genomics(rng: np.random.Generator) -> dict[str, Any]:
    """A 12-patient generated table through the genomics pipeline (black box)."""
    table = generate_table(seed=int(rng.integers(0, 1 << 16)), patients=12)
    t = np.ascontiguousarray(np.asarray(table)[:, 4:].T)
    names = np.ascontiguousarray(np.asarray(table)[:, 0][None, :])
    ext = np.asarray(run_chunked(bind(Extract(), t, names), [t, names])[0]).astype(STRING)
    model = run_chunked(bind(Model(), ext, t, names), [ext, t, names])[0]
    pred = run_chunked(bind(Predict(), model, ext, t, names), [model, ext, t, names])[0]
    prob = 1.0 / (1.0 + np.exp(-pred.sum(axis=1)))
    klass = np.where(prob > 0.5, "Y", "N").astype(STRING)[:, None]
    return {"transpose": t, "names": names, "extract": ext, "model": model, "predict": pred,
            "klass": klass, "truth": int(find_columns(names[0], [LABEL])[0])}


# name -> (default instance, default inputs)
_BUILTINS: dict[str, tuple[Callable[[], Operator], Inputs]] = {
    "Unary": (lambda: Unary("sqrt"), lambda r: [np.abs(_img(r))]),
    "Binary": (lambda: Binary("subtract"), lambda r: [_img(r), _img(r)]),
    "Scalar": (lambda: Scalar("multiply", 2.0), lambda r: [_img(r)]),
    "Affine": (lambda: Affine(0.5, -500.0), lambda r: [_u16(r)]),
    "Cast": (lambda: Cast("float64"), lambda r: [_u16(r)]),
    "Copy": (lambda: Copy(), lambda r: [_img(r)]),
    "Logistic": (lambda: Logistic(), lambda r: [_img(r) - 100.0]),
    "Classify": (lambda: Classify(0.5), lambda r: [r.random(DEFAULT_SHAPE)]),
    "Where": (lambda: Where(), lambda r: [_mask(r), _img(r), _img(r)]),
    "MaskReplace": (lambda: MaskReplace(90.0, bad_values=[0]), lambda r: [_u16(r), _mask(r)]),
    "Subarray": (lambda: Subarray("1:20:3, 2:"), lambda r: [_img(r)]),
    "Transpose": (lambda: Transpose(), lambda r: [_img(r)]),
    "Reshape": (lambda: Reshape((20, 24)), lambda r: [_img(r)]),
    "Concatenate": (lambda: Concatenate(0), lambda r: [_img(r), _img(r)[:5]]),
    "Reduce": (lambda: Reduce("sum", axis=1), lambda r: [_img(r)]),
    "MeanBroadcast": (lambda: MeanBroadcast(), lambda r: [_img(r)]),
    "Convolve": (lambda: Convolve([[0, -1, 0], [-1, 4, -1], [0, -1, 0]]), lambda r: [_img(r)]),
    "MedianFilter": (lambda: MedianFilter(2, "nearest"), lambda r: [_img(r)]),
    "MatMul": (lambda: MatMul(), lambda r: [r.integers(-5, 6, (24, 6)).astype(np.float64),
                                            r.integers(-5, 6, (6, 20)).astype(np.float64)]),
}

_UDFS: dict[str, tuple[Callable[[], Operator], Inputs]] = {
    "CosmicRayDetect": (lambda: CosmicRayDetect(sky=SKY), lambda r: [_astro(r)["rmbg"]]),
    "CosmicRayRemove": (lambda: CosmicRayRemove(),
                        lambda r: (lambda a: [a["sum"], a["mask"]])(_astro(r))),
    "StarDetect": (lambda: StarDetect(100.0), lambda r: [_astro(r)["clean"]]),
    "Extract": (lambda: Extract(), lambda r: (lambda g: [g["transpose"], g["names"]])(
        _genomics(r))),
    "Model": (lambda: Model(), lambda r: (lambda g: [g["extract"], g["transpose"],
                                                     g["names"]])(_genomics(r))),
    "Predict": (lambda: Predict(), lambda r: (lambda g: [
        g["model"], g["extract"], g["transpose"], g["names"]])(_genomics(r))),
    "Validate": (lambda: Validate(truth_column=_genomics(np.random.default_rng(0))["truth"]),
                 lambda r: (lambda g: [g["klass"], g["transpose"]])(_genomics(r))),
}

#: Every built-in operator and shipped UDF, by the name ``resolve`` takes.
CHECKED: tuple[str, ...] = tuple(_BUILTINS) + tuple(_UDFS)
#: The astronomy and genomics UDFs.
SHIPPED_UDFS: tuple[str, ...] = tuple(_UDFS)


# ---------------------------------------------------------------------------------------
# resolving names
# ---------------------------------------------------------------------------------------


def _import(module: str) -> Any:
    """Import a user's module, also from the current directory (as ``python -m`` would; a
    console script does not put it on the path)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        here = os.getcwd()
        if e.name != module.split(".")[0] or here in sys.path:
            raise
        sys.path.append(here)
        try:
            return importlib.import_module(module)
        except ImportError:
            sys.path.remove(here)
            raise


def _class_named(spec: str) -> Any:
    if ":" in spec:
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise OperatorSpecError(f"operator {spec!r}: expected a built-in name or "
                                    "module:Class")
        try:
            mod = _import(module)
        except ImportError as e:
            raise OperatorSpecError(f"operator {spec!r}: cannot import module {module!r} "
                                    f"({e})") from None
        try:
            return getattr(mod, attr)
        except AttributeError:
            raise OperatorSpecError(f"operator {spec!r}: module {module!r} has no "
                                    f"{attr!r}") from None
    if spec in _BUILTINS:
        return getattr(operators, spec)
    if spec in _UDFS:
        return type(_UDFS[spec][0]())
    raise OperatorSpecError(
        f"unknown operator {spec!r} (expected a built-in: {', '.join(_BUILTINS)}; a shipped "
        f"UDF: {', '.join(_UDFS)}; or module:Class)")


def resolve(spec: str | Operator | type, params: Mapping[str, Any] | None = None) -> Operator:
    """An unbound operator instance from a name, ``module:Class``, a class or an instance.

    Without ``params`` a built-in or shipped UDF gets the parameters the workflows use (and
    any other class its defaults); with them, the class is built with ``Class(**params)``.
    """
    if isinstance(spec, Operator):
        if params:
            raise OperatorSpecError("parameters apply to an operator given by name or class")
        return spec
    cls = spec if isinstance(spec, type) else _class_named(str(spec))
    label = spec.__name__ if isinstance(spec, type) else str(spec)
    if not (isinstance(cls, type) and issubclass(cls, Operator)):
        raise OperatorSpecError(f"{label!r} is not an operator class (expected a subclass of "
                                "subzero.operator.Operator)")
    if inspect.isabstract(cls):
        raise OperatorSpecError(f"{label!r} is an abstract operator class (it has no run)")
    short = label.rpartition(":")[2]
    known = {**_BUILTINS, **_UDFS}.get(short)
    if not params and known is not None and type(known[0]()) is cls:
        return known[0]()
    try:
        return cls(**dict(params or {}))
    except SubZeroError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise OperatorSpecError(f"operator {label!r} with parameters {dict(params or {})}: "
                                f"{e}") from None
    except Exception as e:  # noqa: BLE001 - a user's constructor: its failure in one line
        raise OperatorSpecError(f"operator {label!r} with parameters {dict(params or {})} "
                                f"failed to construct: {type(e).__name__}: {e}") from None


def default_inputs(spec: str | Operator | type, seed: int = 0,
                   shape: Sequence[int] | None = None) -> list[np.ndarray]:
    """Inputs to check operator ``spec`` on: the built-in's or shipped UDF's own kind of
    data, else one array of ``shape`` (default :data:`DEFAULT_SHAPE`) random floats per
    input (``n_inputs``, or 1)."""
    rng = np.random.default_rng(seed)
    name = (spec.rpartition(":")[2] if isinstance(spec, str) else
            (spec.__name__ if isinstance(spec, type) else type(spec).__name__))
    known = {**_BUILTINS, **_UDFS}.get(name)
    if known is not None and shape is None:
        return [np.asarray(a) for a in known[1](rng)]
    op = resolve(spec) if not isinstance(spec, Operator) else spec
    n = op.n_inputs or 1
    return [_img(rng, tuple(shape or DEFAULT_SHAPE)) for _ in range(n)]


__all__ = ["CHECKED", "DEFAULT_SHAPE", "OperatorSpecError", "SHIPPED_UDFS", "default_inputs",
           "resolve"]
