"""The explorer's API for astronomers (issue 42): runs listed with when they were made and
where their inputs came from, operators described, arrays placed on the sky (the WCS of a
FITS input, carried along its pixel grid), a replay's changes against its parent, and ds9
regions both ways (a query's answer to download, a region to start a query from)."""

from __future__ import annotations

import io
import warnings
from datetime import datetime

import numpy as np
import pytest

from subzero.engine.arrays import write_array
from subzero.serve.explorer import changed_cells, unrle
from subzero.serve.regions import (RegionError, ds9_to_mask, mask_boxes, mask_to_ds9,
                                   parse_ds9)
from subzero.serve.sky import SkyError, carry, header_wcs, pixel_to_sky
from tests.serve.conftest import SKY_SHAPE, TAN, sky_header

SHAPE = SKY_SHAPE


def _header(cards: dict, shape=SHAPE):
    return sky_header(cards, shape)


def _astropy(header, rows, cols):
    from astropy.wcs import WCS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return WCS(header).celestial.all_pix2world(cols, rows, 0)


# -- sky ------------------------------------------------------------------------------------
def test_tan_header_is_normalised_with_column_as_axis_1():
    w = header_wcs(_header(TAN))
    assert w == {"ctype": ["RA---TAN", "DEC--TAN"], "crval": [150.25, 2.5],
                 "crpix": [16.5, 24.0], "cd": [[-5.0e-5, 1.0e-5], [1.0e-5, 5.0e-5]],
                 "radesys": "ICRS", "axes": "x=column,y=row"}


@pytest.mark.parametrize("cards", [
    TAN,
    # PC times CDELT, rotated, far from the reference pixel, near the pole
    {"CTYPE1": "RA---TAN", "CTYPE2": "DEC--TAN", "CRVAL1": 359.9, "CRVAL2": 80.0,
     "CRPIX1": -200.0, "CRPIX2": 900.0, "CDELT1": -2e-4, "CDELT2": 2e-4,
     "PC1_1": 0.8, "PC1_2": -0.6, "PC2_1": 0.6, "PC2_2": 0.8},
    # latitude on axis 1
    {"CTYPE1": "DEC--TAN", "CTYPE2": "RA---TAN", "CRVAL1": -30.0, "CRVAL2": 10.0,
     "CRPIX1": 5.0, "CRPIX2": 7.0, "CD1_1": 1e-3, "CD1_2": 0.0, "CD2_1": 0.0,
     "CD2_2": -1e-3},
])
def test_pixel_to_sky_agrees_with_astropy_on_synthetic_tan(cards):
    rng = np.random.default_rng(5)
    rows, cols = rng.uniform(-5, SHAPE[0] + 5, 500), rng.uniform(-5, SHAPE[1] + 5, 500)
    lon, lat = pixel_to_sky(header_wcs(_header(cards)), rows, cols)
    a, b = _astropy(_header(cards), rows, cols)
    if cards["CTYPE1"].startswith("DEC"):
        a, b = b, a
    np.testing.assert_allclose(lon, a % 360.0, atol=1e-9)
    np.testing.assert_allclose(lat, b, atol=1e-9)


def test_pixel_to_sky_agrees_with_astropy_on_the_lsst_exposure():
    from astropy.io import fits

    from workflows.astro_data import exposure_paths

    paths = exposure_paths()
    if paths is None:
        pytest.skip("no LSST exposures in $SUBZERO_DATA or ../shared/data")
    header = fits.getheader(paths[0])
    rows, cols = np.meshgrid(np.arange(0, 2001, 50), np.arange(0, 513, 16), indexing="ij")
    lon, lat = pixel_to_sky(header_wcs(header), rows, cols)
    a, b = _astropy(header, rows, cols)
    np.testing.assert_allclose(lon, a, atol=1e-9)
    np.testing.assert_allclose(lat, b, atol=1e-9)


def test_only_tan_is_projected():
    w = header_wcs(_header(dict(TAN, CTYPE1="RA---SIN", CTYPE2="DEC--SIN")))
    with pytest.raises(SkyError, match="only TAN") as e:
        pixel_to_sky(w, [0], [0])
    assert "\n" not in str(e.value)


def test_wcs_is_carried_along_arrays_of_the_same_shape_only():
    w = {"ctype": ["RA---TAN", "DEC--TAN"]}
    got = carry({"img": (4, 4), "k": (1, 1), "a": (4, 4), "m": (1, 1), "b": (4, 4)},
                {"a": ["k", "img"], "m": ["a"], "b": ["m"]}, {"img": w, "k": None})
    assert got == {"img": w, "k": None, "a": w, "m": None, "b": None}


# -- regions --------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(40))
def test_mask_to_ds9_and_back_is_the_same_mask(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(1, 40, 2))
    mask = rng.random(shape) < rng.choice([0.02, 0.3, 0.9])
    text = mask_to_ds9(mask, shape)
    assert text.startswith("# Region file format: DS9 version 4.1\n") and "\nimage\n" in text
    np.testing.assert_array_equal(ds9_to_mask(text, shape), mask)


def test_boxes_merge_runs_then_equal_spans_of_consecutive_rows():
    m = np.array([[0, 1, 1, 0, 1],
                  [0, 1, 1, 0, 1],
                  [0, 1, 1, 1, 1]], bool)
    assert mask_boxes(m) == [(0, 2, 1, 3), (0, 2, 4, 5), (2, 3, 1, 5)]
    assert mask_to_ds9(m, m.shape).splitlines()[-3:] == [
        "box(2.5,1.5,2,2,0)", "box(5,1.5,1,2,0)", "box(3.5,3,4,1,0)"]


def test_circle_polygon_point_and_exclusions_select_cells_by_their_centres():
    circle = ds9_to_mask("image\ncircle(3,3,1.5)", (5, 5)).astype(int)
    np.testing.assert_array_equal(circle, [[0, 0, 0, 0, 0],
                                           [0, 1, 1, 1, 0],
                                           [0, 1, 1, 1, 0],
                                           [0, 1, 1, 1, 0],
                                           [0, 0, 0, 0, 0]])
    tri = ds9_to_mask("polygon(0.5,0.5,5.5,0.5,0.5,5.5) # color=red", (5, 6)).astype(int)
    np.testing.assert_array_equal(tri, [[1, 1, 1, 1, 0, 0],
                                        [1, 1, 1, 0, 0, 0],
                                        [1, 1, 0, 0, 0, 0],
                                        [1, 0, 0, 0, 0, 0],
                                        [0, 0, 0, 0, 0, 0]])
    # an exclusion subtracts whatever its place; physical coordinates are image ones here
    holed = ds9_to_mask("-point(2,2)\nphysical; box(2,2,3,3,0); point(5,1)", (3, 5))
    np.testing.assert_array_equal(holed.astype(int), [[1, 1, 1, 0, 1],
                                                      [1, 0, 1, 0, 0],
                                                      [1, 1, 1, 0, 0]])


@pytest.mark.parametrize("text, words", [
    ("fk5; circle(150.1,2.2,3\")", "sky coordinates"),
    ("icrs\nbox(10:00:00,+02:00:00,5\",5\",0)", "sky coordinates"),
    ("galactic;point(12.5,3.3)", "sky coordinates"),
    ("circle(10:00:00,+02:00:00,3\")", "sky coordinates"),
    ("annulus(5,5,1,2)", "not read here"),
    ("circle(1,2)", "expected circle(x,y,radius)"),
    ("polygon(1,1,2,2,3)", "expected polygon"),
    ("box(1,1,0,2,0)", "sizes > 0"),
    ("circle(a,b,c)", "not a number"),
    ("<html>", "expected a ds9 region"),
])
def test_bad_region_text_is_one_line(text, words):
    with pytest.raises(RegionError, match=words.replace("(", r"\(").replace(")", r"\)")) as e:
        ds9_to_mask(text, (8, 8))
    assert "\n" not in str(e.value)


def test_annotations_and_comments_select_nothing():
    assert parse_ds9("# Region file format: DS9 version 4.1\nglobal color=green\nimage\n"
                     "# text(3,3) text={a;b}\nline(1,1,4,4)\ntext(2,2) # text={x}\n") == []


# -- the API --------------------------------------------------------------------------------
def test_runs_say_when_and_from_what(sky_home):
    run, replay, made, server = sky_home
    status, runs = server.json("/api/runs")
    assert status == 200
    by = {r["id"]: r for r in runs}
    for r in runs:
        when = datetime.fromisoformat(r["created"].replace("Z", "+00:00"))
        assert when.tzinfo is not None and when.utcoffset().total_seconds() == 0
        assert abs(when.timestamp() - r["started"]) < 1
    files = [{"name": "image", "origin": "calexp-0001.fits", "auxiliary": False},
             {"name": "threshold", "origin": "thr.npy", "auxiliary": False}]
    def inputs(rid):  # in the order the catalog recorded them
        return sorted(by[rid]["inputs"], key=lambda i: i["name"])

    assert inputs(run.id) == files and by[run.id]["real"] is True
    assert by[run.id]["parent"] is None
    assert by[replay.id]["parent"] == run.id and by[replay.id]["real"] is True
    assert inputs(made.id) == [{"name": "image", "origin": "generated",
                                      "auxiliary": False},
                                     {"name": "threshold", "origin": "generated",
                                      "auxiliary": False}]
    assert by[made.id]["real"] is False


def test_operators_are_described_and_arrays_placed_on_the_sky(sky_home):
    run, replay, made, server = sky_home
    status, info = server.json(f"/api/runs/{run.id}")
    assert status == 200
    ops = {o["name"]: o for o in info["operators"]}
    assert ops["calibrate"]["description"] == "``x * scale + offset`` in float64."
    assert ops["smooth"]["description"].startswith("Convolution with a fixed odd-sized "
                                                   "kernel") and "\n" not in \
        ops["smooth"]["description"]
    wcs = {a["name"]: a["wcs"] for a in info["arrays"]}
    assert wcs["image"] == header_wcs(_header(TAN))
    for name in ("calibrate", "smooth", "background", "residual", "bright"):
        assert wcs[name] == wcs["image"], name
    assert wcs["threshold"] is None
    for rid in (replay.id,):
        got = {a["name"]: a["wcs"] for a in server.json(f"/api/runs/{rid}")[1]["arrays"]}
        assert got == wcs
    plain = server.json(f"/api/runs/{made.id}")[1]
    assert all(a["wcs"] is None for a in plain["arrays"])


def test_a_replay_diff_holds_exactly_the_changed_cells(sky_home):
    run, replay, made, server = sky_home
    for name in ("image", "calibrate", "smooth", "background", "residual", "bright"):
        status, doc = server.json(f"/api/runs/{replay.id}/diff/{name}")
        assert status == 200, doc
        old, new = run.array(name), replay.array(name)
        want = (old != new) & ~(np.isnan(old) & np.isnan(new)) if old.dtype.kind == "f" \
            else old != new
        assert (doc["run"], doc["parent"], doc["array"]) == (replay.id, run.id, name)
        assert doc["shape"] == list(SHAPE) and doc["changed"] == int(want.sum())
        assert doc["mask"]["count"] == int(want.sum())
        np.testing.assert_array_equal(unrle(doc["mask"]["runs"], want.size), want.ravel())
    assert server.json(f"/api/runs/{replay.id}/diff/image")[1]["changed"] == 2


def test_a_diff_needs_a_replay_and_an_array(sky_home):
    run, replay, made, server = sky_home
    status, doc = server.json(f"/api/runs/{run.id}/diff/image")
    assert status == 404 and "not a replay" in doc["error"] and "\n" not in doc["error"]
    status, doc = server.json(f"/api/runs/{replay.id}/diff/nothing")
    assert status == 404 and "'nothing'" in doc["error"]


def test_changed_cells_compare_chunk_by_chunk_with_nan_equal_nan(tmp_path):
    a = np.arange(56, dtype=float).reshape(7, 8)
    b = a.copy()
    a[0, 0] = b[0, 0] = np.nan        # unchanged
    b[6, 7] = np.nan                  # changed
    b[3, 4] = -1.0                    # changed
    write_array(tmp_path / "a.zarr", a, (3, 3))
    write_array(tmp_path / "b.zarr", b, (3, 3))
    lin = changed_cells(tmp_path / "b.zarr", tmp_path / "a.zarr", (7, 8), (3, 3))
    assert lin.tolist() == [3 * 8 + 4, 6 * 8 + 7]


def test_query_answers_download_as_ds9_regions(sky_home):
    run, replay, made, server = sky_home
    q = f"/api/runs/{run.id}/query.{{}}?direction=forward&from=image&cells=3,3;10,20&to=smooth"
    status, raw, headers = server.get(q.format("reg"))
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert headers["content-disposition"].endswith('.reg"')
    npy = np.load(io.BytesIO(server.get(q.format("npy"))[1]))
    np.testing.assert_array_equal(ds9_to_mask(raw.decode(), SHAPE), npy)


def test_named_queries_download_as_ds9_regions(server, astro_home):
    _, run = astro_home
    name = next(iter(run.workflow.queries))
    status, raw, _ = server.get(f"/api/runs/{run.id}/named/{name}.reg")
    assert status == 200
    mask = np.load(io.BytesIO(server.get(f"/api/runs/{run.id}/named/{name}.npy")[1]))
    np.testing.assert_array_equal(ds9_to_mask(raw.decode(), mask.shape), mask)


def test_a_query_starts_from_a_ds9_region(sky_home):
    run, replay, made, server = sky_home
    region = "# Region file format: DS9 version 4.1\nimage\nbox(5,6,3,3,0)\n-point(5,6)\n"
    status, doc = server.json(f"/api/runs/{run.id}/query",
                              {"direction": "forward", "from": "image", "region": region,
                               "to": "calibrate"})
    assert status == 200, doc
    want = np.zeros(SHAPE, bool)
    want[4:7, 3:6] = True
    want[5, 4] = False
    res = doc["results"][0]
    assert res["count"] == 8
    np.testing.assert_array_equal(unrle(res["mask"]["runs"], want.size), want.ravel())


@pytest.mark.parametrize("body, code, words", [
    ({"region": "fk5; circle(150.1,2.2,3\")"}, 400, "sky coordinates"),
    ({"region": "box(100,100,2,2,0)"}, 400, "holds no cell"),
    ({"region": "box(5,5,2,2,0)", "cells": "1,1"}, 400, "exactly one of"),
    ({"region": 7}, 400, "ds9 region text"),
])
def test_bad_regions_are_one_line(sky_home, body, code, words):
    run, replay, made, server = sky_home
    status, doc = server.json(f"/api/runs/{run.id}/query",
                              {"direction": "forward", "from": "image", "to": "calibrate",
                               **body})
    assert status == code and words in doc["error"] and "\n" not in doc["error"]


def test_values_travel_in_blocks_for_the_readout(sky_home):
    run, _, _, server = sky_home
    image = run.array("image")
    status, doc = server.json(f"/api/runs/{run.id}/arrays/image/values/1/0")
    assert status == 200 and doc["rows"] == [32, 48] and doc["cols"] == [0, 32]
    assert doc["values"] == image[32:48, 0:32].tolist()
    status, doc = server.json(f"/api/runs/{run.id}/arrays/calibrate/values/0/0")
    assert status == 200 and doc["values"][0][0] == pytest.approx(float(run.array(
        "calibrate")[0, 0]))
    status, doc = server.json(f"/api/runs/{run.id}/arrays/image/values/2/0")
    assert status == 400 and "outside array 'image'" in doc["error"]
