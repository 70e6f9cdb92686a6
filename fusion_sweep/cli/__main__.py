"""`python -m fusion_sweep.cli ...`: the same command line as `fusion-sweep ...`."""
from __future__ import annotations

import sys

from fusion_sweep.cli import main

if __name__ == "__main__":
    sys.exit(main())
