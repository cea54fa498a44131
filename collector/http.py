"""The collector's flow totals over HTTP, for a console that cannot read its volume.

On Kubernetes the dataset is on the collector's ReadWriteOnce claim: the network console, in
its own pod, asks each network's collector instead (``routernet-collector --http``).

    GET /flows?from=MS&to=MS   the totals of the flow records of that window (collector/window.py)
    GET /healthz               ok

Read-only (anything but GET and HEAD is 405), bad input a one-line 400, JSON throughout. What
it serves is what the files hold: records still buffered (at most ``--flush-seconds`` of them)
are not there yet. It answers from a thread of its own, beside the AMQP receiver; the files it
reads are never changed once written, so the two need no coordination.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from collector.window import FlowReader, WindowError, parse_window

MAX_WINDOW_MS = 24 * 3_600_000
"""The longest window asked for: the console's longest is a day."""


class FlowsHandler(BaseHTTPRequestHandler):
    server: FlowsServer
    server_version = "routernet-collector"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the console asks every few seconds: no line per request

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _refuse(self) -> None:
        self._send(405, {"error": "read-only: GET and HEAD only"}, head=False, allow=True)

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def _answer(self, head: bool) -> None:
        path, _, query = self.path.partition("?")
        if path == "/healthz":
            self._send(200, {"status": "ok"}, head)
            return
        if path != "/flows":
            self._send(404, {"error": f"no {path}: ask /flows?from=MS&to=MS"}, head)
            return
        params = urllib.parse.parse_qs(query)
        try:
            start, end = parse_window(
                (params.get("from") or [None])[0], (params.get("to") or [None])[0], MAX_WINDOW_MS
            )
        except WindowError as err:
            self._send(400, {"error": str(err)}, head)
            return
        totals = self.server.reader.totals(start, end)
        self._send(200, {"from": start, "to": end, **totals.to_json()}, head)

    def _send(self, status: int, body: dict[str, Any], head: bool, allow: bool = False) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if allow:
            self.send_header("Allow", "GET, HEAD")
        self.end_headers()
        if not head:
            self.wfile.write(data)


class FlowsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], dataset: Path) -> None:
        super().__init__(address, FlowsHandler)
        self.reader = FlowReader(dataset)
        self._thread = threading.Thread(target=self.serve_forever, name="flows-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
