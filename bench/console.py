"""The console benchmark: what a 50-router network costs the console and the browser.

Simulated routers, real everything else: a source of ``INTERIORS`` interiors in a full mesh and
``EDGES`` edges (each connected to two interiors), each router with ``CLIENTS`` clients and
``ADDRESSES`` addresses, the interiors hosting ``QUEUES`` queues between them, answering with
the rows their ``$management`` would give (counters that grow between scrapes). The console's
scraper, view, health rules and HTTP server run as they do for real routers; headless Chromium
(Debian's, driven by Selenium) loads the pages.

Measured: one scrape round turned into a view (the server's work every interval), each API's
answer time and size, and for each page the time from navigation to the page showing the whole
network (every router drawn; every address, queue row) — cold (a new browser profile) and warm.
The baseline in the same run is the 5-router examples/ size, simulated alike.
"""

from __future__ import annotations

import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from router_operator.console.flows import FlowAnswer
from router_operator.console.scraper import Scraper
from router_operator.console.server import Console, ConsoleServer
from router_operator.console.sources import Declared, Target
from router_operator.console.view import Scrape

from router.management.entitytypes import HOSTED_NODE

SCENARIOS = ("console-5-routers", "console-50-routers")
SIZES = {"console-5-routers": (3, 2), "console-50-routers": (10, 40)}
CLIENTS = 10
ADDRESSES = 40
QUEUES = 20
ROUNDS = 20
PAGE_LOADS = 5
QUICK_ROUNDS = 2
QUICK_PAGE_LOADS = 1
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PAGES = {
    "topology": "[data-router]",
    "addresses": "[data-address]",
    "nodes": "[data-node]",
}


@dataclass(frozen=True)
class Network:
    interiors: list[str]
    edges: list[str]

    @property
    def routers(self) -> list[str]:
        return self.interiors + self.edges

    def peers(self, router: str) -> list[tuple[str, str]]:
        """(peer, role) of each router connection of ``router``."""
        if router in self.interiors:
            mesh = [(p, "inter-router") for p in self.interiors if p != router]
            return mesh + [(e, "edge") for e in self.edges if router in self.uplinks(e)]
        return [(i, "edge") for i in self.uplinks(router)]

    def uplinks(self, edge: str) -> list[str]:
        n = self.edges.index(edge)
        return [
            self.interiors[n % len(self.interiors)],
            self.interiors[(n + 1) % len(self.interiors)],
        ]


class SimulatedSource:
    name = "simulated"

    def __init__(self, network: Network) -> None:
        self.network = network

    def targets(self) -> list[Target]:
        return [
            Target(r, "sim", "default", "interior" if r in self.network.interiors else "edge", r)
            for r in self.network.routers
        ]

    def declared(self) -> Declared:
        return Declared(addresses=[{"key": "prefix:jobs", "prefix": "jobs", "node": {}}])

    def log_tail(self, target: Target, lines: int) -> list[str]:
        return [f"ts=... level=info logger=router event=simulated id={target.id}"] * lines

    def flows(self, start_ms: int, end_ms: int) -> FlowAnswer:
        return FlowAnswer(None, "simulated: no collector")

    def analysis(self) -> Path | None:
        return None


class SimulatedScraper(Scraper):
    """Rows as the routers' $management gives them, counters growing with time."""

    def __init__(self, network: Network) -> None:
        super().__init__(SimulatedSource(network), interval=2.0)
        self.network = network
        self.started = time.monotonic()

    def _scrape(self, target: Target) -> Scrape:
        return Scrape(target, time.time(), self.rows(target.id))

    def rows(self, router: str) -> dict[str, list[dict[str, Any]]]:
        t = int((time.monotonic() - self.started) * 100)
        connections = []
        links = []
        for n, (peer, role) in enumerate(self.network.peers(router)):
            connections.append({"identity": str(n), "container": peer, "role": role, "dir": "out"})
            links.append(_link(2 * n, n, "out", "inter-router", t * (n + 1)))
        for c in range(CLIENTS):
            ident = 1000 + c
            connections.append(
                {
                    "identity": str(ident),
                    "container": f"{router}-app-{c}",
                    "role": "normal",
                    "dir": "in",
                    "host": f"10.0.{c}.1:40000",
                }
            )
            links.append(_link(5000 + c, ident, "in", "endpoint", t, f"M0app.{c % ADDRESSES}"))
        addresses = [
            {
                "key": f"M0app.{a}",
                "distribution": "balanced",
                "subscriberCount": 1,
                "containerCount": 0,
                "remoteHostRouters": [],
                "deliveriesIngress": t * a,
                "deliveriesEgress": t * a,
            }
            for a in range(ADDRESSES)
        ]
        mine = [
            q
            for q in range(QUEUES)
            if self.network.interiors[q % len(self.network.interiors)] == router
        ]
        return {
            "router": [{"id": router, "version": "sim", "uptimeSeconds": t // 100}],
            "connection": connections,
            "router.link": links,
            "router.address": addresses,
            "router.node": [{"id": router, "nextHop": "(self)", "cost": 0}]
            + [{"id": r, "nextHop": r, "cost": 1} for r in self.network.interiors if r != router],
            HOSTED_NODE: [
                {"name": f"jobs.{q}", "nodeType": "queue", "router": router, "depth": t % 500}
                for q in mine
            ],
        }


def _link(
    ident: int, conn: int, direction: str, kind: str, count: int, owner: str | None = None
) -> dict[str, Any]:
    return {
        "identity": str(ident),
        "linkType": kind,
        "linkDir": direction,
        "connectionId": str(conn),
        "deliveryCount": count,
        "owningAddr": owner,
        "undeliveredCount": 0,
    }


def _fetch(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        size = len(response.read())
    return (time.perf_counter() - started) * 1000, size


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1366,768",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def _page_load_ms(driver: Any, url: str, selector: str, expected: int) -> float:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    started = time.perf_counter()
    driver.get(url)
    WebDriverWait(driver, 30, poll_frequency=0.01).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, selector)) >= expected
    )
    return (time.perf_counter() - started) * 1000


def run_scenario(name: str, rounds: int = ROUNDS, page_loads: int = PAGE_LOADS) -> dict[str, Any]:
    interiors, edges = SIZES[name]
    network = Network([f"core-{i}" for i in range(interiors)], [f"edge-{i}" for i in range(edges)])
    scraper = SimulatedScraper(network)
    round_ms = []
    for _ in range(rounds):
        started = time.perf_counter()
        scraper.scrape_once()
        round_ms.append((time.perf_counter() - started) * 1000)
    server = ConsoleServer(("127.0.0.1", 0), Console(scraper))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    result: dict[str, Any] = {
        "name": name,
        "routers": len(network.routers),
        "links": len(scraper.latest()[0]["links"]),  # type: ignore[index]
        "clients": len(network.routers) * CLIENTS,
        "scrape_round_ms": statistics.median(round_ms),
        "api": {},
        "pages": {},
    }
    try:
        for api in ("topology", "addresses", "nodes", "health"):
            times, size = zip(*(_fetch(f"{server.url}api/{api}") for _ in range(10)), strict=True)
            result["api"][api] = {"ms": statistics.median(times), "bytes": size[0]}
        expected = {
            "topology": len(network.routers),
            "addresses": ADDRESSES,
            "nodes": QUEUES,
        }
        for page, selector in PAGES.items():
            cold = []
            warm = []
            for _ in range(page_loads):
                driver = _browser()
                try:
                    url = f"{server.url}#{page}"
                    cold.append(_page_load_ms(driver, url, selector, expected[page]))
                    driver.get("about:blank")
                    warm.append(_page_load_ms(driver, url, selector, expected[page]))
                finally:
                    driver.quit()
            result["pages"][page] = {
                "cold_ms": statistics.median(cold),
                "warm_ms": statistics.median(warm),
            }
    finally:
        server.shutdown()
        server.server_close()
    return result


def run(chosen: list[str], quick: bool = False) -> dict[str, Any]:
    """``quick``: a smoke run, two rounds and one load of each page."""
    rounds, loads = (QUICK_ROUNDS, QUICK_PAGE_LOADS) if quick else (ROUNDS, PAGE_LOADS)
    scenarios: dict[str, Any] = {}
    for name in chosen:
        try:
            scenarios[name] = run_scenario(name, rounds, loads)
        except Exception as err:  # one scenario's failure is its result; the others still run
            scenarios[name] = {"name": name, "error": f"{type(err).__name__}: {err}"}
    return {"benchmark": "console", "scenarios": scenarios}


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| network | links | scrape round → view | /api/topology | /api/addresses |"
        " topology page (cold / warm) | addresses page | queues page |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for s in results["scenarios"].values():
        if "error" in s:
            lines.append(f"| {s['name']}: {s['error']} | | | | | | | |")
            continue
        api = s["api"]["topology"]
        addresses = s["api"]["addresses"]
        pages = s["pages"]
        lines.append(
            f"| {s['routers']} routers, {s['clients']} clients | {s['links']} |"
            f" {s['scrape_round_ms']:.1f} ms | {api['ms']:.1f} ms, {api['bytes'] / 1024:.0f} KiB |"
            f" {addresses['ms']:.1f} ms, {addresses['bytes'] / 1024:.0f} KiB |"
            f" {pages['topology']['cold_ms']:.0f} / {pages['topology']['warm_ms']:.0f} ms |"
            f" {pages['addresses']['cold_ms']:.0f} / {pages['addresses']['warm_ms']:.0f} ms |"
            f" {pages['nodes']['cold_ms']:.0f} / {pages['nodes']['warm_ms']:.0f} ms |"
        )
    return "\n".join(lines) + "\n"
