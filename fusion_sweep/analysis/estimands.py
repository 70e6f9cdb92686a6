"""What each verdict is about (its estimand) and what it assumes: the one home of the words.

Three readings of "does the fusion effect exceed seed noise?" (issue 31):

- MEAN_DELTA, the mean paired Δ: paired t-test (better/worse) and TOST (equivalent), Holm
  over the family. Valid only under approximately normal paired Δ at these n; a comparison
  whose arms collapse on some seeds is flagged as resting on normality.
- WIN_RATE, P(Δ > 0) against P(Δ < 0): the exact two-sided sign test (ties excluded and
  counted, :func:`fusion_sweep.analysis.winrate.sign_test`), Holm over the same family.
  Distribution-free and exact at any n; it cannot reach α/m below n = log2(2m/α) pairs.
- LEARN_RATE, per arm: the seeds on which it beats chance by the exact binomial test
  (:mod:`fusion_sweep.analysis.chance`).

Each is one entry of :data:`fusion_sweep.analysis.fixed.FIXED_ESTIMANDS` (its test, Holm p,
verdict rule and grid words); the sequential methods name the same words.

The verdict word always carries its estimand where it is shown (`better (mean Δ)`,
`better (win rate)`); the JSON carries `estimand` beside `verdict` and `win_verdict`.
"""
from __future__ import annotations

MEAN_DELTA, WIN_RATE, LEARN_RATE = "mean Δ", "win rate", "learn rate"
ASSUMES: dict[str, str] = {
    MEAN_DELTA: "approximately normal paired Δ (paired t-test; TOST for equivalent)",
    WIN_RATE: "nothing beyond independent seeds (exact sign test, ties excluded)",
    LEARN_RATE: "nothing beyond independent test examples (exact binomial test per seed)",
}


def labelled(verdict: str, estimand: str) -> str:
    """'better (mean Δ)': a verdict word no reader can take for another estimand's."""
    return f"{verdict} ({estimand})"


VERDICT_RULE = (
    "Verdicts name their estimand. mean Δ (assumes approximately normal "
    "paired Δ): better/worse = the Holm-adjusted paired-t p (p_holm) < α; equivalent = the "
    "Holm-adjusted TOST p < α within ±margin; else inconclusive, which is never 'no effect'. "
    "Every interval shown is the paired-t interval at one level, 1 − α (95% at α = 0.05), "
    "beside p_holm: one that excludes 0 while p_holm ≥ α decides nothing after Holm (the JSON's "
    "holm_ci_* is the Holm-consistent interval, whose level differs per comparison). win rate "
    "(distribution-free): better/worse = the Holm-adjusted exact sign-test p < α (ties "
    "excluded); no equivalence. One guard rule for every verdict and estimand (chance = the "
    "test split's majority rate; 1/K when none is recorded): when neither arm beats chance "
    "the verdict is 'not learned'; when exactly one does, better/worse stand; when no arm is "
    "shown to, none is given; 'equivalent' needs both arms shown to beat the majority rate "
    "by the exact per-seed test.")
