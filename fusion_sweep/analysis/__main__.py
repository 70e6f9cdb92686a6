"""`python -m fusion_sweep.analysis stats ...`: the same subcommand as `fusion-sweep stats`."""
from __future__ import annotations

import sys

from fusion_sweep.analysis.cli import main

if __name__ == "__main__":
    sys.exit(main())
