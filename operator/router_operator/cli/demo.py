"""`make run`: the example network (examples/) run with `routernet`, and traffic through it.

`routernet up` starts three interior routers in a mesh and two edge routers; a service on one edge
answers requests from a client on the other (request/response with a dynamic reply-to address,
as AMQP Management works); a reading published on an interior reaches subscribers on an interior
and on both edges, one copy each (the examples declare that address multicast). `routernet
status`, while the subscribers are still attached, shows the connections and where the network
knows consumers; 200 durable jobs sent to a queue the network hosts wait there, with no worker
attached, until a worker on the other edge takes them. Then `routernet analyze` once the
collector has written the traffic's telemetry, and the network is left running with its console
(`routernet console --detach`) for the user to open; `routernet down` stops both. A run that
fails or is interrupted stops every router itself (Ctrl-C included), as `--no-console` does at
the end.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from proton import Message, Timeout
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from router_operator.cli import main as local_cli
from router_operator.local import backend as local
from router_operator.local import console as local_console
from router_operator.local.collector import DATASET_DIR

TIMEOUT = 10.0
STATE_DIR = ".routernet-run"
SERVICE_ADDRESS = "requests.echo"
READINGS_ADDRESS = "sensors.kitchen.temperature"
ORDERS_ADDRESS = "orders.eu"
ORDERS = 100  # from each edge
JOBS_ADDRESS = "jobs.thumbnails"
JOBS = 200
CONSOLE_LISTEN = "127.0.0.1:8080"
# A router sends a window's records as it closes (every 10 s in examples/), the collector
# writes what it holds at least every 10 s: the traffic's last window is on disk within 20 s.
TELEMETRY_TIMEOUT = 60.0


def routernet(*args: str) -> None:
    """Runs a routernet command, showing it as typed; SystemExit when it fails."""
    print(f"\n$ routernet {' '.join(args)}", flush=True)
    code = local_cli.main(list(args))
    if code:
        raise SystemExit(code)


def url(router: dict[str, Any]) -> str:
    return f"amqp://{router['clientEndpoints'][0]}"


def echo_service(router: dict[str, Any], count: int, ready: threading.Event) -> None:
    """Answers each request on SERVICE_ADDRESS at its reply-to address, upper-cased."""
    conn = BlockingConnection(url(router), timeout=TIMEOUT)
    try:
        requests = conn.create_receiver(SERVICE_ADDRESS)
        answers = conn.create_sender(None)
        ready.set()
        for _ in range(count):
            request = requests.receive(TIMEOUT)
            requests.accept()
            answers.send(
                Message(
                    address=request.reply_to,
                    body=request.body.upper(),
                    correlation_id=request.correlation_id,
                )
            )
    finally:
        conn.close()


def request_response(
    service: dict[str, Any], client: dict[str, Any], routers: dict[str, Any], count: int = 3
) -> None:
    print(
        f"\nservice on {service['id']} consuming {SERVICE_ADDRESS!r};"
        f" client on {client['id']} ({url(client)})"
    )
    ready = threading.Event()
    thread = threading.Thread(target=echo_service, args=(service, count, ready), daemon=True)
    thread.start()
    if not ready.wait(TIMEOUT):
        raise SystemExit("the service did not attach")
    # The client's edge sends everything up its uplink: wait until that interior knows where
    # the service is, or the first request would come back released (no consumer yet).
    entry = routers[client["uplink"]]
    wait_known(entry, SERVICE_ADDRESS, {service["uplink"]})
    print(f"  path: {client['id']} -> {' -> '.join(hops(service, client))} -> {service['id']}")
    conn = BlockingConnection(url(client), timeout=TIMEOUT)
    try:
        replies = conn.create_receiver(None, dynamic=True)
        reply_to = replies.link.remote_source.address
        print(f"  reply address (dynamic): {reply_to}")
        sender = conn.create_sender(SERVICE_ADDRESS)
        for i in range(count):
            started = time.perf_counter()
            sender.send(Message(body=f"ping {i}", reply_to=reply_to, correlation_id=i))
            reply = replies.receive(TIMEOUT)
            replies.accept()
            ms = (time.perf_counter() - started) * 1000
            print(
                f"  sent 'ping {i}', got {reply.body!r}"
                f" (correlation {reply.correlation_id}, {ms:.1f} ms round trip)"
            )
    finally:
        conn.close()
    thread.join(TIMEOUT)


def hops(service: dict[str, Any], client: dict[str, Any]) -> list[str]:
    """The interiors between two edges: their uplinks (one, if they share it)."""
    return list(dict.fromkeys([client["uplink"], service["uplink"]]))


def multicast(
    publisher: dict[str, Any], subscribers: Sequence[dict[str, Any]], then: Callable[[], None]
) -> None:
    """One reading to every subscriber; ``then`` runs while they are still attached."""
    names = ", ".join(s["id"] for s in subscribers)
    print(f"\nsubscribers to {READINGS_ADDRESS!r} on {names}; publisher on {publisher['id']}")
    conns = [BlockingConnection(url(s), timeout=TIMEOUT) for s in subscribers]
    try:
        receivers = [conn.create_receiver(READINGS_ADDRESS) for conn in conns]
        wait_known(publisher, READINGS_ADDRESS, {s.get("uplink") or s["id"] for s in subscribers})
        conn = BlockingConnection(url(publisher), timeout=TIMEOUT)
        try:
            # Pre-settled: the subscribers, on their own connections, settle only when read.
            sender = conn.create_sender(READINGS_ADDRESS, options=AtMostOnce())
            sender.send(Message(body="21.5 C"))
        finally:
            conn.close()
        for subscriber, receiver in zip(subscribers, receivers, strict=True):
            reading = receiver.receive(TIMEOUT)  # pre-settled: nothing to accept
            print(f"  {subscriber['id']} got {reading.body!r}")
        then()
    finally:
        for conn in conns:
            conn.close()


def consume_orders(
    router: dict[str, Any],
    got: list[int],
    index: int,
    ready: threading.Event,
    done: threading.Event,
) -> None:
    """Accepts ORDERS_ADDRESS messages on `router` until `done`; the connection is this
    thread's own, opened and closed here (as the echo service's)."""
    conn = BlockingConnection(url(router), timeout=TIMEOUT)
    try:
        receiver = conn.create_receiver(ORDERS_ADDRESS)
        ready.set()
        while not done.is_set():
            try:
                receiver.receive(0.1)
            except Timeout:
                continue
            receiver.accept()
            got[index] += 1
    finally:
        conn.close()


def orders(consumers: Sequence[dict[str, Any]], senders: Sequence[dict[str, Any]]) -> None:
    """ORDERS from each sender's router to consumers on others, accepted (`orders` is
    balanced): traffic for the matrix the pipeline prints at the end. The first sender is an
    interior, which knows where the consumers are (an edge runs no link state)."""
    print(
        f"\nconsumers of {ORDERS_ADDRESS!r} on {', '.join(c['id'] for c in consumers)}; "
        f"{ORDERS} orders from each of {', '.join(r['id'] for r in senders)}"
    )
    got = [0] * len(consumers)
    done = threading.Event()
    started = [threading.Event() for _ in consumers]
    threads = [
        threading.Thread(target=consume_orders, args=(c, got, i, started[i], done), daemon=True)
        for i, c in enumerate(consumers)
    ]
    for thread in threads:
        thread.start()
    try:
        if not all(ready.wait(TIMEOUT) for ready in started):
            raise SystemExit("the order consumers did not attach")
        wait_known(senders[0], ORDERS_ADDRESS, {c.get("uplink") or c["id"] for c in consumers})
        for router in senders:
            conn = BlockingConnection(url(router), timeout=TIMEOUT)
            try:
                sender = conn.create_sender(ORDERS_ADDRESS)
                for i in range(ORDERS):
                    sender.send(Message(body=f"order {i} from {router['id']}"))
            finally:
                conn.close()
        wait_for("the orders to be consumed", lambda: sum(got) >= ORDERS * len(senders))
        shares = zip(consumers, got, strict=True)
        print("  " + ", ".join(f"{c['id']} accepted {n}" for c, n in shares))
    finally:
        done.set()
        for thread in threads:
            thread.join(TIMEOUT)


def jobs(sender: dict[str, Any], worker: dict[str, Any], report: Callable[[], Any]) -> None:
    """Durable JOBS into a queue the network hosts, with no worker yet: they wait on its host
    (the status shows where, and how many), then a worker on another router takes them."""
    print(f"\n{JOBS} durable jobs to the queue {JOBS_ADDRESS!r} from {sender['id']}, no worker yet")
    conn = BlockingConnection(url(sender), timeout=TIMEOUT)
    try:
        out = conn.create_sender(JOBS_ADDRESS)
        for i in range(JOBS):
            out.send(Message(body=f"job {i}", durable=True))  # returns once accepted (stored)
    finally:
        conn.close()
    node = next(n for n in report()["nodes"] if n["name"] == JOBS_ADDRESS)
    print(f"  stored on {node['router']}: depth {node['depth']}")
    conn = BlockingConnection(url(worker), timeout=TIMEOUT)
    try:
        receiver = conn.create_receiver(JOBS_ADDRESS, credit=JOBS)
        bodies = []
        for _ in range(JOBS):
            bodies.append(receiver.receive(TIMEOUT).body)
            receiver.accept()
    finally:
        conn.close()
    if bodies != [f"job {i}" for i in range(JOBS)]:
        raise SystemExit(f"the worker got the jobs out of order: {bodies[:5]}...")
    print(f"  a worker on {worker['id']} took all {JOBS}, in order")


def wait_for(what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    """Polls ``check`` until it returns something true, and returns that."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)
    return result


def wait_known(router: dict[str, Any], address: str, hosts: set[str]) -> None:
    """Until ``router`` knows consumers of ``address`` on every router of ``hosts`` (itself
    included: consumers of its own, which an edge's proxy is), so that a message goes to all."""

    def known() -> bool:
        rows = local.management_query(
            router["clientEndpoints"][0],
            {"router.address": ["key", "subscriberCount", "remoteHostRouters"]},
        )["router.address"]
        row = next((r for r in rows if r["key"] == "M0" + address), None)
        if row is None:
            return False
        have = set(row["remoteHostRouters"]) | ({router["id"]} if row["subscriberCount"] else set())
        return hosts <= have

    wait_for(f"{router['id']} to know consumers of {address!r} on {sorted(hosts)}", known)


def converged(state_dir: Path) -> dict[str, Any] | None:
    """The status once every interior routes to every other and every edge has its uplink."""
    report = local.status(state_dir)
    assert report is not None
    interiors = {r["id"] for r in report["routers"] if r["mode"] == "interior"}
    for r in report["routers"]:
        if r["error"]:
            return None
        if r["mode"] == "edge" and not r.get("uplink"):
            return None
        routes = {n["id"] for n in r["knownRouters"]}
        if r["mode"] == "interior" and routes != interiors - {r["id"]}:
            return None
    return report


def traffic(state_dir: Path, show_status: Callable[[], None]) -> None:
    started = time.monotonic()
    report = wait_for("the routers to connect", lambda: converged(state_dir))
    routers = {r["id"]: r for r in report["routers"]}
    interiors = sorted(name for name, r in routers.items() if r["mode"] == "interior")
    edges = sorted(name for name, r in routers.items() if r["mode"] == "edge")
    print(
        f"\nnetwork connected {(time.monotonic() - started) * 1000:.0f} ms later:"
        f" {len(interiors)} interiors in a mesh, "
        + ", ".join(f"{e} on {routers[e]['uplink']}" for e in edges)
    )
    if len(interiors) < 2 or len(edges) < 2:
        raise SystemExit("the demo needs at least two interior and two edge routers")
    request_response(routers[edges[0]], routers[edges[-1]], routers)
    subscribers = [routers[edges[0]], routers[interiors[0]], routers[edges[-1]]]
    multicast(routers[interiors[-1]], subscribers, then=show_status)
    orders([routers[interiors[0]], routers[edges[0]]], [routers[interiors[-1]], routers[edges[-1]]])
    jobs(routers[edges[0]], routers[edges[-1]], lambda: local.status(state_dir))


def telemetry_written(state_dir: Path, since: float, routers: Sequence[str]) -> bool:
    """Whether the collector has written a window of every router that ended after ``since``:
    then the windows before it, which hold the demo's traffic, are in the dataset too."""
    import pyarrow.dataset as ds  # the collector's format; `routernet analyze` reads it too

    path = state_dir / DATASET_DIR / "router"
    if not path.is_dir():
        return False
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table(
        columns=["router", "window_end"]
    )
    latest: dict[str, float] = {}
    for row in table.to_pylist():
        end = row["window_end"].timestamp()
        latest[row["router"]] = max(end, latest.get(row["router"], end))
    return all(latest.get(r, 0.0) > since for r in routers)


def console(state: list[str]) -> str:
    """The console in the background, on port 8080 unless something else has it."""
    for listen in (CONSOLE_LISTEN, "127.0.0.1:0"):
        started = local_cli.main(["console", *state, "--listen", listen, "--detach"])
        if started == 0:
            url = local_console.running_url(Path(state[1]).resolve())
            if url is not None:
                return url
    raise SystemExit("the console did not start (see its log under the state directory)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m router_operator.cli.demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument("files", nargs="*", default=["examples/"], metavar="FILE")
    parser.add_argument("--state-dir", default=STATE_DIR, metavar="DIR")
    parser.add_argument(
        "--no-console",
        dest="console",
        action="store_false",
        help="stop the network at the end instead of leaving it running with its console",
    )
    args = parser.parse_args(argv)
    state = ["--state-dir", args.state_dir]
    # SIGTERM as Ctrl-C: either way the routers are stopped below.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if Path(args.state_dir).exists():  # a fresh start: addresses from 127.0.0.2 again
        local.down(Path(args.state_dir))
        shutil.rmtree(args.state_dir)
    leave_running = False
    try:
        routernet("up", *state, *args.files)
        traffic(Path(args.state_dir), lambda: routernet("status", *state))
        if args.console:
            # The analysis first, while the routers run: the console's questions to the routers
            # would be in it otherwise, as traffic to reply addresses.
            ended = time.time()
            network = local.State.load(Path(args.state_dir).resolve())
            routers = sorted(network.pods) if network else []
            print("\nwaiting for the collector to write the last telemetry window of the traffic")
            wait_for(
                "the collector to write the traffic's telemetry",
                lambda: telemetry_written(Path(args.state_dir), ended, routers),
                TELEMETRY_TIMEOUT,
            )
            routernet("analyze", *state)
            print(f"\n$ routernet console {' '.join(state)} --detach", flush=True)
            url = console(state)
            leave_running = True
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        if not leave_running:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the stop
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            routernet("down", *state)
    if leave_running:
        print(
            f"\nThe network and its console keep running: open {url} to see the five routers,"
            f" their links and the traffic.\n`routernet down {' '.join(state)}` stops them"
            " (`make run` again starts afresh)."
        )
        return 0
    routernet("analyze", *state)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
