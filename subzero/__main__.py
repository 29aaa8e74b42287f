"""``python -m subzero``: the command line (:mod:`subzero.cli`), as the ``subzero`` script."""

import sys

from subzero.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
