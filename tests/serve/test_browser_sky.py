"""The explorer in a real headless Chromium on a run of a FITS image with a celestial WCS
and a replay of it: the readout places the cell under the cursor on the sky (as astropy
does), and the replay shows its changed cells beside its parent.

Screenshots go to a temporary folder (printed), never into the repository."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.serve.conftest import TAN, sky_header, wait_for
from tests.serve.test_browser_views import _shot

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _open(d, server, rid: str, array: str) -> None:
    from selenium.webdriver.common.by import By

    d.get(server.url + "/")
    wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "#graph .node"), what="the graph")
    d.execute_script("return window.subzero.openRun(arguments[0])", rid)
    wait_for(lambda: d.execute_script("return window.subzero.state.run && "
                                      "window.subzero.state.run.run") == rid,
             what=f"run {rid} open")
    d.execute_script("window.subzero.openArray(arguments[0], true)", array)
    wait_for(lambda: d.find_element(By.ID, "array-name").text == array, what=f"{array} open")
    d.execute_script("document.getElementById('viewer').scrollIntoView()")


def _sky(row: int, col: int) -> tuple[str, str]:
    """RA and Dec of a cell of the sky home's image, by astropy, as the readout shows them."""
    from astropy.coordinates import Angle
    from astropy.wcs import WCS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ra, dec = WCS(sky_header(TAN)).celestial.all_pix2world([[col, row]], 0)[0]
    return (Angle(ra, "deg").to_string(unit="hour", sep=":", precision=2, pad=True),
            Angle(dec, "deg").to_string(unit="deg", sep=":", precision=1, pad=True,
                                         alwayssign=True))


def test_the_readout_gives_the_value_and_sky_position_under_the_cursor(sky_home, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    run, _, _, server = sky_home
    d = browser
    _open(d, server, run.id, "image")
    for row, col in [(10, 7), (40, 25)]:
        d.execute_script("window.subzero.centerOn(arguments[0], arguments[1], 8)", row, col)
        off = d.execute_script("return window.subzero.cellOffset(arguments[0], arguments[1])",
                               row, col)
        ActionChains(d).move_to_element_with_offset(
            d.find_element(By.ID, "viewer"), round(off["dx"]), round(off["dy"])).perform()
        value = int(run.array("image")[row, col])
        want = f"image[{row}, {col}] = {value}"
        text = wait_for(lambda: (lambda t: t if want in t else None)(
            d.find_element(By.ID, "readout").text), what=f"the readout {want!r}")
        ra, dec = _sky(row, col)
        assert f"{want}  RA {ra}  Dec {dec}" in text, (text, ra, dec)
    _shot(d, "8-sky-readout")


def test_a_replay_shows_its_changed_cells_beside_its_parent(sky_home, browser):
    from selenium.webdriver.common.by import By

    run, replay, _, server = sky_home
    d = browser
    _open(d, server, replay.id, "image")
    assert d.find_element(By.ID, "replay-tools").is_displayed()
    d.find_element(By.ID, "diff-toggle").click()
    diff = wait_for(lambda: d.execute_script("return window.subzero.state.diff"),
                    what="the changed cells")
    _, doc = server.json(f"/api/runs/{replay.id}/diff/image")
    assert doc["changed"] == 2 and diff["count"] == 2  # the two replayed pixels
    d.execute_script("window.subzero.centerOn(3, 3, 8)")
    assert wait_for(lambda: d.execute_script("return window.subzero.overlayPixels(0, 'cyan')"),
                    what="the changed cells drawn") > 0
    _shot(d, "9-replay-diff")
    d.find_element(By.ID, "open-parent").click()
    panes = wait_for(lambda: (lambda p: p if p[0].get("rid") == run.id else None)(
        d.execute_script("return window.subzero.state.panes.map("
                         "(p) => ({rid: p.rid, array: p.array}))")),
        what="the parent in the left pane")
    assert panes[0] == {"rid": run.id, "array": "image"}
    assert panes[1] == {"rid": replay.id, "array": "image"}
    _shot(d, "10-replay-beside-parent")


@pytest.fixture(scope="module")
def real_astro(spark, shared_data, tmp_path_factory):
    """The astronomy workflow on the real LSST exposures, served."""
    from subzero.api import Home
    from tests.serve.conftest import Server

    home = Home(tmp_path_factory.mktemp("real") / "home")
    run = home.run("astronomy", data="real", quiet=True)
    server = Server(home.path)
    yield run, server, shared_data
    server.stop()


def test_the_real_run_answers_a_star_locally_and_reads_out_the_sky(real_astro, browser):
    """On the real exposures: the first click on a star pixel of clust answers the star's
    local lineage in exp1 (hundreds of pixels, the global means listed), and the readout of
    exp1 gives the RA/Dec astropy gives from the exposure's own header."""
    from astropy.io import fits
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    from tests.serve.test_browser import _star_pixel
    from tests.serve.test_browser_views import _answer, _click_cell, _open_clust

    run, server, data = real_astro
    d = browser
    _open_clust(d, server, run)
    r, c = _star_pixel(run)
    _click_cell(d, r, c)
    res = _answer(d)["results"][0]
    assert res["array"] == "exp1" and res["scope"] == "local" and 100 < res["count"] < 10_000
    assert "bgmean1" in {g["operator"] for g in res["global"]}
    _shot(d, "11-real-star")

    _, listed = server.json("/api/runs")
    origin = next(i["origin"] for r_ in listed if r_["id"] == run.id for i in r_["inputs"]
                  if i["name"] == "exp1")
    header = fits.getheader(next(data.rglob(origin)))
    from astropy.wcs import WCS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ra, dec = WCS(header).celestial.all_pix2world([[c, r]], 0)[0]
    d.execute_script("window.subzero.openArray('exp1', false)")
    off = d.execute_script("return window.subzero.cellOffset(arguments[0], arguments[1])", r, c)
    ActionChains(d).move_to_element_with_offset(
        d.find_element(By.ID, "viewer"), round(off["dx"]), round(off["dy"])).perform()
    text = wait_for(lambda: (lambda t: t if f"exp1[{r}, {c}]" in t and "RA " in t else None)(
        d.find_element(By.ID, "readout").text), what="the readout on the sky")
    sky = d.execute_script("return window.subzero.skyOf(window.subzero.state.arrays.exp1.wcs, "
                           "arguments[0], arguments[1])", r, c)
    assert abs(sky["ra"] - ra) * 3600 < 0.01 and abs(sky["dec"] - dec) * 3600 < 0.01
    _shot(d, "12-real-readout")
