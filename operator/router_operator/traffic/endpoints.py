"""Where ``send``, ``receive`` and ``request`` connect: the host of a global address
(``amqps://gw.example.com/(c)/node``), given URLs, or the running routers of a state directory,
and how connections are spread over them.

A URI with a host is the gateway to use, with TLS for ``amqps`` and SASL PLAIN when a user is
known (from the URI, else ``ROUTERNET_USER``; the key likewise from ``ROUTERNET_PASSWORD``, so
that it need not be on a command line). TLS always verifies the server's certificate and name:
against ``--ca FILE`` if given, else the system's CAs; there is deliberately no switch to turn
verification off (give the server's CA instead).

A state directory is read from its ``state.json`` and ``pids/`` (local.State, local.running_pid)
rather than through ``local.status``: that asks every router's ``$management``, which blocks for
seconds on a router that is going away, and the endpoints are read again every couple of
seconds from inside the event loop. A pod counts while /proc shows its router running; its first
client (normal) listener is its endpoint, as a Service's port would be on Kubernetes.

Spreading is what a Kubernetes Service does for new connections, made deterministic: ``k``
connections go round-robin over the endpoints (sorted, from an offset each process picks, so
that several senders do not all start on the first router). When the endpoints change, only
the difference moves: connections to routers that went away are dropped, routers that appeared
get new ones, and where a router now has more than its share the surplus is retired.
"""

from __future__ import annotations

import urllib.parse
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from router.addressing import GlobalAddress

DEFAULT_PORT = 5672
USER_VARIABLE = "ROUTERNET_USER"
PASSWORD_VARIABLE = "ROUTERNET_PASSWORD"


class EndpointError(Exception):
    """No usable endpoint (bad URL, no network, no such Router); the message is one line."""


@dataclass(frozen=True)
class Security:
    """How connections are opened: TLS (``tls``: verified against ``ca``, or the system's CAs;
    ``cert``/``key``: a client certificate) and SASL PLAIN (``user``). The default is what
    plain ``amqp://`` endpoints get: neither."""

    tls: bool = False
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    user: str | None = None
    password: str | None = None


def uri_endpoint(address: GlobalAddress) -> str:
    """The ``scheme://host:port`` to connect to for a URI with a host."""
    assert address.host is not None and address.scheme is not None
    host = f"[{address.host}]" if ":" in address.host else address.host
    return f"{address.scheme}://{host}:{address.default_port()}"


def uri_security(
    address: GlobalAddress,
    environ: Mapping[str, str],
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
) -> Security:
    """TLS and credentials for connecting to ``address``'s host. The URI's user and key win
    over the environment's."""
    tls = address.scheme == "amqps"
    if (ca or cert or key) and not tls:
        raise EndpointError("--ca, --cert and --key are for amqps:// URIs")
    if (cert is None) != (key is None):
        raise EndpointError("--cert and --key go together")
    for option, path in (("--ca", ca), ("--cert", cert), ("--key", key)):
        if path is not None and not Path(path).is_file():
            raise EndpointError(f"{option} {path}: no such file")
    user = address.user if address.user is not None else environ.get(USER_VARIABLE) or None
    password = address.key if address.key is not None else environ.get(PASSWORD_VARIABLE)
    if user is not None and password is None:
        raise EndpointError(
            f"no password for user {user!r}: give it in the URI (user:key@host) or"
            f" {PASSWORD_VARIABLE}"
        )
    return Security(tls, ca, cert, key, user, password if user is not None else None)


def parse_url(text: str) -> str:
    """``amqp://host[:port]`` or ``host[:port]``, as ``amqp://host:port``."""
    raw = text.strip()
    if "://" not in raw:
        raw = f"amqp://{raw}"
    try:
        parts = urllib.parse.urlsplit(raw)
        port = parts.port
    except ValueError as err:
        raise EndpointError(f"bad URL {text!r}: {err}") from None
    if parts.scheme != "amqp":
        raise EndpointError(f"bad URL {text!r}: only amqp:// is supported (no TLS here)")
    if not parts.hostname:
        raise EndpointError(f"bad URL {text!r}: no host")
    if parts.username is not None or parts.password is not None:
        raise EndpointError(f"bad URL {text!r}: credentials are not supported")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise EndpointError(f"bad URL {text!r}: give scheme, host and port only")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return f"amqp://{host}:{port or DEFAULT_PORT}"


def state_endpoints(state_dir: Path, router: str | None = None) -> list[str]:
    """The client endpoints (``amqp://host:port``) of the pods running in ``state_dir``, of
    Router ``router`` only if given, sorted. Raises EndpointError when the directory holds no
    network or ``router`` is none of its Routers; an empty list is a network with no router
    running (yet, or any more)."""
    from router_operator.local import backend as local

    state_dir = state_dir.resolve()
    try:
        state = local.State.load(state_dir) if state_dir.is_dir() else None
    except local.LocalError as err:
        raise EndpointError(str(err)) from None
    if state is None:
        raise EndpointError(
            f"no network in {local.shown_path(str(state_dir))}: start one with `routernet up`,"
            " or give --url"
        )
    pods = state.pods
    if router is not None:
        pods = {name: pod for name, pod in pods.items() if pod.get("router") == router}
        if not pods:
            known = sorted({str(pod.get("router")) for pod in state.pods.values()})
            raise EndpointError(
                f"no Router {router!r} in the network (Routers: {', '.join(known)})"
            )
    found = []
    for name, pod in sorted(pods.items()):
        clients = pod.get("clientEndpoints") or []
        if clients and local.running_pid(state_dir, name) is not None:
            found.append(f"amqp://{clients[0]}")
    return sorted(found)


def spread(endpoints: Sequence[str], connections: int | None, offset: int = 0) -> Counter[str]:
    """How many connections each endpoint gets: ``connections`` round-robin over the sorted
    endpoints starting at ``offset``, or one each when ``connections`` is None."""
    ordered = sorted(set(endpoints))
    if not ordered:
        return Counter()
    if connections is None:
        return Counter(ordered)
    start = offset % len(ordered)
    return Counter(ordered[(start + i) % len(ordered)] for i in range(connections))


def rebalance(
    current: Mapping[str, int], wanted: Mapping[str, int]
) -> tuple[Counter[str], Counter[str]]:
    """From ``current`` (endpoint -> connections held) to ``wanted``: (connections to open,
    connections to retire) per endpoint. Only the difference moves."""
    to_open: Counter[str] = Counter()
    to_retire: Counter[str] = Counter()
    for endpoint in set(current) | set(wanted):
        difference = wanted.get(endpoint, 0) - current.get(endpoint, 0)
        if difference > 0:
            to_open[endpoint] = difference
        elif difference < 0:
            to_retire[endpoint] = -difference
    return to_open, to_retire
