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


def test_the_readout_places_the_cell_under_the_cursor_on_the_sky(sky_home, browser):
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
        text = wait_for(lambda: (lambda t: t if f"image[{row}, {col}]" in t else None)(
            d.find_element(By.ID, "readout").text), what=f"the readout at ({row}, {col})")
        ra, dec = _sky(row, col)
        assert f"RA {ra}  Dec {dec}" in text, (text, ra, dec)
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
