"""docs/sequential.md's rules at their boundary value and one step either side (issue 42,
item 4): "excludes 0" (lower > 0, upper < 0), "strictly inside (−margin, +margin)", "the
budget is spent when seeds_run >= max_seeds" and "at most seed_batch more", "at least 2
seeds", "every delta within [−1, 1]" (betting), "0 is outside the running CS at level a
exactly when p_n <= a", and the win rate's "1/2 rejected when M_t(1/2) >= 1/α" (all-win
sequences decide at n = 11 at α/6: 2ⁿ/(n + 1) >= 120, and not at n = 10).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from fusion_sweep.analysis import sequential as sq
from fusion_sweep.analysis.schema import AnalysisError
from fusion_sweep.analysis.stats import DELTA_DECIMALS

BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = "better", "worse", "equivalent", "inconclusive"
MARGIN = 0.01
TINY = 1e-12


@pytest.mark.parametrize("low, expected", [(-TINY, INCONCLUSIVE), (0.0, INCONCLUSIVE),
                                           (TINY, BETTER)])
def test_better_needs_the_lower_end_above_zero(low: float, expected: str) -> None:
    """sequential.md, rule 1: better/worse only if the CS excludes 0; touching 0 does not."""
    assert sq.sequential_decision(low, 0.5, None, True) == expected
    mirrored = {BETTER: WORSE}.get(expected, expected)
    assert sq.sequential_decision(-0.5, -low, None, True) == mirrored
    # a lower-is-better metric: the same interval is the other verdict
    assert sq.sequential_decision(low, 0.5, None, False) == {BETTER: WORSE}.get(expected,
                                                                               expected)


@pytest.mark.parametrize("edge, expected", [(MARGIN - 1e-9, EQUIVALENT), (MARGIN, INCONCLUSIVE),
                                            (MARGIN + 1e-9, INCONCLUSIVE)])
def test_equivalent_needs_the_cs_strictly_inside_the_margin(edge: float, expected: str) -> None:
    """sequential.md, rule 2: the whole CS strictly inside (−margin, +margin), on each side."""
    assert sq.sequential_decision(-0.001, edge, MARGIN, True) == expected  # upper end
    assert sq.sequential_decision(-edge, 0.001, MARGIN, True) == expected  # lower end


@pytest.mark.parametrize("low, high, expected", [(0.02, 0.02 - 1e-9, INCONCLUSIVE),
                                                 (0.02, 0.02, BETTER)])
def test_an_empty_intersection_decides_nothing_a_point_does(low: float, high: float,
                                                             expected: str) -> None:
    assert sq.sequential_decision(low, high, MARGIN, True) == expected


@pytest.mark.parametrize("n, decided", [(10, False), (11, True), (12, True)])
def test_all_wins_decide_the_win_rate_at_eleven_seeds_at_alpha_over_six(n: int,
                                                                         decided: bool) -> None:
    """sequential.md: at α/6 all-win sequences decide at n = 11 (2ⁿ/(n + 1) >= 120)."""
    alpha = 0.05 / 6
    assert (2 ** n / (n + 1) >= 6 / 0.05) is decided  # the documented arithmetic itself
    dec = sq.winrate_decisions(np.full(n, 0.02), alpha, True)
    assert (dec[-1] == BETTER) is decided
    assert (sq.winrate_decisions(-np.full(n, 0.02), alpha, True)[-1] == WORSE) is decided
    # the same M_t(1/2) as the anytime p: rejected exactly when p <= alpha
    assert bool(sq.winrate_p_values(np.full(n, 0.02))[-1] <= alpha) is decided


def test_the_win_rate_rejects_half_when_the_evalue_reaches_one_over_alpha() -> None:
    """`M_t(1/2) >= 1/α` includes equality: at α = 1/M_t itself it rejects, one step up not."""
    d = np.full(11, 0.02)
    e = float(np.exp(sq.winrate_log_evalue(d)[-1]))  # 2^11 / 12
    at = 1.0 / e
    for alpha, decided in ((math.nextafter(at, 1), True), (at, True),
                           (at * (1 - 1e-9), False)):
        assert (sq.winrate_decisions(d, alpha, True)[-1] == BETTER) is decided, alpha


@pytest.mark.parametrize("seeds_run, undecided, add", [(18, True, 2), (19, True, 1),
                                                       (20, False, 0), (21, False, 0)])
def test_the_seed_budget_is_spent_at_max_seeds(seeds_run: int, undecided: bool,
                                                add: int) -> None:
    """stopping_rule: a family is exhausted when seeds_run >= max_seeds, and otherwise gets
    min(seed_batch, max_seeds - seeds_run) more seeds."""
    fams = {"f": {"c": np.tile([0.01, -0.01], 5)}}  # 10 deltas, half won: undecided
    plan = sq.stopping_rule(fams, max_seeds=20, seed_batch=5, seeds_run={"f": seeds_run})
    assert (plan.undecided == ("f",)) is undecided
    assert (plan.exhausted == ("f",)) is (not undecided)
    assert plan.seeds_to_add.get("f", 0) == add and plan.stop is (not undecided)


@pytest.mark.parametrize("seeds_run, add", [(10, 5), (14, 5), (15, 5), (16, 4)])
def test_a_round_adds_at_most_seed_batch_seeds(seeds_run: int, add: int) -> None:
    fams = {"f": {"c": np.tile([0.01, -0.01], 5)}}
    plan = sq.stopping_rule(fams, max_seeds=20, seed_batch=5, seeds_run={"f": seeds_run})
    assert plan.seeds_to_add["f"] == add


@pytest.mark.parametrize("max_seeds, ok", [(1, False), (2, True), (3, True)])
def test_max_seeds_is_at_least_two(max_seeds: int, ok: bool) -> None:
    fams = {"f": {"c": [0.01]}}
    if ok:
        assert sq.stopping_rule(fams, max_seeds=max_seeds).max_seeds == max_seeds
    else:
        with pytest.raises(AnalysisError, match=r"max_seeds must be an integer >= 2"):
            sq.stopping_rule(fams, max_seeds=max_seeds)


@pytest.mark.parametrize("batch, ok", [(0, False), (1, True)])
def test_seed_batch_is_at_least_one(batch: int, ok: bool) -> None:
    fams = {"f": {"c": [0.01, -0.01]}}
    if ok:
        assert sq.stopping_rule(fams, seed_batch=batch).seeds_to_add["f"] == 1
    else:
        with pytest.raises(AnalysisError, match=r"seed_batch must be an integer >= 1"):
            sq.stopping_rule(fams, seed_batch=batch)


@pytest.mark.parametrize("m, ok", [(1, False), (2, True), (3, True)])
def test_m_counts_at_least_every_comparison_passed_in(m: int, ok: bool) -> None:
    fams = {"f": {"a": [0.01], "b": [0.02]}}
    if ok:
        assert sq.stopping_rule(fams, m=m).m == m
    else:
        with pytest.raises(AnalysisError, match=r"m must count every comparison passed in \(2\)"):
            sq.stopping_rule(fams, m=m)


@pytest.mark.parametrize("k, ok", [(1, False), (2, True), (3, True)])
def test_seeds_run_is_never_below_the_deltas_given(k: int, ok: bool) -> None:
    fams = {"f": {"a": [0.01, 0.02]}}
    if ok:
        assert sq.stopping_rule(fams, seeds_run={"f": k}).seeds_run["f"] == k
    else:
        with pytest.raises(AnalysisError, match=r"seeds_run\['f'\] = 1 is below the 2 deltas"):
            sq.stopping_rule(fams, seeds_run={"f": k})


STEP = 10.0 ** -DELTA_DECIMALS  # deltas are rounded to this grid before any test


@pytest.mark.parametrize("edge, ok", [(1.0 - STEP, True), (1.0, True), (1.0 + STEP, False)])
def test_betting_takes_every_delta_within_minus_one_and_one(edge: float, ok: bool) -> None:
    for d in ([0.0, edge], [0.0, -edge]):
        if ok:
            z = sq.betting_unit_deltas(d)
            assert z.min() >= 0.0 and z.max() <= 1.0
        else:
            with pytest.raises(AnalysisError, match=r"every delta within \[-1, 1\]"):
                sq.betting_unit_deltas(d)


@pytest.mark.parametrize("alpha, ok", [(0.0, False), (TINY, True), (1 - 1e-9, True), (1.0, False)])
def test_alpha_is_in_the_open_interval(alpha: float, ok: bool) -> None:
    if ok:
        assert sq.check_alpha(alpha) == alpha
    else:
        with pytest.raises(AnalysisError, match=r"alpha must be in the open interval \(0, 1\)"):
            sq.check_alpha(alpha)


@pytest.mark.parametrize("margin, ok", [(0.0, False), (TINY, True), (-TINY, False)])
def test_a_margin_is_above_zero(margin: float, ok: bool) -> None:
    if ok:
        assert sq.check_margin(margin) == margin
    else:
        with pytest.raises(AnalysisError, match=r"equivalence margin must be None or a finite"):
            sq.check_margin(margin)


@pytest.mark.parametrize("phi, ok", [(0.0, False), (TINY, True)])
def test_phi_is_above_zero(phi: float, ok: bool) -> None:
    if ok:
        assert sq.check_phi(phi) == phi
    else:
        with pytest.raises(AnalysisError, match=r"phi \(mixture precision\) must be a finite"):
            sq.check_phi(phi)


def test_the_normal_mixture_excludes_zero_exactly_when_its_p_is_at_most_the_level() -> None:
    """sequential.md: "0 is outside the running CS at level a exactly when p_n <= a"."""
    d = np.array([0.06, 0.05, 0.07, 0.04, 0.06, 0.05, 0.06])
    p = float(sq.anytime_p_values(d)[-1])
    for a, outside in ((math.nextafter(p, 1) * (1 + 1e-9), True), (p * (1 - 1e-6), False)):
        cs = sq.confidence_sequence(d, a)
        assert bool(cs.low[-1] > 0) is outside, (a, cs.low[-1])


@pytest.mark.parametrize("run, ok", [(-1, False), (0, True), (1, True)])
def test_a_family_may_have_run_zero_seeds_never_fewer(run: int, ok: bool) -> None:
    """stopping_rule's seeds_run: at least 0 (a family planned but not yet run gets its
    first batch), and never below the deltas given (none here)."""
    if not ok:
        with pytest.raises(AnalysisError, match=r"^seeds_run\['f'\] must be an integer >= 0, "
                                                r"got -1$"):
            sq.stopping_rule({"f": {"c": []}}, seeds_run={"f": run}, max_seeds=4,
                             seed_batch=2)
        return
    plan = sq.stopping_rule({"f": {"c": []}}, seeds_run={"f": run}, max_seeds=4, seed_batch=2)
    assert plan.seeds_run == {"f": run} and plan.seeds_to_add == {"f": 2}
    assert plan.results[0].n == 0 and plan.results[0].decision == "inconclusive"
