"""The checkout a sweep runs: its git commit, recorded on every run (provenance, not identity:
the trial key uses the code fingerprint, `schema.code_fingerprint`)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import fusion_sweep


def git_commit(path: str | Path | None = None) -> str:
    """The checkout's commit (+ '-dirty' for uncommitted tracked changes), or 'unknown'."""
    root = Path(path or Path(fusion_sweep.__file__).resolve().parents[1])
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        if not sha:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"

