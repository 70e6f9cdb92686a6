"""Names a user types and the columns a results file may leave out (issue 33): a results file
without `pe` gets the neutral label, "available metrics" lists only metrics, argparse's own
choices get the same hint and compact list as every other name."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from fusion_sweep.analysis import cli
from fusion_sweep.analysis.demo import synthetic_results
from fusion_sweep.analysis.load import metric_columns, read_results_file
from fusion_sweep.analysis.schema import COLUMN_DEFAULTS, ENCODER, PE, RUN_COLUMNS, AnalysisError
from fusion_sweep.cli import main as cli_main
from fusion_sweep.errors import ArgumentParser, unknown_name

FAST = ["--bootstrap", "500"]


def _table() -> pd.DataFrame:
    df = synthetic_results(pes=("sinusoidal",))
    return df[df["dataset"].isin(["synthetic-short", "synthetic-long"])
              & df["fusion"].isin(["add", "concat"])].reset_index(drop=True)


def test_results_without_pe_get_the_neutral_label(tmp_path: Path, capsys) -> None:
    """Not the trial config's default pe: the file does not say which PE its trials used."""
    path = tmp_path / "r.csv"
    _table().drop(columns=["pe", "encoder"], errors="ignore").to_csv(path, index=False)
    df = read_results_file(path)
    assert set(df[PE]) == {COLUMN_DEFAULTS[PE]} == {"unspecified"}
    assert set(df[ENCODER]) == {COLUMN_DEFAULTS[ENCODER]} == {"standard"}
    args = cli.build_parser().parse_args(["stats", "--results", str(path), *FAST,
                                          "--format", "json"])
    assert args.func(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert {c["variant"] for c in report["comparisons"]} == {"standard/unspecified/concat"}


def test_available_metrics_are_metrics_only() -> None:
    """A launch's results.csv carries run ids, keys, attempts, fingerprints and text: none is
    a metric (the schema's column roles, and a metric holds numbers)."""
    df = _table().drop(columns=["test_acc"]).assign(
        mlflow_run_id="0123abcd", trial_key="k", attempts=1, notes="ok", code_fingerprint="c")
    metrics = metric_columns(df)
    never = {"mlflow_run_id", "trial_key", "attempts", "notes", "code_fingerprint", "pe", "seed"}
    assert metrics and not set(metrics) & never and not set(metrics) & set(RUN_COLUMNS)
    assert "best_val_acc" in metrics


@pytest.mark.parametrize("argv, message", [
    (["lanch"], r"argument COMMAND: invalid choice: 'lanch' \(did you mean 'launch'\?\); "
                r"choose from train, datasets, launch, tune, ui, sweeps, stats$"),
    (["stats", "--format", "jsn"], r"argument --format: invalid choice: 'jsn' \(did you mean "
                                   r"'json'\?\); choose from text, json$"),
])
def test_argparse_choices_hint_and_compact_list(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and re.search(message, errors[0]), err


def test_one_spelling_of_an_unknown_name() -> None:
    assert unknown_name("--pe", "sinusodial", ["learned", "sinusoidal"]) == (
        "unknown --pe 'sinusodial' (did you mean 'sinusoidal'?); choose from learned, sinusoidal")
    with pytest.raises(AnalysisError, match=r"^unknown metric 'x'; available metrics: none$"):
        raise AnalysisError(unknown_name("metric", "x", [], "available metrics:"))
    assert isinstance(cli.build_parser(), ArgumentParser)
