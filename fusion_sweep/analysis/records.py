"""The analysis's records: frozen dataclasses built once per stage, the JSON written from
them in one place.

Stages: :class:`fusion_sweep.analysis.pairing.Paired` (the pairs) -> report.Measured (one
comparison's own statistics, as the typed values that computed them: stats.PairedStats,
report.WinRateStats, report.LearnRates) -> report.Adjusted (its Holm p in each of the report's
families) -> report.Judged (the verdicts, flags and notes) -> :class:`Comparison`, built once
from those typed values (:meth:`Comparison.build`) and never changed -> the
:class:`fusion_sweep.analysis.report.Report`. Each stage is a frozen dataclass; no dict passes
between them. Renderers read attributes, never keys.

A new statistic is a field here (its place among the fields is its JSON key order; no key
list is kept beside the record), its computation in the statistics (a field of the part that
computes it, or of report.Judged), and the renderers that show it. A field the statistics do
not fill, or a value they fill that is no field, fails at build time: nothing vanishes from
the JSON silently.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from fusion_sweep.analysis.caveats import Caveat, full
from fusion_sweep.analysis.schema import (
    ARM_KEYS, CHANCE_TEST_KEYS, INTERACTION_TEST_KEYS,
)


@dataclass(frozen=True)
class Comparison:
    """One comparison, arm vs reference on one dataset and metric: its fields, in this order,
    are the keys of its `comparisons` entry in the JSON (documented here, field by field),
    except `group` (the variant fields the baseline leaves open: not in the JSON)."""

    # The keys every entry of `comparisons` carries (issue 4), through `verdict`.
    dataset: str
    pe: str
    metric: str
    fusion: str
    baseline: str
    n: int
    mean_delta: float
    sd_delta: float
    t_ci_low: float
    t_ci_high: float
    t_p: float
    wilcoxon_p: float
    wilcoxon_method: str
    signflip_p: float
    boot_ci_low: float
    boot_ci_high: float
    dz: float
    n_positive: int
    p_holm: float
    tost_p: float
    power: float
    seeds_for_80_power: int | None
    min_p_t: float
    min_p_wilcoxon: float
    verdict: str
    # Documented extras: context needed to audit a row without re-running the analysis.
    regime: str
    median_tokens: float
    higher_is_better: bool
    seeds: tuple[int, ...]
    deltas: tuple[float, ...]
    n_negative: int
    n_zero: int
    t_df: float
    signflip_method: str
    min_p_signflip: float
    boot_descriptive: bool
    boot_method: str
    equivalence_margin: float | None
    notes: tuple[str, ...]
    # Holm over the report's TOST family; the `equivalent` verdict uses this one.
    tost_p_holm: float
    # Post hoc power at the observed d_z, at the alpha the verdict actually uses (Holm's
    # first step, alpha/m); `power` / `seeds_for_80_power` above are at unadjusted alpha.
    holm_first_step_alpha: float
    power_at_holm_alpha: float
    seeds_for_80_power_at_holm_alpha: int | None
    # Does each arm beat chance (1/num_classes)? LEARNED_STATES; see `chance` below.
    chance_level: float
    learned: str
    baseline_learned: str
    # The variants compared: `pe`/`fusion`/`encoder` are the ARM's fields; `variant` is the
    # arm's label and `baseline_variant` the reference's ("encoder/pe/fusion"); `baseline`
    # above is the reference in the form --baseline was given (fusion name or full label).
    encoder: str
    variant: str
    baseline_variant: str
    # Cost metrics only (COST_METRICS; null otherwise): geometric-mean ratio arm/reference
    # with the exponentiated t-interval of the mean log ratio, its paired-t p, the Holm p
    # over the report's ratio tests, and the verdict on the ratio.
    ratio: float | None
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    ratio_p: float | None
    ratio_p_holm: float | None
    ratio_verdict: str | None
    # What qualifies the verdict, shown beside it (empty: nothing): "descriptive" (an
    # adaptive sweep's fixed-n verdict), "rests on normality (n < 5)", why a better/equivalent
    # was withheld (an arm's chance level unknown, or an arm constant), and the verdict with
    # the pairs dropped for fingerprint/code reasons put back when that verdict differs.
    verdict_flags: tuple[Caveat, ...]
    # The Holm-consistent interval: the t-interval at level 1 - alpha * t_p / p_holm (a level
    # of its own per comparison), which excludes 0 exactly when p_holm < alpha
    # (stats.holm_consistent_interval); the figures draw it. The interval every text shows is
    # t_ci_* above, at the one fixed level 1 - alpha, beside p_holm.
    holm_ci_low: float
    holm_ci_high: float
    holm_ci_level: float
    # What `verdict` is about and what it assumes (fusion_sweep.analysis.estimands): "mean Δ".
    estimand: str
    assumes: str
    # The win-rate estimand P(Δ > 0) vs P(Δ < 0): exact two-sided sign test, ties excluded
    # and counted; win_rate = wins / (wins + losses) with its Clopper-Pearson interval at
    # 1 - alpha; sign_p_holm: Holm over the same family as p_holm; win_verdict: better /
    # worse / inconclusive / not learned (never equivalent), under the same learned? guards.
    win_estimand: str
    win_assumes: str
    wins: int
    losses: int
    ties: int
    win_rate: float
    win_ci_low: float
    win_ci_high: float
    sign_p: float
    sign_p_holm: float
    win_verdict: str
    # Each arm's learn rate: seeds that beat chance (exact per-seed test) of seeds tested, null
    # without the exact test; *_learn_basis: why its learned? state cannot exclude a
    # majority-class predictor ("" when the exact test against the recorded majority rate
    # decided it; else 1/K or the seed-level t-test): such an arm never enters `equivalent`.
    arm_learn_count: int | None
    arm_learn_n: int | None
    arm_learn_basis: str
    baseline_learn_count: int | None
    baseline_learn_n: int | None
    baseline_learn_basis: str
    # Seeds lost to a non-finite metric on either arm (a diverged run): never silently out of
    # the win rate: the sign test counts each against the observed majority (its worst case).
    lost_seeds: tuple[int, ...]
    group: tuple[str, ...] = field(default=(), metadata={"json": False})
    # The added fixed-n estimands' results (fusion_sweep.analysis.fixed, registry order): their
    # fields follow the record's own in the JSON (Estimate.json_fields).
    estimates: tuple["Estimate", ...] = field(default=(), metadata={"json": False})

    @classmethod
    def build(cls, *parts: Any, **values: Any) -> "Comparison":
        """From the stages' typed values: each part (a dataclass whose fields are fields of
        the record: the paired statistics, the win rate, the learn rates, the verdicts) fills
        its fields, a later part's value replacing an earlier one's (the verdicts' notes
        extend the statistics'); `values` are the fields no part holds. Every field filled,
        none that is no field: else an AssertionError (a bug in the statistics)."""
        given = [(f.name, getattr(part, f.name)) for part in parts for f in fields(part)]
        given += list(values.items())
        names = [f.name for f in fields(cls)]
        missing, extra = set(names) - {k for k, _ in given}, {k for k, _ in given} - set(names)
        if missing or extra:  # a bug in the statistics, never a user's input
            raise AssertionError(f"comparison record: missing {sorted(missing)}, "
                                 f"not a field {sorted(extra)}")
        return cls(**{k: _frozen(v) for k, v in given})

    def to_json(self) -> dict[str, Any]:
        """The `comparisons` entry: exactly json_keys(), in that order, then each added
        estimand's fields."""
        own = [(k, getattr(self, k)) for k in self.json_keys()]
        return {k: _plain(v) for k, v in own + [kv for e in self.estimates
                                                 for kv in e.json_fields()]}

    @classmethod
    def json_keys(cls) -> tuple[str, ...]:
        """The keys of a `comparisons` entry: the record's fields in their order, less those
        marked out of the JSON."""
        return tuple(f.name for f in fields(cls) if f.metadata.get("json", True))

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(metric, dataset, variant, baseline_variant): what identifies a comparison."""
        return (self.metric, self.dataset, self.variant, self.baseline_variant)


@dataclass(frozen=True)
class Estimate:
    """An added fixed-n estimand's result on one comparison (fusion_sweep.analysis.fixed):
    what its entry measured (a frozen dataclass: its fields are JSON fields), its p Holm-
    adjusted over the report's family, its verdict (through the one guard rule) and its
    words in a grid cell."""

    estimand: str
    key: str
    measured: Any
    p_holm: float
    verdict: str
    cell: str

    def json_fields(self) -> list[tuple[str, Any]]:
        """Its measured fields in their order, then `<key>_p_holm` and `<key>_verdict`."""
        own = [(f.name, getattr(self.measured, f.name)) for f in fields(self.measured)]
        return own + [(f"{self.key}_p_holm", self.p_holm), (f"{self.key}_verdict", self.verdict)]


@dataclass(frozen=True)
class InteractionTest:
    """One across-regime test of a variant pair (schema.INTERACTION_TEST_KEYS, in that
    order): the Welch ANOVA of the per-seed deltas, the long-minus-short contrast, the Holm p
    and the verdict decided beside it (fusion_sweep.analysis.regimes)."""

    pe: str
    metric: str
    fusion: str
    baseline: str
    datasets: tuple[str, ...]
    n_per_dataset: tuple[int, ...]
    welch_f: float
    df_num: float
    df_denom: float
    welch_p: float
    p_holm: float
    long_dataset: str
    short_dataset: str
    diff_in_deltas: float
    diff_ci_low: float
    diff_ci_high: float
    diff_p: float
    notes: tuple[str, ...]
    ordered_by: str
    encoder: str
    variant: str
    baseline_variant: str
    excluded_not_learned: tuple[str, ...]
    verdict: str

    @classmethod
    def build(cls, values: Mapping[str, Any]) -> "InteractionTest":
        names = [f.name for f in fields(cls)]
        if set(values) != set(names):  # a bug in the statistics, never a user's input
            raise AssertionError(f"interaction record: {sorted(set(values) ^ set(names))}")
        return cls(**{k: _frozen(v) for k, v in values.items()})

    def to_json(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in INTERACTION_TEST_KEYS}


@dataclass(frozen=True)
class ChanceTest:
    """One arm's accuracy against chance (schema.CHANCE_TEST_KEYS, in that order), decided
    in fusion_sweep.analysis.chance: the chance level and where it came from, the t-test
    and its Holm p, the exact per-seed learn rate and the arm's learned? state."""

    dataset: str
    encoder: str
    pe: str
    metric: str
    fusion: str
    variant: str
    n: int
    num_classes: int | None
    chance_level: float
    mean: float
    t: float
    p: float
    p_holm: float
    learned: str
    chance_source: str
    learn_method: str
    learn_count: int | None
    learn_n: int | None

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in CHANCE_TEST_KEYS}


@dataclass(frozen=True)
class ArmSummary:
    """One arm over its usable seeds (schema.ARM_KEYS, in that order): the seed noise each
    paired Δ is judged against, its chance level and learned? state."""

    dataset: str
    encoder: str
    pe: str
    metric: str
    fusion: str
    variant: str
    n: int
    mean: float
    sd: float
    min: float
    max: float
    chance_level: float
    learned: str

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ARM_KEYS}


def _frozen(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _plain(v: Any) -> Any:
    """A record's value as the JSON holds it: a tuple as a list, a caveat as its full text."""
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return full(v) if isinstance(v, Caveat) else v


assert tuple(f.name for f in fields(InteractionTest)) == INTERACTION_TEST_KEYS
assert tuple(f.name for f in fields(ChanceTest)) == CHANCE_TEST_KEYS
assert tuple(f.name for f in fields(ArmSummary)) == ARM_KEYS
