"""`UserError`: the one type for errors a user causes and can fix (bad input, a missing file, an
unreachable store, a sweep already running). `fusion-sweep` prints it as one `error:` line and
exits 2 (cli.py); every other exception, a library's internal ValueError included, keeps its
traceback. Standard library only, so every layer (trial, analysis, the launcher) may raise it.

A subclass of ValueError: code and tests that catch ValueError still catch it.
"""
from __future__ import annotations

import difflib
from typing import Iterable


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
