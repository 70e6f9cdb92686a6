"""The analysis driver: tidy table + settings -> :class:`Report`, and its JSON/text forms.

`analyze` is the only function that sees the whole report: it applies Holm across every
comparison, decides verdicts, and collects design warnings. Everything it calls is a pure
function over arrays or the tidy table.
"""
from __future__ import annotations

import json
import math
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from analysis import stats
from analysis.load import select
from analysis.pairing import Paired, cells_for, pair_trials
from analysis.regimes import Regime, interaction_tests, regimes_for
from analysis.schema import (
    COMPARISON_KEYS, LOWER_IS_BETTER, TOP_LEVEL_KEYS, AnalysisError,
)

PAIR_MODES = ("baseline", "all")
DIRECTIONS = ("auto", "higher", "lower")


@dataclass(frozen=True)
class Settings:
    """Everything that changes the numbers. Validated by :meth:`validate`."""

    metrics: tuple[str, ...] = ("test_acc",)
    baseline: str = "add"
    pairs: str = "baseline"
    alpha: float = 0.05
    margin: float | None = None
    n_boot: int = 10_000
    rng_seed: int = 0
    datasets: tuple[str, ...] = ()
    pes: tuple[str, ...] = ()
    direction: str = "auto"

    def validate(self) -> "Settings":
        """Raise AnalysisError on any out-of-range value; return self."""
        if not (isinstance(self.alpha, (int, float)) and 0 < self.alpha < 1):
            raise AnalysisError(f"--alpha must be in the open interval (0, 1), got {self.alpha}")
        if self.margin is not None and not (math.isfinite(self.margin) and self.margin > 0):
            raise AnalysisError(
                "--equivalence-margin must be a positive number in metric units "
                f"(a negative or zero margin cannot define equivalence), got {self.margin}")
        if self.pairs not in PAIR_MODES:
            raise AnalysisError(f"--pairs must be one of {', '.join(PAIR_MODES)}, got {self.pairs!r}")
        if self.direction not in DIRECTIONS:
            raise AnalysisError(
                f"--direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}")
        if int(self.rng_seed) < 0:
            raise AnalysisError(f"--rng-seed must be a non-negative integer, got {self.rng_seed}")
        if int(self.n_boot) < 100:
            raise AnalysisError(f"--bootstrap must be at least 100 resamples, got {self.n_boot}")
        if not self.metrics:
            raise AnalysisError("at least one --metric is required")
        return self

    def higher_is_better(self, metric: str) -> bool:
        """Direction of improvement for the verdict (auto: lower for latency/params/...)."""
        if self.direction != "auto":
            return self.direction == "higher"
        return metric not in LOWER_IS_BETTER and not metric.endswith("loss")


@dataclass
class Report:
    """The whole analysis. comparisons/dropped/warnings are JSON-ready dicts."""

    source: dict
    settings: Settings
    regimes: list[Regime]
    comparisons: list[dict]
    dropped: list[dict]
    warnings: list[dict]
    interaction: dict
    table: pd.DataFrame = field(repr=False)  # the filtered tidy table

    def to_dict(self) -> dict:
        """The `--format json` object: exactly TOP_LEVEL_KEYS, NaN/inf -> null."""
        out = {
            "source": self.source,
            "settings": {**asdict(self.settings), "metrics": list(self.settings.metrics),
                         "datasets": list(self.settings.datasets), "pes": list(self.settings.pes),
                         "confidence_level": 1 - self.settings.alpha},
            "regimes": [asdict(r) for r in self.regimes],
            "warnings": self.warnings,
            "comparisons": [{k: c[k] for k in COMPARISON_KEYS} for c in self.comparisons],
            "dropped": self.dropped,
            "interaction": self.interaction,
        }
        assert tuple(out) == TOP_LEVEL_KEYS
        return _json_clean(out)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


def _json_clean(obj: object) -> object:
    """numpy scalars -> python, non-finite floats -> None (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_clean(v) for v in obj]
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj


def comparison_rng(seed: int, key: tuple[str, ...]) -> np.random.Generator:
    """A generator per comparison, from (--rng-seed, comparison key).

    Keyed by a stable hash, not by position, so filtering datasets or adding fusions does
    not change any other comparison's bootstrap/Monte-Carlo numbers.
    """
    h = zlib.crc32("|".join(key).encode())
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(h,)))


def analyze(
    df: pd.DataFrame, settings: Settings, source: dict | None = None,
    extra_warnings: list[dict] | None = None,
) -> Report:
    """Run every comparison in the tidy table `df` under `settings`.

    extra_warnings (e.g. from the MLflow loader) are listed after the design warnings.
    """
    settings.validate()
    df = select(df, settings.metrics, settings.baseline, settings.datasets, settings.pes)
    regimes, regime_warns = regimes_for(df)
    pairing = pair_trials(df, list(settings.metrics), settings.baseline, settings.pairs)
    by_dataset = {r.dataset: r for r in regimes}
    # Report order: metric as given, regime short -> long, pe, then pairing order.
    order = sorted(range(len(pairing.pairs)), key=lambda i: (
        settings.metrics.index(pairing.pairs[i].metric),
        by_dataset[pairing.pairs[i].dataset].rank, pairing.pairs[i].pe, i))
    comps = [_compare(pairing.pairs[i], settings, by_dataset[pairing.pairs[i].dataset])
             for i in order]
    _holm_and_verdicts(comps, settings)
    tests, inter_warns = interaction_tests(comps, regimes, settings.alpha)
    warnings = (_design_warnings(comps, settings) + pairing.warnings + regime_warns
                + list(extra_warnings or []) + _degenerate_warnings(comps)
                + _dropped_warning(pairing.dropped) + inter_warns)
    interaction = {
        "method": "Welch one-way ANOVA of per-seed deltas across datasets "
                  "(statsmodels anova_oneway, use_var='unequal'); difference in mean deltas "
                  "longest minus shortest regime with a Welch t-interval; Holm across tests",
        "tests": tests,
    }
    return Report(source or {"kind": "table"}, settings, regimes, comps, pairing.dropped,
                  warnings, interaction, df)


def _compare(p: Paired, s: Settings, regime: Regime) -> dict:
    """Statistics of one comparison, with its identifying fields."""
    key = (p.dataset, p.pe, p.metric, p.fusion, p.baseline)
    res = stats.compare_paired(p.x, p.y, alpha=s.alpha, margin=s.margin,
                               n_resamples=int(s.n_boot), rng=comparison_rng(s.rng_seed, key))
    return {
        "dataset": p.dataset, "pe": p.pe, "metric": p.metric, "fusion": p.fusion,
        "baseline": p.baseline, **res, "seeds": [int(v) for v in p.seeds],
        "regime": regime.label, "median_tokens": regime.median_tokens,
        "higher_is_better": s.higher_is_better(p.metric), "equivalence_margin": s.margin,
        "p_holm": stats.NAN, "verdict": "inconclusive",
    }


def _holm_and_verdicts(comps: list[dict], s: Settings) -> None:
    """Holm over every comparison's paired-t p in the report, then each verdict."""
    adjusted = stats.holm(np.array([c["t_p"] for c in comps], dtype=float))
    for c, p in zip(comps, adjusted):
        c["p_holm"] = float(p)
        c["verdict"] = stats.verdict(c["mean_delta"], c["t_ci_low"], c["t_ci_high"], c["p_holm"],
                                     c["tost_p"], s.alpha, c["higher_is_better"])
        if c["verdict"] in ("better", "worse") and np.isfinite(c["tost_p"]) and c["tost_p"] < s.alpha:
            c["notes"] = c["notes"] + [f"also equivalent within ±{s.margin} (TOST p = "
                                       f"{c['tost_p']:.3g}): the difference is real but small"]


def _design_warnings(comps: list[dict], s: Settings) -> list[dict]:
    """What the design cannot do, before looking at results: floors on p, small n."""
    out = []
    for n in sorted({c["n"] for c in comps if c["n"] >= 1}):
        group = [c for c in comps if c["n"] == n]
        floors = {"exact two-sided Wilcoxon": max(c["min_p_wilcoxon"] for c in group),
                  "sign-flip permutation": max(c["min_p_signflip"] for c in group)}
        blocked = {k: v for k, v in floors.items() if np.isfinite(v) and v >= s.alpha}
        if blocked:
            what = " and ".join(f"the {k} test cannot go below p = {v:.4g}" for k, v in blocked.items())
            out.append({"code": "cannot_reach_alpha",
                        "message": f"at n = {n} ({_count(len(group), 'comparison')}) {what}, "
                                   f"which is not below alpha = {s.alpha}: only the t-test can "
                                   "reject; add seeds for a non-parametric confirmation"})
    small = [c for c in comps if 0 < c["n"] < stats.BOOT_DESCRIPTIVE_BELOW]
    if small:
        ns = sorted({c["n"] for c in small})
        out.append({"code": "bootstrap_descriptive",
                    "message": f"{_count(len(small), 'comparison')} with fewer than "
                               f"{stats.BOOT_DESCRIPTIVE_BELOW} pairs (n = {ns}): BCa bootstrap "
                               "CIs undercover at this n and are descriptive only; the "
                               "t-interval is the primary interval"})
    m = int(np.isfinite([c["t_p"] for c in comps]).sum())
    if m > 1:
        out.append({"code": "holm_family",
                    "message": f"Holm adjustment over m = {m} comparisons: the smallest "
                               f"paired-t p must be below alpha/m = {s.alpha / m:.3g} to count"})
    return out


def _degenerate_warnings(comps: list[dict]) -> list[dict]:
    return [{"code": "degenerate_comparison",
             "message": f"{c['dataset']}/{c['pe']}/{c['metric']} {c['fusion']} vs "
                        f"{c['baseline']}: {note}"}
            for c in comps for note in c["notes"] if not note.startswith("also equivalent")]


def _dropped_warning(dropped: list[dict]) -> list[dict]:
    if not dropped:
        return []
    counts = pd.Series([d["reason"] for d in dropped]).value_counts()
    summary = ", ".join(f"{k}: {v}" for k, v in counts.items())
    return [{"code": "dropped_pairs",
             "message": f"{_count(len(dropped), 'pair')} dropped ({summary}); see the dropped list"}]


def _count(k: int, noun: str) -> str:
    return f"{k} {noun}{'' if k == 1 else 's'}"


def usable_values(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per usable cell: dataset, pe, fusion, seed, value (for the paper tables)."""
    rows = [(*k, c.value) for k, c in cells_for(df, metric).items() if c.ok]
    return pd.DataFrame(rows, columns=["dataset", "pe", "fusion", "seed", "value"])
