"""Every code block of the documentation runs, in order, one folder per page.

A page's fenced blocks are executed as a reader would type them:

- a ``python`` block whose first line is ``# NAME.py`` is a file the reader saves: it is
  written to the page's folder;
- any other ``python`` block runs in one namespace per page, in the page's folder;
- a ``console`` block holds ``$ command`` lines, each followed by the output the page
  shows. The command runs in the page's folder with the project's ``subzero`` first on
  the path; it must succeed (or exit with the status a ``# exit N`` comment after it
  names), and the lines shown must appear in its output, in order. In those lines a
  number stands for any number (timings and sizes vary) and ``...`` for any lines. A
  command ending in ``&`` starts a server, which is stopped by PID when the page ends.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts) if DOCS.is_dir() else []
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def blocks(text: str) -> list[tuple[str, str, int]]:
    """The page's fenced code blocks: ``(language, body, line number)``."""
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
            for m in FENCE.finditer(text)]


def _pattern(line: str) -> re.Pattern[str]:
    """A shown output line as a regex: numbers match any number, spaces any spacing."""
    parts, at = [], 0
    for m in NUMBER.finditer(line):
        parts.append(re.escape(line[at:m.start()]))
        parts.append(r"[\d.,]+")
        at = m.end()
    parts.append(re.escape(line[at:]))
    text = re.sub(r"(\\ )+", r"\\s+", "".join(parts).strip())
    return re.compile(text)


def assert_shown(shown: list[str], out: str, where: str) -> None:
    """The ``shown`` lines (``...``: any lines) appear in ``out`` in order."""
    lines = out.splitlines()
    at = 0
    for want in shown:
        if not want.strip() or want.strip() == "...":
            continue
        pat = _pattern(want)
        while at < len(lines) and not pat.search(lines[at]):
            at += 1
        assert at < len(lines), f"{where}: the page shows {want!r}, not in the output:\n{out}"
        at += 1


def _commands(body: str) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:].strip(), []))
        elif out:
            out[-1][1].append(line)
    return out


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("SUBZERO_HOME", None)
    env.pop("SUBZERO_DATA", None)  # the pages show the answers on the generated inputs
    return env


def _wait_for_server(cmd: str, proc: subprocess.Popen, where: str) -> None:
    m = re.search(r"--port\s+(\d+)", cmd)
    assert m, f"{where}: a server command must name its --port"
    url = f"http://127.0.0.1:{m.group(1)}/api/status"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{where}: {cmd} exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{where}: {cmd} did not answer on {url}")


def run_page(page: Path, folder: Path) -> None:
    text = page.read_text()
    name = page.relative_to(ROOT)
    namespace: dict[str, object] = {"__name__": "__main__"}
    servers: list[subprocess.Popen] = []
    env = _env()
    old_cwd, old_path = os.getcwd(), list(sys.path)
    loaded = set(sys.modules)
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    try:
        for lang, body, line in blocks(text):
            where = f"{name}:{line}"
            if lang == "python":
                first = body.splitlines()[0] if body.strip() else ""
                m = re.fullmatch(r"#\s*(\w+\.py)\s*", first)
                if m:
                    (folder / m.group(1)).write_text(body)
                    continue
                exec(compile(body, where, "exec"), namespace)  # noqa: S102 - the page's code
            elif lang == "console":
                for cmd, shown in _commands(body):
                    status = 0
                    m = re.search(r"\s+#\s*exit\s+(\d+)\s*$", cmd)
                    if m:
                        status, cmd = int(m.group(1)), cmd[:m.start()]
                    if cmd.endswith("&"):
                        proc = subprocess.Popen(shlex.split(cmd[:-1]), cwd=folder, env=env,
                                                stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL,
                                                start_new_session=True)
                        servers.append(proc)
                        _wait_for_server(cmd, proc, where)
                        continue
                    r = subprocess.run(cmd, shell=True, cwd=folder, env=env, text=True,
                                       capture_output=True, timeout=600)
                    out = r.stdout + r.stderr
                    assert r.returncode == status, (
                        f"{where}: '{cmd}' exited with {r.returncode}, expected {status}:\n{out}")
                    assert_shown(shown, out, f"{where}: '{cmd}'")
    finally:
        for proc in servers:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
        os.chdir(old_cwd)
        sys.path[:] = old_path
        for mod in set(sys.modules) - loaded:  # the page's own modules, not the next's
            if getattr(sys.modules[mod], "__file__", None) and str(folder) in str(
                    sys.modules[mod].__file__):
                del sys.modules[mod]


def test_pages_exist():
    assert PAGES, "docs/ holds no page"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.delenv("SUBZERO_DATA", raising=False)  # as the pages' commands run
    run_page(page, tmp_path)


def test_shown_output_matching():
    out = "run r1 complete in 0.37 s\noperator  lineage\nclean     32.8 KB\n"
    assert_shown(["run r1 complete in 1.2 s", "...", "clean  12 KB"], out, "x")
    with pytest.raises(AssertionError):
        assert_shown(["clean 1 KB", "run r1"], out, "x")  # order matters
    with pytest.raises(AssertionError):
        assert_shown(["area 1 KB"], out, "x")
