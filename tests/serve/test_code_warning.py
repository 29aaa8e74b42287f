"""The explorer warns, on the run, of operators whose code changed since the run."""

from __future__ import annotations

import json

import pytest

from tests.serve.conftest import Server, wait_for
from tests.test_user_workflows import PIPELINE, cli

pytestmark = [pytest.mark.slow]


def test_the_page_warns_of_an_operator_whose_code_changed(browser, tmp_path):
    from selenium.webdriver.common.by import By

    code = tmp_path / "code"
    (code / "warnpkg").mkdir(parents=True)
    (code / "warnpkg" / "__init__.py").write_text("")
    src = code / "warnpkg" / "pipeline.py"
    src.write_text(PIPELINE)
    home = tmp_path / "home"
    p = cli("run", "warnpkg.pipeline", "--home", str(home), "--json", cwd=code)
    assert p.returncode == 0, p.stderr[-3000:]
    rid = json.loads(p.stdout)["run"]
    src.write_text(PIPELINE.replace("size=3", "size=5"))
    server = Server(home)
    try:
        status, info = server.json(f"/api/runs/{rid}")
        assert status == 200 and "boxmax" in info["unavailable"]
        browser.get(server.url + "/")
        box = wait_for(lambda: [e for e in browser.find_elements(By.ID, "code-warning")
                                if e.is_displayed()], what="the code warning")[0]
        assert "boxmax" in box.text and "changed since the run" in box.text
        # a click through it is refused in one line, not an internal error
        status, doc = server.json(f"/api/runs/{rid}/query?direction=backward&from=peaks"
                                  "&cells=5,5&to=sky&method=reexec")
        assert status == 400 and "changed since the run" in doc["error"]
    finally:
        server.stop()
