"""Values as manifest data: what round-trips, what is refused, and what decoding never does."""

from __future__ import annotations

import functools
import io
import json
import math
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import Affine, Convolve, UDF
from subzero import manifest
from subzero.cells import Box
from subzero.codeid import CodeGate, ModuleRecord, ancestors, record
from subzero.errors import CodeError
from subzero.modes import Mode


def roundtrip(value):
    enc = manifest.Encoder()
    data = enc.encode(value, "value")
    text = json.dumps(data, allow_nan=False)  # strict JSON
    names = {n for m in enc.modules for n in [*ancestors(m), m]}
    gate = CodeGate({n: record(n) for n in names})
    return manifest.Decoder(gate, enc.blobs.__getitem__).decode(json.loads(text))


def same(a, b):
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def double(x, factor=2):
    return x * factor


@pytest.mark.parametrize("value", [
    None, True, 3, -2.5, "text", [1, "a", None], (1, 2), {"a": 1, "b": [2, 3]},
    {1: "one", (2, 3): "pair"}, {"$x": 1}, float("nan"), float("-inf"), {1, 2, 3},
    np.float32(1.5), np.uint16(7), np.dtype("uint16"), np.arange(6.0).reshape(2, 3),
    np.array([1.0, np.nan]), np.arange(5000, dtype=np.int64), np.ones((2, 2), bool),
    Path("/data/exp1.fits"), Mode.FULL, Box((0, 1), (2, 3)),
])
def test_values_round_trip(value):
    assert same(value, roundtrip(value))


def test_functions_partials_ufuncs_and_operators_round_trip():
    f = roundtrip(functools.partial(double, factor=3))
    assert f(2) == 6
    assert roundtrip(np.add) is np.add and roundtrip(double) is double
    op = roundtrip(Convolve(np.ones((3, 3)) / 9, boundary="nearest"))
    assert isinstance(op, Convolve) and op.params() == Convolve(
        np.ones((3, 3)) / 9, boundary="nearest").params()
    assert roundtrip(Affine(2.0, offset=1.0)).init_args == ((2.0,), {"offset": 1.0})


def test_large_arrays_go_beside_the_manifest_named_by_their_checksum():
    enc = manifest.Encoder()
    data = enc.encode(np.arange(5000.0), "w")
    assert set(data) == {"$npy", "dtype", "shape"} and data["$npy"] in enc.blobs
    gate = CodeGate({})
    tampered = {data["$npy"]: enc.blobs[data["$npy"]][:-8] + b"\0" * 8}
    with pytest.raises(CodeError, match="does not match its checksum"):
        manifest.Decoder(gate, tampered.__getitem__).decode(data)


class _Local(UDF):  # module-level: recordable
    def run(self, ctx, x):
        return x


def test_what_is_not_data_is_refused_naming_it():
    enc = manifest.Encoder()
    with pytest.raises(CodeError, match="p is a lambda"):
        enc.encode(lambda x: x, "p")

    def make():
        class Inner:
            pass
        return Inner

    with pytest.raises(CodeError, match="defined inside a function"):
        enc.encode(make(), "p")
    with pytest.raises(CodeError, match="an open file"):
        enc.encode(io.BytesIO(b""), "p")
    with pytest.raises(CodeError, match="bound method"):
        enc.encode(_Local().run, "p")
    with pytest.raises(CodeError, match="only booleans, integers and floats"):
        enc.encode(np.array([object()]), "p")
    with pytest.raises(CodeError, match="cannot be stored as data"):
        enc.encode(object(), "p")
    cls = type("Script", (UDF,), {"run": lambda self, ctx, x: x, "__module__": "__main__"})
    with pytest.raises(CodeError, match="defined in __main__.*define it in a module"):
        enc.encode(cls, "operator 'bg'")


@pytest.mark.parametrize("doc", [
    {"$obj": "os:system", "args": ["touch probe"]},
    {"$obj": "subprocess:Popen", "args": [["touch", "probe"]]},
    {"$enum": "os:system", "value": "touch probe"},
])
def test_decoding_calls_nothing_but_operators_dataclasses_and_enums(doc, tmp_path,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    mod = doc.get("$obj", doc.get("$enum")).split(":")[0]
    gate = CodeGate({mod: record(mod)})
    with pytest.raises(CodeError, match="refusing|not an enum|is not one"):
        manifest.Decoder(gate, {}.__getitem__).decode(doc)
    assert not (tmp_path / "probe").exists()


def test_decoding_imports_no_module_the_manifest_does_not_record():
    with pytest.raises(CodeError, match="without recording its code"):
        manifest.Decoder(CodeGate({}), {}.__getitem__).decode({"$ref": "json:dumps"})


def test_a_record_of_a_distribution_that_does_not_provide_the_module_is_refused():
    rec = record("subzero.cells")
    forged = ModuleRecord("json", rec.file, rec.sha256, "subzero-spark", rec.version)
    with pytest.raises(CodeError, match="does not provide it"):
        CodeGate({"json": forged}).import_module("json")


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
values = st.recursive(
    st.one_of(json_leaf, st.builds(np.array, st.lists(st.floats(allow_nan=False), max_size=6))),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(values)
def test_any_nesting_of_plain_values_round_trips(value):
    assert same(value, roundtrip(value))


def test_locate_finds_a_module_without_importing_it():
    """Through every finder of the import system (the project is an editable install,
    found by its own finder, not by a folder on sys.path), and never by running it."""
    import os
    import subprocess
    import sys

    code = ("import sys; from subzero.codeid import locate; "
            "p = locate('workflows.genomics_udfs'); "
            "print(p, 'workflows' in sys.modules, 'workflows.genomics_udfs' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd="/", env=env, check=True).stdout.split()
    assert out[0].endswith("workflows/genomics_udfs.py") and out[1:] == ["False", "False"]


def test_an_operators_helper_modules_are_recorded(tmp_path, monkeypatch):
    """A change to a helper module an operator's module imports (its kernels, from the same
    package or a file no distribution holds) is a change to the operator's code."""
    from subzero.manifest import _operator_modules

    pkg = tmp_path / "labpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text("def smooth(x):\n    return x\n")
    (tmp_path / "loosehelper.py").write_text("SCALE = 2\n")
    (pkg / "ops.py").write_text(textwrap.dedent("""
        import numpy as np
        import loosehelper
        from labpkg.kernels import smooth
        from operators.elementwise import Unary


        class Smooth(Unary):
            pass
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import labpkg.ops

    got = _operator_modules(labpkg.ops.Smooth("negative"))
    assert got[0] == "labpkg.ops"
    assert {"labpkg.kernels", "loosehelper", "operators.elementwise"} <= set(got)
    assert not {"numpy", "subzero", "encoders"} & {m.split(".")[0] for m in got}
    for m in ("labpkg", "labpkg.ops", "labpkg.kernels", "loosehelper"):
        sys.modules.pop(m, None)
