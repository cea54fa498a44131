"""Clients the end-to-end suite runs inside the cluster, in a pod of the router image (Python and
python-qpid-proton are there), for what `routernet send`, `receive` and `request` do not do:

    peer.py echo URL ADDRESS SECONDS          a service: replies to each request, upper-cased
    peer.py consume URL NODE CONTAINER COUNT SECONDS
                                              a consumer whose connection's container-id is
                                              CONTAINER: (CONTAINER)/NODE reaches it
    peer.py query URL TYPE ATTRIBUTE...       a management QUERY, as qdstat sends it
    peer.py intrude HOST PORT                 tries the routers' own port as a stranger: plain
                                              AMQP, then TLS without a client certificate;
                                              what became of each
    peer.py vhost URL VHOST ADDRESS...        connects naming VHOST in its Open and attaches
                                              a sender to each ADDRESS: what the router's
                                              policy said to each ("ok" or its condition)

Each prints one JSON line and exits 0 when it did what was asked, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection


class Echo(MessagingHandler):
    def __init__(self, url: str, address: str, seconds: float) -> None:
        super().__init__()
        self.url, self.address, self.seconds = url, address, seconds
        self.answered = 0

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url)
        event.container.create_receiver(self.connection, self.address)
        self.replies = event.container.create_sender(self.connection, None)
        event.container.schedule(self.seconds, self)

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None:
            print(f"serving {self.address}", file=sys.stderr, flush=True)

    def on_message(self, event: Any) -> None:
        request = event.message
        self.replies.send(
            Message(
                address=request.reply_to,
                correlation_id=request.correlation_id,
                body=str(request.body).upper(),
            )
        )
        self.answered += 1

    def on_timer_task(self, event: Any) -> None:
        self.connection.close()


class Consume(MessagingHandler):
    def __init__(self, url: str, node: str, count: int) -> None:
        super().__init__()
        self.url, self.node, self.count = url, node, count
        self.bodies: list[Any] = []

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url)
        event.container.create_receiver(self.connection, self.node)

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None:
            print(f"consuming {self.node}", file=sys.stderr, flush=True)

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)
        if len(self.bodies) >= self.count:
            self.connection.close()


def consume(url: str, node: str, container_id: str, count: int, seconds: float) -> int:
    handler = Consume(url, node, count)
    container = Container(handler)
    container.container_id = container_id
    container.schedule(seconds, _Stop(handler))
    container.run()
    print(json.dumps({"received": len(handler.bodies), "bodies": handler.bodies}))
    return 0 if len(handler.bodies) >= count else 1


class _Stop:
    def __init__(self, handler: Any) -> None:
        self.handler = handler

    def on_timer_task(self, event: Any) -> None:
        self.handler.connection.close()


def query(url: str, entity_type: str, attributes: list[str]) -> int:
    connection = BlockingConnection(url, timeout=30)
    try:
        replies = connection.create_receiver(None, dynamic=True)
        agent = connection.create_sender("$management")
        properties = {
            "operation": "QUERY",
            "type": "org.amqp.management",
            "name": "self",
            "entityType": entity_type,
        }
        request = Message(
            reply_to=replies.remote_source.address,
            correlation_id="e2e",
            properties=properties,
            body={"attributeNames": attributes},
        )
        agent.send(request)
        response = replies.receive(timeout=30)  # settled by the agent: nothing to accept
    finally:
        connection.close()
    status = (response.properties or {}).get("statusCode")
    if status != 200:
        print(json.dumps({"status": status, "error": response.properties}))
        return 1
    names = response.body["attributeNames"]
    print(json.dumps([dict(zip(names, row, strict=True)) for row in response.body["results"]]))
    return 0


def intrude(host: str, port: str) -> int:
    from proton import ProtonException, SSLDomain

    said = {}
    for how, url, domain in (
        ("plain", f"amqp://{host}:{port}", None),
        ("tls-without-certificate", f"amqps://{host}:{port}", SSLDomain(SSLDomain.MODE_CLIENT)),
    ):
        if domain is not None:
            domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
        try:
            connection = BlockingConnection(url, timeout=30, ssl_domain=domain)
            connection.create_receiver("qd.router", name="intruder")
            said[how] = "admitted"
            connection.close()
        except ProtonException as err:  # a connection, link or TLS failure
            said[how] = f"refused: {type(err).__name__}: {str(err)[:200]}"
    print(json.dumps(said))
    return 0


def vhost(url: str, name: str, addresses: list[str]) -> int:
    from proton.utils import ConnectionClosed, LinkDetached

    said: dict[str, str] = {}
    try:
        connection = BlockingConnection(url, timeout=30, virtual_host=name)
    except ConnectionClosed as err:
        # What the exception says: by now the connection it names is gone, its condition too.
        print(json.dumps({"connection": f"refused: {err}"}))
        return 0
    for address in addresses:
        try:
            connection.create_sender(address, name=address)
            said[address] = "ok"
        except LinkDetached as err:
            cond = err.link.remote_condition
            said[address] = f"{cond.name}: {cond.description}" if cond else "detached"
    connection.close()
    print(json.dumps({"connection": "ok", "links": said}))
    return 0


def main(argv: list[str]) -> int:
    command, args = argv[0], argv[1:]
    if command == "echo":
        url, address, seconds = args
        handler = Echo(url, address, float(seconds))
        Container(handler).run()
        print(json.dumps({"answered": handler.answered}))
        return 0
    if command == "consume":
        url, node, container_id, count, seconds = args
        return consume(url, node, container_id, int(count), float(seconds))
    if command == "query":
        url, entity_type, *attributes = args
        return query(url, entity_type, attributes)
    if command == "intrude":
        host, port = args
        return intrude(host, port)
    if command == "vhost":
        url, name, *addresses = args
        return vhost(url, name, addresses)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
