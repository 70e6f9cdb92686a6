"""The answer in words: one sentence per finding, then a one-line summary.

`findings(report)` is a pure function over the report's frozen comparison records; every
format shows the same sentences (the terminal first, the JSON's `answer`,
schema.ANSWER_KEYS). A sentence names its estimand and says no more than the verdicts:

- better/worse/equivalent are the mean-Δ verdict (paired t, Holm over the report's m; TOST for
  equivalent), with its 95% interval (the one fixed level, 1 - alpha) and Holm p, then the
  win rate (exact sign test) beside it; when the two disagree, or only one decides, it says so;
- a verdict that rests on normality, or would differ with dropped pairs put back, says so; on
  an adaptive sweep the summary says once that every fixed-n verdict is descriptive;
- an undecided comparison is "undecided", never "no effect": equivalence is claimed only by
  TOST, and a 95% interval that excludes 0 without the Holm p deciding is said in words;
- comparisons withheld because an arm did not beat chance are grouped in one sentence per
  dataset and arm (the reference usually: "neither comparison with add is decided").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from fusion_sweep.analysis import caveats
from fusion_sweep.analysis.grid import unlearned
from fusion_sweep.analysis.records import Comparison, InteractionTest
from fusion_sweep.analysis.regimes import DIFFERS
from fusion_sweep.analysis.schema import (
    ANSWER_KEYS, ANSWER_KINDS, BETTER, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED, WORSE,
)
from fusion_sweep.analysis.sections import Interaction
from fusion_sweep.analysis.sequential import SequentialSection
from fusion_sweep.analysis.variants import Axis, Variant

DISAGREE, WITHHELD, SUMMARY = "disagree", "withheld", "summary"
ACROSS, SEQUENTIAL = "across regimes", "sequential"
DECIDED = (BETTER, WORSE, EQUIVALENT)
# Verb phrases: (one arm, several arms).
VERB = {BETTER: ("beats", "beat"), WORSE: ("is worse than", "are worse than"),
        EQUIVALENT: ("is equivalent to", "are equivalent to")}


class _Settings(Protocol):
    alpha: float
    axis: Axis
    metrics: tuple[str, ...]


class _Report(Protocol):
    """What the answer reads of a fusion_sweep.analysis.report.Report."""

    comparisons: list[Comparison]
    settings: _Settings
    interaction: Interaction  # the across-regime tests
    sequential: SequentialSection | None  # an adaptive sweep's sequential decisions


@dataclass(frozen=True)
class Finding:
    """One sentence of the answer (schema.ANSWER_KEYS): what kind of finding, where, about
    which arms (variant labels) against which reference, and the sentence itself."""

    kind: str
    dataset: str
    metric: str
    group: str
    arms: tuple[str, ...]
    reference: str
    sentence: str

    def __post_init__(self) -> None:
        if self.kind not in ANSWER_KINDS:  # a bug in this module, never a user's input
            raise AssertionError(f"answer kind {self.kind!r} not in {ANSWER_KINDS}")

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in ((k, getattr(self, k)) for k in ANSWER_KEYS)}


def findings(report: _Report) -> tuple[Finding, ...]:
    """The answer: after an adaptive sweep first its sequential decisions (the sweep's valid
    verdicts); then one Finding per comparison (withheld and not-learned comparisons grouped
    per dataset and unlearned arm), in report order; then, per arm and reference, whether the
    effect differs across regimes and where it is largest; then the summary."""
    comps, s = list(report.comparisons), report.settings
    ctx = _Context(s.axis, len(s.metrics) > 1, len({c.group for c in comps}) > 1, s.alpha)
    order: list[Comparison | tuple] = []  # a comparison, or the key of a group of them
    grouped: dict[tuple, list[Comparison]] = {}
    for c in comps:
        key = _unlearned_key(c)
        if key is not None and key not in grouped:
            order.append(key)
        if key is not None:
            grouped.setdefault(key, []).append(c)
        else:
            order.append(c)
    out = [_one(x, ctx) if isinstance(x, Comparison) else _grouped(x, grouped[x], ctx)
           for x in order]
    lead = sequential_findings(report.sequential, ctx)
    tests = _across(report.interaction.tests, comps)
    return tuple(lead) + tuple(out) + tuple(across_regimes(tests, ctx)) + (
        (summary(comps, ctx, [a for a in tests if a.differs]),) if comps else ())


@dataclass(frozen=True)
class _Context:
    axis: Axis
    show_metric: bool
    show_group: bool
    alpha: float

    def where(self, c: Comparison) -> str:
        """'synthetic-long' (+ ', pe=sinusoidal' with several groups, + ', test_acc' with
        several metrics)."""
        group = self.axis.title(c.group).replace(" · ", ", ") if self.show_group else ""
        return ", ".join(p for p in (c.dataset, group, c.metric if self.show_metric else "") if p)

    def arm(self, c: Comparison) -> str:
        return self.axis.short(Variant(c.encoder, c.pe, c.fusion))


def _unlearned_key(c: Comparison) -> tuple | None:
    """Comparisons told together: a not-learned one (neither arm beats chance), or one whose
    better/worse/equivalent was withheld because one arm did not (or may not) beat chance."""
    if c.verdict == NOT_LEARNED:
        return (c.metric, c.dataset, c.group, NOT_LEARNED, c.baseline_variant)
    if not caveats.has(c.verdict_flags, caveats.WITHHELD):
        return None
    if unlearned(c) is None:  # both learned; an equivalence withheld: its own sentence says why
        return None
    side, state = unlearned(c)
    return (c.metric, c.dataset, c.group, state,
            c.baseline_variant if side == "reference" else c.variant)


def _grouped(key: tuple, comps: list[Comparison], ctx: _Context) -> Finding:
    """One sentence for the comparisons an unlearned arm leaves undecided."""
    _, _, _, state, label = key
    c0, arms = comps[0], [ctx.arm(c) for c in comps]
    chance = f"{c0.chance_level:.3f}" if math.isfinite(c0.chance_level) else "unknown"
    ref = c0.baseline
    if state == NOT_LEARNED:
        names = _and(arms + [ref])
        what = ("this comparison says" if len(comps) == 1
                else f"these {len(comps)} comparisons say")
        text = (f"no arm beat chance ({chance}): neither {names} did, so {what} nothing "
                f"about {ctx.axis.noun}" if len(comps) > 1 else
                f"neither {arms[0]} nor {ref} beat chance ({chance}), so {what} nothing "
                f"about {ctx.axis.noun}")
        kind = NOT_LEARNED
    else:
        who = ref if label == c0.baseline_variant else arms[0]
        why = (f"{who} did not beat chance (its chance level {chance})" if state == "no" else
               f"whether {who} beats chance is unknown"
               + (" (its class count is unknown)" if chance == "unknown"
                  else " (the same accuracy on every seed, or fewer than 2 seeds)"))
        if len(comps) == 1:
            undecided = f"{arms[0]} vs {ref} is not decided"
        else:
            undecided = (f"neither comparison with {who} is decided ({_and(arms)})"
                         if len(comps) == 2 else
                         f"none of the {len(comps)} comparisons with {who} is decided "
                         f"({_and(arms)})")
        text = f"{why}, so {undecided}"
        kind = WITHHELD
    return Finding(kind, c0.dataset, c0.metric, _group(c0, ctx),
                   tuple(c.variant for c in comps), c0.baseline_variant,
                   f"{ctx.where(c0)}: {text}.")


def _one(c: Comparison, ctx: _Context) -> Finding:
    """One comparison's sentence."""
    arm, ref = ctx.arm(c), c.baseline
    mean, win = _mean_clause(c, ctx), _win_clause(c)
    v, w = c.verdict, c.win_verdict
    kind = v
    if v in (BETTER, WORSE) and w == v:
        text = f"{arm} {VERB[v][0]} {ref} ({mean}; {win})"
    elif v in (BETTER, WORSE) and w in (BETTER, WORSE):  # opposite directions
        kind = DISAGREE
        text = (f"the estimands disagree: by mean Δ {arm} {VERB[v][0]} {ref} ({mean}), by "
                f"win rate it {VERB[w][0]} it ({win})")
    elif v in DECIDED:
        text = f"{arm} {VERB[v][0]} {ref}" + (
            f" within ±{c.equivalence_margin:g} (TOST Holm p {_p(c.tost_p_holm)}; {mean})"
            if v == EQUIVALENT else f" ({mean})")
        text += (f"; by win rate {w} ({win})" if w in (BETTER, WORSE)
                 else f"; win rate undecided ({win.removeprefix('win rate ')})")
    elif w in (BETTER, WORSE):
        kind = DISAGREE
        text = (f"by win rate {arm} {VERB[w][0]} {ref} ({win}), but the mean Δ does not "
                f"decide ({mean}): the two estimands disagree")
    elif c.n < 2:
        kind = INCONCLUSIVE
        text = f"{arm} vs {ref} is undecided: {_count(c.n, 'usable pair')}, no test"
    else:
        kind = INCONCLUSIVE
        text = f"{arm} vs {ref} is undecided at {c.n} seeds ({mean}; {win})"
    return Finding(kind, c.dataset, c.metric, _group(c, ctx), (c.variant,), c.baseline_variant,
                   f"{ctx.where(c)}: {text}{_caveats(c, ctx)}.")


def _mean_clause(c: Comparison, ctx: _Context) -> str:
    """'mean Δ +0.096, 95% CI [+0.046, +0.146], Holm p 0.0013'."""
    level = f"{100 * (1 - ctx.alpha):g}%"
    if not _finite(c.t_ci_low):
        return f"mean Δ {_d(c.mean_delta)} on every seed: no t-test without spread in Δ"
    return (f"mean Δ {_d(c.mean_delta)}, {level} CI [{_d(c.t_ci_low)}, {_d(c.t_ci_high)}], "
            f"Holm p {_p(c.p_holm)}")


def _win_clause(c: Comparison) -> str:
    """'win rate 8/8, Holm p 0.047': the seeds on which the arm is better out of those not
    tied (ties said, and seeds lost to a non-finite metric, which the test counts against
    the majority), and the exact sign test's Holm p."""
    good = c.wins if c.higher_is_better else c.losses
    extra = ([f"{c.ties} tie{'s' if c.ties != 1 else ''}"] if c.ties else []) + (
        [f"{_count(len(c.lost_seeds), 'seed')} lost to a non-finite {c.metric}, counted "
         "against it"] if c.lost_seeds else [])
    more = f" ({'; '.join(extra)})" if extra else ""
    return f"win rate {good}/{c.wins + c.losses}{more}, Holm p {_p(c.sign_p_holm)}"


def learn_rates(c: Comparison, ctx: _Context) -> str:
    """'add learned on 4 of 8 seeds, concat on 8 of 8' when the two arms' learn rates (the
    exact per-seed test) differ; '' when they agree or are unknown."""
    ref = (c.baseline_learn_count, c.baseline_learn_n)
    arm = (c.arm_learn_count, c.arm_learn_n)
    if None not in ref + arm:
        return "" if ref == arm else (f"{c.baseline} learned on {ref[0]} of "
                                      f"{_count(ref[1], 'seed')}, {ctx.arm(c)} on {arm[0]} of "
                                      f"{arm[1]}")
    states = {c.learned, c.baseline_learned}
    if states != {"yes", "no"}:
        return ""
    no, yes = ((ctx.arm(c), c.baseline) if c.learned == "no" else (c.baseline, ctx.arm(c)))
    chance = f"{c.chance_level:.3f}" if math.isfinite(c.chance_level) else "unknown"
    return f"{no} did not beat chance ({chance}), {yes} did"


def _caveats(c: Comparison, ctx: _Context) -> str:
    """What qualifies the verdict, in words: normality, dropped pairs, adaptive seeds,
    equivalence beside a real effect, an unadjusted interval that excludes 0."""
    out = []
    rates = learn_rates(c, ctx)
    if rates:
        out.append(rates)
    def relabel(text: str) -> str:  # the variants as the answer names them
        return text.replace(c.baseline_variant, c.baseline).replace(c.variant, ctx.arm(c))

    out += [x for x in (caveats.long(f, relabel) for f in c.verdict_flags) if x]
    equivalent = _finite(c.tost_p_holm) and c.tost_p_holm < ctx.alpha
    excludes = _finite(c.t_ci_low) and (c.t_ci_low > 0 or c.t_ci_high < 0)
    if c.verdict in (BETTER, WORSE) and equivalent:
        out.append(f"also equivalent within ±{c.equivalence_margin:g} (TOST Holm p "
                   f"{_p(c.tost_p_holm)}): the difference is real but small")
    if c.verdict == EQUIVALENT and excludes:
        out.append("its 95% interval excludes 0: a difference smaller than the margin")
    if c.verdict == INCONCLUSIVE and excludes:
        out.append("its 95% interval excludes 0, but the Holm p does not decide")
    withheld = caveats.has(c.verdict_flags, caveats.WITHHELD, EQUIVALENT)
    if (c.verdict == INCONCLUSIVE and c.equivalence_margin is not None
            and _finite(c.tost_p_holm) and not withheld):
        out.append(f"nor is it shown equivalent within ±{c.equivalence_margin:g}")
    return "".join(f"; {x}" for x in out)


@dataclass(frozen=True)
class _Across:
    """One interaction test as the answer reads it: the test, the mean Δ per regime in the
    test (regime order), the comparison it names, and where the effect is largest/smallest
    (largest: the largest gain for the arm, by the metric's direction)."""

    test: Any  # records.InteractionTest
    means: Mapping[str, float]
    c0: Comparison
    top: str
    low: str

    @property
    def differs(self) -> bool:
        return self.test.verdict == DIFFERS


def _across(tests: Sequence[InteractionTest], comps: Sequence[Comparison]) -> list[_Across]:
    out = []
    for t in tests:
        means = {c.dataset: c.mean_delta for c in comps
                 if (c.metric, c.variant, c.baseline_variant) == (t.metric, t.variant,
                                                                 t.baseline_variant)
                 and c.dataset in t.datasets}
        if len(means) < 2:
            continue
        c0 = next(c for c in comps if c.variant == t.variant and c.metric == t.metric)
        order = [d for d in t.datasets if d in means]  # regime order, short -> long
        sign = 1 if c0.higher_is_better else -1
        out.append(_Across(t, {d: means[d] for d in order}, c0,
                           max(order, key=lambda d: sign * means[d]),
                           min(order, key=lambda d: sign * means[d])))
    return out


def across_regimes(tests: Sequence[_Across], ctx: _Context) -> list[Finding]:
    """Per arm and reference seen on several regimes: does the effect differ across them
    (the interaction test: Welch ANOVA of the per-seed Δ, Holm across tests; its estimand
    the mean Δ per regime), and on which regime is it largest. Regimes where no arm learned
    are named as left out. Never "the same": an undecided test is undecided."""
    return [Finding(ACROSS, "", a.test.metric, _group(a.c0, ctx), (a.test.variant,),
                    a.test.baseline_variant, _across_sentence(a, ctx)) for a in tests]


def _across_sentence(a: _Across, ctx: _Context) -> str:
    t, means, c0 = a.test, a.means, a.c0
    arm, ref = ctx.arm(c0), c0.baseline
    order, top, low = list(means), a.top, a.low
    sign = 1 if c0.higher_is_better else -1
    where = ", ".join(p for p in (ctx.axis.title(c0.group).replace(" · ", ", ")
                                  if ctx.show_group else "", t.metric if ctx.show_metric
                                  else "") if p)
    head = f"Across regimes{f' ({where})' if where else ''}: the effect of {arm} vs {ref}"
    test = f"Welch ANOVA of the per-seed Δ, estimand mean Δ per regime, Holm p {_p(t.p_holm)}"
    spread = (f"mean Δ {_d(means[low])} on {low} to {_d(means[top])} on {top}")
    by_length = t.ordered_by == "median_tokens"
    if a.differs:
        text = f"{head} differs ({test}): largest on {top}, smallest on {low} ({spread})"
        if by_length and top == order[-1]:
            rising = all(sign * means[x] <= sign * means[y] for x, y in zip(order, order[1:]))
            text += ("; it grows with length" if rising else "; largest on the longest regime")
            text += (f" ({t.long_dataset} minus {t.short_dataset} "
                     f"{_d(t.diff_in_deltas)}, {100 * (1 - ctx.alpha):g}% CI "
                     f"[{_d(t.diff_ci_low)}, {_d(t.diff_ci_high)}])")
        elif not by_length:
            text += "; regime lengths are unknown, so nothing is said about length"
    else:
        text = (f"{head} is not shown to differ ({test}; {spread}), which does not "
                "make it the same")
    if t.excluded_not_learned:
        text += (f"; left out {_and(list(t.excluded_not_learned))}, where no arm was shown to "
                 "learn")
    return text + "."


def sequential_findings(section: SequentialSection | None, ctx: _Context) -> list[Finding]:
    """After an adaptive sweep, its sequential decisions first: anytime-valid at the level
    the launch fixed (alpha/m, Bonferroni over the family), the seeds each used, under the
    one guard rule. The fixed-n sentences after them are descriptive."""
    if not section:
        return []
    out = []
    for r in section.results:
        arm_label, _, ref_label = str(r.comparison).partition(" vs ")
        arm, ref = (ctx.axis.short(Variant(*x.split("/"))) for x in (arm_label, ref_label))
        d = r.decision
        how = (f"sequential {r.estimand}, anytime-valid at α/m = {r.alpha_each:.3g} "
               f"(m = {r.m}); {_count(r.n, 'seed')}, {r.wins} wins, {r.losses} "
               f"losses")
        if d in VERB:
            text = f"{arm} {VERB[d][0]} {ref} ({how})"
        elif d == NOT_LEARNED:
            text = f"neither {arm} nor {ref} beat chance, so this says nothing ({how})"
        else:
            text = f"{arm} vs {ref} is undecided ({how})"
        out.append(Finding(SEQUENTIAL, str(r.family), section.metric, "",
                           (arm_label,), ref_label, f"{r.family}: {text}."))
    return out


def summary(comps: Sequence[Comparison], ctx: _Context,
            differs: Sequence[_Across] = ()) -> Finding:
    """One line: what is decided, grouped by verdict, reference and the datasets it holds on,
    then how many comparisons are undecided and at how many seeds."""
    decided: dict[tuple, list[str]] = {}  # (verb kind, how, ref, where) -> datasets per arm
    per_arm: dict[tuple, list[str]] = {}
    undecided = []
    for c in comps:
        how, v = _how(c)
        if v is None:
            undecided.append(c)
            continue
        extra = ", ".join(p for p in (ctx.axis.title(c.group) if ctx.show_group else "",
                                      c.metric if ctx.show_metric else "") if p)
        per_arm.setdefault((v, how, c.baseline, extra, ctx.arm(c)), []).append(c.dataset)
    for (v, how, ref, extra, arm), datasets in per_arm.items():
        decided.setdefault((v, how, ref, extra, tuple(datasets)), []).append(arm)
    parts = [f"{_and(arms)} {VERB[v][len(arms) > 1]} {ref} on {_and(list(ds))}"
             + (f" ({extra})" if extra else "") + f" by {how}"
             for (v, how, ref, extra, ds), arms in decided.items()]
    ns = sorted({c.n for c in undecided})
    at = (f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}") if ns else ""
    chance = sum(_unlearned_key(c) is not None for c in undecided)
    why = (" (an arm did not beat chance)" if len(undecided) == 1 and chance else
           f" ({chance} of them because an arm did not beat chance)" if chance else "")
    if undecided and parts:
        parts.append("the other comparison is undecided" if len(undecided) == 1 else
                     f"the other {len(undecided)} comparisons are undecided")
        parts[-1] += f" at {at} seeds{why}"
    elif undecided:
        parts.append((f"none of the {len(comps)} comparisons is decided at {at} seeds"
                      if len(comps) > 1 else f"the comparison is undecided at {at} seeds") + why)
    for a in differs:  # where the effect grows: the question's second half
        parts.append(f"the effect of {ctx.arm(a.c0)} vs {a.c0.baseline} differs across "
                     f"regimes, largest on {a.top}")
    text = "; ".join(parts)
    # said once, not per sentence
    if any(caveats.has(c.verdict_flags, caveats.DESCRIPTIVE) for c in comps):
        text += ("; every verdict here is descriptive: the seed count was chosen adaptively "
                 "(the sweep's verdicts are the sequential decisions)")
    return Finding(SUMMARY, "", "", "", (), "", f"In short: {text}.")


def _how(c: Comparison) -> tuple[str, str | None]:
    """(by which estimand, the verdict it decides) for the summary; (.., None): undecided."""
    v, w = c.verdict, c.win_verdict
    if v in (BETTER, WORSE) and w == v:
        return "mean Δ and win rate", v
    if v in DECIDED:
        return "mean Δ", v
    if w in (BETTER, WORSE):
        return "win rate only", w
    return "", None


def _group(c: Comparison, ctx: _Context) -> str:
    return ctx.axis.title(c.group)


def _and(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def _count(k: int, noun: str) -> str:
    return f"{k} {noun}{'' if k == 1 else 's'}"


def _finite(x: object) -> bool:
    return x is not None and math.isfinite(float(x))


def _d(x: float) -> str:
    return f"{x:+.3f}" if _finite(x) else "—"


def _p(p: float) -> str:
    """A p-value in words' precision: two significant digits, '< 0.0001' below."""
    if not _finite(p):
        return "—"
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}"
