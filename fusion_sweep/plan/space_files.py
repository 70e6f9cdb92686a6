"""Where the shipped search spaces live (standard library only, so `fusion-sweep --help` can
list them without importing torch through `fusion_sweep.plan.space`'s validation)."""
from __future__ import annotations

import importlib.resources
from pathlib import Path

# Shipped spaces are package data (found the same way from a checkout, an editable install
# or a wheel); the repository's top-level `search_spaces` is a link to this folder.
SPACE_DIR = Path(str(importlib.resources.files("fusion_sweep") / "search_spaces"))


def shipped_spaces() -> list[str]:
    """The names `fusion-sweep launch NAME` accepts besides a file path."""
    return sorted(p.stem for p in SPACE_DIR.glob("*.yaml"))
