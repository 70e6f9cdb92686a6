"""The `fusion-sweep stats` subcommand (also `python -m fusion_sweep.analysis`).

fusion_sweep/cli.py registers it with ``add_parser(subparsers)`` and calls
``args.func(args)``; the return value is the exit code (0 ok, 2 bad input).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from fusion_sweep.analysis.metrics import AUTO
from fusion_sweep.analysis.schema import DATASET, AnalysisError
from fusion_sweep.schema import REPORT_ARTIFACT_DIR
from fusion_sweep.analysis.settings import (
    DEFAULT_ALPHA, DEFAULT_BASELINE, DEFAULT_DIRECTION, DEFAULT_METRIC, DEFAULT_N_BOOT,
    DEFAULT_PAIRS, DEFAULT_RNG_SEED, DIRECTION_FLAGS, PAIR_MODES, Settings,
)
from fusion_sweep.errors import ArgumentParser, choices, did_you_mean, unknown_name

if TYPE_CHECKING:  # the statistics stack is imported only when the command runs
    import pandas as pd

    from fusion_sweep.analysis.report import Report
    from fusion_sweep.analysis.sections import Source

DESCRIPTION = (
    "Pair trials by seed and test each variant (encoder/pe/fusion) against the baseline, per "
    "length regime: paired t (primary, Holm-adjusted across the report), Wilcoxon, sign-flip, "
    "BCa bootstrap, TOST (Holm-adjusted), post hoc power and seeds needed, a chance-level "
    "check per arm (verdict 'not learned'), paired cost ratios, a test of whether the effect "
    "differs across datasets, and (--claims) a paper's claims against the sweep."
)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _dataset_k(text: str) -> tuple[str, int]:
    """--num-classes DATASET=K."""
    dataset, sep, k = text.rpartition("=")
    try:
        value = int(k)
    except ValueError:
        value = 0
    if not sep or not dataset.strip() or value < 2:
        raise argparse.ArgumentTypeError(f"expected DATASET=K with an integer K >= 2, got {text!r}")
    return dataset.strip(), value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `stats` on an argparse subparsers object; sets func=run."""
    p = subparsers.add_parser("stats", help="decide whether each fusion effect exceeds seed noise",
                              description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("input (a results file, or MLflow: default the latest sweep)")
    src.add_argument("--results", metavar="FILE",
                     help="CSV/Parquet (UTF-8) with dataset, fusion, seed + metric columns "
                          "(optional: encoder [default standard], pe [default unspecified: "
                          "the file does not say which], status, fp_split, "
                          "fp_batch_order, fp_shared_init, fp_dropout, fp_encoder_init, "
                          "code_fingerprint, median_tokens, num_classes)")
    src.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI "
                                            "or sqlite:///./mlflow.db)")
    src.add_argument("--experiment", help="MLflow experiment name (default fusion-sweep)")
    src.add_argument("--sweep", help="sweep name (tag fusion_sweep.sweep; default: latest sweep)")
    sel = p.add_argument_group("selection")
    sel.add_argument("--dataset", action="append", default=[], metavar="D",
                     help="dataset to analyse (repeatable; default all)")
    sel.add_argument("--pe", action="append", default=[], metavar="P",
                     help="positional encoding (repeatable; default all)")
    sel.add_argument("--encoder", action="append", default=[], metavar="E",
                     help="encoder variant label, e.g. standard, ressformer-no-asam "
                          "(repeatable; default all)")
    sel.add_argument("--metric", action="append", default=None, metavar="M",
                     help=f"metric column (repeatable; default: the sweep's `metric`, else {DEFAULT_METRIC})")
    sel.add_argument("--baseline", default=None,
                     help="the reference: a fusion name (compare fusions within each dataset, "
                          "encoder and pe) or a full variant label encoder/pe/fusion, e.g. "
                          "standard/sinusoidal/add (compare every variant of a dataset with "
                          f"it); default: the sweep's `baseline`, else {DEFAULT_BASELINE}")
    sel.add_argument("--pairs", choices=PAIR_MODES, default=DEFAULT_PAIRS,
                     help="compare each arm of a group with the baseline, or all pairs of arms")
    sel.add_argument("--claims", default=None, metavar="NAME",
                     help="also test a paper's claims against the sweep (claim sets: "
                          "ressformer); text/JSON gain a claims section, --report DIR gains "
                          "claims.md and claims.html")
    st = p.add_argument_group("statistics")
    st.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                    help=f"family-wise alpha (default {DEFAULT_ALPHA})")
    st.add_argument("--equivalence-margin", type=float, default=None, metavar="M",
                    help="TOST margin in metric units for every dataset (enables the "
                         "'equivalent' verdict, Holm-adjusted over the TOST tests; default: the "
                         "sweep's `equivalence_margin`, one number or per dataset, if any)")
    st.add_argument("--bootstrap", type=_int, default=DEFAULT_N_BOOT, metavar="B",
                    help="bootstrap resamples, also the Monte Carlo sign-flip count above n = 16 "
                         f"(default {DEFAULT_N_BOOT})")
    st.add_argument("--rng-seed", type=_int, default=DEFAULT_RNG_SEED,
                    help=f"seed of every resampling generator (default {DEFAULT_RNG_SEED})")
    st.add_argument("--direction", choices=DIRECTION_FLAGS, default=DEFAULT_DIRECTION,
                    help="which way is better, for every --metric (auto: the sweep's "
                         "`directions`, else by name: error/err/loss/perplexity/latency/params/"
                         "train_seconds lower, acc/accuracy/f1/auc higher; any other name is "
                         "an error asking for this flag)")
    st.add_argument("--num-classes", type=_dataset_k, action="append", default=[],
                    metavar="DATASET=K",
                    help="class count of DATASET, for the chance level 1/K of accuracy-like "
                         "metrics (repeatable; default: the num_classes column/metric; "
                         "unknown -> 'learned?' is unknown)")
    _add_output_arguments(p)


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    out = p.add_argument_group("output")
    out.add_argument("--format", choices=("text", "json"), default="text",
                     help="stdout format (default text)")
    out.add_argument("--wide", action="store_true",
                     help="text: every column of every table, one line per row however long "
                          "(default: fit 120 columns with the verdict grid and a short table "
                          "per regime; JSON and --report always carry every column)")
    out.add_argument("--report", metavar="DIR",
                     help="write report.html (every figure inside it), report.md, stats.json "
                          "and each figure as SVG, PDF and 300-dpi PNG")
    out.add_argument("--log", action="store_true",
                     help="MLflow input: attach the report to the sweep's parent run under "
                          f"{REPORT_ARTIFACT_DIR}/ (replacing the previous one) with its "
                          "verdict counts; without it `stats` only reads the store")


def run(args: argparse.Namespace) -> int:
    """Execute `stats`; bad input prints one `error:` line to stderr and returns 2."""
    try:
        return _run(args)
    except AnalysisError as exc:
        print(f"fusion-sweep stats: error: {exc}", file=sys.stderr)
        return 2


def settings_from(args: argparse.Namespace, space: dict | None = None) -> Settings:
    """Flags win; then the sweep's own search-space choices (MLflow input: space_choices's
    dict); then defaults."""
    from fusion_sweep.analysis.mlflow_io import SpaceChoices
    from fusion_sweep.analysis.report import validated  # heavy imports after argument parsing
    choices = SpaceChoices.of(space)
    if args.equivalence_margin is None and choices.margin_error:
        raise AnalysisError(choices.margin_error)
    if args.direction == AUTO and choices.directions_error:
        raise AnalysisError(choices.directions_error)
    metrics = args.metric or [choices.metric or DEFAULT_METRIC]
    from_flag = args.equivalence_margin is not None
    margin = args.equivalence_margin if from_flag else choices.margin
    return validated(Settings(
        metrics=tuple(metrics), baseline=args.baseline or choices.baseline or DEFAULT_BASELINE,
        pairs=args.pairs, alpha=args.alpha, margin=margin,
        margin_metric=None if from_flag else choices.metric or DEFAULT_METRIC,
        n_boot=args.bootstrap,
        rng_seed=args.rng_seed, datasets=tuple(args.dataset), pes=tuple(args.pe),
        encoders=tuple(args.encoder), direction=args.direction,
        directions=choices.directions, num_classes=dict(args.num_classes) or None,
        claims=args.claims,
    ))


def _run(args: argparse.Namespace) -> int:
    from fusion_sweep.analysis.report import analyze  # heavy imports after argument parsing
    settings_from(args)  # flags first: a bad --alpha fails before any I/O
    if args.log and args.results:
        raise AnalysisError("--log attaches the report to a sweep's parent run in MLflow; "
                            "a --results file has none (use --report DIR)")
    df, source, load_warnings = _load(args)
    _check_datasets(args, df, source)
    settings = settings_from(args, dict(source.space or {}))
    report = analyze(df, settings, source, extra_warnings=load_warnings)
    if args.format == "json":
        print(report.to_json())
        for w in report.warnings:  # stdout stays pure JSON
            print(f"warning: [{w.code}] {w.message}", file=sys.stderr)
    else:
        from fusion_sweep.analysis.text import format_text
        print(format_text(report, wide=args.wide), end="")
    _write_outputs(args, report, source)
    return 0


def _check_datasets(args: argparse.Namespace, df, source: Source) -> None:
    """A --dataset the sweep lacks: say whether the name is known and where it is. A
    --num-classes DATASET the input lacks: the closest dataset it has (a typo would otherwise
    leave the class count unused, silently)."""
    for d, _ in args.num_classes:
        if d not in set(df[DATASET]):
            raise AnalysisError(unknown_name("--num-classes dataset", d, sorted(set(df[DATASET]))))
    missing = [d for d in args.dataset if d not in set(df[DATASET])]
    if not missing or not source.is_mlflow:
        return  # a results file: select() names the values present
    d = missing[0]
    datasets = sorted(set(df[DATASET]))
    present = choices(datasets)
    known = source.known_datasets  # None: a sweep launched before the tag existed
    if known is not None and d not in known:
        # A typo: the sweep's datasets are the names to choose from; the hint may also name
        # a known dataset the sweep lacks (the message below then says where it is).
        hint = did_you_mean(d, datasets) or did_you_mean(d, known)
        raise AnalysisError(f"unknown --dataset {d!r}{hint}; choose from {present} "
                            f"(the datasets of sweep {source.sweep!r})")
    from fusion_sweep.analysis.mlflow_io import sweeps_with_dataset
    others = sweeps_with_dataset(args.tracking_uri, args.experiment, d)
    where = (f"{d} is a known dataset but sweep {source.sweep!r} has none"
             if known is not None else f"sweep {source.sweep!r} has no {d} trials")
    raise AnalysisError(f"{where} (it has {present}); sweeps with {d}: "
                        f"{', '.join(others) or 'none'}"
                        + (f" (pass --sweep {others[0]})" if others else
                           " (launch a search space that lists it under `datasets`)"))


def _load(args: argparse.Namespace) -> tuple[pd.DataFrame, Source, list[dict]]:
    if args.results:
        if args.sweep or args.experiment or args.tracking_uri:
            raise AnalysisError("--results cannot be combined with --tracking-uri/--experiment/--sweep")
        from fusion_sweep.analysis.load import read_results_file
        from fusion_sweep.analysis.sections import Source
        return read_results_file(args.results), Source("file", path=str(args.results)), []
    from fusion_sweep.analysis.mlflow_io import load_sweep
    return load_sweep(args.tracking_uri, args.experiment, args.sweep)


def _write_outputs(args: argparse.Namespace, report: Report, source: Source) -> None:
    """--report DIR; with --log, the report on the sweep's parent run (written to a temp dir
    when no DIR is given). A plain `stats` writes nothing to the store."""
    from fusion_sweep.analysis.render import write_report
    if args.report:
        write_report(report, args.report)
        print(f"report written to {Path(args.report).resolve() / 'report.html'}", file=sys.stderr)
        if report.claims is not None:
            print(f"claims written to {Path(args.report).resolve() / 'claims.html'}",
                  file=sys.stderr)
    if not args.log:
        return
    from fusion_sweep.analysis.mlflow_io import REPORT_PAGE, log_report
    if args.report:
        rid = log_report(source, args.report, report)
    else:
        with tempfile.TemporaryDirectory(prefix="fusion-stats-") as tmp:
            write_report(report, tmp)
            rid = log_report(source, tmp, report)
    print(f"report logged to the sweep's parent run {rid} ({source.sweep}): Artifacts → "
          f"{REPORT_PAGE}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """A standalone parser: `python -m fusion_sweep.analysis stats ...`."""
    parser = ArgumentParser(prog="python -m fusion_sweep.analysis")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
