"""The README's examples, run as a newcomer runs them after ``make demo``: its command-line
example and its Python example word for word, in a fresh folder, with the project's
``subzero`` first on the path; each prints what the README says it prints. Also: the README
stays short and every file it links to exists.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLI = "## The command line afterwards"
PYTHON = "## From Python"
ANSWER = re.compile(r"backward lineage of clust in exp1 \(2001, 513\): ([\d,]+) cells")


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start:end if end >= 0 else None]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^```(\w+)\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)]


def shown(line: str) -> re.Pattern[str]:
    """A line the README shows as output: timings (numbers with a decimal point) match any
    number; counts must be the ones shown."""
    parts = re.split(r"(\d+\.\d+)", line.strip())
    return re.compile("".join(r"[\d.]+" if i % 2 else re.escape(p)
                              for i, p in enumerate(parts)))


def example() -> tuple[list[list[str]], str, str, str]:
    """The CLI example's commands and shown output, the Python example and its output."""
    cli = fenced_blocks(section(CLI))
    py = fenced_blocks(section(PYTHON))
    assert [k for k, _ in cli] == ["sh", "sh", "text"]
    assert [k for k, _ in py] == ["python", "text"]
    commands = [shlex.split(ln) for ln in cli[1][1].splitlines() if ln.strip()]
    return commands, cli[2][1].strip(), py[0][1], py[1][1].strip()


def stated_real() -> tuple[int, int, int]:
    """What the README says the examples answer on the real exposures."""
    text = " ".join(README.read_text().split())
    bq3 = re.search(r"929 pixels of exposure 1 \(([\d,]+) on the real exposures", text)
    star = re.search(r"On the real exposures it prints ([\d,]+) and ([\d,]+)\.", text)
    assert bq3 and star, "the README no longer states its real-data answers"
    return tuple(int(x.replace(",", "")) for x in (*bq3.groups(), *star.groups()))


def newcomer_env(data: Path | None) -> dict[str, str]:
    """The environment after ``source .venv/bin/activate``: no home chosen, the real data
    only when given."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("SUBZERO_HOME", None)
    env.pop("SUBZERO_DATA", None)
    if data is not None:
        env["SUBZERO_DATA"] = str(data)
    return env


def run_examples(folder: Path, data: Path | None) -> tuple[str, str]:
    """Runs the README's commands then its Python code in ``folder``; returns the last
    command's output and the Python code's."""
    commands, _, code, _ = example()
    env = newcomer_env(data)
    out = ""
    for argv in commands:
        r = subprocess.run(argv, cwd=folder, env=env, text=True, capture_output=True,
                           timeout=600)
        assert r.returncode == 0, f"{shlex.join(argv)} -> {r.returncode}:\n{r.stderr}"
        out = r.stdout
    r = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, text=True,
                       capture_output=True, timeout=600)
    assert r.returncode == 0, f"the README's Python example failed:\n{r.stderr}"
    return out, r.stdout.strip()


def test_readme_is_short_and_its_links_exist():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not re.match(r"\w+://", target):
            assert (ROOT / target).exists(), f"README links to {target}, which is missing"


def test_readme_examples_are_found():
    commands, cli_out, code, py_out = example()
    assert commands == [["subzero", "run", "astronomy"],
                        ["subzero", "query", "latest:astronomy", "--named", "BQ3"]]
    assert ANSWER.search(cli_out)
    assert "subzero.Home(\"subzero-home\")" in code and py_out.startswith("the brightest star")
    assert shown("took 14.6 ms: 929 cells").fullmatch("took 3.25 ms: 929 cells")
    assert not shown("929 cells").fullmatch("930 cells")
    assert len(stated_real()) == 3


@pytest.mark.slow
def test_readme_examples_on_generated_exposures(tmp_path):
    out, printed = run_examples(tmp_path, data=None)
    _, cli_out, _, py_out = example()
    for line in cli_out.splitlines():
        assert shown(line).search(out), f"the README shows {line!r}, not in:\n{out}"
    assert printed == py_out
    # "Add --png bq3.png to see them drawn"
    r = subprocess.run(["subzero", "query", "latest:astronomy", "--named", "BQ3", "--png",
                        "bq3.png"], cwd=tmp_path, env=newcomer_env(None), text=True,
                       capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "bq3.png").stat().st_size > 0


@pytest.mark.slow
def test_readme_examples_on_real_exposures(tmp_path, shared_data):
    if not (shared_data / "lsst").is_dir():
        pytest.skip(f"no LSST exposures under {shared_data}")
    out, printed = run_examples(tmp_path, data=shared_data)
    bq3, pixels, lineage = stated_real()
    m = ANSWER.search(out)
    assert m and int(m.group(1).replace(",", "")) == bq3, out
    assert printed == (f"the brightest star: {pixels} pixels, made from {lineage} pixels "
                       "of exp1")
