"""The explorer as a person uses it, in a real headless Chromium: open the page, pick the
astronomy run, open `clust`, choose backward to `exp1`, click a pixel of a star; `exp1`
opens in the right pane with the overlay, and its count equals the API's and the command
line's for the same cell. (More of the page: ``test_browser_views.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.serve.conftest import ROOT, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _star_pixel(run):
    """The brightest pixel of the largest star of clust (a label > 0)."""
    clust = np.asarray(run.array("clust"))
    labels, sizes = np.unique(clust[clust > 0], return_counts=True)
    star = labels[np.argmax(sizes)]
    rmcr = np.asarray(run.array("rmcr"))
    cells = np.argwhere(clust == star)
    r, c = cells[np.argmax(rmcr[tuple(cells.T)])]
    return int(r), int(c)


def test_click_a_star_and_see_its_lineage(server, browser, astro_home, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    home, run = astro_home
    d = browser
    d.get(server.url + "/")
    wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "#graph .node"), what="the workflow graph")
    runs = Select(d.find_element(By.ID, "run-select"))
    assert any("astronomy" in o.text for o in runs.options)
    runs.select_by_value(run.id)
    d.find_element(By.CSS_SELECTOR, '#graph .node[data-array="clust"]').click()
    wait_for(lambda: d.find_element(By.ID, "array-name").text == "clust", what="clust open")
    d.find_element(By.ID, "direction-backward").click()
    Select(d.find_element(By.ID, "target-select")).select_by_value("exp1")

    r, c = _star_pixel(run)
    d.execute_script("document.getElementById('viewer').scrollIntoView()")
    d.execute_script("window.subzero.centerOn(arguments[0], arguments[1], 8)", r, c)
    off = d.execute_script("return window.subzero.cellOffset(arguments[0], arguments[1])", r, c)
    viewer = d.find_element(By.ID, "viewer")
    ActionChains(d).move_to_element_with_offset(viewer, round(off["dx"]), round(off["dy"])) \
        .click().perform()

    count_el = wait_for(lambda: d.find_elements(By.ID, "result-count"), what="a result")[0]
    wait_for(lambda: d.find_element(By.ID, "answer-name").text == "exp1", what="exp1 shown")
    assert d.find_element(By.ID, "array-name").text == "clust"  # the clicked array stays
    sent = d.execute_script("return window.subzero.state.answer.spec")
    assert sent["from"] == "clust" and sent["cells"] == f"{r},{c}" and sent["to"] == "exp1"
    shown = int(count_el.text.replace(",", ""))
    assert count_el.get_attribute("data-array") == "exp1"

    status, doc = server.json(f"/api/runs/{run.id}/query?direction=backward&from=clust"
                              f"&cells={r},{c}&to=exp1")
    assert status == 200
    cli = subprocess.run([sys.executable, "-m", "subzero.cli", "query", run.id, "backward",
                          "--from", "clust", "--cells", f"{r},{c}", "--to", "exp1", "--json",
                          "--home", str(home)], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert cli.returncode == 0, cli.stderr
    assert shown == doc["results"][0]["count"] == json.loads(cli.stdout)["count"] > 1

    # one path instead of their union: the pixel path (the demo's), without the mean
    d.find_element(By.CSS_SELECTOR, '#graph .node[data-array="clust"]').click()
    wait_for(lambda: d.find_element(By.ID, "array-name").text == "clust", what="clust again")
    Select(d.find_element(By.ID, "target-select")).select_by_value("exp1")
    via = Select(d.find_element(By.ID, "path-select"))
    wait_for(lambda: len(via.options) > 2, what="the paths clust -> exp1")
    through = lambda o: o.get_attribute("data-through") or ""  # noqa: E731
    pixel_path = next(o for o in via.options if "bgmean1" not in through(o)
                      and "maskexp" not in through(o) and "meanoverscan1" not in through(o)
                      and o.get_attribute("value"))
    value = pixel_path.get_attribute("value")
    via.select_by_value(value)
    d.execute_script("window.subzero.centerOn(arguments[0], arguments[1], 8)", r, c)
    off = d.execute_script("return window.subzero.cellOffset(arguments[0], arguments[1])", r, c)
    ActionChains(d).move_to_element_with_offset(viewer, round(off["dx"]), round(off["dy"])) \
        .click().perform()
    wait_for(lambda: (d.execute_script("return window.subzero.state.answer.spec") or {})
             .get("path"), what="a query along one path")
    wait_for(lambda: d.find_element(By.ID, "answer-name").text == "exp1", what="exp1 again")
    one = int(d.find_element(By.ID, "result-count").text.replace(",", ""))
    path = [tuple(s.split(":")) for s in value.split(",")]
    expected = run.backward([(r, c)], "clust", path=[(op, int(i)) for op, i in path]).count
    assert one == expected and 1 < one < shown  # the star and its ring, not the whole image
    shot = tmp_path / "explorer-one-path.png"
    d.save_screenshot(str(shot))
    print(f"screenshot: {shot}")

    # the overlay is drawn over exp1, and the steps of the path can be opened one by one
    assert wait_for(lambda: d.execute_script("return window.subzero.overlayPixels()"),
                    what="overlay pixels") > 0
    steps = d.find_elements(By.CSS_SELECTOR, "#steps tr[data-reached]")
    shown_steps = d.execute_script("return window.subzero.state.answer.results[0].steps")
    assert len(steps) == len(shown_steps) == len(path)
    shot = tmp_path / "explorer.png"
    d.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    steps[0].click()  # the first step: clust back to rmcr
    wait_for(lambda: d.find_element(By.ID, "answer-name").text == shown_steps[0]["reached"],
             what="the first step's array")
    assert d.execute_script("return window.subzero.overlayPixels()") > 0


def test_named_query_is_one_click(server, browser, astro_home):
    from selenium.webdriver.common.by import By

    _, run = astro_home
    d = browser
    d.get(server.url + "/")
    wait_for(lambda: d.find_elements(By.CSS_SELECTOR, '#named button[data-named="BQ3"]'),
             what="named queries")
    d.find_element(By.CSS_SELECTOR, '#named button[data-named="BQ3"]').click()
    el = wait_for(lambda: d.find_elements(By.ID, "result-count"), what="BQ3's result")[0]
    expected = run.named_query("BQ3")
    assert int(el.text.replace(",", "")) == expected.count
    assert el.get_attribute("data-array") == expected.array
    assert wait_for(lambda: d.execute_script("return window.subzero.overlayPixels()"),
                    what="overlay pixels") > 0


def test_a_new_query_calls_off_the_one_on_its_way(server, browser, astro_home):
    """A slow box query, then a click elsewhere: the page aborts the first, and the server
    stops it (its client gone) instead of running it to its end."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    _, run = astro_home
    d = browser
    d.get(server.url + "/")
    wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "#graph .node"), what="the workflow graph")
    Select(d.find_element(By.ID, "run-select")).select_by_value(run.id)
    d.find_element(By.CSS_SELECTOR, '#graph .node[data-array="clust"]').click()
    wait_for(lambda: d.find_element(By.ID, "array-name").text == "clust", what="clust open")
    d.find_element(By.ID, "direction-backward").click()
    Select(d.find_element(By.ID, "target-select")).select_by_value("")  # every input
    Select(d.find_element(By.ID, "method-select")).select_by_value("reexec")
    d.execute_script("document.getElementById('viewer').scrollIntoView()")
    d.find_element(By.ID, "zoom-fit").click()
    before = server.json("/api/status")[1]

    viewer = d.find_element(By.ID, "viewer")
    a, b = (d.execute_script("return window.subzero.cellOffset(arguments[0], arguments[1])",
                             r, c) for r, c in [(10, 10), (1800, 500)])
    ActionChains(d).key_down(Keys.SHIFT) \
        .move_to_element_with_offset(viewer, round(a["dx"]), round(a["dy"])).click_and_hold() \
        .move_by_offset(round(b["dx"] - a["dx"]), round(b["dy"] - a["dy"])).release() \
        .key_up(Keys.SHIFT).perform()
    wait_for(lambda: server.json("/api/status")[1]["queries"], what="the box query running")

    Select(d.find_element(By.ID, "method-select")).select_by_value("auto")
    off = d.execute_script("return window.subzero.cellOffset(100, 100)")
    ActionChains(d).move_to_element_with_offset(viewer, round(off["dx"]), round(off["dy"])) \
        .click().perform()
    # (at this zoom a screen pixel spans several cells: the one clicked is near (100, 100))
    wait_for(lambda: "cells" in ((d.execute_script("return window.subzero.state.answer")
                                  or {}).get("spec") or {}), what="the pixel's answer")
    after = wait_for(lambda: (lambda doc: doc if not doc["queries"] else None)(
        server.json("/api/status")[1]), what="no query under way")
    assert after["cancelled"] == before["cancelled"] + 1
    box = [q for q in after["recent"] if q["outcome"] == "cancelled"][-1]
    assert box["stopped_at"] is not None
    assert "error" not in d.find_element(By.ID, "status").get_attribute("class")
