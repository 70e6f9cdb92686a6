"""`fusion-sweep` command line: train | datasets | launch | tune | ui | sweeps | stats."""
from __future__ import annotations

import argparse
import errno
import os
import sys

from fusion_sweep import __version__
from fusion_sweep.cli import datasets as cli_datasets
from fusion_sweep.cli import sweep as cli_sweep
from fusion_sweep.cli import train as cli_train
from fusion_sweep.analysis import cli as stats_cli
from fusion_sweep.errors import ArgumentParser, UserError

def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
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
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in Python's flush at exit
        return code
    except BrokenPipeError:  # `... | head` closed the pipe: what was read is all that is wanted
        return _closed_pipe()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM where a command maps it to an interrupt
        print(f"fusion-sweep {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - only the errors a user caused become one line
        if isinstance(e, OSError) and e.errno == errno.EPIPE:
            return _closed_pipe()
        if not isinstance(e, UserError):
            raise  # a bug keeps its traceback
        print(f"fusion-sweep {args.command}: error: {e}", file=sys.stderr)
        return 2


def _closed_pipe() -> int:
    """Exit quietly after the reader of stdout went away (`| head`): point stdout at /dev/null
    so Python's own flush at exit does not raise the same error again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0
