"""`fusion-sweep datasets`: every registered dataset, its source, licence and lengths."""
from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "datasets", help="list every dataset: kind, classes, source, licence, lengths",
        description="List every registered dataset with its kind (synthetic / hub / package), "
                    "classes, source, licence and what its label depends on, and, once its "
                    "tokenized cache entry exists, its median and p90 length per split. "
                    "Nothing is fetched or built.")
    add_listing_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON array")
    p.set_defaults(func=run)


def add_listing_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", default="",
                   help="tokenized-data cache (default $FUSION_SWEEP_CACHE or ~/.cache/fusion-sweep)")
    p.add_argument("--data-seed", type=int, default=0,
                   help="lengths of the cache entry built with this data_seed (default 0)")


def print_listing(as_json: bool, cache_dir: str = "", data_seed: int = 0) -> int:
    from fusion_sweep.trial.data import format_listing, list_datasets

    rows = list_datasets(cache_dir=cache_dir, data_seed=data_seed)
    print(json.dumps(rows, indent=1) if as_json else format_listing(rows))
    return 0


def run(args: argparse.Namespace) -> int:
    return print_listing(args.json, args.cache_dir, args.data_seed)
