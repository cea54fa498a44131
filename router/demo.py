"""`make run`: start a small real router network on this machine and show messages crossing it.

Two interior routers (A, B) and an edge router (E, hanging off B) run as separate processes on
127.0.0.1. A service on the edge consumes `examples.echo`; a client on A sends requests there
with a dynamic reply-to address and reads the answers — the same pattern AMQP Management uses.
Then A's management is asked, as `qdstat -n` would, which routers it knows.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

from proton import Message
from proton.utils import BlockingConnection

TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(rid: str, args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "router", "--id", rid, "--log-level", "warning", *args]
    )


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"router exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("router did not start listening")


def echo_service(url: str, count: int, ready: threading.Event) -> None:
    """Answers each request on `examples.echo` at its reply-to address."""
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        requests = conn.create_receiver("examples.echo")
        answer = conn.create_sender(None)
        ready.set()
        for _ in range(count):
            request = requests.receive(TIMEOUT)
            requests.accept()
            answer.send(
                Message(
                    address=request.reply_to,
                    body=request.body.upper(),
                    correlation_id=request.correlation_id,
                )
            )
    finally:
        conn.close()


def round_trips(client_url: str, service_url: str, count: int) -> None:
    ready = threading.Event()
    service = threading.Thread(target=echo_service, args=(service_url, count, ready), daemon=True)
    service.start()
    if not ready.wait(TIMEOUT):
        raise SystemExit("echo service did not attach")
    client = BlockingConnection(client_url, timeout=TIMEOUT)
    try:
        replies = client.create_receiver(None, dynamic=True)
        reply_to = replies.link.remote_source.address
        print(f"client on A, reply address (dynamic): {reply_to}")
        sender = client.create_sender("examples.echo")
        for i in range(count):
            started = time.perf_counter()
            # Waits for credit: A grants it once the edge's consumer is advertised to it.
            sender.send(Message(body=f"ping {i}", reply_to=reply_to, correlation_id=i))
            reply = replies.receive(TIMEOUT)
            replies.accept()
            ms = (time.perf_counter() - started) * 1000
            print(
                f"  A -> B -> E: sent 'ping {i}', E -> B -> A: got {reply.body!r} "
                f"(correlation {reply.correlation_id}, {ms:.1f} ms round trip)"
            )
    finally:
        client.close()
    service.join(TIMEOUT)


def show_nodes(url: str) -> None:
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        replies = conn.create_receiver(None, dynamic=True)
        mgmt = conn.create_sender("$management")
        mgmt.send(
            Message(
                reply_to=replies.link.remote_source.address,
                correlation_id=1,
                body={"attributeNames": ["id", "nextHop", "cost", "linkState"]},
                properties={
                    "operation": "QUERY",
                    "type": "org.amqp.management",
                    "name": "self",
                    "entityType": "org.apache.qpid.dispatch.router.node",
                },
            )
        )
        response = replies.receive(TIMEOUT)
        print("routers A knows (qdstat -n):")
        for rid, next_hop, cost, peers in response.body["results"]:
            print(f"  {rid}: next hop {next_hop or '-'}, cost {cost or 0}, neighbors {peers}")
    finally:
        conn.close()


def main() -> int:
    ports = {name: free_port() for name in ("A", "B", "E", "A-inter", "B-edge")}
    procs = {
        "A": start(
            "A",
            [
                "--mode",
                "interior",
                "--listen",
                f"127.0.0.1:{ports['A']}",
                "--inter-router-listen",
                f"127.0.0.1:{ports['A-inter']}",
            ],
        ),
        "B": start(
            "B",
            [
                "--mode",
                "interior",
                "--listen",
                f"127.0.0.1:{ports['B']}",
                "--edge-listen",
                f"127.0.0.1:{ports['B-edge']}",
                "--connect",
                f"127.0.0.1:{ports['A-inter']}",
            ],
        ),
        "E": start(
            "E",
            [
                "--mode",
                "edge",
                "--listen",
                f"127.0.0.1:{ports['E']}",
                "--connect",
                f"127.0.0.1:{ports['B-edge']}",
            ],
        ),
    }
    codes: dict[str, int] = {}
    try:
        for name, proc in procs.items():
            wait_listening(ports[name], proc)
            print(f"router {name} listening on amqp://127.0.0.1:{ports[name]}")
        round_trips(f"amqp://127.0.0.1:{ports['A']}", f"amqp://127.0.0.1:{ports['E']}", 3)
        show_nodes(f"amqp://127.0.0.1:{ports['A']}")
    finally:
        for name, proc in reversed(procs.items()):  # edge first: nobody sees a peer vanish
            proc.send_signal(signal.SIGTERM)
            codes[name] = proc.wait(TIMEOUT)
    print(f"routers stopped cleanly (exit codes {codes})")
    return max(codes.values())


if __name__ == "__main__":
    raise SystemExit(main())
