"""A wheel install works: shipped search spaces are package data, not files of the checkout.

Builds the wheel, installs it (and nothing else) into a fresh venv outside the repository,
and runs `fusion-sweep launch smoke --dry-run` from another directory. The fresh venv reuses
the test environment's third-party packages through a .pth line (installing torch, Ray and
MLflow again would take minutes); that directory's own .pth files — among them the editable
install of this checkout — are not processed, so `fusion_sweep` can only come from the wheel.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # `pytest -m 'not slow'` skips these


def test_wheel_install_finds_shipped_spaces(tmp_path: Path) -> None:
    # Build from a copy: setuptools writes ./build, which must not go stale in the checkout.
    src = tmp_path / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
        "mlruns", "mlartifacts", "mlflow.db", "ray_results", "reports"))
    dist = tmp_path / "dist"
    # Python 3.11 venvs ship setuptools; elsewhere pip fetches it into an isolated build env.
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation,
                    "-w", str(dist), str(src)], check=True, cwd=tmp_path, timeout=300)
    wheel, = dist.glob("fusion_sweep-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "fusion_sweep/search_spaces/default.yaml" in names
    assert "fusion_sweep/search_spaces/smoke.yaml" in names

    # A venv without its own pip (ensurepip took 5 s of CPU), installed into by this pip
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   timeout=300)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import fusion_sweep; print(fusion_sweep.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert str(venv) in where.stdout and str(REPO) not in where.stdout, where.stdout
    r = subprocess.run([str(venv / "bin" / "fusion-sweep"), "launch", "smoke", "--dry-run"],
                       cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 trials = 1 datasets × 1 PEs × 2 fusions × 2 seeds" in r.stdout
    assert "dry run: nothing started" in r.stdout
