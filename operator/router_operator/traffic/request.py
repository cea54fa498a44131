"""``routernet request``: one request, its reply on a dynamic address.

One connection with two links: a receiver with a dynamic source, whose address the router
makes up (so that the reply finds its way back through the network, to this link only), and a
sender attached to the request's address. The request goes once the reply address is known and
the router has given credit, which it does only when the address has a consumer somewhere: a
request to nobody waits for credit and ends at the timeout, rather than being released.

A request is sent once: an outcome other than accepted (rejected, released, modified) ends the
run at once, as does a connection or link the router refuses or closes; there is no retry,
since the responder may already have acted on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proton import Delivery, Endpoint, Event, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from router_operator.traffic.endpoints import Security
from router_operator.traffic.pool import CLOSE_SECONDS, Call, connect_options

TIMEOUT = 10.0

_REFUSED = {
    Delivery.REJECTED: "rejected",
    Delivery.RELEASED: "released",
    Delivery.MODIFIED: "modified",
}


@dataclass(frozen=True)
class RequestOptions:
    address: str
    endpoint: str
    """Where to connect (``amqp[s]://host:port``)."""
    body: str | None = None
    subject: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    security: Security | None = None
    timeout: float = TIMEOUT


@dataclass(frozen=True)
class RequestResult:
    reply: Message | None
    problem: str | None
    """Why there is no reply (one line)."""


class Requester(MessagingHandler):  # type: ignore[misc]
    """The container's handler; ``run()`` returns the result, ``request_stop()`` (safe in a
    signal handler) ends the wait."""

    def __init__(self, options: RequestOptions) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        self.options = options
        self.id = str(uuid.uuid4())
        self.container: Any = None
        self.conn: Any = None
        self.sender: Any = None
        self.receiver: Any = None
        self.reply_to: str | None = None
        self.sent = False
        self.reply: Message | None = None
        self.problem: str | None = None
        self.stop_requested = False
        self._timer: Any = None
        self._finished = False

    def run(self) -> RequestResult:
        self.container = container = Container(self)
        container.container_id = f"routernet-request-{self.id}"
        container.run()
        if self.reply is None and self.problem is None:
            self.problem = "stopped before a reply"
        return RequestResult(self.reply, self.problem)

    def request_stop(self) -> None:
        self.stop_requested = True

    def on_start(self, event: Event) -> None:
        options, container = self.options, self.container
        self.conn = container.connect(
            options.endpoint,
            reconnect=False,
            **connect_options(options.security or Security()),
        )
        self.receiver = container.create_receiver(self.conn, None, dynamic=True)
        self.sender = container.create_sender(self.conn, options.address)
        self._timer = container.schedule(options.timeout, Call(self._timed_out))
        container.schedule(0.1, Call(self._watch_stop))

    def _watch_stop(self) -> None:
        if self._finished:
            return
        if self.stop_requested:
            self._finish("stopped before a reply")
        else:
            self.container.schedule(0.1, Call(self._watch_stop))

    def _timed_out(self) -> None:
        self._timer = None
        if self.reply_to is None:
            why = "no reply address from the router"
        elif not self.sent:
            why = f"no credit to send to {self.options.address!r} (no consumer?)"
        else:
            why = "no reply"
        self._finish(f"{why} within {self.options.timeout:g} s")

    def _finish(self, problem: str | None) -> None:
        if self._finished:
            return
        self._finished = True
        self.problem = problem
        if self._timer is not None:
            self._timer.cancel()
        if self.conn is not None and self.conn.state & Endpoint.LOCAL_ACTIVE:
            self.conn.close()
            self.container.schedule(CLOSE_SECONDS, Call(self.container.stop))
        else:
            self.container.stop()

    def _send(self) -> None:
        if self.sent or self.reply_to is None or self.sender.credit <= 0:
            return
        options = self.options
        message = Message(
            id=f"{self.id}:0",
            reply_to=self.reply_to,
            subject=options.subject,
            properties=dict(options.properties) or None,
            body=options.body,
        )
        self.sender.send(message)
        self.sent = True

    # --- proton events ------------------------------------------------------------------------

    def on_link_opened(self, event: Event) -> None:
        if event.link == self.receiver:
            self.reply_to = self.receiver.remote_source.address
            if not self.reply_to:
                self._finish("the router gave the reply link no address")
                return
            self.receiver.flow(1)
        self._send()

    def on_sendable(self, event: Event) -> None:
        self._send()

    def on_settled(self, event: Event) -> None:
        delivery = event.delivery
        refused = _REFUSED.get(delivery.remote_state)
        if delivery.link == self.sender and refused is not None:
            condition = delivery.remote.condition
            detail = f": {condition.name}: {condition.description}" if condition else ""
            self._finish(f"the request was {refused}{detail}")

    def on_message(self, event: Event) -> None:
        if event.receiver != self.receiver or self._finished:
            return
        event.delivery.update(Delivery.ACCEPTED)
        event.delivery.settle()
        self.reply = event.message
        self._finish(None)

    def on_link_error(self, event: Event) -> None:
        condition = event.link.remote_condition
        which = "reply link" if event.link == self.receiver else "link"
        self._finish(f"{which} refused: {condition.name}: {condition.description}")

    def on_link_closing(self, event: Event) -> None:
        self._finish("the router closed a link")

    def on_connection_error(self, event: Event) -> None:
        condition = event.connection.remote_condition
        self._finish(f"connection closed: {condition.name}: {condition.description}")

    def on_connection_closing(self, event: Event) -> None:
        self._finish("connection closed by the router")

    def on_transport_error(self, event: Event) -> None:
        condition = event.transport.condition
        reason = f"{condition.name}: {condition.description}" if condition else "transport error"
        self._finish(f"{self.options.endpoint}: {reason}")

    def on_transport_closed(self, event: Event) -> None:
        if self._finished:
            self.container.stop()
        else:
            self._finish(f"{self.options.endpoint}: connection lost")
