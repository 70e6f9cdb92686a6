"""`UserError`: the one type for errors a user causes and can fix (bad input, a missing file, an
unreachable store, a sweep already running). `fusion-sweep` prints it as one `error:` line and
exits 2 (cli.py); every other exception, a library's internal ValueError included, keeps its
traceback. Standard library only, so every layer (trial, analysis, the launcher) may raise it.

A subclass of ValueError: code and tests that catch ValueError still catch it.

`ArgumentParser` gives argparse's own choice errors (subcommands, `--direction`, ...) the same
hint and compact list.
"""
from __future__ import annotations

import argparse
import difflib
from typing import Any, Iterable


class UserError(ValueError):
    """An error the user caused; its message names the field or file and what would be valid."""


def did_you_mean(name: object, valid: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest valid name, '' when none is close: the one
    spelling of the hint in every error about a name a user typed."""
    close = difflib.get_close_matches(str(name), [str(v) for v in valid], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def choices(valid: Iterable[object]) -> str:
    """Valid names as a compact list, `a, b, c` (never a Python list's repr)."""
    return ", ".join(str(v) for v in valid) or "none"


def unknown_name(what: str, name: object, valid: Iterable[object], listing: str = "choose from") -> str:
    """`unknown WHAT 'x' (did you mean 'y'?); choose from a, b, c`: the one spelling of an
    error about a name the user typed that is not among `valid` (kept in the given order)."""
    names = [str(v) for v in valid]
    return f"unknown {what} {name!r}{did_you_mean(name, names)}; {listing} {choices(names)}"


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with "did you mean" and a compact list for a value outside `choices`
    (`invalid choice: 'lanch' (did you mean 'launch'?); choose from train, ...`). Python 3.11's
    argparse prints the choices' reprs and no hint; the check is its `_check_value`, the one
    place every choice (subcommand names included) is tested, so that is what is replaced.
    Subparsers are built with the parent's class, so the top-level parser carries it to
    every subcommand."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            valid = [str(c) for c in action.choices]
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}{did_you_mean(value, valid)}; "
                        f"choose from {choices(valid)}")
