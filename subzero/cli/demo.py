"""``make demo``: the main job and a lineage question on it, narrated.

    python -m subzero.cli.demo [--home DIR]

Runs the LSST astronomy workflow (28 operators) with SubZero's own strategy on the real
exposures when ``$SUBZERO_DATA`` points at them, else on generated exposures of the same
size; finds the brightest star the workflow detected; asks which pixels of exposure 1 made
it; and draws the answer. Every step is the CLI command a scientist would type.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from subzero.api import Home
from subzero.cli.main import main as cli
from subzero.engine.layout import resolve_home
from workflows.astronomy import real_inputs


def _say(step: list[str]) -> int:
    print(f"\n$ subzero {' '.join(step)}", flush=True)
    return cli(step)


def brightest_star(run) -> np.ndarray:
    """The pixels of the star with the largest total flux in the cleaned image."""
    labels = run.array("clust")
    flux = run.array("rmcr")
    ids, inv = np.unique(labels[labels > 0], return_inverse=True)
    if not len(ids):
        raise SystemExit("subzero demo: the run detected no stars")
    totals = np.bincount(inv, weights=flux[labels > 0])
    return np.argwhere(labels == ids[int(np.argmax(totals))])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", default=None)
    args = p.parse_args(argv)
    home_dir = resolve_home(args.home)
    home = ["--home", str(home_dir)]
    out = home_dir / "demo"
    out.mkdir(parents=True, exist_ok=True)
    run_cmd = ["run", "astronomy", "--strategy", "subzero", *home]
    if os.environ.get("SUBZERO_DATA"):
        inputs = real_inputs()
        if inputs is None:
            print(f"SUBZERO_DATA={os.environ['SUBZERO_DATA']} has no LSST exposures; "
                  "using generated ones", file=sys.stderr)
        else:
            run_cmd += ["--input", f"exp1={inputs['exp1']}", "--input", f"exp2={inputs['exp2']}"]
    for step in (["workflows"], run_cmd):
        if _say(step):
            return 1
    run = Home(home_dir).get("latest:astronomy")
    star = brightest_star(run)
    cells = out / "brightest-star.npy"
    np.save(cells, star)
    c = star.mean(axis=0)
    print(f"\nThe brightest star: {len(star)} pixels around row {c[0]:.0f}, column {c[1]:.0f} "
          f"(saved to {cells}). Which pixels of exposure 1 made it?")
    png = out / "brightest-star-lineage.png"
    # the pixel path (the paper's BQ3): every path to exp1 would also pass through the
    # global background mean, whose lineage is the whole image
    path = [("clust", 0), ("rmcr", 0), ("sumexp", 0)] + [
        (f"{n}1", 0) for n in ("rmbg", "flatcorrect", "darkcorrect", "biascorrect",
                               "rmoverscan", "badpixrm", "addmaskattr", "linearity")]
    if _say(["query", "latest:astronomy", "backward", "--from", "clust", "--cells-file", str(cells),
             "--path", ",".join(f"{op}:{i}" for op, i in path), "--png", str(png), *home]):
        return 1
    print(f"\nLook at {png}: exposure 1 with the star's lineage in red (zoomed on the right).")
    return _say(["runs", *home])


if __name__ == "__main__":
    sys.exit(main())
