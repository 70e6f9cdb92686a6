"""The answer's sentences at the edges of their rules (fusion_sweep.analysis.answer, issue 42):
which caveat goes with which verdict, when two learn rates are "the same", how a seed-count
range and a small p are written, and when the effect "grows with length" - on both sides of
each rule, and for a metric where lower is better.

Each test edits one field of a real comparison of the demo's report (`dataclasses.replace`),
so the sentence under test differs from its neighbour by that field alone."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from fusion_sweep.analysis import answer
from fusion_sweep.analysis.demo import synthetic_results
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.report import Settings, analyze
from fusion_sweep.analysis.regimes import DIFFERS
from fusion_sweep.analysis.schema import BETTER, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED, WORSE

EXCLUDES = "its 95% interval excludes 0, but the Holm p does not decide"
SMALLER = "its 95% interval excludes 0: a difference smaller than the margin"


@pytest.fixture(scope="module")
def report():
    return analyze(tidy(synthetic_results()), Settings(n_boot=200), {"kind": "file",
                                                                     "path": "demo"})


@pytest.fixture(scope="module")
def ctx(report) -> answer._Context:
    return answer._Context(report.settings.axis, False, False, 0.05)


@pytest.fixture(scope="module")
def plain(report):
    """A comparison with nothing to qualify it: no flags, no margin, equal learn rates."""
    c = report.comparisons[0]
    return replace(c, verdict_flags=(), equivalence_margin=None, tost_p_holm=float("nan"),
                   arm_learn_count=5, arm_learn_n=5, baseline_learn_count=5,
                   baseline_learn_n=5, t_ci_low=0.01, t_ci_high=0.03)


@pytest.mark.parametrize("verdict, said", [(INCONCLUSIVE, EXCLUDES), (BETTER, ""),
                                           (WORSE, ""), (EQUIVALENT, SMALLER)])
def test_an_interval_excluding_zero_is_said_only_where_the_verdict_does_not(
        plain, ctx, verdict: str, said: str) -> None:
    """An unadjusted interval that excludes 0 is worth a word beside `inconclusive` (the Holm
    p does not decide) and `equivalent` (a difference below the margin); beside better/worse
    it is what the verdict already says."""
    assert answer._caveats(replace(plain, verdict=verdict), ctx) == (f"; {said}" if said
                                                                     else "")
    # an interval that touches 0 is never said to exclude it
    assert answer._caveats(replace(plain, verdict=verdict, t_ci_low=0.0), ctx) == ""


@pytest.mark.parametrize("ref, arm, said", [
    ((5, 5), (5, 5), False), ((4, 8), (4, 6), True), ((4, 8), (5, 8), True),
    ((4, 8), (8, 8), True)])
def test_learn_rates_are_said_when_the_count_or_the_seeds_differ(plain, ctx, ref, arm,
                                                                 said: bool) -> None:
    c = replace(plain, baseline_learn_count=ref[0], baseline_learn_n=ref[1],
                arm_learn_count=arm[0], arm_learn_n=arm[1])
    want = (f"{c.baseline} learned on {ref[0]} of {ref[1]} seeds, {ctx.arm(c)} on {arm[0]} "
            f"of {arm[1]}")
    assert answer.learn_rates(c, ctx) == (want if said else "")


@pytest.mark.parametrize("p, said", [
    (math.nextafter(1e-4, 0), "< 0.0001"), (1e-4, "0.0001"),
    (math.nextafter(1e-4, 1), "0.0001"), (0.0123, "0.012"), (float("nan"), "—")])
def test_a_p_below_one_in_ten_thousand_is_written_as_a_bound(p: float, said: str) -> None:
    assert answer._p(p) == said


@pytest.mark.parametrize("ns, at", [((6,), "6"), ((5, 8), "5–8"), ((5, 6, 8), "5–8"),
                                    ((8, 5, 6), "5–8")])
def test_the_summary_gives_the_range_of_seeds_the_undecided_used(plain, ctx, ns, at) -> None:
    comps = [replace(plain, verdict=INCONCLUSIVE, win_verdict=INCONCLUSIVE, n=n,
                     dataset=f"d{i}") for i, n in enumerate(ns)]
    text = answer.summary(comps, ctx).sentence
    assert f"at {at} seeds." in text, text


def _regimes(plain, means: tuple[float, ...], higher_is_better: bool):
    """Three regimes, short to long, with these mean Δ; an interaction test that differs."""
    names = ("short", "medium", "long")
    comps = [replace(plain, dataset=d, mean_delta=m, higher_is_better=higher_is_better)
             for d, m in zip(names, means)]
    test = type("T", (), dict(metric=plain.metric, variant=plain.variant,
                              baseline_variant=plain.baseline_variant, datasets=names,
                              verdict=DIFFERS, ordered_by="median_tokens", p_holm=0.001,
                              long_dataset="long", short_dataset="short", diff_in_deltas=0.2,
                              diff_ci_low=0.1, diff_ci_high=0.3, excluded_not_learned=()))()
    return answer._across([test], comps)


@pytest.mark.parametrize("means, higher, top, grows", [
    ((0.0, 0.1, 0.2), True, "long", True),
    ((0.0, 0.0, 0.2), True, "long", True),  # level, then up: never falls, so it grows
    ((0.1, 0.0, 0.2), True, "long", False),  # falls first: largest on the longest only
    ((0.0, -0.1, -0.2), False, "long", True),  # lower is better: a falling Δ is a growing gain
    ((0.0, -0.1, -0.2), True, "short", None),  # the same Δ, higher better: largest on short
    ((-0.1, 0.0, -0.2), False, "long", False)])
def test_it_grows_with_length_when_the_gain_never_falls_from_short_to_long(
        plain, ctx, means, higher: bool, top: str, grows: bool | None) -> None:
    (a,) = _regimes(plain, means, higher)
    assert a.top == top
    text = answer._across_sentence(a, ctx)
    assert f"largest on {top}," in text
    assert ("; it grows with length (" in text) is (grows is True)
    assert ("; largest on the longest regime (" in text) is (grows is False)


# ------------------------------------------------------------ every sentence, word for word
# mutmut (issue 42) found the across-regime sentence and `_one`'s disagreeing and equivalent
# sentences checked only for a phrase or two: a dropped Holm p, a "2 - alpha" level or the
# "left out" clause overwriting the sentence survived. These pin each whole sentence.
MEAN = "mean Δ +0.020, 95% CI [+0.010, +0.030], Holm p 0.004"
WIN = "win rate 7/8, Holm p 0.07"


@pytest.fixture(scope="module")
def known(plain):
    """`plain` with round numbers, so each clause is written out here by hand."""
    return replace(plain, mean_delta=0.02, t_ci_low=0.01, t_ci_high=0.03, p_holm=0.004,
                   wins=7, losses=1, ties=0, lost_seeds=(), sign_p_holm=0.07, n=8,
                   higher_is_better=True, verdict=INCONCLUSIVE, win_verdict=INCONCLUSIVE)


@pytest.mark.parametrize("verdict, win, kind, text", [
    (BETTER, BETTER, BETTER, f"concat beats add ({MEAN}; {WIN})"),
    (WORSE, WORSE, WORSE, f"concat is worse than add ({MEAN}; {WIN})"),
    (BETTER, WORSE, "disagree", f"the estimands disagree: by mean Δ concat beats add ({MEAN}), "
                                f"by win rate it is worse than it ({WIN})"),
    (WORSE, BETTER, "disagree", f"the estimands disagree: by mean Δ concat is worse than add "
                                f"({MEAN}), by win rate it beats it ({WIN})"),
    (BETTER, INCONCLUSIVE, BETTER,
     f"concat beats add ({MEAN}); win rate undecided (7/8, Holm p 0.07)"),
    (WORSE, BETTER, "disagree", None),  # the row above, mirrored: said as disagreeing
    (EQUIVALENT, INCONCLUSIVE, EQUIVALENT,
     f"concat is equivalent to add within ±0.05 (TOST Holm p 0.003; {MEAN}); win rate "
     f"undecided (7/8, Holm p 0.07); its 95% interval excludes 0: a difference smaller than "
     f"the margin"),
    (EQUIVALENT, BETTER, EQUIVALENT,
     f"concat is equivalent to add within ±0.05 (TOST Holm p 0.003; {MEAN}); by win rate "
     f"better ({WIN}); its 95% interval excludes 0: a difference smaller than the margin"),
    (INCONCLUSIVE, BETTER, "disagree",
     f"by win rate concat beats add ({WIN}), but the mean Δ does not decide ({MEAN}): the two "
     f"estimands disagree; its 95% interval excludes 0, but the Holm p does not decide"),
    (INCONCLUSIVE, INCONCLUSIVE, INCONCLUSIVE,
     f"concat vs add is undecided at 8 seeds ({MEAN}; {WIN}); its 95% interval excludes 0, "
     f"but the Holm p does not decide")])
def test_each_verdict_pair_has_its_whole_sentence(known, ctx, verdict, win, kind,
                                                  text) -> None:
    c = replace(known, verdict=verdict, win_verdict=win, equivalence_margin=0.05,
                tost_p_holm=0.003 if verdict == EQUIVALENT else 0.5)
    f = answer._one(c, ctx)
    assert f.kind == kind
    if text is not None:
        tail = "; nor is it shown equivalent within ±0.05" if verdict == INCONCLUSIVE else ""
        assert f.sentence == f"synthetic-short: {text}{tail}.", f.sentence
    assert (f.dataset, f.metric, f.group, f.arms, f.reference) == (
        c.dataset, c.metric, "pe=learned", (c.variant,), c.baseline_variant)
    assert f.to_json()["arms"] == [c.variant]  # a list in the JSON, never a tuple


@pytest.mark.parametrize("n, said", [
    (0, "undecided: 0 usable pairs, no test"), (1, "undecided: 1 usable pair, no test"),
    (2, "undecided at 2 seeds (mean Δ +0.020 on every seed: no t-test without spread in Δ; "
        "win rate 7/8, Holm p 0.07)")])  # two pairs are a test, whatever it decides
def test_fewer_than_two_pairs_is_said_as_no_test(known, ctx, n: int, said: str) -> None:
    f = answer._one(replace(known, n=n, t_ci_low=float("nan"), t_ci_high=float("nan")), ctx)
    assert (f.kind, f.sentence) == (
        INCONCLUSIVE, f"synthetic-short: concat vs add is {said}."), f.sentence


def replace_test(t, **fields):
    """An interaction test like `t` (`_regimes`' stand-in) with these fields replaced."""
    names = [k for k in dir(t) if not k.startswith("_")]
    return type("T", (), {**{k: getattr(t, k) for k in names}, **fields})()


def _across_with(plain, means, higher: bool = True, **test):
    """`_regimes`' three regimes with these interaction-test fields replaced."""
    (a,) = _regimes(plain, means, higher)
    return replace(a, test=replace_test(a.test, **test))


HEAD = "Across regimes: the effect of concat vs add"
ANOVA = "Welch ANOVA of the per-seed Δ, estimand mean Δ per regime, Holm p 0.001"


@pytest.mark.parametrize("means, higher, test, alpha, text", [
    ((0.0, 0.1, 0.2), True, {}, 0.05,
     f"{HEAD} differs ({ANOVA}): largest on long, smallest on short (mean Δ +0.000 on short to "
     f"+0.200 on long); it grows with length (long minus short +0.200, 95% CI [+0.100, "
     f"+0.300])."),
    ((0.0, 0.1, 0.2), True, {}, 0.1,
     f"{HEAD} differs ({ANOVA}): largest on long, smallest on short (mean Δ +0.000 on short to "
     f"+0.200 on long); it grows with length (long minus short +0.200, 90% CI [+0.100, "
     f"+0.300])."),
    ((0.1, 0.0, 0.2), True, {}, 0.05,
     f"{HEAD} differs ({ANOVA}): largest on long, smallest on medium (mean Δ +0.000 on medium "
     f"to +0.200 on long); largest on the longest regime (long minus short +0.200, 95% CI "
     f"[+0.100, +0.300])."),
    ((0.0, -0.1, -0.2), False, {}, 0.05,
     f"{HEAD} differs ({ANOVA}): largest on long, smallest on short (mean Δ +0.000 on short to "
     f"-0.200 on long); it grows with length (long minus short +0.200, 95% CI [+0.100, "
     f"+0.300])."),
    ((0.0, 0.2, 0.1), True, {}, 0.05,  # largest in the middle: nothing about length
     f"{HEAD} differs ({ANOVA}): largest on medium, smallest on short (mean Δ +0.000 on short "
     f"to +0.200 on medium)."),
    ((0.0, 0.1, 0.2), True, {"ordered_by": "name"}, 0.05,
     f"{HEAD} differs ({ANOVA}): largest on long, smallest on short (mean Δ +0.000 on short to "
     f"+0.200 on long); regime lengths are unknown, so nothing is said about length."),
    ((0.0, 0.1, 0.2), True, {"verdict": "no difference shown"}, 0.05,
     f"{HEAD} is not shown to differ ({ANOVA}; mean Δ +0.000 on short to +0.200 on long), "
     f"which does not make it the same."),
    ((0.0, 0.1, 0.2), True, {"excluded_not_learned": ("tiny", "huge")}, 0.05,
     f"{HEAD} differs ({ANOVA}): largest on long, smallest on short (mean Δ +0.000 on short to "
     f"+0.200 on long); it grows with length (long minus short +0.200, 95% CI [+0.100, "
     f"+0.300]); left out tiny and huge, where no arm was shown to learn.")])
def test_the_across_regime_sentence_word_for_word(plain, report, means, higher: bool,
                                                   test: dict, alpha: float,
                                                   text: str) -> None:
    a = _across_with(plain, means, higher, **test)
    ctx = answer._Context(report.settings.axis, False, False, alpha)
    assert answer._across_sentence(a, ctx) == text


@pytest.mark.parametrize("group, metric, where", [
    (True, False, "pe=learned"), (False, True, "test_acc"), (True, True, "pe=learned, test_acc"),
    (("ressformer", "none"), False, "encoder=ressformer, pe=none")])  # ' · ' said as ', '
def test_the_across_regime_sentence_names_the_group_and_metric_only_when_there_are_several(
        plain, report, group: bool | tuple, metric: bool, where: str) -> None:
    if isinstance(group, tuple):
        plain = replace(plain, group=group)
    a = _across_with(plain, (0.0, 0.1, 0.2), True)
    ctx = answer._Context(report.settings.axis, metric, group, 0.05)
    assert answer._across_sentence(a, ctx).startswith(
        f"Across regimes ({where}): the effect of concat vs add differs (")


@pytest.mark.parametrize("verdict, tost_p, said", [
    (BETTER, 0.049, True), (WORSE, 0.049, True),
    (BETTER, 0.05, False),  # a TOST Holm p at alpha is not below it
    (INCONCLUSIVE, 0.049, False), (EQUIVALENT, 0.049, False)])  # said only beside better/worse
def test_a_real_but_small_difference_is_said_beside_better_and_worse(known, ctx, verdict: str,
                                                                     tost_p: float,
                                                                     said: bool) -> None:
    c = replace(known, verdict=verdict, equivalence_margin=0.05, tost_p_holm=tost_p)
    clause = (f"also equivalent within ±0.05 (TOST Holm p {tost_p:g}): the difference is real "
              "but small")
    assert (clause in answer._caveats(c, ctx)) is said


@pytest.mark.parametrize("low, high, excludes", [
    (0.01, 0.03, True), (-0.03, -0.01, True), (0.0, 0.03, False), (-0.03, 0.0, False),
    (-0.01, 0.01, False)])
def test_an_interval_excludes_zero_only_strictly_on_either_side(known, ctx, low: float,
                                                                high: float,
                                                                excludes: bool) -> None:
    c = replace(known, t_ci_low=low, t_ci_high=high)
    assert answer._caveats(c, ctx) == ("; " + EXCLUDES if excludes else "")


@pytest.mark.parametrize("withheld, nor", [(None, True), ("better", True), (EQUIVALENT, False)])
def test_not_shown_equivalent_is_said_once(known, ctx, withheld: str | None,
                                           nor: bool) -> None:
    """An undecided comparison with a margin says it is not shown equivalent; when the guard
    withheld the equivalence, its own clause says so instead (a withheld better does not)."""
    from fusion_sweep.analysis import caveats

    flags = () if withheld is None else (
        caveats.Caveat(caveats.WITHHELD, withheld=withheld, why="add did not beat chance"),)
    c = replace(known, verdict=INCONCLUSIVE, equivalence_margin=0.05, tost_p_holm=0.2,
                t_ci_low=-0.01, verdict_flags=flags)
    text = answer._caveats(c, ctx)
    assert ("nor is it shown equivalent within ±0.05" in text) is nor, text
    assert ("not shown equivalent: add did not beat chance" in text) is (withheld == EQUIVALENT)


@pytest.mark.parametrize("ties, lost, more", [
    (0, (), ""), (1, (), " (1 tie)"), (2, (), " (2 ties)"),
    (0, (3,), " (1 seed lost to a non-finite test_acc, counted against it)"),
    (1, (3, 4), " (1 tie; 2 seeds lost to a non-finite test_acc, counted against it)")])
def test_the_win_clause_says_ties_and_lost_seeds(known, ties: int, lost: tuple,
                                                 more: str) -> None:
    c = replace(known, ties=ties, lost_seeds=lost)
    assert answer._win_clause(c) == f"win rate 7/8{more}, Holm p 0.07"


@pytest.mark.parametrize("names, said", [(["a"], "a"), (["a", "b"], "a and b"),
                                         (["a", "b", "c"], "a, b and c")])
def test_names_are_joined_as_a_sentence_would(names: list[str], said: str) -> None:
    assert answer._and(names) == said


@pytest.mark.parametrize("x, said", [(0.1234, "+0.123"), (-0.0004, "-0.000"),
                                     (float("nan"), "—"), (None, "—"), (float("inf"), "—")])
def test_a_delta_is_signed_with_three_decimals_and_a_dash_when_not_finite(x, said) -> None:
    assert answer._d(x) == said


def test_several_caveats_are_joined_each_after_a_semicolon(known, ctx) -> None:
    c = replace(known, arm_learn_count=8, arm_learn_n=8, baseline_learn_count=4,
                baseline_learn_n=8)
    assert answer._caveats(c, ctx) == (f"; add learned on 4 of 8 seeds, concat on 8 of 8; "
                                       f"{EXCLUDES}")


@pytest.mark.parametrize("level, said", [(0.1, "0.100"), (float("nan"), "unknown")])
def test_learn_states_without_counts_say_the_chance_level_or_unknown(known, ctx, level: float,
                                                                     said: str) -> None:
    c = replace(known, arm_learn_count=None, arm_learn_n=None, baseline_learn_count=None,
                baseline_learn_n=None, learned="yes", baseline_learned="no", chance_level=level)
    assert answer.learn_rates(c, ctx) == f"add did not beat chance ({said}), concat did"


def _report_of(report, comps, metrics=("test_acc",), tests=()):
    """What `findings` reads of a report, with these comparisons, metrics and interaction
    tests."""
    from types import SimpleNamespace

    s = SimpleNamespace(axis=report.settings.axis, alpha=0.05, metrics=tuple(metrics))
    return SimpleNamespace(comparisons=list(comps), settings=s,
                           interaction=SimpleNamespace(tests=list(tests)), sequential=None)


@pytest.mark.parametrize("metrics, groups, where", [
    (("test_acc",), [("standard", "learned")], "synthetic-short"),
    (("test_acc", "test_loss"), [("standard", "learned")], "synthetic-short, test_acc"),
    (("test_acc",), [("standard", "learned"), ("standard", "none")],
     "synthetic-short, pe=learned"),
    (("test_acc",), [("ressformer", "learned"), ("standard", "none")],
     "synthetic-short, encoder=ressformer, pe=learned"),
    (("test_acc", "test_loss"), [("standard", "learned"), ("standard", "none")],
     "synthetic-short, pe=learned, test_acc")])
def test_a_sentence_names_the_metric_and_group_from_two_of_them_on(report, known, metrics,
                                                                   groups, where) -> None:
    comps = [replace(known, group=g) for g in groups]
    first = answer.findings(_report_of(report, comps, metrics))[0]
    assert first.sentence.startswith(f"{where}: concat vs add is undecided"), first.sentence


def test_no_comparison_no_answer_and_a_differing_effect_reaches_the_summary(
        report, plain) -> None:
    assert answer.findings(_report_of(report, [])) == ()
    (a,) = _regimes(plain, (0.0, 0.1, 0.2), True)
    out = answer.findings(_report_of(report, [a.c0], tests=[a.test]))
    assert out[-1].kind == "summary"
    # the one comparison's dataset is in the test, but the test needs two regimes to be told
    assert "differs across regimes" not in out[-1].sentence
    comps = [replace(plain, dataset=d, mean_delta=m)
             for d, m in zip(("short", "medium", "long"), (0.0, 0.1, 0.2))]
    out = answer.findings(_report_of(report, comps, tests=[a.test]))
    across = out[-2]
    assert (across.kind, across.dataset, across.metric, across.group, across.arms,
            across.reference) == (answer.ACROSS, "", "test_acc", "pe=learned", (plain.variant,),
                                  plain.baseline_variant)
    assert out[-1].sentence.endswith(
        "the effect of concat vs add differs across regimes, largest on long."), out[-1].sentence


@pytest.mark.parametrize("decision, n, text", [
    (BETTER, 1, "concat beats add ({how})"), (WORSE, 8, "concat is worse than add ({how})"),
    ("not learned", 8, "neither concat nor add beat chance, so this says nothing ({how})"),
    (INCONCLUSIVE, 2, "concat vs add is undecided ({how})")])
def test_a_sequential_decision_word_for_word(report, ctx, decision: str, n: int,
                                             text: str) -> None:
    from types import SimpleNamespace

    from fusion_sweep.analysis.sequential import DEFAULT_METHOD, SequentialResult

    r = SequentialResult(family="synthetic-long",
                         comparison="standard/learned/concat vs standard/learned/add", n=n,
                         mean_delta=0.1, estimate=0.8, cs_low=0.6, cs_high=0.9,
                         decision=decision, p_anytime=0.001, alpha=0.05, alpha_each=0.0125,
                         m=4, margin=None, higher_is_better=True, path=None,
                         method=DEFAULT_METHOD, wins=n - 1, losses=1, ties=0)
    (f,) = answer.sequential_findings(SimpleNamespace(metric="test_acc", results=(r,)), ctx)
    how = (f"sequential {r.estimand}, anytime-valid at α/m = 0.0125 (m = 4); {n} "
           f"seed{'s' if n != 1 else ''}, {n - 1} wins, 1 losses")
    assert f.sentence == f"synthetic-long: {text.format(how=how)}.", f.sentence
    assert (f.kind, f.dataset, f.metric, f.group, f.arms, f.reference) == (
        answer.SEQUENTIAL, "synthetic-long", "test_acc", "", ("standard/learned/concat",),
        "standard/learned/add")


def _arm(c, fusion: str, **kw):
    return replace(c, variant=f"{c.encoder}/{c.pe}/{fusion}", fusion=fusion, **kw)


@pytest.mark.parametrize("rows, said", [
    ([("concat", "d0", BETTER, BETTER)], "concat beats add on d0 by mean Δ and win rate"),
    ([("concat", "d0", WORSE, WORSE)], "concat is worse than add on d0 by mean Δ and win rate"),
    ([("concat", "d0", BETTER, INCONCLUSIVE)], "concat beats add on d0 by mean Δ"),
    ([("concat", "d0", EQUIVALENT, INCONCLUSIVE)], "concat is equivalent to add on d0 by mean Δ"),
    ([("concat", "d0", INCONCLUSIVE, WORSE)], "concat is worse than add on d0 by win rate only"),
    ([("concat", "d0", BETTER, BETTER), ("concat", "d1", BETTER, BETTER)],
     "concat beats add on d0 and d1 by mean Δ and win rate"),
    ([("concat", "d0", BETTER, BETTER), ("gate", "d0", BETTER, BETTER)],
     "concat and gate beat add on d0 by mean Δ and win rate"),
    ([("concat", "d0", BETTER, BETTER), ("gate", "d0", BETTER, BETTER),
      ("gate", "d1", BETTER, BETTER)],  # not the same datasets: two clauses
     "concat beats add on d0 by mean Δ and win rate; gate beats add on d0 and d1 by mean Δ "
     "and win rate"),
    ([("concat", "d0", BETTER, BETTER), ("concat", "d1", BETTER, INCONCLUSIVE)],
     "concat beats add on d0 by mean Δ and win rate; concat beats add on d1 by mean Δ"),
    ([("concat", "d0", INCONCLUSIVE, INCONCLUSIVE)], "the comparison is undecided at 8 seeds"),
    ([("concat", "d0", NOT_LEARNED, INCONCLUSIVE)],
     "the comparison is undecided at 8 seeds (an arm did not beat chance)"),
    ([("concat", "d0", INCONCLUSIVE, INCONCLUSIVE), ("concat", "d1", INCONCLUSIVE, INCONCLUSIVE)],
     "none of the 2 comparisons is decided at 8 seeds"),
    ([("concat", "d0", BETTER, BETTER), ("concat", "d1", INCONCLUSIVE, INCONCLUSIVE)],
     "concat beats add on d0 by mean Δ and win rate; the other comparison is undecided at 8 "
     "seeds"),
    ([("concat", "d0", BETTER, BETTER), ("concat", "d1", NOT_LEARNED, INCONCLUSIVE)],
     "concat beats add on d0 by mean Δ and win rate; the other comparison is undecided at 8 "
     "seeds (an arm did not beat chance)"),
    ([("concat", "d0", BETTER, BETTER), ("gate", "d0", WORSE, WORSE),
      ("concat", "d1", INCONCLUSIVE, INCONCLUSIVE)],  # the seeds go after the last clause
     "concat beats add on d0 by mean Δ and win rate; gate is worse than add on d0 by mean Δ and "
     "win rate; the other comparison is undecided at 8 seeds"),
    ([("concat", "d0", BETTER, BETTER), ("concat", "d1", NOT_LEARNED, INCONCLUSIVE),
      ("concat", "d2", INCONCLUSIVE, INCONCLUSIVE)],
     "concat beats add on d0 by mean Δ and win rate; the other 2 comparisons are undecided at "
     "8 seeds (1 of them because an arm did not beat chance)"),
    ([("concat", "d0", NOT_LEARNED, INCONCLUSIVE), ("concat", "d1", NOT_LEARNED, INCONCLUSIVE)],
     "none of the 2 comparisons is decided at 8 seeds (2 of them because an arm did not beat "
     "chance)")])
def test_the_summary_word_for_word(known, ctx, rows, said: str) -> None:
    comps = [_arm(known, f, dataset=d, verdict=v, win_verdict=w) for f, d, v, w in rows]
    assert answer.summary(comps, ctx).sentence == f"In short: {said}."


@pytest.mark.parametrize("group, metric, extra", [
    (True, False, " (pe=learned)"), (False, True, " (test_acc)"),
    (True, True, " (pe=learned, test_acc)")])
def test_the_summary_names_the_group_and_metric_when_there_are_several(
        known, report, group: bool, metric: bool, extra: str) -> None:
    ctx = answer._Context(report.settings.axis, metric, group, 0.05)
    c = replace(known, verdict=BETTER, win_verdict=BETTER)
    assert answer.summary([c], ctx).sentence == (
        f"In short: concat beats add on synthetic-short{extra} by mean Δ and win rate.")


def test_the_summary_says_once_that_an_adaptive_sweeps_verdicts_are_descriptive(
        known, ctx) -> None:
    from fusion_sweep.analysis import caveats

    flag = (caveats.Caveat(caveats.DESCRIPTIVE),)
    comps = [replace(known, verdict=BETTER, win_verdict=BETTER, verdict_flags=flag),
             replace(known, dataset="d1", verdict=BETTER, win_verdict=BETTER)]
    assert answer.summary(comps, ctx).sentence == (
        "In short: concat beats add on synthetic-short and d1 by mean Δ and win rate; every "
        "verdict here is descriptive: the seed count was chosen adaptively (the sweep's "
        "verdicts are the sequential decisions).")
    assert "descriptive" not in answer.summary(comps[1:], ctx).sentence
    f = answer.summary(comps, ctx)  # the summary is about no one comparison
    assert (f.kind, f.dataset, f.metric, f.group, f.arms, f.reference) == (
        answer.SUMMARY, "", "", "", (), "")


def test_each_arm_across_regimes_reads_its_own_comparisons(plain) -> None:
    """Two arms on the same three regimes, and a test of an arm with no comparisons first:
    each arm's across-regime reading holds its own means and names its own comparison (a
    test that cannot be read is skipped, not the end of the list)."""
    names = ("short", "medium", "long")
    concat = [replace(plain, dataset=d, mean_delta=m) for d, m in zip(names, (0.0, 0.1, 0.2))]
    gate = [_arm(plain, "gate", dataset=d, mean_delta=m) for d, m in zip(names, (0.3, 0.2, 0.1))]
    (a,) = _regimes(plain, (0.0, 0.1, 0.2), True)
    tests = [replace_test(a.test, variant=v) for v in (
        "standard/learned/none", plain.variant, gate[0].variant)]
    out = answer._across(tests, concat + gate)
    assert [(x.c0.variant, dict(x.means), x.top, x.low) for x in out] == [
        (plain.variant, {"short": 0.0, "medium": 0.1, "long": 0.2}, "long", "short"),
        (gate[0].variant, {"short": 0.3, "medium": 0.2, "long": 0.1}, "short", "long")]



def test_a_finding_of_an_unknown_kind_is_a_bug_named_as_such() -> None:
    with pytest.raises(AssertionError, match=r"answer kind 'verdict' not in \("):
        answer.Finding("verdict", "", "", "", (), "", "x")
