"""`ProgressCallback`: a sweep's `progress.SweepProgress` as a `ray.tune.Callback`, the supported
way to follow a Tuner's trials (`RunConfig(callbacks=[...])`).

Imported by the launching process only, once Ray is needed (it imports Ray at import time);
the display itself (`fusion_sweep.raytune.progress`) needs no Ray.
"""
from __future__ import annotations

from typing import Any

from ray.tune import Callback

from fusion_sweep.raytune.progress import SweepProgress


class ProgressCallback(Callback):
    """Forwards Tune's trial events to a `SweepProgress`."""

    def __init__(self, progress: SweepProgress) -> None:
        self.progress = progress

    def setup(self, stop: Any = None, num_samples: Any = None,
              total_num_samples: int | None = None, **info: Any) -> None:
        self.progress.setup(total_num_samples)

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.on_trial_start(trial)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        self.progress.on_trial_result(trial, result)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.on_trial_complete(trial)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.on_trial_recover(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.progress.on_trial_error(trial)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.progress.on_step_end()

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.progress.on_experiment_end()
