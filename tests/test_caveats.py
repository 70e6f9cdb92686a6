"""Caveats as typed values (issue 40, item 2): one vocabulary, built where the verdict is
decided, rendered short, long and in figures by one function each; the JSON shows each in
full under `verdict_flags`."""
from __future__ import annotations

import pytest

from fusion_sweep.analysis import caveats
from fusion_sweep.analysis.caveats import (
    ALL_PAIRS, COLLAPSE, DESCRIPTIVE, KINDS, SMALL_N, WITHHELD, Caveat,
)

CASES = [
    (Caveat(DESCRIPTIVE), "descriptive", "descriptive", None),
    (Caveat(WITHHELD, withheld="equivalent", why="a/b/c's learned? rests on 1/K"),
     "no 'equivalent': a/b/c's learned? rests on 1/K", "withheld: chance unknown",
     "not shown equivalent: ARM's learned? rests on 1/K"),
    (Caveat(WITHHELD, withheld="better", why="chance level unknown for a/b/c"),
     "no 'better': chance level unknown for a/b/c", "withheld: chance unknown", None),
    (Caveat(SMALL_N, n=2, below=5), "rests on normality (n = 2 < 5)", "rests on normality",
     "the mean-Δ verdict rests on normality (n = 2 < 5)"),
    (Caveat(COLLAPSE, why="a/b/c at chance on 2 of 8 seeds"),
     "rests on normality (a/b/c at chance on 2 of 8 seeds)", "rests on normality",
     "the mean-Δ verdict rests on normality (ARM at chance on 2 of 8 seeds)"),
    (Caveat(ALL_PAIRS, n=6, other="better"), "with all 6 pairs: better", "with all 6 pairs: better",
     "with the pairs the fingerprint checks dropped put back (6 pairs) it would be better"),
]


@pytest.mark.parametrize(("cav", "full", "short", "long"), CASES)
def test_each_kind_renders_full_short_long_and_in_figures(cav, full, short, long) -> None:
    assert caveats.full(cav) == full
    assert caveats.figure(cav) == full
    assert caveats.short(cav, None) == short
    assert caveats.long(cav, lambda t: t.replace("a/b/c", "ARM")) == long


def test_every_kind_is_covered() -> None:
    assert {c.kind for c, *_ in CASES} == set(KINDS)


def test_a_withheld_verdict_names_the_unlearned_side_in_short() -> None:
    cav = Caveat(WITHHELD, withheld="worse", why="x")
    assert caveats.short(cav, ("reference", "no")) == "withheld: reference not learned"


def test_a_bad_caveat_fails_when_built() -> None:
    with pytest.raises(ValueError, match="caveat kind 'nope': expected one of descriptive"):
        Caveat("nope")
    with pytest.raises(ValueError, match="caveat 'small n': missing n, below"):
        Caveat(SMALL_N)


def test_has_reads_kinds_never_text() -> None:
    flags = (Caveat(WITHHELD, withheld="equivalent", why="w"), Caveat(SMALL_N, n=2, below=5))
    assert caveats.has(flags, WITHHELD) and caveats.has(flags, WITHHELD, "equivalent")
    assert not caveats.has(flags, WITHHELD, "better") and not caveats.has(flags, DESCRIPTIVE)
