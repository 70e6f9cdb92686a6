"""Fault injection: does a sweep survive killed processes, lost nodes, a dead tracking server,
a corrupted data cache, a double launch and a full disk? (issue 11 §2)

    python benchmarks/faults.py [--quick] [--only abc] [--seed 11] [--variants] [--keep]

Every scenario runs a small sweep (the smoke space; without --quick more seeds and epochs so
trials last longer) through `python -m fusion_sweep.cli launch` subprocesses on a real local
multi-node Ray cluster (`ray.cluster_utils.Cluster`, 2 nodes x 1 CPU) tracked by a real
`mlflow server` (127.0.0.1, sqlite store, --serve-artifacts, 1 worker):

  a  SIGKILL of the launching process at 5 random moments (seeded), relaunching each time,
     then one last relaunch to completion;
  b  the worker node removed (cluster.remove_node, not graceful) while it runs a trial;
  c  the MLflow server SIGKILLed for 20 s mid-sweep, then restarted on the same port and store;
  d  SIGKILL of a Ray worker process that is running a trial;
  e  a truncated and a corrupted file in the tokenized-data cache before the launch: the
     content hashes in meta.json must catch both and the entry be rebuilt, never loaded;
  f  two launches of the same sweep started within milliseconds: one must refuse clearly;
  g  the filesystem holding Ray's storage path and the MLflow store (a 40 MiB tmpfs) filled up
     mid-sweep, then freed: a clear error, then a relaunch resumes.

After each scenario (and its recovery relaunch, where it has one) the sweep is audited in
MLflow: trials finished / planned, duplicate runs (two runs with one trial key), runs left
RUNNING, finished trials missing a final metric (schema.FINAL_METRICS) or an artifact
(result.json, predictions.csv), and wall time against an undisturbed launch (baseline).
A readable table, then the LAST LINE: one JSON object {"a": {...}, ..., "g": {...}}.

`--variants` (default without --quick) adds: (c) with MLflow's own HTTP retries off in the
trials (`mlflow_query.retry` alone) and with `_retry`'s budget 0 too (only Tune's trial retries,
`max_failures`), and (g) with MLflow's HTTP retries off; their rows are nested under "variants".

Launches and Ray workers import a frozen copy of `fusion_sweep/` (PYTHONPATH), so edits to the
tree during a run cannot change the code fingerprint (hence the trial keys) between launches;
trials are audited by identity (dataset, pe, fusion, seed), duplicates by trial key.
Everything started here (cluster, servers, launches, tmpfs) is stopped/unmounted in `finally`.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fusion_sweep.tracking import runs as tracking  # noqa: E402
from fusion_sweep import schema  # noqa: E402
from fusion_sweep.plan.space import SPACE_DIR, load_space  # noqa: E402
from fusion_sweep.plan.grid import plan  # noqa: E402

NODE_ARGS = dict(num_cpus=1, memory=1536 << 20, object_store_memory=96 << 20)
EXPERIMENT = "fusion-sweep"
ARTIFACTS = ("result.json", "predictions.csv")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ppid_map() -> dict[int, int]:
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                out[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def children_of(pid: int) -> set[int]:
    parent = _ppid_map()
    out, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pids(pids: set[int], sig: int = signal.SIGKILL) -> None:
    for p in pids:
        if alive(p):
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass


class MlflowServer:
    """`mlflow server` in its own process group; kill() is SIGKILL of the whole group."""

    def __init__(self, store_dir: Path, log_dir: Path, port: int | None = None):
        self.dir, self.port = store_dir, port or free_port()
        self.log = log_dir / f"server-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> "MlflowServer":
        self.dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
             str(self.port), "--backend-store-uri", f"sqlite:///{self.dir / 'mlflow.db'}",
             "--serve-artifacts", "--artifacts-destination", str(self.dir / "artifacts"),
             "--workers", "1", "--uvicorn-opts", "--no-access-log"],
            env=env, stdout=open(self.log, "a"),
            stderr=subprocess.STDOUT, start_new_session=True, stdin=subprocess.DEVNULL)
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=2):
                    return self
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"mlflow server on port {self.port} did not start")
                time.sleep(0.3)

    def kill(self) -> None:
        if self.proc is None:
            return
        pids = children_of(self.proc.pid) | {self.proc.pid}
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        kill_pids(pids)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.time() + 10  # the port must be free again before a restart
        while any(alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.1)
        self.proc = None


class Launch:
    """One `python -m fusion_sweep.cli launch` subprocess (own session, log to a file)."""

    def __init__(self, sc: "Scenario", tag: str, extra_env: dict | None = None):
        self.log = sc.dir / f"launch-{tag}.log"
        cmd = [sys.executable, "-m", "fusion_sweep.cli", "launch", str(sc.space), "--name", sc.name,
               "--address", sc.env.cluster.address, "--tracking-uri", sc.server.uri,
               "--storage", str(sc.storage)]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra_env or {})
        self.t0 = time.time()
        self.proc = subprocess.Popen(cmd, cwd=sc.dir, env=env, stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     stdin=subprocess.DEVNULL)
        self.seen: set[int] = set()
        sc.env.launches.append(self)

    def running(self) -> bool:
        self.seen |= children_of(self.proc.pid)
        return self.proc.poll() is None

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.sigkill()
            return None

    def sigkill(self) -> None:
        self.seen |= children_of(self.proc.pid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        kill_pids(self.seen | {self.proc.pid})
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


# ------------------------------------------------------------------------- environment
class Env:
    """The shared cluster, server and data cache; cleans up everything it started."""

    def __init__(self, root: Path, quick: bool):
        self.root, self.quick = root, quick
        self.cluster = None
        self.worker = None
        self.servers: list[MlflowServer] = []
        self.launches: list[Launch] = []
        self.mounts: list[Path] = []
        self.server: MlflowServer | None = None

    def start(self) -> None:
        os.environ["RAY_AUTH_MODE"] = "disabled"  # the cluster, every driver and worker agree
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        os.environ["FUSION_SWEEP_CACHE"] = str(self.root / "cache")
        os.environ.pop("RAY_ADDRESS", None)
        from ray.cluster_utils import Cluster

        log("starting a 2-node Ray cluster and an MLflow server")
        self.cluster = Cluster(initialize_head=True,
                               head_node_args={**NODE_ARGS, "include_dashboard": False})
        self.worker = self.cluster.add_node(**NODE_ARGS)
        self.cluster.wait_for_nodes()
        self.server = self.new_server(self.root / "mlflow")

    def new_server(self, d: Path, port: int | None = None) -> MlflowServer:
        srv = MlflowServer(d, self.root, port)
        self.servers.append(srv)
        return srv.start()

    def stop(self) -> None:
        for la in self.launches:
            if la.proc.poll() is None or any(alive(p) for p in la.seen):
                la.sigkill()
        for srv in self.servers:
            srv.kill()
        if self.cluster is not None:
            try:
                self.cluster.shutdown()
            except Exception as e:  # noqa: BLE001
                log(f"cluster shutdown: {e}")
        for m in self.mounts:
            subprocess.run(["umount", "-l", str(m)], capture_output=True)


# ---------------------------------------------------------------------------- audit
def make_space(path: Path, name: str, quick: bool) -> Path:
    d = yaml.safe_load((SPACE_DIR / "smoke.yaml").read_text())
    d["name"] = name
    d.pop("tune", None)
    if not quick:  # trials of several seconds: more to interrupt
        d["seeds"] = [0, 1, 2]
        d["hyperparameters"]["all"].update(epochs=4, limit_train=512)
    else:
        d["hyperparameters"]["all"].update(epochs=3, limit_train=256)
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def trial_runs(uri: str, sweep: str):
    try:
        return tracking.SweepTracker(uri, EXPERIMENT).trial_runs(sweep)
    except Exception:  # noqa: BLE001 - no experiment yet, or the server is down
        return []


def _ident(run) -> tuple:
    return tuple(run.data.params.get(f) for f in schema.IDENTITY_FIELDS)


def audit(uri: str, sweep: str, idents: list[tuple]) -> dict:
    """The sweep's state in MLflow. Trials are matched by identity (dataset, pe, fusion, seed),
    duplicates counted per trial key (identity + code fingerprint)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = tracking.SweepTracker(uri, EXPERIMENT).trial_runs(sweep)
    by_key: dict[str, list] = {}
    for r in runs:
        by_key.setdefault(r.data.tags.get(schema.TRIAL_KEY), []).append(r)
    finished, missing = 0, 0
    missing_what: list[str] = []
    for ident in idents:
        done = [r for r in runs if _ident(r) == ident and r.info.status == "FINISHED"]
        if not done:
            continue
        finished += 1
        r = done[-1]
        lack = [m for m in schema.FINAL_METRICS if m not in r.data.metrics]
        try:
            names = {a.path for a in client.list_artifacts(r.info.run_id)}
        except Exception as e:  # noqa: BLE001
            names = set()
            lack.append(f"artifacts unreadable: {e}")
        lack += [a for a in ARTIFACTS if a not in names]
        if lack:
            missing += 1
            missing_what.append(f"{ident}: {lack}")
    codes = {r.data.tags.get(schema.CODE_FINGERPRINT) for r in runs}
    return {"planned": len(idents), "finished": finished,
            "duplicates": sum(len(v) - 1 for v in by_key.values() if len(v) > 1),
            "running_orphans": sum(r.info.status == "RUNNING" for r in runs),
            "missing_metrics": missing, "attempts_max": max(
                (int(r.data.tags.get(schema.ATTEMPTS) or 1) for r in runs), default=0),
            **({"code_fingerprints": len(codes)} if len(codes) > 1 else {}),
            **({"missing_detail": missing_what[:4]} if missing_what else {})}


class Scenario:
    def __init__(self, env: Env, letter: str, server: MlflowServer | None = None,
                 storage: Path | None = None, extra_env: dict | None = None):
        self.env, self.letter, self.extra_env = env, letter, extra_env
        self.name = f"faults-{letter}"
        self.dir = env.root / letter
        self.dir.mkdir(parents=True, exist_ok=True)
        self.space = make_space(self.dir / f"{self.name}.yaml", self.name, env.quick)
        self.server = server or env.server
        self.storage = storage or (self.dir / "ray_results")
        self.idents = [tuple(str(x) for x in p.ident) for p in plan(load_space(self.space), code="")]
        self.relaunches = 0
        self.notes: list[str] = []
        self.t0 = time.time()

    def launch(self, tag: str) -> Launch:
        return Launch(self, tag, self.extra_env)

    def runs(self):
        return trial_runs(self.server.uri, self.name)

    def wait_running(self, timeout: float, pred=None) -> list:
        """Wait until a trial run is RUNNING (and `pred(run)`) in MLflow; [] on timeout."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            busy = [r for r in self.runs() if r.info.status == "RUNNING" and (pred is None or pred(r))]
            if busy:
                return busy
            time.sleep(0.3)
        return []

    def complete(self, la: Launch | None, timeout: float) -> bool:
        """Wait for `la`, then relaunch (at most twice) until every trial is FINISHED."""
        ok = False
        if la is not None:
            rc = la.wait(timeout)
            ok = rc == 0
            if rc not in (0, None):
                self.notes.append(f"launch exited {rc}: {_last_line(la.text())}")
            elif rc is None:
                self.notes.append(f"launch still running after {timeout:.0f} s: killed")
        for i in range(2):
            if ok:
                break
            self.relaunches += 1
            rc = self.launch(f"recover{i}").wait(timeout)
            ok = rc == 0
        return ok

    def result(self, baseline: float | None) -> dict:
        out = audit(self.server.uri, self.name, self.idents)
        out["wall_s"] = round(getattr(self, "t_end", time.time()) - self.t0, 1)
        if baseline is not None:
            out["baseline_s"] = round(baseline, 1)
        out["relaunches"] = self.relaunches
        if self.notes:
            out["notes"] = "; ".join(self.notes)
        return out


def _last_line(text: str, marker: str = "") -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and marker in ln]
    return lines[-1][:240] if lines else ""


def _error_line(text: str, *needles: str) -> str:
    for ln in text.splitlines():
        if any(n.lower() in ln.lower() for n in needles):
            return ln.strip()[:240]
    return ""


# ------------------------------------------------------------------------- scenarios
def baseline(env: Env, timeout: float) -> float:
    sc = Scenario(env, "baseline")
    la = sc.launch("0")
    if la.wait(timeout) != 0:
        raise RuntimeError("the undisturbed baseline launch failed:\n" + la.text()[-3000:])
    return time.time() - sc.t0


def scenario_a(env: Env, rng: random.Random, timeout: float, base: float) -> Scenario:
    """SIGKILL the launching process 5 times at random moments, relaunching each time."""
    sc = Scenario(env, "a")
    # moments spread over an undisturbed launch: start-up (imports, Ray connect, MLflow) takes
    # about its first third here, the trials the rest
    moments = [round(rng.uniform(0.15, 0.9) * base, 1) for _ in range(5)]
    done_at_kill: list[int] = []
    running_at_kill: list[int] = []
    for i, t in enumerate(moments):
        la = sc.launch(f"kill{i}")
        if i:
            sc.relaunches += 1
        deadline = time.time() + t
        while time.time() < deadline and la.running():
            time.sleep(0.1)
        if la.running():
            la.sigkill()
        runs = sc.runs()
        done_at_kill.append(sum(r.info.status == "FINISHED" for r in runs))
        running_at_kill.append(sum(r.info.status == "RUNNING" for r in runs))
    sc.notes.append(f"kill moments {moments} s after each launch started; trials FINISHED "
                    f"at each kill {done_at_kill}, RUNNING {running_at_kill}")
    sc.relaunches += 1
    sc.complete(sc.launch("final"), timeout)
    return sc


def scenario_b(env: Env, timeout: float) -> Scenario:
    """Remove the worker node (not gracefully) while it runs a trial."""
    sc = Scenario(env, "b")
    worker = env.worker
    la = sc.launch("0")
    busy = sc.wait_running(timeout / 2, lambda r: r.data.tags.get("fusion_sweep.node_id") == worker.node_id)
    if busy:
        time.sleep(1.0)
        env.cluster.remove_node(worker, allow_graceful=False)
        sc.notes.append(f"removed worker node while trial {busy[0].data.tags[schema.TRIAL_KEY][:8]} "
                        f"ran on it")
        env.worker = env.cluster.add_node(**NODE_ARGS)  # later scenarios get 2 nodes again
        env.cluster.wait_for_nodes()
    else:
        sc.notes.append("no trial seen running on the worker node: nothing removed")
    sc.complete(la, timeout)
    return sc


def _trial_env(**env_vars: str) -> dict:
    """Environment for the trials of one launch: Ray's job config (read by ray.init in the
    driver) gives every worker of that job these variables; the cluster stays as it is."""
    return {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {"env_vars": env_vars}})}


C_VARIANTS = {
    # what protects a trial's MLflow calls while the server is down
    "default": {},  # MLflow's HTTP retries (7, backoff 2) inside mlflow_query.retry (90 s)
    "retry_only": _trial_env(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0"),  # mlflow_query.retry alone
    "tune_retry_only": _trial_env(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",  # the call fails, the
                                  FUSION_SWEEP_MLFLOW_RETRY_SECONDS="0"),  # trial too: Tune retries
}


def scenario_c(env: Env, timeout: float, down_s: float = 20.0, variant: str = "default") -> Scenario:
    """Kill the MLflow server for 20 s mid-sweep, restart it on the same port and store."""
    letter = "c" if variant == "default" else f"c-{variant}"
    srv = env.new_server(env.root / letter / "mlflow")  # own server: the shared one stays up
    sc = Scenario(env, letter, server=srv, extra_env=C_VARIANTS[variant])
    la = sc.launch("0")
    busy = sc.wait_running(timeout / 2)
    if busy:
        time.sleep(1.0)
        srv.kill()
        t_kill = time.time()
        time.sleep(down_s)
        t_restart = time.time()
        srv.start()
        sc.notes.append(f"server killed {t_restart - t_kill:.0f} s, healthy again after "
                        f"{time.time() - t_kill:.0f} s")
    else:
        sc.notes.append("no trial seen running: server not killed")
    first_ok = sc.complete(la, timeout) and sc.relaunches == 0
    sc.notes.append("first launch completed without relaunch" if first_ok else "needed a relaunch")
    text = la.text()
    retries = text.count("retrying in")
    if retries:
        sc.notes.append(f"{retries} mlflow_query.retry back-offs logged")
    failed = text.count("failed, retrying")
    if failed:
        sc.notes.append(f"{failed} trial attempts failed and were retried by Tune "
                        f"(max_failures {load_space(sc.space).max_failures} per trial)")
    sc.extra = {"survived_without_relaunch": first_ok}
    sc.t_end = time.time()
    return sc


def _cluster_pids(cluster) -> set[int]:
    """Every process of this benchmark's Ray cluster (its nodes' processes and descendants);
    other people's Ray instances on this machine are never touched."""
    roots = set()
    for node in [cluster.head_node, *cluster.worker_nodes]:
        for infos in node.all_processes.values():
            roots |= {i.process.pid for i in infos if getattr(i, "process", None) is not None}
    out = set(roots)
    for r in roots:
        out |= children_of(r)
    return out


def _trial_worker_pids(cluster) -> list[int]:
    """This cluster's Ray worker processes running a Tune function trainable (ray::ImplicitFunc)."""
    out = []
    for pid in sorted(_cluster_pids(cluster)):
        d = Path(f"/proc/{pid}")
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("ray::") and ("ImplicitFunc" in cmd or "_Inner" in cmd):
            out.append(int(d.name))
    return out


def scenario_d(env: Env, timeout: float) -> Scenario:
    """SIGKILL the Ray worker process that runs a trial."""
    sc = Scenario(env, "d")
    la = sc.launch("0")
    busy = sc.wait_running(timeout / 2)
    pids: list[int] = []
    if busy:
        time.sleep(1.0)
        pids = _trial_worker_pids(env.cluster)
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            sc.notes.append(f"SIGKILLed trial worker pid {pids[0]} (of {len(pids)} trial workers)")
    if not pids:
        sc.notes.append("no trial worker process found: nothing killed")
    sc.complete(la, timeout)
    return sc


def scenario_e(env: Env, timeout: float) -> Scenario:
    """Truncate one cached array and flip bytes in another: must be rebuilt, never loaded."""
    from fusion_sweep.trial.data.cache import file_digest

    sc = Scenario(env, "e")
    root = Path(os.environ["FUSION_SWEEP_CACHE"])
    entries = [p for p in root.iterdir() if p.is_dir() and (p / "meta.json").exists()]
    damaged = []
    for p in entries:
        meta = json.loads((p / "meta.json").read_text())
        if "files" not in meta:
            sc.notes.append(f"{p.name}: meta.json has no digests")
        f = p / "train_ids.npy"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])  # truncated
        g = p / "test_labels.npy"
        b = bytearray(g.read_bytes())
        b[-1] ^= 0x5A  # same size, valid header, wrong content
        g.write_bytes(bytes(b))
        damaged.append(p)
    sc.notes.append(f"damaged {len(damaged)} cache entr{'y' if len(damaged) == 1 else 'ies'}")
    sc.complete(sc.launch("0"), timeout)
    healed = 0
    for p in damaged:
        try:
            meta = json.loads((p / "meta.json").read_text())
            healed += all(file_digest(p / n) == d for n, d in meta.get("files", {}).items())
        except OSError:
            pass
    text = "".join(la.text() for la in env.launches if la.log.parent == sc.dir)
    warned = text.count("is corrupt (")
    sc.notes.append(f"rebuilt and intact afterwards: {healed}/{len(damaged)}; corruption "
                    f"warnings in the driver log: {warned}")
    sc.extra = {"cache_rebuilt": healed, "cache_damaged": len(damaged)}
    return sc


def scenario_f(env: Env, timeout: float) -> Scenario:
    """Two launches of one sweep at once: exactly one refuses with a clear message."""
    sc = Scenario(env, "f")
    l1, l2 = sc.launch("0"), sc.launch("1")
    rc1, rc2 = l1.wait(timeout), l2.wait(timeout)
    refused = [la for la in (l1, l2) if "sweep already running" in la.text()]
    sc.notes.append(f"exit codes {rc1}, {rc2}; refused: {len(refused)}"
                    + (f" ({_error_line(refused[0].text(), 'sweep already running')})" if refused else ""))
    sc.extra = {"refused": len(refused)}
    if rc1 != 0 and rc2 != 0:
        sc.complete(None, timeout)
    return sc


def scenario_g(env: Env, timeout: float, hold_s: float = 30.0, variant: str = "default"
               ) -> Scenario | str:
    """Ray storage and the MLflow store on a 40 MiB tmpfs that fills up mid-sweep."""
    letter = "g" if variant == "default" else f"g-{variant}"
    extra = {}
    if variant == "no_http_retries":  # MLflow's client retries 5xx for minutes, silently
        extra = {**_trial_env(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0"),
                 "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    mnt = env.root / f"{letter}-tmpfs"
    mnt.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot mount a tmpfs here: {(r.stderr or r.stdout).strip()[:200]}"
    env.mounts.append(mnt)
    srv = env.new_server(mnt / "mlflow")
    sc = Scenario(env, letter, server=srv, storage=mnt / "ray_results", extra_env=extra)
    la = sc.launch("0")
    busy = sc.wait_running(timeout / 2)
    filler = mnt / "filler.bin"
    if busy:
        time.sleep(1.0)
        written = 0
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
                    written += 1
        except OSError as e:
            sc.notes.append(f"filled the tmpfs ({written} MiB; {e.strerror})")
        t_full = time.time()
        t_end = t_full + hold_s
        while time.time() < t_end and la.running():
            time.sleep(0.2)
        filler.unlink(missing_ok=True)
        sc.notes.append(f"disk full for {time.time() - t_full:.0f} s (until the launch "
                        f"{'ended' if not la.running() else 'had waited ' + str(int(hold_s)) + ' s'})")
    else:
        sc.notes.append("no trial seen running: disk not filled")
    ok = sc.complete(la, timeout)
    sc.t_end = time.time()
    texts = "\n".join(x.text() for x in env.launches if x.log.parent == sc.dir)
    needles = ("No space left", "disk is full", "disk full", "ENOSPC")
    err = _error_line(texts, *needles)
    sc.notes.append(f"driver log: {err!r}" if err else "no disk-full error in the driver log")
    try:
        serr = _error_line(srv.log.read_text(errors="replace"), *needles)
    except OSError:
        serr = ""
    if serr:
        sc.notes.append(f"server log: {serr!r}")
    # the server and the tmpfs stay until Env.stop(): the audit still reads this sweep
    if not ok:
        sc.notes.append("did not complete")
    return sc


def _scenario_c_all(env: Env, timeout: float, variants: bool) -> Scenario:
    sc = scenario_c(env, timeout)
    if variants:
        sc.extra["variants"] = {}
        for v in ("retry_only", "tune_retry_only"):
            log(f"scenario c, variant {v}")
            try:
                sv = scenario_c(env, timeout, variant=v)
                sc.extra["variants"][v] = {**sv.result(None), **sv.extra}
            except Exception as e:  # noqa: BLE001
                sc.extra["variants"][v] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return sc


def _scenario_g_all(env: Env, timeout: float, variants: bool) -> Scenario | str:
    sc = scenario_g(env, timeout)
    if variants and not isinstance(sc, str):
        log("scenario g, variant no_http_retries (disk full until the launch gives up)")
        try:
            sv = scenario_g(env, timeout, hold_s=timeout / 2, variant="no_http_retries")
            sc.extra = {"variants": {"no_http_retries": sv if isinstance(sv, str) else
                                     {**sv.result(None), **getattr(sv, "extra", {})}}}
        except Exception as e:  # noqa: BLE001
            sc.extra = {"variants": {"no_http_retries": {"error": f"{type(e).__name__}: {e}"[:300]}}}
    return sc


# ------------------------------------------------------------------------------- main
COLS = ("planned", "finished", "duplicates", "running_orphans", "missing_metrics", "wall_s",
        "baseline_s", "relaunches")


def table(results: dict) -> str:
    w = max([8] + [len(k) + 1 + len(vk) for k, v in results.items() for vk in v.get("variants", {})])
    short = {"running_orphans": "orphans", "missing_metrics": "missing_metrics"}
    lines = [f"{'scenario':<{w}}  " + "  ".join(f"{short.get(c, c):>10}" for c in COLS)]
    for k, v in results.items():
        if "skipped" in v:
            lines.append(f"{k:<{w}}  skipped: {v['skipped']}")
            continue
        if "error" in v:
            lines.append(f"{k:<{w}}  ERROR: {v['error']}")
            continue
        rows = [(k, v)] + [(f"{k}:{vk}", vv) for vk, vv in v.get("variants", {}).items()]
        for label, r in rows:
            lines.append(f"{label:<{w}}  " + "  ".join(
                f"{str(r.get(c, '')):>{max(10, len(short.get(c, c)))}}" for c in COLS))
    lines.append("")
    for k, v in results.items():
        if v.get("notes"):
            lines.append(f"{k}: {v['notes']}")
        for vk, vv in v.get("variants", {}).items():
            lines.append(f"{k}:{vk}: {vv.get('notes', vv.get('error', ''))}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the smoke space (<10 min here)")
    ap.add_argument("--only", default="abcdefg", help="scenario letters to run (default all)")
    ap.add_argument("--seed", type=int, default=11, help="RNG seed of scenario a's kill moments")
    ap.add_argument("--keep", action="store_true", help="keep the working directory")
    ap.add_argument("--variants", action=argparse.BooleanOptionalAction, default=None,
                    help="also run (c) with MLflow's HTTP retries off (mlflow_query.retry alone) and "
                         "with both off (Tune's trial retries alone), and (g) with MLflow's HTTP "
                         "retries off; default: on without --quick")
    args = ap.parse_args(argv)
    timeout = 150.0 if args.quick else 400.0
    variants = (not args.quick) if args.variants is None else args.variants
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="fusion_faults_"))
    # Every launch and Ray worker imports a frozen copy of the package: others editing the tree
    # meanwhile would change the code fingerprint (so the trial keys) between two launches.
    import shutil

    snap = root / "code"
    shutil.copytree(REPO / "fusion_sweep", snap / "fusion_sweep",
                    ignore=shutil.ignore_patterns("__pycache__"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(snap)] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
    env = Env(root, args.quick)
    results: dict[str, dict] = {}
    old_term = signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    t_all = time.time()
    try:
        env.start()
        log("baseline (undisturbed) launch")
        base = baseline(env, timeout)
        log(f"baseline: {base:.1f} s")
        runners = {
            "a": lambda: scenario_a(env, rng, timeout, base), "b": lambda: scenario_b(env, timeout),
            "c": lambda: _scenario_c_all(env, timeout, variants), "d": lambda: scenario_d(env, timeout),
            "e": lambda: scenario_e(env, timeout), "f": lambda: scenario_f(env, timeout),
            "g": lambda: _scenario_g_all(env, timeout, variants)}
        for letter in "abcdefg":
            if letter not in args.only:
                continue
            log(f"scenario {letter}: {globals()['scenario_' + letter].__doc__.splitlines()[0]}")
            try:
                sc = runners[letter]()
                if isinstance(sc, str):
                    results[letter] = {"skipped": sc}
                else:
                    results[letter] = {**sc.result(base), **getattr(sc, "extra", {})}
            except Exception as e:  # noqa: BLE001 - report and go on with the next scenario
                traceback.print_exc()
                results[letter] = {"error": f"{type(e).__name__}: {e}"[:300]}
            log(f"scenario {letter}: {json.dumps(results[letter])}")
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
    finally:
        env.stop()
        signal.signal(signal.SIGTERM, old_term)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(root)], capture_output=True)
        else:
            log(f"kept {root}")
    print(table(results))
    print(f"\ntotal {time.time() - t_all:.0f} s; loadavg {Path('/proc/loadavg').read_text().strip()}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
