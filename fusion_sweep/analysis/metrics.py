"""What a metric's name says about it: which way is better, and whether it is a proportion.

The direction of improvement decides "better" vs "worse", so it is never guessed: it comes
from (in order) the `--direction` flag, the sweep's `directions` param, the name rule
below, and otherwise the analysis refuses the metric with an :class:`AnalysisError`.
Before this rule any unknown name counted as higher-is-better, so a rising error rate was
reported as "better".
"""
from __future__ import annotations

from typing import Mapping

from fusion_sweep.schema import DIRECTIONS, METRIC_DIRECTIONS

from fusion_sweep.analysis.schema import (
    ACCURACY_PARTS, HIGHER_IS_BETTER, HIGHER_IS_BETTER_PARTS, LOWER_IS_BETTER,
    LOWER_IS_BETTER_PARTS, PROPORTION_PARTS, AnalysisError,
)

DIRECTION_VALUES = DIRECTIONS  # higher | lower: the sweep's `directions` values too
AUTO = "auto"  # --direction auto: the sweep's `directions`, then the name rule


def name_direction(metric: str) -> str | None:
    """'higher' / 'lower' from the metric's name, or None when the name does not say.

    Exact names first (params, train_seconds, tokens_per_second), then substrings: error,
    err, loss, perplexity, latency -> lower; accuracy, acc, f1, auc -> higher. A name
    matching both lists (e.g. 'acc_loss') is ambiguous: None.
    """
    if metric in LOWER_IS_BETTER:
        return "lower"
    if metric in HIGHER_IS_BETTER:
        return "higher"
    name = metric.lower()
    lower = any(part in name for part in LOWER_IS_BETTER_PARTS)
    higher = any(part in name for part in HIGHER_IS_BETTER_PARTS)
    if lower != higher:
        return "lower" if lower else "higher"
    return None


def resolve_direction(metric: str, flag: str = AUTO,
                      directions: Mapping[str, str] | None = None) -> str:
    """'higher' or 'lower' for `metric`: flag, then the sweep's mapping, then the name rule.

    The flag is for metrics of unknown direction (or to override a sweep's own `directions`):
    it is refused where it contradicts a metric's known direction, by the table
    (schema.METRIC_DIRECTIONS) or by its name (a loss, an error rate: name_direction), since
    it would silently turn 'better' into 'worse'."""
    given = (directions or {}).get(metric)
    known = METRIC_DIRECTIONS.get(metric) or name_direction(metric)
    if flag in DIRECTION_VALUES:
        if known is not None and known != flag:
            how = ("its name says so" if metric not in METRIC_DIRECTIONS else "the metric "
                   "table says so")
            raise AnalysisError(f"--direction {flag} contradicts the known direction of metric "
                                f"{metric!r} ({known} is better: {how}); drop --direction: it "
                                "is only for metrics whose direction is not known")
        return flag
    if given is not None:
        return check_direction_value(metric, given)
    by_name = name_direction(metric)
    if by_name is None:
        raise AnalysisError(f"direction of metric {metric!r} is unknown; pass --direction higher "
                            "or --direction lower")
    return by_name


def check_direction_value(metric: str, value: object) -> str:
    """A `directions` entry must be 'higher' or 'lower'."""
    if value not in DIRECTION_VALUES:
        raise AnalysisError(f"direction of metric {metric!r} must be 'higher' or 'lower', "
                            f"got {value!r} (sweep param `directions`)")
    return str(value)


def is_accuracy_like(metric: str) -> bool:
    """Accuracy-like ('acc' in the name): its chance level is 1 / num_classes."""
    return any(part in metric.lower() for part in ACCURACY_PARTS)


def is_proportion(metric: str) -> bool:
    """Accuracy / F1 / AUC: values must lie in [0, 1] (percentages are refused)."""
    return any(part in metric.lower() for part in PROPORTION_PARTS)
