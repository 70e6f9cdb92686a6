"""Anytime-valid confidence sequences and the adaptive-seed stopping rule (fusion_sweep.analysis.sequential)."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from fusion_sweep.analysis import sequential as sq
from fusion_sweep.analysis import sequential_report as sr
from fusion_sweep.analysis.schema import (
    BETTER, DESCRIPTIVE_LABEL, EQUIVALENT, INCONCLUSIVE, SEQUENTIAL_KEYS, VERDICTS, WORSE,
    AnalysisError,
)

NM = sq.NormalMixture.name  # the tests of the normal-mixture method name it (not the default)


def _paths(seed: int, paths: int, n: int, mu: float, sigma: float) -> np.ndarray:
    return np.random.default_rng(seed).normal(mu, sigma, (paths, n))  # (paths, n)


def test_coverage_is_uniform_over_n() -> None:
    """P(mu outside the CS at SOME n <= 50) <= alpha, over 400 simulated paths.

    The running intersection is monotone, so a miss at any n shows at n = 50. Tolerance:
    if the true miss rate were alpha = 0.05, 400 paths give SD 0.011; the bound alpha +
    2.33 SD (one-sided 99%) = 0.076 fails a CS that misses as often as naive t-intervals.
    """
    mu, alpha = 0.07, 0.05
    d = _paths(0, 400, 50, mu, 0.1)
    low, high = sq.cs_bounds(d, alpha)
    miss = np.mean((low[:, -1] > mu) | (high[:, -1] < mu))
    assert miss <= alpha + 2.33 * math.sqrt(alpha * (1 - alpha) / 400)
    # The check has teeth: fixed-n t-intervals looked at every n miss far more often.
    n = np.arange(2, 51)
    m = np.cumsum(d, 1)[:, 1:] / n
    s = np.array([[d[i, :k].std(ddof=1) for k in n] for i in range(d.shape[0])])
    half = sps.t.isf(alpha / 2, n - 1) * s / np.sqrt(n)
    naive_miss = np.mean(np.any(np.abs(m - mu) > half, axis=1))
    assert naive_miss > 0.15 > miss


def test_closed_form_matches_the_mixture_integral() -> None:
    """log BF_n = log of the Gaussian-mixture x right-Haar marginal likelihood ratio,
    integrated numerically on a grid over (mu, log sigma): dsigma/sigma = d log sigma."""
    d = np.array([0.06, -0.02, 0.11, 0.04, 0.09])
    phi, mu0, n = 0.25, 0.01, 5
    ss, mean = float(((d - d.mean()) ** 2).sum()), float(d.mean())
    u = np.linspace(np.log(3e-3), np.log(3.0), 1201)[:, None]  # log sigma
    mu = np.linspace(-1.0, 1.0, 2001)[None, :]
    sig = np.exp(u)

    def loglik(m: np.ndarray) -> np.ndarray:
        return -n * np.log(sig) - (ss + n * (mean - m) ** 2) / (2 * sig**2)

    h1 = loglik(mu) + sps.norm.logpdf(mu, mu0, sig / math.sqrt(phi))  # (u, mu)
    h0 = loglik(np.array([[mu0]]))[:, 0]  # (u,)
    top = h1.max()
    num = np.trapezoid(np.trapezoid(np.exp(h1 - top), mu[0], axis=1), u[:, 0])
    den = np.trapezoid(np.exp(h0 - top), u[:, 0])
    assert sq.mixture_log_bf(d, mu0, phi)[-1] == pytest.approx(math.log(num / den), abs=1e-4)
    assert sq.mixture_log_bf(d, mu0, phi)[0] == 0.0  # BF_1 = 1: the martingale starts at 1


def test_cs_is_the_set_where_bf_is_below_one_over_alpha() -> None:
    d = _paths(1, 1, 12, 0.05, 0.1)[0]
    low, high = sq.cs_bounds(d, 0.05, intersect=False)
    for bound in (low[-1], high[-1]):
        assert math.exp(sq.mixture_log_bf(d, bound)[-1]) == pytest.approx(20.0, rel=1e-9)
    # Duality: 0 outside the running CS at level a exactly when the anytime p <= a.
    cs = sq.confidence_sequence(d, 0.05)
    for a in (0.5, 0.2, 0.05, 0.01):
        out = sq.confidence_sequence(d, a)
        excluded = (out.low > 0) | (out.high < 0)
        assert np.array_equal(excluded, cs.p_anytime <= a)


def test_running_intersection_and_vectorized_bounds() -> None:
    d = _paths(2, 5, 20, 0.0, 1.0)
    low, high = sq.cs_bounds(d, 0.1)
    assert np.all(low[:, 1:] >= low[:, :-1]) and np.all(high[:, 1:] <= high[:, :-1])
    for row, lo, hi in zip(d, low, high):
        cs = sq.confidence_sequence(row, 0.1)
        np.testing.assert_array_equal(cs.low, lo)
        np.testing.assert_array_equal(cs.high, hi)
        assert np.all(cs.raw_low <= cs.low) and np.all(cs.raw_high >= cs.high)


def test_unbounded_before_a_variance_estimate_and_wider_than_fixed_n() -> None:
    assert np.isinf(sq.radius_multiplier(1, 0.05))
    assert np.isinf(sq.radius_multiplier(3, 0.05 / 6))  # too few seeds at alpha/6
    n = np.arange(5, 51)
    mult = sq.radius_multiplier(n, 0.05)
    assert np.all(np.isfinite(mult)) and np.all(mult > sps.t.isf(0.025, n - 1))
    same = sq.cs_bounds(np.full(8, 0.02), 0.05)  # SD 0: no information, inconclusive
    assert np.all(np.isinf(same[0])) and np.all(np.isinf(same[1]))
    assert sq.sequential_result(np.full(8, 0.02), margin=0.05,
                                method=NM).decision == INCONCLUSIVE


def test_bonferroni_width_grows_with_m() -> None:
    d = _paths(3, 1, 20, 0.1, 0.1)[0]
    widths = [sq.sequential_result(d, m=m, method=NM).path for m in (1, 6, 30)]
    w = [p.high[-1] - p.low[-1] for p in widths]
    assert w[0] < w[1] < w[2]
    assert sq.bonferroni_alpha(0.05, 6) == pytest.approx(0.05 / 6)


@pytest.mark.parametrize("low, high, margin, hib, expected", [
    (0.01, 0.05, None, True, BETTER),
    (0.01, 0.05, None, False, WORSE),
    (-0.05, -0.01, 0.1, True, WORSE),
    (-0.004, 0.004, 0.01, True, EQUIVALENT),
    (-0.004, 0.012, 0.01, True, INCONCLUSIVE),  # sticks out of the margin on one side
    (-0.01, 0.004, 0.01, True, INCONCLUSIVE),  # touching the margin is not inside it
    (-0.004, 0.004, None, True, INCONCLUSIVE),  # no margin: never equivalent
    (0.001, 0.004, 0.01, True, BETTER),  # excludes 0 first, as fusion_sweep.analysis.stats.verdict
    (-math.inf, math.inf, 0.01, True, INCONCLUSIVE),
    (0.03, 0.02, 0.01, True, INCONCLUSIVE),  # empty intersection: decides nothing
])
def test_sequential_decision(low: float, high: float, margin: float | None, hib: bool,
                             expected: str) -> None:
    got = sq.sequential_decision(low, high, margin, hib)
    assert got == expected and got in VERDICTS


def test_stopping_rule_stops_on_clear_effects_and_continues_when_undecided() -> None:
    clear = {("short", "sinusoidal"): {"concat": _paths(4, 1, 10, 0.3, 0.05)[0],
                                       "gate": _paths(5, 1, 10, -0.3, 0.05)[0]}}
    plan = sq.stopping_rule(clear, alpha=0.05, margin=0.01, method=NM)
    assert plan.stop and not plan.undecided and not plan.seeds_to_add
    assert [r.decision for r in plan.results] == [BETTER, WORSE]
    assert plan.m == 2 and plan.alpha_each == pytest.approx(0.025)

    mixed = {**clear, ("long", "sinusoidal"): {"concat": _paths(6, 1, 10, 0.0, 0.1)[0],
                                               "gate": _paths(7, 1, 10, 0.3, 0.05)[0]}}
    plan = sq.stopping_rule(mixed, alpha=0.05, margin=0.01, seed_batch=5, max_seeds=50,
                            method=NM)
    assert not plan.stop
    assert plan.undecided == (("long", "sinusoidal"),)  # only the undecided family grows
    assert plan.seeds_to_add == {("long", "sinusoidal"): 5}
    assert plan.for_family(("long", "sinusoidal"))[0].decision == INCONCLUSIVE
    assert plan.m == 4

    capped = sq.stopping_rule(mixed, max_seeds=12, seeds_run={("long", "sinusoidal"): 10},
                              method=NM)
    assert capped.seeds_to_add == {("long", "sinusoidal"): 2}
    spent = sq.stopping_rule(mixed, max_seeds=10, method=NM)
    assert spent.stop and spent.exhausted == (("long", "sinusoidal"),) and not spent.undecided


def test_stopping_rule_equivalence_margin_per_family_and_fixed_m() -> None:
    tiny = _paths(8, 1, 40, 0.0, 0.004)[0]
    fams = {"a": {"x": tiny}, "b": {"x": tiny}}
    # "b" has no margin: never equivalent
    plan = sq.stopping_rule(fams, margin={"a": 0.01}, max_seeds=50, method=NM)
    assert [r.decision for r in plan.results] == [EQUIVALENT, INCONCLUSIVE]
    assert plan.undecided == ("b",)
    wider = sq.stopping_rule(fams, margin=0.01, m=20, method=NM)  # planned m, not the m passed in
    assert wider.m == 20 and wider.results[0].alpha_each == pytest.approx(0.0025)
    # no pairs yet
    assert sq.stopping_rule({"a": {"x": []}}, method=NM).results[0].decision == INCONCLUSIVE


@pytest.mark.parametrize("call, match", [
    (lambda: sq.cs_bounds([0.1, 0.2], alpha=0.0), "alpha must be in the open interval"),
    (lambda: sq.cs_bounds([0.1, 0.2], alpha=1.0), "alpha must be in the open interval"),
    (lambda: sq.stopping_rule({"a": {"x": [0.1, 0.2]}}, alpha=1.5), "alpha must be in the open"),
    (lambda: sq.confidence_sequence([0.1, float("nan")]), "deltas must be finite"),
    (lambda: sq.confidence_sequence([0.1, float("inf")]), "deltas must be finite"),
    (lambda: sq.confidence_sequence([]), "at least 1 paired delta"),
    (lambda: sq.stopping_rule({"a": {"x": [0.1]}}, max_seeds=1),
     "max_seeds must be an integer >= 2"),
    (lambda: sq.stopping_rule({"a": {"x": [0.1]}}, seed_batch=0), "seed_batch must be"),
    (lambda: sq.stopping_rule({"a": {"x": [0.1]}, "b": {"y": [0.2]}}, m=1), "m must count every"),
    (lambda: sq.stopping_rule({}), "at least one family"),
    (lambda: sq.stopping_rule({"a": {}}), "at least one comparison"),
    (lambda: sq.cs_bounds([0.1, 0.2], phi=0.0), "phi .* must be a finite number > 0"),
    (lambda: sq.sequential_decision(-0.1, 0.1, -0.01, True), "equivalence margin must be"),
    (lambda: sq.bonferroni_alpha(0.05, 0), "m .* must be an integer >= 1"),
])
def test_bad_inputs_are_refused_with_a_clear_message(call, match: str) -> None:
    with pytest.raises(AnalysisError, match=match):
        call()


def test_results_are_json_ready() -> None:
    plan = sq.stopping_rule({("d", "pe"): {("concat", "add"): [0.1, 0.12, 0.09, 0.11, 0.1, 0.13]}},
                            margin=0.01, method=NM)
    out = json.loads(json.dumps(plan.results[0].to_dict(), allow_nan=False))
    assert out["family"] == ["d", "pe"] and out["n"] == 6 and out["decision"] in VERDICTS
    assert out["path"]["low"][0] is None  # unbounded at n = 1
    assert len(out["path"]["mean"]) == 6


def test_report_table_and_figure(tmp_path) -> None:
    fams = {("synthetic-short", "sinusoidal"): {
        "concat vs add": _paths(9, 1, 15, 0.2, 0.05)[0],
        "gate-scalar vs add": _paths(10, 1, 15, 0.0, 0.1)[0]}}
    plan = sq.stopping_rule(fams, margin=0.01, method=NM)
    table = sr.sequential_table(plan.results)
    assert table.headers == sr.SEQUENTIAL_HEADERS and len(table.rows) == 2
    # every decision of the normal mixture states its assumption beside it
    assert table.rows[0][-1] == f"{BETTER} (assumes normal Δ)"
    assert table.rows[1][-1] == f"{INCONCLUSIVE} (assumes normal Δ)"
    assert any(DESCRIPTIVE_LABEL in f for f in table.footnotes)
    md = sr.markdown_rows(plan.results)
    assert md[0].startswith("| family") and len(md) == 4
    from fusion_sweep.analysis.render import Figure, sequential_blocks
    blocks = sequential_blocks(plan.results, tmp_path)
    png = tmp_path / blocks[-1].file
    assert isinstance(blocks[-1], Figure) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------ the win-rate method (issue 31, default)
WR = sq.WinRate.name


def test_the_default_is_the_win_rate_and_every_method_names_its_estimand() -> None:
    assert sq.DEFAULT_METHOD == WR and sq.get_method(None) is sq.WinRate
    assert {k: v.estimand for k, v in sq.SEQUENTIAL_METHODS.items()} == {
        "win-rate": "win rate", "betting": "mean Δ", "normal-mixture": "mean Δ"}


@pytest.mark.parametrize("method", list(sq.SEQUENTIAL_METHODS))
def test_every_result_says_its_estimand_in_json_and_table(method: str) -> None:
    d = _paths(12, 1, 12, 0.3, 0.05)[0]
    r = sq.sequential_result(d, m=2, margin=0.01, method=method)
    out = r.to_dict()
    how = sq.get_method(method)
    assert out["estimand"] == how.estimand == out["path"]["estimand"]
    assert out["null_value"] == how.null_value and out["mean_delta"] == pytest.approx(d.mean())
    assert (out["wins"], out["losses"], out["ties"]) == (12, 0, 0)
    table = sr.sequential_table([r])
    row = dict(zip(table.headers, table.rows[0]))
    assert row["estimand"] == how.estimand and row["W/L/T"] == "12/0/0"
    assert f"confidence sequences of the {how.estimand}" in table.footnotes[0]
    named = how.estimand if method == WR else "mean paired Δ"
    assert table.footnotes[1].startswith(f"Estimand: the {named}")


def _ville_first_exclusion(signs: np.ndarray, alpha: float) -> int | None:
    ville = pytest.importorskip("ville")
    return ville.BernoulliCS(alpha=alpha).fit(signs.astype(float)).excludes(0.5)


@pytest.mark.parametrize("wins, losses_at, n_decided", [
    (11, [], 11),  # issue 31: every seed won, decided at n = 11 at alpha/6
    (17, [0, 10], 19),  # 90% of seeds won: decided at n = 19 (17 of 19; 16 of 18 is not enough)
])
def test_the_win_rate_decides_at_the_n_the_issue_measured(wins, losses_at, n_decided) -> None:
    n = wins + len(losses_at)
    d = np.full(n, 0.02)
    d[losses_at] = -0.3  # a collapse on those seeds: the mean may be negative, the win rate not
    dec = sq.winrate_decisions(d, 0.05 / 6, True)  # (n,)
    assert list(dec).index(BETTER) + 1 == n_decided and dec[n_decided - 2] == INCONCLUSIVE
    assert _ville_first_exclusion((d > 0)[:n_decided], 0.05 / 6) == n_decided
    assert sq.sequential_result(d, alpha=0.05, m=6).decision == BETTER
    assert sq.sequential_result(-d, alpha=0.05, m=6).decision == WORSE
    lower = sq.sequential_result(d, alpha=0.05, m=6, higher_is_better=False)
    assert lower.decision == WORSE  # wins on a lower-is-better metric (e.g. latency) are worse


def test_ties_are_skipped_and_an_all_tied_comparison_decides_nothing() -> None:
    d = np.zeros(30)
    d[::2] = 0.01  # 15 wins, 15 ties in between: decided at the 11th win (seed 21)
    dec = sq.winrate_decisions(d, 0.05 / 6, True)
    assert list(dec).index(BETTER) + 1 == 21
    r = sq.sequential_result(d, m=6)
    assert (r.wins, r.losses, r.ties) == (15, 0, 15) and r.estimate == 1.0
    tied = sq.sequential_result(np.zeros(20), m=6, margin=0.05)
    assert tied.decision == INCONCLUSIVE and math.isnan(tied.estimate)
    assert (tied.cs_low, tied.cs_high) == (0.0, 1.0)
    out = json.loads(json.dumps(tied.to_dict(), allow_nan=False))
    assert out["estimate"] is None and out["path"]["mean"][0] is None
    # float noise is a tie, as in the fixed-n statistics
    assert sq.sequential_result(np.array([0.81 - 0.80, 0.71 - 0.70]) - 0.01, m=1).ties == 2


def test_the_win_rate_never_decides_equivalent() -> None:
    d = np.tile([0.001, -0.001], 50)  # tiny differences, half won: equivalent for a mean CS
    assert sq.sequential_result(d, m=1, margin=0.05, method=sq.Betting.name).decision == EQUIVALENT
    assert not sq.WinRate.decides_equivalence
    assert sq.sequential_result(d, m=1, margin=0.05).decision == INCONCLUSIVE


def test_the_win_rate_evalue_and_cs_match_ville_and_the_formula() -> None:
    ville = pytest.importorskip("ville")
    rng = np.random.default_rng(13)
    d = np.round(rng.normal(0.03, 0.1, 60), 2)  # (60,) with ties on the 1/100 grid
    signs = (d[d != 0] > 0).astype(float)  # ties skipped
    ref = ville.BernoulliTest(0.5, alpha=0.01).fit(signs)
    log_e = sq.winrate_log_evalue(d)[d != 0]  # at the non-tied seeds
    np.testing.assert_allclose(log_e, ref.log_e_values_, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(sq.winrate_p_values(d)[d != 0], ref.p_values_, atol=1e-12)
    w, l = np.cumsum(d > 0), np.cumsum(d < 0)
    from scipy.special import betaln
    np.testing.assert_allclose(sq.winrate_log_evalue(d),
                               betaln(1 + w, 1 + l) + (w + l) * math.log(2), atol=1e-12)
    cs = ville.BernoulliCS(alpha=0.01, intersect=False).fit(signs)
    low, high = sq.winrate_bounds(d, 0.01)
    np.testing.assert_allclose(low[d != 0], cs.lower_, atol=1e-9)
    np.testing.assert_allclose(high[d != 0], cs.upper_, atol=1e-9)
    path = sq.winrate_confidence_sequence(d, 0.01)
    assert np.all(path.low <= path.mean[-1]) and np.all(path.mean[-1] <= path.high)
    np.testing.assert_allclose(path.p_anytime, np.minimum(1, np.exp(-np.maximum.accumulate(
        sq.winrate_log_evalue(d)))))


@pytest.mark.parametrize("name, draw", [
    ("gaussian", lambda r, s: r.normal(0, 0.1, s)),
    ("ties-1/100", lambda r, s: np.round(r.normal(0, 0.01, s), 2)),  # ~40% ties
    ("exchangeable-bimodal", lambda r, s: np.where(r.random(s) < 0.2, 0.5, 0.85)
     - np.where(r.random(s) < 0.2, 0.5, 0.85) + 0.01 * r.standard_normal(s)),
    ("median-null, mean +0.125", lambda r, s: np.where(r.random(s) < 0.5, 0.3, -0.05)),
])
def test_the_win_rate_holds_alpha_at_every_n_under_its_null(name, draw) -> None:
    """P(some decision within 60 seeds) <= alpha when the variant wins as often as it loses,
    whatever Δ's distribution: 3000 paths, tolerance alpha + 2.33 SD (one-sided 99%)."""
    d = draw(np.random.default_rng(31), (3000, 60))  # (paths, n)
    dec = sq.winrate_decisions(d, 0.05, True)[:, -1]  # running: any decision shows at n = 60
    assert np.mean(dec != INCONCLUSIVE) <= 0.05 + 2.33 * math.sqrt(0.05 * 0.95 / 3000)


def test_the_win_rate_sweep_decides_d_z_2_within_20_seeds() -> None:
    """Issue 31's bar: power >= 0.8 at d_z 2 within 20 seeds (3 families x 2 comparisons,
    m = 6, 5 + 5 per round), through stopping_rule itself."""
    rng = np.random.default_rng(2)
    better = total = 0
    for _ in range(25):
        d = rng.normal(0.2, 0.1, (3, 2, 20))
        run = {f: 5 for f in range(3)}
        while True:
            plan = sq.stopping_rule({f: {c: d[f, c, :run[f]] for c in range(2)} for f in run},
                                    seeds_run=run, max_seeds=20)
            if plan.stop:
                break
            for f, k in plan.seeds_to_add.items():
                run[f] += k
        better += sum(r.decision == BETTER for r in plan.results)
        total += len(plan.results)
    assert better / total >= 0.8 and plan.method == WR


def test_the_table_shows_a_win_rate_as_a_share_and_a_mean_signed() -> None:
    d = np.r_[np.full(12, 0.02), -0.3]
    win = dict(zip(sr.SEQUENTIAL_HEADERS, sr.sequential_rows([sq.sequential_result(d, m=1)])[0]))
    assert win["estimate"] == "0.9231" and win["mean Δ"] == "-0.0046" and win["W/L/T"] == "12/1/0"
    assert win["CS (running)"].startswith("[0.") and win["decision"] == BETTER
    mean = sq.sequential_result(d, m=1, method=sq.Betting.name)
    row = dict(zip(sr.SEQUENTIAL_HEADERS, sr.sequential_rows([mean])[0]))
    assert row["estimand"] == "mean Δ" and row["estimate"] == "-0.0046"
    assert row["CS (running)"].startswith("[-")


def test_sequential_decisions_read_a_comparison_record_and_its_json_alike() -> None:
    """from_comparisons reads the deltas through PairedDeltas: a records.Comparison and its
    JSON entry give the same decisions (deltas taken in seed order)."""
    from fusion_sweep.analysis.demo import synthetic_results
    from fusion_sweep.analysis.load import tidy
    from fusion_sweep.analysis.report import analyze
    from fusion_sweep.analysis.settings import Settings
    rep = analyze(tidy(synthetic_results(seeds=5)), Settings(n_boot=200))
    comps = [c for c in rep.comparisons if c.metric == rep.settings.metrics[0]]
    assert comps
    by_record = sq.from_comparisons(comps, 0.05, m=len(comps))
    by_json = sq.from_comparisons([c.to_json() for c in comps], 0.05, m=len(comps))
    assert [r.to_dict() for r in by_record] == [r.to_dict() for r in by_json]
    assert [r.comparison for r in by_record] == [f"{c.variant} vs {c.baseline_variant}"
                                                 for c in comps]
    shuffled = [dataclasses.replace(c, seeds=c.seeds[::-1], deltas=c.deltas[::-1])
                for c in comps]
    assert ([r.to_dict() for r in sq.from_comparisons(shuffled, 0.05, m=len(comps))]
            == [r.to_dict() for r in by_record])
    section = sq.SequentialSection({}, "test_acc", 0.05, 2, "x", "betting", "a", "descriptive",
                                   by_record)
    assert (section.m, section.fixed_n_label) == (2, "descriptive")
    assert section.results == tuple(by_record)  # the records, never their JSON
    assert tuple(section.to_json()) == SEQUENTIAL_KEYS
    assert section.to_json()["results"] == [r.to_dict() for r in by_record]
    with pytest.raises(AnalysisError, match=r"results\[0\] is a dict, not a SequentialResult"):
        sq.SequentialSection({}, "test_acc", 0.05, 2, "x", "betting", "a", "descriptive",
                             [by_record[0].to_dict()])
