"""`fusion-sweep train` end to end through the console entry point."""
from __future__ import annotations

import json

import pytest

from fusion_sweep.cli import main

TINY = ["-o", "epochs=1 d_model=16 heads=2 layers=1 dim_ff=32 limit_train=64 limit_eval=32 latency_repeats=1"]


def test_train_json(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    rc = main(["train", "--dataset", "synthetic-short", "--fusion", "gate-scalar", "--pe", "sinusoidal",
               "--seed", "3", *TINY, "-o", f"cache_dir={tmp_path}", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert {"test_acc", "best_val_acc", "params", "fingerprints"} <= set(out)
    assert set(out["fingerprints"]) == {"split", "batch_order", "shared_init", "dropout",
                                       "encoder_init", "platform"}
    assert out["platform"]["torch"] and out["platform"]["threads"]
    assert out["config"]["seed"] == 3 and out["config"]["fusion"] == "gate-scalar"


def test_train_text_summary(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert main(["train", "--dataset", "synthetic-short", *TINY, "-o", f"cache_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "test_acc" in out and "platform     torch " in out


@pytest.mark.parametrize("argv,pattern", [
    (["--fusion", "sum"], r"unknown fusion 'sum'; choose from add, concat, "),
    (["--pe", "rope"], r"unknown pe 'rope'; choose from"),
    (["-o", "d_model=-1"], r"d_model must be a positive integer, got -1"),
    (["-o", "epochs"], r"--override expects KEY=VALUE, got 'epochs'"),
    (["-o", "epoch=2"], r"unknown trial config field\(s\) 'epoch' \(did you mean 'epochs'\?\)"),
    (["--fusion", "gate-cnn", "-o", "max_len=3"], r"max_len \(3\) is smaller than the gate-cnn kernel"),
    (["--pe", "alibi", "--fusion", "concat"], r"fusion 'concat' needs an input-level positional encoding"),
    (["--precision", "fp16"], r"unknown precision 'fp16' \(did you mean 'bf16'\?\); choose from bf16, fp32, tf32"),
])
def test_train_bad_input(argv: list[str], pattern: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dataset", "synthetic-short", *argv]) == 2
    assert __import__("re").search(pattern, capsys.readouterr().err)


def test_unknown_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dataset", "mnist"]) == 2
    assert "unknown dataset 'mnist'; choose from agnews, arxiv, bbc-topic, brown-long" in capsys.readouterr().err


def test_show_config_prints_every_value_and_its_layer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dataset", "arxiv", "--fusion", "concat", "-o", "epochs=3",
                 "--show-config"]) == 0
    lines = {ln.split()[0]: ln.split() for ln in capsys.readouterr().out.splitlines()}
    assert lines["d_model"][1:] == ["128", "dataset", "defaults"]  # ArXiv's, not AG News's
    assert lines["optimizer"][1:] == ["'adam'", "dataset", "defaults"]
    assert lines["epochs"][1:] == ["3", "command", "line"]
    assert lines["fusion"][1:] == ["'concat'", "command", "line"]
    assert lines["device"][1:] == ["'auto'", "built-in"]


def test_show_config_labels_the_identity_defaults_as_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """Only what the command line gives is "command line": the encoder, fusion, pe and seed
    the user did not pass are the config's own defaults (issue 18)."""
    assert main(["train", "--dataset", "synthetic-short", "--pe", "rotary", "--show-config"]) == 0
    lines = {ln.split()[0]: ln.split()[1:] for ln in capsys.readouterr().out.splitlines()}
    assert lines["pe"] == ["'rotary'", "command", "line"]
    for name, value in (("encoder", "'standard'"), ("fusion", "'add'"), ("seed", "0")):
        assert lines[name] == [value, "built-in"], name


def test_config_built_around_the_chain_is_an_error() -> None:
    from fusion_sweep.trial.config import ConfigError, TrialConfig, resolve_hyperparameters

    with pytest.raises(ConfigError, match=r"d_model is not set: build trial configs with "
                                          r"TrialConfig.build\(dataset, \.\.\.\)"):
        TrialConfig(dataset="arxiv")
    assert TrialConfig.build("arxiv").d_model == 128 and TrialConfig.build("imdb").d_model == 256
    values, sources = resolve_hyperparameters(
        "synthetic-short", space_all={"epochs": 2, "lr": 0.01}, space_dataset={"epochs": 3},
        overrides={"lr": 0.02})
    assert (values["epochs"], sources["epochs"]) == (3, "space synthetic-short:")
    assert (values["lr"], sources["lr"]) == (0.02, "command line")
    with pytest.raises(ValueError, match=r"unknown trial config field\(s\) 'dmodel' \(did you mean "
                                         r"'d_model'\?\) \(space all:\)"):
        resolve_hyperparameters("synthetic-short", space_all={"dmodel": 3})


def test_show_config_lists_precision(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dataset", "synthetic-short", "--show-config"]) == 0
    assert [ln.split() for ln in capsys.readouterr().out.splitlines()
            if ln.startswith("precision ")] == [["precision", "'fp32'", "built-in"]]
    assert main(["train", "--dataset", "synthetic-short", "--precision", "bf16",
                 "--show-config"]) == 0
    assert [ln.split(None, 2) for ln in capsys.readouterr().out.splitlines()
            if ln.startswith("precision ")] == [["precision", "'bf16'", "command line"]]
