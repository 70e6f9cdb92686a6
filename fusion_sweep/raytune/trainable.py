"""The Ray Tune function trainable: one grid point, trained on a Ray worker, tracked in its run.

Runs on the worker, not the driver: `run_trial` rebuilds the `TrialConfig`, checks the node
runs the driver's code, re-attaches to (or opens) the trial's MLflow run by its key, trains,
and logs every epoch and the result.
"""
from __future__ import annotations

import socket
from typing import Any, Sequence

from fusion_sweep import schema
from fusion_sweep.tracking import runs as tracking
from fusion_sweep.errors import UserError
from fusion_sweep.raytune.failures import error_reason, out_of_memory
from fusion_sweep.plan.grid import ident_of
from fusion_sweep.schema import changed_components, component_label
from fusion_sweep.trial.config import TrialConfig
from fusion_sweep.trial.heap import release_freed_memory
from fusion_sweep.trial.trainer import train_trial
from fusion_sweep.plan.trialcode import TrialCode, trial_code


def _node_tags() -> dict[str, str]:
    import ray

    tags = {schema.HOSTNAME: socket.gethostname()}
    if ray.is_initialized():
        tags[schema.NODE_ID] = ray.get_runtime_context().get_node_id()
        tags[schema.NODE_IP] = ray.util.get_node_ip_address()
    return tags


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (Linux reports KiB). A Ray actor
    runs several trials in turn (reuse_actors), so this is the peak up to and including this
    trial: an upper bound of the trial's own."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker_device(requested: str, gpu_ids: Sequence[Any]) -> str:
    """Where a trial runs: where Ray put it. CUDA only when Ray assigned the trial a GPU
    (`gpu_ids`, from `ray.get_gpu_ids()`), the CPU otherwise, whatever the node has: Ray 2.60
    no longer hides a node's GPUs from trials that requested none, so `torch.cuda.is_available()`
    says nothing about this trial. `requested`: the config's device (auto | cpu | cuda); a
    trial that asks for CUDA without a GPU share is refused, naming the fix."""
    if requested == "cpu":
        return "cpu"
    if gpu_ids:
        return "cuda"
    if requested == "cuda":
        raise UserError("device 'cuda' but Ray assigned this trial no GPU: give the space "
                        "`resources: {gpu: ...}` (a share per trial), or use device auto or cpu")
    return "cpu"


def node_code(config: TrialConfig, driver: dict | None) -> TrialCode:
    """The trial's code on this node; a node whose code (or local data copy) differs from the
    driver's for this trial fails it, naming the components, instead of logging numbers of
    other code under the driver's key."""
    code = trial_code(config)
    if driver is not None and dict(code.components) != dict(driver):
        which = ", ".join(component_label(n) for n in changed_components(driver, code.components))
        raise RuntimeError(f"this node runs other code than the driver for {config.describe()} "
                           f"({which}): install the same checkout (and data copy) on every node "
                           f"(cluster.yaml's file_mounts/setup_commands)")
    return code


def run_trial(config: dict, *, ctx, configs: dict, codes: dict | None = None) -> None:
    """The Ray Tune function trainable: one grid point, tracked in its own MLflow run.

    Holds no state between trials (Ray reuses the actor); the trainer seeds every stream
    from the trial's seed. `configs` maps the identity (schema.IDENTITY_FIELDS) → TrialConfig
    dict, `codes` the identity → the driver's component map of the trial (its key's code).
    """
    import ray
    from ray import tune

    ident = ident_of(config)
    tc = TrialConfig.from_dict(configs[ident])
    tc = tc.replace(device=worker_device(tc.device, ray.get_gpu_ids()))  # not in the trial key
    code = node_code(tc, (codes or {}).get(ident))
    key = tc.trial_key(code.fingerprint)
    tags = {**_node_tags(), schema.NUM_THREADS: str(tc.num_threads),
            schema.RAY_TRIAL_ID: tune.get_context().get_trial_id() or "",
            schema.CODE_FINGERPRINT: code.fingerprint, schema.CODE_COMPONENTS: code.tag()}
    run = tracking.TrialRun.open(ctx, tc, key, tags=tags)
    if run.finished:  # finished after Tune's last state snapshot: report, don't re-train
        tune.report({**run.final_metrics(), "trained": 0, "mlflow_run_id": run.run_id})
        return

    def on_epoch(rec) -> None:
        run.log_epoch(rec)
        tune.report({"epoch": rec.epoch, "train_loss": rec.train_loss, "val_acc": rec.val_acc,
                     "val_loss": rec.val_loss})

    try:
        result = train_trial(tc, callback=on_epoch)
        run.log_result(result, {schema.PEAK_RSS: peak_rss_mb()})
    except Exception as e:
        run.fail(e, error_reason(e) if out_of_memory(e) else None)  # OOM: which memory
        raise
    except BaseException:  # KeyboardInterrupt, SystemExit: the sweep stopped, not the trial
        run.interrupt()
        raise
    finally:
        release_freed_memory()  # before the actor's next trial (a new thread, a new arena)
    tune.report({**result.metrics(), "epoch": result.epochs_run, "val_acc": result.curve[-1].val_acc,
                 "trained": 1, "mlflow_run_id": run.run_id})
