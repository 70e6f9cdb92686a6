"""What `launch` checks before anything starts (store, Ray address, grid, code, resources), and
the cluster warnings once Ray is up: nothing after preflight fails on bad input."""
from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field
from typing import TextIO

from fusion_sweep.tracking import runs as tracking
from fusion_sweep.launch.adaptive import AdaptiveState
from fusion_sweep.tracking.checkout import git_commit
from fusion_sweep.plan.grid import GridPoint, code_of, grid_hash
from fusion_sweep.launch.memory import RAY_MEMORY_SHARE, check_gpu_memory, trial_memory_bytes
from fusion_sweep.raytune.placement import check_local_pin
from fusion_sweep.raytune.setup import check_ray_address, resolve_storage
from fusion_sweep.plan.relaunch import code_plan
from fusion_sweep.schema import CODE_HISTORY, GRID_HASH, LOOPBACK_HOSTS, resolve_tracking_uri
from fusion_sweep.plan.space import SearchSpace
from fusion_sweep.tracking.store import check_tracking_uri, is_local_store
from fusion_sweep.errors import UserError


@dataclass
class Preflight:
    """What `launch` checked before anything starts: nothing below fails on bad input."""

    space: SearchSpace
    name: str
    points: list[GridPoint]
    uri: str
    address: str | None
    exp_path: str
    ghash: str
    experiment: str
    tracker: tracking.SweepTracker
    code: str  # the grid's code (`grid.code_of`), the parent run's tag
    history: str
    commit: str
    adaptive: AdaptiveState | None = None  # for --until-decided
    # Finished runs this launch retrains under new code: old run id -> the new trial key
    # (tagged schema.SUPERSEDED once the parent run is open; never deleted).
    superseded: dict[str, str] = field(default_factory=dict)


def preflight(space: SearchSpace, name: str, points: list[GridPoint], tracking_uri: str | None,
               address: str | None, storage: str | None, experiment: str | None,
               allow_code_change: bool, out: TextIO) -> Preflight:
    """Everything that can fail does so here, before Ray starts."""
    uri = resolve_tracking_uri(tracking_uri)
    check_tracking_uri(uri)
    address = check_ray_address(address)
    if address is None:  # a local instance: this machine is the whole cluster
        check_local_resources(space, points)
    check_gpu_memory(space, points)  # Ray counts no GPU memory: a trial over its share OOMs
    exp_path = f"{resolve_storage(storage).rstrip('/')}/{name}"
    ghash = grid_hash(points)
    experiment = experiment or space.experiment
    tracker = tracking.SweepTracker(uri, experiment)
    parent = tracker.find_parent(name)
    if parent is not None and parent.data.tags.get(GRID_HASH, ghash) != ghash:
        raise UserError(f"sweep {name!r} already exists in MLflow experiment {experiment!r} with a "
                         f"different grid (the space changed); choose another --name to run this "
                         f"space")
    code = code_of(points)
    superseded = check_code(parent, tracker, name, points, allow_code_change, out)
    history = code_history(parent, code)
    return Preflight(space, name, points, uri, address, exp_path, ghash, experiment, tracker,
                     code, history, git_commit(), superseded=superseded)



def check_code(parent, tracker, name: str, points: list[GridPoint], allow: bool,
               out: TextIO) -> dict[str, str]:
    """Refuse to retrain finished trials silently; returns the runs this launch supersedes.

    A finished trial whose key is unchanged is kept, whatever else changed. One whose
    components' code changed (`relaunch.code_plan`) is retrained only with
    `--allow-code-change`; the plan (kept, and retrained per changed component) is printed
    before anything trains, and the old runs stay in MLflow, marked superseded.
    """
    if parent is None:
        return {}
    plan = code_plan(tracker, name, points)
    if plan.retrain and not allow:
        raise UserError(
            f"sweep {name!r} has finished trials trained by other code ({plan.summary()}): "
            f"their numbers may differ from what this code computes, so they are not reused. "
            f"Pass --allow-code-change to retrain those {len(plan.retrain)} (their old runs "
            f"stay in MLflow, marked superseded; `launch --dry-run` lists them), or launch "
            f"under another --name")
    if plan.retrain:
        print(f"code changed since trials of sweep {name!r} finished: {plan.summary()}; "
              f"--allow-code-change: retraining those {len(plan.retrain)}", file=out)
    return dict(plan.superseded)


def code_history(parent, code: str) -> str:
    """The sweep's code history with this launch's grid code (`schema.CODE_HISTORY`)."""
    history = parent.data.tags.get(CODE_HISTORY) or "" if parent is not None else ""
    seen = [h for h in history.split(",") if h]
    return ",".join(seen + [code] if code not in seen else seen)


def _local_gpus() -> int:
    """GPUs a local Ray instance would see (torch honours CUDA_VISIBLE_DEVICES, as Ray does)."""
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no usable CUDA: no GPU
        return 0


def check_local_resources(space: SearchSpace, points: list[GridPoint]) -> None:
    """Refuse, before Ray starts, a space whose trial needs more than this machine has: the
    local instance is sized to it (`ray_setup.init_ray`), so such a trial could never start."""
    ncpu = os.cpu_count() or 1
    ngpu = _local_gpus() if space.gpu > 0 else 0
    if space.cpu > ncpu or space.gpu > ngpu:
        raise UserError(f"resources: one trial needs cpu={space.cpu:g}, gpu={space.gpu:g}, but "
                         f"the local Ray instance has this machine's CPU={ncpu}, GPU={ngpu}, so "
                         f"no trial could ever start; lower `resources` in {space.source}, or "
                         f"pass --address for a cluster with such nodes")
    check_local_pin(space, _local_gpus() if space.accelerator_type else 0)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    need = max(trial_memory_bytes(space, p.config) for p in points)
    if need > RAY_MEMORY_SHARE * total:
        raise UserError(f"resources: one trial needs about {need / 2**30:.1f} GiB of memory but "
                         f"the local Ray instance schedules at most {RAY_MEMORY_SHARE * total / 2**30:.1f} "
                         f"GiB of this machine's {total / 2**30:.1f} GiB, so no trial could ever "
                         f"start; set `resources: {{memory_gb: ...}}` in {space.source} if the "
                         f"estimate is too high, or lower batch_size / max_len")



def warn_resources(space: SearchSpace, uri: str, out: TextIO) -> None:
    import ray

    res = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if res.get("CPU", 0) < space.cpu or res.get("GPU", 0) < space.gpu:
        print(f"warning: one trial needs cpu={space.cpu:g}, gpu={space.gpu:g} but the cluster has "
              f"CPU={res.get('CPU', 0):g}, GPU={res.get('GPU', 0):g} now; trials wait until an "
              f"autoscaler adds such a node", file=out)
    hosts = {n.get("NodeManagerAddress") for n in nodes}
    loopback = urllib.parse.urlparse(uri).hostname in LOOPBACK_HOSTS
    if len(hosts) > 1 and loopback:
        print(f"warning: the tracking URI {uri} is this machine's loopback address, but trials "
              f"also run on other machines ({len(hosts)} node IPs); give an address they can "
              f"reach, e.g. http://<head-ip>:5000", file=out)
    if len(nodes) > 1 and is_local_store(uri):
        print(f"warning: {len(nodes)} nodes but a local tracking store ({uri}); trials on other "
              f"machines cannot write to it unless it is on a shared filesystem. Pass "
              f"--tracking-uri http://<head>:5000 (cluster.yaml starts that server)", file=out)
