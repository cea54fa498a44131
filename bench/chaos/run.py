"""The chaos soak: the example network (examples/: three interiors in a mesh hosting durable
queues, two edges; plus a topic, TOPIC) run by ``routernet up``, traffic of every kind through
it (anycast, a durable queue, multicast, a topic's durable subscriptions, request/response
from one edge to the other, a queue of RabbitMQ's through a link route where RabbitMQ is
installed), and a seeded
schedule of faults (schedule.py) carried out while it flows: kill -9 of a router, SIGTERM (a
drain), SIGSTOP for 5-15 s, a connection between two routers cut (cut.py), kill -9 of the
collector, an Address changed live; a router or
collector killed or stopped by SIGTERM is started again by ``routernet up``, as a StatefulSet
would. Then the promises are checked (ledger.py and below).

Invariants, each a failure of the run when broken:
- every message a sender saw accepted reached a consumer (anycast and queue; multicast: at
  least one of its subscribers; the topic: every durable subscription; request/response: its
  reply reached the requester), at the end once the senders have stopped and their last
  messages had ``settle`` seconds to arrive;
- every router not being faulted answers management within 2 s, checked every few seconds;
- no sender goes without credit for STARVED_S while it has messages to send, seen once no
  fault is under way and the last ended GRACE_S ago (its consumers exist throughout);
- no router dies by itself: each runs as the pid the soak last started (one that crashed and
  was started again by a later ``routernet up`` is caught too);
- no traceback in any router's log, nor the stack faulthandler writes on a crash;
- memory and open files of every router: reported, first sample against last.

Duplicates are counted, not failures: a router that dies holding unsettled deliveries leaves
their senders to send them again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.chaos import cut
from bench.chaos.ledger import Ledger
from bench.chaos.schedule import KINDS, Event, plan
from bench.chaos.traffic import FlowSpec, Traffic
from bench.clients import BenchError
from bench.nodes import rabbitmq, rabbitmq_installed
from bench.one_router import REPO_DIR

EXAMPLES = REPO_DIR / "examples"
FLOWS = [
    FlowSpec("anycast", "orders.chaos", "edge-0", ("core-2", "edge-1")),
    FlowSpec("queue", "jobs.chaos", "edge-1", ("core-1",), durable=True),
    FlowSpec("multicast", "sensors.chaos.temperature", "core-0", ("edge-0", "core-2")),
    FlowSpec(
        "topic", "events.chaos", "edge-0", ("edge-1", "core-0"), durable=True, subscription=True
    ),
    FlowSpec("request", "requests.chaos", "edge-0", ("edge-1",), replies=True),
]
TOPIC = """\
# The chaos soak's own, beside the example's resources: a topic the network keeps.
apiVersion: routernet.io/v1alpha1
kind: Address
metadata:
  name: chaos-events
spec:
  prefix: events
  node:
    type: topic
    router: core
"""
BROKER_FLOW = FlowSpec("broker", "rabbit.chaos", "edge-0", ("core-1",), durable=True)
LINK_ROUTE = """\
---
# Links to rabbit.* go to a RabbitMQ the interior routers dial; it holds the messages.
apiVersion: routernet.io/v1alpha1
kind: LinkRoute
metadata:
  name: chaos-rabbit
spec:
  prefix: rabbit
  direction: both
  connection:
    host: 127.0.0.1
    port: {port}
"""
RATE = 20.0
"""Messages per second per flow."""
PROBE_EVERY_S = 3.0
MGMT_TIMEOUT_S = 2.0
GRACE_S = 10.0
STARVED_S = 30.0
"""How long a sender may go without credit, with messages to send and no fault under way."""
"""After a router is started again, how long before it must answer management."""
TERM_WAIT_S = 25.0


def _routernet(state_dir: Path, *args: str, timeout: float = 120.0) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_DIR), str(REPO_DIR / "operator")])}
    done = subprocess.run(
        [sys.executable, "-m", "router_operator.cli.main", *args, "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO_DIR,
    )
    if done.returncode != 0:
        raise BenchError(f"routernet {args[0]}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


class Network:
    """The example network under ``state_dir``, from a copy of examples/ beside it (which the
    soak changes): its pods, their pids, their management."""

    def __init__(self, state_dir: Path, broker_port: int | None) -> None:
        from router_operator.local import backend
        from router_operator.local import collector as local_collector

        self.backend = backend
        self.local_collector = local_collector
        self.state_dir = state_dir
        self.resources = state_dir.parent / "examples"
        if not self.resources.exists():  # the top level only, as `routernet up` reads it
            self.resources.mkdir(parents=True)
            for path in EXAMPLES.glob("*.yaml"):
                shutil.copy(path, self.resources / path.name)
            link_route = LINK_ROUTE.format(port=broker_port) if broker_port else ""
            (self.resources / "chaos.yaml").write_text(TOPIC + link_route)

    def up(self) -> None:
        _routernet(self.state_dir, "up", str(self.resources))

    def collector_pid(self) -> int | None:
        return self.local_collector.running_pid(self.state_dir, "default")

    def change_address(self) -> str:
        """``orders``' distribution the other way (balanced <-> closest), applied live."""
        path = self.resources / "addresses.yaml"
        text = path.read_text()
        if "distribution: balanced" in text:
            old, new = "balanced", "closest"
        else:
            old, new = "closest", "balanced"
        start = text.index("name: orders")
        at = text.index(f"distribution: {old}", start)
        path.write_text(text[:at] + f"distribution: {new}" + text[at + len(old) + 14 :])
        self.up()
        return new

    def down(self) -> None:
        _routernet(self.state_dir, "down")

    def pods(self) -> dict[str, dict[str, Any]]:
        state = self.backend.State.load(self.state_dir)
        if state is None:
            raise BenchError(f"no network in {self.state_dir}")
        return state.pods

    def url(self, pod: str) -> str:
        return f"amqp://{self.pods()[pod]['clientEndpoints'][0]}"

    def pid(self, pod: str) -> int | None:
        return self.backend.running_pid(self.state_dir, pod)

    def log(self, pod: str) -> Path:
        return self.backend.log_path(self.state_dir, pod)

    def router_endpoints(self) -> set[tuple[str, int]]:
        """Where the routers listen for each other (inter-router and edge)."""
        found = set()
        for record in self.pods().values():
            for endpoint in record["interRouterEndpoints"] + record["edgeEndpoints"]:
                found.add(cut.endpoint(endpoint))
        return found


def answers_management(url: str) -> bool:
    """A QUERY of the router entity answered within MGMT_TIMEOUT_S."""
    from proton import Message
    from proton.utils import BlockingConnection

    try:
        conn = BlockingConnection(url, timeout=MGMT_TIMEOUT_S)
    except Exception:
        return False
    try:
        replies = conn.create_receiver(None, dynamic=True)
        requests = conn.create_sender("$management")
        requests.send(
            Message(
                reply_to=replies.remote_source.address,
                properties={
                    "operation": "QUERY",
                    "entityType": "router",
                    "type": "org.amqp.management",
                    "name": "self",
                },
                body={"attributeNames": ["id"]},
            )
        )
        answer = replies.receive(timeout=MGMT_TIMEOUT_S)
        return answer.properties.get("statusCode") == 200
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def _rss_and_fds(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None


class Watch(threading.Thread):
    """Asks every router that should be up for management, and samples its memory and files."""

    def __init__(self, net: Network, pods: list[str]) -> None:
        super().__init__(name="chaos-watch", daemon=True)
        self.net = net
        self.pods = pods
        self.faulted: dict[str, float] = {}
        """Pods under a fault, or started again at the time given (not asked until GRACE_S)."""
        self.lock = threading.Lock()
        self.unanswered: list[str] = []
        self.expected: dict[str, int | None] = {p: net.pid(p) for p in pods}
        """Each router's pid as the soak last left it running."""
        self.crashed: list[str] = []
        self.samples: dict[str, list[tuple[int, int]]] = {p: [] for p in pods}
        self.stopping = threading.Event()
        self.start_time = time.monotonic()
        self.traffic: Traffic | None = None
        """Its senders are checked for starving once no fault has been under way for a while."""
        self.starved: dict[str, str] = {}
        """The first time each sender was seen starving."""

    def fault(self, pod: str) -> None:
        with self.lock:
            self.faulted[pod] = float("inf")

    def back(self, pod: str) -> None:
        """The fault is over: the pod runs again as the pid it has now."""
        pid = self.net.pid(pod)
        with self.lock:
            self.expected[pod] = pid
            self.faulted[pod] = time.monotonic()

    def died(self, pod: str) -> None:
        """A router that is not the one the soak left running (none, or another pid: restarted
        by a later ``routernet up``) died by itself: a crash, whatever happened next."""
        with self.lock:
            if self.faulted.get(pod) == float("inf"):
                return  # the soak's own doing, under way
            expected = self.expected[pod]
            pid = self.net.pid(pod)
            if pid == expected:
                return
            self.expected[pod] = pid
        after = f"running again as pid {pid}" if pid is not None else "not running"
        self.crashed.append(
            f"{time.monotonic() - self.start_time:.0f}s {pod}: pid {expected} died by itself"
            f" ({after}; its log says how)"
        )

    def calm_since(self) -> float:
        """Since when no router has been under a fault (inf while one is)."""
        with self.lock:
            return max(self.faulted.values(), default=self.start_time)

    def run(self) -> None:
        while not self.stopping.wait(PROBE_EVERY_S):
            now = time.monotonic()
            if self.traffic is not None and now - self.calm_since() > GRACE_S:
                for sender, line in self.traffic.starved(now, STARVED_S):
                    self.starved.setdefault(sender, f"{now - self.start_time:.0f}s: {line}")
            for pod in self.pods:
                self.died(pod)
                with self.lock:
                    since = self.faulted.get(pod)
                if since is not None and time.monotonic() - since < GRACE_S:
                    continue
                pid = self.net.pid(pod)
                if pid is None:
                    self.unanswered.append(
                        f"{time.monotonic() - self.start_time:.0f}s {pod}: not running"
                    )
                    continue
                if not answers_management(self.net.url(pod)):
                    with self.lock:
                        since = self.faulted.get(pod)
                    if since is None or time.monotonic() - since >= GRACE_S:
                        self.unanswered.append(
                            f"{time.monotonic() - self.start_time:.0f}s {pod}: no management answer"
                            f" within {MGMT_TIMEOUT_S:.0f} s"
                        )
                sample = _rss_and_fds(pid)
                if sample is not None:
                    self.samples[pod].append(sample)


REDIAL_WAIT_S = 60.0


def _cut(event: Event, net: Network, watch: Watch, reconnects: list[float]) -> None:
    """One of the router's connections to another router cut; back when its dialler has
    connected again."""
    pid = net.pid(event.router)
    if pid is None:
        raise BenchError(f"{event.describe()}: {event.router} is not running")
    chosen = cut.pick(cut.sockets(), pid, net.router_endpoints(), int(event.at * 10))
    if chosen is None:
        raise BenchError(f"{event.describe()}: {event.router} has no connection to a router")
    watch.fault(event.router)
    started = time.monotonic()
    if not cut.cut(chosen.conn):
        raise BenchError(f"{event.describe()}: ss -K did not cut {chosen.conn.describe()}")
    while not chosen.redialled(cut.sockets()):
        if time.monotonic() - started > REDIAL_WAIT_S:
            raise BenchError(
                f"{event.describe()}: {chosen.conn.describe()} not dialled again"
                f" within {REDIAL_WAIT_S:.0f} s"
            )
        time.sleep(0.1)
    reconnects.append(time.monotonic() - started)
    watch.back(event.router)


def _crashed_in(log: str) -> bool:
    """A Python traceback, or the stack faulthandler writes when the process crashes in C."""
    return "Traceback" in log or "Fatal Python error" in log


def _carry_out(
    event: Event, net: Network, watch: Watch, recoveries: list[float], reconnects: list[float]
) -> None:
    if event.kind == "cut":
        _cut(event, net, watch, reconnects)
        return
    if event.kind == "address":
        net.change_address()
        return
    if event.kind == "collector":
        pid = net.collector_pid()
        if pid is None:
            raise BenchError(f"{event.describe()}: the collector is not running")
        os.killpg(pid, signal.SIGKILL)
        time.sleep(event.seconds)
        net.up()
        if net.collector_pid() is None:
            raise BenchError(f"{event.describe()}: routernet up did not start the collector")
        return
    pid = net.pid(event.router)
    if pid is None:
        raise BenchError(f"{event.describe()}: {event.router} is not running")
    watch.fault(event.router)
    if event.kind == "stop":
        os.killpg(pid, signal.SIGSTOP)
        time.sleep(event.seconds)
        os.killpg(pid, signal.SIGCONT)
        watch.back(event.router)
        return
    if event.kind == "kill":
        os.killpg(pid, signal.SIGKILL)
    else:
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_WAIT_S
    while net.pid(event.router) is not None:
        if time.monotonic() > deadline:
            raise BenchError(f"{event.describe()}: {event.router} did not exit")
        time.sleep(0.1)
    time.sleep(event.seconds)
    started = time.monotonic()
    net.up()
    while not answers_management(net.url(event.router)):
        if time.monotonic() - started > 60:
            raise BenchError(f"{event.describe()}: {event.router} did not answer after restart")
        time.sleep(0.2)
    recoveries.append(time.monotonic() - started)
    watch.back(event.router)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


SCENARIOS = ("soak",)
DEFAULT_SECONDS = 600.0
QUICK_SECONDS = 60.0
DEFAULT_SEED = 28


def run(chosen: list[str], seconds: float, seed: int, log_dir: Path) -> dict[str, Any]:
    """The suite: the soak, its error (a broken invariant, or a fault that could not be carried
    out) in the scenario as the other suites report theirs."""
    scenarios: dict[str, Any] = {}
    if "soak" in chosen:
        try:
            outcome = soak(seconds, seed, log_dir)
        except BenchError as e:
            outcome = {"seed": seed, "error": str(e)}
        else:
            if outcome["violations"]:
                outcome["error"] = "; ".join(outcome["violations"])[:2000]
        scenarios["soak"] = outcome
    return {"benchmark": "chaos", "scenarios": scenarios}


def soak(duration: float, seed: int, log_dir: Path, settle: float = 30.0) -> dict[str, Any]:
    """One soak of ``duration`` seconds of faults; ``settle`` more for the last messages. The
    link-routed flow where RabbitMQ is installed; where not, the results say it was left out."""
    can_cut = cut.can_cut()
    left_out = (
        {}
        if can_cut
        else {"cut": "ss -K cannot abort a socket here (root, CONFIG_INET_DIAG_DESTROY)"}
    )
    if not rabbitmq_installed():
        outcome = _soak(duration, seed, log_dir, settle, FLOWS, None, can_cut)
        left_out[BROKER_FLOW.kind] = "RabbitMQ is not installed"
    else:
        with rabbitmq(log_dir) as broker:
            flows = [*FLOWS, BROKER_FLOW]
            outcome = _soak(duration, seed, log_dir, settle, flows, broker.port, can_cut)
    if left_out:
        outcome["leftOut"] = left_out
    return outcome


def _soak(
    duration: float,
    seed: int,
    log_dir: Path,
    settle: float,
    flows: list[FlowSpec],
    broker_port: int | None,
    can_cut: bool,
) -> dict[str, Any]:
    state_dir = log_dir / "state"
    if state_dir.exists():  # a run before this one's: its network stopped, its files gone
        with contextlib.suppress(BenchError):
            _routernet(state_dir, "down")
        shutil.rmtree(state_dir)
    shutil.rmtree(log_dir / "examples", ignore_errors=True)  # as changed by that run
    net = Network(state_dir, broker_port)
    net.up()
    try:
        pods = sorted(net.pods())
        urls = {pod: net.url(pod) for pod in pods}
        kinds = KINDS if can_cut else tuple(k for k in KINDS if k != "cut")
        events = plan(seed, duration, pods, kinds=kinds)
        subscribers = {
            f.kind: tuple(f.consumer(r) for r in f.consumers) for f in flows if f.subscription
        }
        ledger = Ledger(tuple(f.kind for f in flows), subscribers)
        traffic = Traffic(flows, urls, ledger, RATE)
        watch = Watch(net, pods)
        watch.traffic = traffic
        recoveries: list[float] = []
        reconnects: list[float] = []
        done: list[str] = []
        traffic.start()
        watch.start()
        started = time.monotonic()
        try:
            for event in events:
                time.sleep(max(0.0, started + event.at - time.monotonic()))
                _carry_out(event, net, watch, recoveries, reconnects)
                done.append(event.describe())
            time.sleep(max(0.0, started + duration - time.monotonic()))
            traffic.stop_sending()
            deadline = time.monotonic() + settle
            while traffic.outstanding() and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(2.0)  # the last accepted ones reach their consumers
            stuck = traffic.stuck()
        finally:
            watch.stopping.set()
            watch.join(10)
            traffic.stop()
        for pod in pods:
            watch.died(pod)
        tracebacks = [pod for pod in pods if _crashed_in(net.log(pod).read_text(errors="replace"))]
    finally:
        net.down()
    counts = ledger.summary()
    by_kind = {kind: sum(1 for e in events if e.kind == kind) for kind in KINDS}
    trend = {
        pod: {
            "rssFirstMiB": round(s[0][0] / 2**20, 1),
            "rssLastMiB": round(s[-1][0] / 2**20, 1),
            "rssMaxMiB": round(max(x[0] for x in s) / 2**20, 1),
            "fdsFirst": s[0][1],
            "fdsLast": s[-1][1],
        }
        for pod, s in watch.samples.items()
        if s
    }
    violations = [
        f"{kind}: {n['lost']} accepted and never delivered ("
        + ", ".join(ledger.lost(kind)[:5])
        + ")"
        for kind, n in counts.items()
        if n["lost"]
    ]
    violations += watch.crashed
    violations += watch.unanswered
    violations += watch.starved.values()
    violations += [f"{pod}: a traceback or crash in its log" for pod in tracebacks]
    if stuck:
        violations.append(
            f"messages still unaccepted {settle:.0f} s after the senders stopped: "
            + "; ".join(stuck)
        )
    return {
        "seed": seed,
        "seconds": duration,
        "events": by_kind,
        "schedule": done,
        "flows": counts,
        "recoverySeconds": {
            "p50": _percentile(recoveries, 0.5),
            "p99": _percentile(recoveries, 0.99),
            "count": len(recoveries),
        },
        "reconnectSeconds": {
            "p50": _percentile(reconnects, 0.5),
            "p99": _percentile(reconnects, 0.99),
            "count": len(reconnects),
        },
        "routers": trend,
        "outstandingAtEnd": traffic.outstanding(),
        "violations": violations,
        "ok": not violations,
    }


def markdown(suite: dict[str, Any]) -> str:
    results = suite["scenarios"].get("soak")
    if results is None:
        return ""
    if "flows" not in results:
        return f"Chaos soak (seed {results['seed']}): {results['error']}\n"
    flows = results["flows"]
    recovery = results["recoverySeconds"]
    reconnect = results["reconnectSeconds"]
    lines = [
        f"Chaos soak: {results['seconds']:.0f} s, seed {results['seed']}; events:"
        + ", ".join(f" {n} {kind}" for kind, n in results["events"].items())
        + "; recovery (restart to management answering) p50"
        f" {_secs(recovery['p50'])}, p99 {_secs(recovery['p99'])}"
        + "; a cut connection dialled again p50"
        f" {_secs(reconnect['p50'])}, p99 {_secs(reconnect['p99'])}",
        "",
        "| traffic | sent | resent | accepted | delivered | duplicates | lost |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, n in flows.items():
        lines.append(
            f"| {kind} | {n['sent']:,} | {n['resent']:,} | {n['accepted']:,} |"
            f" {n['delivered']:,} | {n['duplicates']:,} | {n['lost']:,} |"
        )
    lines += [
        "",
        "| router | RSS first → last (max), MiB | open files first → last |",
        "|---|---|---|",
    ]
    for pod, t in results["routers"].items():
        lines.append(
            f"| {pod} | {t['rssFirstMiB']} → {t['rssLastMiB']} ({t['rssMaxMiB']}) |"
            f" {t['fdsFirst']} → {t['fdsLast']} |"
        )
    for kind, why in results.get("leftOut", {}).items():
        if kind != "cut":
            lines.append(f"| {kind} | left out: {why} | | | | | |")
    if "cut" in results.get("leftOut", {}):
        lines += ["", f"Connections not cut: {results['leftOut']['cut']}."]
    lines += [
        "",
        "Invariants: " + ("all held" if results["ok"] else "; ".join(results["violations"])),
    ]
    return "\n".join(lines) + "\n"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"
