"""A trial killed by Ray's memory monitor is retried, then reported failed with the reason;
the launching driver survives and every other trial finishes (issue 11 §1).

A real local Ray cluster whose raylet runs the memory monitor with a low threshold
(`RAY_memory_usage_threshold` = what the node uses now + 2.5 GiB), and a sweep of two trials
run one at a time: a small synthetic-short trial (~0.6 GB) and a synthetic-long trial whose
first forward pass allocates several GB (d_model 512, batch 4096: each (B, L, D) activation is
~4.5 GB). The large trial is a real configuration, not a test hook: the memory monitor, Tune's
retry and the sweep's bookkeeping are all the product's own.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from fusion_sweep.tracking import runs as tracking
from fusion_sweep import schema  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # a Ray cluster of its own
GiB = 1 << 30


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        out[k] = int(v.split()[0]) * 1024
    return out


SPACE = {
    "name": "oom",
    "datasets": ["synthetic-short", "synthetic-long"],
    "pes": ["sinusoidal"], "fusions": ["add"], "seeds": [0],
    "hyperparameters": {
        "all": {"epochs": 1, "latency_repeats": 1, "limit_eval": 32},
        "synthetic-short": {"limit_train": 64, "d_model": 16, "heads": 2, "dim_ff": 32,
                            "batch_size": 16},
        # the trial that allocates past the threshold in its first step
        "synthetic-long": {"limit_train": 4096, "d_model": 512, "heads": 2, "dim_ff": 512,
                           "batch_size": 4096},
    },
    # declared small, so that Ray's scheduler admits the trial and the memory monitor (not
    # admission control) is what stops it
    "resources": {"cpu": 1, "gpu": 0, "memory_gb": 0.25},
    "max_failures": 1,
}


@pytest.fixture
def low_threshold_cluster(monkeypatch: pytest.MonkeyPatch):
    m = meminfo()
    if m["MemTotal"] < 12 * GiB or m["MemAvailable"] < 10 * GiB:
        pytest.skip("needs >= 12 GiB of RAM with 10 GiB available to run past the threshold "
                    "safely")
    used = m["MemTotal"] - m["MemAvailable"]
    threshold = (used + 2.5 * GiB) / m["MemTotal"]
    for k, v in {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                 # read by the raylet when it starts: the node's memory monitor
                 "RAY_memory_usage_threshold": f"{threshold:.4f}",
                 "RAY_memory_monitor_refresh_ms": "100"}.items():
        monkeypatch.setenv(k, v)
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "memory": 2 * GiB, "object_store_memory": 96 << 20,
        "include_dashboard": False})
    cluster.wait_for_nodes()
    try:
        yield cluster, threshold
    finally:
        cluster.shutdown()


def test_memory_monitor_kill_is_retried_then_reported_failed(low_threshold_cluster, tmp_path,
                                                             monkeypatch, sqlite_store):
    """Starts a Ray cluster of its own (not the session's, tests/conftest.py): its raylet
    must read a low memory-monitor threshold when it starts, which would make the shared
    cluster's nodes kill other tests' trials."""
    from fusion_sweep.launch.sweep import launch

    cluster, threshold = low_threshold_cluster
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "oom.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    uri = sqlite_store  # tmp_path/mlflow.db, migrated already (tests/conftest.py)
    t0 = time.time()
    s = launch(str(space), address=cluster.address, tracking_uri=uri, max_concurrent=1,
               storage=str(tmp_path / "ray_results"))
    print(f"\n[oom] threshold {threshold:.3f} of {meminfo()['MemTotal'] / GiB:.1f} GiB; "
          f"launch {time.time() - t0:.1f} s; failed: {s.failed_trials}")

    # the driver returned a summary: it survived; the small trial finished
    assert s.total == 2 and s.finished == 1 and s.failed == 1, s
    (failed,) = s.failed_trials
    assert failed.startswith("synthetic-long/sinusoidal/add/seed 0: OutOfMemoryError")
    assert "memory monitor" in failed and "memory_gb" in failed

    runs = {r.data.params["dataset"]: r for r in
            tracking.SweepTracker(uri, "fusion-sweep").trial_runs("oom")}
    assert len(runs) == 2  # a retry re-attaches to the trial's run: no duplicate
    long_run = runs["synthetic-long"]
    assert long_run.info.status == "FAILED"  # not left RUNNING for the next launch to guess
    assert long_run.data.tags["fusion_sweep.attempts"] == "2"  # max_failures 1: one retry
    assert "OutOfMemoryError" in long_run.data.tags[schema.ERROR]
    assert runs["synthetic-short"].info.status == "FINISHED"
    rows = (tmp_path / "ray_results" / "oom" / "results.csv").read_text().splitlines()
    assert any(",FAILED," in r and r.startswith("synthetic-long") for r in rows)

