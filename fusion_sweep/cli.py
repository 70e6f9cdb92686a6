"""`fusion-sweep` command line: train | datasets | launch | tune | ui | sweeps | stats."""
from __future__ import annotations

import argparse
import sys

from fusion_sweep import __version__, cli_datasets, cli_sweep, cli_train
from fusion_sweep.analysis import cli as stats_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fusion-sweep",
        description="Does the way positional encodings are fused with token embeddings change "
                    "accuracy, and on which length regime does it exceed seed noise?")
    parser.add_argument("--version", action="version", version=f"fusion-sweep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_train.add_parser(sub)
    cli_datasets.add_parser(sub)
    cli_sweep.add_parsers(sub)
    stats_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, ConnectionError) as e:  # bad input / no data source: a message, no traceback
        print(f"fusion-sweep {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM where a command maps it to an interrupt
        print(f"fusion-sweep {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
