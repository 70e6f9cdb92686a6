"""Fast fault-injection checks (issue 11 §2); the full suite is `benchmarks/faults.py`.

* a truncated or corrupted file in the tokenized-data cache is caught by its content hash
  (meta.json), never loaded, and the entry is rebuilt with a warning;
* two drivers entering `SweepLock` in the same millisecond: exactly one gets the sweep; a
  lock left by a killed driver does not block;
* `mlflow_query.retry` rides out an unreachable tracking server (>= 30 s of back-off) and a
  locked SQLite store, and gives up at once on other errors.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusion_sweep import mlflow_query  # noqa: E402
from fusion_sweep.trial.data import cache as cache_mod
from fusion_sweep.trial.data import load_encoded

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(n_train=60, n_val=20, n_test=20)


# ------------------------------------------------------------------ (e) the data cache
def _entry(root: Path) -> Path:
    (entry,) = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return entry


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete_digests"])
def test_corrupt_cache_file_is_detected_and_rebuilt(tmp_path: Path, damage: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "cache"
    first = load_encoded("synthetic-short", cache_dir=str(root), synthetic_overrides=SMALL)
    entry = _entry(root)
    meta = json.loads((entry / "meta.json").read_text())
    assert set(meta["files"]) >= {f"{s}_{a}.npy" for s in ("train", "val", "test")
                                  for a in ("ids", "offsets", "labels")} | {"vocab.txt"}
    want = first.fingerprint(0, True)
    cache_mod._VERIFIED.clear()  # a new process: nothing verified yet
    if damage == "truncate":
        f = entry / "train_ids.npy"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif damage == "flip":  # same size, a valid .npy header: only the hash can tell
        f = entry / "test_labels.npy"
        b = bytearray(f.read_bytes())
        b[-1] ^= 0x01
        f.write_bytes(bytes(b))
    else:  # an entry whose digests are gone cannot be trusted
        del meta["files"]
        (entry / "meta.json").write_text(json.dumps(meta))

    with caplog.at_level(logging.WARNING, logger="fusion_sweep.trial.data.cache"):
        again = load_encoded("synthetic-short", cache_dir=str(root), synthetic_overrides=SMALL)
    assert again.fingerprint(0, True) == want  # the rebuilt data, not the damaged file
    assert any("rebuilding it" in r.getMessage() and str(entry) in r.getMessage()
               for r in caplog.records), caplog.text
    assert _entry(root) == entry  # rebuilt in place, nothing left beside it
    assert [p.name for p in root.iterdir() if p.name.startswith(".") and p.is_dir()] == []
    meta = json.loads((entry / "meta.json").read_text())
    assert all(cache_mod.file_digest(entry / n) == d for n, d in meta["files"].items())


def test_cache_hashes_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache"
    load_encoded("synthetic-short", cache_dir=str(root), synthetic_overrides=SMALL)
    cache_mod._VERIFIED.clear()
    calls = []
    real = cache_mod.file_digest
    monkeypatch.setattr(cache_mod, "file_digest", lambda p, *a: calls.append(p) or real(p, *a))
    load_encoded("synthetic-short", cache_dir=str(root), synthetic_overrides=SMALL)
    n = len(calls)
    assert n == 10  # 9 arrays + vocab.txt
    load_encoded("synthetic-short", cache_dir=str(root), synthetic_overrides=SMALL)
    assert len(calls) == n  # verified once, trusted after


# ------------------------------------------------------------------------- (f) the lock
_HOLDER = r"""
import sys, time
from fusion_sweep.launch.lock import SweepLock
start, out = float(sys.argv[2]), sys.argv[3]
while time.time() < start:
    pass
try:
    with SweepLock(sys.argv[1]):
        open(out, "w").write("got")
        time.sleep(1.5)
except ValueError as e:
    open(out, "w").write("refused: " + str(e))
"""


def test_two_drivers_at_the_same_moment_one_refused(tmp_path: Path) -> None:
    exp = tmp_path / "ray_results" / "sweep"
    for rnd in range(2):
        start = time.time() + 3.0  # both interpreters are up well before: they race on the lock
        outs = [tmp_path / f"r{rnd}-{i}.txt" for i in range(2)]
        procs = [subprocess.Popen([sys.executable, "-c", _HOLDER, str(exp), str(start), str(o)],
                                  cwd=REPO) for o in outs]
        for p in procs:
            assert p.wait(timeout=60) == 0
        texts = sorted(o.read_text() for o in outs)
        assert texts[0] == "got" and texts[1].startswith("refused: sweep already running: driver "
                                                         "pid "), texts
        assert str(exp / ".driver.lock") in texts[1]


def test_lock_of_a_killed_driver_does_not_block(tmp_path: Path) -> None:
    from fusion_sweep.launch.lock import SweepLock

    exp = tmp_path / "sweep"
    p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(exp), "0", str(tmp_path / "o")],
                         cwd=REPO)
    deadline = time.time() + 30
    while not (tmp_path / "o").exists() and time.time() < deadline:
        time.sleep(0.05)
    with pytest.raises(ValueError, match="sweep already running"):
        SweepLock(str(exp)).__enter__()
    p.kill()  # SIGKILL: no __exit__ runs, the kernel drops the flock
    p.wait()
    with SweepLock(str(exp)) as lock:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    with SweepLock(str(exp)):  # released on exit
        pass


# -------------------------------------------------------------------- (c) the retries
class Flaky:
    def __init__(self, failures: int, exc: Exception):
        self.failures, self.exc, self.calls = failures, exc, 0

    def __call__(self, x):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc
        return x * 2


REFUSED = Exception("API request to endpoint /api/2.0/mlflow/runs/log-batch failed with exception "
                    "HTTPConnectionPool(host='127.0.0.1', port=5000): Max retries exceeded with "
                    "url: ... (Caused by NewConnectionError('Failed to establish a new connection: "
                    "[Errno 111] Connection refused'))")


@pytest.mark.parametrize("exc", [REFUSED, ConnectionError("reset"),
                                 Exception("(sqlite3.OperationalError) database is locked"),
                                 Exception("API request failed with error code 503 != 200. "
                                           "Response body: 'Service Unavailable'")])
def test_retry_rides_out_transient_errors(exc: Exception) -> None:
    waits: list[float] = []
    f = Flaky(6, exc)
    assert mlflow_query.retry(f, 21, sleep=waits.append) == 42
    assert f.calls == 7 and waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 6.4])


def test_retry_backs_off_at_least_30_s_then_raises() -> None:
    assert mlflow_query.DEFAULT_RETRY_SECONDS >= 30
    waits: list[float] = []
    f = Flaky(10 ** 6, REFUSED)
    with pytest.raises(Exception, match="Connection refused"):
        mlflow_query.retry(f, 1, sleep=waits.append)
    assert 30 <= sum(waits) <= mlflow_query.DEFAULT_RETRY_SECONDS and max(waits) <= 8.0


def test_retry_budget_from_env_and_no_retry_of_real_errors(monkeypatch) -> None:
    monkeypatch.setenv(mlflow_query.RETRY_SECONDS_ENV, "2")
    waits: list[float] = []
    with pytest.raises(Exception, match="Connection refused"):
        mlflow_query.retry(Flaky(10 ** 6, REFUSED), 1, sleep=waits.append)
    assert sum(waits) <= 2
    f = Flaky(1, ValueError("INVALID_PARAMETER_VALUE: bad metric"))
    with pytest.raises(ValueError):
        mlflow_query.retry(f, 1, sleep=waits.append)
    assert f.calls == 1
    f = Flaky(3, REFUSED)
    with pytest.raises(Exception):
        mlflow_query.retry(f, 1, tries=2, sleep=lambda s: None)
    assert f.calls == 2


# ------------------------------------------------------- (g) a full or read-only filesystem
@pytest.fixture
def tmpfs(tmp_path: Path):
    """A real 8 MiB tmpfs (needs root; skipped where mount is not allowed)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()[:100]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_watch_reports_full_read_only_and_recovered(tmpfs: Path) -> None:
    import io

    from fusion_sweep.launch.diskwatch import DiskWatch

    out = io.StringIO()
    storage = tmpfs / "ray_results" / "sweep"  # not created yet: its filesystem is watched
    with DiskWatch([("Ray Tune storage", storage), ("MLflow store", tmpfs)], out,
                   poll_s=3600) as w:
        assert len(w.paths) == 1 and w.events == []  # one filesystem, fine at the start
        filler = tmpfs / "filler.bin"
        with pytest.raises(OSError, match="No space left"):
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
        w.check()
        w.check()  # a state is reported once, not at every poll
        filler.unlink()
        w.check()
        subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
        w.check()
        subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
        w.check()
    assert len(w.events) == 4, w.events
    assert w.events[0].startswith("error: No space left on the filesystem (0.0 MiB free of 8 MiB)"
                                  f": {storage} (Ray Tune storage)")
    assert "run the same command again" in w.events[0]
    assert w.events[1] == f"Ray Tune storage at {storage} is writable again"
    assert w.events[2].startswith(f"error: the filesystem is read-only: {storage}")
    assert out.getvalue().count("error:") == 2


def test_error_reason_names_the_memory_monitor() -> None:
    from ray.exceptions import OutOfMemoryError

    from fusion_sweep.raytune.failures import error_reason

    e = OutOfMemoryError("Task was killed due to the node running low on memory.\n"
                         "Memory on the node was 20 GB / 24 GB (0.83), which exceeds the "
                         "memory usage threshold 0.8.")
    r = error_reason(e)
    assert r.startswith("OutOfMemoryError: Task was killed due to the node running low on memory.")
    assert "memory monitor" in r and "memory_gb" in r and "\n" not in r
    assert error_reason(ValueError("bad\nthing")) == "ValueError: bad"


def test_freed_memory_is_released_between_trials() -> None:
    """A freed 256 MiB heap block goes back to the OS after release_freed_memory (glibc)."""
    import ctypes
    import threading

    from fusion_sweep.trial.heap import release_freed_memory

    def rss_mb() -> float:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    pinned = []

    def trial() -> None:  # a trial in its own thread, as Tune runs it: its own arena
        # many blocks below the mmap threshold, so they live in the thread's arena; the last
        # stays allocated (as some object of a finished trial would), so glibc's automatic
        # trimming of the arena's top cannot return the freed ones below it
        blocks = [libc.malloc(64 << 10) for _ in range(4096)]
        for b in blocks:
            ctypes.memset(b, 1, 64 << 10)
        for b in blocks[:-1]:
            libc.free(b)
        pinned.append(blocks[-1])

    before = rss_mb()
    t = threading.Thread(target=trial)
    t.start()
    t.join()
    kept = rss_mb() - before
    release_freed_memory()
    released = rss_mb() - before
    libc.free(pinned[0])
    assert kept > 128 and released < 32, (kept, released)


# ------------------------------------------ GPU out of memory is not the host's memory monitor
def _cuda_oom():
    import torch

    return torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB "
                                       "(GPU 0; 22.06 GiB total capacity)")


def _wrapped(exc):
    """The error as Tune hands it back from a trial: Ray's RayTaskError subclassing it."""
    from ray.exceptions import RayTaskError

    try:
        raise exc
    except Exception as e:  # noqa: BLE001
        return RayTaskError("run_trial", f"Traceback ...\ntorch.OutOfMemoryError: {e}",
                            e).as_instanceof_cause()


@pytest.mark.parametrize("wrap", [False, True])
def test_cuda_out_of_memory_gets_gpu_advice(wrap):
    from fusion_sweep.raytune.failures import error_reason, out_of_memory

    exc = _wrapped(_cuda_oom()) if wrap else _cuda_oom()
    assert type(exc).__name__.endswith("OutOfMemoryError" + (")" if wrap else ""))
    r = error_reason(exc)
    assert out_of_memory(exc) == "torch"
    assert r.startswith("OutOfMemoryError (GPU): ") and "CUDA out of memory" in r
    assert "batch_size" in r and "resources: {gpu: ...}" in r and "bf16" in r
    assert "memory_gb" not in r and "memory monitor" not in r


def test_rays_memory_kill_keeps_host_advice():
    from ray.exceptions import OutOfMemoryError

    from fusion_sweep.raytune.failures import error_reason, out_of_memory

    e = OutOfMemoryError("Task was killed due to the node running low on memory.")
    assert out_of_memory(e) == "ray"
    r = error_reason(e)
    assert r.startswith("OutOfMemoryError: Task was killed") and "memory_gb" in r
    assert "GPU" not in r and out_of_memory(ValueError("x")) is None
