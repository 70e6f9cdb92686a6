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
from typing import Any, Callable, Iterable


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


def invalid_choice(value: object, valid: Iterable[object]) -> str:
    """`invalid choice: 'x' (did you mean 'y'?); choose from a, b`: argparse's words for a value
    outside an argument's `choices`, with the hint and the compact list."""
    names = [str(v) for v in valid]
    return f"invalid choice: {value!r}{did_you_mean(value, names)}; choose from {choices(names)}"


class _ChoiceCheck:
    """The `type=` of an argument with `choices`: converts with the argument's own `type` (if
    any), then checks the value against `action.choices` (read at each call, so a subcommand
    added later counts). argparse prints the `ArgumentTypeError` as `argument NAME: MESSAGE`, the
    same line its own check would print, and its own check (reprs, no hint) then never fails.

    A subcommand's strings (nargs PARSER) are all converted with this `type` but only the first,
    the command, is a choice: `arm()` (each parse) makes the next call the one checked."""

    def __init__(self, action: argparse.Action) -> None:
        self.action = action
        self.convert: Callable[[str], Any] | None = action.type
        # argparse names a failed conversion after the type (`invalid int value: 'x'`)
        self.__name__ = getattr(action.type, "__name__", repr(action.type))
        self.armed = action.nargs != argparse.PARSER

    def arm(self) -> None:
        self.armed = True

    def __call__(self, text: str) -> Any:
        value = text if self.convert is None else self.convert(text)
        if not self.armed:
            return value
        if self.action.nargs == argparse.PARSER:
            self.armed = False  # the rest are the subcommand's own arguments
        if value not in self.action.choices:
            raise argparse.ArgumentTypeError(invalid_choice(value, self.action.choices))
        return value


def _checked(action: argparse.Action) -> argparse.Action:
    """`action`, its `choices` (if any) checked by a `_ChoiceCheck` as its `type`."""
    if action.choices is not None:
        action.type = _ChoiceCheck(action)
    return action


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with "did you mean" and a compact list for a value outside `choices`
    (`invalid choice: 'lanch' (did you mean 'launch'?); choose from train, ...`); Python 3.11's
    argparse prints the choices' reprs and no hint. Through argparse's public API only: every
    argument with `choices`, added to the parser or to one of its groups, and its subcommands
    are checked first by a `type=` (`_ChoiceCheck`). Subparsers are built with the parent's
    class, so the top-level parser carries it to every subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._commands: list[_ChoiceCheck] = []  # before super(): it adds --help
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        return _checked(super().add_argument(*args, **kwargs))

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument

        def add_checked(*a: Any, **kw: Any) -> argparse.Action:
            return _checked(add(*a, **kw))

        group.add_argument = add_checked  # type: ignore[method-assign]
        return group

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        command = _ChoiceCheck(action)
        action.type = command
        self._commands.append(command)
        return action

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        for command in self._commands:
            command.arm()
        return super().parse_known_args(args, namespace)
