"""A loopback front for `mlflow server` that opens MLflow's model-training layout.

MLflow 3.17's web app chooses between its GenAI layout (traces, "Evaluation runs") and its
model-training layout (runs, params, metrics) from the `workflowType` URL parameter, else
from the browser's localStorage key `mlflow.workflowType_v1`, default GenAI; the experiment
tag `mlflow.experimentKind` is not read. So a plain `http://127.0.0.1:5000/`, and a trial
run's own page, open in the GenAI layout, and no server setting changes that.

`UIProxy` listens where the user points the browser and forwards every request, unchanged,
to the mlflow server on a private loopback port, with one exception: the app's HTML page
(`/` and `/index.html`) gets a one-line script that, before the app starts, stores in
localStorage the model-training layout, the group rows' colours (one per fusion; a group row
has no run tag to carry one) and, on a first visit, the Assistant panel closed (open, it
takes a quarter of the width the runs table needs); and sends a bare root to the trials
view. Standard library only; one thread per request; its errors go to `log`, never the
terminal.
"""
from __future__ import annotations

import http.client
import json
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Mapping

# localStorage key and value as MLflow 3.17's app writes them (useLocalStorage:
# `${key}_v${version}`, JSON-encoded value).
WORKFLOW_KEY = "mlflow.workflowType_v1"
TRAINING_WORKFLOW = "machine_learning"
ASSISTANT_KEY = "mlflow.assistant.panelOpen_v1"
# On a local server the app opens the Assistant on a first visit unless this says it did.
ASSISTANT_AUTO_OPENED_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"
GROUP_COLORS_KEY = "experimentRunColors"  # not versioned: group id -> colour
# Request/response headers that belong to one connection, not to the message.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailers", "transfer-encoding", "upgrade", "content-length"}
APP_PAGES = ("/", "/index.html")


def _set(key: str, value: object) -> str:
    return f"localStorage.setItem({json.dumps(key)},{json.dumps(json.dumps(value))});"


def training_script(landing: str | None, group_colors: Mapping[str, str] | None = None) -> str:
    """The script put first in <head>: the training layout, the Assistant panel closed unless
    the user chose otherwise, `group_colors` merged into the app's saved colours; a bare
    root goes to `landing` (a '#/...' route)."""
    js = _set(WORKFLOW_KEY, TRAINING_WORKFLOW)
    js += (f"if(localStorage.getItem({json.dumps(ASSISTANT_AUTO_OPENED_KEY)})===null)"
           f"{{{_set(ASSISTANT_AUTO_OPENED_KEY, True)}{_set(ASSISTANT_KEY, False)}}}")
    if group_colors:
        key = json.dumps(GROUP_COLORS_KEY)
        js += (f"var c={{}};try{{c=JSON.parse(localStorage.getItem({key})||'{{}}')}}catch(e){{}}"
               f"Object.assign(c,{json.dumps(dict(group_colors), sort_keys=True)});"
               f"localStorage.setItem({key},JSON.stringify(c));")
    js = f"try{{{js}}}catch(e){{}}"
    if landing:
        js += (f"if(!location.hash||location.hash==='#'||location.hash==='#/')"
               f"{{location.replace({json.dumps(landing)})}}")
    return f"<script>{js}</script>"


def inject(page: bytes, landing: str | None, group_colors: Mapping[str, str] | None = None) -> bytes:
    """The app page with training_script() at the start of <head> (unchanged without one)."""
    text = page.decode("utf-8", "replace")
    i = text.find("<head>")
    if i < 0:
        return page
    i += len("<head>")
    return (text[:i] + training_script(landing, group_colors) + text[i:]).encode("utf-8")


def free_loopback_port() -> int:
    """A port nothing listens on at 127.0.0.1 (for the private mlflow server)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UIProxy:
    """Forward host:port to the mlflow server at upstream_port on 127.0.0.1.

        with UIProxy("127.0.0.1", 5000, 5123, landing="#/experiments/1/runs?...") as p:
            ...
    """

    def __init__(self, host: str, port: int, upstream_port: int, landing: str | None = None,
                 group_colors: Mapping[str, str] | None = None, log: IO[str] | None = None):
        self.upstream = ("127.0.0.1", upstream_port)
        self.landing, self.group_colors, self.log = landing, dict(group_colors or {}), log
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # no line per request
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                page = self.command == "GET" and self.path.split("?")[0] in APP_PAGES
                if page:  # the page must come back whole and uncompressed to be edited
                    headers.pop("Accept-Encoding", None)
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=300)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                if page and resp.status == 200:
                    data = inject(data, proxy.landing, proxy.group_colors)
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _forward

        family_server = ThreadingHTTPServer
        if ":" in host:
            import socket

            class V6(ThreadingHTTPServer):
                address_family = socket.AF_INET6
            family_server = V6

        class Quiet(family_server):
            def handle_error(self, request: object, client_address: object) -> None:
                # A browser that closes a connection mid-reply is normal; the terminal shows
                # only the URL, so what went wrong goes to the log.
                if proxy.log is not None:
                    print(f"proxy: request from {client_address}:", file=proxy.log)
                    traceback.print_exc(file=proxy.log)
                    proxy.log.flush()
        self.server = Quiet((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "UIProxy":
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.thread.is_alive():  # shutdown() waits for serve_forever: only once started
            self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "UIProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
