"""The kinds of mutant issue 42 saw survive, each pinned by a test that kills it: a "most seeds"
boundary moved by one, the unadjusted p deciding where the Holm p must, a family miscounted
with several metrics or a pre-registered family (mean-Δ and sign-test Holm), an answer that
miscounts on a lower-is-better metric, a GPU share above one device accepted, and the GPU
memory check skipped on the cluster path. Read through stable surfaces: the `stats` JSON
(tests/report_json.py), the space parser, the launch's checks. Last, the tests that kill the
mutants mutmut saw survive (docs/contributing.md, "Mutation testing"), each naming the kind
of mutant it pins."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fusion_sweep.analysis import guard, stats, winrate
from fusion_sweep.errors import UserError
from fusion_sweep.launch import memory, preflight
from fusion_sweep.plan.grid import plan
from fusion_sweep.plan.space import load_space
from fusion_sweep.trial.memory import gpu_memory_bytes

sys.path.insert(0, str(Path(__file__).parent))
from report_json import arms, comparison, stats_json  # noqa: E402

ALPHA = 0.05
# Six seeds the variant wins on: sign p = 2 / 2^6 = 0.03125 < α alone, 0.0625 in a family of 2.
SIX_WINS = {"add": [0.80, 0.81, 0.82, 0.83, 0.84, 0.85],
            "gate": [0.85, 0.84, 0.86, 0.86, 0.89, 0.87]}


def _expected_holm(ps: list[float], m: int) -> np.ndarray:
    """Holm over a family of m by hand (step-down, cumulative max): absent members p = 1."""
    p = np.r_[ps, np.ones(m - len(ps))]
    order = np.argsort(p, kind="stable")
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order]).clip(max=1.0)
    out = np.empty(m)
    out[order] = adj
    return out[:len(ps)]


# ------------------------------------------------------------------ "most seeds"
@pytest.mark.parametrize("learned_seeds, n, state", [(1, 4, "no"), (2, 4, "no"), (3, 4, "yes"),
                                                     (2, 5, "no"), (3, 5, "yes")])
def test_an_arm_learned_only_on_most_of_its_seeds(tmp_path, capsys, learned_seeds: int, n: int,
                                                  state: str) -> None:
    """docs/statistics.md: `learned?` is yes when the arm learned on MOST of its seeds: exactly
    half is not most (kills `2 * count > n` -> `>=`)."""
    gate = [0.6] * learned_seeds + [0.5] * (n - learned_seeds)  # 600/1000 beats 0.5; 500 not
    rep = stats_json(arms({"add": [0.7] * n, "gate": gate}), tmp_path, capsys,
                     "--baseline", "add")
    test = next(t for t in rep["chance"]["tests"] if t["fusion"] == "gate")
    assert (test["learn_count"], test["learn_n"], test["learned"]) == (learned_seeds, n, state)


# ------------------------------------------------------------------ the Holm p decides
def test_the_holm_p_decides_not_the_raw_one(tmp_path, capsys) -> None:
    """Two metrics, one comparison each: each raw sign p (0.03125) is below α, each Holm p
    (0.0625) is not, so no win-rate verdict is decided (kills the raw p deciding)."""
    rows = arms(SIX_WINS)
    for r in rows:
        r["test_macro_f1"] = r["test_acc"] - 0.01
    rep = stats_json(rows, tmp_path, capsys, "--baseline", "add",
                     "--metric", "test_acc", "--metric", "test_macro_f1")
    for metric in ("test_acc", "test_macro_f1"):
        c = comparison(rep, "gate", metric)
        assert c["sign_p"] == pytest.approx(0.03125) and c["sign_p_holm"] == pytest.approx(0.0625)
        assert c["win_verdict"] == "inconclusive"
    assert "by mean Δ and win rate" not in " ".join(a["sentence"] for a in rep["answer"])


def test_the_mean_delta_verdict_reads_the_holm_p() -> None:
    """stats.verdict: an interval excluding 0 decides only with the Holm p below α."""
    assert stats.verdict(0.01, 0.03, 0.049, float("nan"), ALPHA) == "better"
    assert stats.verdict(0.01, 0.03, 0.05, float("nan"), ALPHA) == "inconclusive"
    assert stats.verdict(-0.03, -0.01, 0.049, float("nan"), ALPHA) == "worse"


# ------------------------------------------------------------------ the family's m
@pytest.mark.parametrize("recorded, expected_m", [(None, 2), (1, 2), (3, 4)])
def test_the_family_counts_every_metric_and_the_pre_registered_members(
        tmp_path, capsys, recorded: int | None, expected_m: int) -> None:
    """m = every comparison of the input (both metrics) plus the members of the pre-registered
    family (on the sweep's metric, test_acc) the input lacks; the mean-Δ and the sign-test Holm
    are each over that m (docs/statistics.md, Multiplicity)."""
    rows = arms(SIX_WINS)
    for r in rows:
        r["test_macro_f1"] = r["test_acc"] - 0.003 * r["seed"]
        if recorded is not None:
            r["comparison_family"] = json.dumps({"m": recorded, "members": []})
    rep = stats_json(rows, tmp_path, capsys, "--baseline", "add",
                     "--metric", "test_acc", "--metric", "test_macro_f1")
    assert rep["family"]["m"] == expected_m
    comps = [comparison(rep, "gate", m) for m in ("test_acc", "test_macro_f1")]
    t_holm = _expected_holm([c["t_p"] for c in comps], expected_m)
    sign_holm = _expected_holm([c["sign_p"] for c in comps], expected_m)
    for c, tp, sp in zip(comps, t_holm, sign_holm):
        assert c["p_holm"] == pytest.approx(tp, rel=1e-9)
        assert c["sign_p_holm"] == pytest.approx(sp, rel=1e-9)
        # Holm's first step (power, seeds for power) is at alpha over the same m
        assert c["holm_first_step_alpha"] == pytest.approx(0.05 / expected_m, rel=1e-12)


# ------------------------------------------------------------------ lower is better
def test_the_answer_counts_wins_as_lower_on_a_lower_is_better_metric(tmp_path, capsys) -> None:
    """Latency, lower is better: the variant is faster on 8 of 9 seeds. The sentence says it
    beats the reference with win rate 8/9 (not 1/9, not 'loses to')."""
    base = [10.0 + 0.1 * s for s in range(9)]
    gate = [b - 1.0 - 0.05 * s for s, b in enumerate(base)]
    gate[4] = base[4] + 0.2  # the one seed it is slower on
    rows = arms({"add": [0.8] * 9, "gate": [0.8] * 9})
    for r in rows:
        r["latency_ms_per_sample"] = (gate if r["fusion"] == "gate" else base)[r["seed"]]
    rep = stats_json(rows, tmp_path, capsys, "--baseline", "add",
                     "--metric", "latency_ms_per_sample")
    c = comparison(rep, "gate", "latency_ms_per_sample")
    assert (c["win_verdict"], c["verdict"]) == ("better", "better")
    said = [a["sentence"] for a in rep["answer"] if a["kind"] == "better"]
    assert len(said) == 1 and "gate beats add" in said[0] and "win rate 8/9" in said[0], said


# ------------------------------------------------------------------ one device at most
def _resources(cpu: float = 1, gpu: object = 0, **more: object):
    """The smoke space with these per-trial `resources` (as if read from s.yaml)."""
    from fusion_sweep.plan.space import parse_space
    raw = load_space("smoke").to_yaml_dict()
    raw["resources"] = {"cpu": cpu, "gpu": gpu, **more}
    return parse_space(raw, "s.yaml")


@pytest.mark.parametrize("gpu", [0.5, 1, 2])
def test_a_gpu_share_up_to_one_device_or_whole_devices_is_accepted(gpu: object) -> None:
    assert _resources(gpu=gpu).gpu == float(gpu)


@pytest.mark.parametrize("gpu", [1.5, 1.0001])
def test_a_fractional_gpu_share_above_one_device_is_refused(gpu: float) -> None:
    with pytest.raises(Exception, match=r"resources.gpu: above 1 it must be a whole number"):
        _resources(gpu=gpu)


def _need() -> tuple[int, list]:
    points = plan(load_space("smoke"))[:1]
    return gpu_memory_bytes(points[0].config), points


@pytest.fixture(autouse=True)
def _no_device_query(monkeypatch) -> None:
    """A check handed a device measures against it: querying CUDA instead is a failure here
    (and not a crash of a test process with CUDA in an odd state)."""
    monkeypatch.setattr(memory, "gpu_device_memory",
                        lambda: pytest.fail("queried the GPU though a device was given"))


@pytest.mark.parametrize("gpu, device_over_need, fits", [
    (1.0, 1.0, True), (1.0, 0.999, False),
    (0.5, 2.0, True), (0.5, 1.999, False),
    (2.0, 0.999, False),  # two devices given, one used: never more than one device's memory
    (3.0, 1.0, True)])
def test_the_gpu_memory_check_counts_at_most_one_device(gpu: float, device_over_need: float,
                                                        fits: bool) -> None:
    need, points = _need()
    space = SimpleNamespace(gpu=gpu, source="s.yaml")
    device = (int(need * device_over_need), "the test device")
    if fits:
        assert memory.check_gpu_memory(space, points, device) == [need]
    else:
        with pytest.raises(UserError, match=r"resources.gpu in s.yaml: .* GiB of GPU memory"):
            memory.check_gpu_memory(space, points, device)


# ------------------------------------------------------------------ the cluster path
@pytest.mark.parametrize("address", [None, "10.0.0.5:6379"])
def test_the_gpu_memory_check_runs_on_the_cluster_path_too(monkeypatch, address) -> None:
    """`launch --address`: the local resource check does not apply (the cluster is not this
    machine) but the GPU memory check does, before anything starts."""
    called = []
    monkeypatch.setattr(preflight, "check_tracking_uri", lambda uri: None)
    monkeypatch.setattr(preflight, "check_ray_address", lambda a: a)
    monkeypatch.setattr(preflight, "check_local_resources", lambda s, p: called.append("local"))

    def refuse(space, points):
        called.append("gpu")
        raise UserError("resources.gpu: over its share")

    monkeypatch.setattr(preflight, "check_gpu_memory", refuse)
    with pytest.raises(UserError, match="over its share"):
        preflight.preflight(SimpleNamespace(gpu=1.0), "n", [], "file:/tmp/x", address, None,
                            None, False, sys.stdout)
    assert called == (["local", "gpu"] if address is None else ["gpu"])


def test_preflight_hands_the_launch_what_it_checked(tmp_path, sqlite_store, monkeypatch) -> None:
    """A new sweep on a local instance, field by field: the tracking URI as given, the
    storage with one slash before the sweep's name (a URI keeps its scheme), the grid's hash
    and code, the space's experiment unless one is named, this grid's code as the history, and
    nothing superseded."""
    import io

    from fusion_sweep.plan.grid import code_of, grid_hash

    monkeypatch.setattr(preflight, "_local_gpus", lambda: 0)
    space = load_space("smoke")
    points = plan(space)
    pf = preflight.preflight(space, "pf", points, sqlite_store, None, "s3://bucket/runs/", None,
                             False, io.StringIO())
    assert (pf.name, pf.points, pf.uri, pf.address) == ("pf", points, sqlite_store, None)
    assert pf.exp_path == "s3://bucket/runs/pf"
    assert pf.ghash == grid_hash(points) and pf.code == code_of(points) == pf.history
    assert pf.experiment == space.experiment and pf.superseded == {} and pf.space is space
    named = preflight.preflight(space, "pf", points, sqlite_store, None, str(tmp_path), "other",
                                False, io.StringIO())
    assert named.experiment == "other" and named.exp_path == f"{tmp_path.resolve()}/pf"
    # a cluster's address is kept as checked; a storage path keeps every character but its
    # trailing slashes
    monkeypatch.setattr(preflight, "check_ray_address", lambda address: address)
    on_cluster = preflight.preflight(space, "pf", points, sqlite_store, "10.0.0.5:6379",
                                     "s3://bucket/BOX//", None, False, io.StringIO())
    assert on_cluster.address == "10.0.0.5:6379" and on_cluster.exp_path == "s3://bucket/BOX/pf"


def _relaunch_store(uri: str, space, points, history: str) -> tuple:
    """A store where sweep "again" was launched on `points` with other code: its parent run
    (this grid's hash, the code history given) and one FINISHED trial of the first point
    under an old key. Returns (tracker, the old run's id)."""
    from fusion_sweep.plan.grid import grid_hash
    from fusion_sweep.tracking.runs import SweepTracker, TrackingContext, TrialRun

    tracker = SweepTracker(uri, space.experiment)
    parent = tracker.start_parent("again", grid_hash=grid_hash(points), n_trials=len(points),
                                  commit="old", params={}, code="oldcode", code_history=history)
    ctx = TrackingContext(tracking_uri=uri, experiment_id=tracker.experiment_id,
                          parent_run_id=parent, sweep="again", code_fingerprint="oldcode",
                          git_commit="old", launch_id="first")
    config = points[0].config
    old = TrialRun.open(ctx, config, config.trial_key("oldcode"))
    tracker.client.set_terminated(old.run_id, "FINISHED")
    tracker.finish_parent(parent, "FINISHED", {"trials_finished": 1})
    return tracker, old.run_id


def test_a_relaunch_keeps_its_grid_extends_its_history_and_names_what_it_retrains(
        sqlite_store, monkeypatch) -> None:
    """`launch` of an existing sweep: the same grid is accepted (a parent from before grid
    hashes too), another grid is refused by name, a finished trial under other code is
    retrained only with --allow-code-change, and then its old run is superseded, said, and
    the history gains this code once."""
    import io

    from fusion_sweep.plan.grid import code_of
    from fusion_sweep.plan.relaunch import code_plan
    from fusion_sweep.schema import GRID_HASH

    monkeypatch.setattr(preflight, "_local_gpus", lambda: 0)
    space = load_space("smoke")
    points = plan(space)
    tracker, old_run = _relaunch_store(sqlite_store, space, points, "h0,oldcode")

    def again(pts=points, allow=False, experiment=None, out=None):
        return preflight.preflight(space, "again", pts, sqlite_store, None, None, experiment,
                                   allow, out or io.StringIO())

    with pytest.raises(UserError, match=(
            r"^sweep 'again' has finished trials trained by other code \(.*\): their numbers "
            r"may differ .* Pass --allow-code-change to retrain those 1 ")):
        again()
    out = io.StringIO()
    pf = again(allow=True, out=out)
    assert pf.superseded == {old_run: points[0].key}
    summary = code_plan(tracker, "again", points).summary()
    assert out.getvalue() == (f"code changed since trials of sweep 'again' finished: {summary}; "
                              f"--allow-code-change: retraining those 1\n")
    assert pf.history == f"h0,oldcode,{code_of(points)}" and pf.code == code_of(points)
    assert pf.tracker.experiment == space.experiment == pf.experiment
    assert pf.tracker.find_parent("again").info.run_id == tracker.find_parent("again").info.run_id
    assert pf.commit and pf.commit != "old"
    # another grid under the same name
    with pytest.raises(UserError, match=(
            r"^sweep 'again' already exists in MLflow experiment 'fusion-sweep' with a "
            r"different grid \(the space changed\); choose another --name to run this space$")):
        again(points[:1], allow=True)
    # the same name in another experiment is another sweep
    assert again(points[:1], experiment="elsewhere").superseded == {}
    # a parent from before grid hashes were tagged is not refused
    tracker.client.delete_tag(tracker.find_parent("again").info.run_id, GRID_HASH)
    assert again(points[:1], allow=True).superseded == {old_run: points[0].key}


# ------------------------------------------------------------------ this machine's resources
def _machine(monkeypatch, cpus: int | None = 4, gpus: int = 0, total: int = 10 * 2 ** 30,
             need: tuple[int, ...] = (2 ** 20,)) -> list[str]:
    """This machine as `check_local_resources` sees it, and the memory estimates of the
    points in turn (`need`, cycled); returns the GPU queries it makes."""
    import itertools

    asked: list[str] = []
    monkeypatch.setattr(preflight.os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(preflight, "_local_gpus", lambda: asked.append("gpus") or gpus)
    monkeypatch.setattr(preflight.os, "sysconf",
                        lambda n: {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": total // 4096}[n])
    needs = itertools.cycle(need)
    monkeypatch.setattr(preflight, "trial_memory_bytes", lambda space, config: next(needs))
    return asked


def test_no_usable_cuda_is_no_local_gpu(monkeypatch) -> None:
    import torch

    def broken() -> int:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(torch.cuda, "device_count", broken)
    assert preflight._local_gpus() == 0
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert preflight._local_gpus() == 3


@pytest.mark.parametrize("cpu, gpu, cpus, gpus, refused", [
    (4, 0, 4, 0, False), (4.5, 0, 4, 0, True), (5, 0, 4, 0, True),  # at most every CPU
    (1, 1, 4, 1, False), (1, 2, 4, 1, True), (1, 1, 4, 0, True),  # at most every GPU
    (1, 0, None, 0, False), (2, 0, None, 0, True)])  # an unknown CPU count: one
def test_a_local_trial_needs_at_most_what_this_machine_has(monkeypatch, cpu, gpu, cpus, gpus,
                                                           refused) -> None:
    asked = _machine(monkeypatch, cpus, gpus)
    space, points = _resources(cpu, gpu), plan(load_space("smoke"))[:2]
    if not refused:
        preflight.check_local_resources(space, points)
    else:
        with pytest.raises(UserError, match=(
                rf"^resources: one trial needs cpu={cpu:g}, gpu={gpu:g}, but the local Ray "
                rf"instance has this machine's CPU={cpus or 1}, GPU={gpus if gpu else 0}, so no "
                rf"trial could ever start; lower `resources` in s\.yaml, or pass --address")):
            preflight.check_local_resources(space, points)
    assert asked == (["gpus"] if gpu else [])  # no GPU asked for: CUDA is not even queried


@pytest.mark.parametrize("over, refused", [(-1, False), (0, False), (1, True)])
def test_a_local_trial_needs_at_most_rays_share_of_this_machines_memory(monkeypatch, over,
                                                                        refused) -> None:
    """The largest trial counts (the others may fit), against Ray's share of the memory."""
    from fusion_sweep.launch.memory import RAY_MEMORY_SHARE
    total = 10 * 2 ** 30
    share = int(RAY_MEMORY_SHARE * total)
    _machine(monkeypatch, total=total, need=(share // 2, share + over, 1))
    points = plan(load_space("smoke"))[:3]
    if not refused:
        preflight.check_local_resources(_resources(), points)
        return
    with pytest.raises(UserError, match=(
            r"^resources: one trial needs about 6\.0 GiB of memory but the local Ray instance "
            r"schedules at most 6\.0 GiB of this machine's 10\.0 GiB, so no trial could ever "
            r"start; set `resources: \{memory_gb: \.\.\.\}` in s\.yaml")):
        preflight.check_local_resources(_resources(), points)


@pytest.mark.parametrize("pin, gpus, refused", [("A10G", 1, False), ("A10G", 0, True),
                                                (None, 0, False)])
def test_a_local_gpu_type_pin_needs_a_local_gpu(monkeypatch, pin, gpus, refused) -> None:
    asked = _machine(monkeypatch, gpus=gpus)
    space = _resources(**({"accelerator_type": pin} if pin else {}))
    if refused:
        with pytest.raises(UserError, match=r"^resources.accelerator_type: 'A10G' pins"):
            preflight.check_local_resources(space, plan(load_space("smoke"))[:1])
    else:
        preflight.check_local_resources(space, plan(load_space("smoke"))[:1])
    assert asked == (["gpus"] if pin else [])


def _ray(monkeypatch, resources: dict, nodes: list[tuple[str, bool]]) -> None:
    """A Ray whose cluster has these resources and (node IP, alive) nodes."""
    fake = SimpleNamespace(cluster_resources=lambda: resources,
                           nodes=lambda: [{"NodeManagerAddress": ip, "Alive": alive}
                                          for ip, alive in nodes])
    monkeypatch.setitem(sys.modules, "ray", fake)


@pytest.mark.parametrize("resources, warned", [
    ({"CPU": 2, "GPU": 1}, None), ({"CPU": 3, "GPU": 2}, None),
    ({"CPU": 1.5, "GPU": 1}, "CPU=1.5, GPU=1"), ({"CPU": 2, "GPU": 0.5}, "CPU=2, GPU=0.5"),
    ({"CPU": 2}, "CPU=2, GPU=0"), ({"GPU": 1}, "CPU=0, GPU=1"),
    ({}, "CPU=0, GPU=0")])  # no CPU yet (an autoscaling cluster's head): less than 1 CPU
@pytest.mark.parametrize("cpu", [2, 1])
def test_the_cluster_warns_when_it_has_less_than_one_trial_needs(monkeypatch, resources,
                                                                 warned, cpu) -> None:
    import io
    _ray(monkeypatch, resources, [("10.0.0.1", True)])
    out = io.StringIO()
    preflight.warn_resources(_resources(cpu, 1), "http://10.0.0.1:5000", out)
    if cpu == 1 and resources.get("CPU", 0) >= 1:  # CPU=1.5 is enough for cpu=1
        warned = None if resources.get("GPU", 0) >= 1 else warned
    expected = "" if warned is None else (
        f"warning: one trial needs cpu={cpu}, gpu=1 but the cluster has {warned} now; trials "
        f"wait until an autoscaler adds such a node\n")
    assert out.getvalue() == expected


@pytest.mark.parametrize("uri, nodes, warnings", [
    ("http://127.0.0.1:5000", [("10.0.0.1", True), ("10.0.0.2", True)], ["loopback address"]),
    ("http://localhost:5000", [("10.0.0.1", True), ("10.0.0.2", True)], ["loopback address"]),
    ("http://127.0.0.1:5000", [("10.0.0.1", True), ("10.0.0.1", True)], []),  # one machine
    ("http://127.0.0.1:5000", [("10.0.0.1", True), ("10.0.0.2", False)], []),  # one alive
    ("http://10.0.0.1:5000", [("10.0.0.1", True), ("10.0.0.2", True)], []),
    ("sqlite:///m.db", [("10.0.0.1", True), ("10.0.0.1", True)], ["2 nodes but a local"]),
    ("sqlite:///m.db", [("10.0.0.1", True), ("10.0.0.2", False)], []),
    ("/runs/mlruns", [("10.0.0.1", True), ("10.0.0.2", True), ("10.0.0.3", True)],
     ["3 nodes but a local tracking store (/runs/mlruns)"])])
def test_the_cluster_warns_when_its_trials_cannot_reach_the_store(monkeypatch, uri, nodes,
                                                                  warnings) -> None:
    import io
    _ray(monkeypatch, {"CPU": 8, "GPU": 0}, nodes)
    out = io.StringIO()
    preflight.warn_resources(_resources(), uri, out)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(warnings) and all(w in line for w, line in zip(warnings, lines))
    assert all(line.startswith("warning: ") for line in lines)
    if warnings and "loopback" in warnings[0]:
        assert lines[0] == (f"warning: the tracking URI {uri} is this machine's loopback "
                            f"address, but trials also run on other machines (2 node IPs); give "
                            f"an address they can reach, e.g. http://<head-ip>:5000")


@pytest.mark.parametrize("history, code, expected", [
    (None, "c", "c"), ("", "c", "c"), ("a,b", "c", "a,b,c"), ("a,b", "b", "a,b"),
    ("a,b", "a", "a,b"), (",a,,b,", "c", "a,b,c")])
def test_the_code_history_appends_this_code_once(history, code, expected) -> None:
    from fusion_sweep.schema import CODE_HISTORY
    tags = {CODE_HISTORY: history} if history is not None else {}
    parent = SimpleNamespace(data=SimpleNamespace(tags=tags))
    assert preflight.code_history(parent, code) == expected
    assert preflight.code_history(None, code) == code


def test_a_new_sweep_supersedes_nothing_and_asks_no_plan(monkeypatch) -> None:
    monkeypatch.setattr(preflight, "code_plan", lambda *a: pytest.fail("planned"))
    assert preflight.check_code(None, None, "n", [], False, sys.stdout) == {}


# ------------------------------------------------------------------ the trial's seed streams
def test_each_component_is_initialised_from_its_own_stream(monkeypatch) -> None:
    """build_model seeds each parameter group from the stream named after it: a group drawn
    from another's stream would share its init across variants that differ in that group."""
    from fusion_sweep.trial import seeds as streams

    seen: dict[str, int] = {}
    monkeypatch.setattr(streams, "construct_model", lambda *a: "model")
    monkeypatch.setattr(streams, "initialize", lambda model, seeds: seen.update(seeds))
    config = plan(load_space("smoke"))[0].config
    assert streams.build_model(config, 10, 2) == "model"
    d = streams.stream_dataset(config)
    assert seen == {g: streams.derive_seed(config.seed, f"{g}_init", d)
                    for g in ("shared", "encoder", "fusion", "pe")}
    assert len(set(seen.values())) == 4  # four streams, four seeds


# ================================================================== mutmut's survivors
NAN = float("nan")


# ------------------------------------------------------------------ guard.Learning's words
def test_an_unknown_learned_state_says_which_unknown() -> None:
    """UNKNOWN with no chance level: the class count is unknown; with one: the accuracy did
    not vary (kills the swapped `isfinite` test and the changed sentences)."""
    no_k = guard.Learning("concat", guard.UNKNOWN, chance_level=NAN)
    assert no_k.reason() == "chance level unknown for concat (class count unknown)"
    flat = guard.Learning("concat", guard.UNKNOWN, chance_level=0.5)
    assert flat.reason() == ("concat has the same accuracy on every seed (or fewer than 2 "
                             "seeds): whether it beats chance is unknown")
    assert guard.Learning("add", guard.NO, chance_level=0.25).reason() == (
        "add does not beat chance (0.25)")
    assert guard.Learning("add", guard.YES, chance_level=0.25).reason() == ""


def test_an_inexact_learned_yes_cannot_enter_an_equivalence_claim() -> None:
    inexact = guard.Learning("gate", guard.YES, exact=False, basis="1/K", chance_level=0.5)
    assert inexact.equivalence_reason() == ("gate's learned? rests on 1/K: it may be a "
                                            "majority-class predictor")
    exact = guard.Learning("gate", guard.YES, exact=True, chance_level=0.5)
    assert exact.equivalence_reason() == ""
    unknown = guard.Learning("gate", guard.UNKNOWN, chance_level=NAN)
    assert unknown.equivalence_reason() == unknown.reason() != ""


# ------------------------------------------------------------------ winrate.learn_rate
def test_a_learn_rate_is_frozen() -> None:
    """LearnRate's arrays are read-only: no caller can flip a seed's verdict in place."""
    lr = winrate.learn_rate(np.array([60, 40]), np.array([100, 100]), np.array([0.5, 0.5]),
                            0.05)
    with pytest.raises(ValueError, match="read-only"):
        lr.learned[0] = False
    with pytest.raises(ValueError, match="read-only"):
        lr.p_values[0] = 0.0


@pytest.mark.parametrize("which", ["correct", "n_test", "majority_rate"])
def test_the_learn_test_reads_counts_from_object_columns(which: str) -> None:
    """pandas hands over an object column (a column that held blanks or mixed types): its
    numbers are numbers (kills dropping `dtype=float` from the coercion)."""
    args = {"correct": np.array([60, 40]), "n_test": np.array([100, 100]),
            "majority_rate": np.array([0.5, 0.5])}
    args[which] = args[which].astype(object)
    lr = winrate.learn_rate(args["correct"], args["n_test"], args["majority_rate"], 0.05)
    assert lr.learned.tolist() == [True, False] and lr.count == 1 and lr.n == 2


def _learn(correct: float, n_test: float) -> winrate.LearnRate:
    return winrate.learn_rate(np.array([correct]), np.array([n_test]), np.array([0.5]), 0.05)


@pytest.mark.parametrize("correct, n_test, error", [
    (0, 10, None), (-1, 10, r"correct must lie in \[0, n_test\]"),  # at least 0
    (10, 10, None), (11, 10, r"correct must lie in \[0, n_test\]"),  # at most n_test
    (1, 1, None), (0, 0, r"n_test must be whole counts >= 1"),  # n_test at least 1
    (5, 10.5, r"n_test must be whole counts >= 1"),
    (1e-6, 10, r"correct must be whole counts"),  # 1e-6 off a whole count is not whole
    (5.5, 10, r"correct must be whole counts"),
])
def test_the_learn_tests_counts_at_their_bounds(correct: float, n_test: float,
                                                error: str | None) -> None:
    """winrate._learn_inputs: 0 <= correct <= n_test, n_test >= 1, both whole (kills the
    bounds moved by one, the whole-count tolerance widened, the messages changed)."""
    if error is None:
        lr = _learn(correct, n_test)
        assert lr.n == 1 and lr.count in (0, 1)
    else:
        with pytest.raises(ValueError, match=f"^{error}$"):  # the whole message
            _learn(correct, n_test)


MAJORITY_ERROR = ("majority_rate must lie in [0, 1] (an unknown rate is the caller's 'unknown', "
                  "not a test)")


@pytest.mark.parametrize("rate, alpha, error", [
    (0.0, 0.05, None), (-1e-9, 0.05, MAJORITY_ERROR), (1.0, 0.05, None),
    (1 + 1e-9, 0.05, MAJORITY_ERROR), (float("nan"), 0.05, MAJORITY_ERROR),
    (0.5, 1 - 1e-9, None), (0.5, 1.0, "alpha must lie in (0, 1), got 1.0"),
    (0.5, 1.5, "alpha must lie in (0, 1), got 1.5"), (0.5, 0.0, "alpha must lie in (0, 1), got 0.0"),
    (2.0, 1.0, MAJORITY_ERROR + "; alpha must lie in (0, 1), got 1.0"),  # every error at once
])
def test_the_learn_tests_majority_rate_and_alpha_at_their_bounds(rate: float, alpha: float,
                                                                 error: str | None) -> None:
    """A majority rate in [0, 1] (both ends included), alpha in (0, 1) (both excluded); the
    whole message, every error at once."""
    args = (np.array([6]), np.array([10]), np.array([rate]), alpha)
    if error is None:
        assert winrate.learn_rate(*args).n == 1
    else:
        with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):  # the whole message
            winrate.learn_rate(*args)


# ------------------------------------------------------------------ the trial key's formula
def test_the_trial_key_formula_is_pinned() -> None:
    """A trial's key is stored with its run: a changed formula (the payload's names, its
    ordering, the digest's length) re-keys every finished trial and retrains the sweep."""
    from fusion_sweep import schema

    config = {"seed": 0, "lr": 0.001, "fusion": "add"}
    assert schema.trial_key(config, "code-a") == "987c77d19d86a318"
    # the fields' order in the mapping is no part of what a trial computes
    assert schema.trial_key(dict(reversed(config.items())), "code-a") == "987c77d19d86a318"


def test_the_trial_key_takes_any_value_by_its_text() -> None:
    """A value JSON cannot hold (a path) enters by its text, never an error."""
    from fusion_sweep import schema

    assert schema.trial_key({"x": Path("/a/b")}, "c") == schema.trial_key({"x": "/a/b"}, "c")


# ------------------------------------------------------------------ the GPU check's edges
def test_a_space_without_a_gpu_share_is_not_checked() -> None:
    """gpu: 0 asks for no GPU: no estimate, no device queried (a share of 0 would refuse
    every trial)."""
    _, points = _need()
    assert memory.check_gpu_memory(SimpleNamespace(gpu=0, source="s.yaml"), points,
                                   (2 ** 40, "a device")) == []


def test_the_gpu_refusal_names_the_device_it_measured() -> None:
    need, points = _need()
    with pytest.raises(UserError, match=r"but its share gpu: 0\.5 of the test device gives"):
        memory.check_gpu_memory(SimpleNamespace(gpu=0.5, source="s.yaml"), points,
                                (need, "the test device"))


# ------------------------------------------------------------------ a split's majority rate
@pytest.mark.parametrize("rate, k, bound", [
    (0.5 - 1e-9, 2, None),  # at the float tolerance below 1/K: still 1/K
    (0.5 - 2e-9, 2, "1/num_classes = 0.5"),
    (0.3, None, None),  # no class count: any rate in [0, 1]
    (0.0, None, None), (-0.1, None, "0"),
])
def test_a_majority_rate_is_checked_against_one_over_k_or_zero(rate: float, k: int | None,
                                                               bound: str | None) -> None:
    from fusion_sweep.analysis import chance
    from fusion_sweep.analysis.schema import AnalysisError

    if bound is None:
        chance._check_majority_rate("d", np.array([rate]), k)
        return
    message = (f"column 'test_majority_rate' for dataset 'd' holds {rate:g}, outside [{bound}, "
               "1]: a test split's majority class holds at least 1/K of it; fix the file (or "
               "the class count, --num-classes d=K)")
    with pytest.raises(AnalysisError, match=f"^{re.escape(message)}$"):
        chance._check_majority_rate("d", np.array([rate]), k)


# ------------------------------------------------------------------ the guard's reason
def test_the_guard_withholds_for_the_first_arm_with_a_reason() -> None:
    """No arm shown to learn: a better/worse is withheld with the first reason either arm
    gives, even when the other arm gives none (kills `or` -> `and`)."""
    unknown = guard.Learning("gate", guard.UNKNOWN, chance_level=0.5)
    no = guard.Learning("gate", guard.NO, chance_level=0.5)
    na = guard.Learning("add", guard.NA)
    ref_unknown = guard.Learning("add", guard.UNKNOWN, chance_level=NAN)
    g = guard.guard("better", unknown, na)
    assert (g.verdict, g.withheld, g.why) == ("inconclusive", "better", unknown.reason())
    g = guard.guard("worse", no, ref_unknown)
    assert (g.verdict, g.withheld, g.why) == ("inconclusive", "worse", no.reason())
