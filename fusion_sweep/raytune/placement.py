"""Where a sweep's trials may run: one platform per sweep, so that every pair shares it.

The same trial gives other floats on another CPU instruction set, GPU or torch/CUDA build
(docs/protocol.md, "Where results hold"); `stats` drops a pair whose two runs ran on
different platforms (`platform_mismatch`). Here, the launch side of that rule:

* `trial_resources(space, memory)`: the Ray request of one trial, with the space's pin
  (`resources.accelerator_type` -> Ray's `accelerator_type:NAME` resource;
  `resources.node_label` -> a placement-group label selector).
* `check_local_pin(space)`: a local Ray instance (no --address) is this machine: a pin that
  it cannot satisfy would leave every trial pending, so refuse it before Ray starts.
* `warn_mixed_platforms(space, out)`: at launch, probe each machine that has a node that
  could run a trial (one tiny Ray task pinned to one of its nodes) and warn when those
  nodes are not all one platform.

Ray is imported lazily here (this module is imported by the sweep layer at launch only).
"""
from __future__ import annotations

from typing import Any, Mapping, TextIO

from fusion_sweep.plan.space import SearchSpace
from fusion_sweep.errors import UserError

# Ray's convention for "a node with this accelerator" (what ray.remote(accelerator_type=...)
# requests): every such node offers 1 unit, so a tiny share never limits packing.
ACCELERATOR_SHARE = 0.001
# The platform fields a node has whatever the trial (thread count and the deterministic
# setting are the trial's own; CUDA/cuDNN come with the torch build on that node).
NODE_FIELDS: tuple[str, ...] = ("torch", "cpu_capability", "cpu_model", "gpu")
PROBE_TIMEOUT_S = 60.0


def accelerator_resource(name: str) -> str:
    return f"accelerator_type:{name}"


def trial_resources(space: SearchSpace, memory: int) -> Any:
    """What `tune.with_resources` gets for one trial: a resource dict, or a placement-group
    factory when the space pins node labels (a dict cannot carry a label selector)."""
    res: dict[str, float] = {"cpu": space.cpu, "gpu": space.gpu, "memory": memory}
    if space.accelerator_type:
        res[accelerator_resource(space.accelerator_type)] = ACCELERATOR_SHARE
    if not space.node_label:
        return res
    from ray import tune

    bundle = {{"cpu": "CPU", "gpu": "GPU"}.get(k, k): v for k, v in res.items() if v}
    return tune.PlacementGroupFactory([bundle], bundle_label_selector=[space.node_label])


def node_can_run(node: Mapping[str, Any], space: SearchSpace) -> bool:
    """Whether an alive Ray node (an entry of ray.nodes()) could ever run one trial."""
    res, labels = node.get("Resources") or {}, node.get("Labels") or {}
    if res.get("CPU", 0) < space.cpu or res.get("GPU", 0) < space.gpu:
        return False
    if space.accelerator_type and accelerator_resource(space.accelerator_type) not in res:
        return False
    return all(labels.get(k) == v for k, v in space.node_label.items())


def check_local_pin(space: SearchSpace, local_gpus: int) -> None:
    """Refuse a pin this machine cannot satisfy when Ray runs locally (no --address): an
    accelerator type without a local GPU, or node labels (a local instance sets none). With
    a local GPU, Ray itself matches its type."""
    if space.accelerator_type and local_gpus == 0:
        raise UserError(f"resources.accelerator_type: {space.accelerator_type!r} pins every "
                         f"trial to nodes with that GPU, but the local Ray instance is this "
                         f"machine, which has no GPU, so no trial could ever start; remove it "
                         f"from {space.source}, or pass --address for a cluster with such "
                         f"nodes")
    if space.node_label:
        raise UserError(f"resources.node_label: {space.node_label} pins every trial to nodes "
                         f"with those labels, but the local Ray instance is this machine and "
                         f"carries none, so no trial could ever start; remove it from "
                         f"{space.source}, or pass --address for a cluster whose node types set "
                         f"them (cluster.yaml: `labels`)")


def node_gpu(resources: Mapping[str, float]) -> str:
    """A node's GPU type from its Ray resources ('none' without an accelerator)."""
    types = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
    return ",".join(types) or "none"


def mixed_platform_warning(platforms: Mapping[str, Mapping[str, str]],
                           space: SearchSpace) -> str | None:
    """The launch warning when the nodes that can run a trial (node address -> NODE_FIELDS)
    are not one platform; None when they are."""
    groups: dict[tuple, list[str]] = {}
    for addr, p in sorted(platforms.items()):
        groups.setdefault(tuple(p.get(k, "?") for k in NODE_FIELDS), []).append(addr)
    if len(groups) < 2:
        return None
    listing = "; ".join(
        ", ".join(f"{k} {v}" for k, v in zip(NODE_FIELDS, key)) + f" ({', '.join(addrs)})"
        for key, addrs in groups.items())
    return (f"warning: the nodes that can run this sweep's trials are {len(groups)} platforms: "
            f"{listing}. The two trials of a pair may land on different platforms; `stats` "
            f"then drops that pair (platform_mismatch). Pin the sweep to one node type in "
            f"{space.source}: `resources: {{accelerator_type: ...}}` or "
            f"`resources: {{node_label: {{...}}}}` (docs/cluster.md)")


def warn_mixed_platforms(space: SearchSpace, out: TextIO) -> None:
    """Probe the alive nodes that could run a trial, one per machine, and print
    mixed_platform_warning."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive") and node_can_run(n, space)]
    if len(by_machine(nodes)) < 2 and len({node_gpu(n.get("Resources") or {})
                                          for n in nodes}) < 2:
        # nothing to compare: one machine (a local instance, or ray.cluster_utils' nodes on
        # this one) with one GPU type, or an autoscaled pool of one node type on it
        return
    platforms = _probe(nodes)
    if len(platforms) < len(nodes):
        print(f"warning: could not read the platform of {len(nodes) - len(platforms)} of "
              f"{len(nodes)} nodes within {PROBE_TIMEOUT_S:g} s; their trials are still "
              f"checked by `stats` (fp.platform)", file=out)
    msg = mixed_platform_warning(platforms, space)
    if msg:
        print(msg, file=out)


def by_machine(nodes: list[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Ray nodes grouped by machine (their node manager's IP address). The nodes of one
    machine share its CPU and the Python environment their raylets run in, so one probe
    reads the CPU-side fields of all of them; each node's GPU comes from its own resources."""
    machines: dict[str, list[Mapping[str, Any]]] = {}
    for n in nodes:
        machines.setdefault(n.get("NodeManagerAddress") or n["NodeID"], []).append(n)
    return machines


def node_name(node: Mapping[str, Any]) -> str:
    """A node as the warning names it: its address and the start of its node id."""
    return f"{node.get('NodeManagerAddress', '?')} ({node['NodeID'][:8]})"


def _probe(nodes: list[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """node_name -> NODE_FIELDS for every node: the CPU-side fields from a zero-CPU task
    pinned to one node of each machine (each probe starts a Ray worker that imports torch:
    seconds of CPU a machine), the GPU from each node's own resources."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def cpu_platform() -> dict[str, str]:
        from fusion_sweep.trial.platform import node_platform

        return node_platform()

    refs = {}
    for same in by_machine(nodes).values():
        strategy = NodeAffinitySchedulingStrategy(same[0]["NodeID"], soft=False)
        refs[cpu_platform.options(scheduling_strategy=strategy).remote()] = same
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
    out = {}
    for ref in ready:
        cpu = ray.get(ref)
        for n in refs[ref]:
            out[node_name(n)] = {**cpu, "gpu": node_gpu(n.get("Resources") or {})}
    return out
