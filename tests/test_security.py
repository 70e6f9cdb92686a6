"""Security defaults (docs/errors.md, "Security defaults"), one test each:

* `fusion-sweep ui` binds 127.0.0.1 unless `--host` is given, and then warns what is exposed
  (checked on the socket the server really listens on, from /proc/net/tcp); the local Ray
  instance of `launch`/`tune` starts no dashboard and uses token auth;
* checkpoints are written (torch.save), never loaded: every `torch.load(` in the package
  (there is none today) must pass `weights_only=True`;
* YAML is read with `yaml.safe_load` only: a space with a `!!python/object/apply` tag is
  refused with a clear error and nothing runs;
* a sweep name cannot escape the storage directory: refused before anything is written.
"""
from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusion_sweep.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (REPO / "fusion_sweep",)


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in pkg.rglob("*.py"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> set[str]:
    """Local addresses of LISTEN sockets on `port` (IPv4 and IPv6), from /proc/net/tcp*."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            addr, _, p = local.partition(":")
            if state == "0A" and int(p, 16) == port:
                if width == 8:
                    found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
                else:  # four little-endian 32-bit words
                    raw = b"".join(bytes.fromhex(addr[i:i + 8])[::-1] for i in range(0, 32, 8))
                    found.add(socket.inet_ntop(socket.AF_INET6, raw))
    return found


def _non_loopback_ip() -> str | None:
    """This machine's address on its default route (no packet is sent), if any."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.254", 9))
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def _start_ui(cwd: Path, *extra: str) -> tuple[subprocess.Popen, int, Path]:
    """`fusion-sweep ui --port P *extra` in `cwd`, its own process group; -> (proc, P, stderr)."""
    cwd.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    err_path = cwd / "ui.err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "fusion_sweep.cli", "ui", "--port", str(port),
                                 *extra], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
    return proc, port, err_path


def _wait_listening(proc: subprocess.Popen, port: int, err: Path, timeout: float = 90) -> set[str]:
    deadline, bound = time.time() + timeout, set()
    while time.time() < deadline and proc.poll() is None and not bound:
        time.sleep(0.3)
        bound = _listening(port)
    assert bound, f"ui did not listen on {port} (rc {proc.poll()}):\n{err.read_text()}"
    return bound


def _stop_ui(proc: subprocess.Popen) -> None:
    """SIGINT: `ui` stops its server's process group; then make sure of it (ui's own group)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


@pytest.mark.processes  # `fusion-sweep ui`: an MLflow server
def test_ui_binds_loopback_by_default_and_warns_for_another_host(tmp_path):
    # both servers start at once (each takes ~20 s on a busy machine)
    default, exposed = _start_ui(tmp_path / "a"), _start_ui(tmp_path / "b", "--host", "0.0.0.0")
    ip = None
    try:
        (proc, port, err), (proc2, port2, err2) = default, exposed
        assert _wait_listening(proc, port, err) == {"127.0.0.1"}
        ip = _non_loopback_ip()
        if ip is not None:  # through this machine's network address: refused
            with socket.socket() as s:
                s.settimeout(3)
                assert s.connect_ex((ip, port)) != 0, f"the UI answers on {ip}:{port}"
        with socket.socket() as s:
            s.settimeout(3)
            assert s.connect_ex(("127.0.0.1", port)) == 0
        text = err.read_text()
        assert "warning" not in text and "Traceback" not in text, text
        # --host: the server really binds there, and the warning says what is exposed
        assert _wait_listening(proc2, port2, err2) == {"0.0.0.0"}
        text = err2.read_text()
        assert re.search(r"warning: --host 0.0.0.0 exposes the MLflow UI and its REST API on port "
                         rf"{port2} to the network, without authentication: anyone who can reach "
                         r"this machine can read, change and delete every run, metric and "
                         r"artifact in sqlite:///", text), text
        assert "Traceback" not in text
    finally:
        _stop_ui(default[0])
        _stop_ui(exposed[0])
    assert not _listening(default[1]) and not _listening(exposed[1])  # stopped with `ui`
    if ip is None:  # every other check above ran; say which one did not
        pytest.skip("no non-loopback IPv4 address on this machine: the check that the UI refuses "
                    "connections through one did not run")


def test_local_ray_uses_token_auth(monkeypatch):
    """`launch`/`tune` configure a local Ray instance for token auth (Ray has no option to
    bind its gRPC ports to loopback)."""
    from fusion_sweep.raytune import setup as ray_setup

    for var in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED", "RAY_AIR_NEW_OUTPUT"):
        monkeypatch.setenv(var, "x")  # recorded, so teardown restores the original
        monkeypatch.delenv(var)
    assert ray_setup.configure_ray_env(None) == "token"
    assert os.environ["RAY_AUTH_MODE"] == "token"


_NO_DASHBOARD_PROBE = r"""
import io, json, os, pathlib
from fusion_sweep.raytune import setup as ray_setup
ray_setup.configure_ray_env(None)       # what `launch` does, in a fresh process like the CLI
assert ray_setup.init_ray(None, io.StringIO()) is True
import ray

def listening():  # socket inode -> "hexaddr:hexport" of every TCP socket in LISTEN state
    out = {}
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in pathlib.Path(f).read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] == "0A":
                out[parts[9]] = parts[1]
    return out

try:
    node = ray._private.worker.global_worker.node
    session, socks, procs = node.get_session_dir_path(), listening(), []
    for p in pathlib.Path("/proc").iterdir():
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fds = [os.readlink(fd) for fd in (p / "fd").iterdir()]
        except OSError:
            continue
        if p.name.isdigit() and session in cmd:
            ports = [socks[f[8:-1]] for f in fds if f.startswith("socket:[") and f[8:-1] in socks]
            procs.append({"cmd": cmd, "listens": ports})
    print(json.dumps({"procs": procs, "webui_url": node.address_info.get("webui_url")}))
finally:
    ray.shutdown()
"""


@pytest.mark.slow
@pytest.mark.processes  # a local Ray
def test_local_ray_starts_no_dashboard(tmp_path):
    """The local Ray instance `launch` starts (ray_setup.init_ray) really runs without the
    dashboard: no dashboard URL, and the only dashboard process in its session is Ray's
    minimal head (usage stats, `--disable-frontend`) listening on no port - no web UI, no
    job-submission REST API. Starts a Ray of its own, not the session's cluster
    (tests/conftest.py): the local instance a launch starts is what it tests."""
    import json
    import uuid

    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    token = tmp_path / "auth_token"  # this test's own token: ~/.ray is shared with other runs
    token.write_text(uuid.uuid4().hex)
    env["RAY_AUTH_TOKEN_PATH"] = str(token)
    r = subprocess.run([sys.executable, "-c", _NO_DASHBOARD_PROBE], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    procs = got["procs"]
    assert any("gcs_server" in p["cmd"] and p["listens"] for p in procs), procs  # scan works
    heads = [p for p in procs if "dashboard/dashboard.py" in p["cmd"]]
    for p in heads:
        assert "--minimal" in p["cmd"] and "--disable-frontend" in p["cmd"], p["cmd"]
        assert p["listens"] == [], f"the dashboard process listens on {p['listens']}"
    assert not got["webui_url"], got["webui_url"]


def test_torch_load_always_weights_only():
    """Checkpoints are written (tracking.runs.TrialRun.log_result: torch.save), never loaded by the
    tool; any `torch.load` added later must pass weights_only=True."""
    calls, saves = [], []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                if node.func.attr == "load":
                    calls.append((path, node))
                elif node.func.attr == "save":
                    saves.append(path.relative_to(REPO / "fusion_sweep").as_posix())
    for path, node in calls:
        kw = {k.arg: k.value for k in node.keywords}
        ok = isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True
        assert ok, f"{path}:{node.lineno}: torch.load without weights_only=True"
    text = "\n".join(p.read_text() for p in _sources())
    assert "torch.load(" not in text or calls, "torch.load reached other than as torch.load(...)"
    assert calls == [] and "tracking/runs.py" in saves  # today: written, never loaded


def test_yaml_is_read_with_safe_load_only(tmp_path, monkeypatch, capsys):
    unsafe = {"load", "unsafe_load", "full_load", "load_all", "unsafe_load_all", "full_load_all"}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "yaml":
                assert node.attr not in unsafe and "Loader" not in node.attr, \
                    f"{path}:{node.lineno}: yaml.{node.attr}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    marker = tmp_path / "PWNED"
    space = tmp_path / "evil.yaml"
    space.write_text(f'!!python/object/apply:os.system ["echo pwned > {marker}"]\n')
    for argv in (["launch", str(space)], ["launch", str(space), "--dry-run"], ["tune", str(space)]):
        rc = cli_main(argv)
        err = capsys.readouterr().err
        assert rc == 2, err
        assert "could not determine a constructor for the tag " \
               "'tag:yaml.org,2002:python/object/apply:os.system'; only plain YAML data is read" in err
        assert "Traceback" not in err
    assert not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.yaml"]


@pytest.mark.parametrize("how", ["--name ../x", "--name a/b", "--name ..", "space name: ..",
                                 "space name: ../x"])
def test_sweep_name_cannot_escape_storage(how, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    argv = ["launch", "smoke", "--storage", str(work / "rs")]
    if how.startswith("--name"):
        argv += how.split()
    else:
        from fusion_sweep.plan.space import SPACE_DIR

        text = (SPACE_DIR / "smoke.yaml").read_text().replace("name: smoke", f"name: '{how[12:]}'")
        (tmp_path / "space.yaml").write_text(text)
        argv[1] = str(tmp_path / "space.yaml")
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = cli_main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert re.search(r"(--name '.*': use a non-empty name without '/'|name: must be a non-empty "
                     r"string without '/')", err), err
    assert list(work.iterdir()) == []  # no rs/, no mlflow.db
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing next to it (../x)
    assert not (tmp_path / "x").exists()
    assert not ("ray" in sys.modules and sys.modules["ray"].is_initialized())
