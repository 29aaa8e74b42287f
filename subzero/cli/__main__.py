"""``python -m subzero.cli``."""

import sys

from subzero.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
