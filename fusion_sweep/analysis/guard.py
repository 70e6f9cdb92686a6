"""The one guard rule: what the arms' learned? states allow a comparison to claim.

Every verdict of the analysis passes through :func:`guard`: the fixed-n mean-Δ and win-rate
verdicts, the cost-ratio verdict, the sequential decisions of an adaptive sweep, the
interaction test's regimes and the claim tests. Why each part of the rule is there:

- **neither arm learned** (both ``no``): ``not learned``, on every metric and estimand. Two
  models at chance differ only by noise around the majority class; no difference and no
  equivalence between them says anything about the variants.
- **exactly one arm learned**: ``better``/``worse`` stand. That one arm fails to learn on
  some seeds while the other never does *is* an effect of the variant, and the exact sign
  test stays exact whatever the distribution of Δ, failures included (the mean-Δ verdict
  keeps its `rests on normality` flag, :mod:`fusion_sweep.analysis.report`). A guard here
  could only remove valid claims.
- **no arm shown to learn** (``no``/``unknown`` on both sides, not both ``no``): better, worse
  and equivalent are withheld: both arms may sit at chance.
- **equivalent** needs both arms ``yes`` by the exact per-seed test against the test split's
  recorded majority rate: a majority-class predictor can look "learned" against 1/K or by a
  seed-level t-test (no test size), and two of them are trivially equivalent.
- ``n/a`` (the input holds no test accuracy at all): no guard applies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion_sweep.analysis.caveats import WITHHELD, Caveat
from fusion_sweep.analysis.records import Comparison
from fusion_sweep.analysis.schema import (
    BETTER, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED, WORSE,
)

YES, NO, UNKNOWN, NA = "yes", "no", "unknown", "n/a"


@dataclass(frozen=True)
class Learning:
    """One arm's learned? state as the guard reads it.

    state: LEARNED_STATES; exact: decided by the exact per-seed test against the recorded
    majority rate (not 1/K, not the seed-level t fallback); basis: why it is not exact
    ('' when exact); count/n: seeds that beat chance of seeds tested (None without the
    exact test); chance_level: nan when unknown."""

    label: str
    state: str
    exact: bool = False
    basis: str = ""
    count: int | None = None
    n: int | None = None
    chance_level: float = float("nan")

    def reason(self) -> str:
        """Why this arm may sit at chance ('' when it learned or no guard applies)."""
        if self.state == NO:
            return f"{self.label} does not beat chance ({self.chance_level:.3g})"
        if self.state != UNKNOWN:
            return ""
        if not math.isfinite(self.chance_level):
            return f"chance level unknown for {self.label} (class count unknown)"
        return (f"{self.label} has the same accuracy on every seed (or fewer than 2 seeds): "
                "whether it beats chance is unknown")

    def equivalence_reason(self) -> str:
        """Why this arm cannot enter an equivalence claim ('' when it can)."""
        if self.state != YES:
            return self.reason()
        if not self.exact:
            return (f"{self.label}'s learned? rests on {self.basis}: it may be a "
                    "majority-class predictor")
        return ""


@dataclass(frozen=True)
class Guarded:
    """A verdict after the guard: the verdict, the one it replaced ('' when none) and why."""

    verdict: str
    withheld: str = ""
    why: str = ""

    @property
    def caveat(self) -> Caveat | None:
        """The caveat said beside a withheld verdict (None when nothing was withheld)."""
        return Caveat(WITHHELD, withheld=self.withheld, why=self.why) if self.withheld else None


def neither_learned(arm: Learning, ref: Learning) -> bool:
    """Both arms shown not to beat chance: the comparison is `not learned`."""
    return arm.state == NO and ref.state == NO


def guard(verdict: str, arm: Learning, ref: Learning) -> Guarded:
    """The verdict a comparison may claim, for any estimand (see the module docstring)."""
    if neither_learned(arm, ref):
        return Guarded(NOT_LEARNED)
    if verdict == EQUIVALENT:
        why = arm.equivalence_reason() or ref.equivalence_reason()
        if why and NA not in (arm.state, ref.state):
            return Guarded(INCONCLUSIVE, EQUIVALENT, why)
    if verdict in (BETTER, WORSE) and YES not in (arm.state, ref.state):
        why = arm.reason() or ref.reason()
        if why:
            return Guarded(INCONCLUSIVE, verdict, why)
    return Guarded(verdict)


def sides(c: Comparison) -> tuple[Learning, Learning]:
    """The two arms' Learning from a comparison record (its chance level is nan when unknown):
    what the sequential decisions and the interaction test guard with. Both read only the
    guarded verdict, so the learn counts (the fixed-n tables' learn rates) are left out."""
    def one(label: str, state: str, basis: str) -> Learning:
        return Learning(label, state or UNKNOWN, not basis, basis, chance_level=c.chance_level)
    return (one(c.variant, c.learned, c.arm_learn_basis),
            one(c.baseline_variant, c.baseline_learned, c.baseline_learn_basis))


def speaks(c: Comparison) -> bool:
    """Whether a comparison's Δ says anything about the variants: some arm learned (or no
    guard applies). A regime where it does not is left out of every test across regimes."""
    arm, ref = sides(c)
    return guard(BETTER, arm, ref).verdict == BETTER
