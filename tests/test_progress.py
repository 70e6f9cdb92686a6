"""The compact launch progress (fusion_sweep.raytune.progress.SweepProgress) with fake Tune trials.

No Ray here: the display is driven the way `tune_callback.ProgressCallback` drives it, hook by
hook (`setup`, `on_trial_start`, `on_trial_complete`, `on_trial_recover`, `on_trial_error`,
`on_step_end`, `on_experiment_end`); one test runs the real callback class through Ray's
`Callback` base.
"""
from __future__ import annotations

import io
import re
import pickle
from dataclasses import dataclass, field

import pytest

from fusion_sweep.raytune.progress import SweepProgress, fmt_duration, trial_label


@dataclass
class FakeTrial:
    trial_id: str
    config: dict
    status: str = "PENDING"
    last_result: dict = field(default_factory=dict)
    num_failures: int = 0
    error_file: str | None = None


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _trials(n: int = 4) -> list[FakeTrial]:
    return [FakeTrial(f"t{i}", {"trial": {"dataset": "synthetic-short", "pe": "sinusoidal",
                                          "fusion": ("add", "concat")[i % 2], "seed": i // 2}})
            for i in range(n)]


def _finish(rep: SweepProgress, t: FakeTrial, acc: float, secs: float, trained: int = 1) -> None:
    t.status = "TERMINATED"
    t.last_result = {"test_acc": acc, "time_total_s": secs, "trained": trained, "epoch": 1}
    rep.on_trial_complete(t)


def test_fmt_duration_and_label():
    assert fmt_duration(0) == "0:00"
    assert fmt_duration(151) == "2:31"
    assert fmt_duration(3725) == "1:02:05"
    assert fmt_duration(None) == "--"
    assert trial_label({"dataset": "d", "pe": "p", "fusion": "f", "seed": 3}) == "d/p/f/seed 3"
    assert trial_label({"trial": {"dataset": "d", "pe": "p", "fusion": "f", "seed": 3}}) == "d/p/f/seed 3"


def test_pipe_prints_one_line_per_finished_trial():
    out, clock = io.StringIO(), Clock()
    rep = SweepProgress(out, tty=False, clock=clock)
    trials = _trials(4)
    rep.setup(total_num_samples=4)
    rep.on_trial_start(trials[0])
    rep.on_trial_start(trials[1])
    for _ in range(50):  # many steps without an event print nothing new
        clock.t += 0.5
        rep.on_step_end()
    clock.t += 1
    _finish(rep, trials[0], 0.15625, 21.4)
    rep.on_trial_start(trials[2])
    clock.t += 10
    rep.on_trial_error(trials[1])
    clock.t += 20
    rep.on_trial_start(trials[3])
    _finish(rep, trials[2], 0.5, 20)
    _finish(rep, trials[3], 0.25, 19)
    rep.on_experiment_end()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("4 trials; one line per finished trial")
    assert len(lines) == 5, lines
    assert lines[1] == ("[1/4] synthetic-short/sinusoidal/add/seed 0  test_acc 0.156  (21 s)  "
                        "elapsed 0:26  ETA 0:22")
    assert lines[2].startswith("[2/4] synthetic-short/sinusoidal/concat/seed 0  FAILED")
    assert lines[3].startswith("[3/4] synthetic-short/sinusoidal/add/seed 1  test_acc 0.500  (20 s)")
    assert lines[4].startswith("[4/4] synthetic-short/sinusoidal/concat/seed 1  test_acc 0.250")
    assert lines[4].endswith("ETA 0:00")
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_failed_trial_shows_its_error(tmp_path):
    err = tmp_path / "error.txt"
    err.write_text("Traceback (most recent call last):\n  ...\nValueError: boom\n")
    out = io.StringIO()
    rep = SweepProgress(out, tty=False, clock=Clock())
    trials = _trials(2)
    rep.setup(total_num_samples=2)
    rep.on_trial_start(trials[0])
    trials[0].num_failures, trials[0].error_file = 1, str(err)  # failed once, retried
    rep.on_trial_recover(trials[0])
    rep.on_trial_start(trials[0])
    trials[0].status, trials[0].num_failures = "ERROR", 3
    rep.on_trial_error(trials[0])
    text = out.getvalue()
    assert "attempt 1 failed, retrying: ValueError: boom" in text
    assert f"FAILED: ValueError: boom  (traceback: {err})" in text
    assert rep.counts() == (0, 1, 1)


def test_memory_monitor_kill_shows_what_happened(tmp_path):
    """Ray's OOM report ends in advice; the line shown is the kill itself (format of Ray 2.60's
    error file, shortened)."""
    err = tmp_path / "error.txt"
    err.write_text("Failure # 1 (occurred at 2026-11-22_13-56-35)\n"
                   "1 worker(s) were killed due to the node running low on memory. Memory on "
                   "the node was 3.18GB used / 23.54GB limit (0.135105)\n"
                   "OOM kill reason: Memory usage 3249844224B exceeded threshold\n"
                   "Refer to the documentation on how to address the out of memory issue\n")
    out = io.StringIO()
    rep = SweepProgress(out, tty=False, clock=Clock())
    trials = _trials(1)
    rep.setup(total_num_samples=1)
    rep.on_trial_start(trials[0])
    trials[0].status, trials[0].num_failures, trials[0].error_file = "ERROR", 2, str(err)
    rep.on_trial_error(trials[0])
    assert ("FAILED: OutOfMemoryError (Ray's memory monitor): 1 worker(s) were killed due to "
            "the node running low on memory.") in out.getvalue()


def test_terminal_redraws_one_line():
    out, clock = io.StringIO(), Clock()
    rep = SweepProgress(out, tty=True, clock=clock, width=200)
    trials = _trials(4)
    rep.setup(total_num_samples=4)
    rep.on_trial_start(trials[0])  # header + first status line
    for _ in range(10):
        clock.t += 0.25  # redrawn about once a second, not on every step
        rep.on_step_end()
    assert out.getvalue().count("\r") == 2
    rep.on_trial_start(trials[1])
    clock.t += 5
    _finish(rep, trials[0], 0.75, 8)
    for t in trials[1:]:
        rep.on_trial_start(t) if t is not trials[1] else None
        _finish(rep, t, 0.5, 8)
    rep.on_experiment_end()
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 2  # header + the final status line
    last = text.split("\r\x1b[2K")[-1]
    assert last.startswith("[4/4] 0 running, 0 pending, 0 failed | 0:08, ETA 0:00 | last: ")
    assert "test_acc 0.750 (8.0 s)" in text


@pytest.mark.parametrize("width, room_for_result", [(60, False), (95, True), (100, True),
                                                    (160, True)])
def test_terminal_line_shortens_the_name_never_the_numbers(width, room_for_result):
    """Issue 33: the trial's name gives way (…), the accuracy and times never do."""
    out = io.StringIO()
    rep = SweepProgress(out, tty=True, clock=Clock(), width=width)
    trials = _trials(2)
    rep.setup(total_num_samples=2)
    rep.on_trial_start(trials[0])
    _finish(rep, trials[0], 0.9123, 3)
    segments = out.getvalue().split("\r\x1b[2K")[1:]
    assert all(len(seg.rstrip("\n")) <= width - 1 for seg in segments)
    last = segments[-1]
    assert re.match(r"\[1/2\] 0 run(ning)?, 1 pend(ing)?, 0 fail(ed)? \| 0:00, ETA 0:03", last)
    if room_for_result:
        assert last.rstrip("\n").endswith("test_acc 0.912 (3.0 s)")
        assert "…" in last or "synthetic-short/sinusoidal/add/seed 0" in last


LONG = {"trial": {"dataset": "synthetic-medium-shuffled", "encoder": "ressformer-no-asam",
                  "pe": "rope-features", "fusion": "gate-scalar", "seed": 12}}


@pytest.mark.parametrize("width", [50, 60, 70, 80, 90, 100, 120, 160, 240])
def test_narrow_terminal_keeps_every_number_whole(width):
    """Issue 33: at 40 trials, a long trial name and a terminal from 50 to 240 columns, the
    line fits; the counts, clock, ETA and accuracy are never cut: the name goes first (…,
    then left out), then the counts' long words, then the trial's duration."""
    out, clock = io.StringIO(), Clock()
    rep = SweepProgress(out, tty=True, clock=clock, width=width)
    rep.setup(total_num_samples=40)
    trials = [FakeTrial(f"t{i}", LONG) for i in range(3)]
    for t in trials:
        rep.on_trial_start(t)
    clock.t += 100
    _finish(rep, trials[0], 0.91234, 123.4)
    line = out.getvalue().split("\r\x1b[2K")[-1]
    assert len(line) <= width - 1, line
    assert re.match(r"\[1/40\] 2 run(ning)?, 37 pend(ing)?, 0 fail(ed)? \| 1:40, ETA 25:38", line)
    if width >= 80:  # an 80-column terminal shows the accuracy and the trial's duration
        assert re.search(r"\| (last: .+  )?test_acc 0\.912 \(123 s\)$", line), line
    assert "test_acc" not in line or "test_acc 0.912" in line
    if "last: " in line:
        name = line.split("last: ")[1].split("  test_acc")[0]
        assert len(name) >= 12 and (name.endswith("…") or name == trial_label(LONG))


def test_resumed_trials_count_as_done_but_not_for_eta():
    out, clock = io.StringIO(), Clock()
    rep = SweepProgress(out, tty=False, clock=clock)
    trials = _trials(3)
    rep.setup(total_num_samples=3)
    rep.on_trial_start(trials[1])
    clock.t += 5
    _finish(rep, trials[1], 0.8, 0.2, trained=0)  # its MLflow run was FINISHED: reported, not trained
    assert rep.eta() is None
    lines = out.getvalue().splitlines()
    assert lines[1].startswith("[1/3] synthetic-short/sinusoidal/concat/seed 0  already finished")


def test_pickles_without_its_stream():
    rep = SweepProgress(io.StringIO(), tty=False)
    rep.setup(total_num_samples=2)
    clone = pickle.loads(pickle.dumps(rep))
    assert clone._out is None and clone.total == 2


@pytest.mark.parametrize("tty", [True, False])
def test_a_closed_stream_never_breaks_the_sweep(tty):
    out = io.StringIO()
    rep = SweepProgress(out, tty=tty, clock=Clock())
    out.close()
    trials = _trials(1)
    rep.setup(total_num_samples=1)
    rep.on_trial_start(trials[0])
    _finish(rep, trials[0], 0.1, 1)
    rep.on_experiment_end()


def test_the_tune_callback_forwards_every_hook():
    """The real `ray.tune.Callback` subclass: each Tune hook reaches the display."""
    from ray.tune import Callback

    from fusion_sweep.raytune.callback import ProgressCallback

    out = io.StringIO()
    rep = SweepProgress(out, tty=False, clock=Clock())
    cb = ProgressCallback(rep)
    assert isinstance(cb, Callback)
    trials = _trials(2)
    cb.setup(total_num_samples=2)
    cb.on_trial_start(iteration=1, trials=trials, trial=trials[0])
    cb.on_trial_result(iteration=2, trials=trials, trial=trials[0], result={"epoch": 1})
    trials[0].last_result = {"test_acc": 0.5, "time_total_s": 2.0}
    cb.on_trial_complete(iteration=3, trials=trials, trial=trials[0])
    cb.on_trial_start(iteration=4, trials=trials, trial=trials[1])
    cb.on_trial_recover(iteration=5, trials=trials, trial=trials[1])
    cb.on_trial_error(iteration=6, trials=trials, trial=trials[1])
    cb.on_step_end(iteration=7, trials=trials)
    cb.on_experiment_end(trials=trials)
    text = out.getvalue()
    assert "[1/2] synthetic-short/sinusoidal/add/seed 0  test_acc 0.500" in text
    assert "retrying" in text and "[2/2] synthetic-short/sinusoidal/concat/seed 0  FAILED" in text
    assert pickle.loads(pickle.dumps(cb)).progress.total == 2


def test_summary_names_the_next_commands(tmp_path, monkeypatch):
    """format_summary: follow-up commands carry only the options that differ from what they
    would resolve by default here (store, experiment, Tune storage)."""
    from fusion_sweep.launch.summary import LaunchSummary, format_summary

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    here = f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    ok = LaunchSummary(name="smoke", total=4, finished=4, trained_now=4, tracking_uri=here,
                       experiment="fusion-sweep", parent_run_id="f2ba6f39aced426aaa5aeb254b3619fe",
                       seconds=266.0, experiment_path=str(tmp_path / "ray_results" / "smoke"),
                       results_csv=str(tmp_path / "ray_results" / "smoke" / "results.csv"))
    text = format_summary(ok, "smoke")
    assert "statistics: fusion-sweep stats --sweep smoke\n" in text
    assert "browse:     fusion-sweep ui   (" in text and "resume:" not in text
    assert len(text.strip().splitlines()) == 7
    # The launch's last words fit the 120 columns the stats report keeps to (long store paths
    # aside, which are the user's).
    assert max(len(line) for line in text.splitlines() if str(tmp_path) not in line) <= 120
    bad = LaunchSummary(name="s2", total=4, finished=3, failed=1, trained_now=4,
                        tracking_uri="sqlite:////elsewhere/mlflow.db", experiment="e2",
                        parent_run_id="p2", experiment_path="/elsewhere/rr/s2",
                        failed_trials=["d/p/f/seed 0: ValueError: boom"])
    text = format_summary(bad, "space.yaml")
    assert "  failed: d/p/f/seed 0: ValueError: boom" in text
    assert "fusion-sweep stats --sweep s2 --tracking-uri sqlite:////elsewhere/mlflow.db " \
           "--experiment e2" in text
    assert "fusion-sweep ui --backend-store-uri sqlite:////elsewhere/mlflow.db --experiment e2" in text
    assert "fusion-sweep launch space.yaml --name s2 --tracking-uri sqlite:////elsewhere/mlflow.db " \
           "--experiment e2 --storage /elsewhere/rr" in text


def test_launch_turns_tunes_banner_off(monkeypatch):
    """Ray 2.60's new output engine prints its "Configuration for experiment" box at every
    verbosity, 0 included; a launch without --verbose selects Tune's legacy engine, silent at
    verbose=0 (Tune decides by `get_air_verbosity`: None is the legacy engine). `tune` and
    `launch --verbose` keep Tune's own output."""
    from ray.tune.experimental.output import get_air_verbosity

    from fusion_sweep.raytune import setup as ray_setup

    for var in ("RAY_AIR_NEW_OUTPUT", "RAY_USAGE_STATS_ENABLED", "TUNE_DISABLE_SIGINT_HANDLER",
                "TUNE_PRINT_ALL_TRIAL_ERRORS"):
        monkeypatch.setenv(var, "x")  # recorded, so teardown restores the original
        monkeypatch.delenv(var)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    ray_setup.configure_ray_env(None, verbose=True, tune_output=True)
    assert get_air_verbosity(2) is not None  # --verbose: the new engine, Tune's own output
    ray_setup.configure_ray_env(None, verbose=False, tune_output=False)
    assert get_air_verbosity(0) is None
