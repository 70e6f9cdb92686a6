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
    assert set(out["fingerprints"]) == {"split", "batch_order", "shared_init", "dropout"}
    assert out["config"]["seed"] == 3 and out["config"]["fusion"] == "gate-scalar"


def test_train_text_summary(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert main(["train", "--dataset", "synthetic-short", *TINY, "-o", f"cache_dir={tmp_path}"]) == 0
    assert "test_acc" in capsys.readouterr().out


@pytest.mark.parametrize("argv,pattern", [
    (["--fusion", "sum"], r"unknown fusion 'sum'; choose from \['add'"),
    (["--pe", "rope"], r"unknown pe 'rope'; choose from"),
    (["-o", "d_model=-1"], r"d_model must be a positive integer, got -1"),
    (["-o", "epochs"], r"--override expects KEY=VALUE, got 'epochs'"),
    (["-o", "epoch=2"], r"unknown trial config field\(s\) \['epoch'\]"),
    (["--fusion", "gate-cnn", "-o", "max_len=3"], r"max_len \(3\) is smaller than the gate-cnn kernel"),
    (["--pe", "alibi", "--fusion", "concat"], r"fusion 'concat' needs an input-level positional encoding"),
])
def test_train_bad_input(argv: list[str], pattern: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dataset", "synthetic-short", *argv]) == 2
    assert __import__("re").search(pattern, capsys.readouterr().err)


def test_unknown_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dataset", "mnist"]) == 2
    assert "unknown dataset 'mnist'; choose from ['agnews', 'arxiv', 'imdb', 'synthetic-long'" in capsys.readouterr().err
