"""A user's own workflow, run from the CLI as a module or a file, stored as data.

The workflow module is written by the tests into a temporary folder outside the project,
with a UDF of its own; every command works on its runs as on a shipped workflow's, nothing
in a home is unpickled or imported from it, and a UDF edited after its run is refused
until the user allows it.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from subzero import codeid, manifest
from subzero.engine import layout
from subzero.engine.catalog import Catalog
from tests.conftest import ROOT, run_cli

PIPELINE = textwrap.dedent('''
    """A user's pipeline: a gain, a 3 x 3 maximum (a UDF of its own), peaks."""

    from functools import partial

    import numpy as np
    from scipy import ndimage

    from operators import Affine, Binary, UDF, stencil
    from operators.base import box_neighbours
    from subzero import NamedQuery, Workflow
    from subzero.modes import Mode


    def make_sky(shape, seed):
        rng = np.random.default_rng(seed)
        sky = rng.normal(100.0, 5.0, shape)
        sky[5, 5] += 400.0
        return sky


    class BoxMax(UDF):
        """The maximum of each pixel's 3 x 3 box (FULL lineage: the box)."""

        n_inputs = 1
        parallelism = stencil(1)

        def supported_modes(self):
            return frozenset({Mode.FULL, Mode.BLACKBOX})

        def run(self, ctx, x):
            out = ndimage.maximum_filter(x, size=3, mode="nearest")[ctx.chunk.interior(0)]
            if ctx.full:
                cells = ctx.chunk.out_cells(np.argwhere(np.ones(out.shape, bool)))
                ctx.lwrite_pairs(cells, box_neighbours(cells, (1, 1), self.out_shape))
            return out


    def brightest(run, k=3):
        peaks = run.array("peaks")
        lin = np.argsort(peaks.ravel())[-k:]
        return np.stack(np.unravel_index(lin, peaks.shape), axis=1)


    def build(shape: str = "24x16", seed: int = 0, gain: float = 2.0) -> Workflow:
        h, w = (int(v) for v in shape.split("x"))
        wf = Workflow("userpipe", "a user's own pipeline", params={"seed": seed})
        wf.input("sky", (h, w), "float64", source=partial(make_sky, (h, w), seed))
        wf.add("calib", Affine(scale=gain), "sky")
        wf.add("boxmax", BoxMax(), "calib")
        wf.add("peaks", Binary("subtract"), "boxmax", "calib")
        wf.query(NamedQuery("bright", "backward", "boxmax", partial(brightest, k=3),
                            to="sky", description="the 3 brightest box maxima"))
        return wf


    not_a_workflow = 42


    def broken():
        raise RuntimeError("the telescope is closed")
''')


def cli(*args: str, cwd: Path | None = None, env: dict | None = None
        ) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd, env=env)


def run_userpkg(userpkg: Path, home: Path, *args: str) -> str:
    """Run the user's package ``userpkg.pipeline`` from its own folder; its run id."""
    p = cli("run", "userpkg.pipeline", *args, "--home", str(home), "--json", cwd=userpkg)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)["run"]


def one_line_error(p: subprocess.CompletedProcess, *words: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("subzero: error: "), p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture
def userpkg(tmp_path):
    """A package ``userpkg`` with ``pipeline.py``, in a folder outside the project."""
    code = tmp_path / "code"
    (code / "userpkg").mkdir(parents=True)
    (code / "userpkg" / "__init__.py").write_text("")
    (code / "userpkg" / "pipeline.py").write_text(PIPELINE)
    return code


def test_a_module_outside_the_project_runs_and_every_command_works_on_its_run(userpkg,
                                                                              tmp_path):
    home = tmp_path / "home"
    h = ("--home", str(home))
    rid = run_userpkg(userpkg, home, "--param", "seed=3", "--param", "gain=1.5",
                      "--strategy", "full-one")
    doc = json.loads(layout.manifest_path(home, rid).read_text())
    box = next(o for o in doc["operators"] if o["name"] == "boxmax")
    assert box["class"] == "userpkg.pipeline:BoxMax" and box["distribution"] is None
    assert doc["operators"][0]["kwargs"] == {"scale": 1.5}
    rec = doc["modules"]["userpkg.pipeline"]
    assert rec["sha256"] == codeid.file_sha256(userpkg / "userpkg" / "pipeline.py")
    assert doc["source"]["target"] == "userpkg.pipeline:build"
    assert not list(home.rglob("*.pkl"))

    # from anywhere: later commands import the module from the file the run recorded
    for args in (("query", rid, "backward", "--from", "peaks", "--cells", "5,5", "--to", "sky",
                  "--method", "reexec", "--json"),
                 ("query", rid, "backward", "--from", "peaks", "--cells", "5,5", "--to", "sky",
                  "--json"),
                 ("query", rid, "--named", "bright", "--json")):
        q = cli(*args, *h, cwd=tmp_path)
        assert q.returncode == 0, q.stderr
        res = json.loads(q.stdout)
        assert res["count"] >= 9 and "changed_code" not in res
    out = tmp_path / "peaks.npy"
    assert cli("export", rid, "peaks", str(out), *h, cwd=tmp_path).returncode == 0
    assert np.load(out).shape == (24, 16)
    r = cli("replay", rid, "--from", "sky", "--cells", "5,5", "--set", "0", *h, "--json",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["parent"] == rid
    v = cli("verify", rid, *h)
    assert v.returncode == 0 and "ok" in v.stdout, v.stdout + v.stderr
    s = cli("show", rid, *h)
    assert s.returncode == 0 and "userpkg.pipeline:BoxMax" in s.stdout
    assert box["digest"][:16] in s.stdout and "a module of your own" in s.stdout

    # served: the explorer answers a click through the user's operator
    from subzero.serve.explorer import Explorer

    ex = Explorer(home)
    try:
        info = ex.run_info(rid)
        assert info["changed_code"] == {} and info["unavailable"] == {}
        ans = ex.query(rid, {"direction": "backward", "from": "boxmax", "cells": "5,5",
                             "to": "sky", "method": "reexec"})
        assert ans["results"][0]["count"] == 9  # pixel (5, 5)'s 3 x 3 box, re-executed
    finally:
        ex.close()


def test_a_workflow_file_runs_and_its_run_is_queried_from_elsewhere(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "skypipe.py").write_text(PIPELINE)
    home = tmp_path / "home"
    p = cli("run", str(folder / "skypipe.py") + ":build", "--param", "shape=20x12",
            "--home", str(home), "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    rid = json.loads(p.stdout)["run"]
    doc = json.loads(layout.manifest_path(home, rid).read_text())
    assert doc["source"]["target"] == f"{(folder / 'skypipe.py').resolve()}:build"
    assert doc["modules"]["skypipe"]["file"] == str((folder / "skypipe.py").resolve())
    q = cli("query", rid, "backward", "--from", "boxmax", "--cells", "0,0", "--to", "sky",
            "--method", "reexec", "--home", str(home), "--json", cwd=ROOT)
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout)["count"] == 4  # the corner's 2 x 2 box
    assert cli("verify", rid, "--home", str(home)).returncode == 0


def test_a_udf_edited_after_its_run_is_refused_then_allowed_and_marked(userpkg, tmp_path):
    home = tmp_path / "home"
    h = ("--home", str(home))
    rid = run_userpkg(userpkg, home, "--strategy", "full-one")
    src = userpkg / "userpkg" / "pipeline.py"
    before = codeid.file_sha256(src)
    src.write_text(PIPELINE.replace("size=3", "size=5"))  # a different filter now
    query = ("query", rid, "backward", "--from", "peaks", "--cells", "5,5", "--to", "sky")
    line = one_line_error(cli(*query, "--method", "reexec", *h, cwd=tmp_path),
                          "boxmax", "userpkg.pipeline", before[:12],
                          codeid.file_sha256(src)[:12], "--allow-changed-code")
    assert "Traceback" not in line
    # its stored lineage (written by the run's code) still answers without the flag
    stored = cli(*query, "--method", "stored", *h, "--json", cwd=tmp_path)
    assert stored.returncode == 0, stored.stderr
    assert "changed_code" not in json.loads(stored.stdout)
    one_line_error(cli("replay", rid, "--from", "sky", "--cells", "5,5", "--set", "0", *h),
                   "boxmax", "--allow-changed-code")
    assert [r["id"] for r in Catalog(home / "catalog.sqlite").runs()] == [rid]  # none made
    allowed = cli(*query, "--method", "reexec", "--allow-changed-code", *h, cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert "warning: boxmax: answered by code changed since run" in allowed.stdout
    js = cli(*query, "--method", "reexec", "--allow-changed-code", "--json", *h, cwd=tmp_path)
    assert json.loads(js.stdout)["changed_code"] == ["boxmax"]

    from subzero.serve.explorer import Explorer

    ex = Explorer(home)
    try:
        assert "boxmax" in ex.run_info(rid)["unavailable"]  # the page's warning
    finally:
        ex.close()


PROBE_PICKLE = textwrap.dedent('''
    import os, pickle, sys

    class Probe:
        def __reduce__(self):
            return (os.system, ("touch " + sys.argv[2],))

    with open(sys.argv[1], "wb") as f:
        pickle.dump(Probe(), f)
''')


@pytest.fixture
def small_run(tmp_path):
    home = tmp_path / "home"
    p = cli("run", "example", "--param", "shape=24x16", "--home", str(home), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    return home, json.loads(p.stdout)["run"]


def _every_command(home: Path, rid: str, tmp_path: Path) -> list[subprocess.CompletedProcess]:
    h = ("--home", str(home))
    return [cli(*a, *h, cwd=tmp_path) for a in (
        ("query", rid, "backward", "--from", "bright", "--cells", "1,1", "--to", "image"),
        ("query", rid, "--named", "BQ0"),
        ("export", rid, "bright", str(tmp_path / "x.npy")),
        ("replay", rid, "--from", "image", "--cells", "1,1", "--set", "0"),
        ("verify", rid), ("show", rid), ("runs",),
        ("optimize", "--run", rid, "--max-disk", "1MB"))]


def test_a_planted_pickle_is_never_unpickled(small_run, tmp_path):
    home, rid = small_run
    probe = tmp_path / "probe"
    layout.manifest_path(home, rid).unlink()
    pkl = layout.legacy_workflow_path(home, rid)
    subprocess.run([sys.executable, "-c", PROBE_PICKLE, str(pkl), str(probe)], check=True)
    db = Catalog(home / "catalog.sqlite")
    db.db.execute("UPDATE runs SET manifest = NULL")
    db.db.commit()
    db.close()
    results = _every_command(home, rid, tmp_path)
    from subzero.serve.explorer import Explorer

    ex = Explorer(home)
    try:
        ex.runs()
        with pytest.raises(Exception, match="subzero migrate"):
            ex.run_info(rid)
    finally:
        ex.close()
    assert not probe.exists()
    assert "subzero migrate" in results[0].stderr
    # migrate asks before it unpickles
    one_line_error(cli("migrate", str(home)), "--trust", "pickle")
    assert not probe.exists()


HOSTILE = 'open({probe!r}, "w").close()\nfrom operators import Affine as Evil\n'


def _plant_manifest(home: Path, rid: str, module: str, file: Path, distribution=None) -> bytes:
    doc = json.loads(layout.manifest_path(home, rid).read_text())
    first = doc["operators"][0]
    first["class"] = f"{module}:Evil"
    first["modules"] = [module]
    doc["modules"][module] = {"file": str(file), "sha256": codeid.file_sha256(file),
                              "distribution": distribution, "version": None,
                              "root": str(file.parent)}
    data = manifest.dumps(doc)
    layout.manifest_path(home, rid).write_bytes(data)
    return data


def test_a_catalog_row_that_disagrees_with_the_manifest_is_refused(small_run, tmp_path):
    home, rid = small_run
    db = Catalog(home / "catalog.sqlite")
    row = db.operators(rid)["bright"]["code"]
    db.db.execute("UPDATE operators SET code = ? WHERE name = 'bright'",
                  (json.dumps(dict(row, digest="0" * 64)),))
    db.db.commit()
    db.close()
    results = _every_command(home, rid, tmp_path)
    one_line_error(results[0], "manifest and catalog disagree", "'bright'")
    assert results[4].returncode == 3 and "disagree" in results[4].stdout


@pytest.mark.parametrize("where", ["altered", "in-home", "foreign-owner", "distribution"])
def test_a_planted_manifest_never_imports_its_module(small_run, tmp_path, where, monkeypatch):
    import hashlib

    home, rid = small_run
    probe = tmp_path / "probe"
    folder = home if where == "in-home" else tmp_path / "elsewhere"
    folder.mkdir(exist_ok=True)
    evil = folder / "evilmod.py"
    evil.write_text(HOSTILE.format(probe=str(probe)))
    dist = "subzero-spark" if where == "distribution" else None
    data = _plant_manifest(home, rid, "evilmod", evil, dist)
    if where != "altered":  # whoever planted it also rewrote the catalog to match
        db = Catalog(home / "catalog.sqlite")
        db.db.execute("UPDATE runs SET manifest = ?", (hashlib.sha256(data).hexdigest(),))
        db.db.execute("UPDATE operators SET code = NULL")
        db.db.commit()
        db.close()
    if where == "foreign-owner":
        # the planted file belongs to another user: checked in this process
        monkeypatch.setattr(codeid, "trusted_owners", lambda: {os.getuid() + 4242})
        from subzero.api import Home
        from subzero.errors import SubZeroError

        with pytest.raises(SubZeroError):
            Home(home).get(rid).backward([(1, 1)], start="bright", to="image",
                                         method="reexec")
        assert not probe.exists()
        return
    results = _every_command(home, rid, tmp_path)
    assert not probe.exists()
    if where == "altered":
        assert "does not match the digest" in results[0].stderr
    else:
        q = results[0]
        assert q.returncode == 2 and ("inside the home" in q.stderr
                                      or "outside" in q.stderr or "distribution" in q.stderr)
    v = results[4]
    assert v.returncode != 0 and not probe.exists()


def test_an_old_home_is_migrated_once_with_trust(small_run, tmp_path):
    home, rid = small_run
    from subzero.api import Home

    run = Home(home).get(rid)
    wf = run.workflow
    want = run.backward([(3, 3)], start="bright", to="image").count
    for node in wf.nodes.values():  # as an earlier SubZero pickled them
        node.op.__dict__.pop("_init_args", None)
    wf.__dict__.pop("source", None)
    layout.legacy_workflow_path(home, rid).write_bytes(pickle.dumps(wf))
    layout.manifest_path(home, rid).unlink()
    db = Catalog(home / "catalog.sqlite")
    db.db.execute("UPDATE runs SET manifest = NULL")
    db.db.execute("UPDATE operators SET code = NULL")
    db.db.commit()
    db.close()
    q = ("query", rid, "backward", "--from", "bright", "--cells", "3,3", "--to", "image",
         "--json", "--home", str(home))
    one_line_error(cli(*q), "earlier SubZero", "subzero migrate")
    one_line_error(cli("migrate", str(home)), "--trust")
    m = cli("migrate", str(home), "--trust")
    assert m.returncode == 0, m.stdout + m.stderr
    assert f"run {rid}: converted" in m.stdout
    assert not layout.legacy_workflow_path(home, rid).exists()
    got = cli(*q)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["count"] == want
    again = cli("migrate", str(home), "--trust")
    assert again.returncode == 0 and "nothing to convert" in again.stdout


@pytest.mark.parametrize("target, words", [
    ("no_such_module_xyz", ("unknown workflow", "no_such_module_xyz")),
    ("NOTES.txt", ("not a Python file",)),
    ("broken_syntax.py", ("not valid Python", "line 1")),
    ("userpkg.pipeline:not_a_workflow", ("not_a_workflow", "neither a workflow")),
    ("userpkg.pipeline:broken", ("broken() raised RuntimeError", "telescope is closed")),
    ("userpkg.pipeline:nope", ("has no 'nope'",)),
])
def test_a_bad_workflow_target_is_one_line_and_leaves_no_run(userpkg, tmp_path, target,
                                                             words):
    (userpkg / "NOTES.txt").write_text("not code\n")
    (userpkg / "broken_syntax.py").write_text("def build(:\n")
    home = tmp_path / "home"
    one_line_error(cli("run", target, "--home", str(home), cwd=userpkg), *words)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


@pytest.mark.parametrize("param, words", [
    ("seed=abc", ("--param seed='abc'", "expected an integer")),
    ("gain=x", ("--param gain='x'", "expected a number")),
    ("colour=red", ("no parameter 'colour'", "accepted: shape, seed, gain")),
])
def test_bad_params_are_one_line_naming_the_accepted_ones(userpkg, tmp_path, param, words):
    home = tmp_path / "home"
    one_line_error(cli("run", "userpkg.pipeline", "--param", param, "--home", str(home),
                       cwd=userpkg), *words)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    from operators import UDF, Scalar
    from subzero import Workflow
    from subzero.engine.runner import run_workflow
    from subzero.errors import SubZeroError

    class MedianBackground(UDF):
        n_inputs = 1
        def run(self, ctx, x):
            return x - np.median(x)

    from helpers import Apply  # a module beside the script

    which = sys.argv[2]
    wf = Workflow("script")
    wf.input("a", (6, 4), source=lambda: np.zeros((6, 4)))
    if which == "main":
        wf.add("bg", MedianBackground(), "a")
    elif which == "lambda":
        wf.add("bg", Apply(fn=lambda x: x + 3), "a")
    else:
        op = Scalar("add", value=1.0)
        op.value = 5.0  # set after it was made: a rebuilt operator would add 1
        wf.add("bg", op, "a")
    try:
        run_workflow(wf, home=sys.argv[1])
    except SubZeroError as e:
        print(e)
''')


HELPERS = textwrap.dedent('''
    from operators import UDF

    class Apply(UDF):
        """Applies a function to each block."""
        n_inputs = 1
        def __init__(self, fn):
            self.fn = fn
        def run(self, ctx, x):
            return self.fn(x)
''')


@pytest.mark.parametrize("which, words", [
    ("main", ("operator 'bg'", "MedianBackground defined in __main__", "define it in a module")),
    ("lambda", ("operator 'bg'", "parameter 'fn'", "lambda")),
    ("mutated", ("operator 'bg'", "attribute 'value'", "constructor")),
])
def test_what_cannot_be_data_is_refused_before_the_run_starts(tmp_path, which, words):
    script = tmp_path / "mine.py"
    script.write_text(SCRIPT)
    (tmp_path / "helpers.py").write_text(HELPERS)
    home = tmp_path / "home"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    p = subprocess.run([sys.executable, str(script), str(home), which], capture_output=True,
                       text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    for w in words:
        assert w in p.stdout, (w, p.stdout)
    assert not (home / "runs").exists()


def test_workflows_says_how_to_run_your_own():
    p = cli("workflows")
    assert p.returncode == 0
    assert "subzero run package.module[:NAME]" in p.stdout and "astronomy" in p.stdout


def test_listing_commands_import_no_operator_code(userpkg, tmp_path):
    """show, runs, verify and the explorer's run list read the catalog and the manifest
    only: the user's module, which leaves a mark when imported, is never imported."""
    home = tmp_path / "home"
    rid = run_userpkg(userpkg, home)
    mark = tmp_path / "imported"
    src = userpkg / "userpkg" / "pipeline.py"
    src.write_text(f"open({str(mark)!r}, 'w').close()\n" + PIPELINE)
    for args in (("show", rid), ("runs",), ("verify", rid), ("show", rid, "--json")):
        q = cli(*args, "--home", str(home), cwd=tmp_path)
        assert q.returncode == 0, q.stderr
    from subzero.serve.explorer import Explorer

    ex = Explorer(home)
    try:
        assert [r["id"] for r in ex.runs()] == [rid]
    finally:
        ex.close()
    assert not mark.exists()


def test_a_class_that_no_longer_imports_fails_only_what_needs_it(userpkg, tmp_path):
    home = tmp_path / "home"
    h = ("--home", str(home))
    rid = run_userpkg(userpkg, home, "--strategy", "full-one")
    src = userpkg / "userpkg" / "pipeline.py"
    src.rename(src.with_suffix(".bak"))  # the user moved their code away
    out = tmp_path / "x.npy"
    assert cli("export", rid, "boxmax", str(out), *h).returncode == 0
    q = ("query", rid, "backward", "--from", "peaks", "--cells", "5,5", "--to", "sky")
    stored = cli(*q, "--method", "stored", *h, "--json")
    assert stored.returncode == 0, stored.stderr
    line = one_line_error(cli(*q, "--method", "reexec", *h), "'boxmax'",
                          "userpkg.pipeline:BoxMax", "userpkg.pipeline", "cannot be found",
                          str(src))
    assert "--allow-changed-code" not in line
    assert cli("verify", rid, *h).returncode == 0


@pytest.mark.slow
def test_a_user_module_runs_as_spark_jobs(tmp_path):
    """Spark's workers import the user's modules (the pipeline and the helper module it
    takes its UDF from), which no distribution holds and which are on neither their path
    nor their working folder: the run ships them (and the answer equals the in-process
    run's)."""
    folder, elsewhere = tmp_path / "mine", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    # the pipeline takes its UDF from a helper module beside it
    pipe = PIPELINE.replace("class BoxMax(UDF):",
                            "from sparkhelpers import BoxMax\n\n\nclass _Old(UDF):")
    assert "from sparkhelpers import BoxMax" in pipe
    (folder / "sparkpipe.py").write_text(pipe)
    (folder / "sparkhelpers.py").write_text(PIPELINE)
    home = tmp_path / "home"
    env = {"PYTHONPATH": str(ROOT)}  # the workers know the project, not the user's folder
    runs = []
    for where in ("spark", "driver"):
        p = cli("run", str(folder / "sparkpipe.py"), "--param", "shape=64x48", "--where",
                where, "--home", str(home), "--json", cwd=elsewhere, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads(p.stdout)["run"])
    from subzero.engine.runs import load_run

    a, b = (load_run(home, r) for r in runs)
    assert np.array_equal(a.array("peaks"), b.array("peaks"))


def test_check_lineage_of_a_runs_operator_knows_its_code(userpkg, tmp_path):
    home = tmp_path / "home"
    h = ("--home", str(home))
    rid = run_userpkg(userpkg, home, "--param", "shape=12x10")
    ok = cli("check-lineage", f"{rid}:boxmax", "--samples", "4", *h, "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["sound"] is True
    src = userpkg / "userpkg" / "pipeline.py"
    src.write_text(PIPELINE.replace("size=3", "size=5"))  # now wider than it declares
    one_line_error(cli("check-lineage", f"{rid}:boxmax", *h, cwd=tmp_path),
                   "'boxmax'", "changed since the run", "--allow-changed-code")
    bad = cli("check-lineage", f"{rid}:boxmax", "--samples", "4", "--allow-changed-code", *h,
              cwd=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr  # the edit made it unsound
    assert bad.stdout.startswith("warning: boxmax: checked with code changed")
