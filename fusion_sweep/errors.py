"""`UserError`: the one type for errors a user causes and can fix (bad input, a missing file, an
unreachable store, a sweep already running). `fusion-sweep` prints it as one `error:` line and
exits 2 (cli.py); every other exception, a library's internal ValueError included, keeps its
traceback. Standard library only, so every layer (trial, analysis, the launcher) may raise it.

A subclass of ValueError: code and tests that catch ValueError still catch it.
"""
from __future__ import annotations


class UserError(ValueError):
    """An error the user caused; its message names the field or file and what would be valid."""
