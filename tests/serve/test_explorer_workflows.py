"""The explorer on every shipped workflow, without HTTP: each array of a run draws as a PNG
tile (numbers, booleans and text alike, whatever its rank), and each named query answers as
the Python API does, with masks of every array along its path."""

from __future__ import annotations

import io

import numpy as np
import pytest

import workflows
from subzero.api import Home
from subzero.serve.explorer import Explorer, unrle, view_shape

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARAMS = {"example": {"shape": "300x120"}, "astronomy": {"shape": "300x120"}, "genomics": {}}


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    home = tmp_path_factory.mktemp("explore") / "home"
    out = {name: Home(home).run(name, quiet=True, **PARAMS.get(name, {}))
           for name in workflows.available()}
    ex = Explorer(home)
    yield ex, out
    ex.close()


@pytest.mark.parametrize("name", workflows.available())
def test_every_array_draws_and_every_named_query_answers(runs, name):
    from PIL import Image

    ex, out = runs
    run = out[name]
    info = ex.run_info(run.id)
    assert {a["name"] for a in info["arrays"]} == set(run.arrays)
    for a in info["arrays"]:
        img = Image.open(io.BytesIO(ex.tile(run.id, a["name"], 0, 0, 0)))
        h, w = view_shape(a["shape"])
        assert img.size == (min(w, 256), min(h, 256)), a["name"]
    for q in info["named"]:
        expected = run.named_query(q["name"])
        doc = ex.named(run.id, q["name"])
        res = doc["results"][0]
        assert res["count"] == expected.count
        mask = unrle(res["mask"]["runs"], int(np.prod(res["shape"]))).reshape(res["shape"])
        np.testing.assert_array_equal(mask, expected.mask)
        assert res["along"][res["array"]]["count"] == expected.count
        for array, m in res["along"].items():  # each array's runs hold exactly its count
            assert m["count"] == int(np.asarray(m["runs"]).reshape(-1, 2)[:, 1].sum()), array
