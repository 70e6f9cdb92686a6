"""Properties of the rules a hostile reviewer attacks, over generated inputs (Hypothesis).

Examples pin a rule at chosen points; these pin it everywhere the generator reaches: Holm
never lowers a p and keeps the raw order, a seed lost to NaN never helps a win rate, a tied
seed never decides anything, mirroring or relabelling swaps the verdicts and nothing else,
and a trial's key moves exactly when what the trial computes moves. Deterministic: the
profile below derandomises every search (no example database, no deadline on a busy machine).
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_sweep import schema
from fusion_sweep.analysis import guard, stats, winrate
from fusion_sweep.analysis.report import holm_in_family
from fusion_sweep.trial.config import TrialConfig

settings.register_profile("fusion-sweep", derandomize=True, database=None, deadline=None,
                          max_examples=60, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fusion-sweep")

pvalues = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=12)
# Per-seed deltas as the pairing makes them: rounded, so ties are real ties.
deltas = st.lists(st.integers(-40, 40).map(lambda k: k / 100), min_size=1, max_size=16)


@given(pvalues)
def test_holm_never_lowers_a_p_and_keeps_the_raw_order(p: list[float]) -> None:
    raw = np.array(p)  # (m,)
    adj = stats.holm(raw)  # (m,)
    assert np.all(adj >= raw - 1e-12) and np.all(adj <= 1.0)
    order = np.argsort(raw, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-12)  # monotone in the raw p
    # the first Holm step is Bonferroni over the whole family: no p escapes the m
    assert np.isclose(adj[order[0]], min(1.0, raw.size * raw[order[0]]))


@given(st.lists(st.one_of(st.floats(0.0, 1.0, allow_nan=False), st.just(float("nan")),
                         st.sampled_from([0.01, 0.02, 0.5])), min_size=1, max_size=12))
def test_holm_is_statsmodels_holm(p: list[float]) -> None:
    """stats.holm writes out statsmodels' step-down: the same adjusted p on every family,
    ties and nan (not counted in m) included. statsmodels' Holm ends with a full
    `gc.collect()` (no part of the result; about 0.15 s a call in a worker holding torch,
    which made this test the suite's slowest property): the reference runs without it."""
    from unittest import mock

    from statsmodels.stats import multitest

    raw = np.array(p)  # (m,)
    ok = np.isfinite(raw)
    want = np.full(raw.shape, np.nan)
    if ok.any():
        with mock.patch("gc.collect", lambda *a: 0):  # it imports gc inside the function
            want[ok] = multitest.multipletests(raw[ok], method="holm")[1]
    np.testing.assert_allclose(stats.holm(raw), want, rtol=0, atol=1e-15)


@given(pvalues, st.integers(0, 6))
def test_members_a_file_lacks_never_loosen_holm(p: list[float], absent: int) -> None:
    """A file holding part of a recorded family (absent members count as p = 1) never gets a
    smaller adjusted p than the whole family's members would."""
    own = holm_in_family(p, len(p))
    padded = holm_in_family(p, len(p) + absent)
    assert np.all(padded >= own - 1e-12)
    if absent == 0:
        assert np.array_equal(padded, own)
    # the family's m, not the file's: the smallest p is multiplied by every member
    first = int(np.argmin(p))
    assert np.isclose(padded[first], min(1.0, (len(p) + absent) * p[first]))


@given(deltas, st.integers(1, 4))
def test_a_seed_lost_to_nan_is_never_silently_a_win(d: list[float], lost: int) -> None:
    base = winrate.sign_test(np.array(d))
    with_lost = winrate.sign_test(np.array(d), lost=lost)
    assert with_lost.p_two_sided >= base.p_two_sided - 1e-12
    # worst case over the lost seeds' signs: at least as large as if every one were a loss
    # or every one a win (the two ends of what it could have been)
    as_losses = winrate.sign_test(np.r_[d, -np.ones(lost)])
    as_wins = winrate.sign_test(np.r_[d, np.ones(lost)])
    assert with_lost.p_two_sided >= max(as_losses.p_two_sided, as_wins.p_two_sided) - 1e-12
    assert (with_lost.wins, with_lost.losses) == (base.wins, base.losses)


@given(deltas, st.integers(1, 5))
def test_a_tied_seed_never_decides_anything(d: list[float], ties: int) -> None:
    before = winrate.sign_test(np.array(d))
    after = winrate.sign_test(np.r_[d, np.zeros(ties)])
    assert after.p_two_sided == before.p_two_sided
    assert (after.wins, after.losses, after.ties) == (before.wins, before.losses,
                                                      before.ties + ties)


@given(deltas)
def test_mirroring_the_deltas_swaps_wins_and_losses_only(d: list[float]) -> None:
    a, b = winrate.sign_test(np.array(d)), winrate.sign_test(-np.array(d))
    assert (a.wins, a.losses, a.ties) == (b.losses, b.wins, b.ties)
    assert np.isclose(a.p_two_sided, b.p_two_sided)
    if a.wins + a.losses:
        assert np.isclose(a.win_rate, 1 - b.win_rate)


STATES = st.sampled_from([guard.YES, guard.NO, guard.UNKNOWN, guard.NA])
VERDICTS = st.sampled_from(["better", "worse", "equivalent", "inconclusive"])
SWAP = {"better": "worse", "worse": "better"}


def _learning(label: str, state: str, exact: bool) -> guard.Learning:
    chance = 0.5 if state != guard.UNKNOWN else float("nan")
    return guard.Learning(label, state, exact=exact, basis="" if exact else "1/K", count=None,
                          n=None, chance_level=chance)


@given(VERDICTS, STATES, STATES, st.booleans(), st.booleans())
def test_relabelling_the_arms_swaps_better_and_worse_under_the_guard(
        v: str, s_arm: str, s_ref: str, e_arm: bool, e_ref: bool) -> None:
    arm, ref = _learning("arm", s_arm, e_arm), _learning("ref", s_ref, e_ref)
    here = guard.guard(v, arm, ref)
    there = guard.guard(SWAP.get(v, v), ref, arm)
    assert there.verdict == SWAP.get(here.verdict, here.verdict)
    assert there.withheld == SWAP.get(here.withheld, here.withheld)


@given(VERDICTS, STATES, STATES, st.booleans(), st.booleans())
def test_the_guard_only_ever_withholds(v: str, s_arm: str, s_ref: str, e_arm: bool,
                                       e_ref: bool) -> None:
    """The guard never turns one decided verdict into another: it keeps the verdict, or says
    `not learned` (both arms shown at chance), or withholds it as inconclusive."""
    g = guard.guard(v, _learning("arm", s_arm, e_arm), _learning("ref", s_ref, e_ref))
    assert g.verdict in (v, "not learned", "inconclusive")
    if g.verdict == "inconclusive" and v != "inconclusive":
        assert g.withheld == v and g.why


CHANGES = {"lr": 0.5, "epochs": 99, "d_model": 24, "dropout": 0.31, "seed": 123,
           "fusion": "gate-scalar", "pe": "rope", "dataset": "synthetic-long",
           "device": "cuda", "num_threads": 7, "cache_dir": "/elsewhere", "latency_repeats": 9,
           "save_checkpoint": True}


# Where a trial runs and what it keeps, never what it computes (docs/protocol.md): written out
# here, not read from schema.py, so a field wrongly added to or dropped from the list shows.
NEVER_CHANGE_A_NUMBER = {"device", "num_threads", "cache_dir", "latency_repeats", "save_checkpoint"}


@given(st.sampled_from(sorted(CHANGES)), st.sampled_from(["code-a", "code-b"]))
def test_the_key_moves_exactly_when_what_the_trial_computes_moves(field: str, code: str) -> None:
    base = TrialConfig.build("synthetic-short", fusion="add", pe="sinusoidal", seed=0).to_dict()
    changed = {**base, field: CHANGES[field]}
    assert changed[field] != base[field]  # the premise: the field really changed
    moved = schema.trial_key(changed, code) != schema.trial_key(base, code)
    assert moved == (field not in NEVER_CHANGE_A_NUMBER)
    # and the code alone moves it too
    assert schema.trial_key(base, code) != schema.trial_key(base, code + "'")
