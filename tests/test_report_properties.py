"""Properties of the whole `stats` report over generated sweeps (Hypothesis; issue 42, item 3),
read through its JSON (tests/report_json.py):

- a selection (--dataset, --pe, --encoder) never changes the family's m, any Holm-adjusted p
  or any verdict of a comparison it still shows;
- every sentence of the answer says only what the JSON decided: each estimand a sentence
  names (mean Δ, win rate) has that decided verdict for that comparison, and an undecided
  sentence has none;
- mirroring the metric's direction (`--direction lower`) mirrors every verdict and moves no p;
- an adaptive sweep's sequential decisions use the alpha the launch recorded, never the
  `stats --alpha` of the reader.

Few examples (each is a whole report), derandomised: the same inputs on every run.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from fusion_sweep.analysis.cli import main  # noqa: E402
from report_json import comparison, row, stats_json  # noqa: E402

REPORT = settings(derandomize=True, database=None, deadline=None, max_examples=8,
                  suppress_health_check=[HealthCheck.too_slow,
                                         HealthCheck.function_scoped_fixture])
FUSIONS = ("add", "gate", "concat")  # add is the baseline
DECIDED = ("better", "worse", "equivalent")
KIND_OF_VERB = {"beats": "better", "is worse than": "worse", "is equivalent to": "equivalent"}


@st.composite
def sweeps(draw, datasets: tuple[str, ...] = ("d",), pes: tuple[str, ...] = ("sinusoidal",)
           ) -> list[dict]:
    """Rows of a finished sweep: per (dataset, pe, fusion) an effect in {-0.06, 0, +0.06} over
    add, seed noise from a drawn generator; test_loss moves against test_acc."""
    n = draw(st.integers(6, 10))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    rows = []
    for dataset in datasets:
        for pe in pes:
            base = 0.7 + 0.02 * rng.standard_normal(n)  # (n,) the seed's shared difficulty
            for fusion in FUSIONS:
                effect = 0.0 if fusion == "add" else draw(st.sampled_from([-0.06, 0.0, 0.06]))
                acc = np.round(base + effect + 0.01 * rng.standard_normal(n), 3)  # (n,)
                for seed, a in enumerate(acc):
                    rows.append(row(fusion, seed, float(a), dataset=dataset, pe=pe,
                                    test_loss=round(1.2 - a + 0.005 * rng.standard_normal(), 4)))
    return rows


def _holm_view(rep: dict) -> dict:
    """Per comparison: its adjusted p values and verdicts (what a selection must not move)."""
    keys = ("p_holm", "sign_p_holm", "tost_p_holm", "verdict", "win_verdict")
    return {(c["dataset"], c["variant"], c["baseline_variant"], c["metric"]):
            tuple(c.get(k) for k in keys) for c in rep["comparisons"]}


@REPORT
@given(sweeps(datasets=("d1", "d2"), pes=("sinusoidal", "rope")),
       st.sampled_from([("--dataset", "d1"), ("--dataset", "d2"), ("--pe", "rope"),
                        ("--pe", "sinusoidal"), ("--dataset", "d2", "--pe", "rope"),
                        ("--encoder", "standard")]))
def test_a_selection_never_changes_m_or_any_holm_p(tmp_path_factory, rows: list[dict],
                                                    selection: tuple[str, ...]) -> None:
    tmp = tmp_path_factory.mktemp("sel")
    everything = _stats(rows, tmp)
    some = _stats(rows, tmp, *selection)
    assert some["family"]["m"] == everything["family"]["m"] == 8  # 2 datasets x 2 pes x 2
    whole, shown = _holm_view(everything), _holm_view(some)
    assert shown and set(shown) <= set(whole)
    for key, values in shown.items():
        assert values == whole[key], key
    # the selection really selected
    if "--dataset" in selection:
        assert {k[0] for k in shown} == {selection[selection.index("--dataset") + 1]}


def _stats(rows: list[dict], tmp: Path, *args: str) -> dict:
    """`stats --format json` on these rows, stdout captured here: Hypothesis runs many inputs
    in one test, so pytest's function-scoped capsys cannot separate them."""
    buf = io.StringIO()
    path = tmp / "results.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with contextlib.redirect_stdout(buf):
        rc = main(["stats", "--results", str(path), "--format", "json", "--bootstrap", "200",
                   "--baseline", "add", *args])
    assert rc == 0, buf.getvalue()
    return json.loads(buf.getvalue())


def _said(sentence: str, arm: str) -> dict[str, str]:
    """Estimand -> the verdict the sentence gives it for `arm` ("mean Δ", "win rate")."""
    verbs = "|".join(map(re.escape, KIND_OF_VERB))
    said = {}
    m = re.search(rf"by mean Δ {re.escape(arm)} ({verbs})", sentence)
    if m:
        said["mean Δ"] = KIND_OF_VERB[m.group(1)]
    m = re.search(rf"by win rate (?:{re.escape(arm)}|it) ({verbs})", sentence)
    if m:
        said["win rate"] = KIND_OF_VERB[m.group(1)]
    m = re.search(r"; by win rate (better|worse) \(", sentence)
    if m:
        said["win rate"] = m.group(1)
    m = re.search(rf": {re.escape(arm)} ({verbs}) ", sentence)
    if m and "by " not in sentence.split(":", 1)[1].split("(")[0]:
        said["mean Δ"] = KIND_OF_VERB[m.group(1)]
        if not re.search(r"win rate undecided|; by win rate", sentence):
            said["win rate"] = KIND_OF_VERB[m.group(1)]  # "(mean ...; win rate ...)": both
    return said


@REPORT
@given(sweeps(), st.booleans())
def test_every_sentence_names_only_decided_json_verdicts(tmp_path_factory, rows: list[dict],
                                                         two_metrics: bool) -> None:
    metrics = ("--metric", "test_acc", "--metric", "test_loss") if two_metrics else ()
    rep = _stats(rows, tmp_path_factory.mktemp("ans"), *metrics)
    short = {c["variant"]: c["fusion"] for c in rep["comparisons"]}
    for entry in rep["answer"]:
        if entry["kind"] not in (*DECIDED, "disagree", "inconclusive"):
            continue
        (variant,) = entry["arms"]
        c = next(c for c in rep["comparisons"] if c["variant"] == variant
                 and c["baseline_variant"] == entry["reference"]
                 and c["metric"] == entry["metric"] and c["dataset"] == entry["dataset"])
        verdicts = {"mean Δ": c["verdict"], "win rate": c["win_verdict"]}
        said = _said(entry["sentence"], short[variant])
        if entry["kind"] == "inconclusive":
            assert not said and c["verdict"] not in DECIDED, entry
            assert c["win_verdict"] not in DECIDED, entry
            continue
        assert said, entry  # a decided sentence names its estimand's verdict
        for estimand, verdict in said.items():
            assert verdicts[estimand] == verdict, (estimand, entry, verdicts)
        if entry["kind"] in DECIDED:
            assert c["verdict"] == entry["kind"], entry
        if "win rate undecided" in entry["sentence"]:
            assert c["win_verdict"] not in DECIDED, entry


SWAP = {"better": "worse", "worse": "better"}


@REPORT
@given(sweeps())
def test_mirroring_the_metrics_direction_mirrors_every_verdict(tmp_path_factory,
                                                               rows: list[dict]) -> None:
    """The same numbers read as higher-is-better and as lower-is-better (a metric whose
    direction only --direction gives): every better is worse and back, by mean Δ and by win
    rate; no p value and nothing undecided moves."""
    tmp = tmp_path_factory.mktemp("dir")
    rows = [{**r, "score": r["test_acc"]} for r in rows]
    up, down = (_stats(rows, tmp, "--metric", "score", "--direction", way)
                for way in ("higher", "lower"))
    keys = ("p_holm", "sign_p_holm", "tost_p_holm", "wins", "losses")
    for a, b in zip(up["comparisons"], down["comparisons"], strict=True):
        assert a["variant"] == b["variant"] and a["dataset"] == b["dataset"]
        assert [a.get(k) for k in keys] == [b.get(k) for k in keys]
        assert b["verdict"] == SWAP.get(a["verdict"], a["verdict"]), (a["verdict"], b["verdict"])
        assert b["win_verdict"] == SWAP.get(a["win_verdict"], a["win_verdict"])


# ------------------------------------------------------------------ the launch's alpha
ADAPTIVE = {"max_seeds": 20, "seed_batch": 5, "method": "win-rate"}


def _adaptive_rows(n: int, launch_alpha: float) -> list[dict]:
    """One comparison, gate wins on each of n seeds, from a sweep launched --until-decided at
    launch_alpha with a family of one."""
    family = {"m": 1, "members": [{"dataset": "d", "family": "", "variant":
                                   "standard/sinusoidal/gate", "baseline_variant":
                                   "standard/sinusoidal/add"}]}
    rows = []
    for seed in range(n):
        for fusion, acc in (("add", 0.70 + 0.01 * seed), ("gate", 0.75 + 0.01 * seed)):
            rows.append(row(fusion, seed, acc, comparison_family=json.dumps(family),
                            adaptive=json.dumps({**ADAPTIVE, "alpha": launch_alpha})))
    return rows


@pytest.mark.parametrize("launch_alpha, stats_alpha, decided", [
    (0.2, 0.05, True),   # 5 wins: 2^5/6 = 5.3 >= 1/0.2, decided at the launch's alpha
    (0.05, 0.2, False),  # ... and not at 0.05 (needs 2^n/(n+1) >= 20), whatever --alpha says
    (0.2, 0.2, True),
    (0.05, 0.05, False),
])
def test_the_sequential_decision_reads_the_alpha_the_launch_recorded(
        tmp_path, capsys, launch_alpha: float, stats_alpha: float, decided: bool) -> None:
    rep = stats_json(_adaptive_rows(5, launch_alpha), tmp_path, capsys, "--baseline", "add",
                     "--alpha", str(stats_alpha))
    seq = rep["sequential"]
    assert seq["alpha"] == launch_alpha and seq["m"] == 1
    (result,) = seq["results"]
    assert (result["decision"] == "better") is decided, result
    # the fixed-n statistics (descriptive here) stay at the reader's --alpha
    assert rep["settings"]["alpha"] == stats_alpha
    assert comparison(rep, "gate")["n"] == 5
