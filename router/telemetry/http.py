"""The router's HTTP endpoint: /metrics (Prometheus), /healthz (liveness), /readyz (readiness).

Served by a thread of its own (http.server), never by the event loop, so a slow scraper or a
probe cannot stall message forwarding; the handlers only read what the loop keeps (see
readings.py). `/healthz` answers 200 while the loop turns (its last turn is recent), 503 when it
is stuck; `/readyz` 200 when the router should get traffic (readings.readiness), 503 with the
reason otherwise. Both answer one line of text. What /readyz answers also goes to the log when
it changes (`ReadinessLog`): the kubelet's events say only that a probe failed with 503, so the
pod's log is where `kubectl logs` finds why it is not Ready.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.process_collector import ProcessCollector

from router.log import get_logger
from router.telemetry import readings
from router.telemetry.metrics import RouterCollector

if TYPE_CHECKING:
    from router.core.engine import Router

log = get_logger("router.telemetry")

NOT_READY_REPEAT_SECONDS = 60.0
"""While a router stays not ready, its reason is logged again this often: the tail of a long log
still says it."""


class ReadinessLog:
    """Logs the readiness the probes see when it changes: `router.ready` once it is ready (the
    reason then is how, and is not repeated when only that changes), `router.not_ready` with the
    reason when it is not, again whenever the reason changes and at most every
    NOT_READY_REPEAT_SECONDS while it lasts."""

    def __init__(self) -> None:
        self._last: tuple[bool, str] | None = None
        self._said_at = 0.0
        self._lock = threading.Lock()  # probes may come on two threads at once

    def note(self, ready: bool, why: str, now: float) -> None:
        state = (True, "") if ready else (False, why)
        with self._lock:
            if state == self._last and (ready or now - self._said_at < NOT_READY_REPEAT_SECONDS):
                return
            self._last, self._said_at = state, now
        if ready:
            log.info("router.ready", reason=why)
        else:
            log.warning("router.not_ready", reason=why)


class HttpEndpoint:
    def __init__(self, router: Router, host: str, port: int) -> None:
        self.router = router
        self.readiness_log = ReadinessLog()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RouterCollector(router))
        ProcessCollector(namespace="routernet", registry=self.registry)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                endpoint.answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # probes every few seconds: not worth a log line each

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, args=(0.1,), name="routernet-http", daemon=True
        )

    def start(self) -> None:
        self.thread.start()
        host = self.server.server_address[0]
        log.info("http.started", host=host, port=self.port, paths="/metrics /healthz /readyz")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                self.reply(request, 200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                age = readings.loop_age(self.router)
                if age < readings.LOOP_STALE_SECONDS:
                    self.reply(request, 200, b"ok\n")
                else:
                    self.reply(request, 503, f"event loop stuck for {age:.1f}s\n".encode())
            elif path == "/readyz":
                ready, why = readings.readiness(self.router)
                self.readiness_log.note(ready, why, time.monotonic())
                self.reply(request, 200 if ready else 503, f"{why}\n".encode())
            else:
                self.reply(request, 404, b"not found: try /metrics, /healthz or /readyz\n")
        except Exception as e:  # a reading raced a change: report it, the router goes on
            log.warning("http.failed", path=path, error=f"{type(e).__name__}: {e}"[:200])
            self.reply(request, 500, f"{type(e).__name__}: {e}\n".encode())

    @staticmethod
    def reply(
        request: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        content_type: str = "text/plain; charset=utf-8",
    ) -> None:
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
