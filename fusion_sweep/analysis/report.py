"""The analysis driver: tidy table + settings -> :class:`Report`, and its JSON/text forms.

`analyze` is the only function that sees the whole report: it applies Holm across every
comparison, decides verdicts, and collects design warnings. Everything it calls is a pure
function over arrays or the tidy table.

Families and verdicts:

- paired-t p: Holm over every comparison in the report (`p_holm`);
- TOST p: Holm over every comparison that has an equivalence margin (`tost_p_holm`); the
  `equivalent` verdict needs `tost_p_holm < alpha`. An `equivalent` comparison whose
  t-interval excludes 0 always carries a note saying so (a real but small difference);
- chance: Holm over every arm tested against 1/num_classes (:mod:`fusion_sweep.analysis.chance`); a
  comparison where neither arm beats chance gets the verdict `not learned`, whatever its
  deltas say, and a design warning;
- post hoc power at the observed d_z, both at alpha and at alpha/m (Holm's first step, the
  hardest threshold the verdict applies);
- cost metrics (schema.COST_METRICS): the paired ratio arm/reference on the log scale
  (stats.ratio_test), Holm over every ratio test in the report (`ratio_p_holm`), and its own
  verdict (`ratio_verdict`) beside the verdict on the difference;
- `--claims NAME`: the paper's claims (fusion_sweep.analysis.claims), their own Holm family.

What is compared with what (the comparison axis) comes from the baseline: a fusion name or
a full variant label, see :mod:`fusion_sweep.analysis.variants`.

Equivalence margins may be one number or per dataset ({"arxiv": 0.005}); a dataset absent
from the mapping gets no margin and no equivalence test. The direction of improvement
comes from :func:`fusion_sweep.analysis.metrics.resolve_direction` and is never guessed.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from fusion_sweep.analysis import stats
from fusion_sweep.analysis.caveats import ALL_PAIRS, COLLAPSE, DESCRIPTIVE, SMALL_N, Caveat
from fusion_sweep.analysis.chance import METHOD as CHANCE_METHOD
from fusion_sweep.analysis.chance import (
    arm_state, chance_level, chance_test, chance_tests, class_counts, learning,
)
from fusion_sweep.analysis.guard import Guarded, Learning, guard, neither_learned, sides
from fusion_sweep.analysis.fixed import MEAN, WIN, FixedEstimand, Sample, added
from fusion_sweep.analysis.answer import findings
from fusion_sweep.analysis.grid import verdict_grid
from fusion_sweep.analysis.load import select
from fusion_sweep.analysis.claims import ClaimSetResult, evaluate, get_claim_set
from fusion_sweep.analysis.pairing import (
    Paired, pair_trials, supersede, usable_values, variant_series,
)
from fusion_sweep.analysis.platforms import platform_warnings, platforms_of
from fusion_sweep.analysis.records import ArmSummary, Comparison, Estimate, InteractionTest
from fusion_sweep.analysis.regimes import Regime, interaction_tests, lengths_known, regimes_for
from fusion_sweep.analysis.schema import (
    ADAPTIVE_COLUMN, BETTER, COMPARISON_FAMILY_COLUMN, COST_METRICS,
    DEFAULT_ENCODER, DESCRIPTIVE_LABEL, EQUIVALENT, INCONCLUSIVE, NORMALITY_BELOW_N, NOT_LEARNED,
    TOP_LEVEL_KEYS, WORSE, AnalysisError,
)
from fusion_sweep.analysis.sections import (
    ChanceSection, DesignWarning, DroppedPair, Family, Interaction, Source,
)
from fusion_sweep.analysis.sequential import (
    LEGACY_METHOD, SequentialResult, SequentialSection, from_comparisons, get_method,
)
from fusion_sweep.analysis.settings import Settings
from fusion_sweep.analysis.variants import Axis, Variant


@dataclass
class Report:
    """The whole analysis, every section a frozen record (fusion_sweep.analysis.records,
    .sections, .claims, .sequential) written to JSON by its own `to_json`."""

    source: Source
    settings: Settings
    regimes: list[Regime]
    comparisons: list[Comparison]  # frozen records (fusion_sweep.analysis.records)
    dropped: list[DroppedPair]
    warnings: list[DesignWarning]
    interaction: Interaction
    table: pd.DataFrame = field(repr=False)  # the filtered tidy table
    chance: ChanceSection = field(default_factory=lambda: ChanceSection(CHANCE_METHOD))
    arms: list[ArmSummary] = field(default_factory=list)  # regime short -> long
    claims: ClaimSetResult | None = None  # --claims: fusion_sweep.analysis.claims.evaluate
    # An adaptive sweep: each comparison's sequential decision (with its CS for the figure).
    sequential: SequentialSection | None = None
    # The fixed-n Holm family (fixed_family); m never depends on a selection.
    family: Family = field(default_factory=lambda: Family(0, ""))

    def to_dict(self) -> dict:
        """The `--format json` object: exactly TOP_LEVEL_KEYS, NaN/inf -> null."""
        out = {
            "source": self.source.to_json(),
            "settings": {**asdict(self.settings), "metrics": list(self.settings.metrics),
                         "datasets": list(self.settings.datasets), "pes": list(self.settings.pes),
                         "encoders": list(self.settings.encoders),
                         "confidence_level": 1 - self.settings.alpha},
            "regimes": [asdict(r) for r in self.regimes],
            "warnings": [w.to_json() for w in self.warnings],
            "arms": [a.to_json() for a in self.arms],
            "comparisons": [c.to_json() for c in self.comparisons],
            "dropped": [d.to_json() for d in self.dropped],
            "interaction": self.interaction.to_json(),
            "chance": self.chance.to_json(),
            "claims": None if self.claims is None else self.claims.to_json(),
            "sequential": None if self.sequential is None else self.sequential.to_json(),
            "verdict_grid": verdict_grid(self.comparisons, self.settings.alpha),
            "family": self.family.to_json(),
            "answer": [f.to_json() for f in findings(self)],
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


def rng_key(p: Paired) -> tuple[str, ...]:
    """The comparison's resampling key: (dataset, pe, metric, fusion, baseline) as before
    the encoder axis whenever arm and reference are standard-encoder variants with the
    same pe (so old results give exactly the old numbers), plus the two labels otherwise."""
    key = (p.dataset, p.pe, p.metric, p.fusion, p.baseline)
    legacy = (p.arm.encoder == p.ref.encoder == DEFAULT_ENCODER and p.arm.pe == p.ref.pe)
    return key if legacy else key + (p.arm.label, p.ref.label)


def validated(settings: Settings) -> Settings:
    """Settings.validate, and the claim set's name against its registry
    (fusion_sweep.analysis.claims.CLAIMS); return settings."""
    settings.validate()
    if settings.claims is not None:
        get_claim_set(settings.claims)
    return settings


def analyze(
    df: pd.DataFrame, settings: Settings, source: Source | Mapping | None = None,
    extra_warnings: Sequence[DesignWarning | Mapping] | None = None,
) -> Report:
    """Run every comparison in the tidy table `df` under `settings`.

    source: where `df` comes from (a Source, or its `to_json` dict; None: a table).
    extra_warnings (e.g. from the MLflow loader) are listed after the design warnings.
    """
    validated(settings)
    source = sweep_columns(df, Source.of(source))
    axis = settings.axis
    everything = df  # an adaptive sweep's family is the launch's, never the selection's
    # Every statistic is computed over the whole input (the family); --dataset/--pe/--encoder
    # choose what is shown afterwards and never change m (issue 31 item 4).
    df = select(df, settings.metrics, axis)
    for metric in settings.metrics:  # an unknown direction fails before any statistics
        settings.higher_is_better(metric)
    df, superseded = supersede(df, source.code_fingerprint)
    regimes, regime_warns = regimes_for(df)
    pairing = pair_trials(df, list(settings.metrics), axis, settings.pairs)
    counts = class_counts(df, settings.num_classes)
    arms, by_arm, chance_warns = chance_tests(df, list(settings.metrics), counts, settings.alpha)
    by_dataset = {r.dataset: r for r in regimes}
    # Report order: metric as given, regime short -> long, group (encoder, pe), pairing order.
    order = sorted(range(len(pairing.pairs)), key=lambda i: (
        settings.metrics.index(pairing.pairs[i].metric),
        by_dataset[pairing.pairs[i].dataset].rank, pairing.pairs[i].group, i))
    measured = [_measure(pairing.pairs[i], settings, by_dataset[pairing.pairs[i].dataset], by_arm)
                for i in order]
    family = fixed_family(measured, settings, source)
    # An adaptive sweep's fixed-n verdicts are descriptive (sequential_section says why).
    records = _judged_records(measured, settings, family.m, bool(source.adaptive))
    tests, inter_warns = interaction_tests(records, regimes, settings.alpha, axis)
    shown = _shown(settings)
    comps, tests, dropped, arms = ([r for r in rs if shown(r)] for rs in (
        records, tests, superseded + pairing.dropped, arms))
    df, regimes = _selection(everything, settings, source, regimes)
    source = replace(source, platforms=platforms_of(df))  # named in the report's source line
    stages = (pairing.warnings + regime_warns + chance_warns, list(extra_warnings or []),
              inter_warns)
    warnings = report_warnings(comps, dropped, source, settings, family, stages)
    claims = None
    if settings.claims is not None:
        claims = evaluate(get_claim_set(settings.claims), df, settings, counts, regimes)
    sequential = sequential_section(comps, settings, source, everything)
    if sequential is not None and claims is not None:
        claims = replace(claims, method=f"{DESCRIPTIVE_LABEL}: {claims.method}")
    return Report(source, settings, regimes, comps, dropped, warnings,
                  interaction_section(tests, regimes, axis), df,
                  ChanceSection(CHANCE_METHOD, tuple(arms)),
                  arm_summaries(df, settings, regimes, by_arm), claims, sequential, family)


def report_warnings(comps: list[Comparison], dropped: list[DroppedPair], source: Source,
                    s: Settings, family: Family,
                    stages: tuple[list, list, list]) -> list[DesignWarning]:
    """The report's warnings in the order a reader meets them: the design's, then the
    stages' (pairing, regimes, chance), the margins', the loader's (stages[1]), the
    degenerate comparisons', the dropped pairs' and the interaction tests' (stages[2])."""
    axis = s.axis
    made, loader, interaction = stages
    out = (_design_warnings(comps, s, family.m)
           + _not_learned_warnings(comps, axis)
           + _code_mismatch_warning(dropped, axis)
           + platform_warnings(source.platforms or [], dropped, lambda d: where(d, axis))
           + made + _margin_warnings(comps, s)
           + loader + _degenerate_warnings(comps, axis)
           + _dropped_warning(dropped) + interaction)
    return [DesignWarning.of(w) for w in out]


def interaction_section(tests: list[InteractionTest], regimes: list[Regime],
                        axis: Axis) -> Interaction:
    """The across-regime tests with the words of their method (the contrast depends on
    whether the regimes' lengths are known)."""
    contrast = ("longest minus shortest regime (by median_tokens)" if lengths_known(regimes)
                else "last minus first dataset by name (lengths unknown)")
    return Interaction(
        "Welch one-way ANOVA of per-seed deltas across datasets "
        "(statsmodels anova_oneway, use_var='unequal'), "
        f"H0: the {axis.noun} effect is the same on every dataset; difference in mean deltas, "
        f"{contrast}, with a Welch "
        "t-interval; Holm across tests. One dataset per regime confounds length "
        "with domain and base accuracy: a difference is not evidence that length "
        "causes it", tuple(tests))


def _selection(everything: pd.DataFrame, s: Settings, source: Source,
               regimes: list[Regime]) -> tuple[pd.DataFrame, list[Regime]]:
    """The table and regimes a --dataset/--pe/--encoder selection shows."""
    df = select(everything, s.metrics, s.axis, s.datasets, s.pes, s.encoders)
    df, _ = supersede(df, source.code_fingerprint)
    return df, [r for r in regimes if r.dataset in set(df["dataset"])]


def _shown(s: Settings):
    """Whether a record (comparison, test, dropped pair, arm) is in the --dataset/--pe/
    --encoder selection: its dataset(s), and both variants' pe and encoder."""
    def get(r: object, key: str) -> object:
        return getattr(r, key, None)

    def ok(r: object) -> bool:
        datasets = get(r, "datasets") or [get(r, "dataset")]
        variants = [get(r, "variant")] + ([get(r, "baseline_variant")]
                                          if get(r, "baseline_variant") else [])
        encs, pes = {v.split("/")[0] for v in variants}, {v.split("/")[1] for v in variants}
        return ((not s.datasets or all(d in s.datasets for d in datasets))
                and (not s.encoders or encs <= set(s.encoders))
                and (not s.pes or pes <= set(s.pes)))
    return ok


FAMILY_FIXED = "fixed by the sweep"


def fixed_family(comps: list[Measured] | list[Comparison], s: Settings,
                 source: Source) -> Family:
    """m of the fixed-n Holm family and where it came from. The family is every comparison
    the input allows (before any --dataset/--pe/--encoder selection), or the sweep's
    pre-registered family (schema.COMPARISON_FAMILY; a results file's comparison_family
    column) when that is larger: members the input lacks count as p = 1."""
    m = len(comps)
    recorded = source.comparison_family
    if isinstance(recorded, Mapping) and isinstance(recorded.get("m"), int):
        metric = (source.space or {}).get("metric") or s.metrics[0]
        own = sum(c.metric == metric for c in comps)
        return Family(m + max(0, recorded["m"] - own), FAMILY_FIXED)
    where = source.path or ("the sweep" if source.is_mlflow else "the input")
    return Family(m, f"every comparison in {where}")


def sweep_columns(df: pd.DataFrame, source: Source) -> Source:
    """A results file's sweep-level columns (schema.ADAPTIVE_COLUMN, COMPARISON_FAMILY_COLUMN:
    JSON, one value on every row) into the source, as the MLflow loader reads the parent
    run's tags; MLflow input's own record wins."""
    out: dict[str, object] = {}
    for key, col in (("adaptive", ADAPTIVE_COLUMN), ("comparison_family",
                                                       COMPARISON_FAMILY_COLUMN)):
        if col not in df.columns or getattr(source, key) is not None:
            continue
        values = {v for v in df[col] if isinstance(v, str) and v.strip()}
        if not values:
            continue
        if len(values) > 1:
            raise AnalysisError(f"column {col!r} must hold one value on every row (the "
                                f"sweep's), found {len(values)} different values")
        try:
            out[key] = json.loads(values.pop())
        except json.JSONDecodeError as exc:
            raise AnalysisError(f"column {col!r} must hold JSON: {exc.msg}") from None
        if not isinstance(out[key], dict):
            raise AnalysisError(f"column {col!r} must hold a JSON object")
    return replace(source, **out)


def sequential_section(comps: list[Comparison], s: Settings, source: Source,
                       everything: pd.DataFrame | None = None) -> SequentialSection | None:
    """For a sweep launched with --until-decided (source.adaptive): each comparison's
    anytime-valid decision and seeds used, on the sweep's metric, by the launch's method and
    with the multiplicity the launch fixed (source.comparison_family; for an older launch
    that recorded none, every baseline comparison of the whole input `everything`, before any
    --dataset/--pe/--encoder filter). Only members of that family get a sequential decision;
    --dataset and --pairs change what is shown, never m. Fixed-n statistics of such a sweep
    are then only descriptive: the seed count depended on the data (optional stopping), which
    fixed-n p-values and Holm do not allow."""
    adaptive = source.adaptive
    if not adaptive:
        return None
    metric = (source.space or {}).get("metric") or s.metrics[0]
    alpha = float(adaptive.get("alpha", s.alpha))
    method = get_method(adaptive.get("method", LEGACY_METHOD))
    family, family_source = launch_family(source, s, everything)
    members = {(m["dataset"], m["variant"], m["baseline_variant"]) for m in family["members"]}
    mine = [c for c in comps if c.metric == metric
            and (c.dataset, c.variant, c.baseline_variant) in members]
    results = [_guarded_decision(r, c) for r, c in
               zip(from_comparisons(mine, alpha, max(int(family["m"]), 1), method.name), mine)]
    return SequentialSection(dict(adaptive), metric, alpha, int(family["m"]), family_source,
                             method.name, method.assumption, DESCRIPTIVE_LABEL, tuple(results))


def _guarded_decision(r: SequentialResult, c: Comparison) -> SequentialResult:
    """A sequential decision through the one guard rule (fusion_sweep.analysis.guard): the
    same arms' learned? states withhold the same claims as in the fixed-n verdicts."""
    decision = guard(r.decision, *sides(c)).verdict
    return r if decision == r.decision else replace(r, decision=decision)


FAMILY_RECORDED = "recorded by the launch"
FAMILY_RECONSTRUCTED = ("reconstructed from every trial of the input (the launch recorded "
                        "none): every arm vs its reference, all datasets")


def launch_family(source: Source, s: Settings, everything: pd.DataFrame | None
                  ) -> tuple[Mapping, str]:
    """The comparison family of an adaptive sweep ({"m", "members"}) and where it came from.

    The launch's record when present. Otherwise rebuilt from the whole input table with the
    launch's rule (each arm vs its group's reference, every dataset), so that no selection
    flag can shrink or grow m."""
    recorded = source.comparison_family
    if isinstance(recorded, Mapping) and isinstance(recorded.get("m"), int) \
            and isinstance(recorded.get("members"), list):
        return recorded, FAMILY_RECORDED
    if everything is None:
        raise AnalysisError("an adaptive sweep without a recorded comparison family needs the "
                            "whole input table to rebuild it")
    axis = s.axis
    variant = variant_series(everything)
    members = []
    for key, rows in everything.groupby(["dataset", *axis.free], sort=True):
        dataset, *group = key if isinstance(key, tuple) else (key,)
        present = set(variant[rows.index])
        for arm, ref in axis.pairs(present, tuple(group), "baseline"):
            if ref in present:
                members.append({"dataset": dataset, "family": [dataset, *group],
                                "variant": arm.label, "baseline_variant": ref.label})
    return {"m": len(members), "members": members}, FAMILY_RECONSTRUCTED


def arm_summaries(df: pd.DataFrame, s: Settings, regimes: list[Regime],
                  by_arm: dict) -> list[ArmSummary]:
    """Mean, per-seed SD and range of every arm (ARM_KEYS), regime short -> long.

    Every usable seed of the arm counts, paired or not: this is the seed noise a reader
    compares the paired deltas with.
    """
    rank = {r.dataset: r.rank for r in regimes}
    axis = s.axis
    out = []
    for metric in s.metrics:
        vals = usable_values(df, metric)
        for (dataset, *fields), g in vals.groupby(["dataset", "encoder", "pe", "fusion"],
                                                   sort=False):
            v = g["value"].to_numpy(dtype=float)  # (seeds,)
            var = Variant(*fields)
            out.append(ArmSummary(
                dataset, var.encoder, var.pe, metric, var.fusion, var.label, int(v.size),
                float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else stats.NAN,
                float(v.min()), float(v.max()), chance_level(by_arm, dataset, var, metric),
                arm_state(by_arm, dataset, var, metric)))

    def order(a: ArmSummary) -> tuple:
        # Within a group (the fields the baseline leaves open) the baseline's arm first.
        var = Variant(a.encoder, a.pe, a.fusion)
        return (s.metrics.index(a.metric), rank.get(a.dataset, 0), a.dataset,
                axis.group(var), not axis.matches(var), var.label)
    return sorted(out, key=order)


@dataclass(frozen=True)
class WinRateStats:
    """The win-rate estimand's own statistics (the record's fields of these names): the exact
    sign test of the paired deltas, ties excluded and counted, and its Clopper-Pearson
    interval; its Holm p and verdict are stage 2's."""

    win_estimand: str
    win_assumes: str
    wins: int
    losses: int
    ties: int
    win_rate: float
    win_ci_low: float
    win_ci_high: float
    sign_p: float


@dataclass(frozen=True)
class LearnRates:
    """Each arm's learn rate (seeds that beat chance of those tested) and why its learned?
    state cannot exclude a majority-class predictor ('' when the exact test decided it)."""

    arm_learn_count: int | None
    arm_learn_n: int | None
    arm_learn_basis: str
    baseline_learn_count: int | None
    baseline_learn_n: int | None
    baseline_learn_basis: str


@dataclass(frozen=True)
class Measured:
    """Stage 1: one comparison's own statistics (no family yet), as the typed values that
    computed them, and what its verdict rules read besides: the pairs, the cost-ratio test,
    the collapsed-seeds sentence and each arm's learned? state."""

    pair: Paired
    length_regime: Regime
    stats: stats.PairedStats
    win: WinRateStats
    learn: LearnRates
    ratio_test: stats.RatioResult | None
    margin: float | None
    higher_is_better: bool
    chance_level: float
    collapse: str
    arm_learning: Learning
    ref_learning: Learning
    added: tuple[tuple[FixedEstimand, Any], ...] = ()  # each added entry and what it measured

    @property
    def metric(self) -> str:
        return self.pair.metric


@dataclass(frozen=True)
class Adjusted:
    """Stage 2a: one comparison's Holm-adjusted p in each of the report's families, and
    alpha at Holm's first step (alpha/m)."""

    p_holm: float
    tost_p_holm: float
    ratio_p_holm: float
    sign_p_holm: float
    alpha_m: float
    added_p_holm: tuple[float, ...] = ()  # each added estimand's, in registry order


@dataclass(frozen=True)
class Judged:
    """Stage 2b: the verdicts and what qualifies them: the Comparison fields the report's Holm
    families and the verdict rules decide. notes: the statistics' own, then the verdicts'."""

    p_holm: float
    tost_p_holm: float
    holm_first_step_alpha: float
    power_at_holm_alpha: float
    seeds_for_80_power_at_holm_alpha: int | None
    holm_ci_low: float
    holm_ci_high: float
    holm_ci_level: float
    verdict: str
    notes: tuple[str, ...]
    verdict_flags: tuple[Caveat, ...]
    ratio_p_holm: float | None
    ratio_verdict: str | None
    sign_p_holm: float
    win_verdict: str


def _measure(p: Paired, s: Settings, regime: Regime, by_arm: dict) -> Measured:
    """Stage 1: statistics of one comparison."""
    margin = s.margin_for(p.dataset, p.metric)
    arm, ref = learning(by_arm, p.dataset, p.arm), learning(by_arm, p.dataset, p.ref)
    x = Sample(np.asarray(p.x, float), np.asarray(p.y, float), s.alpha, margin, int(s.n_boot),
               stats.comparison_rng(s.rng_seed, rng_key(p)), len(p.lost))
    res = MEAN.measure(x)
    ratio = stats.ratio_test(p.x, p.y, s.alpha) if p.metric in COST_METRICS else None
    return Measured(
        pair=p, length_regime=regime, stats=res, win=_win_rate(x),
        learn=_learning_fields(arm, ref), ratio_test=ratio, margin=margin,
        higher_is_better=s.higher_is_better(p.metric),
        chance_level=chance_level(by_arm, p.dataset, p.arm, p.metric),
        collapse=_collapse(by_arm, p), arm_learning=arm, ref_learning=ref,
        added=tuple((e, e.measure(x)) for e in added()))


def _record(c: Measured, j: Judged, estimates: tuple[Estimate, ...]) -> Comparison:
    """Stage 3: the Comparison record, built once from the typed stages (the verdicts' notes
    replace the statistics', which they extend)."""
    p, ratio = c.pair, c.ratio_test
    return Comparison.build(
        c.stats, c.win, c.learn, j,
        dataset=p.dataset, pe=p.pe, metric=p.metric, fusion=p.fusion, baseline=p.baseline,
        seeds=tuple(int(v) for v in p.seeds), regime=c.length_regime.label,
        median_tokens=c.length_regime.median_tokens, higher_is_better=c.higher_is_better,
        equivalence_margin=c.margin, chance_level=c.chance_level,
        learned=c.arm_learning.state, baseline_learned=c.ref_learning.state,
        encoder=p.arm.encoder, variant=p.arm.label, baseline_variant=p.ref.label,
        group=p.group, ratio=ratio and ratio.ratio, ratio_ci_low=ratio and ratio.low,
        ratio_ci_high=ratio and ratio.high, ratio_p=ratio and ratio.p,
        estimand=MEAN.name, assumes=MEAN.assumes, lost_seeds=tuple(p.lost),
        estimates=estimates)


def _learning_fields(arm: Learning, ref: Learning) -> LearnRates:
    """Each arm's learn rate and the basis of its learned? state (LearnRates)."""
    return LearnRates(arm_learn_count=arm.count, arm_learn_n=arm.n, arm_learn_basis=arm.basis,
                      baseline_learn_count=ref.count, baseline_learn_n=ref.n,
                      baseline_learn_basis=ref.basis)


def _win_rate(x: Sample) -> WinRateStats:
    """The win-rate estimand: exact sign test of the paired deltas (ties excluded, counted),
    its Clopper-Pearson interval; the Holm p and win_verdict are stage 2's."""
    st = WIN.measure(x)
    return WinRateStats(win_estimand=WIN.name, win_assumes=WIN.assumes, wins=st.wins,
                        losses=st.losses, ties=st.ties, win_rate=st.win_rate,
                        win_ci_low=st.ci_low, win_ci_high=st.ci_high, sign_p=st.p_two_sided)


# Notes that explain a verdict rather than a degenerate statistic (not turned into warnings).
INFO_NOTES = ("also equivalent", "equivalent within", "neither arm beats chance",
              "ratio: the same ratio")


def holm_in_family(pvals: list[float], m: int) -> np.ndarray:
    """Holm over a family of m: the members without a p here (not in the input) count as
    p = 1, which is what they can contribute at most."""
    p = np.array(pvals, dtype=float)  # (k,)
    pad = max(0, m - p.size)
    return stats.holm(np.r_[p, np.ones(pad)])[:p.size]


def _adjusted(ms: list[Measured], s: Settings, family_m: int) -> list[Adjusted]:
    """Stage 2a: Holm over the report's paired-t family (of family_m members), its TOST and
    cost-ratio families, and the win-rate family (the same comparisons, its own family).
    Members of a recorded family that the input lacks count as p = 1 in the paired-t, the
    sign-test AND the TOST family (a file holding part of a sweep never loosens any Holm
    step); the cost-ratio family is the input's own (cost metrics are no recorded family)."""
    absent = max(0, family_m - len(ms))
    adjusted = holm_in_family([c.stats.t_p for c in ms], family_m)  # (k,)
    tost = stats.holm(np.r_[[c.stats.tost_p for c in ms], np.ones(absent)])[:len(ms)]
    ratio = stats.holm(np.array([_nan(c.ratio_test and c.ratio_test.p) for c in ms], dtype=float))
    sign = holm_in_family([c.win.sign_p for c in ms], family_m)
    m = max(1, int(np.isfinite(adjusted).sum()) + absent)
    more = [holm_in_family([e.p(v) for c in ms for e2, v in c.added if e2 is e], family_m)
            for e in added()]  # each added estimand: its own family of the same m
    return [Adjusted(float(p), float(tp), float(rp), float(sp), s.alpha / m,
                     tuple(float(h[i]) for h in more))
            for i, (p, tp, rp, sp) in enumerate(zip(adjusted, tost, ratio, sign))]


def _judged_records(ms: list[Measured], s: Settings, family_m: int,
                    descriptive: bool) -> list[Comparison]:
    """Stages 2 and 3: the verdicts, then each Comparison record, built once."""
    out = []
    for c, a in zip(ms, _adjusted(ms, s, family_m)):
        out.append(_record(c, _judge(c, a, s, descriptive), _estimates(c, a, s)))
    return out


def _judge(c: Measured, a: Adjusted, s: Settings, descriptive: bool) -> Judged:
    """Stage 2b: post hoc power at Holm's first step, the Holm-consistent interval, each
    verdict (every one through the one guard rule, fusion_sweep.analysis.guard) and the
    notes and flags that qualify it."""
    low, high, level = stats.holm_consistent_interval(np.asarray(c.stats.deltas, float), c.stats.t_p,
                                                      a.p_holm, s.alpha)
    not_learned = neither_learned(c.arm_learning, c.ref_learning)
    raw = stats.verdict(c.stats.t_ci_low, c.stats.t_ci_high, a.p_holm, a.tost_p_holm,
                        s.alpha, c.higher_is_better, not_learned=not_learned)
    guarded = guard(raw, c.arm_learning, c.ref_learning)
    notes = [*c.stats.notes, *_verdict_notes(c, a, guarded.verdict, s.alpha)]
    verdict, flags, qualified = _qualify(c, a, guarded, s, not_learned)
    notes += qualified
    ratio_p_holm, ratio_verdict = None, None
    if c.ratio_test is not None:
        ratio_p_holm = a.ratio_p_holm
        ratio_verdict = guard(stats.ratio_verdict(c.ratio_test, a.ratio_p_holm, s.alpha,
                                                  c.higher_is_better),
                              c.arm_learning, c.ref_learning).verdict
        notes += [f"ratio: {c.ratio_test.note}"] if c.ratio_test.note else []
    return Judged(
        p_holm=a.p_holm, tost_p_holm=a.tost_p_holm, holm_first_step_alpha=a.alpha_m,
        power_at_holm_alpha=stats.achieved_power(c.stats.dz, c.stats.n, a.alpha_m),
        seeds_for_80_power_at_holm_alpha=stats.seeds_for_power(c.stats.dz, a.alpha_m),
        holm_ci_low=low, holm_ci_high=high, holm_ci_level=level, verdict=verdict,
        notes=tuple(notes),
        verdict_flags=((Caveat(DESCRIPTIVE),) if descriptive else ()) + flags,
        ratio_p_holm=ratio_p_holm, ratio_verdict=ratio_verdict, sign_p_holm=a.sign_p_holm,
        win_verdict=_win_verdict(c, a, s))


def _win_verdict(c: Measured, a: Adjusted, s: Settings) -> str:
    """The win-rate verdict: the Holm-adjusted exact sign test, then the one guard rule."""
    raw = WIN.decide(c.win, a.sign_p_holm, s.alpha, c.higher_is_better)
    return guard(raw, c.arm_learning, c.ref_learning).verdict


def _estimates(c: Measured, a: Adjusted, s: Settings) -> tuple[Estimate, ...]:
    """Each added estimand's verdict (its entry's rule on its Holm p, then the one guard
    rule) and its grid words."""
    out = []
    for (e, v), p_holm in zip(c.added, a.added_p_holm):
        verdict = guard(e.decide(v, p_holm, s.alpha, c.higher_is_better),
                        c.arm_learning, c.ref_learning).verdict
        out.append(Estimate(e.name, e.key, v, p_holm, verdict, e.cell(v, verdict)))
    return tuple(out)


def _qualify(c: Measured, a: Adjusted, guarded: Guarded, s: Settings,
             not_learned: bool) -> tuple[str, tuple[Caveat, ...], list[str]]:
    """The rules that qualify a fixed-n verdict (issue 20), each said beside it in
    `verdict_flags` and explained in `notes`: returns (verdict, flags, notes).

    - a verdict the guard withheld (fusion_sweep.analysis.guard: no arm shown to learn, or
      an equivalence between arms that may be majority-class predictors): the flag says
      which and why;
    - fewer than NORMALITY_BELOW_N pairs: the verdict rests on the t-test's normality;
    - the verdict with the pairs dropped by fingerprint/code checks put back, when it
      differs (the verdict itself never uses them; copied seeds are never put back)."""
    flags, notes = [], []
    verdict = guarded.verdict
    if guarded.withheld:
        flags.append(guarded.caveat)
        notes.append(f"verdict withheld ('{guarded.withheld}' -> '{verdict}'): {guarded.why}; "
                     + ("an equivalence needs both arms shown to beat the majority class by "
                        "the exact per-seed test" if guarded.withheld == EQUIVALENT else
                        "with no arm shown to learn, a difference says nothing about the "
                        "variants"))
    if verdict in (BETTER, WORSE, EQUIVALENT) and c.stats.n < NORMALITY_BELOW_N:
        flags.append(Caveat(SMALL_N, n=c.stats.n, below=NORMALITY_BELOW_N))
        notes.append(f"only {c.stats.n} pairs: the verdict rests on the paired t-test's normality "
                     "assumption; no exact test can reach alpha at this n")
    if c.collapse and verdict in (BETTER, WORSE, EQUIVALENT):
        flags.append(Caveat(COLLAPSE, why=c.collapse))
        notes.append(f"{c.collapse}: the deltas mix collapsed and learned seeds, so the mean-Δ "
                     "verdict rests on the t-test's normality; read the win rate (exact) "
                     "beside it")
    if c.pair.unchecked:
        other = _sensitivity(c, a, verdict, s, not_learned)
        if other is not None:
            flags.append(other[0])
            notes.append(other[1])
    return verdict, tuple(flags), notes


def _collapse(by_arm: dict, p: Paired) -> str:
    """'ARM at chance on k of n seeds' when an arm learned on some seeds but not all (the
    exact per-seed test): a seed at chance beside seeds well above it."""
    out = []
    for v in (p.arm, p.ref):
        t = chance_test(by_arm, p.dataset, v)
        if t and t.learn_n and 0 < t.learn_count < t.learn_n:
            out.append(f"{v.label} at chance on {t.learn_n - t.learn_count} of {t.learn_n} "
                       "seeds")
    return "; ".join(out)


def _sensitivity(c: Measured, a: Adjusted, verdict: str, s: Settings,
                 not_learned: bool) -> tuple[Caveat, str] | None:
    """The verdict with the dropped-but-finished pairs put back (the same Holm step as the
    comparison's own p): (flag, note) when it differs, else None."""
    unchecked = c.pair.unchecked
    n_all = len(c.pair.seeds) + len(unchecked)
    x = np.r_[np.asarray(c.pair.x, float), [v for _, v, _ in unchecked]]  # (n + k,)
    y = np.r_[np.asarray(c.pair.y, float), [v for _, _, v in unchecked]]
    t = stats.paired_t(x, y, s.alpha)
    step = a.p_holm / c.stats.t_p if np.isfinite(c.stats.t_p) and c.stats.t_p > 0 else 1.0
    tost = stats.tost_p(x, y, c.margin)
    tstep = a.tost_p_holm / c.stats.tost_p if np.isfinite(c.stats.tost_p) and c.stats.tost_p > 0 else 1.0
    other = stats.verdict(t.low, t.high, min(1.0, t.p * step), min(1.0, tost * tstep),
                          s.alpha, c.higher_is_better, not_learned=not_learned)
    other = guard(other, c.arm_learning, c.ref_learning).verdict
    if other == verdict:
        return None
    return (Caveat(ALL_PAIRS, n=n_all, other=other),
            f"sensitivity: with the {len(unchecked)} pair(s) dropped by the fingerprint/code "
            f"checks put back ({n_all} pairs), the verdict would be '{other}' (paired-t p "
            f"{t.p:.3g}, Holm step as above); the verdict uses the {c.stats.n} checked pairs only")


def _nan(v: object) -> float:
    return stats.NAN if v is None else float(v)


def _verdict_notes(c: Measured, a: Adjusted, verdict: str, alpha: float) -> list[str]:
    """What the verdict alone would hide: equivalence beside a real effect, chance level."""
    tost = a.tost_p_holm
    equivalent = np.isfinite(tost) and tost < alpha
    excludes_zero = np.isfinite(c.stats.t_ci_low) and (c.stats.t_ci_low > 0 or c.stats.t_ci_high < 0)
    margin = c.margin
    if verdict == NOT_LEARNED:
        return [f"neither arm beats chance ({c.chance_level:.3g}): verdict 'not learned'; "
                "these statistics compare two chance-level models"]
    if verdict in (BETTER, WORSE) and equivalent:
        return [f"also equivalent within ±{margin:g} (Holm-adjusted TOST p = {tost:.3g}): the "
                "difference is real but small"]
    if verdict == EQUIVALENT and excludes_zero:
        return [f"equivalent within ±{margin:g} (Holm-adjusted TOST p = {tost:.3g}), but the "
                f"t-interval [{c.stats.t_ci_low:+.4g}, {c.stats.t_ci_high:+.4g}] excludes 0: a "
                f"difference smaller than the margin, not significant after Holm "
                f"(p_holm = {a.p_holm:.3g})"]
    return []


def _design_warnings(comps: list[Comparison], s: Settings, family_m: int) -> list[dict]:
    """What the design cannot do, before looking at results: floors on p, small n."""
    out = []
    for n in sorted({c.n for c in comps if c.n >= 1}):
        group = [c for c in comps if c.n == n]
        # The floor at n is the best case (every delta non-zero); zero deltas raise it further.
        floors = {"exact two-sided Wilcoxon": [c.min_p_wilcoxon for c in group],
                  "sign-flip permutation": [c.min_p_signflip for c in group]}
        finite = {k: [v for v in vs if np.isfinite(v)] for k, vs in floors.items()}
        blocked = {k: (min(v), max(v)) for k, v in finite.items() if v and min(v) >= s.alpha}
        if blocked:
            what = " and ".join(
                f"the {k} test cannot go below p = {lo:.4g}"
                + (f" (up to {hi:.4g} where deltas of 0 are dropped)" if hi > lo else "")
                for k, (lo, hi) in blocked.items())
            out.append({"code": "cannot_reach_alpha",
                        "message": f"at n = {n} ({_count(len(group), 'comparison')}) {what}, "
                                   f"which is not below alpha = {s.alpha}: only the t-test can "
                                   "reject; add seeds for a non-parametric confirmation"})
    small = [c for c in comps if 0 < c.n < stats.BOOT_DESCRIPTIVE_BELOW]
    if small:
        ns = sorted({c.n for c in small})
        out.append({"code": "bootstrap_descriptive",
                    "message": f"{_count(len(small), 'comparison')} with fewer than "
                               f"{stats.BOOT_DESCRIPTIVE_BELOW} pairs (n = {ns}): BCa bootstrap "
                               "CIs undercover at this n and are descriptive only; the "
                               "t-interval is the primary interval"})
    m = family_m
    r = int(np.isfinite([_nan(c.ratio_p) for c in comps]).sum())
    if r > 1:
        out.append({"code": "holm_ratio_family",
                    "message": f"Holm adjustment over r = {r} paired cost-ratio tests (log "
                               "scale): a ratio verdict needs its Holm-adjusted p below alpha"})
    if m > 1:
        out.append({"code": "holm_family",
                    "message": f"Holm adjustment over m = {m} comparisons (the whole "
                               "family, whatever a selection shows): the smallest "
                               f"paired-t p must be below alpha/m = {s.alpha / m:.3g} to count; "
                               "'seeds for 80% power' is given at both alpha and alpha/m, post "
                               "hoc (at the observed effect)"})
    k = int(np.isfinite([c.tost_p for c in comps]).sum())
    if k > 1:
        out.append({"code": "holm_tost_family",
                    "message": f"Holm adjustment over k = {k} equivalence (TOST) tests: "
                               "'equivalent' needs the Holm-adjusted TOST p below alpha"})
    return out


def describe(c: Comparison | DroppedPair, axis: Axis) -> str:
    """'concat vs add, pe=sinusoidal' / 'ressformer/none/add vs standard/sinusoidal/add':
    a comparison (or dropped pair) in the axis's short labels, with its group."""
    arm = Variant(c.encoder, c.pe, c.fusion)
    group = axis.title(axis.group(arm)).replace(" · ", ", ")
    return f"{axis.short(arm)} vs {c.baseline}" + (f", {group}" if group else "")


def where(c: Comparison | DroppedPair, axis: Axis) -> str:
    """'dataset/group/metric ARM vs REF' for messages ('synthetic-long/sinusoidal/test_acc
    concat vs add'); c is a comparison or a dropped pair."""
    arm = Variant(c.encoder, c.pe, c.fusion)
    path = "/".join(p for p in (c.dataset, axis.path(axis.group(arm)), c.metric) if p)
    return f"{path} {axis.short(arm)} vs {c.baseline}"


def _not_learned_warnings(comps: list[Comparison], axis: Axis) -> list[dict]:
    """One warning per dataset and metric, naming each comparison whose arms both sit at
    chance (a regime where nothing learns would otherwise repeat one sentence per arm)."""
    groups: dict[tuple, list[Comparison]] = {}
    for c in comps:
        if c.verdict == NOT_LEARNED:
            groups.setdefault((c.dataset, c.metric, c.chance_level), []).append(c)
    out = []
    for (dataset, metric, chance), cs in groups.items():
        these = "this comparison says" if len(cs) == 1 else f"these {len(cs)} comparisons say"
        out.append({"code": "not_learned",
                    "message": f"neither arm beats chance on {dataset}: {these} nothing about "
                               f"{axis.noun} ({'; '.join(describe(c, axis) for c in cs)}; "
                               f"{metric}, chance = {chance:.3g})"})
    return out


def _code_mismatch_warning(dropped: list[DroppedPair], axis: Axis) -> list[dict]:
    """Pairs across code versions are dropped, not used: list them (design choice, see
    fusion_sweep.analysis.pairing)."""
    bad = [d for d in dropped if d.reason == "code_mismatch"]
    if not bad:
        return []
    listing = "; ".join(f"{where(d, axis)} seed {d.seed} ({d.detail})" for d in bad[:10])
    more = f"; and {len(bad) - 10} more" if len(bad) > 10 else ""
    return [{"code": "code_mismatch",
             "message": f"{_count(len(bad), 'pair')} compare runs of different code and were "
                        f"dropped (re-run the stale arm under the current code): {listing}{more}"}]


def _margin_warnings(comps: list[Comparison], s: Settings) -> list[dict]:
    if not isinstance(s.margin, Mapping):
        return []
    missing = sorted({c.dataset for c in comps if c.equivalence_margin is None})
    if not missing:
        return []
    return [{"code": "no_equivalence_margin",
             "message": f"equivalence margins are given per dataset ({s.margin_label()}); none "
                        f"for {', '.join(missing)}: no equivalence test there"}]


def _degenerate_warnings(comps: list[Comparison], axis: Axis) -> list[dict]:
    """One warning per note and dataset/group/metric, naming every comparison it is about
    (the same note for each arm against one reference would otherwise repeat)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for c in comps:
        path, pair = where(c, axis).split(" ", 1)
        for note in c.notes:
            if not note.startswith(INFO_NOTES):
                grouped.setdefault((path, note), []).append(pair)
    return [{"code": "degenerate_comparison",
             "message": f"{path} {' and '.join(pairs)}: {note}"}
            for (path, note), pairs in grouped.items()]


def _dropped_warning(dropped: list[DroppedPair]) -> list[dict]:
    if not dropped:
        return []
    counts = pd.Series([d.reason for d in dropped]).value_counts()
    summary = ", ".join(f"{k}: {v}" for k, v in counts.items())
    runs = sum(d.reason == "superseded_code" for d in dropped)
    what = _count(len(dropped) - runs, "pair") + (f" and {_count(runs, 'superseded run')}"
                                                   if runs else "")
    return [{"code": "dropped_pairs",
             "message": f"{what} dropped ({summary}); see the dropped list"}]


def _count(k: int, noun: str) -> str:
    return f"{k} {noun}{'' if k == 1 else 's'}"
