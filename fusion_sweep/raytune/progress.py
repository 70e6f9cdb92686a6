"""A sweep's progress that a person can read: `fusion-sweep launch` without `--verbose`.

`SweepProgress` is driven by Ray Tune's supported callback hooks (`ray.tune.Callback`:
`setup`, `on_trial_start`, `on_trial_result`, `on_trial_complete`, `on_trial_recover`,
`on_trial_error`, `on_step_end`, `on_experiment_end`); `fusion_sweep.raytune.callback` wraps it in
a real `ray.tune.Callback` for `RunConfig(callbacks=...)`, and the launch runs Tune with
`verbose=0`, so Tune's own output engine prints nothing and no Ray log text is filtered. The
display needs no Ray import: it is tested with fake trials.

* On a terminal: one status line, redrawn in place about once a second::

      [2/4] 1 running, 1 pending, 0 failed | 0:23, ETA 0:18 | last: synthetic-short/sinusoidal/add/seed 0  test_acc 0.156 (7 s)

  plus a permanent line for each failure or retry (errors are never only transient). When
  the line is too long for the terminal, the trial's name is shortened, never its numbers.
* Elsewhere (CI, `| tee log`): one line per finished or failed trial::

      [1/4] synthetic-short/sinusoidal/add/seed 0  test_acc 0.156  (7 s)  elapsed 0:23  ETA 0:45

A resumed sweep's trials that finished in an earlier launch count as done (`trained` 0 in
their last result); the ETA only uses trials trained in this launch.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, Callable, TextIO

from fusion_sweep import schema

REDRAW_S = 1.0  # the terminal line's refresh period
MIN_NAME = 12  # a trial name shortened below this says nothing: left out instead


def fmt_duration(seconds: float | None) -> str:
    """`m:ss`, or `h:mm:ss` from an hour on; `--` when unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def trial_label(config: dict) -> str:
    """`dataset/pe/fusion/seed N`, the grid point of a trial (flat, or under `trial`); the
    encoder variant is shown after the dataset unless it is the standard encoder."""
    if isinstance(config, dict) and isinstance(config.get("trial"), dict):
        config = config["trial"]
    try:
        return schema.trial_label(config)
    except (KeyError, TypeError, AttributeError):
        return str(config)


def _error_line(trial: Any) -> str:
    """The last line of a failed trial's error file (`ValueError: ...`), the memory monitor's
    kill line for an OOM kill, else ''."""
    try:
        path = trial.error_file
        if path and os.path.isfile(path):
            with open(path, errors="replace") as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            # A memory-monitor kill has no traceback: its error file is Ray's long OOM report
            # (per-process tables, advice), whose first line says what happened.
            oom = [ln for ln in lines if "killed due to the node running low on memory" in ln]
            if oom:
                return f"OutOfMemoryError (Ray's memory monitor): {oom[0][:160]}"
            return lines[-1][:200] if lines else ""
    except Exception:  # noqa: BLE001 - a progress line must never break the sweep
        pass
    return ""


class SweepProgress:
    """Compact progress for a Ray Tune sweep, fed by Tune's callback hooks (`tune_callback`).

    Args:
        out: where to write (default: sys.stdout at write time; not pickled).
        tty: force the terminal (True) or line-per-trial (False) mode; default `out.isatty()`.
        clock: monotonic time source (tests pass a fake one).
        width: terminal width for the status line (default: the terminal's).
    """

    def __init__(self, out: TextIO | None = None, *, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, width: int | None = None):
        self._out = out
        self._tty = tty
        self._clock = clock
        self._width = width
        self._reset()

    def _reset(self, total: int | None = None) -> None:
        self.total = total
        self._t0: float | None = None
        self._first = True
        self._running_since: dict[str, float] = {}  # trial id -> when it started
        self._durations: list[float] = []  # trials trained in this launch
        self._peak_running = 0
        self._kept = 0  # finished in an earlier launch
        self._done = 0
        self._failed = 0
        # (label, result parts: accuracy, duration) of the last finished trial
        self._last: tuple[str, list[str]] | None = None
        self._last_draw = -1e18
        self._drawn = False

    # ---- pickling: Tune may pickle callbacks; streams and clocks do not pickle
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_out"] = None
        state["_clock"] = None if state["_clock"] is time.monotonic else state["_clock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._clock is None:
            self._clock = time.monotonic

    @property
    def out(self) -> TextIO:
        return self._out if self._out is not None else sys.stdout

    @property
    def tty(self) -> bool:
        if self._tty is not None:
            return self._tty
        try:
            return self.out.isatty()
        except (AttributeError, ValueError):
            return False

    # ---- the hooks of ray.tune.Callback (called by `tune_callback`'s adapter)
    def setup(self, total_num_samples: int | None = None, **info: Any) -> None:
        self._reset(total_num_samples or None)
        self._t0 = self._clock()

    def on_trial_start(self, trial: Any) -> None:
        self._running_since[_tid(trial)] = self._clock()
        self._peak_running = max(self._peak_running, len(self._running_since))
        self._draw([])

    def on_trial_result(self, trial: Any, result: dict) -> None:
        pass  # Tune keeps `trial.last_result`; the line shows it when the trial ends

    def on_trial_complete(self, trial: Any) -> None:
        self._running_since.pop(_tid(trial), None)
        result = getattr(trial, "last_result", None) or {}
        if result.get("trained", 1) == 0:
            self._kept += 1
            kind = "kept"
        else:
            secs = result.get("time_total_s")
            if isinstance(secs, (int, float)):
                self._durations.append(float(secs))
            self._done += 1
            kind = "done"
        self._last = (trial_label(getattr(trial, "config", {})), self._result_parts(trial))
        self._draw([] if self.tty else [self.event_line(kind, trial)])

    def on_trial_recover(self, trial: Any) -> None:
        self._running_since.pop(_tid(trial), None)
        self._draw([self.event_line("retry", trial)])

    def on_trial_error(self, trial: Any) -> None:
        self._running_since.pop(_tid(trial), None)
        self._failed += 1
        self._draw([self.event_line("failed", trial)])

    def on_step_end(self) -> None:
        if self.tty and self._clock() - self._last_draw >= REDRAW_S:
            self._draw([])

    def on_experiment_end(self) -> None:
        self._draw([], done=True)

    # ---- state
    @property
    def finished(self) -> int:
        """Trials that reached an end (finished, kept or failed)."""
        return self._done + self._kept + self._failed

    def counts(self) -> tuple[int, int, int]:
        """(running, pending, failed) now."""
        running = len(self._running_since)
        pending = max(0, (self.total or 0) - self.finished - running)
        return running, pending, self._failed

    def elapsed(self) -> float:
        return 0.0 if self._t0 is None else self._clock() - self._t0

    def eta(self) -> float | None:
        """Seconds left: pending trials at the mean trained-trial duration, plus what the
        running ones still need, spread over the peak concurrency; None before any finished."""
        if not self._durations:
            return None
        running, pending, _ = self.counts()
        if running == 0 and pending == 0:
            return 0.0
        mean = sum(self._durations) / len(self._durations)
        now = self._clock()
        left = pending * mean + sum(max(mean - (now - since), 0.1 * mean)
                                    for since in self._running_since.values())
        return left / max(1, self._peak_running)

    # ---- output
    def _result_text(self, trial: Any, sep: str = "  ") -> str:
        return sep.join(self._result_parts(trial))

    @staticmethod
    def _result_parts(trial: Any) -> list[str]:
        """[`test_acc 0.912`, `(7.4 s)`], each present only when the result has it."""
        r = getattr(trial, "last_result", None) or {}
        parts = []
        acc = r.get("test_acc")
        if isinstance(acc, (int, float)):
            parts.append(f"test_acc {acc:.3f}")
        secs = r.get("time_total_s")
        if isinstance(secs, (int, float)):
            parts.append(f"({secs:.1f} s)" if secs < 9.95 else f"({secs:.0f} s)")
        return parts

    def event_line(self, kind: str, trial: Any) -> str:
        """The permanent line for one event (done, kept, retry, failed)."""
        label = trial_label(getattr(trial, "config", {}))
        k = f"[{self.finished}/{self.total}]"
        clock = f"elapsed {fmt_duration(self.elapsed())}  ETA {fmt_duration(self.eta())}"
        if kind == "failed":
            err = _error_line(trial)
            where = getattr(trial, "error_file", None)
            return (f"{k} {label}  FAILED" + (f": {err}" if err else "")
                    + (f"  (traceback: {where})" if where else "") + f"  {clock}")
        if kind == "retry":
            err = _error_line(trial)
            return (f"{k} {label}  attempt {getattr(trial, 'num_failures', 0)} "
                    f"failed, retrying" + (f": {err}" if err else ""))
        if kind == "kept":
            return f"{k} {label}  already finished in MLflow (kept)  {clock}"
        res = self._result_text(trial)
        return f"{k} {label}  " + (f"{res}  " if res else "") + clock

    def status_line(self, width: int | None = None) -> str:
        """The terminal's line, within `width` when it can be: numbers are never cut. What
        gives way, in order: the last trial's name (shortened with `…`, the counts' long
        words `2 running` -> `2 run` to keep more of it, then left out), then the last
        trial's duration; the counts, clock, ETA and accuracy always show whole (below about
        48 columns the line is longer than the terminal rather than cut)."""
        running, pending, failed = self.counts()
        clock = f"{fmt_duration(self.elapsed())}, ETA {fmt_duration(self.eta())}"
        heads = [f"[{self.finished}/{self.total}] {c} | {clock}" for c in (
            f"{running} running, {pending} pending, {failed} failed",
            f"{running} run, {pending} pend, {failed} fail")]
        if self._last is None:
            return _first_within(heads, width)
        label, parts = self._last
        results = [" ".join(parts[:n]) for n in range(len(parts), 0, -1)] or [""]
        if width is None:
            return f"{heads[0]} | last: {label}" + (f"  {results[0]}" if results[0] else "")
        for res in results:
            tail = f"  {res}" if res else ""
            for head in heads:  # with the name, shortened
                room = width - len(head) - len(" | last: ") - len(tail)
                if room >= min(len(label), MIN_NAME):
                    name = label if room >= len(label) else label[:room - 1] + "…"
                    return f"{head} | last: {name}{tail}"
            without_name = [f"{h} | {res}" for h in heads if res]
            if any(len(line) <= width for line in without_name):
                return _first_within(without_name, width)
        return _first_within(heads, width)

    def _term_width(self) -> int:
        return self._width or shutil.get_terminal_size((100, 24)).columns

    def _header(self) -> str:
        mode = ("progress below" if self.tty else "one line per finished trial")
        return f"{self.total} trials; {mode} (--verbose: Ray Tune's own output)"

    def _draw(self, lines: list[str], done: bool = False) -> None:
        """Write the permanent `lines`, then (on a terminal) the status line in place."""
        try:
            self._write(lines, done)
        except (OSError, ValueError):  # a closed pipe must not stop the sweep
            pass

    def _write(self, lines: list[str], done: bool) -> None:
        out, tty = self.out, self.tty
        if self._first:
            self._first = False
            lines = [self._header(), *lines]
        if tty:
            buf = "\r\x1b[2K" if self._drawn else ""
            buf += "".join(ln + "\n" for ln in lines)
            buf += self.status_line(max(20, self._term_width() - 1))
            out.write(buf + ("\n" if done else ""))
            self._drawn = not done
        elif lines:
            out.write("".join(ln + "\n" for ln in lines))
        out.flush()
        self._last_draw = self._clock()


def _first_within(lines: list[str], width: int | None) -> str:
    """The first line that fits `width`, else the last (the shortest: numbers are not cut)."""
    return next((ln for ln in lines if width is None or len(ln) <= width), lines[-1])


def _tid(trial: Any) -> str:
    return str(getattr(trial, "trial_id", id(trial)))
