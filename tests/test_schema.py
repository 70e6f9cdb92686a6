"""`fusion_sweep.schema`'s small rules, each pinned at its edges: labels, the code and platform
fingerprints, the run that stands for a trial key, parent-run params and the tracking store.

Everything here decides what a user reads (a label, a warning) or which run a resume keeps;
the tables below are what each rule promises, one row per case on either side of its edge.
"""
from __future__ import annotations

import hashlib
import http.server
import json
import socket
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from fusion_sweep import schema
from fusion_sweep.schema import (
    FINISHED, PLATFORM_FIELDS, changed_components, code_fingerprint, component_label,
    decode_param, default_tracking_uri, encode_param, fusion_color, is_server, metric_label,
    parse_components, platform_fingerprint, platform_from_tags, platform_label,
    resolve_tracking_uri, run_of_key, server_unreachable, shown, sqlite_path, sweep_code,
    trial_key, trial_label, variant_label)
from tests.processes import free_port


# ------------------------------------------------------------------------------- labels
def test_a_variant_is_encoder_pe_fusion() -> None:
    assert variant_label({"dataset": "d", "encoder": "standard", "pe": "rope", "fusion": "add",
                          "seed": 3}) == "standard/rope/add"


@pytest.mark.parametrize("identity, label", [
    ({"dataset": "d", "encoder": "standard", "pe": "rope", "fusion": "add", "seed": 3},
     "d/rope/add/seed 3"),  # the default encoder is noise in a label
    ({"dataset": "d", "encoder": "ressformer", "pe": "rope", "fusion": "add", "seed": 0},
     "d/ressformer/rope/add/seed 0"),
    ({"dataset": "d", "pe": "rope", "fusion": "add", "seed": 1},  # before the encoder axis
     "d/rope/add/seed 1")])
def test_a_trial_label_names_the_encoder_only_when_it_is_not_the_default(identity, label) -> None:
    assert trial_label(identity) == label


def test_a_trial_label_needs_every_other_identity_field() -> None:
    with pytest.raises(KeyError, match="seed"):
        trial_label({"dataset": "d", "pe": "rope", "fusion": "add"})


def test_shown_drops_only_the_default_encoder() -> None:
    assert shown({"encoder": "standard", "pe": "standard"}) == {"pe": "standard"}
    assert shown({"encoder": "ressformer", "pe": "x"}) == {"encoder": "ressformer", "pe": "x"}


@pytest.mark.parametrize("name, label", [
    ("fusion:gate-cnn", "fusion gate-cnn"), ("trainer", "the trainer"),
    ("data_dir:imdb", "the local copy (data_dir) of imdb"), ("pe:", "the pe")])
def test_a_component_in_words(name: str, label: str) -> None:
    assert component_label(name) == label


@pytest.mark.parametrize("metric, label", [("test_acc", "test accuracy"),
                                           ("my_metric", "my_metric")])
def test_a_metric_in_words_or_as_it_is(metric: str, label: str) -> None:
    assert metric_label(metric) == label


@pytest.mark.parametrize("place, colour", [(0, "#1f77b4"), (9, "#17becf"), (10, "#1f77b4"),
                                           (11, "#ff7f0e")])
def test_a_fusions_colour_cycles_through_tab10(place: int, colour: str) -> None:
    assert fusion_color(place) == colour


# --------------------------------------------------------------------------- fingerprints
def test_a_code_fingerprint_is_the_component_maps_and_nothing_else() -> None:
    a = code_fingerprint({"trainer": "1", "fusion:add": "2"})
    assert a == code_fingerprint({"fusion:add": "2", "trainer": "1"})  # order is not code
    assert len(a) == 16 and int(a, 16) >= 0
    assert a != code_fingerprint({"trainer": "1", "fusion:add": "3"})
    assert a != code_fingerprint({"trainer": "1"})


def test_a_sweeps_code_counts_each_trial_code_once_in_any_order() -> None:
    assert sweep_code(["b", "a", "a"]) == sweep_code(["a", "b"]) != sweep_code(["a"])
    # pinned: parent runs already carry this tag, and a relaunch compares against it
    assert sweep_code(["b", "a"]) == hashlib.sha256(b"a\nb").hexdigest()[:16]


@pytest.mark.parametrize("text, parsed", [
    ('{"trainer": "1", "pe:rope": 2}', {"trainer": "1", "pe:rope": "2"}),
    ("{}", {}),
    ('{"trainer": ', None),  # not JSON
    ('["trainer"]', None), ("trainer", None), ("", None),  # not a map
    (None, None), (float("nan"), None), (3, None)])  # a blank cell, an old run
def test_a_component_map_is_a_json_object_or_none(text, parsed) -> None:
    assert parse_components(text) == parsed


@pytest.mark.parametrize("shared_only, changed", [(False, ["data:a", "fusion:x", "pe:p"]),
                                                  (True, ["pe:p"])])
def test_changed_components_all_or_only_those_both_have(shared_only, changed) -> None:
    old = {"trainer": "1", "pe:p": "1", "fusion:x": "1"}
    new = {"trainer": "1", "pe:p": "2", "data:a": "1"}
    assert changed_components(old, new, shared_only=shared_only) == changed
    assert changed_components(old, new) == changed_components(old, new, False)


def _platform(**kw: str) -> dict[str, str]:
    base = {"torch": "2.13.0+cpu", "cpu_capability": "AVX512", "cpu_model": "AMD EPYC",
            "threads": "2", "gpu": "none", "deterministic": "on", "precision": "fp32",
            "kernels": "compiled", "compiler": "gcc 12.2.0", "speed": "fast"}
    return {**base, **kw}


def test_a_platform_fingerprint_reads_only_the_platform_fields() -> None:
    fp = platform_fingerprint(_platform())
    assert fp == platform_fingerprint({**_platform(), "hostname": "elsewhere"})
    assert fp != platform_fingerprint(_platform(threads="1"))
    assert platform_fingerprint({}) == platform_fingerprint({k: "" for k in PLATFORM_FIELDS})
    # pinned: trial runs already carry it, and `stats` pairs two trials only when it matches
    payload = json.dumps({k: _platform().get(k, "") for k in PLATFORM_FIELDS}, sort_keys=True)
    assert fp == hashlib.sha256(payload.encode()).hexdigest()[:16]


@pytest.mark.parametrize("fields, label", [
    (_platform(), "torch 2.13.0+cpu, CPU AVX512 (AMD EPYC), 2 threads, no GPU, deterministic "
                  "on, fp32, kernels compiled (gcc 12.2.0), speed fast"),
    (_platform(threads="1", compiler="", speed="", precision=""),
     "torch 2.13.0+cpu, CPU AVX512 (AMD EPYC), 1 thread, no GPU, deterministic on, kernels "
     "compiled"),
    (_platform(gpu="NVIDIA H100", cuda="12.8", capability="9.0", kernels=""),
     "torch 2.13.0+cpu, CPU AVX512 (AMD EPYC), 2 threads, GPU NVIDIA H100 (CUDA 12.8, cuDNN "
     "?, driver ?, sm 9.0, SDPA ?), deterministic on, fp32, speed fast"),
    ({"gpu": ""}, ""), ({}, ""),  # runs logged before the platform was
    ({"threads": "4"}, "torch ?, CPU ? (?), 4 threads, no GPU, deterministic ?"),
    ({"torch": "2.13.0", "gpu": "A10G"},  # an unknown field is a "?", never a blank
     "torch 2.13.0, CPU ? (?), ? threads, GPU A10G (CUDA ?, cuDNN ?, driver ?, sm ?, SDPA ?), "
     "deterministic ?")])
def test_a_platform_in_one_line(fields: dict, label: str) -> None:
    assert platform_label(fields) == label


def test_a_platform_from_its_readable_tags() -> None:
    tags = {"platform.torch": "2.13.0", "platform.gpu": "none", "other": "x"}
    got = platform_from_tags(tags)
    assert list(got) == list(PLATFORM_FIELDS)
    assert got["torch"] == "2.13.0" and got["gpu"] == "none" and got["cuda"] == ""


def test_a_trial_key_ignores_what_does_not_change_its_numbers() -> None:
    config = {"dataset": "d", "seed": 0, "lr": 1e-3}
    key = trial_key(config, "code")
    assert len(key) == 16 and key == trial_key(dict(reversed(config.items())), "code")
    assert key != trial_key(config, "other code") != trial_key({**config, "lr": 2e-3}, "code")
    for field in (*schema.NON_SEMANTIC_FIELDS, *schema.CONTENT_KEYED_FIELDS):
        assert trial_key({**config, field: "/anywhere"}, "code") == key, field


# ------------------------------------------------------------------ the run of a trial key
def _runs(*statuses: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(i=i, status=s) for i, s in enumerate(statuses)]


@pytest.mark.parametrize("statuses, chosen", [
    ((), None), (("FAILED",), 0), (("FAILED", "RUNNING"), 1),  # no finished run: the newest
    (("FAILED", FINISHED, "RUNNING", FINISHED), 1),  # the oldest finished run
    ((FINISHED, "FAILED"), 0)])
def test_the_run_of_a_key_is_its_oldest_finished_else_its_newest(statuses, chosen) -> None:
    run = run_of_key(_runs(*statuses), lambda r: r.status)
    assert (run.i if run is not None else None) == chosen


# ------------------------------------------------------------------------ parent-run params
@pytest.mark.parametrize("value", [None, "add", 0.02, {"test_acc": "higher"}, [1, 2], True])
def test_a_param_survives_the_round_trip(value) -> None:
    assert decode_param(encode_param(value)) == value


@pytest.mark.parametrize("text, value", [(None, None), ("add", "add"), ("null", None),
                                         ("", ""), ("0.02", 0.02)])
def test_a_param_logged_as_plain_text_passes_through(text, value) -> None:
    assert decode_param(text) == value


def test_a_param_is_json_with_sorted_keys() -> None:
    assert encode_param({"b": 1, "a": None}) == '{"a": null, "b": 1}'


# ---------------------------------------------------------------------------- the store
def test_the_tracking_uri_is_the_flag_then_the_environment_then_the_local_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    local = f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert default_tracking_uri() == local == resolve_tracking_uri() == resolve_tracking_uri("")
    assert default_tracking_uri(tmp_path / "x") == f"sqlite:///{tmp_path.resolve()}/x/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env:5000")
    assert resolve_tracking_uri() == "http://env:5000"
    assert resolve_tracking_uri("http://flag:5000") == "http://flag:5000"


@pytest.mark.parametrize("uri, path", [
    ("sqlite:///mlflow.db", Path("mlflow.db")), ("sqlite:////abs/m.db", Path("/abs/m.db")),
    ("sqlite:///m.db?timeout=20", Path("m.db")), ("sqlite:///m.db?a=1?b=2", Path("m.db")),
    ("sqlite://m.db", None),
    ("http://127.0.0.1:5000", None), ("file:///runs", None)])
def test_the_database_file_of_a_sqlite_uri(uri: str, path: Path | None) -> None:
    assert sqlite_path(uri) == path


@pytest.mark.parametrize("uri, server", [("http://h:5000", True), ("https://h", True),
                                         ("sqlite:///m.db", False), ("httpx://h", False),
                                         ("/runs", False)])
def test_a_server_is_http_or_https(uri: str, server: bool) -> None:
    assert is_server(uri) is server


class _Health(http.server.BaseHTTPRequestHandler):
    status, base = 200, ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        # the request line as sent: `self.path` has a leading "//" collapsed (Python 3.11.4+)
        target = self.requestline.split()[1]
        self.send_response(self.status if target == f"{self.base}/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("status, base, suffix, reason", [
    (200, "", "", None), (200, "", "/", None), (200, "", "//", None),
    (200, "/MLFLOW-BOX", "", None), (200, "/MLFLOW-BOX", "/", None),  # behind a proxy's path
    (204, "", "", "HTTP 204"), (503, "", "", "Service Unavailable")])
def test_a_server_answers_its_health_check_or_says_why_not(status, base, suffix,
                                                           reason) -> None:
    """One slash before /health, whatever trailing slashes the URI has and whatever its path
    ends with; any answer but 200 is a reason."""
    handler = type("H", (_Health,), {"status": status, "base": base})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}{base}{suffix}"
        assert server_unreachable(uri) == reason
    finally:
        server.shutdown()
        server.server_close()


def test_a_closed_port_is_a_reason() -> None:
    assert "refused" in server_unreachable(f"http://127.0.0.1:{free_port()}", timeout=2)


def test_a_server_that_hangs_up_is_a_reason() -> None:
    """An error urllib does not wrap (no `.reason`: the connection closed before an answer)
    is still said in words."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def hang_up() -> None:
            conn, _ = listener.accept()
            conn.recv(1024)
            conn.close()

        threading.Thread(target=hang_up, daemon=True).start()
        reason = server_unreachable(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=5)
    assert reason == "Remote end closed connection without response"


def test_the_health_check_waits_five_seconds_unless_told(monkeypatch) -> None:
    """The bound a launch waits on a silent server before it says so (the check exists
    because MLflow would retry a dead server for minutes)."""
    import urllib.error
    import urllib.request

    waited: list[float] = []

    def urlopen(url: str, timeout: float):
        waited.append(timeout)
        raise urllib.error.URLError("timed out")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    assert server_unreachable("http://h:5000") == server_unreachable("http://h", 1.5) == "timed out"
    assert waited == [5.0, 1.5]
