"""cluster.yaml as far as it can be tested without a cloud (issue 21): Ray's own schema
validation, the images and AMIs against the project's pins, the commands the nodes run, the
`cluster` extra, and the platform pin the worker type offers."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from fusion_sweep.plan.space import load_space

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = yaml.safe_load((ROOT / "cluster.yaml").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DEPS = {re.split(r"[\[=<>]", d)[0]: d for d in PYPROJECT["project"]["dependencies"]}
RAY_PIN = DEPS["ray"].split("==")[1]
MIN_PYTHON = tuple(int(x) for x in
                   PYPROJECT["project"]["requires-python"].removeprefix(">=").split("."))
# torch's PyPI wheels bundle their CUDA runtime (12.8 or newer for recent releases); an
# image's CUDA below that would give a container whose toolkit is older than torch's.
MIN_CUDA = (12, 8)
# AMIs the config may name, by their public SSM parameter, with the Python of their host
# (AWS release notes of "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)":
# python_location /usr/bin/python3.10). Anything else is refused until its Python is known.
SSM_PREFIX = "resolve:ssm:/aws/service/deeplearning/ami/x86_64/"
KNOWN_AMIS = {"base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id": (3, 10)}
IMAGE_TAG = re.compile(r"^rayproject/ray:(?P<ray>\d+\.\d+\.\d+)-py(?P<py>\d)(?P<pyminor>\d+)"
                       r"-(?P<platform>cpu|cu(?P<cuda>\d+))$")

# What a command in the nodes' commands is provided by, inside rayproject/ray (built from
# ubuntu or nvidia/cuda + docker/base-deps: apt git, wget, rsync, tmux...; conda Python on
# PATH) after `pip install -e ~/fusion-sweep`. A new command must be added here with its
# source, or the test fails: it may not exist in the image.
IMAGE_COMMANDS = {
    # bash builtins (the runner executes commands with bash)
    "cd": "bash", "echo": "bash", "printf": "bash", "test": "bash", "kill": "bash",
    "true": "bash", "ulimit": "bash",
    # Ubuntu base image (essential packages: coreutils, grep, mawk, hostname)
    "cat": "coreutils", "mkdir": "coreutils", "sleep": "coreutils", "nohup": "coreutils",
    "grep": "grep", "awk": "mawk", "hostname": "hostname",
    # rayproject/ray base-deps
    "git": "apt (base-deps)", "pip": "conda Python (base-deps)",
    "ray": "the image's Ray wheel",
    # the project's own install (setup_commands: pip install -e ~/fusion-sweep)
    "mlflow": "pyproject (mlflow pin)",
}
PROJECT_COMMANDS = {"mlflow"}  # only present after the project's install
COMMAND_KEYS = ("initialization_commands", "setup_commands", "head_setup_commands",
                "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands")
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")"}
_WRAPPERS = {"nohup", "sudo", "exec", "env"}  # the next word is a command too


def command_names(line: str) -> list[str]:
    """Every program a shell line runs: the first word of each command (after variable
    assignments), the word after nohup/sudo/exec/env, and those inside $(...)."""
    names: list[str] = []
    for inner in re.findall(r"\$\(([^()]*)\)", line):
        names += command_names(inner)
    line = re.sub(r"\$\([^()]*\)", "X", line)
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    expect, target = True, False
    for tok in lex:
        if target:  # the file of a redirection
            target = False
        elif re.match(r"^[<>]+&?$|^&?[<>]+$", tok):  # > >> < >& (2>&1: '2', '>&', '1')
            target = True
        elif tok in _SEPARATORS:
            expect = True
        elif expect and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tok):
            names.append(tok)
            expect = tok in _WRAPPERS
    return names


def all_commands() -> set[str]:
    lines = [c for k in COMMAND_KEYS for c in CLUSTER.get(k, [])]
    lines += [c for t in CLUSTER["available_node_types"].values() for k in COMMAND_KEYS
              for c in t.get(k, [])]
    return {n for line in lines for n in command_names(line)}


def images() -> dict[str, str]:
    d = CLUSTER["docker"]
    out = {"image": d["image"], "head_image": d.get("head_image", d["image"]),
           "worker_image": d.get("worker_image", d["image"])}
    for name, t in CLUSTER["available_node_types"].items():
        if "worker_image" in t.get("docker", {}):
            out[f"{name}.worker_image"] = t["docker"]["worker_image"]
    return out


def test_ray_schema_validation() -> None:
    from ray.autoscaler._private.util import validate_config

    validate_config(CLUSTER)  # raises jsonschema.ValidationError when invalid


@pytest.mark.parametrize("where", sorted(images()))
def test_image_satisfies_the_pins(where: str) -> None:
    image = images()[where]
    m = IMAGE_TAG.match(image)
    assert m, f"{where}: {image} is not a rayproject/ray:<ray>-py<XY>-<cpu|cuNNN> tag"
    assert m["ray"] == RAY_PIN, f"{where}: Ray {m['ray']} but pyproject pins {RAY_PIN}"
    assert (int(m["py"]), int(m["pyminor"])) >= MIN_PYTHON
    if where != "head_image":  # trials run on workers: they need CUDA
        assert m["cuda"], f"{where}: {image} has no CUDA"
        cuda = (int(m["cuda"][:2]), int(m["cuda"][2:]))
        assert cuda >= MIN_CUDA, f"{where}: CUDA {cuda} < {MIN_CUDA}"


def test_no_ami_with_old_python() -> None:
    """Every node type names its AMI (no ImageId: Ray fills in an Ubuntu 18.04 DLAMI with
    Python 3.6; `latest_dlami` resolves to the same) and that AMI's Python is >= 3.10."""
    for name, t in CLUSTER["available_node_types"].items():
        ami = t["node_config"].get("ImageId", "")
        assert ami and ami.lower() != "latest_dlami", name
        assert ami.startswith(SSM_PREFIX), f"{name}: {ami} is not a known DLAMI parameter"
        assert KNOWN_AMIS[ami.removeprefix(SSM_PREFIX)] >= MIN_PYTHON, name
    text = (ROOT / "cluster.yaml").read_text()
    assert not re.search(r"^\s*ImageId:\s*latest_dlami", text, re.M)
    assert not re.search(r"py3[0-9](?!\d)|py3[0-9]-", text)  # no py36/py37/... image tags


def test_setup_commands_are_provided_by_the_image() -> None:
    missing = sorted(all_commands() - set(IMAGE_COMMANDS))
    assert not missing, f"commands not known to exist in {CLUSTER['docker']['image']}: {missing}"
    assert {"pip", "ray", "mlflow", "git"} <= all_commands()


def test_command_names() -> None:
    assert command_names("ulimit -n 1; ray start --x=1") == ["ulimit", "ray"]
    assert command_names("A=1 nohup mlflow server > f 2>&1 & echo $! > p") == \
        ["nohup", "mlflow", "echo"]
    assert command_names('echo "x $(hostname -I | awk \'{print $1}\')" >> f') == \
        ["hostname", "awk", "echo"]
    assert command_names("(cd d && git x || echo n) > f; echo y") == ["cd", "git", "echo", "echo"]


def _docker_unavailable() -> str:
    if shutil.which("docker") is None:
        return "no docker binary"
    r = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or ["docker info failed"])[-1]
    return ""


def test_setup_commands_exist_in_the_image() -> None:
    """With Docker: each command (but the project's own) is on the image's PATH. Without
    it, test_setup_commands_are_provided_by_the_image checks them against the image's
    documented contents instead."""
    why = _docker_unavailable()
    if why:
        pytest.skip(f"Docker is not usable here ({why}), and Docker Hub is unreachable from "
                    f"this machine, so {CLUSTER['docker']['image']} cannot be pulled; the "
                    f"commands are checked against the image's documented contents instead")
    image = CLUSTER["docker"]["image"]
    names = sorted(all_commands() - PROJECT_COMMANDS)
    script = "; ".join(f"command -v {shlex.quote(n)} >/dev/null || echo MISSING {n}"
                       for n in names)
    r = subprocess.run(["docker", "run", "--rm", image, "bash", "-lc", script],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "MISSING" not in r.stdout, r.stdout


def test_ray_up_cli_sanity() -> None:
    ray = Path(sys.executable).with_name("ray")
    r = subprocess.run([str(ray), "up", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "CLUSTER_CONFIG_FILE" in r.stdout


def test_cluster_extra_brings_boto3() -> None:
    extra = PYPROJECT["project"]["optional-dependencies"]["cluster"]
    assert any(re.match(r"^boto3==\d+\.\d+\.\d+$", d) for d in extra), extra
    pin = next(d for d in extra if d.startswith("boto3")).split("==")[1]
    head = " ".join(CLUSTER["head_setup_commands"])
    assert f"boto3=={pin}" in head  # the head's autoscaler gets the same version
    boto3 = pytest.importorskip("boto3", reason="run `pip install -e '.[cluster]'`")
    assert boto3.__version__ == pin


def test_head_runs_no_trials_and_workers_are_one_platform() -> None:
    types = CLUSTER["available_node_types"]
    assert types[CLUSTER["head_node_type"]]["resources"] == {"CPU": 0}
    workers = [t for n, t in types.items() if n != CLUSTER["head_node_type"]]
    assert len({t["node_config"]["InstanceType"] for t in workers}) == 1


def test_documented_pin_matches_the_worker_label(tmp_path: Path) -> None:
    """docs/cluster.md's `resources` snippet validates and selects the GPU worker type."""
    from fusion_sweep.raytune import placement

    doc = (ROOT / "docs" / "cluster.md").read_text()
    snippet = re.search(r"^resources: (\{.*node_label.*\})$", doc, re.M)
    assert snippet, "docs/cluster.md lacks the node_label pin snippet"
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "datasets": ["synthetic-short"],
                                 "pes": ["sinusoidal"], "fusions": ["add"], "seeds": [0]})
                 + f"resources: {snippet[1]}\n")
    space = load_space(str(p))
    worker = CLUSTER["available_node_types"]["gpu_worker"]
    node = {"Resources": {"CPU": 8, "GPU": 1}, "Labels": worker["labels"]}
    assert placement.node_can_run(node, space)
    head = {"Resources": {"CPU": 0}, "Labels": {}}
    assert not placement.node_can_run(head, space)


# --------------------------------------------------------------- a trial runs where Ray put it
@pytest.mark.parametrize("requested, gpu_ids, device", [
    ("auto", [], "cpu"), ("auto", ["0"], "cuda"), ("cpu", ["0"], "cpu"), ("cuda", [0], "cuda")])
def test_worker_device_follows_rays_assignment(requested, gpu_ids, device) -> None:
    from fusion_sweep.raytune.trainable import worker_device

    assert worker_device(requested, gpu_ids) == device


def test_a_cuda_trial_without_a_gpu_share_is_refused() -> None:
    from fusion_sweep.errors import UserError
    from fusion_sweep.raytune.trainable import worker_device

    with pytest.raises(UserError, match=r"device 'cuda' but Ray assigned this trial no GPU.*"
                                         r"resources: \{gpu: \.\.\.\}"):
        worker_device("cuda", [])


def test_a_gpu0_trial_trains_on_the_cpu_while_cuda_is_available(monkeypatch) -> None:
    """Issue 32 item 1: Ray 2.60 shows a node's GPUs to trials that requested none; the
    trainable (`run_trial`) hands the trainer the CPU all the same."""
    import ray
    import torch
    from ray import tune

    from fusion_sweep.raytune import trainable
    from fusion_sweep.plan.grid import plan
    from fusion_sweep.trial.trainer import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    point = plan(load_space("smoke"))[0]  # smoke: resources gpu 0
    assert load_space("smoke").gpu == 0 and resolve_device(point.config.device).type == "cuda"
    seen = []

    class FakeRun:
        finished, run_id = False, "r1"

        def fail(self, exc, reason=None):  # the fake trainer stops the trial right after it saw the config
            pass

    class Stop(Exception):
        pass

    def fake_train(config, callback=None):
        seen.append(config.device)
        raise Stop

    class Ctx:
        code_fingerprint = "sweep-code"

    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [])
    monkeypatch.setattr(tune, "get_context", lambda: type("C", (), {"get_trial_id": lambda s: "t"})())
    monkeypatch.setattr(trainable.tracking.TrialRun, "open", classmethod(lambda cls, *a, **k: FakeRun()))
    monkeypatch.setattr(trainable, "train_trial", fake_train)
    with pytest.raises(Stop):
        trainable.run_trial({"trial": dict(zip(("dataset", "encoder", "pe", "fusion", "seed"),
                                                point.ident))},
                            ctx=Ctx(), configs={point.ident: point.config.to_dict()},
                            codes={point.ident: dict(point.code.components)})
    assert seen == ["cpu"] and resolve_device(seen[0]).type == "cpu"


def test_determinism_variables_reach_every_worker_before_cuda(monkeypatch) -> None:
    """Issue 32 item 6: CUBLAS_WORKSPACE_CONFIG goes to the workers through Ray's runtime_env
    (set inside a trial it would come after CUDA's context started), locally and on a cluster."""
    import io

    import ray

    from fusion_sweep.raytune import setup as ray_setup
    from fusion_sweep.trial.platform import CUBLAS_WORKSPACE

    calls = []
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    ray_setup.init_ray(None, io.StringIO())
    ray_setup.init_ray("10.0.0.5:6379", io.StringIO())
    assert [c["runtime_env"]["env_vars"]["CUBLAS_WORKSPACE_CONFIG"] for c in calls] == \
        [CUBLAS_WORKSPACE] * 2 == [":4096:8"] * 2
