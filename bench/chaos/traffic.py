"""The chaos soak's clients: reliable senders and consumers of each kind of traffic, in one
python-qpid-proton container on a thread of its own, reconnecting as any application would.

A sender sends at a steady rate, each message's id ``<kind>-<n>``; a message accepted is
recorded (ledger.py), one released or modified is sent again, and so is every message still
unsettled when the connection is lost (the router may have passed it on before it died: the
one source of duplicates the soak accepts). A consumer accepts what it gets and records it.
A topic's subscribers are durable (the container's id and the link's name are the same when
they come back). Requests carry a reply address of the requester's dynamic receiver, which the
responder answers on an anonymous link; a request without a reply after REPLY_TIMEOUT_S is
sent again, as an RPC client does (its reply address may have gone with its router). Senders
start once every consumer is attached, so that every subscription sees every message.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from proton import Message, Url
from proton.handlers import MessagingHandler
from proton.reactor import Backoff, Container, DurableSubscription

from bench.chaos.ledger import Ledger

TICK_S = 0.05
CREDIT = 50
REPLY_TIMEOUT_S = 15.0
READY_S = 30.0
"""How long the senders wait for every consumer to attach before they start anyway."""


@dataclass(frozen=True)
class FlowSpec:
    kind: str
    address: str
    sender: str
    """The router (pod name) the sender connects to."""
    consumers: tuple[str, ...]
    """The routers its consumers (subscribers, responders) connect to."""
    durable: bool = False
    subscription: bool = False
    """Its consumers are durable subscriptions, each to get every message."""
    replies: bool = False
    """Request/response: the consumers answer each message to its reply address."""

    def consumer(self, router: str) -> str:
        """The link name of its consumer on ``router``, as the ledger knows it."""
        return f"chaos-{self.kind}-{router}"


class _Sender:
    def __init__(self, spec: FlowSpec, url: str, rate: float) -> None:
        self.spec = spec
        self.url = url
        self.per_tick = rate * TICK_S
        self.budget = 0.0
        self.next_id = 0
        self.pending: deque[tuple[str, bool]] = deque()
        """Ids to send: (id, whether it is a resend)."""
        self.unsettled: dict[bytes, str] = {}
        self.link: Any = None
        self.replies: Any = None
        """Its dynamic receiver, for request/response."""
        self.awaiting: dict[str, float] = {}
        """Requests accepted, awaiting their reply: when (monotonic)."""
        self.answered: set[str] = set()
        self.sending = True
        self.waiting_since: float | None = None
        """Since when it has had messages to send and no credit (monotonic), None while it
        has credit or nothing to send."""


class Traffic(MessagingHandler):
    def __init__(self, flows: list[FlowSpec], urls: dict[str, str], ledger: Ledger, rate: float):
        super().__init__(prefetch=0, auto_accept=False)
        self.flows = flows
        self.urls = urls
        self.ledger = ledger
        self.senders = [_Sender(f, urls[f.sender], rate) for f in flows]
        self.kind_of: dict[str, str] = {}
        """A consumer's link name: the kind of traffic it takes (proton's event objects are
        not the ones it handed out, so links are known by name and deliveries by tag)."""
        self.receivers: dict[str, Any] = {}
        self.attach: dict[str, Any] = {}
        """A link's name: how to attach it again on a connection."""
        self.requester_of: dict[str, _Sender] = {}
        """A reply receiver's name: its requester."""
        self.responders: dict[str, tuple[Any, deque[Message]]] = {}
        """A responder's router: its anonymous sender and the replies waiting for credit."""
        self.ready = False
        self.started_at = time.monotonic()
        self.routers = {Url(url).host: router for router, url in urls.items()}
        """A connection's host (each router has an address of its own): its router (pod)."""
        self.reattaching: set[str] = set()
        """Links detached by the router, to be attached again."""
        self.container = Container(self)
        self._thread = threading.Thread(target=self.container.run, name="chaos-traffic")
        self._stop = threading.Event()

    # ----- the runner's side ---------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop_sending(self) -> None:
        for s in self.senders:
            s.sending = False

    def outstanding(self) -> int:
        """Messages not yet accepted (still to send, or sent and unsettled) or requests not
        answered yet."""
        return sum(len(s.pending) + len(s.unsettled) + len(s.awaiting) for s in self.senders)

    def starved(self, now: float, longer_than: float) -> list[tuple[str, str]]:
        """(sender, what it is waiting with) of the senders that have had messages to send and
        no credit for ``longer_than``."""
        found = []
        for s in self.senders:
            if s.waiting_since is not None and now - s.waiting_since > longer_than:
                name = f"{s.spec.kind} sender on {s.spec.sender}"
                waited = now - s.waiting_since
                found.append(
                    (name, f"{name}: no credit for {waited:.0f} s, {len(s.pending)} to send")
                )
        return found

    def stuck(self) -> list[str]:
        """The senders with messages not accepted yet, and where they stand."""
        found = []
        for s in self.senders:
            if s.pending or s.unsettled:
                link = s.link
                state = "attached" if link.state & link.REMOTE_ACTIVE else "not attached"
                found.append(
                    f"{s.spec.kind} sender on {s.spec.sender}: {len(s.pending)} to send,"
                    f" {len(s.unsettled)} unsettled, credit {link.credit}, link {state}"
                )
            if s.awaiting:
                name = f"{s.spec.kind} sender on {s.spec.sender}"
                found.append(f"{name}: {len(s.awaiting)} unanswered")
        return found

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    # ----- proton events -------------------------------------------------------------------

    def on_start(self, event: Any) -> None:
        for router in sorted(self.urls):
            self._open(router)
        event.container.schedule(TICK_S, self)

    def _open(self, router: str) -> None:
        """A connection to ``router`` with every link of ours there. Proton reconnects it when
        the socket goes; a router that closes it (a drain on SIGTERM) gets a new one (below)."""
        senders = [s for s in self.senders if s.spec.sender == router]
        consumed = [f for f in self.flows if router in f.consumers]
        if not senders and not consumed:
            return
        container = self.container
        conn = container.connect(self.urls[router], reconnect=Backoff(), heartbeat=2)
        for s in senders:
            self._attacher(f"chaos-{s.spec.kind}", self._sender_attacher(s))(conn)
            if s.spec.replies:
                name = f"chaos-{s.spec.kind}-replies"
                self.requester_of[name] = s
                self._attacher(name, self._replies_attacher(s, name))(conn)
        for spec in consumed:
            name = spec.consumer(router)
            self.kind_of[name] = spec.kind
            self._attacher(name, self._receiver_attacher(spec, name))(conn)
            if spec.replies:
                self._attacher(f"chaos-responder-{router}", self._responder_attacher(router))(conn)

    def _attacher(self, name: str, attach: Any) -> Any:
        self.attach[name] = attach
        return attach

    def _sender_attacher(self, s: _Sender) -> Any:
        def attach(conn: Any) -> None:
            s.link = self.container.create_sender(conn, s.spec.address, name=f"chaos-{s.spec.kind}")

        return attach

    def _replies_attacher(self, s: _Sender, name: str) -> Any:
        def attach(conn: Any) -> None:
            s.replies = self.container.create_receiver(conn, None, dynamic=True, name=name)

        return attach

    def _receiver_attacher(self, spec: FlowSpec, name: str) -> Any:
        options = DurableSubscription() if spec.subscription else None

        def attach(conn: Any) -> None:
            self.receivers[name] = self.container.create_receiver(
                conn, spec.address, name=name, options=options
            )

        return attach

    def _responder_attacher(self, router: str) -> Any:
        def attach(conn: Any) -> None:
            waiting = self.responders[router][1] if router in self.responders else deque()
            link = self.container.create_sender(conn, None, name=f"chaos-responder-{router}")
            self.responders[router] = (link, waiting)

        return attach

    def on_connection_error(self, event: Any) -> None:
        self._connect_again(event)

    def on_connection_closing(self, event: Any) -> None:
        self._connect_again(event)

    def _connect_again(self, event: Any) -> None:
        """The router closed the connection (it drains before it stops): what was unsettled
        is sent again, and a new connection is made a second later, as an application would."""
        router = self.routers.get(event.connection.hostname)
        if router is None or self._stop.is_set():
            return
        for s in self.senders:
            if s.spec.sender == router:
                for mid in s.unsettled.values():
                    s.pending.appendleft((mid, True))
                s.unsettled.clear()
        self.container.schedule(1.0, _Call(lambda: self._open(router)))

    def on_timer_task(self, event: Any) -> None:
        if self._stop.is_set():
            event.container.stop()
            return
        receivers = [*self.receivers.values(), *(s.replies for s in self.senders if s.replies)]
        for link in receivers:
            # Proton re-opens a link after it reconnects, without the credit it had.
            if link.state & link.REMOTE_ACTIVE and link.credit < CREDIT // 2:
                link.flow(CREDIT - link.credit)
        for router in self.responders:
            self._answer(router)
        if not self.ready:
            self.ready = all(link.state & link.REMOTE_ACTIVE for link in receivers) or (
                time.monotonic() - self.started_at > READY_S
            )
        now = time.monotonic()
        for s in self.senders:
            for mid, since in list(s.awaiting.items()):
                if now - since > REPLY_TIMEOUT_S:
                    del s.awaiting[mid]
                    s.pending.appendleft((mid, True))
            if s.sending and self.ready:
                s.budget += s.per_tick
                while s.budget >= 1:
                    s.budget -= 1
                    s.pending.append((f"{s.spec.kind}-{s.next_id}", False))
                    s.next_id += 1
            self._send(s)
        event.container.schedule(TICK_S, self)

    def _send(self, s: _Sender) -> None:
        link = s.link
        reply_to = None
        if s.spec.replies and s.replies.state & s.replies.REMOTE_ACTIVE:
            reply_to = s.replies.remote_source.address
        can_send = reply_to is not None or not s.spec.replies  # a request needs its reply address
        while can_send and s.pending and link.credit > 0 and link.state & link.REMOTE_ACTIVE:
            mid, resend = s.pending.popleft()
            if mid in s.answered:
                continue  # its reply came while it waited to be asked again
            message = Message(id=mid, durable=s.spec.durable, body=mid, reply_to=reply_to)
            delivery = link.send(message)
            s.unsettled[delivery.tag] = mid
            self.ledger.sent(s.spec.kind, resend)
        if not s.pending:
            s.waiting_since = None
        elif s.waiting_since is None:
            s.waiting_since = time.monotonic()

    def on_sendable(self, event: Any) -> None:
        s = self._sender_of(event.link)
        if s is not None:
            self._send(s)

    def _sender_of(self, link: Any) -> _Sender | None:
        return next((s for s in self.senders if s.link.name == link.name), None)

    def _outcome(self, event: Any) -> tuple[_Sender, str] | None:
        s = self._sender_of(event.link)
        if s is None:
            return None
        mid = s.unsettled.pop(event.delivery.tag, None)
        return None if mid is None else (s, mid)

    def on_accepted(self, event: Any) -> None:
        found = self._outcome(event)
        if found is not None:
            s, mid = found
            self.ledger.accepted(s.spec.kind, mid)
            if s.spec.replies and mid not in s.answered:
                s.awaiting[mid] = time.monotonic()

    def on_released(self, event: Any) -> None:
        """Released or modified: the router did not deliver it; sent again."""
        found = self._outcome(event)
        if found is not None:
            found[0].pending.appendleft((found[1], True))

    def on_rejected(self, event: Any) -> None:
        self._outcome(event)  # the router refused it: not lost, not sent again

    def on_message(self, event: Any) -> None:
        name, message = event.link.name, event.message
        requester = self.requester_of.get(name)
        if requester is not None:  # a reply
            mid = str(message.correlation_id)
            self.ledger.received(requester.spec.kind, mid, name)
            requester.answered.add(mid)
            requester.awaiting.pop(mid, None)
        else:
            kind = self.kind_of.get(name)
            if kind is not None and message.id is not None:
                self.ledger.received(kind, str(message.id), name)
            router = self.routers.get(event.connection.hostname)
            if message.reply_to and router in self.responders:
                reply = Message(address=message.reply_to, correlation_id=message.id, body="done")
                self.responders[router][1].append(reply)
                self._answer(router)
        self.accept(event.delivery)

    def _answer(self, router: str) -> None:
        """Replies go presettled: one lost is asked for again by its requester."""
        link, waiting = self.responders[router]
        while waiting and link.credit > 0 and link.state & link.REMOTE_ACTIVE:
            link.send(waiting.popleft()).settle()

    def on_disconnected(self, event: Any) -> None:
        """What was unsettled on the lost connection may or may not have gone on: sent again."""
        for s in self.senders:
            if s.link is not None and s.link.connection.hostname == event.connection.hostname:
                for mid in s.unsettled.values():
                    s.pending.appendleft((mid, True))
                s.unsettled.clear()

    def on_link_closed(self, event: Any) -> None:
        self._attach_again(event)

    def on_link_error(self, event: Any) -> None:
        self._attach_again(event)

    def on_link_remote_detach(self, event: Any) -> None:
        """Detached, not closed (a durable subscription's link whose path went): detached here
        too, which keeps the subscription, and attached again."""
        self._attach_again(event, detach=True)

    def _attach_again(self, event: Any, detach: bool = False) -> None:
        """A link the router detached (a link-routed one whose far end went with its router,
        say): attached again a second later, as an application keeps its links, on the same
        connection (which proton re-opens, links and all, after it reconnects)."""
        link, conn = event.link, event.connection
        name = link.name
        if name in self.reattaching or name not in self.attach:
            return  # proton tells of a detach with an error twice: as an error, then closed
        self.reattaching.add(name)
        if detach:
            link.detach()
        else:
            link.close()
        s = self._sender_of(link) if link.is_sender else None
        if s is not None:
            for mid in s.unsettled.values():
                s.pending.appendleft((mid, True))
            s.unsettled.clear()

        def attach() -> None:
            self.reattaching.discard(name)
            self.attach[name](conn)

        self.container.schedule(1.0, _Call(attach))

    def on_transport_error(self, event: Any) -> None:
        pass  # reconnecting is the point: proton retries with its backoff


class _Call:
    """A timer's handler that calls ``fn``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        self.fn()
