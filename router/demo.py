"""`make run`: start a real router process and show a request/response round trip through it.

A service consumes `examples.echo`; a client sends requests there with a dynamic reply-to address
and reads the answers — the same pattern AMQP Management uses. Then the router's own counters
are read over `$management`, as qdstat would.
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


def round_trips(url: str, count: int) -> None:
    ready = threading.Event()
    service = threading.Thread(target=echo_service, args=(url, count, ready), daemon=True)
    service.start()
    if not ready.wait(TIMEOUT):
        raise SystemExit("echo service did not attach")
    client = BlockingConnection(url, timeout=TIMEOUT)
    try:
        replies = client.create_receiver(None, dynamic=True)
        reply_to = replies.link.remote_source.address
        print(f"client reply address (dynamic): {reply_to}")
        sender = client.create_sender("examples.echo")
        for i in range(count):
            started = time.perf_counter()
            sender.send(Message(body=f"ping {i}", reply_to=reply_to, correlation_id=i))
            reply = replies.receive(TIMEOUT)
            replies.accept()
            ms = (time.perf_counter() - started) * 1000
            print(
                f"  sent 'ping {i}' -> got {reply.body!r} "
                f"(correlation {reply.correlation_id}, {ms:.1f} ms round trip)"
            )
    finally:
        client.close()
    service.join(TIMEOUT)


def show_counters(url: str) -> None:
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        replies = conn.create_receiver(None, dynamic=True)
        reply_to = replies.link.remote_source.address
        mgmt = conn.create_sender("$management")
        mgmt.send(
            Message(
                reply_to=reply_to,
                correlation_id=1,
                body={"attributeNames": []},
                properties={
                    "operation": "QUERY",
                    "type": "org.amqp.management",
                    "name": "self",
                    "entityType": "org.apache.qpid.dispatch.router",
                },
            )
        )
        response = replies.receive(TIMEOUT)
        row = dict(zip(response.body["attributeNames"], response.body["results"][0], strict=True))
        print(
            f"router {row['id']} ({row['mode']}): {row['connectionCount']} connections, "
            f"{row['deliveriesIngress']} deliveries in, {row['acceptedDeliveries']} accepted"
        )
    finally:
        conn.close()


def main() -> int:
    port = free_port()
    url = f"amqp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "router",
            "--id",
            "demo",
            "--listen",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
        ]
    )
    try:
        wait_listening(port, proc)
        print(f"router 'demo' listening on {url}")
        round_trips(url, 3)
        show_counters(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(TIMEOUT)
    print(f"router stopped cleanly (exit code {code})")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
