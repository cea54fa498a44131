"""Connections to the endpoints, one link each, kept up for the sender or receiver that owns
them (proton's event-driven Container: every connection and timer in one thread).

Why it is built this way:

- One *slot* per wanted connection (endpoints.spread). A slot connects, attaches its link and,
  when either goes away (the router closed it, e.g. ``amqp:connection:forced`` while draining,
  detached the link, refused it, or the socket failed), tells its owner, which takes back what
  was in flight on it, and connects again after a backoff (router/transport/connector.py's, capped
  at ``MAX_BACKOFF`` so traffic comes back quickly once a router is back). Proton's own reconnect is
  off: it would re-attach the same link objects and keep their deliveries, whose fate is unknown
  after a failure; a fresh connection and link, with everything unsettled sent again, is what
  at-least-once needs.
- ``refresh`` reads the endpoints again (every ``REFRESH_SECONDS``) and moves only the
  difference (endpoints.rebalance): slots of endpoints that went away are closed at once, slots
  in surplus are *retired*: no new messages, closed once their owner has nothing in flight on
  them (or after ``RETIRE_SECONDS``), so moving a connection loses and duplicates nothing.
- Each slot is the handler of its own connections; an event from an earlier connection of the
  slot (closing in the background) is ignored by comparing with the current one.
- Retrying is for a network that was there: until a first link attaches, the pool keeps
  trying for ``wait`` seconds only (``unreachable``), so a wrong URL or a network not up ends
  the command with the connection's error instead of retrying silently for ever.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Protocol

from proton import Delivery, Endpoint, Event, SSLDomain, Terminus
from proton.handlers import MessagingHandler

from router.transport.connector import STABLE_SECONDS, backoff_delay
from router_operator.traffic.endpoints import EndpointError, Security, rebalance, spread

MAX_BACKOFF = 2.0
REFRESH_SECONDS = 2.0
RETIRE_SECONDS = 10.0
CLOSE_SECONDS = 2.0

SENDER = "sender"
RECEIVER = "receiver"
# What a router answers an attach with when trying again will not help: no such container or
# node, not allowed, not authorised, a bad address.
REFUSALS = frozenset(
    {
        "amqp:not-found",
        "amqp:not-allowed",
        "amqp:unauthorized-access",
        "amqp:invalid-field",
        "qd:no-route-to-dest",
    }
)


class Owner(Protocol):
    """What the sender or receiver hears from its slots."""

    def attached(self, slot: Slot) -> None: ...

    def sendable(self, slot: Slot) -> None: ...

    def settled(self, slot: Slot, delivery: Delivery) -> None: ...

    def message(self, slot: Slot, event: Event) -> None: ...

    def lost(self, slot: Slot, reason: str, was_attached: bool) -> None: ...

    def refused(self, slot: Slot, reason: str) -> None:
        """The attach was refused for good (REFUSALS): the command ends with that error."""

    def in_flight(self, slot: Slot) -> int: ...


def connect_options(security: Security) -> dict[str, Any]:
    """Container.connect's keyword arguments for ``security``: one SSLDomain, made here once
    and shared by every connection, and PLAIN credentials (proton allows PLAIN without TLS,
    as the routers' PLAIN listeners do)."""
    options: dict[str, Any] = {}
    if security.user is not None:
        options.update(user=security.user, password=security.password, allowed_mechs="PLAIN")
    if security.tls:
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        if security.ca is not None:
            domain.set_trusted_ca_db(security.ca)
        if security.cert is not None:
            domain.set_credentials(security.cert, security.key, None)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, security.ca)
        options["ssl_domain"] = domain
    return options


class Call:
    """A timer callback for Container.schedule."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def on_timer_task(self, event: Event) -> None:
        self.fn()


class Slot(MessagingHandler):  # type: ignore[misc]
    """One connection to ``endpoint`` with one link on ``pool.address``, reconnected until the
    slot is closed. ``carrier`` names the current connection for the sender's ledger."""

    def __init__(self, pool: Pool, endpoint: str, number: int) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        self.pool = pool
        self.endpoint = endpoint
        self.number = number
        self.generation = 0
        self.conn: Any = None
        self.link: Any = None
        self.attached_at: float | None = None
        self.failures = 0
        self.retiring_since: float | None = None
        self.closed = False
        self._retry: Any = None

    def __repr__(self) -> str:
        return f"Slot({self.number}, {self.endpoint}, generation {self.generation})"

    @property
    def carrier(self) -> tuple[int, int]:
        return (self.number, self.generation)

    @property
    def attached(self) -> bool:
        return self.attached_at is not None and self.link is not None

    @property
    def credit(self) -> int:
        return int(self.link.credit) if self.attached else 0

    @property
    def sendable(self) -> bool:
        """Attached, not retiring, with credit: a message may go on it now."""
        return self.retiring_since is None and self.credit > 0

    # --- connecting -------------------------------------------------------------------------

    def connect(self) -> None:
        self._retry = None
        if self.closed:
            return
        pool = self.pool
        self.generation += 1
        self.attached_at = None
        self.conn = pool.container.connect(
            self.endpoint, handler=self, reconnect=False, **pool.connect_options
        )
        name = f"{pool.container.container_id}-{pool.role}-{self.number}"
        if pool.role == SENDER:
            self.link = pool.container.create_sender(self.conn, pool.address, name=name)
        else:
            self.link = pool.container.create_receiver(self.conn, pool.address, name=name)

    def send(self, message: Any, tag: int) -> None:
        self.link.send(message, tag=str(tag))

    def close(self) -> None:
        """Closed for good: the owner takes back what is in flight, no reconnect."""
        self.closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._drop("closed", reconnect=False)

    def _drop(self, reason: str, reconnect: bool = True) -> None:
        conn = self.conn
        if conn is None:
            return
        was_attached = self.attached
        lived = 0.0 if self.attached_at is None else self.pool.clock() - self.attached_at
        self.conn = self.link = None
        self.attached_at = None
        if not was_attached:
            self.pool.problem = f"{self.endpoint}: {reason}"
        if conn.state & Endpoint.LOCAL_ACTIVE:
            conn.close()  # a clean Close (its settlements first) when the peer is still there
            transport = conn.transport
            if transport is not None and not transport.closed:
                self.pool.closing.add(conn)
        self.pool.owner.lost(self, reason, was_attached)
        if not reconnect or self.closed or self.retiring_since is not None:
            return  # a retiring slot is closed by Pool.tick once it is down
        self.failures = 1 if lived >= STABLE_SECONDS else self.failures + 1
        delay = backoff_delay(self.failures, cap=MAX_BACKOFF)
        self._retry = self.pool.container.schedule(delay, Call(self.connect))

    def _current(self, event: Event) -> bool:
        return self.conn is not None and event.connection == self.conn

    # --- proton events ------------------------------------------------------------------------

    def on_link_opened(self, event: Event) -> None:
        link = event.link
        terminus = link.remote_target if link.is_sender else link.remote_source
        if terminus.type == Terminus.UNSPECIFIED:
            return  # a refusal, as AMQP words it: the detach with the error follows
        if self._current(event) and link == self.link:
            self.attached_at = self.pool.clock()
            self.pool.reached = True
            self.pool.owner.attached(self)

    def on_sendable(self, event: Event) -> None:
        if self._current(event) and self.attached:
            self.pool.owner.sendable(self)

    def on_settled(self, event: Event) -> None:
        if self._current(event):
            self.pool.owner.settled(self, event.delivery)

    def on_message(self, event: Event) -> None:
        if self._current(event):
            self.pool.owner.message(self, event)

    def on_link_error(self, event: Event) -> None:
        if self._current(event):
            cond = event.link.remote_condition
            reason = f"link refused: {cond.name}: {cond.description}"
            if self.attached_at is None and cond.name in REFUSALS:
                self.pool.owner.refused(self, reason)
            self._drop(f"link detached: {cond.name}: {cond.description}")

    def on_link_closing(self, event: Event) -> None:
        if self._current(event):
            self._drop("link detached by the router")

    def on_link_remote_detach(self, event: Event) -> None:
        # A detach that is not a close (closed=false): MessagingHandler does not report it.
        if self._current(event) and event.link == self.link:
            cond = event.link.remote_condition
            self._drop(f"link detached: {cond.name}: {cond.description}" if cond else "detached")

    def on_connection_error(self, event: Event) -> None:
        if self._current(event):
            cond = event.connection.remote_condition
            self._drop(f"connection closed: {cond.name}: {cond.description}")

    def on_connection_closing(self, event: Event) -> None:
        if self._current(event):
            self._drop("connection closed by the router")

    def on_connection_remote_close(self, event: Event) -> None:
        # MessagingHandler passes over amqp:connection:forced (a draining router's close) to
        # let its own reconnect step in; here it is a loss like any other.
        cond = event.connection.remote_condition
        if self._current(event) and cond is not None and cond.name == "amqp:connection:forced":
            self._drop(f"connection closed: {cond.name}: {cond.description}")

    def on_transport_error(self, event: Event) -> None:
        if self._current(event):
            cond = event.transport.condition
            self._drop(f"{cond.name}: {cond.description}" if cond else "transport error")

    def on_transport_closed(self, event: Event) -> None:
        conn = event.connection
        if self._current(event):
            self._drop("connection lost")
        elif conn is not None:
            self.pool.closing.discard(conn)


class Pool:
    """The slots of one sender or receiver: ``connections`` spread over ``source()``'s
    endpoints (None: one per endpoint), refreshed by ``tick``, each opened with
    ``security``; ``wait``: seconds to try for a first attach (None: for ever)."""

    def __init__(
        self,
        container: Any,
        role: str,
        address: str | None,
        source: Callable[[], list[str]],
        owner: Owner,
        connections: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        refresh_seconds: float = REFRESH_SECONDS,
        security: Security | None = None,
        wait: float | None = None,
    ) -> None:
        self.container = container
        self.role = role
        self.address = address
        self.source = source
        self.owner = owner
        self.connections = connections
        self.clock = clock
        self.refresh_seconds = refresh_seconds
        self.connect_options = connect_options(security or Security())
        self.offset = random.randrange(1 << 16)
        self.slots: list[Slot] = []
        """The slots in use; retiring ones are in ``retiring``."""
        self.retiring: list[Slot] = []
        self.closing: set[Any] = set()
        """Connections closed locally whose transport has not finished yet."""
        self.endpoints: list[str] = []
        self._numbers = 0
        self._refreshed_at = -float("inf")
        self.wait = wait
        self.started = clock()
        self.reached = False
        """A link has attached (to any endpoint) since the pool started."""
        self.problem: str | None = None
        """The last failure of a slot that was not attached: endpoint, then why."""

    @property
    def attached(self) -> int:
        return sum(1 for s in self.slots if s.attached)

    def unreachable(self, now: float) -> str | None:
        """Why the owner should give up: ``wait`` seconds passed without a first attach
        (None: one attached, or there is time left)."""
        if self.reached or self.wait is None or now - self.started < self.wait:
            return None
        why = self.problem or "no router endpoint"
        return f"no router reached in {self.wait:g} s ({why}); --wait SECONDS tries longer"

    def tick(self, now: float) -> None:
        if now - self._refreshed_at >= self.refresh_seconds:
            self.refresh()
        for slot in list(self.retiring):
            if (
                not slot.attached
                or self.owner.in_flight(slot) == 0
                or now - (slot.retiring_since or now) >= RETIRE_SECONDS
            ):
                self.retiring.remove(slot)
                slot.close()

    def refresh(self, endpoints: list[str] | None = None) -> None:
        """Read the endpoints again (or take ``endpoints``) and move the difference."""
        self._refreshed_at = self.clock()
        if endpoints is None:
            try:
                endpoints = self.source()
            except EndpointError:
                return  # unreadable for now: keep what is there
        self.endpoints = endpoints
        wanted = spread(endpoints, self.connections, self.offset)
        current: dict[str, int] = {}
        for slot in self.slots:
            current[slot.endpoint] = current.get(slot.endpoint, 0) + 1
        to_open, to_retire = rebalance(current, wanted)
        for endpoint, count in to_retire.items():
            # Retire the slots that are down first: they carry nothing.
            candidates = sorted(
                (s for s in self.slots if s.endpoint == endpoint), key=lambda s: s.attached
            )
            for slot in candidates[:count]:
                self.slots.remove(slot)
                if endpoint in wanted and slot.attached and self.role == SENDER:
                    slot.retiring_since = self._refreshed_at
                    self.retiring.append(slot)
                else:
                    slot.close()  # the router went away (or a receiver): nothing to wait for
        for endpoint, count in sorted(to_open.items()):
            for _ in range(count):
                self._numbers += 1
                slot = Slot(self, endpoint, self._numbers)
                self.slots.append(slot)
                slot.connect()

    def close_all(self) -> None:
        for slot in [*self.slots, *self.retiring]:
            slot.close()
        self.slots.clear()
        self.retiring.clear()
