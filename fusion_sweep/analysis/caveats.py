"""What qualifies a fixed-n verdict, as typed values: the one vocabulary of caveats.

A caveat is built where the verdict is decided (fusion_sweep.analysis.report, and the guard's
withheld verdict in fusion_sweep.analysis.guard) as a kind and its parameters, carried in the
comparison record (`Comparison.verdict_flags`) and rendered by one function per place:

- :func:`full`: the flag in full, the text of the JSON's `verdict_flags`, the report
  tables' verdict cells and the figures' verdict words ("rests on normality (n = 2 < 5)");
- :func:`short`: a few words for the terminal's tables ("rests on normality");
- :func:`long`: the clause of the answer's sentence, or None where the answer says it
  elsewhere (a withheld better/worse is told with its unlearned arm's sentence).

Rewording a caveat is one edit here; nothing reads a sentence back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fusion_sweep.analysis.schema import EQUIVALENT

# The kinds, each with the parameters it carries.
DESCRIPTIVE = "descriptive"        # an adaptive sweep's fixed-n verdict: no parameters
WITHHELD = "withheld"              # the guard withheld `withheld` because `why`
SMALL_N = "small n"                # n pairs < `below`: the verdict rests on normality
COLLAPSE = "collapse"              # `why`: seeds at chance beside learned ones
ALL_PAIRS = "all pairs"            # with all `n` pairs (dropped ones put back): `other`
KINDS: tuple[str, ...] = (DESCRIPTIVE, WITHHELD, SMALL_N, COLLAPSE, ALL_PAIRS)
# The parameters each kind needs (a caveat missing one is a bug, caught when built).
_NEEDS: dict[str, tuple[str, ...]] = {
    DESCRIPTIVE: (), WITHHELD: ("withheld", "why"), SMALL_N: ("n", "below"),
    COLLAPSE: ("why",), ALL_PAIRS: ("n", "other"),
}


@dataclass(frozen=True)
class Caveat:
    """One qualification of a verdict: its kind (KINDS) and the parameters that kind needs."""

    kind: str
    withheld: str = ""
    why: str = ""
    n: int = 0
    below: int = 0
    other: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"caveat kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        missing = [p for p in _NEEDS[self.kind] if not getattr(self, p)]
        if missing:
            raise ValueError(f"caveat {self.kind!r}: missing {', '.join(missing)}")


def full(c: Caveat) -> str:
    """The caveat in full: "no 'better': chance level unknown for ...", "descriptive"."""
    if c.kind == WITHHELD:
        return f"no '{c.withheld}': {c.why}"
    if c.kind == SMALL_N:
        return f"rests on normality (n = {c.n} < {c.below})"
    if c.kind == COLLAPSE:
        return f"rests on normality ({c.why})"
    if c.kind == ALL_PAIRS:
        return f"with all {c.n} pairs: {c.other}"
    return DESCRIPTIVE


def short(c: Caveat, unlearned: tuple[str, str] | None) -> str:
    """A few words: 'withheld: reference not learned', 'rests on normality', ...
    `unlearned`: (side, learned? state) of the arm that withholds the verdict, if any."""
    if c.kind == WITHHELD:
        side, state = unlearned or ("", "unknown")
        return f"withheld: {side} not learned" if state == "no" else "withheld: chance unknown"
    if c.kind in (SMALL_N, COLLAPSE):
        return "rests on normality"
    return full(c)


def long(c: Caveat, relabel: Callable[[str], str]) -> str | None:
    """The answer's clause ('the mean-Δ verdict rests on normality (n = 2 < 5)'), variant
    labels in `why` told as the answer names them (`relabel`); None where the answer says
    it elsewhere (descriptive: once for all; a withheld better/worse: the unlearned arm's
    own sentence)."""
    if c.kind == WITHHELD and c.withheld == EQUIVALENT:
        return "not shown equivalent: " + relabel(c.why)
    if c.kind == SMALL_N:
        return f"the mean-Δ verdict rests on normality (n = {c.n} < {c.below})"
    if c.kind == COLLAPSE:
        return f"the mean-Δ verdict rests on normality ({relabel(c.why)})"
    if c.kind == ALL_PAIRS:
        return (f"with the pairs the fingerprint checks dropped put back ({c.n} pairs) "
                f"it would be {c.other}")
    return None


def figure(c: Caveat) -> str:
    """The caveat beside a verdict in a figure: in full (the figures have the room)."""
    return full(c)


def has(caveats: tuple[Caveat, ...], kind: str, withheld: str = "") -> bool:
    """Whether any caveat is of `kind` (and, given, withholds `withheld`)."""
    return any(c.kind == kind and (not withheld or c.withheld == withheld) for c in caveats)
