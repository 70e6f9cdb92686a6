"""Issue 33, the terminal: the answer first in words, caveats in words, one interval
convention, a width from the terminal, colour on a terminal only, one name per quantity.

Every check runs over the adversarial tables of tests/report_cases.py (the demo tables and
each overclaim file)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fusion_sweep.analysis import cli
from fusion_sweep.analysis.answer import findings
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.report import Settings, analyze
from fusion_sweep.analysis.schema import (
    ANSWER_KEYS, BETTER, EQUIVALENT, INCONCLUSIVE, NOT_LEARNED, WORSE,
)
from fusion_sweep.analysis.records import Comparison
from fusion_sweep.analysis.tables import fci
from fusion_sweep.analysis.text import WIDTH, format_text, terminal_width, use_color

COMPARISON_KEYS = Comparison.json_keys()  # the JSON keys of a comparison: its record's fields

sys.path.insert(0, str(Path(__file__).parent))
import overclaim_files  # noqa: E402
import report_cases  # noqa: E402

CASES = list(report_cases.CASES)
GOLDEN = Path(__file__).parent / "data" / "verdicts_before_i33.json"
MARKS = ("‡", "†", "[1]", "[2]")


def _guard_transition(old: dict, new: dict) -> bool:
    """The two changes issue 39's one guard rule makes, and no other: a better/worse that an
    arm at chance withheld while the other arm learned now stands; an equivalent between arms
    not both shown to beat the majority rate by the exact test is withheld (flagged)."""
    rest = ("key", "win_verdict", "ratio_verdict", "p_holm", "sign_p_holm")
    if any(old.get(k) != new.get(k) for k in rest if k in old):
        return old.get("win_verdict") == "inconclusive" and new.get("win_verdict") in (
            "better", "worse") and all(old.get(k) == new.get(k) for k in rest[:1] + rest[3:])
    stood = (old["verdict"] == "inconclusive" and new["verdict"] in ("better", "worse")
             and old["verdict_flags"][:1] and old["verdict_flags"][0].startswith(
                 f"no '{new['verdict']}': ") and "does not beat chance" in old["verdict_flags"][0]
             and new["verdict_flags"] == old["verdict_flags"][1:])
    withheld = (old["verdict"] == "equivalent" and new["verdict"] == "inconclusive"
                and new["verdict_flags"][0].startswith("no 'equivalent': ")
                and "majority-class predictor" in new["verdict_flags"][0]
                and new["verdict_flags"][1:] == old["verdict_flags"])
    return bool(stood or withheld)


@pytest.mark.parametrize("case", CASES)
def test_no_verdict_changed(case: str) -> None:
    """Every verdict, win-rate verdict, ratio verdict, flag and Holm p of every case is
    byte-identical to the one before issue 33 (tests/data/verdicts_before_i33.json, written
    by tests/report_cases.verdicts at the commit before the interval change), except for the
    two changes of issue 39's one guard rule (_guard_transition)."""
    golden = json.loads(GOLDEN.read_text())[case]
    now = json.loads(json.dumps(report_cases.verdicts(report_cases.report_of(case)),
                                sort_keys=True, default=str))
    assert len(now) == len(golden)
    changed = [(o, n) for o, n in zip(golden, now)
               if json.dumps(o, sort_keys=True) != json.dumps(n, sort_keys=True)]
    bad = [(o, n) for o, n in changed if not _guard_transition(o, n)]
    assert not bad, bad[:2]


@pytest.mark.parametrize("case", CASES)
def test_p_holm_alone_decides_better_and_worse(case: str) -> None:
    """The rule the text states (better/worse iff p_holm < alpha) is the rule the verdict
    applies: the Holm-consistent interval excludes 0 exactly when p_holm < alpha, and then
    the 95% interval shown excludes 0 too."""
    rep = report_cases.report_of(case)
    a = rep.settings.alpha
    for c in rep.comparisons:
        if not np.isfinite(c.p_holm) or not np.isfinite(c.holm_ci_low):
            assert c.verdict not in (BETTER, WORSE) or c.verdict_flags
            continue
        decides = c.p_holm < a
        assert (c.holm_ci_low > 0 or c.holm_ci_high < 0) == decides, c.key
        if decides:
            assert c.t_ci_low > 0 or c.t_ci_high < 0, c.key
        if c.verdict in (BETTER, WORSE):
            assert decides, c.key


@pytest.mark.parametrize("width", [80, 100, 120])
@pytest.mark.parametrize("case", CASES)
def test_every_line_fits_the_width(case: str, width: int) -> None:
    text = format_text(report_cases.report_of(case), width=width, color=False)
    long = [ln for ln in text.splitlines() if len(ln) > width]
    assert not long, long[:3]


@pytest.mark.parametrize("case", CASES)
def test_no_marks_in_any_output(case: str) -> None:
    """Caveats are words: no ‡/† and no numbered footnote markers, default or --wide."""
    rep = report_cases.report_of(case)
    for wide in (False, True):
        text = format_text(rep, wide=wide, width=100, color=False)
        assert not [m for m in MARKS if m in text], (wide, [m for m in MARKS if m in text])


def test_wide_keeps_rows_whole_and_wraps_its_notes() -> None:
    rep = report_cases.report_of("demo")
    text = format_text(rep, wide=True, width=100, color=False)
    assert max(map(len, text.splitlines())) > 100 and "p_wilcoxon" in text
    rule = text.split("\n\nVerdicts name their estimand", 1)[1].split("\n\n", 1)[0]
    assert rule.count("\n") > 2 and max(map(len, rule.splitlines())) <= 100
    notes = [ln for ln in text.splitlines() if ln.startswith("  power and seeds@80%")]
    assert notes and all(len(ln) <= 100 for ln in notes)


def test_the_cli_takes_its_width_from_columns(tmp_path: Path, capsys, monkeypatch) -> None:
    path = tmp_path / "r.csv"
    report_cases.CASES["demo"][0]().to_csv(path, index=False)
    argv = ["stats", "--results", str(path), "--equivalence-margin", "0.01", "--bootstrap",
            "200"]
    for columns in ("80", "100"):
        monkeypatch.setenv("COLUMNS", columns)
        args = cli.build_parser().parse_args(argv)
        assert args.func(args) == 0
        out = capsys.readouterr().out
        assert max(map(len, out.splitlines())) == int(columns)  # fills it, never more
        assert "\x1b[" not in out  # captured: not a terminal
    monkeypatch.delenv("COLUMNS")
    assert terminal_width() == WIDTH  # not a tty, COLUMNS unset


def test_width_and_colour_on_a_terminal(monkeypatch) -> None:
    """A pty is a terminal: colour on (unless NO_COLOR), width from COLUMNS; a pipe and a
    file get neither colour nor escapes (FORCE_COLOR forces it)."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    master, slave = os.openpty()
    r, w = os.pipe()
    with os.fdopen(slave, "w") as tty, os.fdopen(w, "w") as pipe:
        assert use_color(tty) and not use_color(pipe)
        monkeypatch.setenv("COLUMNS", "88")
        assert terminal_width(tty) == 88 and terminal_width(pipe) == 88
        monkeypatch.setenv("NO_COLOR", "1")
        assert not use_color(tty)
        monkeypatch.delenv("NO_COLOR")
        monkeypatch.setenv("FORCE_COLOR", "1")
        assert use_color(pipe)
    os.close(master)
    os.close(r)


def test_colour_paints_verdict_words_only_when_asked() -> None:
    rep = report_cases.report_of("demo")
    plain = format_text(rep, width=100, color=False)
    painted = format_text(rep, width=100, color=True)
    assert "\x1b[" not in plain
    assert "\x1b[32mbetter\x1b[0m" in painted and "\x1b[31mworse\x1b[0m" in painted
    assert "\x1b[2minconclusive\x1b[0m" in painted
    strip = painted
    for code in ("32", "31", "36", "2", "33", "35"):
        strip = strip.replace(f"\x1b[{code}m", "")
    assert strip.replace("\x1b[0m", "") == plain  # colour adds no column
    assert "\x1b[" not in rep.to_json()


def _kinds(case: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in findings(report_cases.report_of(case)):
        out.setdefault(f.kind, []).append(f.sentence)
    return out


def test_answer_sentences_for_each_verdict_kind() -> None:
    demo, default = _kinds("demo"), _kinds("demo_default_like")
    better = default[BETTER][0]
    assert better.startswith("synthetic-medium: gate-vector beats add (mean Δ +0.016, 95% CI "
                             "[+0.010, +0.021], Holm p 0.0094)")
    assert "; win rate undecided (5/5, Holm p 0.38)" in better
    worse = demo[WORSE][0]
    assert " mul is worse than add (mean Δ -0.031, 95% CI [-0.039, -0.022]" in worse
    # issue 39: no majority rate in the demo table, so no equivalence: said in words
    eq = [s for s in default[INCONCLUSIVE] if s.startswith("synthetic-short: concat")][0]
    assert ("synthetic-short: concat vs add is undecided at 5 seeds (mean Δ -0.000" in eq
            and "not shown equivalent: concat's learned? rests on chance = 1/K" in eq)
    assert "nor is it shown equivalent" not in eq
    undecided = [s for s in default[INCONCLUSIVE] if "synthetic-long" in s][0]
    assert "concat vs add is undecided at 5 seeds" in undecided
    assert "its 95% interval excludes 0, but the Holm p does not decide" in undecided
    assert "nor is it shown equivalent within ±0.01" in undecided
    # issue 39: one arm learned, so `worse` stands, and the sentence says which did not
    stands = _kinds("overclaim_asymmetric_guard")[WORSE][0]
    assert stands.startswith("syn: concat is worse than add (mean Δ -0.042")
    assert "concat did not beat chance (0.500), add did" in stands
    (gone,) = _kinds("overclaim_imbalanced_chance")[NOT_LEARNED]
    assert gone == ("brown: neither concat nor add beat chance (0.578), so this comparison "
                    "says nothing about fusion.")
    normal = _kinds("overclaim_collapse")[BETTER][0]
    assert "the mean-Δ verdict rests on normality (add at chance on 2 of 5 seeds)" in normal
    adaptive = findings(report_cases.report_of("overclaim_adaptive_file"))
    assert "descriptive" not in adaptive[0].sentence  # said once, in the summary
    assert "every verdict here is descriptive" in adaptive[-1].sentence
    for case in CASES:  # never "no effect" or "no difference": undecided is undecided
        text = " ".join(f.sentence for f in findings(report_cases.report_of(case)))
        assert "no effect" not in text and "no difference" not in text


def test_a_reference_at_chance_no_longer_withholds_its_comparisons() -> None:
    """The default sweep's shape: the reference at chance on the long regime. Before issue
    39 it withheld both comparisons with it (said once); now the arms learned, so both are
    decided, each sentence says the reference did not beat chance, and nothing is withheld.
    When no arm is shown to learn (no class count) the comparisons are withheld, said once."""
    df = report_cases.CASES["demo_default_like"][0]()
    long = df["dataset"] == "synthetic-long"
    df.loc[long & (df["fusion"] == "add"), "test_acc"] = [0.49, 0.51, 0.5, 0.5, 0.49]
    rep = analyze(tidy(df), Settings(margin=0.01, n_boot=200), {"kind": "file", "path": "x"})
    said = [f for f in findings(rep) if f.dataset == "synthetic-long"]
    assert [f.kind for f in said] == [BETTER, BETTER]
    assert all("add did not beat chance (0.500)" in f.sentence for f in said)
    assert not [f for f in findings(rep) if f.kind == "withheld"]
    unknown = df.drop(columns="num_classes")
    rep = analyze(tidy(unknown), Settings(margin=0.01, n_boot=200), {"kind": "file", "path": "x"})
    w, _ = [f for f in findings(rep) if f.kind == "withheld" and f.dataset == "synthetic-long"]
    assert w.sentence.startswith("synthetic-long: whether concat beats chance is unknown (its "
                                 "class count is unknown), so concat vs add is not decided")
    summary = findings(rep)[-1]
    assert summary.kind == "summary" and "because an arm did not beat chance" in summary.sentence


def _said(rows: list[dict], kind: str, margin: float):
    """The one sentence of `kind` in the answer for a results table of `rows`."""
    rep = analyze(tidy(pd.DataFrame(rows)), Settings(margin=margin, n_boot=200),
                  {"kind": "file", "path": "x"})
    (said,) = [f for f in findings(rep) if f.kind == kind]
    return said


def test_comparisons_with_no_arm_at_chance_are_one_sentence_naming_every_arm() -> None:
    """Two arms and their reference all at the majority rate: one sentence names the three
    and counts the two comparisons it says nothing about; one such comparison alone is the
    one-comparison sentence (test_answer_sentences_for_each_verdict_kind)."""
    df = overclaim_files.imbalanced_chance()
    mul = df[df["fusion"] == "concat"].assign(fusion="mul")
    said = _said(pd.concat([df, mul], ignore_index=True).to_dict("records"), NOT_LEARNED, 0.01)
    assert said.sentence == ("brown: no arm beat chance (0.578): neither concat, mul and add "
                             "did, so these 2 comparisons say nothing about fusion.")
    assert len(said.arms) == 2 and said.reference  # the two comparisons', one reference


def test_a_withheld_verdict_names_the_side_at_chance_and_why() -> None:
    """The reference at chance beside learned arms withholds their equivalence, said of the
    reference with its chance level, once for all of them, by count; an arm whose accuracy is
    the same on every seed (chance known, 1/K) withholds a `better`, said as unknown for that
    reason, not the class count."""
    rows, rate = overclaim_files._rows, dict(test_majority_rate=0.5, test_n=1000)
    arms = ("concat", "mul", "gate-scalar")
    for k, undecided in ((1, "concat vs add is not decided."),
                         (2, "neither comparison with add is decided (concat and mul)."),
                         (3, "none of the 3 comparisons with add is decided (concat, "
                             "gate-scalar and mul).")):
        table = rows("syn", "add", [0.45, 0.55, 0.50, 0.46, 0.54], **rate)
        for arm in arms[:k]:
            table += rows("syn", arm, [0.53, 0.54, 0.53, 0.54, 0.53], **rate)
        said = _said(table, "withheld", 0.1)
        assert said.sentence == ("syn: add did not beat chance (its chance level 0.500), so "
                                 + undecided)
        assert (said.metric, said.group, said.reference, len(said.arms)) == (
            "test_acc", "pe=sinusoidal", "standard/sinusoidal/add", k)
    constant = (rows("syn", "add", [0.50, 0.51, 0.49, 0.50, 0.50])
                + rows("syn", "concat", [0.6] * 5))
    assert _said(constant, "withheld", 0.1).sentence == (
        "syn: whether concat beats chance is unknown (the same accuracy on every seed, or fewer "
        "than 2 seeds), so concat vs add is not decided.")


def test_mean_delta_and_win_rate_disagreeing_is_said(tmp_path: Path) -> None:
    """11 of 12 seeds a little better, one far worse: the sign test decides `better`, the
    mean Δ does not; the sentence says the two estimands disagree."""
    arm = [0.81] * 11 + [0.40]
    rows = [{"dataset": "d", "pe": "sin", "fusion": f, "seed": s, "test_acc": v,
             "num_classes": 2, "median_tokens": 10.0}
            for f, vals in (("add", [0.80] * 12), ("concat", arm))
            for s, v in enumerate(vals)]
    rows = [{**r, "test_acc": r["test_acc"] + 0.001 * r["seed"]} for r in rows]
    rep = analyze(tidy(pd.DataFrame(rows)), Settings(margin=None, n_boot=200),
                  {"kind": "file", "path": "x"})
    (c,) = rep.comparisons
    assert (c.verdict, c.win_verdict) == (INCONCLUSIVE, BETTER)
    f = findings(rep)[0]
    assert f.kind == "disagree"
    assert f.sentence.startswith("d: by win rate concat beats add (win rate 11/12, Holm p ")
    assert "but the mean Δ does not decide (mean Δ -0.024" in f.sentence
    assert f.sentence.endswith("the two estimands disagree.")
    assert "win rate only" in findings(rep)[-1].sentence


def test_the_answer_comes_first_and_is_in_the_json(tmp_path: Path, capsys) -> None:
    rep = report_cases.report_of("demo_default_like")
    text = format_text(rep, width=100, color=False)
    head = text.split("\n\n")[1]
    assert head.startswith("The answer (test_acc; 95% intervals; Holm p over m = 6")
    assert text.index("In short:") < text.index("Verdict grid")
    answer = rep.to_dict()["answer"]
    assert all(tuple(a) == ANSWER_KEYS for a in answer)
    assert [a["sentence"] for a in answer] == [f.sentence for f in findings(rep)]
    assert answer[-1]["kind"] == "summary"
    assert " ".join(head.split()).endswith(" ".join(answer[-1]["sentence"].split()))


@pytest.mark.parametrize("case", ["demo", "demo_default_like", "overclaim_collapse"])
def test_one_name_per_quantity(case: str) -> None:
    """The interval shown is t_ci_* (JSON `comparisons` and `verdict_grid`, level 1 - alpha
    for every cell); the Holm-consistent interval is holm_ci_* and no text shows it; power
    at α/m and power at α are named as in the JSON."""
    rep = report_cases.report_of(case)
    out = rep.to_dict()
    assert {"holm_ci_low", "holm_ci_high", "holm_ci_level"} <= set(COMPARISON_KEYS)
    assert not [k for k in COMPARISON_KEYS if k.startswith("verdict_ci")]
    assert {g["ci_level"] for g in out["verdict_grid"]} == {1 - rep.settings.alpha}
    text = format_text(rep, width=120, color=False)
    wide = format_text(rep, wide=True, width=120, color=False)
    for c in rep.comparisons:
        shown = fci(c.t_ci_low, c.t_ci_high, 3)
        assert shown in text or shown == "—"
        if np.isfinite(c.holm_ci_low) and c.holm_ci_level > 0.98:  # clearly another interval
            for digits in (3, 4):
                holm = fci(c.holm_ci_low, c.holm_ci_high, digits)
                assert holm != fci(c.t_ci_low, c.t_ci_high, digits)
                assert holm not in text + wide
    assert "power at α/m" in wide and "power at α" in wide
    assert "`power`" in text and " power " not in text.replace("power at", "")
