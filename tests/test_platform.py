"""Where results hold (issue 21): the platform fingerprint, pairs kept on one platform,
deterministic CUDA settings, and the platform pin of a search space."""
from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from fusion_sweep.raytune import placement
from fusion_sweep.analysis.cli import main as stats_main
from fusion_sweep.analysis.pairing import Cell, pair_problem
from fusion_sweep.schema import (FINGERPRINT_TAGS, PLATFORM_FIELD_TAGS, PLATFORM_FIELDS,
                                 platform_fingerprint, platform_from_tags, platform_label,
                                 trial_key)
from fusion_sweep.plan.space import load_space
from fusion_sweep.trial import platform as plat
from fusion_sweep.trial.platform import (CUBLAS_WORKSPACE, NondeterministicKernelError,
                                         describe_platform, deterministic)

# One tiny trial of synthetic-short (generated: no download), as `fusion-sweep train` runs it.
TINY = ["-o", "d_model=16", "-o", "heads=2", "-o", "layers=1", "-o", "dim_ff=32",
        "-o", "epochs=1", "-o", "batch_size=16", "-o", "limit_train=128", "-o", "limit_eval=64",
        "-o", "num_threads=1", "-o", "latency_repeats=1"]


def train_json(capability: str, fusion: str, seed: int = 4) -> dict:
    """One trial in a fresh process with ATEN_CPU_CAPABILITY=capability (read at torch
    start-up, so it needs its own process)."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    out = subprocess.run([sys.executable, "-m", "fusion_sweep.cli", "train", "--dataset",
                          "synthetic-short", "--fusion", fusion, "--seed", str(seed), "--json",
                          *TINY], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def two_platforms() -> tuple[dict, dict]:
    """seed 4: `add` under AVX2 kernels, `concat` under the plain (DEFAULT) kernels."""
    return train_json("avx2", "add"), train_json("default", "concat")


# ------------------------------------------------------------------- the fingerprint
def test_platform_fields_are_the_schema_fields() -> None:
    p = describe_platform(torch.device("cpu"))
    assert tuple(p) == PLATFORM_FIELDS
    assert p["torch"] == torch.__version__ and p["gpu"] == "none" and p["cuda"] == "none"
    assert p["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert p["threads"] == str(torch.get_num_threads())
    assert set(PLATFORM_FIELD_TAGS.values()) == {f"platform.{k}" for k in PLATFORM_FIELDS}
    assert FINGERPRINT_TAGS["platform"] == "fp.platform"


def test_platform_fingerprint_and_label_change_with_every_field() -> None:
    base = {**describe_platform(torch.device("cpu")), "gpu": "NVIDIA A10G", "cuda": "12.8",
            "cudnn": "91000"}  # a GPU trial's: every field shows in the label
    fp = platform_fingerprint(base)
    for k in PLATFORM_FIELDS:
        other = {**base, k: base[k] + "x"}
        assert platform_fingerprint(other) != fp, k
        assert platform_label(other) != platform_label(base), k
    tags = {PLATFORM_FIELD_TAGS[k]: v for k, v in base.items()}
    assert platform_from_tags(tags) == base
    assert platform_label(platform_from_tags({})) == ""  # runs logged before the fingerprint


def test_platform_is_not_part_of_the_trial_key() -> None:
    """Where a trial ran is not what it is: a resumed sweep on other hardware finds its
    finished runs by key (and `stats` then keeps its pairs on one platform)."""
    from fusion_sweep.trial.config import TrialConfig

    c = TrialConfig.build("synthetic-short")
    assert "platform" not in c.to_dict()
    assert c.trial_key("code") == trial_key(c.to_dict(), "code")


def test_cpu_capability_changes_the_platform_fingerprint(two_platforms) -> None:
    avx2, plain = two_platforms
    caps = (avx2["platform"]["cpu_capability"], plain["platform"]["cpu_capability"])
    if caps[0] == caps[1]:
        pytest.skip(f"this CPU offers no AVX2 kernels (ATen capability {caps[0]} both times)")
    assert caps == ("AVX2", "DEFAULT")
    fa, fb = avx2["fingerprints"], plain["fingerprints"]
    assert fa["platform"] != fb["platform"]
    # the data split, the batch order and the dropout stream's seed state agree; the
    # initial weights need not: torch's vectorised normal_/xavier kernels round differently
    # per ATen capability, so even a trial's starting point depends on the platform
    assert all(fa[k] == fb[k] for k in ("split", "batch_order", "dropout"))
    assert fa["platform"] == platform_fingerprint(avx2["platform"])


def _row(result: dict, seed: int, fusion: str, value: float | None = None) -> dict:
    fps = result["fingerprints"]
    # Seeds other than the trained one stand in with their own stream fingerprints (one
    # seed's copied to another would be dropped as duplicate_fingerprint); the split and
    # the platform are what the two trained runs really had.
    own = {k: v if k in ("split", "platform") or seed == 4 else f"{v}-seed{seed}"
           for k, v in fps.items()}
    return {"dataset": "synthetic-short", "encoder": "standard", "pe": "sinusoidal",
            "fusion": fusion, "seed": seed, "status": "FINISHED",
            "test_acc": result["test_acc"] if value is None else value,
            **{f"fp_{k}": v for k, v in own.items()},
            "platform": platform_label(result["platform"])}


def test_stats_drops_pairs_across_platforms(two_platforms, tmp_path: Path, capsys) -> None:
    """A results file mixing the two platforms: seed 4's pair is dropped as
    platform_mismatch, listed, and the report warns that the sweep mixes platforms."""
    avx2, plain = two_platforms
    if avx2["fingerprints"]["platform"] == plain["fingerprints"]["platform"]:
        pytest.skip("this CPU offers no AVX2 kernels: both runs are one platform")
    # seeds 0-3 on one platform (the AVX2 run's fingerprints, other values), seed 4 mixed
    rows = [_row(avx2, s, f, 0.5 + 0.01 * s + (0.02 if f == "concat" else 0))
            for s in range(4) for f in ("add", "concat")]
    rows += [_row(avx2, 4, "add"), _row(plain, 4, "concat")]
    path = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert stats_main(["stats", "--results", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    dropped = [d for d in report["dropped"] if d["reason"] == "platform_mismatch"]
    assert [(d["seed"], d["fusion"]) for d in dropped] == [(4, "concat")]
    assert "CPU AVX2" in dropped[0]["detail"] and "CPU DEFAULT" in dropped[0]["detail"]
    (comp,) = report["comparisons"]
    assert comp["n"] == 4 and 4 not in comp["seeds"]
    codes = {w["code"]: w["message"] for w in report["warnings"]}
    assert "mixed_platforms" in codes and "2 platforms" in codes["mixed_platforms"]
    assert "seed 4" in codes["platform_mismatch"]
    assert len(report["source"]["platforms"]) == 2


def _cell(platform: str | None, label: str = "") -> Cell:
    return Cell(value=0.5, fps=(("fp_split", "s"),), code="c", platform=platform,
                platform_label=label)


def test_pair_problem_platform() -> None:
    a = _cell("p1", "torch 2, CPU AVX2 (x), 1 thread, no GPU, deterministic off")
    b = _cell("p2", "torch 2, CPU AVX512 (x), 1 thread, no GPU, deterministic off")
    reason, detail = pair_problem(a, b, "concat", "add")
    assert reason == "platform_mismatch"
    assert detail.startswith("concat ran on CPU AVX2 (x), add on CPU AVX512 (x)")
    assert pair_problem(a, _cell("p1"), "concat", "add") == (None, "")
    # a run logged before the platform fingerprint is not dropped for lacking it
    assert pair_problem(a, _cell(None), "concat", "add") == (None, "")
    assert pair_problem(_cell("p1"), _cell("p2"), "x", "y")[1] == \
        "x ran on platform p1, y on p2"
    # a GPU's part holds its own ', ' (CUDA, cuDNN): a cuDNN-only difference names the GPU part
    gpu = "torch 2, CPU AVX2 (x), 1 thread, GPU A100 (CUDA 12.1, cuDNN {}), deterministic on"
    _, detail = pair_problem(_cell("g1", gpu.format(9)), _cell("g2", gpu.format(8)), "x", "y")
    assert detail.startswith("x ran on GPU A100 (CUDA 12.1, cuDNN 9), y on GPU A100 (CUDA 12.1, "
                             "cuDNN 8)"), detail


def test_one_platform_names_it_in_the_source_line(tmp_path: Path, capsys) -> None:
    label = "torch 2.13.0+cpu, CPU AVX2 (test), 1 thread, no GPU, deterministic off"
    rows = [{"dataset": "d", "pe": "sinusoidal", "fusion": f, "seed": s, "test_acc": 0.5 + s / 50
             + (f == "concat") / 100, "fp_platform": "abc", "platform": label}
            for s in range(3) for f in ("add", "concat")]
    path = tmp_path / "r.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert stats_main(["stats", "--results", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the header wraps at 120 columns
    assert f"on {label}" in out and "mixed_platforms" not in out


def test_platforms_most_trials_first_unlabelled_by_hash() -> None:
    from fusion_sweep.analysis.platforms import platform_line, platforms_of
    df = pd.DataFrame({"fp_platform": ["b" * 16] * 2 + ["a" * 16] + ["c" * 16] * 3 + [None],
                       "platform": ["", "", "P-a", "P-c", None, "", None]})
    got = platforms_of(df)
    assert got == [{"fingerprint": "c" * 16, "label": "P-c", "trials": 3},
                   {"fingerprint": "b" * 16, "label": "", "trials": 2},
                   {"fingerprint": "a" * 16, "label": "P-a", "trials": 1}]
    assert platform_line(got) == ("on 3 platforms: P-c (3 trials); "
                                  f"platform {'b' * 10} (2 trials); P-a (1 trials)")
    assert platform_line(got[1:2]) == f"on platform {'b' * 10}" and platform_line([]) == ""


# --------------------------------------------------------------------- determinism
def test_deterministic_settings_on_cuda_and_restored(monkeypatch) -> None:
    """No GPU here: the settings are process flags, so they are checked on CPU with a
    CUDA device object (nothing runs on it)."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
              torch.backends.cudnn.deterministic)
    torch.backends.cudnn.benchmark = True  # what a user might have set: turned off inside
    try:
        with deterministic(torch.device("cuda")):
            assert torch.are_deterministic_algorithms_enabled()
            assert torch.backends.cudnn.benchmark is False
            assert torch.backends.cudnn.deterministic is True
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE == ":4096:8"
            assert describe_platform(torch.device("cpu"))["deterministic"] == "on"
        assert torch.backends.cudnn.benchmark is True
        assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
        assert torch.are_deterministic_algorithms_enabled() == before[0]
    finally:
        torch.backends.cudnn.benchmark = before[1]
    with deterministic(torch.device("cpu")):  # CPU: nothing changes
        assert torch.are_deterministic_algorithms_enabled() == before[0]
        assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


TORCH_NO_DETERMINISTIC = ("index_add_cuda_ does not have a deterministic implementation, but "
                          "you set 'torch.use_deterministic_algorithms(True)'. You can turn "
                          "off determinism just for this operation...")


def test_kernel_without_deterministic_version_is_an_error_line(monkeypatch, capsys) -> None:
    """A CUDA trial whose op has no deterministic kernel: one `error:` line, exit 2. The
    device check is mocked to say CUDA; the op's failure is torch's own message."""
    from fusion_sweep import cli
    from fusion_sweep.trial import trainer

    monkeypatch.setattr(trainer, "resolve_device", lambda name: torch.device("cuda"))

    def run(*a, **k):
        assert torch.are_deterministic_algorithms_enabled()  # the trial runs inside it
        raise RuntimeError(TORCH_NO_DETERMINISTIC)

    monkeypatch.setattr(trainer, "_run", run)
    code = cli.main(["train", "--dataset", "synthetic-short", *TINY])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("fusion-sweep train: error: a CUDA kernel this trial uses has no "
                          "deterministic implementation")
    assert "index_add_cuda_" in err and "Traceback" not in err
    assert not torch.are_deterministic_algorithms_enabled()  # restored after the failure


def test_other_runtime_errors_pass_through() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with deterministic(torch.device("cuda")):
            raise RuntimeError("boom")
    assert issubclass(NondeterministicKernelError, ValueError)


# ------------------------------------------------------------------ the platform pin
def _space(tmp_path: Path, resources: dict):
    p = tmp_path / "s.yaml"
    p.write_text(json.dumps({"name": "s", "datasets": ["synthetic-short"], "pes": ["sinusoidal"],
                             "fusions": ["add", "concat"], "seeds": [0, 1],
                             "resources": resources}))
    return load_space(str(p))


@pytest.mark.parametrize("resources, pattern", [
    ({"accelerator_type": "A 10G"}, r"resources\.accelerator_type: must be a Ray accelerator type"),
    ({"accelerator_type": 3}, r"resources\.accelerator_type: must be a Ray accelerator type"),
    ({"node_label": "g5"}, r"resources\.node_label: must be a non-empty mapping"),
    ({"node_label": {}}, r"resources\.node_label: must be a non-empty mapping"),
    ({"node_label": {"bad key!": "x"}}, r"resources\.node_label: must be a non-empty mapping"),
    ({"node_label": {"k": "has space"}}, r"resources\.node_label: must be a non-empty mapping"),
])
def test_pin_validation(tmp_path: Path, resources: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        _space(tmp_path, resources)


def test_pin_becomes_the_ray_request(tmp_path: Path) -> None:
    plain = _space(tmp_path, {"cpu": 1})
    assert placement.trial_resources(plain, 100) == {"cpu": 1, "gpu": 0, "memory": 100}
    acc = _space(tmp_path, {"cpu": 2, "gpu": 1, "accelerator_type": "A10G"})
    assert placement.trial_resources(acc, 100) == {
        "cpu": 2, "gpu": 1, "memory": 100, "accelerator_type:A10G": placement.ACCELERATOR_SHARE}
    lab = _space(tmp_path, {"cpu": 2, "gpu": 1, "node_label": {"fusion-sweep/platform": "g5"}})
    pgf = placement.trial_resources(lab, 100)
    assert pgf.bundles == [{"CPU": 2, "GPU": 1, "memory": 100}]
    assert pgf._bound.kwargs["bundle_label_selector"] == [{"fusion-sweep/platform": "g5"}]


def test_local_pin_that_cannot_start_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"resources\.accelerator_type: 'A10G' pins every trial"):
        placement.check_local_pin(_space(tmp_path, {"accelerator_type": "A10G"}), 0)
    with pytest.raises(ValueError, match=r"resources\.node_label: .* carries none"):
        placement.check_local_pin(_space(tmp_path, {"node_label": {"k": "v"}}), 0)
    placement.check_local_pin(_space(tmp_path, {"cpu": 1}), 0)


_NODE_IDS = itertools.count(1)  # Ray node ids: 56 hex digits; these differ in node_name's 8


def _node(cpu: float, gpu: float = 0, acc: str | None = None, labels: dict | None = None,
          host: str = "10.0.0.1") -> dict:
    res = {"CPU": cpu, "GPU": gpu, **({f"accelerator_type:{acc}": 1.0} if acc else {})}
    return {"Alive": True, "Resources": res, "Labels": labels or {},
            "NodeManagerAddress": host, "NodeID": f"{next(_NODE_IDS):08x}" + "0" * 48}


def test_nodes_that_can_run_a_pinned_trial(tmp_path: Path) -> None:
    s = _space(tmp_path, {"cpu": 2, "gpu": 1, "accelerator_type": "A10G",
                          "node_label": {"fusion-sweep/platform": "g5"}})
    ok = _node(8, 1, "A10G", {"fusion-sweep/platform": "g5"})
    assert placement.node_can_run(ok, s)
    assert not placement.node_can_run(_node(8, 1, "L4", {"fusion-sweep/platform": "g5"}), s)
    assert not placement.node_can_run(_node(8, 1, "A10G"), s)
    assert not placement.node_can_run(_node(8, 0, "A10G", {"fusion-sweep/platform": "g5"}), s)
    assert placement.node_gpu(ok["Resources"]) == "A10G" and placement.node_gpu({}) == "none"


def test_mixed_platform_warning(tmp_path: Path) -> None:
    s = _space(tmp_path, {"cpu": 1})
    one = {"torch": "2.13.0", "cpu_capability": "AVX2", "cpu_model": "EPYC", "gpu": "A10G"}
    assert placement.mixed_platform_warning({"a": one, "b": dict(one)}, s) is None
    msg = placement.mixed_platform_warning({"a": one, "b": {**one, "cpu_capability": "AVX512"}}, s)
    assert msg.startswith("warning: the nodes that can run this sweep's trials are 2 platforms")
    assert "cpu_capability AVX512" in msg and "platform_mismatch" in msg
    assert "accelerator_type" in msg and "node_label" in msg


def test_launch_probes_nodes_only_when_there_are_several(tmp_path: Path, monkeypatch) -> None:
    """One node (a local instance), or several on one machine with one GPU type (the test
    suite's cluster): nothing to compare, no Ray task is sent. Two machines, or one machine
    whose nodes differ in GPU: probed, and the warning names the platforms."""
    import ray

    space = _space(tmp_path, {"cpu": 1})
    monkeypatch.setattr(placement, "_probe", lambda nodes: pytest.fail("probed one machine"))
    for nodes in ([_node(2)], [_node(2), _node(2)], [_node(2), _node(1), _node(0.5)]):
        monkeypatch.setattr(ray, "nodes", lambda: nodes)
        out = io.StringIO()
        placement.warn_mixed_platforms(space, out)
        assert out.getvalue() == ""
    cpu = {"torch": "2", "cpu_model": "m"}
    cases = [([_node(2), _node(2, host="10.0.0.2")], ["AVX2", "AVX512"], "2 platforms"),
             ([_node(2, 1, "A10G"), _node(2, 1, "L4")], ["AVX2", "AVX2"], "gpu L4"),
             ([_node(2), _node(2, host="10.0.0.2")], ["AVX2", "AVX2"], None)]
    for nodes, caps, want in cases:
        monkeypatch.setattr(ray, "nodes", lambda: nodes)
        monkeypatch.setattr(placement, "_probe", lambda got: {
            placement.node_name(n): {**cpu, "cpu_capability": c,
                                     "gpu": placement.node_gpu(n["Resources"])}
            for n, c in zip(got, caps, strict=True)})
        out = io.StringIO()
        placement.warn_mixed_platforms(space, out)
        assert (want in out.getvalue()) if want else out.getvalue() == "", out.getvalue()


def test_nodes_are_grouped_by_machine() -> None:
    """One probe per machine (node manager IP): the nodes of one machine share its CPU and
    Python environment; a node without an address is a machine of its own."""
    a1, a2, b = _node(2), _node(1), _node(2, host="10.0.0.2")
    lone = {**_node(2), "NodeManagerAddress": ""}
    machines = placement.by_machine([a1, b, a2, lone])
    assert list(machines.values()) == [[a1, a2], [b], [lone]]
    assert placement.node_name(a1) == f"10.0.0.1 ({a1['NodeID'][:8]})"


def test_node_platform_is_cpu_side_fields() -> None:
    p = plat.node_platform()
    assert set(p) == {"torch", "cpu_capability", "cpu_model"}
    assert set(p) | {"gpu"} == set(placement.NODE_FIELDS)


def test_launch_summary_warns_when_trials_ran_on_several_platforms() -> None:
    from fusion_sweep.launch.sweep import LaunchSummary, format_summary

    one = LaunchSummary(name="s", total=4, finished=4, platforms={"torch 2, CPU AVX2": 4})
    assert "platforms" not in format_summary(one, "smoke")
    two = LaunchSummary(name="s", total=4, finished=4,
                        platforms={"torch 2, CPU AVX2": 3, "torch 2, CPU AVX512": 1})
    text = format_summary(two, "smoke")
    assert "warning: the trials ran on 2 platforms; `stats` pairs trials only on one" in text
    assert "torch 2, CPU AVX512 (1 trials)" in text


# ----------------------------------------------------------- the execution path (issue 32)
RESS = ["--encoder", "ressformer", "--pe", "none", "-o", "iterations=1", "-o", "topk=4"]


def _train_ress(kernels: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FUSION_SWEEP_KERNELS"}
    if kernels is not None:
        env["FUSION_SWEEP_KERNELS"] = kernels
    out = subprocess.run([sys.executable, "-m", "fusion_sweep.cli", "train", "--dataset",
                          "synthetic-short", "--json", *RESS, *TINY], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_kernels_switch_changes_the_platform_fingerprint() -> None:
    """A tiny ReSSFormer trial with FUSION_SWEEP_KERNELS=0 and one with the kernels on: the
    execution path is recorded, so the two platforms differ (issue 32, item 8)."""
    on, off = _train_ress(None), _train_ress("0")
    assert off["platform"]["kernels"] == "off" and off["platform"]["compiler"] == ""
    assert on["platform"]["kernels"] in ("compiled", "torch")
    if on["platform"]["kernels"] == "compiled":
        assert on["platform"]["compiler"]  # name and version
    assert on["fingerprints"]["platform"] != off["fingerprints"]["platform"]
    assert off["fingerprints"]["platform"] == platform_fingerprint(off["platform"])


def test_cpu_platform_records_precision_speed_and_no_gpu() -> None:
    p = describe_platform(torch.device("cpu"), "bf16", "reference")
    assert (p["precision"], p["speed"]) == ("bf16", "reference")
    assert all(p[k] == "none" for k in plat.GPU_FIELDS)


def test_gpu_platform_records_driver_capability_and_sdpa_backends(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 6))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA A10G")
    monkeypatch.setattr(torch._C, "_cuda_getDriverVersion", lambda: 12040, raising=False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91000)
    for name, on in (("flash_sdp_enabled", False), ("mem_efficient_sdp_enabled", True),
                     ("cudnn_sdp_enabled", False), ("math_sdp_enabled", True)):
        monkeypatch.setattr(torch.backends.cuda, name, lambda on=on: on)
    p = describe_platform(torch.device("cuda"), "tf32", "fast")
    assert (p["gpu"], p["capability"], p["driver"], p["cuda"], p["cudnn"]) == \
        ("NVIDIA A10G", "8.6", "12.4", "12.8", "91000")
    assert p["sdpa"] == "mem_efficient,math"
    assert (p["kernels"], p["compiler"], p["precision"]) == ("torch", "", "tf32")
    label = platform_label(p)
    assert "sm 8.6" in label and "SDPA mem_efficient,math" in label and "tf32" in label


def test_speed_label_and_heap_reuse_off_on_cuda() -> None:
    from fusion_sweep.trial.trainer import SpeedOptions

    assert SpeedOptions().label() == "fast" and SpeedOptions.reference().label() == "reference"
    assert SpeedOptions(eval_batch_mult=2, heap_reuse=False).label() == \
        "eval_batch_mult=2,heap_reuse=0"
    assert SpeedOptions().for_device(torch.device("cuda")).heap_reuse is False
    assert SpeedOptions().for_device(torch.device("cpu")).heap_reuse is True


def test_train_trial_keeps_no_heap_on_cuda(monkeypatch) -> None:
    """heap.keep_freed_memory is never called for a CUDA trial (the run itself is stopped
    right after, at the model build: this machine has no GPU)."""
    from fusion_sweep.trial import trainer
    from fusion_sweep.trial.config import TrialConfig

    calls: list[str] = []
    monkeypatch.setattr(trainer, "resolve_device", lambda name: torch.device("cuda"))
    monkeypatch.setattr(trainer, "keep_freed_memory", lambda: calls.append("heap"))
    monkeypatch.setattr(trainer, "deterministic", lambda d: __import__("contextlib").nullcontext())
    monkeypatch.setattr(trainer, "precision_mode", lambda p, d: __import__("contextlib").nullcontext())

    def stop(config, data, device, callback, speed):
        calls.append(f"run heap_reuse={speed.heap_reuse}")

    monkeypatch.setattr(trainer, "_run", stop)
    monkeypatch.setattr(trainer, "validate_encoded", lambda *a, **k: None)
    trainer.train_trial(TrialConfig.build("synthetic-short"), data=object(),
                        speed=trainer.SpeedOptions())
    assert calls == ["run heap_reuse=False"]


def test_dropout_fingerprint_hashes_a_drawn_mask() -> None:
    """The fingerprint is a mask dropout draws from the stream (and the stream is put
    back): a generator whose state is the same but whose draws differ gets another one."""
    import hashlib

    import torch.nn.functional as F

    from fusion_sweep.trial.seeds import DROPOUT_PROBE, dropout_fingerprint, dropout_stream

    cpu = torch.device("cpu")
    with dropout_stream(123, cpu) as fp:
        before = torch.get_rng_state()
        assert dropout_fingerprint(cpu) == fp
        assert torch.equal(torch.get_rng_state(), before)  # the stream is untouched
        mask = F.dropout(torch.ones(DROPOUT_PROBE), 0.5, training=True) != 0
    assert fp == hashlib.sha256(mask.numpy().tobytes()).hexdigest()[:16]
    with dropout_stream(124, cpu) as other:
        assert other != fp


def test_a_workers_cublas_workspace_is_kept(monkeypatch) -> None:
    """A worker starts with the workspace from Ray's runtime_env (before CUDA): a trial never
    changes it mid-process, where it would only satisfy torch's check."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    with deterministic(torch.device("cuda")):
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_a_cublas_workspace_set_after_cuda_started_is_warned(monkeypatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.warns(RuntimeWarning, match=r"CUBLAS_WORKSPACE_CONFIG is set to :4096:8 after "
                                            r"this process started CUDA"):
        with deterministic(torch.device("cuda")):
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
