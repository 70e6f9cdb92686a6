"""`launch --dry-run`: the grid, and what a launch would do with each trial of an existing sweep."""
from __future__ import annotations

from typing import TextIO

from fusion_sweep.tracking import runs as tracking
from fusion_sweep.plan.grid import GridPoint, format_grid
from fusion_sweep.launch.memory import check_gpu_memory, gpu_device_memory
from fusion_sweep.plan.relaunch import CodePlan, code_plan
from fusion_sweep.schema import FINISHED, resolve_tracking_uri, sqlite_path
from fusion_sweep.plan.space import SearchSpace
from fusion_sweep.tracking.store import check_tracking_uri


def dry_run_report(space: SearchSpace, points: list[GridPoint], name: str,
                   tracking_uri: str | None, experiment: str | None, out: TextIO) -> None:
    """`launch --dry-run`: the grid, and for an existing sweep what a launch would do with
    each trial (train, skip: finished, or retry: its run is FAILED/KILLED/RUNNING). A space
    that requests a GPU share shows each trial's GPU memory estimate, after refusing (as the
    launch does) a trial that does not fit its share."""
    column = None
    if space.gpu > 0:
        device = gpu_device_memory()
        need = check_gpu_memory(space, points, device)
        column = ("GPU GiB", [f"{n / 2**30:.1f}" for n in need])
    print(format_grid(space, points, name, column), file=out)
    if column is not None:
        print(f"\nGPU GiB: each trial's estimated peak GPU memory (trial/memory.py); each fits "
              f"its share gpu: {min(space.gpu, 1.0):g} of {device[1]}", file=out)
    planned = _planned_actions(space, points, name, tracking_uri, experiment)
    if planned is None:
        print(f"\n(dry run: nothing started; {len(points)} trials would run)", file=out)
        return
    actions, plan = planned
    print(f"\nsweep {name!r} exists; a launch now would:", file=out)
    counts: dict[str, int] = {}
    for p, (action, detail) in zip(points, actions):
        c = p.config
        counts[action] = counts.get(action, 0) + 1
        print(f"  {action:<6} {c.describe()}  {detail}", file=out)
    if plan.retrain:
        print(f"\ncode changed since these trials finished: {plan.summary()}; a launch retrains "
              f"them only with --allow-code-change (their old runs stay in MLflow, marked "
              f"superseded)", file=out)
    print("\n(dry run: nothing started; " + ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
          + ")", file=out)


def _planned_actions(space: SearchSpace, points: list[GridPoint], name: str,
                     tracking_uri: str | None, experiment: str | None
                     ) -> tuple[list[tuple[str, str]], CodePlan] | None:
    """(Per grid point (action, detail), the relaunch's code plan), or None when the sweep
    has no MLflow record yet."""
    uri = resolve_tracking_uri(tracking_uri)
    db = sqlite_path(uri)
    if db is not None and not db.is_file():
        return None
    check_tracking_uri(uri)
    tracker = tracking.SweepTracker(uri, experiment or space.experiment)
    if tracker.client.get_experiment_by_name(tracker.experiment) is None \
            or tracker.find_parent(name) is None:
        return None
    plan = code_plan(tracker, name, points)
    out = []
    for p in points:
        status, run_id = tracker.trial_status(name, p.key)
        retrain = plan.reason_of(p)
        if status == FINISHED:
            out.append(("skip", f"finished, run {run_id}"))
        elif retrain is not None:
            out.append(("retrain", f"{retrain.reason} (finished run {retrain.old_run} ran "
                                   f"other code or data)"))
        elif status:
            out.append(("retry", f"{status} run {run_id} (trained again into the same run)"))
        else:
            out.append(("train", "no run yet"))
    return out, plan
