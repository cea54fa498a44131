"""The hosted-queue benchmark: a queue the routers store, against RabbitMQ's in the same run.

* `queue-durable-network`, `queue-nondurable-network`: interior routers A and B (B dials A),
  the queue `q.bench` hosted on B (`node: {type: queue, hosts: [B]}`, B's store in a temporary
  directory on local disk); a receiver attached on A, then a sender on A sends the messages,
  durable or not, unsettled, as fast as credit allows. Every message goes A → B (stored) →
  A → receiver. msgs/s is end to end: messages over the time from the sender's first credit to
  the receiver's last message.
* `queue-durable-host`, `queue-nondurable-host`: the same with one router, B, sender and
  receiver both on it: the reference without the network.
* `rabbitmq-classic-durable`, `rabbitmq-quorum-durable`: the same sender and receiver, durable
  messages, on a RabbitMQ node on this machine (tests/broker.py, Debian's rabbitmq-server over
  its rabbitmq_amqp1_0 plugin), to a durable classic queue and to a quorum queue, both declared
  through the management HTTP API; skipped, and said so, when RabbitMQ is not installed.
* `queue-recovery`: one router hosting the queue; a sender fills it with durable messages,
  pre-settled (so fast; done when the router's management counts them all: it has written
  each to its log, which a kill -9 leaves with the OS), B is killed with SIGKILL
  and started again on the same store; timed from the restart to the router's `store.recovered`
  log line (and the `seconds=` it states, its own time to read the store back) and to the
  first message a receiver gets; the router's RSS before the kill, and after recovery against
  an empty router's, per message.

The store's fsync policy is the router's only one (router/store/store.py, router/core/engine.py):
group commit, one fdatasync per turn of the router's event loop for everything appended in
that turn, a durable message accepted only once the sync after its append has returned; a
non-durable message is written to the same log but accepted at once.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.clients import (
    HOST,
    PIPES,
    BenchError,
    Clients,
    Transfer,
    free_port,
    receiver_args,
    report,
    running,
    sender_args,
    transfer,
    wait_for_port,
    wait_ready,
)
from bench.one_router import (
    BODY_BYTES,
    IDLE_SETTLE_S,
    MIB,
    REPO_DIR,
    START_TIMEOUT_S,
    cell,
    commit_label,
    machine_info,
    proc_cpu_seconds,
    proc_status_mib,
    process_router_modules,
)
from bench.routers import Management, Spec, management, network, wait_until

QUEUE = "q.bench"
THROUGHPUT = (
    "queue-durable-network",
    "queue-nondurable-network",
    "queue-durable-host",
    "queue-nondurable-host",
)
RABBITMQ = ("rabbitmq-classic-durable", "rabbitmq-quorum-durable")
SCENARIOS = (*THROUGHPUT, *RABBITMQ, "queue-recovery")
DEFAULT_COUNT = 50_000  # per throughput run: a few seconds each
QUICK_COUNT = 10_000
RECOVERY_COUNT = 1_000_000
QUICK_RECOVERY_COUNT = 100_000
FSYNC_POLICY = (
    "group commit: one fdatasync per turn of the router's event loop for everything appended "
    "in it; a durable message is accepted only after the sync that follows its append; a "
    "non-durable one is written to the same log but accepted at once"
)
RABBITMQ_FSYNC = (
    "a durable message to a classic queue is confirmed (accepted) once its "
    "message store has fsynced it, to a quorum queue once a majority (here the one node) has "
    "fsynced it to its Raft log; both sync in batches"
)
# B hosts q.bench: on the network both routers know where it lives; B keeps the store.
HOST_ID = "B"
TWO = (Spec("A"), Spec(HOST_ID, (("A", 1),)))
ONE = (Spec(HOST_ID),)
RABBITMQ_START_TIMEOUT_S = 90.0
RECOVERY_TIMEOUT_S = 300.0


def node_config(store: Path) -> Any:
    """Each router's `addresses` (q.bench hosted on B) and, on B, its `store`."""

    def config(rid: str) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "addresses": [{"prefix": QUEUE, "node": {"type": "queue", "hosts": [HOST_ID]}}]
        }
        if rid == HOST_ID:
            settings["store"] = {"path": str(store)}
        return settings

    return config


def _rate(t: Transfer, count: int) -> dict[str, Any]:
    """End to end: from the sender's first credit to the receiver's last message."""
    if t.sender["accepted"] != count or t.receiver["received"] != count:
        raise BenchError(
            f"{count:,} sent: {t.sender['accepted']:,} accepted, {t.sender['not_accepted']:,} "
            f"not, {t.receiver['received']:,} received"
        )
    elapsed = (t.receiver["last_ns"] - t.sender["start_ns"]) / 1e9
    return {
        "messages": count,
        "elapsed_s": round(elapsed, 3),
        "msgs_per_s": round(count / elapsed),
        "sender_cpu_s": t.sender["cpu_s"],
        "receiver_cpu_s": t.receiver["cpu_s"],
    }


def run_router_throughput(name: str, clients: Clients, count: int, log_dir: Path) -> dict[str, Any]:
    durable = "-durable-" in name
    specs = TWO if name.endswith("-network") else ONE
    with (
        tempfile.TemporaryDirectory(prefix="bench-store-") as store,
        network(specs, log_dir, name, config=node_config(Path(store))) as (routers, _),
    ):
        time.sleep(IDLE_SETTLE_S)
        modules = {process_router_modules(r.proc.pid) for r in routers.values()}
        client_port = routers["A" if "A" in routers else HOST_ID].port
        cpu_start = {rid: proc_cpu_seconds(r.proc.pid) for rid, r in routers.items()}
        t = transfer(
            clients,
            port=client_port,
            count=count,
            rate=0,
            presettled=False,
            durable=durable,
            address=QUEUE,
        )
        cpu = {rid: proc_cpu_seconds(r.proc.pid) - cpu_start[rid] for rid, r in routers.items()}
        for r in routers.values():
            if r.proc.poll() is not None:
                raise BenchError(f"router {r.id} exited with code {r.proc.returncode}")
        peak = {rid: proc_status_mib(r.proc.pid, "VmHWM") for rid, r in routers.items()}
    rate = _rate(t, count)
    return {
        "kind": "throughput",
        "server": "router",
        "path": "sender and receiver on A, queue hosted on B"
        if len(specs) == 2
        else "sender and receiver on B, the host",
        "durable": durable,
        "router_modules": " and ".join(sorted(modules)),
        "throughput": rate,
        "servers": {
            rid: {
                "cpu_s": round(cpu[rid], 2),
                "cpu_us_per_msg": round(cpu[rid] / count * 1e6, 2),
                "cpu_percent": round(100 * cpu[rid] / rate["elapsed_s"], 1),
                "peak_rss_mib": round(peak[rid], 1),
            }
            for rid in sorted(routers)
        },
    }


# ----- RabbitMQ --------------------------------------------------------------------------------


def _rabbitmq_version() -> str | None:
    found = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"], capture_output=True, text=True
    )
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else None


def _broker_class() -> Any:
    """tests/broker.py's Broker (the project's RabbitMQ harness), or None without RabbitMQ."""
    tests = str(REPO_DIR / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import broker

    return broker.Broker if broker.RABBITMQ_SERVER.exists() else None


def _declare(broker: Any, name: str, queue_type: str) -> None:
    """A durable queue of `queue_type` through the management API, retried while it starts."""
    url = f"{broker.management_url}/queues/%2F/{name}"
    body = json.dumps({"durable": True, "arguments": {"x-queue-type": queue_type}}).encode()
    auth = base64.b64encode(b"guest:guest").decode()
    request = urllib.request.Request(
        url,
        data=body,
        method="PUT",
        headers={"content-type": "application/json", "authorization": f"Basic {auth}"},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                if answer.status in (201, 204):
                    return
                raise BenchError(f"declaring {name}: HTTP {answer.status}")
        except (urllib.error.URLError, ConnectionError) as e:
            if isinstance(e, urllib.error.HTTPError) and e.code < 500:
                raise BenchError(f"declaring {name}: {e} {e.read()[:200]!r}") from e
            if time.monotonic() > deadline:
                raise BenchError(f"declaring {name}: {e}") from e
            time.sleep(0.2)


def rabbitmq_installed() -> bool:
    return _broker_class() is not None


@contextmanager
def rabbitmq(log_dir: Path) -> Iterator[Any]:
    """A private RabbitMQ node (tests/broker.py) with its management API; its log is copied
    to `<log_dir>/rabbitmq.log` when it stops."""
    broker_class = _broker_class()
    if broker_class is None:
        raise BenchError("RabbitMQ is not installed")
    broker = broker_class(management=True)
    try:
        broker.start(timeout=RABBITMQ_START_TIMEOUT_S)
    except Exception as e:
        raise BenchError(f"RabbitMQ did not start: {str(e)[:2000]}") from e
    try:
        yield broker
    finally:
        (log_dir / "rabbitmq.log").write_text(broker.log())
        broker.stop()


def run_rabbitmq(
    names: list[str], clients: Clients, count: int, log_dir: Path
) -> dict[str, dict[str, Any]]:
    """The RabbitMQ scenarios on one node: each its own queue, declared first."""
    outcomes: dict[str, dict[str, Any]] = {}
    with rabbitmq(log_dir) as broker:
        assert broker.proc is not None
        for name in names:
            queue_type = name.split("-")[1]  # classic | quorum
            queue = f"bench-{queue_type}"
            try:
                _declare(broker, queue, queue_type)
                cpu_start = proc_cpu_seconds(broker.proc.pid)
                t = transfer(
                    clients,
                    port=broker.port,
                    count=count,
                    rate=0,
                    presettled=False,
                    durable=True,
                    address=f"/amq/queue/{queue}",
                )
                cpu = proc_cpu_seconds(broker.proc.pid) - cpu_start
                rate = _rate(t, count)
                outcomes[name] = {
                    "kind": "throughput",
                    "server": "rabbitmq",
                    "path": f"sender and receiver on RabbitMQ, {queue_type} queue",
                    "durable": True,
                    "address": f"/amq/queue/{queue}",
                    "throughput": rate,
                    "servers": {
                        "rabbitmq": {
                            "cpu_s": round(cpu, 2),
                            "cpu_us_per_msg": round(cpu / count * 1e6, 2),
                            "cpu_percent": round(100 * cpu / rate["elapsed_s"], 1),
                            "peak_rss_mib": round(proc_status_mib(broker.proc.pid, "VmHWM"), 1),
                        }
                    },
                }
            except BenchError as e:
                outcomes[name] = {"kind": "throughput", "server": "rabbitmq", "error": str(e)}
    return outcomes


# ----- recovery after kill -9 ------------------------------------------------------------------


def _router_command(port: int, config: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "router",
        "--id",
        HOST_ID,
        "--mode",
        "interior",
        "--listen",
        f"{HOST}:{port}",
        "--log-format",
        "json",
        "--config",
        str(config),
    ]


def _recovered(log: Path, offset: int) -> dict[str, Any] | None:
    """The `store.recovered` line the router wrote after `offset` of its log, if it has."""
    with log.open("rb") as f:
        f.seek(offset)
        for line in f:
            if b'"store.recovered"' in line:
                event: dict[str, Any] = json.loads(line)
                return event
    return None


def _depth(mgmt: Management) -> int:
    rows = mgmt.query("io.routernet.node", ["name", "depth"])
    return next((int(r["depth"]) for r in rows if r["name"] == QUEUE), 0)


def run_recovery(clients: Clients, count: int, log_dir: Path) -> dict[str, Any]:
    log = log_dir / "queue-recovery-B.log"
    port = free_port()
    with ExitStack() as stack:
        store = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-store-")))
        config = log_dir / "queue-recovery-B.config.log"  # JSON; beside the log
        config.write_text(json.dumps({"router": {"id": HOST_ID}, **node_config(store)(HOST_ID)}))
        out = stack.enter_context(log.open("wb"))
        command = _router_command(port, config)
        first = stack.enter_context(
            running(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_DIR)
        )
        wait_for_port(first, port, "router B", START_TIMEOUT_S)
        time.sleep(IDLE_SETTLE_S)
        idle_rss = proc_status_mib(first.pid, "VmRSS")
        modules = process_router_modules(first.pid)
        # Fill: pre-settled, so nothing waits for a sync; the router still writes every
        # message to the log by the end of its turn, and a kill -9 leaves what the router
        # wrote with the OS. Done once the host's management counts them all.
        fill = sender_args(clients, port, count, 0, True, durable=True, address=QUEUE)
        started = time.monotonic()
        with running(fill, **PIPES) as sender:
            sent = report(sender, 60 + count / 5_000, "filling sender")
        with management(port) as mgmt:
            stored = 60 + count / 5_000  # as the sender's bound
            wait_until(lambda: _depth(mgmt) >= count, stored, f"{count:,} messages in {QUEUE}")
        fill_s = time.monotonic() - started
        if sent["sent"] != count:
            raise BenchError(f"filling: {sent['sent']:,} of {count:,} sent")
        full_rss = proc_status_mib(first.pid, "VmRSS")
        store_bytes = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
        first.send_signal(signal.SIGKILL)
        first.wait()
        out.flush()
        offset = log.stat().st_size
        restart_ns = time.monotonic_ns()
        again = stack.enter_context(
            running(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_DIR)
        )
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while (event := _recovered(log, offset)) is None:
            if again.poll() is not None:
                raise BenchError(f"restarted router exited with code {again.returncode}; see {log}")
            if time.monotonic() > deadline:
                raise BenchError(f"no store.recovered within {RECOVERY_TIMEOUT_S:.0f} s; see {log}")
            time.sleep(0.01)
        logged_ns = time.monotonic_ns()
        wait_for_port(again, port, "restarted router B", RECOVERY_TIMEOUT_S)
        listening_ns = time.monotonic_ns()
        recovered_rss = proc_status_mib(again.pid, "VmRSS")
        with running(receiver_args(clients, port, 1, address=QUEUE), **PIPES) as receiver:
            wait_ready(receiver)
            got = report(receiver, 60, "receiver")
        if got["received"] != 1:
            raise BenchError(f"the consumer after recovery got {got['received']} messages")
        consumer_rss = proc_status_mib(again.pid, "VmRSS")
    if event.get("messages") != count:
        raise BenchError(f"store.recovered says {event.get('messages')} messages, not {count:,}")
    return {
        "kind": "recovery",
        "router_modules": modules,
        "messages": count,
        "fill_s": round(fill_s, 2),
        "fill_msgs_per_s": round(count / fill_s),
        "store_mib": round(store_bytes / MIB, 1),
        "recovered_seconds_logged": event["seconds"],
        "restart_to_recovered_logged_s": round((logged_ns - restart_ns) / 1e9, 3),
        "restart_to_listening_s": round((listening_ns - restart_ns) / 1e9, 3),
        "restart_to_first_message_s": round((got["first_ns"] - restart_ns) / 1e9, 3),
        "idle_rss_mib": round(idle_rss, 1),
        "full_rss_mib": round(full_rss, 1),
        "recovered_rss_mib": round(recovered_rss, 1),
        "rss_after_first_message_mib": round(consumer_rss, 1),
        "paged_messages": event.get("paged", 0),
    }


# ----- the suite -------------------------------------------------------------------------------


def run(
    clients: Clients, chosen: list[str], *, count: int, recovery_count: int, log_dir: Path
) -> dict[str, Any]:
    """Runs the chosen scenarios in order; a failed one is recorded with its error."""
    version = _rabbitmq_version()
    results: dict[str, Any] = {
        "benchmark": "nodes",
        "machine": {**machine_info(clients), "rabbitmq": version},
        "config": {
            "messages": count,
            "recovery_messages": recovery_count,
            "body_bytes": BODY_BYTES,
            "queue": QUEUE,
            "store": "a temporary directory on local disk (tempfile)",
            "fsync_policy": FSYNC_POLICY,
            "rabbitmq_fsync_policy": RABBITMQ_FSYNC,
            "settlement": "unsettled (sender waits for each outcome; receiver accepts)",
            "timed": "sender's first credit -> receiver's last message",
        },
        "scenarios": {},
    }
    rabbit = [n for n in chosen if n in RABBITMQ]
    for name in chosen:
        if name in RABBITMQ:
            if name != rabbit[0]:
                continue
            print(f"bench: {', '.join(rabbit)} ...", file=sys.stderr, flush=True)
            if _broker_class() is None:
                outcomes = {
                    n: {"kind": "throughput", "skipped": "RabbitMQ is not installed"}
                    for n in rabbit
                }
            else:
                try:
                    outcomes = run_rabbitmq(rabbit, clients, count, log_dir)
                except BenchError as e:
                    outcomes = {n: {"kind": "throughput", "error": str(e)} for n in rabbit}
            for n, outcome in outcomes.items():
                print(f"bench: {n}: {_progress(outcome)}", file=sys.stderr, flush=True)
                results["scenarios"][n] = outcome
            continue
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        try:
            if name == "queue-recovery":
                outcome = run_recovery(clients, recovery_count, log_dir)
            else:
                outcome = run_router_throughput(name, clients, count, log_dir)
        except BenchError as e:
            kind = "recovery" if name == "queue-recovery" else "throughput"
            outcome = {"kind": kind, "error": str(e)}
        print(f"bench: {name}: {_progress(outcome)}", file=sys.stderr, flush=True)
        results["scenarios"][name] = outcome
    return results


def _progress(outcome: dict[str, Any]) -> str:
    if "error" in outcome:
        return f"failed: {outcome['error']}"
    if "skipped" in outcome:
        return f"skipped: {outcome['skipped']}"
    if outcome["kind"] == "recovery":
        return (
            f"{outcome['messages']:,} messages: store.recovered after "
            f"{outcome['restart_to_recovered_logged_s']:.2f} s, first message after "
            f"{outcome['restart_to_first_message_s']:.2f} s, RSS {outcome['recovered_rss_mib']} MiB"
        )
    return f"{outcome['throughput']['msgs_per_s']:,} msgs/s"


def markdown(results: dict[str, Any]) -> str:
    """Renders results as the Markdown tables docs/benchmark.md quotes."""
    m, config = results["machine"], results["config"]
    scenarios = results["scenarios"]
    lines = [
        f"Hosted queue `{config['queue']}`, {config['body_bytes']}-byte bodies, unsettled, "
        f"{config['messages']:,} messages a run. Store fsync policy: {config['fsync_policy']}. "
        f"{m['cpu_model']}, {m['nproc']} CPUs, Linux {m['kernel']}, Python {m['python']}, "
        f"Proton C {m['proton_c']}, {commit_label(m)}, RabbitMQ {m.get('rabbitmq') or 'absent'}, "
        f"{m['date'][:10]}, load average {m['load_average_1m']:.2f} at start.",
    ]
    notes = []
    runs = {n: s for n, s in scenarios.items() if s["kind"] == "throughput"}
    if runs:
        lines += [
            "",
            "msgs/s: from the sender's first credit to the receiver's last message.",
            "",
            "| scenario | path | durable | msgs/s | CPU µs/msg | CPU % | peak RSS MiB |",
            "|---|---|---|--:|--:|--:|--:|",
        ]
        for name, s in runs.items():
            if "skipped" in s:
                lines.append(f"| {name} | skipped | | | | | |")
                notes.append(f"{name} skipped: {s['skipped']}.")
                continue
            if "error" in s:
                lines.append(f"| {name} | failed | | | | | |")
                notes.append(f"{name} failed: {s['error']}")
                continue
            servers = s["servers"]

            def each(key: str, digits: int, servers: dict[str, Any] = servers) -> str:
                return " / ".join(cell(servers[k][key], digits) for k in sorted(servers))

            who = " / ".join(sorted(servers))
            lines.append(
                f"| {name} | {s['path']} | {'yes' if s['durable'] else 'no'} "
                f"| {cell(s['throughput']['msgs_per_s'])} | {each('cpu_us_per_msg', 1)} ({who}) "
                f"| {each('cpu_percent', 0)} | {each('peak_rss_mib', 1)} |"
            )
        notes.append(f"RabbitMQ's fsync policy: {config['rabbitmq_fsync_policy']}.")
    recovery = scenarios.get("queue-recovery")
    if recovery is not None:
        if "error" in recovery:
            notes.append(f"queue-recovery failed: {recovery['error']}")
        else:
            r = recovery
            lines += [
                "",
                f"queue-recovery: {r['messages']:,} durable messages in the host's queue "
                f"(filled at {cell(r['fill_msgs_per_s'])} msgs/s, pre-settled; store "
                f"{cell(r['store_mib'], 1)} MiB), `kill -9`, restart on the same store.",
                "",
                "| store.recovered seconds= | restart → store.recovered logged s "
                "| restart → first message s | RSS idle / full / recovered MiB "
                "| paged (not indexed in memory) |",
                "|--:|--:|--:|--:|--:|",
                f"| {r['recovered_seconds_logged']:.2f} | {r['restart_to_recovered_logged_s']:.2f} "
                f"| {r['restart_to_first_message_s']:.2f} "
                f"| {cell(r['idle_rss_mib'], 1)} / {cell(r['full_rss_mib'], 1)} / "
                f"{cell(r['recovered_rss_mib'], 1)} | {cell(r['paged_messages'])} |",
            ]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"
