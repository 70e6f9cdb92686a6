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
from fusion_sweep.analysis.schema import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE

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
