"""The explorer on every shipped workflow, without HTTP: each array of a run draws as a PNG
tile (numbers, booleans and text alike, whatever its rank), and each named query answers as
the Python API does, with masks of every array along its path."""

from __future__ import annotations

import io

import numpy as np
import pytest

import workflows
from subzero.api import Home
from subzero.engine.arrays import read_array, write_array
from subzero.serve.explorer import (
    STRETCH_CELLS,
    TILE,
    Explorer,
    grey,
    read_view,
    stretch,
    unrle,
    view_shape,
)

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
        # each tile is the array's picture, every 2**z-th cell, in one contrast
        data = read_array(run.loaded.array_path(a["name"]))
        assert data.size <= STRETCH_CELLS  # (these runs are small: stretched over all)
        picture, lo_hi = data.reshape(h, w), stretch(data)
        for z, ty, tx in [(0, 0, 0), (1, 0, 0), (0, (h - 1) // TILE, (w - 1) // TILE)]:
            got = np.asarray(Image.open(io.BytesIO(ex.tile(run.id, a["name"], z, ty, tx))))
            f, span = 1 << z, TILE << z
            want = picture[ty * span:(ty + 1) * span:f, tx * span:(tx + 1) * span:f]
            np.testing.assert_array_equal(got, grey(want, *lo_hi), err_msg=a["name"])
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


@pytest.mark.parametrize("shape, chunks", [((1000,), (128,)), ((5, 7, 300), (2, 3, 64)),
                                           ((3, 2, 4, 70), (2, 1, 3, 16))])
def test_read_view_reads_the_rows_of_any_rank(tmp_path, shape, chunks):
    """A vector or an array of more than two axes: the rows and columns of its picture
    (:func:`view_shape`) a tile shows, at every zoom, whatever rows the tile starts at."""
    data = np.random.default_rng(1).normal(size=shape)
    path = tmp_path / "a.zarr"
    write_array(path, data, chunks)
    h, w = view_shape(shape)
    picture = data.reshape(h, w)
    for rows, cols, f in [((0, h), (0, w), 1), ((0, h), (0, w), 4), ((h // 3, h), (5, w), 3),
                          ((h - 1, h), (w // 2, w), 2), ((h // 2, h), (0, 1), 1)]:
        got = read_view(path, shape, rows, cols, f)
        np.testing.assert_array_equal(got, picture[rows[0]:rows[1]:f, cols[0]:cols[1]:f])

