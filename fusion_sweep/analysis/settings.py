"""What changes the numbers of a report: :class:`Settings`, and the one home of every
analysis default (alpha, baseline, metric, bootstrap count, rng seed, margin, pairing mode,
direction).

The `stats` command line (fusion_sweep.analysis.cli), the dataclass defaults below, the
statistics' keyword defaults and the launcher read these constants; none of them repeats a
literal. Light on purpose (stdlib + the analysis schema): the command line imports it before
any statistics stack.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from fusion_sweep.analysis.metrics import AUTO, DIRECTION_VALUES, check_direction_value, resolve_direction
from fusion_sweep.analysis.schema import AnalysisError
from fusion_sweep.analysis.variants import Axis, parse_baseline
# The metric and baseline of a sweep that names neither: one home, shared with the launch's space.
from fusion_sweep.schema import DEFAULT_BASELINE, DEFAULT_METRIC

DEFAULT_ALPHA = 0.05  # family-wise alpha of every Holm family and test
DEFAULT_N_BOOT = 10_000  # bootstrap resamples, also the Monte Carlo sign-flip count
MIN_N_BOOT = 100  # fewer resamples make the BCa interval meaningless
DEFAULT_RNG_SEED = 0  # seed of every resampling generator
DEFAULT_MARGIN: float | None = None  # no TOST margin: no equivalence test unless one is given
PAIR_MODES = ("baseline", "all")
DEFAULT_PAIRS = PAIR_MODES[0]
DIRECTION_FLAGS = (AUTO, *DIRECTION_VALUES)  # --direction
DEFAULT_DIRECTION = AUTO


@dataclass(frozen=True)
class Settings:
    """Everything that changes the numbers. Validated by :meth:`validate`."""

    metrics: tuple[str, ...] = (DEFAULT_METRIC,)
    # A fusion name (compare fusions within each dataset/encoder/pe) or a full variant label
    # "encoder/pe/fusion" (compare every variant of a dataset with it): fusion_sweep.analysis.variants.
    baseline: str = DEFAULT_BASELINE
    pairs: str = DEFAULT_PAIRS
    alpha: float = DEFAULT_ALPHA
    # One TOST margin for every dataset, or one per dataset (absent dataset: no TOST).
    margin: float | Mapping[str, float] | None = DEFAULT_MARGIN
    # The metric the margin is in units of (a sweep's margin belongs to the sweep's metric);
    # None: every --metric (a margin given on the command line).
    margin_metric: str | None = None
    n_boot: int = DEFAULT_N_BOOT
    rng_seed: int = DEFAULT_RNG_SEED
    datasets: tuple[str, ...] = ()
    pes: tuple[str, ...] = ()
    encoders: tuple[str, ...] = ()
    direction: str = DEFAULT_DIRECTION  # auto | higher | lower (the flag overrides `directions`)
    directions: Mapping[str, str] | None = None  # metric -> higher|lower (the sweep's param)
    num_classes: Mapping[str, int] | None = None  # dataset -> K (--num-classes)
    claims: str | None = None  # a claim set of fusion_sweep.analysis.claims.CLAIMS (--claims)

    def validate(self) -> "Settings":
        """Raise AnalysisError on any out-of-range value; return self. The claim set's name
        is checked by its registry (fusion_sweep.analysis.report.validated)."""
        if not (isinstance(self.alpha, (int, float)) and 0 < self.alpha < 1):
            raise AnalysisError(f"--alpha must be in the open interval (0, 1), got {self.alpha}")
        margins = self.margin.items() if isinstance(self.margin, Mapping) else [(None, self.margin)]
        for dataset, m in margins:
            if m is None and dataset is None:
                continue
            if not (isinstance(m, (int, float)) and not isinstance(m, bool)
                    and math.isfinite(m) and m > 0):
                where = f" for dataset {dataset!r}" if dataset is not None else ""
                raise AnalysisError(
                    f"--equivalence-margin must be a positive number in metric units "
                    f"(a negative or zero margin cannot define equivalence){where}, got {m}")
        for metric, value in (self.directions or {}).items():
            check_direction_value(metric, value)
        for dataset, k in (self.num_classes or {}).items():
            if not isinstance(k, int) or isinstance(k, bool) or k < 2:
                raise AnalysisError(f"--num-classes {dataset}=K needs an integer K >= 2, got {k!r}")
        if self.pairs not in PAIR_MODES:
            raise AnalysisError(f"--pairs must be one of {', '.join(PAIR_MODES)}, got {self.pairs!r}")
        if self.direction not in DIRECTION_FLAGS:
            raise AnalysisError(
                f"--direction must be one of {', '.join(DIRECTION_FLAGS)}, got {self.direction!r}")
        if int(self.rng_seed) < 0:
            raise AnalysisError(f"--rng-seed must be a non-negative integer, got {self.rng_seed}")
        if int(self.n_boot) < MIN_N_BOOT:
            raise AnalysisError(
                f"--bootstrap must be at least {MIN_N_BOOT} resamples, got {self.n_boot}")
        if not self.metrics:
            raise AnalysisError("at least one --metric is required")
        parse_baseline(self.baseline)
        return self

    @property
    def axis(self) -> Axis:
        """The comparison axis the baseline defines (fusion_sweep.analysis.variants)."""
        return parse_baseline(self.baseline)

    def higher_is_better(self, metric: str) -> bool:
        """Direction of improvement: --direction, the sweep's `directions`, the name rule;
        AnalysisError when none of them knows the metric."""
        return resolve_direction(metric, self.direction, self.directions) == "higher"

    def margin_for(self, dataset: str, metric: str | None = None) -> float | None:
        """The TOST margin of `dataset` for `metric` (None: no equivalence test there). A
        margin is in one metric's units, so it never carries over to another metric."""
        if metric is not None and self.margin_metric is not None and metric != self.margin_metric:
            return None
        if isinstance(self.margin, Mapping):
            m = self.margin.get(dataset)
            return float(m) if m is not None else None
        return None if self.margin is None else float(self.margin)

    def margin_label(self) -> str:
        """'none', '0.01', or 'arxiv: 0.005, imdb: 0.01 (others: none)', + ' on METRIC'."""
        if self.margin is None:
            return "none"
        on = f" on {self.margin_metric}" if self.margin_metric else ""
        if isinstance(self.margin, Mapping):
            per = ", ".join(f"{d}: {m:g}" for d, m in sorted(self.margin.items()))
            return f"{per} (others: none){on}" if per else "none"
        return f"{self.margin:g}{on}"
