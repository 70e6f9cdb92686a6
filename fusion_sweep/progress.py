"""A sweep's progress that a person can read: `fusion-sweep launch` without `--verbose`.

`SweepProgress` is a Ray Tune progress reporter (the legacy output engine, which
`configure_ray_env` selects with RAY_AIR_NEW_OUTPUT=0, calls `should_report(trials, done)`
after every step of its loop and `report(...)` when that returns True). It needs no Ray import:
Tune duck-types reporters (`setup`, `should_report`, `report`), so this module stays light and
its formatting is tested with fake trials.

* On a terminal: one status line, redrawn in place about once a second::

      [2/4] 1 running, 1 pending, 0 failed | 0:23, ETA 0:18 | last: synthetic-short/sinusoidal/add/seed 0  test_acc 0.156 (7 s)

  plus a permanent line for each failure or retry (errors are never only transient).
* Elsewhere (CI, `| tee log`): one line per finished or failed trial::

      [1/4] synthetic-short/sinusoidal/add/seed 0  test_acc 0.156  (7 s)  elapsed 0:23  ETA 0:45

A resumed sweep's trials that finished in an earlier launch count as done from the start;
the ETA only uses trials trained in this launch.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from typing import Any, Callable, Iterable, TextIO

from fusion_sweep import schema

PENDING, RUNNING, PAUSED, TERMINATED, ERROR = "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"
REDRAW_S = 1.0  # the terminal line's refresh period


class _RayTrialErrorFilter(logging.Filter):
    """Drops Ray Tune's per-failure traceback log ("Trial task failed for trial ...", ~30
    lines for every attempt) and its closing "Trials did not complete: [...]": the reporter
    prints each retry and failure as one line with the error message and the traceback
    file, and the launch summary lists the failed trials. Every other record passes."""

    DROP = {"ray.tune.execution.tune_controller": "Trial task failed for trial",
            "ray.tune.tune": "Trials did not complete"}

    def filter(self, record: logging.LogRecord) -> bool:
        prefix = self.DROP.get(record.name)
        return not (prefix and str(record.msg).startswith(prefix))


_FILTER = _RayTrialErrorFilter()


def _quiet_trial_errors(on: bool) -> None:
    for name in _RayTrialErrorFilter.DROP:
        logger = logging.getLogger(name)
        logger.removeFilter(_FILTER)
        if on:
            logger.addFilter(_FILTER)


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
    """Compact progress for a Ray Tune sweep; pass as `RunConfig(progress_reporter=...)`.

    Args:
        out: where to write (default: sys.stdout at report time; not pickled: Tune pickles
            the run config, reporter included, into the experiment's tuner.pkl).
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

    def _reset(self) -> None:
        self.total: int | None = None
        self._t0: float | None = None
        self._first = True
        self._seen: dict[str, str] = {}  # trial id -> last status seen
        self._failures: dict[str, int] = {}
        self._running_since: dict[str, float] = {}
        self._durations: list[float] = []  # trials trained in this launch
        self._peak_running = 0
        self._kept = 0  # finished in an earlier launch
        self._done = 0
        self._failed = 0
        self._events: list[tuple[str, Any, int]] = []  # (done|kept|failed|retry, trial, n ended)
        self._last: str = ""
        self._last_draw = -1e18
        self._drawn = False
        self._counts = (0, 0, 0)  # running, pending, failed

    # ---- pickling: Tune stores the reporter in tuner.pkl; streams do not pickle
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

    # ---- the ProgressReporter interface (ray.tune.progress_reporter.ProgressReporter)
    def setup(self, start_time: float | None = None, total_samples: int | None = None,
              metric: str | None = None, mode: str | None = None, **kwargs: Any) -> None:
        self._reset()
        self.total = total_samples or None
        _quiet_trial_errors(True)

    def set_total_samples(self, total_samples: int) -> None:  # older Ray versions call these
        self.total = total_samples or None

    def set_search_properties(self, metric: str | None, mode: str | None) -> bool:
        return True

    def set_start_time(self, timestamp: float | None = None) -> None:
        pass

    def should_report(self, trials: list, done: bool = False) -> bool:
        self._observe(trials)
        if done or self._events or self._first:
            return True
        return self.tty and self._clock() - self._last_draw >= REDRAW_S

    def report(self, trials: list, done: bool, *sys_info: str) -> None:
        try:
            self._write(done)
        except (OSError, ValueError):  # a closed pipe must not stop the sweep
            pass
        if done:
            _quiet_trial_errors(False)

    # ---- state
    def _observe(self, trials: Iterable[Any]) -> None:
        now = self._clock()
        trials = list(trials)
        if self._t0 is None:
            self._t0 = now
        n = len(trials)
        if self.total is None or n > self.total:
            self.total = n
        running = pending = 0
        for t in trials:
            tid = str(getattr(t, "trial_id", id(t)))
            status = getattr(t, "status", PENDING)
            prev = self._seen.get(tid)
            fails = int(getattr(t, "num_failures", 0) or 0)
            if status in (RUNNING,):
                running += 1
                self._running_since.setdefault(tid, now)
            elif status in (PENDING, PAUSED):
                pending += 1
                self._running_since.pop(tid, None)
            if status == TERMINATED and prev != TERMINATED:
                result = getattr(t, "last_result", None) or {}
                if prev is None and self._first:
                    self._kept += 1  # restored already finished
                elif result.get("trained", 1) == 0:
                    self._kept += 1
                    self._events.append(("kept", t, self.finished))
                else:
                    secs = result.get("time_total_s")
                    if isinstance(secs, (int, float)):
                        self._durations.append(float(secs))
                    self._done += 1
                    self._events.append(("done", t, self.finished))
                self._running_since.pop(tid, None)
            elif status == ERROR and prev != ERROR:
                self._failed += 1
                if not (prev is None and self._first):
                    self._events.append(("failed", t, self.finished))
                self._running_since.pop(tid, None)
            elif status != ERROR and fails > self._failures.get(tid, 0) and prev is not None:
                self._events.append(("retry", t, self.finished))
            self._failures[tid] = fails
            self._seen[tid] = status
        self._peak_running = max(self._peak_running, running)
        self._counts = (running, pending, self._failed)

    @property
    def finished(self) -> int:
        """Trials that reached an end (finished, kept or failed)."""
        return self._done + self._kept + self._failed

    def elapsed(self) -> float:
        return 0.0 if self._t0 is None else self._clock() - self._t0

    def eta(self) -> float | None:
        """Seconds left: pending trials at the mean trained-trial duration, plus what the
        running ones still need, spread over the peak concurrency; None before any finished."""
        if not self._durations:
            return None
        running, pending, _ = self._counts
        if running == 0 and pending == 0:
            return 0.0
        mean = sum(self._durations) / len(self._durations)
        now = self._clock()
        left = pending * mean + sum(max(mean - (now - since), 0.1 * mean)
                                    for since in self._running_since.values())
        return left / max(1, self._peak_running)

    # ---- output
    def _result_text(self, trial: Any, sep: str = "  ") -> str:
        r = getattr(trial, "last_result", None) or {}
        parts = []
        acc = r.get("test_acc")
        if isinstance(acc, (int, float)):
            parts.append(f"test_acc {acc:.3f}")
        secs = r.get("time_total_s")
        if isinstance(secs, (int, float)):
            parts.append(f"({secs:.1f} s)" if secs < 9.95 else f"({secs:.0f} s)")
        return sep.join(parts)

    def event_line(self, kind: str, trial: Any, n: int | None = None) -> str:
        """The permanent line for one event; `n`: trials ended when it happened."""
        label = trial_label(getattr(trial, "config", {}))
        k = f"[{self.finished if n is None else n}/{self.total}]"
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

    def status_line(self) -> str:
        running, pending, failed = self._counts
        line = (f"[{self.finished}/{self.total}] {running} running, {pending} pending, "
                f"{failed} failed | {fmt_duration(self.elapsed())}, ETA {fmt_duration(self.eta())}")
        if self._last:
            line += f" | last: {self._last}"
        return line

    def _term_width(self) -> int:
        return self._width or shutil.get_terminal_size((100, 24)).columns

    def _write(self, done: bool) -> None:
        out, tty = self.out, self.tty
        events, self._events = self._events, []
        lines = []
        if self._first:
            self._first = False
            head = f"{self.total} trials"
            if self._kept:
                head += f", {self._kept} already finished (resumed sweep)"
            head += ("; progress below (--verbose: Ray Tune's full table)" if tty else
                     "; one line per finished trial (--verbose: Ray Tune's full table)")
            lines.append(head)
        for kind, trial, n in events:
            if kind in ("done", "kept"):
                self._last = (f"{trial_label(getattr(trial, 'config', {}))}  "
                              f"{self._result_text(trial, ' ')}")
            if tty and kind in ("done", "kept"):
                continue  # shown in the status line
            lines.append(self.event_line(kind, trial, n))
        if tty:
            width = max(20, self._term_width() - 1)
            status = self.status_line()
            if len(status) > width:
                status = status[:width - 1] + "…"
            buf = "\r\x1b[2K" if self._drawn else ""
            buf += "".join(ln + "\n" for ln in lines) + status
            if done:
                buf += "\n"
            out.write(buf)
            self._drawn = not done
        elif lines:
            out.write("".join(ln + "\n" for ln in lines))
        out.flush()
        self._last_draw = self._clock()
