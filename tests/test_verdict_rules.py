"""Issue 20, fixed-n part: every overclaiming path of the issue, reproduced through
`fusion-sweep stats --results FILE.csv` (or `analyze` where the input is an adaptive sweep),
and the claims (C3, C4, probes, C6)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fusion_sweep.analysis import cli
from fusion_sweep.analysis.claims import long_context_of, probes_of, training_unit
from fusion_sweep.analysis.demo import RESS_EFFECTS, synthetic_results, synthetic_ressformer_results
from fusion_sweep.analysis.load import tidy
from fusion_sweep.analysis.report import analyze
from fusion_sweep.analysis.schema import DESCRIPTIVE_LABEL
from fusion_sweep.analysis.settings import Settings

FULL = "standard/sinusoidal/add"
RESS, STD_SIN, NO_ASAM = "ressformer/none/add", FULL, "ressformer-no-asam/none/add"


def _rows(arm: list[float], ref: list[float], seeds: list[int] | None = None,
          fps: dict | None = None, k: int | None = 2) -> pd.DataFrame:
    """One dataset, `concat` vs `add`, one row per seed; fingerprints per seed unless given."""
    seeds = seeds if seeds is not None else list(range(len(arm)))
    rows = []
    for fusion, vals in (("add", ref), ("concat", arm)):
        for i, (s, v) in enumerate(zip(seeds, vals)):
            fp = (fps or {}).get((fusion, i), f"{s:04d}")
            rows.append({"dataset": "d", "pe": "sin", "fusion": fusion, "seed": s,
                         "test_acc": v, "fp_batch_order": f"b{fp}", "fp_shared_init": f"i{s:04d}"
                         if fps is None else f"i{fp}", "fp_split": "same-for-every-seed",
                         **({"num_classes": k} if k else {})})
    return pd.DataFrame(rows)


def _stats(tmp_path: Path, df: pd.DataFrame, capsys, *argv: str) -> dict:
    p = tmp_path / "results.csv"
    df.to_csv(p, index=False)
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--format", "json",
                                          "--bootstrap", "200", *argv])
    assert args.func(args) == 0
    return json.loads(capsys.readouterr()[0])


def test_an_arm_at_chance_with_unknown_learned_state_is_never_equivalent(tmp_path, capsys):
    """Before: an arm constant at 0.5 vs a baseline at chance gave `equivalent` with no
    warning (learned? unknown skipped the not-learned rule). After: inconclusive, and the
    verdict says why."""
    ref = list(0.5 + np.array([0.004, -0.003, 0.002, -0.001, 0.003, -0.004, 0.001, -0.002]))
    out = _stats(tmp_path, _rows([0.5] * 8, ref), capsys, "--equivalence-margin", "0.05")
    (c,) = out["comparisons"]
    assert (c["learned"], c["baseline_learned"]) == ("unknown", "no")
    assert c["verdict"] == "inconclusive"
    assert c["verdict_flags"] == [
        "no 'equivalent': standard/sin/concat has the same accuracy on every seed (or fewer "
        "than 2 "
        "seeds): whether it beats chance is unknown"]
    # unknown class count: no better either
    arm = [r + 0.2 + e for r, e in zip(ref, [1e-3, -1e-3, 2e-3, 0, -2e-3, 1e-3, 0, 1e-3])]
    out = _stats(tmp_path, _rows(arm, ref, k=None), capsys)
    (c,) = out["comparisons"]
    assert c["verdict"] == "inconclusive" and c["t_p"] < 1e-6
    assert c["verdict_flags"] == ["no 'better': chance level unknown for standard/sin/concat "
                                  "(class count unknown)"]


def test_copied_seeds_are_dropped_as_duplicate_fingerprint(tmp_path, capsys):
    """Before: seeds 0, 4 and 2 copied as 5-7 (identical fingerprints) turned an
    inconclusive into `better`. After: every copy is dropped as duplicate_fingerprint."""
    base = [0.80, 0.82, 0.78, 0.81, 0.79]
    d = [0.03, -0.005, 0.025, 0.004, 0.02]
    arm = [b + x for b, x in zip(base, d)]
    honest = _stats(tmp_path, _rows(arm, base), capsys)["comparisons"][0]
    assert honest["verdict"] == "inconclusive"
    copies = [0, 4, 2]
    fps = {(f, i): f"{s:04d}" for f in ("add", "concat") for i, s in enumerate(range(5))}
    fps.update({(f, 5 + j): f"{s:04d}" for f in ("add", "concat") for j, s in enumerate(copies)})
    df = _rows(arm + [arm[s] for s in copies], base + [base[s] for s in copies],
               seeds=list(range(8)), fps=fps)
    out = _stats(tmp_path, df, capsys)
    (c,) = out["comparisons"]
    assert c["verdict"] != "better" and c["seeds"] == [1, 3]
    assert not any("with all" in f for f in c["verdict_flags"])  # copies are never put back
    dup = sorted({d["seed"] for d in out["dropped"] if d["reason"] == "duplicate_fingerprint"})
    assert dup == [0, 2, 4, 5, 6, 7]
    assert any("share the batch_order fingerprint" in d["detail"] for d in out["dropped"])
    # the split fingerprint is the same for every seed by design: never a copy
    assert not [d for d in _stats(tmp_path, _rows(arm, base), capsys)["dropped"]]


def test_a_verdict_below_five_pairs_says_it_rests_on_normality(tmp_path, capsys):
    """Before: deltas 0.0100 and 0.0101 gave `better` (p 0.0032) with nothing beside it."""
    out = _stats(tmp_path, _rows([0.91, 0.9201], [0.90, 0.91]), capsys)
    (c,) = out["comparisons"]
    assert c["verdict"] == "better" and c["t_p"] == pytest.approx(0.0032, abs=2e-4)
    assert c["verdict_flags"] == ["rests on normality (n = 2 < 5)"]
    p = tmp_path / "results.csv"
    args = cli.build_parser().parse_args(["stats", "--results", str(p), "--bootstrap", "200"])
    assert args.func(args) == 0
    text = capsys.readouterr()[0]  # cells may wrap at the terminal width
    assert "better (rests on normality)" in text and "rests on normality (n = 2 < 5)" in " ".join(
        text.split())


def test_a_note_says_when_dropped_pairs_would_change_the_verdict(tmp_path, capsys):
    """Before: dropping the two unfavourable pairs (fingerprint mismatch) turned an
    inconclusive into `better` at n = 3, silently. After: the verdict stays on the checked
    pairs and says what all pairs give."""
    base = [0.80, 0.82, 0.78, 0.81, 0.79]
    arm = [0.83, 0.851, 0.809, 0.76, 0.75]
    fps = {(f, i): f"{i:04d}" for f in ("add", "concat") for i in range(5)}
    fps[("concat", 3)], fps[("concat", 4)] = "bad3", "bad4"  # the two unfavourable pairs
    out = _stats(tmp_path, _rows(arm, base, fps=fps), capsys)
    (c,) = out["comparisons"]
    assert c["n"] == 3 and c["verdict"] == "better"
    assert "with all 5 pairs: inconclusive" in c["verdict_flags"]
    assert any(n.startswith("sensitivity: with the 2 pair(s) dropped") for n in c["notes"])
    honest = _stats(tmp_path, _rows(arm, base), capsys)["comparisons"][0]
    assert honest["verdict"] == "inconclusive" and not honest["verdict_flags"]


def _adaptive(tmp_path: Path | None = None, **kw):
    source = {"kind": "file", "space": {"metric": "test_acc"},
              "adaptive": {"max_seeds": 20, "seed_batch": 5, "alpha": 0.05}}
    s = Settings(baseline=kw.pop("baseline", "add"), n_boot=200, **kw)
    return analyze(tidy(kw.pop("df", None) or synthetic_results()), s, source)


def test_every_fixed_n_output_of_an_adaptive_sweep_is_labelled_descriptive(tmp_path, svg_figures):
    """Before: the across-dataset, seeds-needed and chance tables, the forest plots, the
    claims report, the JSON verdict and the MLflow n_<verdict> metrics carried no label."""
    from fusion_sweep.analysis.mlflow_io import verdict_counts
    from fusion_sweep.analysis.render import write_report
    from fusion_sweep.analysis.tables import interaction_table
    from fusion_sweep.analysis.text import format_text

    rep = _adaptive()
    assert all(c["verdict_flags"][0] == "descriptive" for c in rep.to_dict()["comparisons"])
    text = format_text(rep)
    title = interaction_table(rep, short=True).title
    assert f"{title} ({DESCRIPTIVE_LABEL})" in " ".join(text.split())
    paths = write_report(rep, tmp_path)
    md = (tmp_path / "report.md").read_text()
    for heading in ("Seeds needed", "Chance level"):
        block = md.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
        assert DESCRIPTIVE_LABEL in block, heading
    assert "Across" in md and md.split("## Across", 1)[1].split("\n## ", 1)[0].count(
        DESCRIPTIVE_LABEL) >= 1
    counts = verdict_counts(rep)
    seq = rep.sequential.results
    assert counts["n_inconclusive"] == sum(r.decision == "inconclusive" for r in seq)
    assert sum(v for k, v in counts.items() if k.startswith("descriptive_n_")) == len(
        rep.comparisons)
    fixed = analyze(tidy(synthetic_results()), Settings(n_boot=200))
    assert not any(k.startswith("descriptive_") for k in verdict_counts(fixed))


def test_the_forest_plot_and_claims_of_an_adaptive_sweep_say_descriptive(tmp_path, monkeypatch,
                                                                      svg_figures):
    from fusion_sweep.analysis import plots
    from fusion_sweep.analysis.render import write_report
    from fusion_sweep.analysis.text import format_text

    titles = []
    real = plots.forest_plot
    monkeypatch.setattr(plots, "forest_plot",
                        lambda comps, title, *a, **k: titles.append(title) or real(comps, title,
                                                                                  *a, **k))
    rep = analyze(tidy(synthetic_ressformer_results(seeds=4)),
                  Settings(baseline=FULL, n_boot=200, claims="ressformer"),
                  {"kind": "file", "space": {"metric": "test_acc"},
                   "adaptive": {"max_seeds": 20, "seed_batch": 5, "alpha": 0.05}})
    write_report(rep, tmp_path)
    assert titles and all(DESCRIPTIVE_LABEL in t for t in titles)
    assert rep.claims.method.startswith(DESCRIPTIVE_LABEL)
    header = format_text(rep).split("CLAIMS · ", 1)[1].split("\n\n", 1)[0]
    assert f"({DESCRIPTIVE_LABEL})" in " ".join(header.split())
    assert DESCRIPTIVE_LABEL in (tmp_path / "claims.md").read_text()


# ------------------------------------------------------------------------------- claims
def _claims(df: pd.DataFrame, margin: float | None = 0.02):
    s = Settings(baseline=FULL, n_boot=200, margin=margin, margin_metric="test_acc",
                 claims="ressformer")
    return analyze(tidy(df), s)


def _tests(rep, claim: str) -> list[dict]:
    return [t for t in rep.claims.to_json()["tests"] if t["claim"] == claim]


def _claim(rep, claim: str) -> dict:
    return next(c for c in rep.claims.to_json()["claims"] if c["claim"] == claim)


def test_c3_is_not_supported_by_the_baselines_loss_when_ressformer_sits_at_chance():
    """Before: C3 SUPPORTS while ReSSFormer was at chance on every dataset (its 'advantage'
    went from -0.36 to -0.30 only because the baseline lost accuracy on the probe)."""
    eff = dict(RESS_EFFECTS, **{RESS: None})
    rep = _claims(synthetic_ressformer_results(effects=eff, noise=0.004))
    c3 = _tests(rep, "C3")
    assert c3 and all(t["learned"][f"{RESS}@{t['datasets'][0]}"] == "no" for t in c3)
    assert all(t["estimate"] > 0 for t in c3)  # the contrast alone would support it
    assert {t["support"] for t in c3} == {"does not decide"}
    assert {t["verdict"] for t in c3} == {"not learned"}
    assert all(any("cannot support the claim" in n for n in t["notes"]) for t in c3)
    assert _claim(rep, "C3")["support"] == "does not decide"


def test_c4_negligible_impact_is_decided_by_equivalence_within_the_margin():
    """Before: Δ -0.006, CI [-0.008, -0.005] read CONTRADICTS although TOST shows
    equivalence within ±0.02 (p ~ 7e-7). After: SUPPORTS, by equivalence."""
    eff = dict(RESS_EFFECTS, **{RESS: (0.0, -0.02), NO_ASAM: (0.006, -0.014)})
    # the table as a sweep logs it: the test split's majority rate and size, without which
    # no arm is shown to beat the majority class and no equivalence is given (issue 39)
    raw = synthetic_ressformer_results(effects=eff, seeds=8, noise=0.001)
    rep = _claims(raw.assign(test_majority_rate=1 / raw["num_classes"], test_n=2000))
    c4 = _tests(rep, "C4")
    short = next(t for t in c4 if t["datasets"] == ["synthetic-short"])
    assert short["ci_high"] < 0 and -0.009 < short["estimate"] < -0.003
    assert short["tost_p_holm"] < 1e-3
    assert (short["verdict"], short["support"]) == ("equivalent", "SUPPORTS")
    assert _claim(rep, "C4")["support"] == "SUPPORTS"
    # worse beyond the margin contradicts it; no margin decides nothing
    eff_bad = dict(RESS_EFFECTS, **{NO_ASAM: (0.06, -0.02)})
    bad = _tests(_claims(synthetic_ressformer_results(effects=eff_bad, noise=0.001)), "C4")
    assert {t["support"] for t in bad} == {"CONTRADICTS"}
    none = _tests(_claims(synthetic_ressformer_results(effects=eff, seeds=8, noise=0.001),
                          margin=None), "C4")
    assert {t["support"] for t in none} == {"does not decide"}


def test_shuffled_probes_are_tallied_per_training_not_per_test_set():
    """Before: a regime and its -shuffled probe (the same trained models) counted as two
    replications ('6 of 6'). After: 3 trainings."""
    rep = _claims(synthetic_ressformer_results())
    c1 = _claim(rep, "C1")
    assert (c1["n_tests"], c1["n_supports"], c1["n_claim_tests"]) == (3, 3, 6)
    units = {training_unit(t, probes_of(synthetic_ressformer_results())) for t in _tests(rep, "C1")}
    assert units == {"C1 · synthetic-short", "C1 · synthetic-medium", "C1 · synthetic-long"}


@pytest.mark.parametrize("name", ["longformer-news", "synthetic-long-shuffled", "arxiv_long"])
def test_claims_read_regime_facts_not_names(name: str) -> None:
    """Issue 30 item 5: a probe and a long-context regime are registry facts (the trials'
    tags, the probe_of / long_context columns), never read from a dataset's name."""
    df = synthetic_ressformer_results()
    df = df[df["dataset"] == "synthetic-long"].assign(dataset=name, probe_of="",
                                                      long_context="false")
    assert probes_of(df) == {} and long_context_of(df) == frozenset()
    df = df.assign(long_context="true", probe_of="synthetic-short")
    assert probes_of(df) == {name: "synthetic-short"} and long_context_of(df) == {name}


def test_without_the_registry_columns_no_probe_or_long_regime_is_guessed() -> None:
    df = synthetic_ressformer_results().drop(columns=["probe_of", "long_context", "regime_of"])
    rep = _claims(df)
    (c6,) = _tests(rep, "C6")
    assert c6["verdict"] == "not run" and "long-context" in c6["missing"][0]


def test_c6_long_never_picks_the_shuffled_probe():
    """Before: C6's `long` filter also picked synthetic-long-shuffled."""
    rep = _claims(synthetic_ressformer_results())
    assert [t["datasets"] for t in _tests(rep, "C6")] == [["synthetic-long"]]


def test_consistently_needs_every_testable_regime():
    """Issue 31: "consistently outperforms" (C1) was SUPPORTED by one regime of three (1
    supports, 2 undecided). After: the claim does not decide; the tally says 1 of 3."""
    eff = {**RESS_EFFECTS, "ressformer/none/add": RESS_EFFECTS["standard/sinusoidal/add"]}
    df = synthetic_ressformer_results(effects=eff)
    ress = (df["encoder"] == "ressformer") & df["dataset"].str.startswith("synthetic-long")
    df.loc[ress, "test_acc"] += 0.05
    c1 = _claim(_claims(df, margin=None), "C1")
    assert (c1["n_tests"], c1["n_supports"], c1["n_undecided"]) == (3, 1, 2)
    assert c1["support"] == "does not decide"


def test_the_stats_runs_verdict_metrics_name_their_estimand():
    """Issue 31: a count in MLflow is never read as another estimand's. A fixed-n sweep logs
    the mean-Δ verdicts (n_*) and the win-rate verdicts (win_rate_n_*), each named by a tag;
    an adaptive sweep names its sequential method's estimand."""
    from fusion_sweep.analysis.mlflow_io import estimand_tags, verdict_counts

    fixed = analyze(tidy(synthetic_results()), Settings(n_boot=200))
    counts = verdict_counts(fixed)
    wins = [c.win_verdict for c in fixed.comparisons]
    assert counts["win_rate_n_better"] == wins.count("better")
    assert sum(v for k, v in counts.items() if k.startswith("win_rate_n_")) == len(wins)
    tags = estimand_tags(fixed)
    assert tags["fusion_sweep.estimand.n_"].startswith("mean Δ")
    assert tags["fusion_sweep.estimand.win_rate_n_"].startswith("win rate")
    adaptive = _adaptive()
    assert estimand_tags(adaptive)["fusion_sweep.estimand.n_"].startswith(
        adaptive.sequential.results[0].estimand)
    assert {"descriptive_win_rate_n_better", "descriptive_n_better"} <= set(
        verdict_counts(adaptive))
