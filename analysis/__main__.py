"""`python -m analysis stats ...`: the same subcommand as `fusion-sweep stats`."""
from __future__ import annotations

import sys

from analysis.cli import main

if __name__ == "__main__":
    sys.exit(main())
