"""The console's pages in a real browser: Debian's Chromium, headless, driven by Selenium through
its chromedriver, against a real `routernet up` network of examples/ (3 interiors, 2 edges, the
collector) and a console serving it from this process.

What users rely on: every router and link in the topology, rates that move with traffic, a
stopped router shown down within seconds, a queue's depth following sends and receives, the
health page naming an address that has senders and no consumer, both themes. One network and
one browser for the module, its tests on one xdist worker (`--dist loadgroup`); each makes the
traffic it looks for; the last one stops a router.

With ROUTERNET_SCREENSHOTS=1 the tests also write the pages as docs/console.md shows them
(docs/console/*.png, 1366x768); a plain run leaves the tree as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import processes
import pytest
from proton.utils import BlockingConnection
from router_operator.console.auth import TokenReviewAuth
from router_operator.console.scraper import Scraper
from router_operator.console.server import Console, ConsoleServer
from router_operator.console.sources import LocalSource
from router_operator.local import backend as local
from test_console_api import ReviewingCluster

pytestmark = [pytest.mark.network, pytest.mark.xdist_group("console-browser")]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SHOTS = ROOT / "docs" / "console"
CLI = [sys.executable, "-m", "router_operator.cli.main"]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INTERIORS = ["core-0", "core-1", "core-2"]
EDGES = ["edge-0", "edge-1"]
# Each interior pair once, and every edge to every interior (its uplink and two in reserve).
LINKS = {"core-0|core-1", "core-0|core-2", "core-1|core-2"} | {
    f"{core}|{edge}" for core in INTERIORS for edge in EDGES
}
WAIT = 30.0
"""A bound on each wait for the page to show something."""
INTERVAL = 1.0
"""Between the console's scrapes (the pages refresh as often): 2 s by default."""
VIEWPORT = (1366, 768)
ROUTERS = "#topology-graph [data-router]"


@dataclass
class Network:
    state: Path
    url: str
    """The console's, ending in /."""

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=10) as response:
            return json.loads(response.read())

    def endpoint(self, router: str) -> str:
        [entry] = [r for r in self.api("/api/topology")["routers"] if r["id"] == router]
        return f"amqp://{entry['endpoint']}"


def eventually(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)
    return result


def _ready(net: Network) -> bool:
    """Every router up, the interiors meshed, each edge with an uplink and all its links."""
    topo = net.api("/api/topology")
    routers = {r["id"]: r for r in topo["routers"]}
    if sorted(routers) != INTERIORS + EDGES or any(r["state"] != "up" for r in routers.values()):
        return False
    meshed = all(set(routers[c].get("knownRouters", [])) == set(INTERIORS) - {c} for c in INTERIORS)
    uplinks = all(routers[e].get("uplink") for e in EDGES)
    links = {f"{lk['source']}|{lk['target']}" for lk in topo["links"]}
    return meshed and uplinks and links == LINKS


def _stop_network(state: Path) -> None:
    """`down`, then SIGKILL whatever router of the state directory is left."""
    with contextlib.suppress(Exception):
        local.down(state, timeout=5)
    for pod in INTERIORS + EDGES:
        pid = local.running_pid(state, pod)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    state = tmp_path_factory.mktemp("console") / "state"
    server = scraper = None
    try:
        up = subprocess.run(
            [*CLI, "up", "--state-dir", str(state), str(EXAMPLES)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert up.returncode == 0, up.stderr
        scraper = Scraper(LocalSource(state), interval=INTERVAL)
        server = ConsoleServer(("127.0.0.1", 0), Console(scraper))
        scraper.scrape_once()
        scraper.start()
        threading.Thread(target=server.serve_forever, args=(0.2,), daemon=True).start()
        net = Network(state, server.url)
        eventually("the network up, meshed and its edges linked", lambda: _ready(net), 60)
        yield net
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        if scraper is not None:
            scraper.stop()
        _stop_network(state)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("no /usr/bin/chromium or /usr/bin/chromedriver: scripts/system-deps.sh")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not look for a driver online
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tmp_path_factory.mktemp("chromium")
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespaces for the sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # for wait()'s failures
    # chromedriver and the browser it starts in a process group of their own: whatever of it
    # outlives quit() is killed with the group.
    service = Service(str(CHROMEDRIVER), popen_kw={"start_new_session": True})
    driver = webdriver.Chrome(service=service, options=options)
    pgid = service.process.pid
    try:
        driver.set_page_load_timeout(WAIT)
        yield driver
    finally:
        with contextlib.suppress(Exception):
            driver.quit()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        eventually("the browser's processes to go", lambda: not processes.group_members(pgid), 10)


@pytest.fixture(scope="module")
def page(network: Network, browser: Any) -> Any:
    """The browser on the console, its viewport VIEWPORT (the window's frame aside)."""
    browser.get(network.url)
    inner = browser.execute_script("return [innerWidth, innerHeight]")
    browser.set_window_size(2 * VIEWPORT[0] - inner[0], 2 * VIEWPORT[1] - inner[1])
    return browser


def wait(driver: Any, what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    """``check()`` once it is true, polled; on a timeout the failure shows what the page said
    to its console (a script error, an API's error) and which page it was on."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda _: check())
    except TimeoutException:
        said = [f"{e['level']}: {e['message']}" for e in driver.get_log("browser")]
        raise AssertionError(
            f"timed out after {timeout}s waiting for {what} on {driver.current_url};"
            f" the browser's console: {said or 'nothing'}"
        ) from None


def go(driver: Any, route: str) -> None:
    """Another page of the console, as a click on a link to it does (no reload)."""
    driver.execute_script("location.hash = arguments[0]", route)


def attrs(driver: Any, selector: str, name: str) -> list[str | None]:
    """Attribute ``name`` of every element ``selector`` matches, read in one go in the page
    (no element handle to go stale when a refresh replaces it)."""
    result: list[str | None] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(e => e.getAttribute(arguments[1]))",
        selector,
        name,
    )
    return result


def attr(driver: Any, selector: str, name: str) -> str | None:
    found = attrs(driver, selector, name)
    return found[0] if found else None


def texts(driver: Any, selector: str) -> list[str]:
    result: list[str] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)", selector
    )
    return result


def text(driver: Any, selector: str) -> str | None:
    found = texts(driver, selector)
    return found[0] if found else None


def screenshot(driver: Any, name: str) -> None:
    if os.environ.get("ROUTERNET_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        time.sleep(INTERVAL * 1.5)  # one more refresh: rates settled, no "loading…"
        driver.save_screenshot(str(SHOTS / f"{name}.png"))


def routernet(*args: str) -> subprocess.Popen[str]:
    """A `routernet` client command in its own process group (stopped by the caller)."""
    return processes.start([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen[str], timeout: float = WAIT) -> str:
    out, err = processes.finish(proc, timeout)
    assert proc.returncode == 0, err
    return str(out)


def consumed(network: Network, address: str) -> bool:
    """Whether the console counts a consumer of ``address`` (a receiver has attached)."""
    found = network.api("/api/addresses")["addresses"]
    return any(a["address"] == address and a["consumers"] for a in found)


# --- the tests, in the order they run ----------------------------------------------------------


def test_topology_shows_every_router_and_link(network: Network, page: Any) -> None:
    go(page, "#topology")

    def routers() -> dict[str | None, str | None]:
        return dict(
            zip(
                attrs(page, ROUTERS, "data-router"),
                attrs(page, ROUTERS, "data-state"),
                strict=True,
            )
        )

    wait(page, "every router shown up", lambda: routers() == dict.fromkeys(INTERIORS + EDGES, "up"))
    modes = dict(
        zip(
            attrs(page, ROUTERS, "data-router"),
            attrs(page, ROUTERS, "data-mode"),
            strict=True,
        )
    )
    assert modes == {**dict.fromkeys(INTERIORS, "interior"), **dict.fromkeys(EDGES, "edge")}
    wait(page, "every link", lambda: set(attrs(page, "[data-link]", "data-link")) == LINKS)
    labels = texts(page, "[data-link] .link-rate")
    assert len(labels) == len(LINKS)
    assert all(label.endswith("/s") or label == "\N{EN DASH}" for label in labels), labels

    # A router's details in the side panel: a click, as users do.
    page.find_element("css selector", f'{ROUTERS}[data-router="core-0"]').click()
    wait(page, "core-0's panel", lambda: text(page, "#router-panel h2") == "core-0")
    assert "router=core-0" in page.current_url
    wait(page, "core-0 up in the panel", lambda: text(page, "#panel-state") == "up")
    wait(page, "core-0's log in the panel", lambda: "core-0" in (text(page, "#panel-log") or ""))
    assert "CONNECTIONS" in page.find_element("id", "router-panel").text.upper()


def test_rates_move_with_traffic(network: Network, page: Any) -> None:
    address = "orders.console"

    receiver = routernet(
        "receive", "--url", network.endpoint("edge-1"), "--duration", "25", address
    )
    sender = None
    try:
        wait(page, "the receiver attached", lambda: consumed(network, address))
        sender = routernet(
            "send", "--url", network.endpoint("edge-0"), "--rate", "30", "--duration", "30", address
        )
        go(page, "#topology?router=edge-0")

        def edge0_rates() -> list[float]:
            return [float(r or 0) for r in attrs(page, '[data-link*="edge-0"]', "data-rate")]

        wait(page, "edge-0's uplink carrying 30 msgs/s", lambda: max(edge0_rates()) > 15)
        labels = texts(page, '[data-link*="edge-0"] .link-rate')
        assert any(label[0].isdigit() and float(label.removesuffix("/s")) > 15 for label in labels)
        screenshot(page, "topology")

        # The address's msgs/s on the addresses page, its routers' counts on expand.
        go(page, f"#addresses?q={address}")
        row = f'[data-address="{address}"]'
        wait(
            page,
            f"{address}'s msgs/s",
            lambda: float(attr(page, f"{row} [data-rate-in]", "data-rate-in") or 0) > 0,
        )
        assert attrs(page, "#addresses-table [data-address]", "data-address") == [address]
        page.find_element("css selector", f"{row} button[data-expand]").click()
        wait(
            page,
            "its per-router rows",
            lambda: len(attrs(page, "[data-address-router]", "data-address-router")) == 5,
        )
        screenshot(page, "addresses")
    finally:  # the sender too is stopped as soon as the page has shown its traffic
        if sender is not None:
            processes.stop_group(sender)
        processes.stop_group(receiver)


def test_queue_depth_follows_sends_and_receives(network: Network, page: Any) -> None:
    queue = "jobs.thumbnails"  # examples/addresses.yaml: `jobs` is a queue the network keeps
    state = str(network.state)
    finished(
        routernet(
            "send", "--state-dir", state, "--router", "edge", "--count", "7", "--durable", queue
        )
    )
    go(page, "#nodes")
    depth = f'[data-node="{queue}"] [data-depth]'
    wait(page, f"{queue} 7 deep", lambda: attr(page, depth, "data-depth") == "7")
    assert text(page, depth) == "7"
    assert "jobs.failed" in (text(page, f'[data-node="{queue}"]') or "")  # its dead-letter queue
    finished(routernet("receive", "--state-dir", state, "--count", "7", queue))
    wait(page, f"{queue} drained", lambda: attr(page, depth, "data-depth") == "0")
    screenshot(page, "queues")


def test_flows_show_the_traffic_matrix(network: Network, page: Any) -> None:
    address = "orders.flows"
    receiver = routernet("receive", "--url", network.endpoint("edge-1"), "--count", "100", address)
    try:
        wait(page, "the receiver attached", lambda: consumed(network, address))
        finished(routernet("send", "--url", network.endpoint("edge-0"), "--count", "100", address))
        finished(receiver)
    finally:
        processes.stop_group(receiver)
    go(page, "#flows?minutes=5")
    wait(page, "the matrix or why not", lambda: texts(page, "#flow-matrix, #flows-unavailable"))
    assert texts(page, "#flows-unavailable") == []
    assert texts(page, "#flow-matrix tbody th") == INTERIORS + EDGES
    # The collector writes the routers' records every ten seconds or so.
    path = f'#flow-paths [data-path="{address}"]'
    wait(
        page,
        f"{address}'s 100 in the busiest paths",
        lambda: int(attr(page, path, "data-deliveries") or 0) >= 100,
    )
    assert (text(page, path) or "").count("edge-0 → edge-1") == 1
    cell = '#flow-matrix [data-ingress="edge-0"][data-egress="edge-1"]'
    assert int(attr(page, cell, "data-deliveries") or 0) >= 100
    page.find_element("css selector", '[data-minutes="15"]').click()
    wait(page, "the 15-minute window", lambda: "minutes=15" in page.current_url)
    assert attr(page, '[data-minutes="15"]', "aria-pressed") == "true"
    screenshot(page, "flows")


def test_health_names_an_address_without_consumer(network: Network, page: Any) -> None:
    address = "alerts.nobody-listens"
    connection = BlockingConnection(network.endpoint("core-1"), timeout=WAIT)
    try:
        connection.create_sender(address)
        go(page, "#health")
        problem = '[data-problem-kind="no-consumer"]'
        wait(page, "the no-consumer problem", lambda: address in (text(page, problem) or ""))
        assert attr(page, problem, "data-severity") == "warning"
        assert "core-1" in (text(page, problem) or "")
        wait(
            page, "the header amber", lambda: attr(page, "#health-summary", "data-level") == "warn"
        )
        screenshot(page, "health")
        # Its link opens the addresses page filtered to that address.
        page.find_element("css selector", f'{problem} [data-address-link="{address}"]').click()
        shown = "#addresses-table [data-address]"
        wait(
            page,
            "the addresses page filtered",
            lambda: attrs(page, shown, "data-address") == [address],
        )
        assert page.find_element("id", "address-filter").get_attribute("value") == address
    finally:
        connection.close()


def test_light_and_dark_themes(network: Network, page: Any) -> None:
    go(page, "#topology")

    def colours() -> list[str | None]:
        result: list[str | None] = page.execute_script(
            "const label = document.querySelector('#topology-graph text.router-id');"
            "return [getComputedStyle(document.body).backgroundColor,"
            " getComputedStyle(document.body).color, label && getComputedStyle(label).fill]"
        )
        return result

    wait(page, "the graph drawn", lambda: colours()[2] is not None)
    assert attr(page, "html", "data-theme") is None  # Chromium prefers light by default
    light = colours()
    page.find_element("id", "theme-toggle").click()
    assert attr(page, "html", "data-theme") == "dark"
    dark = colours()
    assert all(d != li for d, li in zip(dark, light, strict=True)), (dark, light)
    assert _luminance(dark[0]) < 0.2 and _luminance(light[0]) > 0.8
    assert _luminance(dark[1]) > 0.8 and _luminance(light[1]) < 0.2  # text readable on each
    # Remembered across a reload; back to light with the same button.
    page.refresh()
    wait(page, "dark after a reload", lambda: colours()[0] == dark[0])
    page.find_element("id", "theme-toggle").click()
    assert colours()[0] == light[0]
    # No choice stored: the system's preference.
    page.execute_script("localStorage.removeItem('routernet-theme')")
    dark_system = {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
    page.execute_cdp_cmd("Emulation.setEmulatedMedia", dark_system)
    try:
        page.refresh()
        wait(page, "the system's dark theme", lambda: colours()[0] == dark[0])
    finally:
        page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def _luminance(css: str | None) -> float:
    """Of an ``rgb(r, g, b)`` colour, 0 (black) to 1 (white)."""
    assert css is not None
    r, g, b = (int(v) / 255 for v in css[css.index("(") + 1 : css.index(")")].split(",")[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_a_console_checking_tokens_asks_the_user_for_one(network: Network, page: Any) -> None:
    """--token-review: a browser has no bearer token to send, so the page loads without one,
    asks for it, says when one is refused, and shows the network once given a good one."""
    auth = TokenReviewAuth(ReviewingCluster(), None)  # type: ignore[arg-type]
    scraper = Scraper(LocalSource(network.state), interval=INTERVAL)
    server = ConsoleServer(("127.0.0.1", 0), Console(scraper, auth))
    scraper.scrape_once()
    scraper.start()
    threading.Thread(target=server.serve_forever, args=(0.2,), daemon=True).start()
    try:
        page.get(server.url)
        form = "#token-form"
        wait(page, "the token form", lambda: attr(page, form, "hidden") is None)

        def sign_in(token: str) -> None:
            box = page.find_element("id", "token-input")
            box.clear()
            box.send_keys(token)
            page.find_element("css selector", f"{form} button[type=submit]").click()

        sign_in("bad-token")
        wait(page, "the token refused", lambda: "refused" in (text(page, "#token-error") or ""))
        sign_in("good-token")
        wait(
            page,
            "the network shown",
            lambda: (text(page, "#health-summary") or "").startswith("5/5 routers up"),
        )
        assert attr(page, form, "hidden") is not None
    finally:
        page.execute_script("sessionStorage.clear()")
        server.shutdown()
        server.server_close()
        scraper.stop()
        page.get(network.url)  # back to the module's console for the tests after this one


def test_a_stopped_router_is_shown_down(network: Network, page: Any) -> None:
    """Last: the network keeps a router down."""
    go(page, "#topology")
    router = f'{ROUTERS}[data-router="edge-1"]'
    wait(page, "edge-1 up", lambda: attr(page, router, "data-state") == "up")
    pid = local.running_pid(network.state, "edge-1")
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    stopped = time.monotonic()
    wait(page, "edge-1 shown down", lambda: attr(page, router, "data-state") == "down", timeout=10)
    assert time.monotonic() - stopped < 10
    # With why: refused while it exits, then "not running" once its pid has gone.
    assert (text(page, f"{router} .router-error") or "").startswith("down: ")
    wait(page, "the header red", lambda: attr(page, "#health-summary", "data-level") == "error")
    assert (text(page, "#health-summary") or "").startswith("4/5 routers up")
    go(page, "#health")
    down = '[data-problem-kind="router-down"] [data-router-link="edge-1"]'
    wait(page, "the router-down problem", lambda: texts(page, down))
