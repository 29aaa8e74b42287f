"""The explorer's views in a real headless Chromium: a local answer and its global
dependencies, controls that stay put, a link that reopens the same picture, the readout,
two panes locked together, the minimap, blinking, a ds9 region as a start.

Screenshots go to a temporary folder (printed), never into the repository."""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import pytest

from tests.serve.conftest import wait_for
from tests.serve.test_browser import _star_pixel

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SHOTS = Path(tempfile.gettempdir()) / "subzero-browser"


def _shot(d, name: str) -> Path:
    SHOTS.mkdir(exist_ok=True)
    path = SHOTS / f"{name}.png"
    d.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def _open_clust(d, server, run, target: str = "exp1") -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d.get(server.url + "/")
    wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "#graph .node"), what="the workflow graph")
    Select(d.find_element(By.ID, "run-select")).select_by_value(run.id)
    d.find_element(By.CSS_SELECTOR, '#graph .node[data-array="clust"]').click()
    wait_for(lambda: d.find_element(By.ID, "array-name").text == "clust", what="clust open")
    d.find_element(By.ID, "direction-backward").click()
    Select(d.find_element(By.ID, "target-select")).select_by_value(target)
    d.execute_script("document.getElementById('viewer').scrollIntoView()")


def _click_cell(d, r: int, c: int, zoom: float = 8) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    before = d.execute_script("return window.subzero.state.answer")
    d.execute_script("window.subzero.centerOn(arguments[0], arguments[1], arguments[2])",
                     r, c, zoom)
    off = d.execute_script("return window.subzero.cellOffset(arguments[0], arguments[1])", r, c)
    ActionChains(d).move_to_element_with_offset(d.find_element(By.ID, "viewer"),
                                                round(off["dx"]), round(off["dy"])).click().perform()
    wait_for(lambda: (lambda a: a and a is not before and (a.get("spec") or {}).get("cells")
                      == f"{r},{c}")(d.execute_script("return window.subzero.state.answer")),
             what=f"the answer for ({r}, {c})")


def _answer(d) -> dict:
    return d.execute_script("return window.subzero.state.answer")


def test_a_star_pixel_gives_a_local_answer_and_its_global_dependencies(server, browser,
                                                                        astro_home):
    from selenium.webdriver.common.by import By

    _, run = astro_home
    d = browser
    _open_clust(d, server, run)
    r, c = _star_pixel(run)
    _click_cell(d, r, c)
    wait_for(lambda: d.find_element(By.ID, "answer-name").text == "exp1", what="exp1 on the right")
    assert d.find_element(By.ID, "array-name").text == "clust"
    res = _answer(d)["results"][0]
    count = int(d.find_element(By.ID, "result-count").text.replace(",", ""))
    assert count == res["count"] and res["array"] == "exp1"
    assert wait_for(lambda: d.execute_script("return window.subzero.overlayPixels()"),
                    what="the overlay") > 0
    _shot(d, "1-local-answer")
    hover = d.execute_script(
        "return document.querySelector('#graph .node[data-array=\"rmcr\"] title').textContent")
    assert "comp-one-bwd: mapping functions, plus payloads stored for the cells" in hover
    assert res["scope"] == "local"
    assert 1 < count < 10_000  # the star and its neighbourhood, not the whole exposure
    items = d.find_elements(By.CSS_SELECTOR, "#global-deps li")
    assert len(items) == len(res["global"]) > 0
    assert all(i.text.startswith("and ") for i in items)
    assert any(i.text.startswith("and bgmean1 (MeanBroadcast): every one of the ") for i in items)
    d.find_element(By.CSS_SELECTOR, "#global-deps button[data-global]").click()
    wait_for(lambda: (_answer(d).get("spec") or {}).get("scope") == "all",
             what="the answer with every dependency")
    everything = _answer(d)["results"][0]
    assert everything["scope"] == "all" and everything["count"] > count
    assert d.find_element(By.ID, "scope-select").get_attribute("value") == "local"  # untouched
    _shot(d, "2-scope-all")


def test_controls_stay_and_a_link_reopens_the_same_picture(server, browser, astro_home):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _, run = astro_home
    d = browser
    _open_clust(d, server, run)
    via = Select(d.find_element(By.ID, "path-select"))
    wait_for(lambda: len(via.options) > 2, what="the paths clust -> exp1")
    pixel = next(o for o in via.options if o.get_attribute("value")
                 and not any(g in (o.get_attribute("data-through") or "")
                             for g in ("bgmean1", "maskexp", "meanoverscan1")))
    value = pixel.get_attribute("value")
    via.select_by_value(value)
    Select(d.find_element(By.ID, "overlay-mode")).select_by_value("outline")

    r, c = _star_pixel(run)
    for cell in [(r, c), (r + 1, c)]:  # a second click: the same controls, no resets
        _click_cell(d, *cell)
        spec = _answer(d)["spec"]
        assert spec["path"] == value and spec["direction"] == "backward"
        assert Select(d.find_element(By.ID, "target-select")).first_selected_option \
            .get_attribute("value") == "exp1"
        assert Select(d.find_element(By.ID, "path-select")).first_selected_option \
            .get_attribute("value") == value
        assert d.find_element(By.ID, "direction-backward").is_selected()
        assert d.find_element(By.ID, "array-name").text == "clust"
    assert d.execute_script("return window.subzero.overlayPixels()") > 0  # the outline
    shown = int(d.find_element(By.ID, "result-count").text.replace(",", ""))
    view = d.execute_script("return window.subzero.panes()")
    _shot(d, "3-second-click-outline")

    link = wait_for(lambda: (lambda u: u if f"cells%22%3A%22{r + 1}%2C{c}" in u else None)(
        d.current_url), what="the link to follow the answer")
    d.get("about:blank")
    d.get(link)
    wait_for(lambda: d.find_elements(By.ID, "result-count"), what="the answer, reopened")
    assert d.find_element(By.ID, "array-name").text == "clust"
    assert wait_for(lambda: d.find_element(By.ID, "answer-name").text, what="the right pane") \
        == "exp1"
    assert _answer(d)["spec"]["path"] == value
    assert int(d.find_element(By.ID, "result-count").text.replace(",", "")) == shown
    again = d.execute_script("return window.subzero.panes()")
    for a, b in zip(view, again):
        assert (a["array"], a["rid"]) == (b["array"], b["rid"])
        assert math.isclose(a["s"], b["s"], rel_tol=1e-3)
        assert abs(a["ox"] - b["ox"]) < a["s"] and abs(a["oy"] - b["oy"]) < a["s"]
    wait_for(lambda: d.execute_script("return document.getElementById('path-select').value")
             == value, what="the path chosen again")
    _shot(d, "4-link-reopened")


def test_readout_locked_panes_minimap_and_blink(server, browser, astro_home):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    _, run = astro_home
    d = browser
    _open_clust(d, server, run)
    left = d.execute_script("return window.subzero.panes()[0]")
    width = d.find_element(By.ID, "viewer").size["width"]
    assert left["s"] * 513 >= 0.9 * width  # 2001 x 513 opens across the pane, not a strip

    r, c = _star_pixel(run)
    _click_cell(d, r, c)
    off = d.execute_script("return window.subzero.cellOffset(arguments[0], arguments[1])", r, c)
    viewer = d.find_element(By.ID, "viewer")
    ActionChains(d).move_to_element_with_offset(viewer, round(off["dx"]), round(off["dy"])) \
        .perform()
    text = wait_for(lambda: d.find_element(By.ID, "readout").text, what="the readout")
    assert f"clust[{r}, {c}]" in text and f"exp1[{r}, {c}]" in text
    info = server.json(f"/api/runs/{run.id}")[1]
    if any(a.get("wcs") for a in info["arrays"] if a["name"] in ("clust", "exp1")):
        assert "RA " in text and "Dec " in text
    _shot(d, "5-readout")

    # one pane pans: the other follows
    before = d.execute_script("return window.subzero.panes()")
    right = d.find_element(By.ID, "viewer2")
    ActionChains(d).move_to_element(right).click_and_hold().move_by_offset(60, 40) \
        .release().perform()
    after = wait_for(lambda: (lambda p: p if p[1]["ox"] != before[1]["ox"] else None)(
        d.execute_script("return window.subzero.panes()")), what="the right pane panned")
    assert abs(after[1]["ox"] - before[1]["ox"] - 60) < 1
    assert abs(after[1]["oy"] - before[1]["oy"] - 40) < 1
    assert [(p["s"], p["ox"], p["oy"]) for p in after][0] == \
        [(p["s"], p["ox"], p["oy"]) for p in after][1]
    assert _answer(d)["spec"]["cells"] == f"{r},{c}"  # a drag on the right is no query

    # the minimap: a click at its centre brings the array's centre to the panes' centre
    mini = d.find_element(By.ID, "minimap")
    ActionChains(d).move_to_element(mini).click().perform()
    p = d.execute_script("return window.subzero.panes()[0]")
    size = d.find_element(By.ID, "viewer").size
    centre_row = (size["height"] / 2 - p["oy"]) / p["s"]
    centre_col = (size["width"] / 2 - p["ox"]) / p["s"]
    assert abs(centre_row - 2001 / 2) < 30 and abs(centre_col - 513 / 2) < 30

    # blink: the right pane alternates between exp1 and the left pane's clust
    d.find_element(By.ID, "blink").click()
    seen = set()
    end = time.monotonic() + 3
    while time.monotonic() < end and len(seen) < 2:
        seen.add(d.execute_script("return window.subzero.panes()[1].array"))
        time.sleep(0.1)
    assert seen == {"exp1", "clust"}
    _shot(d, "6-minimap-blink")
    d.find_element(By.ID, "blink").click()


def test_the_tan_projection_agrees_with_astropy(server, browser):
    """The page's pixel -> sky conversion (for the readout) against astropy's."""
    wcs_mod = pytest.importorskip("astropy.wcs")
    d = browser
    d.get(server.url + "/")
    wait_for(lambda: d.execute_script(
        "return !!(window.subzero && typeof window.subzero.skyOf === 'function')"),
             what="the page's script")
    spec = {"ctype": ["RA---TAN", "DEC--TAN"], "crval": [150.1, -2.3], "crpix": [257.0, 1001.0],
            "cd": [[-5.5e-5, 1.0e-6], [1.2e-6, 5.5e-5]], "radesys": "ICRS"}
    w = wcs_mod.WCS(naxis=2)
    w.wcs.ctype, w.wcs.crval, w.wcs.crpix, w.wcs.cd = (spec["ctype"], spec["crval"],
                                                       spec["crpix"], spec["cd"])
    for row, col in [(1000, 256), (0, 0), (2000, 512), (37, 480)]:
        got = d.execute_script("return window.subzero.skyOf(arguments[0], arguments[1], "
                               "arguments[2])", spec, row, col)
        ra, dec = w.all_pix2world([[col + 1, row + 1]], 1)[0]
        assert abs(got["ra"] - ra) * 3600 < 1e-3 and abs(got["dec"] - dec) * 3600 < 1e-3
    hms = d.execute_script("return window.subzero.sexagesimal(150.1, true)")
    dms = d.execute_script("return window.subzero.sexagesimal(-2.3, false)")
    assert hms == "10:00:24.00" and dms == "-02:18:00.0"  # (no 17:60.0)


def test_a_ds9_region_is_a_start(server, browser, astro_home, tmp_path):
    from selenium.webdriver.common.by import By

    _, run = astro_home
    d = browser
    _open_clust(d, server, run)
    r, c = _star_pixel(run)
    reg = tmp_path / "star.reg"  # ds9 image coordinates count from 1, x along columns
    reg.write_text(f"# Region file format: DS9\nimage\nbox({c + 1},{r + 1},3,3,0)\n")
    before = _answer(d)
    d.find_element(By.ID, "region-file").send_keys(str(reg))
    got = wait_for(lambda: (lambda a: a if a is not before and a else None)(_answer(d))
                   or ("error" in d.find_element(By.ID, "status").get_attribute("class")
                       and d.find_element(By.ID, "status").text),
                   what="the region's answer or an error")
    assert not isinstance(got, str), f"the region was refused: {got}"
    assert "region" in got["spec"] and got["results"][0]["count"] > 0
    _shot(d, "7-region")
