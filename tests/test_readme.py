"""README's promises: two set-up commands first, and .ci/run runs the second one verbatim."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text())[:2]


def test_readme_opens_with_two_setup_commands() -> None:
    main_job, tests = readme_commands()
    assert "fusion-sweep launch" in main_job and "fusion-sweep stats" in main_job
    assert "pytest" in tests
    for cmd in (main_job, tests):
        assert "pip install" in cmd and "python3 -m venv" in cmd


def test_ci_runs_the_readme_test_command() -> None:
    _, tests = readme_commands()
    assert tests in (ROOT / ".ci" / "run").read_text()


def test_torch_is_pinned_to_the_local_cpu_wheel() -> None:
    """An exact pin (a bare `torch` pulls a multi-GB CUDA build), and it is what got installed."""
    import tomllib

    import torch

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [d for d in deps if re.match(r"torch\b", d)]
    assert len(pins) == 1 and re.fullmatch(r"torch==\d+\.\d+\.\d+", pins[0]), pins
    assert torch.__version__.split("+")[0] == pins[0].split("==")[1]
    assert torch.version.cuda is None  # the CPU wheel
