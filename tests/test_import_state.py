"""Importing the library leaves the process's environment as it was; the CLI limits BLAS."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_CHECK = """
import json, os, sys
before = dict(os.environ)
{imports}
after = dict(os.environ)
print(json.dumps({{"changed": sorted(k for k in before.keys() | after.keys()
                                     if before.get(k) != after.get(k)),
                   "numpy": "numpy" in sys.modules}}))
"""


def _run(code: str, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env_without_blas() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}


@pytest.mark.parametrize("imports", [
    "import subzero",
    "import subzero, operators, workflows",
    "import subzero; from subzero import Box, Workflow, Home",
])
def test_importing_the_library_leaves_os_environ_unchanged(imports):
    got = _run(_CHECK.format(imports=imports), _env_without_blas())
    assert got["changed"] == []


def test_import_subzero_loads_no_numpy():
    # the CLI can only set OPENBLAS_NUM_THREADS in time if `import subzero` has not loaded it
    assert _run(_CHECK.format(imports="import subzero"), _env_without_blas())["numpy"] is False


def test_cli_sets_one_blas_thread_before_numpy_loads():
    got = _run(_CHECK.format(imports="import subzero.cli"), _env_without_blas())
    assert got["changed"] == ["OPENBLAS_NUM_THREADS"]
    code = ("import os, sys; import subzero.cli; "
            "print(os.environ['OPENBLAS_NUM_THREADS'])")
    out = subprocess.run([sys.executable, "-c", code], env=_env_without_blas(),
                         capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "1"


def test_cli_keeps_a_blas_thread_count_the_environment_gives():
    env = {**_env_without_blas(), "OPENBLAS_NUM_THREADS": "3"}
    code = "import os; import subzero.cli; print(os.environ['OPENBLAS_NUM_THREADS'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "3"
