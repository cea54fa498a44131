"""The loop behind the pages: every few seconds, ask every router of the source at once, turn
the answers into a view (view.py), judge it (health.py) and keep the last minutes of views for
rates, depth over time and what changed.

Routers are asked in parallel, each over its own kept connection (management.py), so one slow
or hung router costs a round at most the management timeout, and never delays the others' rows;
it is shown as not answering. The server reads the latest round without waiting for the next.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from router_operator.console import health, view
from router_operator.console.management import ManagementClient
from router_operator.console.sources import Source, Target

INTERVAL = 2.0
TIMEOUT = 3.0
HISTORY_SECONDS = 600.0
WORKERS = 16


class Scraper:
    def __init__(
        self,
        source: Source,
        interval: float = INTERVAL,
        timeout: float = TIMEOUT,
        history_seconds: float = HISTORY_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.interval = interval
        self.timeout = timeout
        self.clock = clock
        self.history: deque[dict[str, Any]] = deque(maxlen=max(2, int(history_seconds / interval)))
        self.scrapes: dict[str, view.Scrape] = {}
        self.problems: list[dict[str, Any]] = []
        self._counters = view.Counters()
        self._clients: dict[tuple[str, str], ManagementClient] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="scrape")
        self.rounds = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + self.interval + 1)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for client in self._clients.values():
            client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.scrape_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def scrape_once(self) -> None:
        targets = self.source.targets()
        scrapes = list(self._pool.map(self._scrape, targets))
        declared = self.source.declared()
        current, counters = view.build(scrapes, declared, self._counters)
        with self._lock:
            self._counters = counters
            self.scrapes = {s.target.id: s for s in scrapes}
            self.history.append(current)
            self.problems = health.problems(list(self.history))
            self.rounds += 1
        live = {(t.id, t.endpoint) for t in targets if t.endpoint}
        for key in list(self._clients.keys() - live):
            self._clients.pop(key).close()  # a router gone from the source, or moved

    def _scrape(self, target: Target) -> view.Scrape:
        if target.down is not None:
            return view.Scrape(target, self.clock(), None, target.down)
        if target.endpoint is None:
            return view.Scrape(target, self.clock(), None, "no listener to ask $management")
        key = (target.id, target.endpoint)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = ManagementClient(target.endpoint, self.timeout)
        try:
            rows = client.query()
        except Exception as err:  # whatever went wrong is that router's state, not ours
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            return view.Scrape(
                target, self.clock(), None, f"$management at {target.endpoint}: {why}"
            )
        return view.Scrape(target, self.clock(), rows)

    # --- what the server reads ----------------------------------------------------------------

    def latest(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        with self._lock:
            return (self.history[-1] if self.history else None), list(self.problems)

    def views(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.history)

    def scrape_of(self, router: str) -> view.Scrape | None:
        with self._lock:
            return self.scrapes.get(router)
