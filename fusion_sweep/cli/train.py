"""`fusion-sweep train`: one trial, printed as a summary or one JSON object."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fusion_sweep.schema import DEFAULT_ENCODER, platform_label
from fusion_sweep.errors import UserError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "train", help="train and evaluate one (dataset, encoder, pe, fusion, seed) trial",
        description="Train one trial with the dataset's fixed hyperparameters (see `--show-config`).")
    p.add_argument("--dataset", required=True, help="dataset name; `--dataset list` prints them all (as `fusion-sweep datasets`)")
    # No argparse defaults: what is not given keeps the trial config's own default, and
    # --show-config reports it as such, not as set on the command line.
    p.add_argument("--encoder",
                   help=f"encoder body: standard or ressformer (default {DEFAULT_ENCODER}; its "
                        f"switches and hyperparameters are ordinary config fields: --override "
                        f"soes=false iterations=2)")
    p.add_argument("--fusion", help="how positions are fused with tokens (default: the config's, "
                                    "see --show-config)")
    p.add_argument("--pe", help="positional encoding (default: the config's, see --show-config)")
    p.add_argument("--seed", type=int, help="the trial's seed (default: the config's)")
    p.add_argument("--precision",
                   help="arithmetic precision: fp32 (default), tf32 (TensorFloat-32 matmuls on "
                        "CUDA) or bf16 (bfloat16 autocast, fp32 master weights); part of the "
                        "trial key")
    p.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="any trial-config field, e.g. epochs=3 max_len=128 limit_train=500")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--predictions", action="store_true", help="include per-example predictions in --json")
    p.add_argument("--show-config", action="store_true",
                   help="print every resolved config value and the layer it came from (dataset "
                        "defaults, command line, built-in), then exit without training")
    p.set_defaults(func=run)


def parse_overrides(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for part in item.split():
            if "=" not in part:
                raise UserError(f"--override expects KEY=VALUE, got {part!r}")
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def run(args: argparse.Namespace) -> int:
    if args.dataset == "list":
        from fusion_sweep.cli.datasets import print_listing

        return print_listing(args.json)
    from fusion_sweep.trial.config import TrialConfig, resolve_hyperparameters

    flags = {k: getattr(args, k) for k in ("encoder", "fusion", "pe", "seed", "precision")}
    given = {**{k: v for k, v in flags.items() if v is not None}, **parse_overrides(args.override)}
    config = TrialConfig.build(args.dataset, **given)
    if args.show_config:
        _, sources = resolve_hyperparameters(args.dataset, overrides=given)
        print(format_config(config, sources))
        return 0
    from fusion_sweep.trial.trainer import EpochRecord, train_trial

    def progress(r: EpochRecord) -> None:
        print(f"epoch {r.epoch:3d}  train_loss {r.train_loss:.4f}  train_acc {r.train_acc:.4f}  "
              f"val_acc {r.val_acc:.4f}  {r.tokens_per_second:,.0f} tok/s", file=sys.stderr)

    result = train_trial(config, callback=progress)
    if args.json:
        print(json.dumps(result.to_json_dict(predictions=args.predictions)))
        return 0
    m = result.metrics()
    print(f"{config.dataset}  encoder={config.encoder_variant()}  pe={config.pe}  "
          f"fusion={config.fusion}  seed={config.seed}")
    print(f"  test_acc {m['test_acc']:.4f}   test_macro_f1 {m['test_macro_f1']:.4f}   "
          f"best_val_acc {m['best_val_acc']:.4f} (epoch {result.best_epoch}/{result.epochs_run})")
    print(f"  params {result.params:,} (fusion {result.fusion_params:,})   "
          f"{result.flops_per_token:,.0f} FLOPs/token   "
          f"{result.tokens_per_second:,.0f} train tok/s   latency {m['latency_ms_per_sample']:.3f} ms/doc")
    print("  fingerprints " + "  ".join(f"{k}={v}" for k, v in result.fingerprints.items()))
    print(f"  platform     {platform_label(result.platform)}  (results are identical only on "
          f"the same platform)")
    return 0


def format_config(config, sources: dict[str, str]) -> str:
    """One line per field: name, resolved value, the chain layer it came from."""
    from fusion_sweep.trial.config import COMMAND_LINE

    rows = [("dataset", repr(config.dataset), COMMAND_LINE)]
    rows += [(k, repr(v), sources.get(k, "built-in")) for k, v in config.to_dict().items()
             if k != "dataset"]
    w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    return "\n".join(f"{k:<{w0}}  {v:<{w1}}  {src}" for k, v, src in rows)
