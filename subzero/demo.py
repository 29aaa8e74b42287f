"""``make demo``: run the main job and a lineage query on it, and say what happened.

    python -m subzero.demo [--home DIR]
"""

from __future__ import annotations

import argparse
import sys

from subzero.cli import main as cli


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", default=None)
    args = p.parse_args(argv)
    home = ["--home", args.home] if args.home else []
    steps = [
        ["workflows"],
        ["run", "example", *home],
        ["query", "latest", "backward", "--from", "bright", "--cells", "1000,256",
         "--path", "bright:0,residual:0,smooth:0,calibrate:0", "--png", "demo-lineage.png",
         *home],
        ["runs", *home],
    ]
    for step in steps:
        print(f"\n$ subzero {' '.join(step)}", flush=True)
        rc = cli(step)
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
