"""Where a run's inputs came from: recorded in the catalog (a file's path, size and
checksum, or how the workflow made it), shown by ``show``, ``runs --json`` and ``run``;
``$SUBZERO_DATA`` chooses the astronomy exposures; ``latest:WORKFLOW``; old catalogs are
migrated."""

import hashlib
import json
import sqlite3

import numpy as np
import pytest

import workflows
from subzero import manifest
from subzero.api import Home
from subzero.cells import Box
from subzero.cli import main
from subzero.engine import inputs as engine_inputs
from subzero.engine import layout
from subzero.engine.catalog import SCHEMA_VERSION, Catalog
from subzero.engine.inputs import file_origin, input_origins, origin_text
from subzero.engine.migrate import write_manifest
from subzero.errors import CatalogError, StoreError, WorkflowError
from subzero.workflow import Workflow
from tests.conftest import run_cli
from workflows import astronomy
from workflows.astro_data import EXPOSURE_FILES

# the catalog as SubZero wrote it before origins were recorded (schema version 1)
V1_ARRAYS = """CREATE TABLE arrays (
    run TEXT NOT NULL, name TEXT NOT NULL, shape TEXT NOT NULL, dtype TEXT NOT NULL,
    chunks TEXT NOT NULL, producer TEXT, nbytes INTEGER, stored_bytes INTEGER,
    PRIMARY KEY (run, name))"""


# ---------------------------------------------------------------------------------------
# the catalog
# ---------------------------------------------------------------------------------------


def test_an_old_catalog_is_migrated_and_keeps_its_runs(tmp_path):
    path = tmp_path / "catalog.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.execute(V1_ARRAYS)
    db.execute("INSERT INTO arrays VALUES ('r1', 'image', '[4, 4]', 'uint16', '[4, 4]', NULL, "
               "32, 100)")
    db.commit()
    db.close()
    cat = Catalog(path)
    assert cat.schema_version == SCHEMA_VERSION == 6
    assert cat.arrays("r1")["image"]["origin"] is None  # recorded before origins were
    assert cat.input_origins("r1") == {"r1": {"image": None}}
    cat.add_array("r2", "image", (4, 4), "uint16", (4, 4), None, 32, 100,
                  origin={"kind": "workflow", "description": "generated, seed 1"})
    assert cat.input_origins()["r2"]["image"]["description"] == "generated, seed 1"
    cat.close()
    assert Catalog(path).schema_version == SCHEMA_VERSION  # opened again: nothing to do
    assert origin_text(None).startswith("not recorded")


def _complete(cat: Catalog, workflow: str, arrays: list[str], origin: dict | None = None
              ) -> str:
    rid = cat.create_run(workflow, {}, "subzero", {})
    for k, name in enumerate(arrays):
        cat.add_array(rid, name, (4, 4), "float64", (4, 4), None if k == 0 else name, 128,
                      origin=origin if k == 0 else None)
    cat.finish_run(rid, "complete", runtime_s=1.0, input_bytes=128, lineage_bytes=0)
    return rid


def test_latest_of_a_workflow(tmp_path):
    cat = Catalog(tmp_path / "catalog.sqlite")
    a = _complete(cat, "astronomy", ["exp1", "clust"])
    m = _complete(cat, "mine", ["image", "resid"])
    assert cat.run("latest")["id"] == m
    assert cat.run("latest:astronomy")["id"] == a
    assert cat.run("last:mine")["id"] == m
    with pytest.raises(CatalogError, match=r"latest:genomics: no complete run of workflow "
                       r"'genomics' .*complete runs are of astronomy, mine"):
        cat.run("latest:genomics")
    info = cat.run("latest")
    msg = cat.missing_array("latest", info, "clust", ["image", "resid"])
    assert msg.startswith(f"run {m} (latest: the newest run of any workflow, here 'mine') "
                          "has no array 'clust'; use latest:astronomy")
    assert "\n" not in msg
    assert cat.missing_array(m, info, "clust", ["image"]) == (
        f"run {m} has no array 'clust' (arrays: image)")
    assert "no complete run has one" in cat.missing_array("latest", info, "nope", ["image"])


def _fake_run(home, workflow: str, wf: Workflow, arrays: list[str],
              origin: dict | None = None) -> str:
    """A complete run in the catalog with its manifest (no Spark, no arrays)."""
    home.mkdir(parents=True, exist_ok=True)
    cat = Catalog(layout.catalog_path(home))
    rid = _complete(cat, workflow, arrays, origin)
    doc, blobs = manifest.workflow_manifest(wf)
    data = manifest.dumps(doc)
    layout.run_dir(home, rid).mkdir(parents=True, exist_ok=True)
    write_manifest(home, rid, blobs, data)
    cat.set_manifest(rid, hashlib.sha256(data).hexdigest(), {})
    cat.close()
    return rid


def test_latest_without_the_array_says_which_workflow_latest_is(home):
    astro = astronomy.build(shape="64x48")
    mine = workflows.build("example", shape="8x8")
    _fake_run(home, "astronomy", astro, ["exp1", "clust"])
    _fake_run(home, "example", mine, ["image", "bright"])
    with pytest.raises(StoreError, match=r"here 'example'\) has no array 'clust'; use "
                       "latest:astronomy"):
        Home(home).get("latest").array("clust")
    with pytest.raises(StoreError, match="use latest:astronomy"):
        Home(home).get("latest").backward([(1, 2)], start="clust", to="exp1")
    assert Home(home).get("latest:astronomy").id == "r1"
    # the CLI: export (any command taking a RUN) accepts latest:WORKFLOW
    p = run_cli("export", "latest", "clust", str(home / "x.npy"), "--home", str(home))
    assert p.returncode == 2 and "use latest:astronomy" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    p = run_cli("show", "latest:astronomy", "--home", str(home))
    assert p.returncode == 0 and p.stdout.startswith("run r1: astronomy"), p.stderr
    p = run_cli("show", "latest:genomics", "--home", str(home))
    assert p.returncode == 2 and "no complete run of workflow 'genomics'" in p.stderr


def test_show_and_runs_json_give_each_inputs_origin(home, capsys):
    origin = {"kind": "file", "path": "/data/e0.fits", "bytes": 4_110_000, "mtime": 1.0,
              "sha256": "ab" * 32, "auxiliary": False}
    rid = _fake_run(home, "example", workflows.build("example", shape="8x8"),
                    ["image", "bright"], origin)
    assert main(["show", rid, "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "input image: /data/e0.fits (4.1 MB, sha256 abababababab...)" in out
    assert main(["show", rid, "--home", str(home), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["image"]["sha256"] == "ab" * 32
    assert main(["runs", "--home", str(home), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["inputs"] == {"image": origin}
    assert main(["runs", "--home", str(home)]) == 0
    assert "files" in capsys.readouterr().out.splitlines()[2]


# ---------------------------------------------------------------------------------------
# origins
# ---------------------------------------------------------------------------------------


def test_file_origin_is_the_files_sha256(tmp_path):
    f = tmp_path / "a.npy"
    np.save(f, np.arange(1000))
    o = file_origin(f)
    assert o["kind"] == "file" and o["path"] == str(f.resolve())
    assert o["bytes"] == f.stat().st_size
    assert o["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()


def test_a_big_files_checksum_covers_its_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_inputs, "FULL_HASH_BYTES", 100)
    monkeypatch.setattr(engine_inputs, "HASH_END_BYTES", 10)
    f = tmp_path / "big.bin"
    data = bytes(range(256))
    f.write_bytes(data)
    o = file_origin(f)
    assert "sha256" not in o
    assert o["sha256_ends"] == hashlib.sha256(data[:10] + data[-10:]).hexdigest()
    assert "sha256 of first and last MiB" in origin_text(o)


def test_input_origins_of_files_and_generated_inputs(tmp_path):
    f = tmp_path / "img.npy"
    np.save(f, np.zeros((4, 4)))
    default = tmp_path / "found.npy"
    np.save(default, np.ones((4, 4)))
    wf = Workflow("w")
    wf.input("a", (4, 4), source=lambda: np.zeros((4, 4)), origin="generated, seed 3")
    wf.input("b", (4, 4), source=lambda: np.zeros((4, 4)))
    wf.input("c", (4, 4), path=str(default))
    wf.input("k", (1, 1), source=lambda: np.zeros((1, 1)), auxiliary=True)
    got = input_origins(wf, {"b": str(f)})
    assert got["a"] == {"kind": "workflow", "description": "generated, seed 3",
                        "auxiliary": False}
    assert got["b"]["path"] == str(f.resolve()) and got["c"]["path"] == str(default.resolve())
    assert got["k"]["auxiliary"] and origin_text(got["k"]).startswith("made by the workflow")
    # an input the workflow names a file for is read from it
    sources, whole = engine_inputs.plan_inputs(wf, {"b": str(f)})
    assert set(sources) == {"b", "c"}
    assert (sources["c"](Box.full((4, 4))) == 1).all()


# ---------------------------------------------------------------------------------------
# $SUBZERO_DATA and the astronomy exposures
# ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_data(tmp_path, monkeypatch):
    """$SUBZERO_DATA set to a folder holding (empty stand-ins of) the two exposures."""
    for name in EXPOSURE_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setenv("SUBZERO_DATA", str(tmp_path))
    return tmp_path


def _paths(wf: Workflow) -> dict:
    return {n: s.path for n, s in wf.inputs.items() if not s.auxiliary}


def test_subzero_data_set_gives_the_real_exposures(fake_data):
    wf = astronomy.build()
    assert _paths(wf) == {f"exp{e}": str(fake_data / EXPOSURE_FILES[e - 1]) for e in (1, 2)}
    assert wf.params["data"] == "files"
    assert astronomy.build(data="real").params["data"] == "files"


@pytest.mark.parametrize("params", [{"shape": "64x48"}, {"seed": 0}, {"ccds": 1},
                                    {"data": "generated"}])
def test_asking_for_generated_exposures_wins_over_subzero_data(fake_data, params):
    wf = astronomy.build(**params)
    assert _paths(wf) == {"exp1": None, "exp2": None} and wf.params["data"] == "generated"
    assert wf.inputs["exp1"].origin.startswith("generated, seed 0, shape ")


def test_without_subzero_data_exposures_are_generated(monkeypatch):
    monkeypatch.delenv("SUBZERO_DATA", raising=False)
    wf = astronomy.build()
    assert _paths(wf) == {"exp1": None, "exp2": None}
    assert wf.inputs["exp1"].origin == "generated, seed 0, shape 2001x513"
    assert wf.inputs["satmask"].origin == "constant saturation mask (all zero)"


def test_subzero_data_without_the_exposures_says_so_in_the_origin(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBZERO_DATA", str(tmp_path))
    wf = astronomy.build()
    assert _paths(wf) == {"exp1": None, "exp2": None}
    assert f"$SUBZERO_DATA={tmp_path} holds no lsst/" in wf.inputs["exp1"].origin
    with pytest.raises(WorkflowError, match=f"data=real: no LSST exposures in {tmp_path}"):
        astronomy.build(data="real")


@pytest.mark.parametrize("params, msg", [
    ({"data": "fake"}, "data must be one of auto, real, generated"),
    ({"data": "real", "shape": "64x48"}, "data=real reads the real exposures"),
    ({"inputs": {"exp3": "/x.fits"}}, "--input exp3: unknown input 'exp3'; the astronomy "
                                      "workflow with ccds=1 reads exp1, exp2"),
])
def test_bad_data_choices_name_the_value(fake_data, params, msg):
    with pytest.raises(WorkflowError, match=msg.replace("(", r"\(")):
        astronomy.build(**params)


def test_cli_unknown_astronomy_input_is_one_line(tmp_path):
    p = run_cli("run", "astronomy", "--input", "exp1=/a.fits", "--input", "exp3=/b.fits",
                "--home", str(tmp_path / "h"))
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "unknown input 'exp3'" in line and "reads exp1, exp2" in line


# ---------------------------------------------------------------------------------------
# runs on Spark
# ---------------------------------------------------------------------------------------


@pytest.mark.spark
def test_a_run_records_a_files_origin_and_says_where_inputs_came_from(spark, home, tmp_path,
                                                                      capsys):
    from workflows.example import generate_image

    f = tmp_path / "image.npy"
    np.save(f, generate_image((40, 30), seed=1))
    assert main(["run", "example", "--param", "shape=40x30", "--input", f"image={f}",
                 "--home", str(home), "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)  # stdout holds the JSON only
    digest = hashlib.sha256(f.read_bytes()).hexdigest()
    assert doc["inputs"]["image"]["sha256"] == digest
    assert f"subzero: input image: {f.resolve()} (" in err
    assert "subzero: input threshold: " in err
    assert main(["show", "latest", "--home", str(home), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["inputs"]["image"]["sha256"] == digest
    assert shown["inputs"]["threshold"]["kind"] == "workflow"


@pytest.mark.spark
def test_astronomy_with_subzero_data_reads_the_real_exposures(spark, home, shared_data,
                                                              monkeypatch):
    if astronomy.real_inputs() is None:
        pytest.skip("no real LSST exposures")
    monkeypatch.setenv("SUBZERO_DATA", str(shared_data))
    run = Home(home).run("astronomy", strategy="blackbox-opt", quiet=True)
    origins = run.result.inputs
    assert origins["exp1"]["path"].endswith(EXPOSURE_FILES[0])
    assert origins["exp1"]["bytes"] > 2_000_000 and len(origins["exp1"]["sha256"]) == 64
    cat = Catalog(layout.catalog_path(home))
    assert cat.input_origins(run.id)[run.id]["exp2"]["path"].endswith(EXPOSURE_FILES[1])
    cat.close()


def test_a_version_2_catalog_gains_parents_and_checksums(tmp_path):
    path = tmp_path / "catalog.sqlite"
    cat = Catalog(path)
    rid = cat.create_run("example", {}, "subzero", {})
    cat.close()
    db = sqlite3.connect(path)  # make it a version-2 catalog: without the three columns
    for table, col in (("runs", "parent"), ("runs", "derivation"), ("shards", "checksum")):
        db.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    cat = Catalog(path)
    assert cat.schema_version == SCHEMA_VERSION
    assert cat.run(rid)["parent"] is None and cat.run(rid)["workflow"] == "example"
    cat.add_shards(rid, [dict(op="a", strategy="PayOne", chunk="0", path="p", data_bytes=1,
                              index_bytes=0, pairs=1, out_cells=1, in_cells=1, fanin=1.0,
                              fanout=1.0, encode_s=0.0, attempt=0)])
    assert cat.shards(rid)[0]["checksum"] is None
    cat.close()


def test_a_version_3_catalog_gains_where_its_runs_executed(tmp_path):
    path = tmp_path / "catalog.sqlite"
    cat = Catalog(path)
    old = cat.create_run("example", {}, "subzero", {})
    cat.close()
    db = sqlite3.connect(path)  # make it a version-3 catalog: without runs.placement
    db.execute("ALTER TABLE runs DROP COLUMN placement")
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    cat = Catalog(path)
    assert cat.schema_version == SCHEMA_VERSION == 6
    assert cat.run(old)["placement"] is None  # recorded before: not known
    new = cat.create_run("example", {}, "subzero", {},
                         placement={"where": "driver", "why": "small"})
    assert cat.run(new)["placement"] == {"where": "driver", "why": "small"}
    assert [r["placement"] for r in cat.runs()] == [None, {"where": "driver", "why": "small"}]
    cat.close()

