"""The claims' rules unit by unit (issue 42): every claim kind's plans on hand-built sweeps,
field by field; what each claim says it tests, word for word; the verdict, support and tally
rules on both sides of each edge. No analysis runs here, so under mutmut (tests fastest first)
these decide most of `claims`' mutants in milliseconds."""
from __future__ import annotations

import math
import warnings
from types import MappingProxyType
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from fusion_sweep.analysis import claims as C
from fusion_sweep.analysis import stats
from fusion_sweep.analysis.claims import Plan, Sweep, Term
from fusion_sweep.analysis.guard import Learning
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.pairing import NON_FINITE
from fusion_sweep.analysis.schema import (
    BETTER, CONTRADICTS, EQUIVALENT, INCONCLUSIVE, MIXED, NOT_LEARNED, NOT_RUN, NOT_TESTABLE,
    SUPPORTS, UNDECIDED, WORSE, AnalysisError,
)
from fusion_sweep.analysis.settings import Settings
from fusion_sweep.analysis.variants import Variant

ADD = Variant("standard", "sinusoidal", "add")
GATE = Variant("standard", "sinusoidal", "gate-scalar")
CNN = Variant("standard", "sinusoidal", "gate-cnn")
ROT_ADD = Variant("standard", "rotary", "add")
ROT_GATE = Variant("standard", "rotary", "gate-scalar")
ACC = "test_acc"
NAN = float("nan")


def sweep(arms: dict[str, tuple[Variant, ...]], regime: dict[str, str] | None = None,
          probe_of: dict[str, str] | None = None, long_context: tuple[str, ...] = (),
          metrics: tuple[str, ...] = (ACC,)) -> Sweep:
    """arms: dataset -> the variants run there (the datasets in this order)."""
    return Sweep(tuple(arms), frozenset((d, v) for d, vs in arms.items() for v in vs),
                 frozenset(metrics), dict(probe_of or {}), frozenset(long_context),
                 {d: r for d, r in (regime or {}).items() if d in arms})


def pair(arm: Variant, ref: Variant, d: str) -> tuple[Term, Term]:
    return Term(1, d, arm), Term(-1, d, ref)


REGIMES = {"s": "short", "m": "medium", "l": "long", "l2": "long"}


# ----------------------------------------------------------------------------- the sweep
def test_a_sweep_reads_regimes_probes_fusion_pairs_and_absent_arms() -> None:
    s = sweep({"s": (ADD, GATE, CNN), "s-shuf": (ADD, GATE), "m": (ADD,),
               "l": (ADD, GATE, ROT_GATE)},
              regime={"s": "short", "s-shuf": "short", "m": "medium", "l": "long"},
              probe_of={"s-shuf": "s"})
    assert s.regime("s-shuf") == "s" and s.regime("l") == "l"
    assert s.in_regimes(("short",)) == ["s"]  # a probe re-tests a regime; it is none itself
    assert s.in_regimes(("long", "short")) == ["s", "l"]  # the sweep's order
    assert s.in_regimes(("huge",)) == []
    # sorted; the rotary gate has no rotary add beside it; the reference is never an arm
    assert s.fusion_pairs("add") == [(CNN, ADD), (GATE, ADD)]
    assert s.fusion_pairs("gate-scalar") == [(ADD, GATE), (CNN, GATE)]
    assert s.has("s", ADD, GATE) and not s.has("m", ADD, GATE) and s.has("m")
    assert s.absent([ADD, ROT_ADD, Variant("x", "y", "z")]) == ["standard/rotary/add", "x/y/z"]


def test_the_tidy_tables_regime_facts_come_from_their_columns_only() -> None:
    df = pd.DataFrame({"dataset": ["a", "a-shuf", "b", "c"],
                       "probe_of": [None, "a", " ", "b"],
                       "regime": ["short", "short", "", None],
                       "long_context": ["True", "false", " TRUE ", None]})
    assert C.probes_of(df) == {"a-shuf": "a", "c": "b"}  # blank and missing: no probe
    assert C.length_regimes_of(df) == {"a": "short", "a-shuf": "short"}
    assert C.long_context_of(df) == frozenset({"a", "b"})
    bare = df[["dataset"]]
    assert (C.probes_of(bare), C.length_regimes_of(bare), C.long_context_of(bare)) == (
        {}, {}, frozenset())


def test_an_unknown_claim_set_names_the_valid_ones() -> None:
    assert C.get_claim_set("fusion-matters") is C.FUSION_MATTERS
    with pytest.raises(AnalysisError, match=r"--claims.*fusion-matters.*ressformer"):
        C.get_claim_set("fusion-maters")


# ------------------------------------------------------- Fusion Matters' claim kinds
def test_a_claim_needing_regimes_names_them_and_what_the_sweep_has() -> None:
    assert C.NO_REGIME == (
        "no dataset with a length regime here (the registry's trial tag "
        "fusion_sweep.length_regime; a results file: a `regime` column holding short, medium "
        "or long)")
    assert C._need_regimes("F9", sweep({"a": (ADD,)}), ACC, "how", r=("long",)) == Plan(
        "F9", "F9", (), ACC, "how", missing=(C.NO_REGIME,))
    s = sweep({"a": (ADD,), "b": (ADD,), "c": (ADD,)},
              regime={"a": "short", "b": "medium", "c": "short"})
    assert C._need_regimes("F9", s, ACC, "how", a=("long",), b=("huge", "vast")) == Plan(
        "F9", "F9", (), ACC, "how",
        missing=("no long regime in the sweep (it has: medium, short)",
                 "no huge or vast regime in the sweep (it has: medium, short)"))
    assert C._need_regimes("F9", s, ACC, "how", a=("long",), b=("short",)).missing == (
        "no long regime in the sweep (it has: medium, short)",)
    assert C._need_regimes("F9", s, ACC, "how", r=("short",)) is None
    blank = sweep({"a": (ADD,)}, regime={"a": ""})
    assert C._need_regimes("F9", blank, ACC, "how", r=("long",)).missing == (
        "no long regime in the sweep (it has: none)",)


def _within(arm: Variant, d: str, regime: str) -> Plan:
    return Plan("F1", f"F1 · {d} · {arm.label}", (d,), ACC,
                f"test_acc({arm.label}) − test_acc(standard/sinusoidal/add) on {d} ({regime}): "
                "TOST within the margin, else paired t",
                pair(arm, ADD, d), (pair(arm, ADD, d),), holds_if=(EQUIVALENT,),
                contradicted_if=(BETTER, WORSE), arm=arm.label, reference=ADD.label,
                equivalence_first=True)


def test_f1_tests_every_fusion_against_add_on_each_short_and_medium_dataset() -> None:
    kind = C.FUSION_MATTERS.claims[0].kind
    assert kind == C.WithinNoise("add", ("short", "medium"))
    s = sweep({"s": (ADD, GATE), "m": (ADD, GATE, CNN), "l": (ADD, GATE, CNN)}, REGIMES)
    assert kind.plans("F1", s) == [_within(CNN, "m", "medium"), _within(GATE, "s", "short"),
                                   _within(GATE, "m", "medium")]
    assert (kind.variants(), kind.metrics()) == ((), (ACC,))
    only_add = sweep({"s": (ADD,)}, REGIMES)
    assert kind.plans("F1", only_add) == [Plan(
        "F1", "F1", (), ACC, kind.describe(),
        missing=("no fusion besides add beside it in the sweep",))]
    long_only = sweep({"l": (ADD, GATE)}, REGIMES)
    assert kind.plans("F1", long_only) == [Plan(
        "F1", "F1", (), ACC, kind.describe(),
        missing=("no short or medium regime in the sweep (it has: long)",))]
    # a dataset where the arm runs without the reference has no test
    lone = sweep({"s": (ADD, GATE), "m": (GATE,)}, REGIMES)
    assert kind.plans("F1", lone) == [_within(GATE, "s", "short")]


def _wins(arm: Variant, ref: Variant, d: str, name: str, claim: str = "F2") -> Plan:
    return Plan(claim, name, (d,), ACC,
                f"win rate of {arm.label} over {ref.label} on {d}: exact one-sided sign test "
                "of the per-seed Δ (ties excluded)", pair(arm, ref, d), (pair(arm, ref, d),),
                alternative=C.GREATER, estimate_kind="win rate", contradicted_if=(WORSE,),
                arm=arm.label, reference=ref.label, test_kind="sign")


def test_f2_is_a_sign_test_of_gate_over_add_on_each_long_dataset() -> None:
    kind = C.FUSION_MATTERS.claims[1].kind
    assert kind == C.WinsOn(GATE, ADD, ("long",))
    assert kind.variants() == (GATE, ADD) and kind.metrics() == (ACC,)
    s = sweep({"s": (ADD, GATE), "l": (ADD, GATE), "l2": (ADD,)}, REGIMES)
    assert kind.plans("F2", s) == [
        _wins(GATE, ADD, "l", "F2 · l"),
        Plan("F2", "F2 · l2", ("l2",), ACC, "",
             missing=("standard/sinusoidal/gate-scalar not run on l2",))]
    # a long dataset without the reference is not run, and the ones after it still are
    later = sweep({"l2": (GATE,), "l": (ADD, GATE)}, REGIMES)
    assert kind.plans("F2", later) == [
        Plan("F2", "F2 · l2", ("l2",), ACC, "",
             missing=("standard/sinusoidal/add not run on l2",)),
        _wins(GATE, ADD, "l", "F2 · l")]
    no_gate = sweep({"l": (ADD, CNN)}, REGIMES)
    assert kind.plans("F2", no_gate) == [Plan(
        "F2", "F2", (), ACC, kind.describe(),
        missing=("variant standard/sinusoidal/gate-scalar not in the sweep",))]
    assert kind.plans("F2", sweep({"l": (ADD, GATE)}))[0].missing == (C.NO_REGIME,)
    assert kind.plans("F2", sweep({"s": (ADD, GATE)}, REGIMES)) == [Plan(
        "F2", "F2", (), ACC, kind.describe(),
        missing=("no long regime in the sweep (it has: short)",))]


def test_f4_runs_the_sign_test_once_per_pe_and_needs_two_of_them() -> None:
    kind = C.FUSION_MATTERS.claims[3].kind
    assert kind == C.WinsOn(GATE, ADD, ("long",), every_pe=True)
    assert kind.variants() == ()
    s = sweep({"s": (ADD, GATE), "l": (ADD, GATE, ROT_ADD, ROT_GATE), "l2": (ADD, GATE)},
              REGIMES)
    assert kind.plans("F4", s) == [
        _wins(ROT_GATE, ROT_ADD, "l", "F4 · l · rotary", "F4"),
        Plan("F4", "F4 · l2 · rotary", ("l2",), ACC, "",
             missing=("standard/rotary/gate-scalar not run on l2",
                      "standard/rotary/add not run on l2")),
        _wins(GATE, ADD, "l", "F4 · l · sinusoidal", "F4"),
        _wins(GATE, ADD, "l2", "F4 · l2 · sinusoidal", "F4")]
    # under every PE the sinusoidal pair itself need not run
    lrn_add, lrn_gate = Variant("standard", "learned", "add"), Variant("standard", "learned",
                                                                        "gate-scalar")
    other_pes = sweep({"l": (ROT_ADD, ROT_GATE, lrn_add, lrn_gate)}, REGIMES)
    assert [p.test for p in kind.plans("F4", other_pes)] == ["F4 · l · learned",
                                                             "F4 · l · rotary"]
    one_pe = sweep({"l": (ADD, GATE, ROT_GATE)}, REGIMES)
    assert kind.plans("F4", one_pe) == [Plan(
        "F4", "F4", (), ACC, kind.describe(),
        missing=("needs gate-scalar and add under at least two positional encodings (the "
                 "sweep has both under: sinusoidal)",))]
    assert kind.plans("F4", sweep({"l": (ADD, ROT_GATE)}, REGIMES))[0].missing == (
        "needs gate-scalar and add under at least two positional encodings (the sweep has "
        "both under: none)",)


def _longer(arm: Variant, big: str, small: str) -> Plan:
    on_big, on_small = pair(arm, ADD, big), pair(arm, ADD, small)
    return Plan("F3", f"F3 · {big} vs {small} · {arm.label}", (big, small), ACC,
                f"Δ = test_acc({arm.label}) − test_acc(standard/sinusoidal/add) on {big} "
                f"against Δ on {small}: one-sided Mann–Whitney, exact to 99,999 splits",
                on_big + on_small, (on_big, on_small), alternative=C.GREATER,
                estimate_kind=C.SUPERIORITY, contradicted_if=(WORSE,), arm=arm.label,
                reference=ADD.label, test_kind="rank")


def test_f3_compares_each_long_dataset_with_each_short_or_medium_one_per_fusion() -> None:
    kind = C.FUSION_MATTERS.claims[2].kind
    assert kind == C.LargerOnLonger("add", ("long",), ("short", "medium"))
    s = sweep({"s": (ADD, GATE, CNN), "m": (ADD, GATE), "l": (ADD, GATE, CNN)}, REGIMES)
    assert kind.plans("F3", s) == [_longer(CNN, "l", "s"), _longer(GATE, "l", "s"),
                                   _longer(GATE, "l", "m")]
    no_small = sweep({"s": (ADD,), "l": (ADD, GATE)}, REGIMES)
    assert kind.plans("F3", no_small) == [Plan(
        "F3", "F3", (), ACC, kind.describe(),
        missing=("no fusion besides add on both a long and a short/medium regime",))]
    assert kind.plans("F3", sweep({"s": (ADD, GATE)}, REGIMES)) == [Plan(
        "F3", "F3", (), ACC, kind.describe(),
        missing=("no long regime in the sweep (it has: short)",))]
    # a pair lacking on the longer or the shorter dataset is skipped, and only that pair
    gaps = sweep({"m": (GATE,), "s": (ADD, GATE), "l2": (ADD,), "l3": (GATE,), "l": (ADD, GATE)},
                 {"m": "medium", "s": "short", "l2": "long", "l3": "long", "l": "long"})
    assert kind.plans("F3", gaps) == [_longer(GATE, "l", "s")]
    wide = C.LargerOnLonger("add", ("long", "medium"), ("short",))
    assert wide.plans("F3", sweep({"s": (ADD,), "l": (ADD, GATE)}, REGIMES))[0].missing == (
        "no fusion besides add on both a long/medium and a short regime",)
    assert "per-seed Δ on each long/medium regime against each short one;" in wide.describe()
    assert kind.plans("F3", sweep({"l": (ADD, GATE)}, REGIMES))[0].missing == (
        "no short or medium regime in the sweep (it has: long)",)


def test_f5_adds_a_mcnemar_test_of_gate_against_cnn_to_cnns_sign_test() -> None:
    kind = C.FUSION_MATTERS.claims[4].kind
    assert kind == C.LessConsistent(CNN, GATE, ADD, ("long",))
    assert kind.variants() == (CNN, GATE, ADD)
    s = sweep({"l": (ADD, GATE, CNN), "l2": (ADD, CNN)}, REGIMES)
    theirs, mine = pair(GATE, ADD, "l"), pair(CNN, ADD, "l")
    # no consistency test where one of the three is missing: not run for the sign test there
    for arms in ((ADD, GATE), (GATE, CNN)):
        three = sweep({"l": (ADD, GATE, CNN), "l2": arms}, REGIMES)
        assert [p.test for p in kind.plans("F5", three)] == ["F5 · l", "F5 · l2",
                                                             "F5 · l · consistency"]
    later = sweep({"l2": (ADD, CNN), "l": (ADD, GATE, CNN)}, REGIMES)
    assert [p.test for p in kind.plans("F5", later)][-1] == "F5 · l · consistency"
    val = C.LessConsistent(CNN, GATE, ADD, ("long",), "val_acc")
    assert {p.metric for p in val.plans("F5", s)} == {"val_acc"}
    two = C.LessConsistent(CNN, GATE, ADD, ("medium", "long"))
    assert two.plans("F5", sweep({"l": (ADD, GATE)}, REGIMES))[0].missing == (
        "needs fusion gate-cnn (standard/sinusoidal/gate-cnn) beside standard/sinusoidal/add "
        "on a medium/long regime; the sweep has none",)
    assert "add on each medium/long regime by the win rate" in two.describe()
    assert kind.plans("F5", s) == [
        _wins(CNN, ADD, "l", "F5 · l", "F5"), _wins(CNN, ADD, "l2", "F5 · l2", "F5"),
        Plan("F5", "F5 · l · consistency", ("l",), ACC,
             "seeds where standard/sinusoidal/gate-scalar beats standard/sinusoidal/add "
             "against seeds where standard/sinusoidal/gate-cnn does, on l: exact one-sided "
             "McNemar", theirs + mine, (theirs, mine), alternative=C.GREATER,
             estimate_kind=C.WIN_RATE_DIFF, contradicted_if=(WORSE,), arm=GATE.label,
             reference=CNN.label, test_kind="mcnemar")]
    no_gate = sweep({"l": (ADD, CNN)}, REGIMES)
    assert kind.plans("F5", no_gate) == [
        _wins(CNN, ADD, "l", "F5 · l", "F5"),
        Plan("F5", "F5 · consistency", (), ACC, "",
             missing=("variant standard/sinusoidal/gate-scalar not in the sweep",))]
    no_cnn = sweep({"l": (ADD, GATE)}, REGIMES)
    assert kind.plans("F5", no_cnn) == [Plan(
        "F5", "F5", (), ACC, kind.describe(),
        missing=("needs fusion gate-cnn (standard/sinusoidal/gate-cnn) beside "
                 "standard/sinusoidal/add on a long regime; the sweep has none",))]


# ----------------------------------------------------------- ReSSFormer's claim kinds
RESS, SIN = Variant("ressformer", "none", "add"), Variant("standard", "sinusoidal", "add")
NO_ASAM = Variant("ressformer-no-asam", "none", "add")
NO_SOES = Variant("ressformer-no-soes", "sinusoidal", "add")
NO_R2MU = Variant("ressformer-no-r2mu", "none", "add")


def _beats(d: str, claim: str = "C1", ref: Variant = SIN, **kw) -> Plan:
    return Plan(claim, f"{claim} · {d}", (d,), ACC,
                f"test_acc(ressformer/none/add) − test_acc({ref.label}) on {d}",
                pair(RESS, ref, d), (pair(RESS, ref, d),), arm=RESS.label, reference=ref.label,
                **kw)


def test_beats_tests_every_dataset_or_only_the_clean_long_context_ones() -> None:
    s = sweep({"a": (RESS, SIN), "b": (RESS,), "a-shuf": (RESS, SIN)},
              probe_of={"a-shuf": "a"}, long_context=("a", "a-shuf"))
    c1 = C.RESSFORMER.claims[0].kind
    assert c1.variants() == (RESS, SIN) and c1.metrics() == (ACC,)
    assert c1.plans("C1", s) == [
        _beats("a"), Plan("C1", "C1 · b", ("b",), ACC, "",
                          missing=("standard/sinusoidal/add not run on b",)), _beats("a-shuf")]
    c6 = C.Beats(RESS, SIN, only_long=True)
    assert c6.plans("C6", s) == [_beats("a", "C6")]  # its probe is the same training
    assert c6.plans("C6", sweep({"a": (RESS, SIN)})) == [Plan(
        "C6", "C6", (), ACC, c6.describe(),
        missing=("no regime the registry marks long-context (trial tag "
                 "fusion_sweep.long_context; a results file: column long_context)",))]
    c4 = C.RESSFORMER.claims[3].kind
    assert c4.plans("C4", sweep({"a": (RESS, NO_ASAM)})) == [_beats(
        "a", "C4", NO_ASAM, holds_if=(BETTER, EQUIVALENT), contradicted_if=(WORSE,),
        negligible=True)]
    assert c1.plans("C1", sweep({"a": (RESS,)})) == [Plan(
        "C1", "C1", (), ACC, c1.describe(),
        missing=("variant standard/sinusoidal/add not in the sweep",))]
    assert c1.plans("C1", sweep({"a": (RESS, SIN)}, metrics=("loss",))) == [Plan(
        "C1", "C1 · test_acc", (), ACC, "", missing=("metric test_acc not in the data",))]


def test_cheaper_is_a_log_ratio_per_cost_metric_named_when_there_are_several() -> None:
    kind = C.RESSFORMER.claims[4].kind
    assert kind.metrics() == ("latency_ms_per_sample", "flops_per_token")
    s = sweep({"a": (RESS, NO_ASAM)}, metrics=("flops_per_token",))

    def ratio(metric: str) -> Plan:
        return Plan("C5", f"C5 · a · {metric}", ("a",), metric,
                    f"{metric}(ressformer/none/add) / {metric}(ressformer-no-asam/none/add) on a",
                    pair(RESS, NO_ASAM, "a"), (), log=True, estimate_kind=C.RATIO,
                    contradicted_if=(WORSE,), arm=RESS.label, reference=NO_ASAM.label)
    assert kind.plans("C5", s) == [
        Plan("C5", "C5 · latency_ms_per_sample", (), "latency_ms_per_sample", "",
             missing=("metric latency_ms_per_sample not in the data",)),
        ratio("flops_per_token")]
    both = sweep({"a": (RESS, NO_ASAM), "b": (RESS,)},
                 metrics=("flops_per_token", "latency_ms_per_sample"))
    assert [(p.test, p.missing) for p in kind.plans("C5", both) if p.missing] == [
        ("C5 · b · latency_ms_per_sample", ("ressformer-no-asam/none/add not run on b",)),
        ("C5 · b · flops_per_token", ("ressformer-no-asam/none/add not run on b",))]
    one = C.Cheaper(RESS, NO_ASAM, ("flops_per_token",))
    assert [p.test for p in one.plans("C5", s)] == ["C5 · a"]


def test_larger_on_shuffled_differences_the_probe_and_its_clean_regime() -> None:
    kind = C.RESSFORMER.claims[2].kind
    s = sweep({"a": (RESS, SIN), "a-shuf": (RESS, SIN), "b": (RESS,), "b-shuf": (RESS, SIN),
               "c-shuf": (RESS, SIN), "e": (RESS, SIN), "e-shuf": (RESS, SIN)},
              probe_of={"a-shuf": "a", "b-shuf": "b", "c-shuf": "c", "e-shuf": "e"})
    noisy, clean = pair(RESS, SIN, "a-shuf"), pair(RESS, SIN, "a")
    assert kind.plans("C3", s) == [
        Plan("C3", "C3 · a-shuf vs a", ("a-shuf", "a"), ACC,
             "Δ on a-shuf − Δ on a, Δ = test_acc(ressformer/none/add) − "
             "test_acc(standard/sinusoidal/add), same seed on both; one-sided > 0",
             noisy + (Term(-1, "a", RESS), Term(1, "a", SIN)), (noisy, clean),
             alternative=C.GREATER, estimate_kind=C.DIFF_OF_DIFFS, contradicted_if=(WORSE,),
             arm=RESS.label, reference=SIN.label),
        Plan("C3", "C3 · b-shuf vs b", ("b-shuf", "b"), ACC, "",
             missing=("standard/sinusoidal/add not run on b",))] + [  # the probes after it too
        p for p in kind.plans("C3", sweep({"e": (RESS, SIN), "e-shuf": (RESS, SIN)},
                                          probe_of={"e-shuf": "e"}))]
    assert [p.test for p in kind.plans("C3", s)][-1] == "C3 · e-shuf vs e"
    assert kind.plans("C3", sweep({"a": (RESS, SIN)})) == [Plan(
        "C3", "C3", (), ACC, kind.describe(),
        missing=("no structure-noise probe beside its clean regime (trial tag "
                 "fusion_sweep.probe_of; a results file: column probe_of)",))]
    assert kind.plans("C3", sweep({"a": (RESS,), "a-shuf": (RESS,)},
                                  probe_of={"a-shuf": "a"})) == [Plan(
        "C3", "C3", (), ACC, kind.describe(),
        missing=("variant standard/sinusoidal/add not in the sweep",))]


def test_the_ablation_order_tests_each_consecutive_pair_once() -> None:
    kind = C.RESSFORMER.claims[6].kind
    assert kind.variants() == (RESS, NO_SOES, NO_ASAM, NO_R2MU)
    s = sweep({"a": (RESS, NO_SOES, NO_ASAM, NO_R2MU)})

    def order(na: str, a: Variant, nb: str, b: Variant) -> Plan:
        return Plan("C7", f"C7 · a · D_{na} > D_{nb}", ("a",), ACC,
                    f"D_{na} − D_{nb} = test_acc({b.label}) − test_acc({a.label}) on a (D_x = "
                    "test_acc(ressformer/none/add) − test_acc(x): the full model cancels); "
                    "one-sided > 0",
                    (Term(1, "a", b), Term(-1, "a", a)),
                    (pair(RESS, a, "a"), pair(RESS, b, "a")), alternative=C.GREATER,
                    contradicted_if=(WORSE,), arm=f"D_{na}", reference=f"D_{nb}")
    assert kind.plans("C7", s) == [order("soes", NO_SOES, "asam", NO_ASAM),
                                   order("asam", NO_ASAM, "r2mu", NO_R2MU)]
    lacking = sweep({"a": (RESS, NO_SOES, NO_ASAM)})
    assert kind.plans("C7", lacking) == [Plan(  # once, not once per step
        "C7", "C7", (), ACC, kind.describe(),
        missing=("variant ressformer-no-r2mu/none/add not in the sweep",))]


def test_what_each_claim_says_it_tests_word_for_word() -> None:
    said = {c.id: c.kind.describe() for cs in C.CLAIMS.values() for c in cs.claims}
    ress, sin = "ressformer/none/add", "standard/sinusoidal/add"
    two_sided = ("two-sided paired t (Holm over the claim family), TOST with the sweep's "
                 "equivalence margin; holds if better")
    assert said["C1"] == f"test_acc: {ress} vs {sin}, paired by seed, on every regime; {two_sided}"
    assert said["C6"] == (
        f"test_acc: {ress} vs ressformer-no-r2mu/none/add, paired by seed, on each regime the "
        "registry marks long-context (its probes are the same training and are left out); "
        f"{two_sided}")
    assert C.Beats(RESS, SIN, holds_if=(BETTER, EQUIVALENT)).describe().endswith(
        "holds if better or equivalent")
    assert said["C4"] == (
        f"test_acc: {ress} vs ressformer-no-asam/none/add, paired by seed, on every regime; "
        "'negligible impact' is equivalence: TOST within the sweep's margin (Holm over the "
        "set's TOST tests) supports it, as does 'better'; it is contradicted only when the "
        "whole t-interval lies beyond the margin on the worse side; no margin: does not decide")
    assert said["C3"] == (
        f"test_acc: the advantage Δ = {ress} − {sin} is larger on each structure-noise probe "
        "than on the clean regime it re-tests: per seed Δ(shuffled) − Δ(clean) (seeds are "
        "shared across datasets), one-sided t > 0 (Holm over the claim family); opposite "
        "direction at alpha/m")
    assert said["C5"] == (
        f"latency_ms_per_sample and flops_per_token: ratio {ress} / ressformer-no-asam/none/add "
        "per regime, paired by seed: geometric mean with the exponentiated t-interval of the "
        "mean log ratio (two-sided; a ratio equal on every seed is exact); holds if the ratio "
        "is below 1 (better)")
    assert said["C7"] == (
        f"test_acc: drops D_soes > D_asam > D_r2mu per regime (D_soes: {ress} − "
        f"ressformer-no-soes/sinusoidal/add; D_asam: {ress} − ressformer-no-asam/none/add; "
        f"D_r2mu: {ress} − ressformer-no-r2mu/none/add), each consecutive pair tested as "
        "D_a − D_b > 0 paired by seed, one-sided t (Holm over the claim family); opposite "
        "direction at alpha/m")
    assert said["F1"] == (
        "test_acc: every fusion vs add (same encoder and pe), paired by seed, on each short "
        "and medium regime; estimand mean Δ: equivalent within the sweep's margin (TOST, Holm "
        "over the set's TOST tests) supports, a difference decided by the paired t (Holm over "
        "the claim family) contradicts; without a margin it can only be contradicted")
    sign = ("estimand the win rate P(Δ > 0 | Δ ≠ 0): exact one-sided sign test (Holm over the "
            "claim family), the opposite direction at alpha/m")
    assert said["F2"] == (f"test_acc: standard/sinusoidal/gate-scalar beats {sin} on each long "
                          f"regime; {sign}")
    assert said["F4"] == ("test_acc: gate-scalar beats add under every positional encoding "
                          f"the sweep runs both with on each long regime; {sign}")
    assert C.WinsOn(GATE, ADD, ("short", "long")).describe().startswith(
        "test_acc: standard/sinusoidal/gate-scalar beats standard/sinusoidal/add on each "
        "short / long regime;")
    assert said["F3"] == (
        "test_acc: for every fusion vs add, the per-seed Δ on each long regime against each "
        "short/medium one; estimand P(Δ longer > Δ shorter): one-sided Mann–Whitney, "
        "exact to 99,999 splits (Holm over the claim family), the opposite direction at alpha/m")
    assert said["F5"] == (
        f"test_acc: standard/sinusoidal/gate-cnn beats {sin} on each long regime by the win "
        "rate (exact one-sided sign test), and standard/sinusoidal/gate-scalar wins on more "
        "seeds than it there (estimand the win-rate difference: exact one-sided McNemar, "
        "paired by seed); Holm over the claim family")


# ----------------------------------------------------------------------- the verdict rules
def st(plan: Plan | None = None, **kw) -> C._Stats:
    """A claim test's statistics as _statistics leaves them (defaults: a two-sided t pair)."""
    plan = plan or Plan("X", "X · a", ("a",), ACC, "", pair(GATE, ADD, "a"),
                        (pair(GATE, ADD, "a"),))
    return C._Stats(C._Result(plan), **kw)


ONE_SIDED = Plan("X", "X · a", ("a",), ACC, "", pair(GATE, ADD, "a"), (pair(GATE, ADD, "a"),),
                 alternative=C.GREATER, contradicted_if=(WORSE,))


def test_a_one_sided_test_is_better_below_alpha_and_worse_below_alpha_over_m() -> None:
    def v(p_holm: float, opposite: float, m: int = 4) -> str:
        return C._raw_verdict(st(ONE_SIDED, p_opposite=opposite), p_holm, NAN, 0.05, m, [])
    assert v(0.0499, NAN) == BETTER
    assert v(0.05, NAN) == INCONCLUSIVE and v(NAN, NAN) == INCONCLUSIVE
    assert v(0.05, 0.0124) == WORSE  # alpha / m = 0.0125
    assert v(0.05, 0.0125) == INCONCLUSIVE and v(0.05, 0.0126) == INCONCLUSIVE
    assert v(0.05, 0.0249, m=2) == WORSE and v(0.05, 0.025, m=2) == INCONCLUSIVE
    assert v(0.0499, 0.001) == BETTER  # the claimed direction is read first
    assert C._raw_verdict(st(ONE_SIDED, not_learned=True), 0.001, NAN, 0.05, 1, []) == NOT_LEARNED


def test_a_two_sided_test_and_a_ratio_use_the_reports_rules() -> None:
    assert C._raw_verdict(st(ci_low=0.01, ci_high=0.03), 0.01, NAN, 0.05, 1, []) == BETTER
    assert C._raw_verdict(st(ci_low=0.01, ci_high=0.03, higher=False), 0.01, NAN, 0.05, 1,
                          []) == WORSE
    assert C._raw_verdict(st(ci_low=-0.01, ci_high=0.01, equivalence_margin=0.02), 0.5, 0.01,
                          0.05, 1, []) == EQUIVALENT
    ratio = stats.ratio_test(np.array([1.0, 1.1, 1.2]), np.array([2.0, 2.1, 2.3]), 0.05)
    assert C._raw_verdict(st(ratio=ratio), 0.001, NAN, 0.05, 1, []) == stats.ratio_verdict(
        ratio, 0.001, 0.05, True)


WITHIN = Plan("F1", "F1 · a", ("a",), ACC, "", pair(GATE, ADD, "a"), (pair(GATE, ADD, "a"),),
              holds_if=(EQUIVALENT,), contradicted_if=(BETTER, WORSE), equivalence_first=True)


def test_within_noise_is_equivalence_first_then_the_t_test_contradicts() -> None:
    def v(tost: float, p_holm: float = 0.5, margin: float | None = 0.02, lo: float = -0.01,
          hi: float = 0.01) -> tuple[str, list[str]]:
        notes: list[str] = []
        out = C._raw_verdict(st(WITHIN, equivalence_margin=margin, ci_low=lo, ci_high=hi,
                                tost_p=tost), p_holm, tost, 0.05, 1, notes)
        return out, notes
    assert v(0.0499) == (EQUIVALENT, [])
    assert v(0.05) == (INCONCLUSIVE, []) and v(NAN) == (INCONCLUSIVE, [])
    # a real difference the t-test decides contradicts, even beside a TOST at alpha
    assert v(0.05, p_holm=0.01, lo=0.01, hi=0.03) == (BETTER, [])
    no_margin = ("no equivalence margin (--equivalence-margin or the sweep's): 'within "
                 "statistical variation' cannot be shown, only contradicted")
    assert v(0.001, margin=None) == (INCONCLUSIVE, [no_margin])
    assert v(0.001, p_holm=0.01, margin=None, lo=-0.03, hi=-0.01) == (WORSE, [no_margin])


NEGLIGIBLE = Plan("C4", "C4 · a", ("a",), ACC, "", pair(GATE, ADD, "a"), (pair(GATE, ADD, "a"),),
                  holds_if=(BETTER, EQUIVALENT), contradicted_if=(WORSE,), negligible=True)


@pytest.mark.parametrize("higher", [True, False])
def test_negligible_impact_is_equivalence_else_beyond_the_margin_else_better(higher) -> None:
    """The worse side is below 0 when higher is better, above it when lower is: each edge
    mirrored."""

    def v(lo: float, hi: float, p_holm: float = 0.5, tost: float = 0.5,
          margin: float | None = 0.02) -> tuple[str, list[str]]:
        notes: list[str] = []
        lo, hi = (lo, hi) if higher else (-hi, -lo)
        got = C._negligible_verdict(st(NEGLIGIBLE, ci_low=lo, ci_high=hi, higher=higher,
                                       equivalence_margin=margin), p_holm, tost, 0.05, notes)
        assert C._raw_verdict(st(NEGLIGIBLE, ci_low=lo, ci_high=hi, higher=higher,
                                 equivalence_margin=margin), p_holm, tost, 0.05, 1, []) == got
        return got, notes
    assert v(-0.05, 0.01, tost=0.0499) == (EQUIVALENT, [])
    assert v(-0.05, -0.03, tost=0.05) == (WORSE, [
        "worse by more than the margin ±0.02: the whole t-interval lies beyond it"])
    assert v(-0.05, -0.02) == (INCONCLUSIVE, [])  # touching the margin: not beyond it
    assert v(-0.05, -0.0201) == (WORSE, [
        "worse by more than the margin ±0.02: the whole t-interval lies beyond it"])
    assert v(0.001, 0.03, p_holm=0.0499) == (BETTER, [])
    assert v(0.0, 0.03, p_holm=0.0499) == (INCONCLUSIVE, [])
    assert v(0.001, 0.03, p_holm=0.05) == (INCONCLUSIVE, [])
    assert v(0.001, 0.03, p_holm=NAN) == (INCONCLUSIVE, [])
    assert v(NAN, NAN, p_holm=0.001) == (INCONCLUSIVE, [])
    assert v(-0.05, -0.03, tost=0.001, margin=None) == (INCONCLUSIVE, [
        "'negligible impact' needs an equivalence margin (--equivalence-margin or the "
        "sweep's): not decided"])


def test_the_guard_withholds_a_verdict_when_neither_arm_learned_or_one_may_not_have() -> None:
    a, b = pair(GATE, ADD, "a")
    yes, no = Learning(a.arm, "yes", exact=True), Learning(b.arm, "no", chance_level=0.25)
    ok = st(ci_low=0.01, ci_high=0.03, learnings={a.arm: yes, b.arm: no})
    assert C._verdict(ok, 0.01, NAN, 0.05, 1, []) == BETTER
    both_no = st(ci_low=0.01, ci_high=0.03,
                 learnings={a.arm: Learning(a.arm, "no", chance_level=0.25), b.arm: no})
    notes: list[str] = []
    assert C._verdict(both_no, 0.01, NAN, 0.05, 1, notes) == NOT_LEARNED and notes == []
    unsure = st(ci_low=0.01, ci_high=0.03,
                learnings={a.arm: Learning(a.arm, "unknown", chance_level=0.25), b.arm: no})
    assert C._verdict(unsure, 0.01, NAN, 0.05, 1, notes) == INCONCLUSIVE
    assert notes and notes[0].startswith("verdict withheld: ")
    assert "standard/sinusoidal/gate-scalar@a" in notes[0]


def test_a_claimed_arm_at_chance_cannot_support_the_claim() -> None:
    notes: list[str] = []
    clean = st(arm_states={"g@a": "yes"})
    assert C._no_support_from_the_reference(clean, BETTER, SUPPORTS, notes) == (BETTER, SUPPORTS)
    at_chance = st(arm_states={"g@a": "no", "h@a": "yes"})
    assert C._no_support_from_the_reference(at_chance, BETTER, CONTRADICTS, notes) == (
        BETTER, CONTRADICTS) and notes == []
    assert C._no_support_from_the_reference(at_chance, BETTER, SUPPORTS, notes) == (
        NOT_LEARNED, UNDECIDED)
    unknown = st(arm_states={"h@b": "unknown", "g@a": "unknown"})
    assert C._no_support_from_the_reference(unknown, BETTER, SUPPORTS, notes) == (
        BETTER, UNDECIDED)
    tail = "its advantage comes from the reference's loss, not from the arm learning"
    assert notes == [
        f"cannot support the claim: the claimed arm did not beat chance (g@a (at chance)); {tail}",
        "cannot support the claim: the claimed arm did not beat chance (g@a (chance state "
        f"unknown), h@b (chance state unknown)); {tail}"]


def test_a_claimed_arm_blind_to_order_on_an_order_only_label_is_not_testable() -> None:
    plan = Plan("C3", "C3 · a", ("a",), ACC, "", (Term(1, "a", RESS), Term(-1, "a", SIN)), ())
    blind = frozenset({("a", RESS)})
    notes: list[str] = []
    assert C._untestable(plan, BETTER, SUPPORTS, blind, notes) == NOT_TESTABLE
    assert notes == ["ressformer/none/add@a cannot see token order and a's label is order-only"]
    assert C._untestable(plan, NOT_RUN, NOT_RUN, blind, []) == NOT_RUN
    assert C._untestable(plan, BETTER, SUPPORTS, frozenset({("a", SIN)}), []) == SUPPORTS
    assert C._untestable(plan, BETTER, SUPPORTS, frozenset({("b", RESS)}), []) == SUPPORTS
    cost = Plan("C5", "C5 · a", ("a",), "flops_per_token", "", plan.terms, ())
    assert C._untestable(cost, BETTER, SUPPORTS, blind, []) == SUPPORTS
    df = pd.DataFrame({"dataset": ["a", "a", "a", "b"], "label_depends": ["order"] * 3 + ["bag"],
                       "order_access": ["none", "segments", "full", "none"]})
    variant = pd.Series([RESS, NO_R2MU, SIN, RESS])
    assert C._order_blind(df, variant) == frozenset({("a", RESS), ("a", NO_R2MU)})
    assert C._order_blind(df[["dataset", "label_depends"]], variant) == frozenset()
    assert C._order_blind(df[["dataset", "order_access"]], variant) == frozenset()


def test_a_test_supports_contradicts_or_leaves_undecided_by_its_plan() -> None:
    a, b = pair(GATE, ADD, "a")
    learn = {a.arm: Learning(a.arm, "yes", exact=True), b.arm: Learning(b.arm, "yes", exact=True)}
    for verdict, lo, hi, p, support in ((BETTER, 0.01, 0.03, 0.01, SUPPORTS),
                                        (WORSE, -0.03, -0.01, 0.01, CONTRADICTS),
                                        (INCONCLUSIVE, -0.01, 0.03, 0.5, UNDECIDED)):
        t = C._decide(st(ci_low=lo, ci_high=hi, learnings=learn), p, NAN, 0.05, 1, frozenset())
        assert (t.verdict, t.support) == (verdict, support)
    missing = C._decide(st(Plan("X", "X", (), ACC, "", missing=("why",))), NAN, NAN, 0.05, 1,
                        frozenset())
    assert (missing.verdict, missing.support, missing.missing) == (NOT_RUN, NOT_RUN, ("why",))


def test_holm_counts_only_the_claim_tests_with_a_p_and_each_family_apart() -> None:
    a, b = pair(GATE, ADD, "a")
    learn = {a.arm: Learning(a.arm, "yes", exact=True), b.arm: Learning(b.arm, "yes", exact=True)}
    pre = [st(ONE_SIDED, p=0.01, learnings=learn), st(ONE_SIDED, p=0.02, learnings=learn),
           st(ONE_SIDED, p=NAN, learnings=learn),
           st(p=0.2, tost_p=0.01, equivalence_margin=0.1, learnings=learn)]
    tests, m, m_tost = C._holm(pre, 0.05, frozenset())
    assert (m, m_tost) == (3, 1)
    assert [t.p_holm for t in tests[:2]] == pytest.approx([0.03, 0.04])
    assert math.isnan(tests[2].p_holm) and tests[3].tost_p_holm == pytest.approx(0.01)
    assert [t.verdict for t in tests] == [BETTER, BETTER, INCONCLUSIVE, EQUIVALENT]
    # the opposite direction at alpha / m with m = 3 (not 1, not the 4 tests)
    worse = [st(ONE_SIDED, p=0.9, p_opposite=0.0166, learnings=learn),
             st(ONE_SIDED, p=0.9, p_opposite=0.9, learnings=learn),
             st(ONE_SIDED, p=0.9, p_opposite=0.9, learnings=learn)]
    assert C._holm(worse, 0.05, frozenset())[0][0].verdict == WORSE
    worse[0] = st(ONE_SIDED, p=0.9, p_opposite=0.0167, learnings=learn)
    assert C._holm(worse, 0.05, frozenset())[0][0].verdict == INCONCLUSIVE
    assert C._holm([st(ONE_SIDED, p=NAN, p_opposite=0.04, learnings=learn)], 0.05,
                   frozenset())[0][0].verdict == WORSE  # m floored at 1: alpha itself


# --------------------------------------------------------------------- the exact tests
SETTINGS = Settings()


def _res(plan: Plan, d=(), x=(), y=(), dropped=()) -> C._Result:
    return C._Result(plan, list(range(len(d) or len(x))), np.array(d, float), np.array(x, float),
                     np.array(y, float), list(dropped))


SIGN = Plan("F2", "F2 · l", ("l",), ACC, "", pair(GATE, ADD, "l"), (pair(GATE, ADD, "l"),),
            alternative=C.GREATER, test_kind="sign")


def test_the_sign_test_counts_wins_without_ties_and_a_lost_seed_against_the_claim() -> None:
    r = _res(SIGN, d=[0.1, 0.2, 0.3, 0.0, -0.1])
    got = C._exact(r, SIGN, SETTINGS)
    ci = sps.binomtest(3, 4).proportion_ci(0.95, method="exact")
    assert got == dict(estimate=0.75, ci_low=ci.low, ci_high=ci.high,
                       p=sps.binomtest(3, 4, alternative="greater").pvalue,
                       p_opposite=sps.binomtest(1, 4, alternative="greater").pvalue)
    lost = _res(SIGN, d=[0.1, 0.2, 0.3, -0.1],
                dropped=[{"seed": 9, "reason": NON_FINITE}, {"seed": 8, "reason": "missing"}])
    got = C._exact(lost, SIGN, SETTINGS)
    assert got["estimate"] == 0.75  # the win rate of the seeds measured
    assert got["p"] == sps.binomtest(3, 5, alternative="greater").pvalue
    assert got["p_opposite"] == sps.binomtest(2, 5, alternative="greater").pvalue
    assert C._exact(_res(SIGN, d=[0.0, 0.0]), SIGN, SETTINGS) == {}
    assert C._exact(_res(SIGN, d=[0.1, -0.1]), SIGN, SETTINGS)["estimate"] == 0.5
    two_lost = _res(SIGN, d=[0.1, 0.2], dropped=[{"seed": 9, "reason": NON_FINITE},
                                                 {"seed": 8, "reason": NON_FINITE}])
    assert C._exact(two_lost, SIGN, SETTINGS)["p"] == sps.binomtest(
        2, 4, alternative="greater").pvalue
    at_10 = C._exact(_res(SIGN, d=[0.1, 0.2, 0.3, -0.1]), SIGN, Settings(alpha=0.1))
    ci90 = sps.binomtest(3, 4).proportion_ci(0.9, method="exact")
    assert (at_10["ci_low"], at_10["ci_high"]) == (ci90.low, ci90.high)
    loss = replace(SIGN, metric="test_loss")  # lower is better: a negative Δ is a win
    assert C._exact(_res(loss, d=[-0.1, -0.2, 0.3]), loss, SETTINGS)["estimate"] == pytest.approx(
        2 / 3)
    assert C._exact(_res(SIGN, d=[0.1]), SIGN, SETTINGS)["estimate"] == 1.0


RANK = Plan("F3", "F3 · l vs s", ("l", "s"), ACC, "", (), (), alternative=C.GREATER,
            test_kind="rank")
MCNEMAR = Plan("F5", "F5 · l", ("l",), ACC, "", (), (), alternative=C.GREATER,
               test_kind="mcnemar")


def test_the_rank_test_is_exact_mann_whitney_in_the_claimed_direction() -> None:
    x, y = [0.3, 0.2, 0.25, 0.4], [0.1, 0.0, 0.22]
    got = C._exact(_res(RANK, x=x, y=y), RANK, SETTINGS)
    exact = sps.PermutationMethod(n_resamples=np.inf)
    up = sps.mannwhitneyu(x, y, alternative="greater", method=exact)
    down = sps.mannwhitneyu(x, y, alternative="less", method=exact)
    assert got == dict(estimate=up.statistic / 12, p=up.pvalue, p_opposite=down.pvalue)
    assert got["estimate"] == pytest.approx(11 / 12)
    loss = replace(RANK, metric="test_loss")
    flipped = C._exact(_res(loss, x=x, y=y), loss, SETTINGS)
    assert flipped["estimate"] == pytest.approx(1 / 12) and flipped["p"] == down.pvalue
    assert C._exact(_res(RANK, x=[0.3], y=[0.1]), RANK, SETTINGS) == {}
    # tied Δ: still the exact permutation distribution (scipy's default turns asymptotic)
    tx, ty = [0.3, 0.2, 0.2, 0.1], [0.2, 0.1, 0.0, 0.0]
    tied = C._exact(_res(RANK, x=tx, y=ty), RANK, SETTINGS)
    assert tied["p"] == sps.mannwhitneyu(tx, ty, alternative="greater", method=exact).pvalue
    assert tied["p_opposite"] == sps.mannwhitneyu(tx, ty, alternative="less",
                                                  method=exact).pvalue
    assert tied["p"] != sps.mannwhitneyu(tx, ty, alternative="greater").pvalue
    assert C._exact(_res(RANK, x=[0.3, 0.2], y=[0.1, 0.0]), RANK, SETTINGS)["estimate"] == 1.0


def test_a_rank_test_past_the_enumerable_splits_is_monte_carlo_keyed_and_says_so() -> None:
    """20 seeds a sample (the adaptive default's most): C(40, 20) splits cannot be enumerated
    (that call never returned); the p is Monte Carlo from the test's own generator
    (--rng-seed, claim, test), in both directions, and a note names it."""
    x = np.linspace(0.0, 0.19, 20)
    got = C._exact(_res(RANK, x=x + 0.05, y=x), RANK, SETTINGS)
    rng = stats.comparison_rng(SETTINGS.rng_seed, ("claims", "F3", "F3 · l vs s"))
    ref = stats.rank_test(x + 0.05, x, rng)
    assert (got["p"], got["p_opposite"]) == (ref.p_greater, ref.p_less)
    assert got["notes"] == ("rank test p: monte-carlo (99,999 of 137,846,528,820 splits), "
                            "--rng-seed 0",)
    assert got["estimate"] == ref.u / 400 and 0.5 < got["estimate"] < 1
    again = C._exact(_res(RANK, x=x + 0.05, y=x), RANK, Settings(rng_seed=1))
    assert again["p"] != got["p"] and again["notes"][0].endswith("--rng-seed 1")
    other = replace(RANK, test="F3 · m vs s")
    assert C._exact(_res(other, x=x + 0.05, y=x), other, SETTINGS)["p"] != got["p"]


def test_mcnemar_counts_the_seeds_where_only_one_arm_wins() -> None:
    x = [0.1, 0.1, 0.1, -0.1, 0.0, 0.2]  # other's Δ per seed
    y = [0.1, -0.1, 0.0, 0.1, -0.1, -0.2]  # arm's Δ per seed
    got = C._exact(_res(MCNEMAR, x=x, y=y), MCNEMAR, SETTINGS)
    assert got == dict(estimate=(3 - 1) / 6,
                       p=sps.binomtest(3, 4, alternative="greater").pvalue,
                       p_opposite=sps.binomtest(1, 4, alternative="greater").pvalue)
    same = C._exact(_res(MCNEMAR, x=[0.1, -0.1], y=[0.2, -0.3]), MCNEMAR, SETTINGS)
    assert same == dict(estimate=0.0, p=1.0, p_opposite=1.0)
    balanced = C._exact(_res(MCNEMAR, x=[0.1, -0.1], y=[-0.1, 0.1]), MCNEMAR, SETTINGS)
    assert balanced == dict(estimate=0.0, p=0.75, p_opposite=0.75)  # one each way: a test
    loss = replace(MCNEMAR, metric="test_loss")
    lower = C._exact(_res(loss, x=x, y=y), loss, SETTINGS)
    assert lower["estimate"] == pytest.approx((1 - 3) / 6)


def test_the_notes_say_why_a_test_has_no_p_and_which_seeds_were_dropped() -> None:
    def notes(seeds: int, p: float, ratio=None, dropped=()) -> list[str]:
        r = C._Result(ONE_SIDED, list(range(seeds)), dropped=list(dropped))
        return C._notes(C._Stats(r, p=p, ratio=ratio))
    assert notes(1, NAN) == ["1 usable seed(s): no test"]
    assert notes(0, NAN) == ["0 usable seed(s): no test"]
    assert notes(2, NAN) == ["the contrast is the same on every seed (SD 0): t-test undefined"]
    assert notes(2, 0.3) == []
    ratio = stats.ratio_test(np.array([1.0, 2.0]), np.array([2.0, 4.0]), 0.05)
    assert notes(2, NAN, ratio) == []
    assert notes(3, 0.3, dropped=[{"seed": 4, "reason": "missing"},
                                  {"seed": 7, "reason": NON_FINITE}]) == [
        f"2 seed(s) dropped: seed 4 missing; seed 7 {NON_FINITE}"]


# ----------------------------------------------------------------------- the tally
def _test(claim: str, test: str, datasets: tuple[str, ...], support: str,
          verdict: str = BETTER) -> C.ClaimTest:
    return C.ClaimTest(claim, test, datasets, ACC, "", "", "", "", "", 0, (), (), NAN, NAN, NAN,
                       NAN, NAN, None, NAN, NAN, {}, verdict, support, (), (), ())


def test_a_probe_and_its_clean_regime_are_one_training() -> None:
    probe_of = {"a-shuf": "a", "a-shuf-x": "a-x"}
    t = _test("C1", "C1 · a-shuf-x", ("a-shuf-x",), SUPPORTS)
    assert C.training_unit(t, probe_of) == "C1 · a-x"  # the longest name replaced first
    assert C.training_unit(t.to_json(), probe_of) == "C1 · a-x"
    assert C.training_unit(_test("C1", "C1 · a-shuf", ("a-shuf",), SUPPORTS), probe_of) == "C1 · a"
    run = [_test("C1", "C1 · a", ("a",), SUPPORTS),
           _test("C1", "C1 · a-shuf", ("a-shuf",), UNDECIDED),
           _test("C1", "C1 · b", ("b",), CONTRADICTS),
           _test("C1", "C1 · c", ("c",), SUPPORTS),
           _test("C1", "C1 · c-shuf", ("c-shuf",), CONTRADICTS),
           _test("C1", "C1 · e", ("e",), UNDECIDED)]
    assert C._per_training(run, {"a-shuf": "a", "c-shuf": "c"}) == [
        SUPPORTS, CONTRADICTS, UNDECIDED, UNDECIDED]


def _claim() -> C.Claim:
    return C.FUSION_MATTERS.claims[1]


@pytest.mark.parametrize("supports, expected", [
    ((SUPPORTS, SUPPORTS), SUPPORTS), ((SUPPORTS, UNDECIDED), UNDECIDED),
    ((SUPPORTS, CONTRADICTS), MIXED), ((CONTRADICTS, UNDECIDED), CONTRADICTS),
    ((UNDECIDED, UNDECIDED), UNDECIDED), ((SUPPORTS,), SUPPORTS)])
def test_a_claim_is_supported_only_when_every_training_supports_it(supports, expected) -> None:
    tests = [_test("F2", f"F2 · d{i}", (f"d{i}",), s) for i, s in enumerate(supports)]
    tests.append(_test("F2", "F2 · z", ("z",), NOT_TESTABLE))
    tests.append(_test("F2", "F2 · y", ("y",), NOT_RUN, NOT_RUN))
    got = C._summary(_claim(), tests, {})
    assert got.support == expected
    assert (got.n_tests, got.n_claim_tests) == (len(supports), len(supports))
    assert got.n_supports == supports.count(SUPPORTS)
    assert got.n_contradicts == supports.count(CONTRADICTS)
    assert got.n_undecided == supports.count(UNDECIDED)


def test_a_claim_with_no_test_run_is_not_run_or_not_testable() -> None:
    c = _claim()
    never = C._summary(c, [_test("F2", "F2", (), NOT_RUN, NOT_RUN)], {})
    assert never.support == NOT_RUN and never.n_tests == 0
    blind = C._summary(c, [_test("F2", "F2 · a", ("a",), NOT_TESTABLE)], {})
    assert blind.support == NOT_TESTABLE and blind.n_claim_tests == 0
    assert C._summary(c, [], {}).support == NOT_RUN
    got = C._summary(c, [replace(_test("F2", "F2 · b", ("b",), NOT_RUN, NOT_RUN), missing=("y",)),
                         replace(_test("F2", "F2 · a", ("a",), NOT_RUN, NOT_RUN), missing=("x",)),
                         replace(_test("F2", "F2 · c", ("c",), NOT_RUN, NOT_RUN), missing=("x",))],
                    {})
    assert got.missing == ("x", "y")  # each reason once, sorted
    assert (got.claim, got.title, got.where, got.quote) == (c.id, c.title, c.where, c.quote)
    assert got.operationalisation == c.kind.describe()
    assert got.variants == (GATE.label, ADD.label)



# ------------------------------------------------------------- pairing a claim test's seeds
def _cell(value: float, code: str = "c", enc: str = "e", split: str = "s") -> C.Cell:
    return C.Cell(value=value, code=code, fps=(("fp_split", split), ("fp_encoder_init", enc)))


def test_a_claim_test_pairs_the_seeds_every_term_has_and_drops_the_rest() -> None:
    plan = Plan("X", "X · a", ("a",), ACC, "", (Term(-1, "a", ADD), Term(1, "a", GATE)), ())
    cells = {ACC: {("a", *ADD.fields(), 0): _cell(0.5), ("a", *GATE.fields(), 0): _cell(0.75),
                   ("a", *ADD.fields(), 1): _cell(0.25), ("a", *GATE.fields(), 1): _cell(0.5),
                   ("a", *GATE.fields(), 2): _cell(0.5),
                   ("a", *ADD.fields(), 3): _cell(0.5), ("a", *GATE.fields(), 3): _cell(0.5, "d"),
                   ("a", *CNN.fields(), 7): _cell(0.5), ("b", *ADD.fields(), 8): _cell(0.5)}}
    r = C._pair(plan, cells)
    assert r.seeds == [0, 1]  # seeds 7 and 8 are other arms'
    assert r.d.tolist() == [0.25, 0.25]  # GATE - ADD, whatever the terms' order
    assert (r.x.tolist(), r.y.tolist()) == ([0.75, 0.5], [0.5, 0.25])
    assert [(x["seed"], x["reason"]) for x in r.dropped] == [(2, "missing_trial"),
                                                           (3, "code_mismatch")]
    assert r.dropped[0]["detail"] == "standard/sinusoidal/add@a: no trial"
    log = replace(plan, log=True, terms=(Term(1, "a", GATE), Term(-1, "a", ADD)))
    assert C._pair(log, cells).d.tolist() == pytest.approx([math.log(1.5), math.log(2.0)])
    with warnings.catch_warnings():  # a cost of 0 (or below) is a log of -inf (or nan), quietly
        warnings.simplefilter("error")
        zero = {ACC: {**cells[ACC], ("a", *GATE.fields(), 0): _cell(0.0),
                      ("a", *ADD.fields(), 1): _cell(-0.25)}}
        d = C._pair(log, zero).d
    assert d[0] == -math.inf and math.isnan(d[1])
    none = C._pair(replace(plan, missing=("why",)), cells)
    assert (none.seeds, none.d.size, none.dropped) == ([], 0, [])
    empty = C._pair(plan, {ACC: {}})
    assert (empty.seeds, empty.d.shape) == ([], (0,))


def test_a_rank_test_compares_two_pairs_deltas_seed_by_seed() -> None:
    on_l, on_s = pair(GATE, ADD, "l"), pair(GATE, ADD, "s")
    plan = replace(RANK, terms=on_l + on_s, pairs=(on_l, on_s))
    v = {("l", ADD): 0.5, ("l", GATE): 0.875, ("s", ADD): 0.5, ("s", GATE): 0.625}
    cells = {ACC: {(d, *var.fields(), seed): _cell(x + seed / 8, split=d)
                   for (d, var), x in v.items() for seed in (0, 1)}}
    r = C._pair(plan, cells)
    assert (r.x.tolist(), r.y.tolist(), r.d.tolist()) == ([0.375] * 2, [0.125] * 2, [0.25] * 2)


def test_cells_on_two_datasets_agree_on_code_only_and_on_one_on_everything() -> None:
    ta, tb, tc = Term(1, "a", GATE), Term(-1, "a", ADD), Term(1, "b", GATE)
    ok, other_split = _cell(0.5), _cell(0.5, split="t")
    assert C._problem([(ta, ok), (tc, other_split)]) == (None, "")
    reason, detail = C._problem([(ta, ok), (tb, other_split)])
    assert reason == "fingerprint_mismatch" and "split" in detail
    assert C._problem([(ta, ok), (tc, _cell(0.5, code="d"))]) == (
        "code_mismatch", "standard/sinusoidal/gate-scalar@a ran code c, "
        "standard/sinusoidal/gate-scalar@b ran d")
    # every two terms once, the earlier named first
    assert C._problem([(ta, ok), (tb, _cell(0.5, code="d")), (tc, ok)]) == (
        "code_mismatch", "standard/sinusoidal/gate-scalar@a ran code c, "
        "standard/sinusoidal/add@a ran d")
    assert C._problem([(ta, ok), (tb, C.MISSING)]) == (
        "missing_trial", "standard/sinusoidal/add@a: no trial")
    # the encoder body is compared only between arms of one encoder label
    assert C._problem([(ta, ok), (tb, _cell(0.5, enc="f"))])[0] == "fingerprint_mismatch"
    ress = Term(-1, "a", RESS)
    assert C._problem([(ta, ok), (ress, _cell(0.5, enc="f"))]) == (None, "")


def test_a_claim_tests_statistics_follow_its_plan() -> None:
    s = Settings(margin=0.02)
    x, y = np.array([0.8, 0.9, 0.7, 0.85]), np.array([0.7, 0.85, 0.72, 0.8])
    two = C._Result(st().plan, [0, 1, 2, 3], x - y, x, y)
    got = C._statistics(two, s, {})
    t = stats.paired_t(x, y, s.alpha)
    assert (got.estimate, got.ci_low, got.ci_high, got.p) == (t.mean, t.low, t.high, t.p)
    assert got.equivalence_margin == 0.02 and got.tost_p == stats.tost_p(x, y, 0.02)
    assert got.higher and not got.not_learned and got.notes == ()
    assert got.learned == {"standard/sinusoidal/add@a": "n/a",
                           "standard/sinusoidal/gate-scalar@a": "n/a"}
    assert list(got.learned) == sorted(got.learned)
    assert got.arm_states == {"standard/sinusoidal/gate-scalar@a": "n/a"}
    loss = C._statistics(C._Result(replace(st().plan, metric="test_loss"), [0, 1, 2, 3],
                                   x - y, x, y), s, {})
    assert not loss.higher and loss.equivalence_margin == 0.02
    acc_margin = Settings(margin=0.02, margin_metric=ACC)  # a margin in accuracy's units only
    assert C._statistics(C._Result(replace(st().plan, metric="test_loss"), [0, 1, 2, 3], x - y,
                                   x, y), acc_margin, {}).equivalence_margin is None
    one = C._statistics(C._Result(ONE_SIDED, [0, 1, 2, 3], x - y, x, y), s, {})
    t1 = stats.one_sample_t(x - y, s.alpha, C.GREATER)
    assert (one.estimate, one.ci_low, one.ci_high, one.p) == (t1.mean, t1.low, t1.high, t1.p)
    assert one.higher
    assert one.p_opposite == stats.one_sample_t(y - x, s.alpha, C.GREATER).p
    assert one.equivalence_margin is None and math.isnan(one.tost_p)
    # a one-sided test reads its p in the claimed direction already: higher, for any metric
    one_loss = replace(ONE_SIDED, metric="test_loss")
    assert C._statistics(C._Result(one_loss, [0, 1, 2, 3], x - y, x, y), s, {}).higher
    flat = C._statistics(C._Result(ONE_SIDED, [0, 1], np.array([0.1, 0.1])), s, {})
    assert math.isnan(flat.p) and math.isnan(flat.p_opposite)
    assert flat.notes == ("the contrast is the same on every seed (SD 0): t-test undefined",)
    ratio_plan = replace(st().plan, log=True, metric="flops_per_token")
    rt = C._statistics(C._Result(ratio_plan, [0, 1, 2, 3], np.log(x / y), x, y), s, {})
    want = stats.ratio_test(x, y, s.alpha)
    assert (rt.estimate, rt.ci_low, rt.ci_high, rt.p, rt.ratio) == (
        want.ratio, want.low, want.high, want.p, want)
    assert rt.notes == ()  # no note of its own when the ratio varies
    same = C._statistics(C._Result(ratio_plan, [0, 1, 2], np.log([2.0] * 3),
                                   np.array([2.0, 4.0, 6.0]), np.array([1.0, 2.0, 3.0])), s, {})
    assert same.notes == ("the same ratio (2) on every seed: a deterministic cost, no seed "
                          "noise to test; verdict by the ratio itself",)
    per_dataset = Settings(margin={"a": 0.03, "b": 0.5})  # the plan's dataset's own margin
    assert C._statistics(two, per_dataset, {}).equivalence_margin == 0.03
    sign = C._statistics(C._Result(SIGN, [0, 1, 2], np.array([0.1, 0.2, -0.1])), s, {})
    assert sign.estimate == pytest.approx(2 / 3) and sign.p == C._exact(
        C._Result(SIGN, [0, 1, 2], np.array([0.1, 0.2, -0.1])), SIGN, s)["p"]
    skipped = C._statistics(C._Result(replace(SIGN, missing=("why",))), s, {})
    assert math.isnan(skipped.p) and math.isnan(skipped.estimate)
    assert (skipped.learned, skipped.notes, skipped.not_learned) == ({}, (), False)


# -------------------------------------------------------------------- records and JSON
def test_a_claim_tests_json_holds_every_field_as_plain_lists_and_dicts() -> None:
    t = C.ClaimTest("F2", "F2 · l", ("l",), ACC, "g", "a", "c", "win rate", C.GREATER, 2, (3, 4),
                    (0.1, -0.2), 0.5, 0.1, 0.9, 0.3, 0.6, 0.02, 0.04, 0.08,
                    MappingProxyType({"g@l": "yes"}), BETTER, SUPPORTS, ("m",), ({"seed": 5, "reason": "x"},),
                    ("n1",))
    j = t.to_json()
    assert tuple(j) == C.CLAIM_TEST_KEYS
    assert (j["datasets"], j["seeds"], j["deltas"], j["learned"], j["missing"], j["dropped"],
            j["notes"]) == (["l"], [3, 4], [0.1, -0.2], {"g@l": "yes"}, ["m"],
                            [{"seed": 5, "reason": "x"}], ["n1"])
    assert all(type(j[k]) is list for k in ("datasets", "seeds", "deltas", "missing",
                                            "dropped", "notes"))
    assert type(j["learned"]) is dict and type(j["dropped"][0]) is dict
    s = C._summary(_claim(), [t], {})
    js = s.to_json()
    assert tuple(js) == C.CLAIM_KEYS
    assert js["variants"] == [GATE.label, ADD.label] and js["missing"] == ["m"]
    assert type(js["variants"]) is list and type(js["missing"]) is list


def test_a_claim_set_result_names_its_set_and_method() -> None:
    df = pd.DataFrame({"dataset": ["l"] * 4, "encoder": ["standard"] * 4,
                       "pe": ["sinusoidal"] * 4, "fusion": ["add", "gate-scalar"] * 2,
                       "seed": [0, 0, 1, 1], "test_acc": [0.5, 0.6, 0.5, 0.7],
                       "regime": ["long"] * 4})
    df = tidy(df)
    regimes = [C.Regime("l", 100.0, 0, "long")]
    got = C.evaluate(C.FUSION_MATTERS, df, Settings(), {"l": None}, regimes)
    fm = C.FUSION_MATTERS
    assert (got.name, got.title, got.paper) == (fm.name, fm.title, fm.paper)
    assert got.method == f"{C.METHOD}. {fm.notes[0]}"
    two = replace(fm, notes=("one", "two"))
    assert C.evaluate(two, df, Settings(), {"l": None}, regimes).method == (
        f"{C.METHOD}. one. two")
    assert [c.claim for c in got.claims] == ["F1", "F2", "F3", "F4", "F5"]
    f2 = next(t for t in got.tests if t.claim == "F2")
    assert (f2.seeds, f2.deltas, f2.n) == ((0, 1), (pytest.approx(0.1), pytest.approx(0.2)), 2)


def test_a_claim_test_whose_compared_arms_both_sit_at_chance_is_not_learned() -> None:
    from fusion_sweep.analysis.chance import chance_tests
    acc = {ADD: [0.49, 0.51, 0.5, 0.48], GATE: [0.5, 0.52, 0.47, 0.5],
           CNN: [0.9, 0.92, 0.91, 0.93]}
    df = tidy(pd.DataFrame([{"dataset": "l", "encoder": v.encoder, "pe": v.pe,
                             "fusion": v.fusion, "seed": s, "test_acc": a}
                            for v, accs in acc.items() for s, a in enumerate(accs)]))
    _, by_arm, _ = chance_tests(df, [ACC], {"l": 2}, 0.05)
    s = Settings()
    y = np.array(acc[ADD])

    def stats_of(arm: Variant) -> C._Stats:
        plan = replace(st().plan, terms=pair(arm, ADD, "l"), pairs=(pair(arm, ADD, "l"),))
        xa = np.array(acc[arm])
        return C._statistics(C._Result(plan, [0, 1, 2, 3], xa - y, xa, y), s, by_arm)
    both = stats_of(GATE)
    assert both.not_learned and both.learned == {"standard/sinusoidal/add@l": "no",
                                                 "standard/sinusoidal/gate-scalar@l": "no"}
    assert both.arm_states == {"standard/sinusoidal/gate-scalar@l": "no"}
    assert C._raw_verdict(both, 0.001, NAN, 0.05, 1, []) == NOT_LEARNED
    one = stats_of(CNN)  # the arm learned: the reference at chance does not make it so
    assert not one.not_learned and one.arm_states == {"standard/sinusoidal/gate-cnn@l": "yes"}


# ----------------------------------------------------------------------- mutmut's last survivors
def test_nested_dataset_names_are_replaced_longest_first() -> None:
    """'on' sits inside 'a-long' and sorts after it: only longest-first replaces 'a-long'
    whole (shortest-first or by name would rewrite it to 'a-lXg')."""
    probe_of = {"a-long": "R", "on": "X"}
    for datasets in (("on", "a-long"), ("a-long", "on")):
        assert C.training_unit(_test("C1", "C1 · a-long", datasets, SUPPORTS), probe_of) == "C1 · R"


def test_within_noise_without_a_margin_uses_alpha_and_the_metrics_direction() -> None:
    def v(p_holm: float, lo: float, hi: float, higher: bool = True) -> str:
        return C._raw_verdict(st(WITHIN, ci_low=lo, ci_high=hi, higher=higher), p_holm, NAN,
                              0.05, 1, [])
    assert v(0.5, 0.01, 0.03) == INCONCLUSIVE  # p_holm above alpha decides nothing
    assert v(0.01, 0.01, 0.03, higher=False) == WORSE
    assert v(0.01, -0.03, -0.01, higher=False) == BETTER


def test_a_claim_tests_record_keeps_its_metric_margin_and_untestable_notes() -> None:
    plan = Plan("C3", "C3 · a", ("a",), ACC, "", (Term(1, "a", RESS), Term(-1, "a", SIN)), ())
    blind = frozenset({("a", RESS)})
    learn = {x.arm: Learning(x.arm, "yes", exact=True) for x in plan.terms}
    t = C._decide(st(plan, ci_low=0.01, ci_high=0.03, equivalence_margin=0.02, learnings=learn),
                  0.01, NAN, 0.05, 1, blind)
    assert (t.metric, t.equivalence_margin, t.support) == (ACC, 0.02, NOT_TESTABLE)
    assert t.notes == ("ressformer/none/add@a cannot see token order and a's label is "
                       "order-only",)
    missing = Plan("C3", "C3 · a", ("a",), ACC, "", plan.terms, (), missing=("no runs",))
    not_run = C._decide(st(missing), NAN, NAN, 0.05, 1, blind)
    assert (not_run.verdict, not_run.support, not_run.notes) == (NOT_RUN, NOT_RUN, ())
