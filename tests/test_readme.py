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


def test_readme_fits_a_page_and_links_every_doc() -> None:
    """A newcomer's page: at most 200 lines, and every file in docs/ is one click away."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    missing = [d for d in docs if f"(docs/{d}" not in text]
    assert not missing, f"README.md does not link {missing}"


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), target
