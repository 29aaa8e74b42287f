"""A one-shot ``subzero query`` on stored or mapped lineage starts no JVM and imports only
what it needs: no pyspark (the run's workflow pickles without cloudpickle), no zarr (named
queries' start cells are chosen once, when the run finishes, and kept in the catalog) and no
scipy (the star payload's ring is a numpy dilation)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

import workflows
from subzero.api import Home
from subzero.engine import layout
from subzero.engine.catalog import Catalog

HEAVY = ("pyspark", "zarr", "scipy", "astropy", "pulp", "matplotlib", "rtree", "starlette",
         "uvicorn", "subzero.cli.optimize", "subzero.cli.serve", "subzero.cli.runs")

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def astro(spark, tmp_path_factory):
    home = tmp_path_factory.mktemp("fastq") / "home"
    run = Home(home).run("astronomy", shape="400x160", quiet=True)
    return home, run


@pytest.mark.parametrize("name", workflows.available())
def test_builtin_workflows_pickle_without_cloudpickle(name):
    wf = workflows.build(name).validate()
    again = pickle.loads(pickle.dumps(wf)).validate()
    assert list(again.ops) == list(wf.ops) and set(again.queries) == set(wf.queries)


def test_named_cells_are_chosen_once_and_equal_a_fresh_choice(astro):
    home, run = astro
    cat = Catalog(layout.catalog_path(home))
    try:
        for name in ("BQ0", "BQ1", "BQ2", "BQ3"):
            cached = cat.named_cells(run.id, name)
            assert cached is not None, name  # chosen when the run finished
            fresh = run.workflow.queries[name].cells(run)
            np.testing.assert_array_equal(cached, fresh)
        assert cat.named_cells(run.id, "BQ4") is None  # a fixed box: nothing to remember
    finally:
        cat.close()


# stored lineage asked for where the path stores it: under heavy load a slow read may
# otherwise switch to re-execution, which reads arrays (zarr) by design
@pytest.mark.parametrize("name, method", [("BQ0", "stored"), ("BQ1", "stored"),
                                          ("BQ4", "stored"), ("FQ0", "auto")])
def test_one_shot_cli_query_imports_no_spark_zarr_or_scipy(astro, name, method):
    home, run = astro
    code = ("import sys, io, contextlib\n"
            "from subzero.cli.main import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            f"    rc = main(['query', '{run.id}', '--named', '{name}', '--json',\n"
            f"               '--method', '{method}', '--home', {str(home)!r}])\n"
            f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
            "print(rc, heavy, out.getvalue(), sep='\\n')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rc, heavy, out = p.stdout.split("\n", 2)
    assert rc == "0" and heavy == "[]", heavy
    doc = json.loads(out)
    assert doc["count"] == run.named_query(name).count
    assert not any(s["method"] == "reexec" for s in doc["steps"]), doc["steps"]


def test_every_command_is_registered_by_the_module_the_table_names():
    from subzero.cli.main import COMMANDS, _command_names, build_parser, command_modules

    assert _command_names(build_parser()) == list(COMMANDS)  # help order
    for command, module in COMMANDS.items():
        assert command_modules([command, "--json"]) == [module]
        assert _command_names(build_parser([command])) == [
            c for c, m in COMMANDS.items() if m == module]
    assert command_modules([]) == command_modules(["nosuch"]) == list(dict.fromkeys(
        COMMANDS.values()))
