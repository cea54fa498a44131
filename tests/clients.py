"""AMQP clients for end-to-end tests: python-qpid-proton links driven from the test's own thread.

A `World` owns one proton `Container` that every client connection of a test lives in, and the
test drives it with `run_until(condition)` (always with a deadline). Because one loop serves all
the connections, a consumer keeps settling while the test waits on a sender's outcome, and no
threads are needed. Senders record every delivery's outcome as the router reported it;
receivers record every message and settle it according to a policy the test chooses (accept,
reject, release, modify, never, or a function).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from proton import Condition, Delivery, Endpoint, Message
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container
from proton.utils import BlockingConnection

T = TypeVar("T")
# run_until's default bound: what it waits for takes milliseconds on an idle machine, many
# times that on a loaded one; only a condition that never comes waits this long.
TIMEOUT = 20.0
# How long a transfer may go without progress before it counts as stuck (run_while_moving).
# Progress shows in steps of a session window's refill: beside a CPU hog, with the load at 20,
# 64 MiB through a router moved every 6 to 20 s.
STALL = 120.0
POLL = 0.02

ACCEPTED = Delivery.ACCEPTED
REJECTED = Delivery.REJECTED
RELEASED = Delivery.RELEASED
MODIFIED = Delivery.MODIFIED
STATE_NAMES = {
    ACCEPTED: "accepted",
    REJECTED: "rejected",
    RELEASED: "released",
    MODIFIED: "modified",
}

MANAGEMENT_TYPE = "org.amqp.management"
DISPATCH = "org.apache.qpid.dispatch."


# Every router attribute `qdstat -g` reads (Dispatch tools/qdstat): all must be present.
QDSTAT_G = [
    "id",
    "mode",
    "version",
    "workerThreads",
    "uptimeSeconds",
    "memoryUsage",
    "area",
    "linkRouteCount",
    "autoLinkCount",
    "linkCount",
    "nodeCount",
    "addrCount",
    "connectionCount",
    "presettledDeliveries",
    "droppedPresettledDeliveries",
    "acceptedDeliveries",
    "rejectedDeliveries",
    "releasedDeliveries",
    "modifiedDeliveries",
    "deliveriesDelayed1Sec",
    "deliveriesDelayed10Sec",
    "deliveriesStuck",
    "linksBlocked",
    "deliveriesRedirectedToFallback",
    "deliveriesIngress",
    "deliveriesEgress",
    "deliveriesTransit",
    "deliveriesIngressRouteContainer",
    "deliveriesEgressRouteContainer",
]


def run_while_moving(
    step: Callable[[], object],
    until: Callable[[], object],
    moving: Callable[[], object],
    what: str,
) -> None:
    """Calls `step` until `until()`. Fails once `moving()` (bytes still to send, bytes
    arrived) has not changed for STALL seconds: a bound on a transfer that stopped, where one
    on its duration would fail a transfer slowed down by a loaded machine."""
    last, since = moving(), time.monotonic()
    while not until():
        step()
        now = moving()
        if now != last:
            last, since = now, time.monotonic()
        assert time.monotonic() - since < STALL, f"{what}: nothing moved for {STALL}s ({last})"


class World:
    """The proton event loop shared by a test's clients; close() releases every socket."""

    def __init__(self) -> None:
        self.container = Container()
        self.container.timeout = POLL
        self.container.start()
        # Proton's loop shuts itself down when it has nothing to watch; a far-off timer keeps it
        # alive while the test has no connection open (say, before a client process attaches).
        self._keepalive = self.container.schedule(3600, None)
        self.clients: list[Client] = []
        self.closed = False

    def connect(self, url: str, **kwargs: Any) -> Client:
        client = Client(self, url, **kwargs)
        self.clients.append(client)
        self.run_until(lambda: client.opened or client.failed, what=f"connection to {url}")
        assert client.opened, f"connection to {url} failed: {client.errors}"
        return client

    def step(self) -> None:
        self.container.timeout = POLL
        self.container.process()

    def run_until(
        self, condition: Callable[[], object], timeout: float = TIMEOUT, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            self.step()

    def beside(
        self, call: Callable[[], T], timeout: float = 20.0, what: str = "a blocking client"
    ) -> T:
        """`call` (a blocking client: proton.utils, whose own loop waits for the answers) run on
        a thread while this loop serves the test's own peers, such as the container its links
        reach: on one thread each would wait for the other. Its result, or its exception."""
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(call)
            self.run_until(future.done, timeout=timeout, what=what)
            return future.result()

    def run_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.step()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for client in self.clients:
            client.close(wait=False)
        with contextlib.suppress(AssertionError):
            self.run_until(
                lambda: all(c.finished for c in self.clients), timeout=2.0, what="clients closing"
            )
        for client in self.clients:
            transport = client.conn.transport
            if transport is not None:
                transport.close_tail()
                transport.close_head()
        self._keepalive.cancel()
        self.container.stop()
        deadline = time.monotonic() + 2.0
        while self.container.process() and time.monotonic() < deadline:
            pass
        self.container.stop_events()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client(MessagingHandler):
    """One AMQP connection to the router, on which links are made."""

    def __init__(self, world: World, url: str, *, auto_accept: bool = True, **kwargs: Any) -> None:
        super().__init__(prefetch=0, auto_accept=auto_accept)
        self.world = world
        self.errors: list[str] = []
        self.opened = False
        self.failed = False
        self.links: list[Receiver | Sender] = []
        self.conn = world.container.connect(url, handler=self, reconnect=False, **kwargs)

    # --- links ---

    def receiver(self, source: str | None, **kwargs: Any) -> Receiver:
        receiver = Receiver(self, source, **kwargs)
        self.links.append(receiver)
        self.world.run_until(lambda: receiver.attached or receiver.closed, what="receiver attach")
        return receiver

    def session(self) -> Any:
        """A new session of this connection, for links that should not share the default one."""
        session = self.conn.session()
        session.open()
        return session

    def sender(self, target: str | None, **kwargs: Any) -> Sender:
        sender = Sender(self, target, **kwargs)
        self.links.append(sender)
        self.world.run_until(lambda: sender.attached or sender.closed, what="sender attach")
        return sender

    # --- connection state ---

    @property
    def finished(self) -> bool:
        transport = self.conn.transport
        return (
            self.failed
            or transport is None
            or bool(self.conn.state & Endpoint.REMOTE_CLOSED)
            or transport.closed
        )

    def close(self, wait: bool = True) -> None:
        if not self.conn.state & Endpoint.LOCAL_CLOSED:
            self.conn.close()
        if wait:
            self.world.run_until(lambda: self.finished, what="connection close")

    def drop(self) -> None:
        """Cut the TCP connection without an AMQP close, as a crashed client would."""
        transport = self.conn.transport
        assert transport is not None
        transport.close_tail()
        transport.close_head()
        self.world.run_until(
            lambda: self.conn.transport is None or transport.closed, what="socket to drop"
        )
        self.failed = True

    # --- events ---

    def on_connection_opened(self, event: Any) -> None:
        self.opened = True

    def on_transport_error(self, event: Any) -> None:
        cond = event.transport.condition
        self.errors.append(f"{cond.name}: {cond.description}" if cond else "transport error")
        self.failed = True

    def on_connection_error(self, event: Any) -> None:
        cond = event.connection.remote_condition
        self.errors.append(f"{cond.name}: {cond.description}" if cond else "connection error")

    def on_disconnected(self, event: Any) -> None:
        self.failed = True


def settle(
    delivery: Delivery,
    state: int,
    *,
    condition: Condition | None = None,
    failed: bool = False,
    undeliverable: bool = False,
    annotations: dict[Any, Any] | None = None,
) -> None:
    """Give `delivery` a terminal outcome (with its details) and settle it."""
    if condition is not None:
        delivery.local.condition = condition
    if state == MODIFIED:
        delivery.local.failed = failed
        delivery.local.undeliverable = undeliverable
        if annotations is not None:
            delivery.local.annotations = annotations
    delivery.update(state)
    delivery.settle()


Policy = str | Callable[["Receiver", Message, Delivery], None] | None


class Receiver(MessagingHandler):
    """A consumer. `policy` says what to do with each message: "accept" (default), "reject",
    "release", None (never settle), or a function(receiver, message, delivery) that decides."""

    def __init__(
        self,
        client: Client,
        source: str | None,
        *,
        credit: int = 100,
        policy: Policy = "accept",
        dynamic: bool = False,
        name: str | None = None,
        at_most_once: bool = False,
        session: Any = None,
        options: list[Any] | None = None,
    ) -> None:
        # Credit is topped up here rather than by proton's FlowController, which looks at the
        # credit before the delivery is consumed and so stalls a window of 1 after one message.
        super().__init__(prefetch=0, auto_accept=False)
        self.client = client
        self.window = credit
        self.policy = policy
        self.messages: list[Message] = []
        self.deliveries: list[Delivery] = []
        self.errors: list[Condition | None] = []
        self.detached = False  # the peer detached (closed or not)
        self.link = client.world.container.create_receiver(
            session or client.conn,
            source,
            dynamic=dynamic,
            name=name,
            handler=self,
            options=[*(options or []), *([AtMostOnce()] if at_most_once else [])] or None,
        )
        if credit:
            self.link.flow(credit)

    @property
    def attached(self) -> bool:
        return bool(self.link.state & Endpoint.REMOTE_ACTIVE)

    @property
    def closed(self) -> bool:
        return bool(self.link.state & Endpoint.REMOTE_CLOSED)

    @property
    def address(self) -> str | None:
        return self.link.remote_source.address

    @property
    def bodies(self) -> list[Any]:
        return [m.body for m in self.messages]

    @property
    def unsettled(self) -> list[Delivery]:
        return [d for d in self.deliveries if not d.local_state]

    def on_message(self, event: Any) -> None:
        message, delivery = event.message, event.delivery
        self.messages.append(message)
        self.deliveries.append(delivery)
        if self.window and self.link.credit < self.window:
            self.link.flow(self.window - self.link.credit)
        policy = self.policy
        if policy is None:
            return
        if callable(policy):
            policy(self, message, delivery)
        elif policy == "accept":
            settle(delivery, ACCEPTED)
        elif policy == "reject":
            settle(delivery, REJECTED)
        elif policy == "release":
            settle(delivery, RELEASED)
        else:
            raise ValueError(f"unknown policy {policy!r}")

    def settle_all(self, state: int = ACCEPTED) -> None:
        for delivery in self.unsettled:
            settle(delivery, state)

    def flow(self, credit: int) -> None:
        self.link.flow(credit)

    def close(self, wait: bool = True) -> None:
        self.link.close()
        if wait:
            self.client.world.run_until(lambda: self.closed, what="receiver detach")

    def detach(self) -> None:
        """Detach without closing (closed=false), as a client that means to come back does."""
        self.link.detach()
        self.client.world.run_until(lambda: self.detached, what="receiver detach")

    def on_link_remote_detach(self, event: Any) -> None:
        self.detached = True
        if event.link.remote_condition is not None:
            self.errors.append(event.link.remote_condition)

    def on_link_remote_close(self, event: Any) -> None:
        self.detached = True

    def on_link_error(self, event: Any) -> None:
        self.errors.append(event.link.remote_condition)


@dataclass
class Tracked:
    """One message sent and what became of it; `state` stays None until the router settles."""

    message: Message
    delivery: Delivery
    presettled: bool = False
    state: int | None = None
    condition: Condition | None = None
    failed: bool = False
    undeliverable: bool = False
    annotations: dict[Any, Any] | None = None
    resent: Tracked | None = field(default=None, repr=False)

    @property
    def settled(self) -> bool:
        return self.state is not None

    @property
    def outcome(self) -> str | None:
        return None if self.state is None else STATE_NAMES.get(self.state, str(self.state))

    @property
    def final(self) -> Tracked:
        """The last attempt of this message (following resends after a release)."""
        tracked = self
        while tracked.resent is not None:
            tracked = tracked.resent
        return tracked


class Sender(MessagingHandler):
    """A producer recording each delivery's outcome. `presettled` makes it an at-most-once link
    that settles every delivery as it is sent; `resend` sends released or modified messages
    again, as a reliable client does."""

    def __init__(
        self,
        client: Client,
        target: str | None,
        *,
        presettled: bool = False,
        resend: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(prefetch=0, auto_settle=True)
        self.client = client
        self.presettled = presettled
        self.resend = resend
        self.sent: list[Tracked] = []
        self.errors: list[Condition | None] = []
        self._by_tag: dict[str, Tracked] = {}
        self._tags = 0
        options = AtMostOnce() if presettled else None
        self.link = client.world.container.create_sender(
            client.conn, target, name=name, handler=self, options=options
        )

    @property
    def attached(self) -> bool:
        return bool(self.link.state & Endpoint.REMOTE_ACTIVE)

    @property
    def closed(self) -> bool:
        return bool(self.link.state & Endpoint.REMOTE_CLOSED)

    @property
    def credit(self) -> int:
        return self.link.credit

    def send(self, message: Message) -> Tracked:
        self._tags += 1
        tag = str(self._tags)
        delivery = self.link.send(message, tag=tag)
        tracked = Tracked(message, delivery, presettled=self.presettled)
        if self.presettled:
            delivery.settle()
        else:
            self._by_tag[tag] = tracked
        self.sent.append(tracked)
        return tracked

    def send_all(self, messages: Iterable[Message]) -> list[Tracked]:
        return [self.send(m) for m in messages]

    @property
    def originals(self) -> list[Tracked]:
        resends = {id(t.resent) for t in self.sent if t.resent is not None}
        return [t for t in self.sent if id(t) not in resends]

    def all_settled(self) -> bool:
        return all(t.final.settled for t in self.originals)

    def on_settled(self, event: Any) -> None:
        delivery = event.delivery
        tracked = self._by_tag.pop(delivery.tag, None)
        if tracked is None:
            return
        remote = delivery.remote
        tracked.state = delivery.remote_state
        tracked.condition = remote.condition
        tracked.failed = remote.failed
        tracked.undeliverable = remote.undeliverable
        tracked.annotations = remote.annotations
        if self.resend and tracked.state in (RELEASED, MODIFIED):
            tracked.resent = self.send(tracked.message)

    def close(self, wait: bool = True) -> None:
        self.link.close()
        if wait:
            self.client.world.run_until(lambda: self.closed, what="sender detach")

    def on_link_error(self, event: Any) -> None:
        self.errors.append(event.link.remote_condition)


class Management:
    """Requests to the router's `$management` node, shaped as qdstat/qdmanage send them."""

    def __init__(self, client: Client, address: str = "$management") -> None:
        """`address` may name another router's agent: `_topo/0/<router-id>/$management`."""
        self.client = client
        self.replies = client.receiver(None, dynamic=True)
        self.reply_to = self.replies.address
        assert self.reply_to, "the router gave the dynamic receiver no address"
        self.sender = client.sender(address)
        self.world = client.world
        self.world.run_until(lambda: self.sender.credit > 0, what="credit for $management")
        self._ids = 0

    def request(self, properties: dict[str, Any], body: Any = None) -> Message:
        self._ids += 1
        correlation = f"req-{self._ids}"
        self.sender.send(
            Message(
                reply_to=self.reply_to, correlation_id=correlation, properties=properties, body=body
            )
        )

        def answered() -> Message | None:
            for m in self.replies.messages:
                if m.correlation_id == correlation:
                    return m
            return None

        self.world.run_until(answered, what=f"management response to {properties}")
        response = answered()
        assert response is not None
        return response

    def node_request(self, operation: str, body: Any = None, **extra: Any) -> Message:
        properties = {"operation": operation, "type": MANAGEMENT_TYPE, "name": "self", **extra}
        return self.request(properties, {} if body is None else body)

    def consumer_credit(self, address: str) -> int | None:
        """The credit the router has from the consumer of mobile `address` (its outgoing
        link): once it is what the consumer gave, the consumer's flow has reached it."""
        rows = self.query("router.link", ["linkDir", "owningAddr", "creditAvailable"])
        return next(
            (
                r["creditAvailable"]
                for r in rows
                if r["linkDir"] == "out" and r["owningAddr"] == "M0" + address
            ),
            None,
        )

    def query(self, entity_type: str, attributes: list[str] | None = None) -> list[dict[str, Any]]:
        """QUERY as qdstat does; returns rows as dicts. Raises on a non-200 answer."""
        response = self.node_request(
            "QUERY",
            {"attributeNames": attributes or []},
            # Short names are Dispatch's; ours (io.routernet.*) are given whole.
            entityType=entity_type if entity_type.startswith("io.") else DISPATCH + entity_type,
        )
        status = response.properties["statusCode"]
        assert status == 200, f"QUERY {entity_type}: {status} {response.properties}"
        names = response.body["attributeNames"]
        return [dict(zip(names, row, strict=True)) for row in response.body["results"]]

    def router(self) -> dict[str, Any]:
        rows = self.query("router")
        assert len(rows) == 1
        return rows[0]


# ----- a consumer in a process of its own, for killing --------------------------------------

_CONSUMER_SCRIPT = r"""
import sys, time
from proton.utils import BlockingConnection
url, address, credit = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = BlockingConnection(url, timeout=10)
receiver = conn.create_receiver(address, credit=credit)
print("attached", flush=True)
while True:
    message = receiver.receive(timeout=60)
    print("got", message.body, flush=True)   # never accepted: stays unsettled at the router
"""


def blocking_round_trip(url: str, address: str) -> tuple[str | None, str | None, Any]:
    """A proton.utils client's sender and receiver on `address`, one message each way: what
    the attaches were answered, and the body received. BlockingConnection refuses a link whose
    answer names another node than it asked for (LinkException: target/source does not
    match), as any client that checks its terminus does."""
    conn = BlockingConnection(url, timeout=10)
    try:
        sender = conn.create_sender(address)
        receiver = conn.create_receiver(address)
        sender.send(Message(body="to the container"))  # returns once the container accepts
        body = receiver.receive(timeout=10).body
        receiver.accept()
        return sender.link.remote_target.address, receiver.link.remote_source.address, body
    finally:
        conn.close()


class ConsumerProcess:
    """A consumer that never settles, in its own process so a test can kill -9 it."""

    def __init__(self, url: str, address: str, credit: int = 100) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CONSUMER_SCRIPT, url, address, str(credit)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._partial = b""

    def poll(self) -> list[str]:
        """Reads whatever the process printed so far, without blocking."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._partial += chunk
            *done, self._partial = self._partial.split(b"\n")
            self.lines += [line.decode() for line in done]
        return self.lines

    @property
    def attached(self) -> bool:
        return "attached" in self.poll()

    @property
    def received(self) -> list[str]:
        return [line[4:] for line in self.poll() if line.startswith("got ")]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(5)

    def close(self) -> None:
        self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
