"""The arguments of ``routernet send``, ``receive`` and ``request``, their errors and output.

cli/main.py owns the ``routernet`` parser and only adds these subcommands' arguments and calls
``send``/``receive``/``request``; everything else is here. The event loops (sender.py,
receiver.py, request.py) are imported only when a command runs.

The ADDRESS of each is a global address (router/addressing/uri.py). With a host
(``amqps://gw.example.com/(london-branch-34)/atm``) the command connects there, with TLS for
``amqps`` and PLAIN credentials from the URI or the environment (endpoints.py); a bare form
(``orders``, ``(c)/node``, ``()/control``, ``$x``) goes to the state dir's routers or ``--url``.
Either way the links attach to the routing address, ``(c)/node`` or ``node``.

Output contract (the autoscaling test and the bench read it): progress lines on stderr, one
JSON summary line on stdout (and in ``--summary FILE``), after one JSON line per message with
``receive --print``; exit 0 when every message sent ended accepted or rejected (send) or
``--count`` was reached (receive), 1 otherwise (no router reached within ``--wait`` seconds
among them, with the connection's error), 2 for an error found before any traffic (bad
address, URL or ramp, no endpoints), each one line. ``request`` prints the reply as one JSON
line and exits 0, or 1 (no reply: timeout, refused, connection lost), or 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from router.addressing import AddressError, parse_uri
from router_operator.traffic.endpoints import (
    EndpointError,
    Security,
    parse_url,
    state_endpoints,
    uri_endpoint,
    uri_security,
)
from router_operator.traffic.rate import RampError, schedule_for

DEFAULT_BODY_SIZE = 100
WAIT_SECONDS = 10.0
"""How long send and receive try to reach a first router by default (--wait): a router that
is starting is there within a few seconds, and a wrong URL is said after a few tries."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def _natural(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 0")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number >= 0")
    return value


def _property(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _where(parser: argparse.ArgumentParser) -> None:
    """The address and where to connect: what every command has."""
    parser.add_argument(
        "address",
        metavar="ADDRESS",
        help="a node (orders, $x), (container)/node, ()/node, or a URI with a host to connect"
        " to: amqp[s]://[user[:key]@]host[:port]/[(container)/]node",
    )
    parser.add_argument(
        "--router",
        metavar="NAME",
        help="only the pods of this Router of the state dir's network (default: every pod)",
    )
    parser.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help="connect here (amqp://host:port; repeatable) instead of the state dir's routers",
    )
    parser.add_argument(
        "--ca", metavar="FILE", help="amqps: trust this CA (PEM) instead of the system's"
    )
    parser.add_argument("--cert", metavar="FILE", help="amqps: a client certificate (PEM)")
    parser.add_argument("--key", metavar="FILE", help="amqps: the client certificate's key")


def _message_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--subject", metavar="S", help="the messages' subject")
    parser.add_argument(
        "--property",
        type=_property,
        action="append",
        metavar="K=V",
        help="an application property (a string; repeatable)",
    )


def _common(parser: argparse.ArgumentParser) -> None:
    _where(parser)
    parser.add_argument(
        "--count", type=_positive_int, metavar="N", help="stop after N distinct messages"
    )
    parser.add_argument("--duration", type=_seconds, metavar="S", help="stop after S seconds")
    parser.add_argument(
        "--summary", type=Path, metavar="FILE", help="also write the JSON summary line here"
    )
    parser.add_argument(
        "--wait",
        type=_seconds,
        default=WAIT_SECONDS,
        metavar="SECONDS",
        help="try to reach a router for this long, then exit 1 with the connection's error"
        " (default: %(default)g; once attached, lost connections are retried while it runs)",
    )


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """``send``, ``receive`` and ``request`` as subcommands (``commands``: the add_subparsers
    result; ``common``: the parent parser with ``--state-dir``)."""
    add_send_arguments(
        commands.add_parser(
            "send",
            parents=[common],
            help="send messages to ADDRESS through the network until each is accepted",
            description=(
                "Unsettled messages with unique ids, at a rate or a ramp, over connections"
                " spread across the routers (re-read every 2 s); released, modified or lost"
                " ones are sent again. Prints progress on stderr and a JSON summary on stdout."
            ),
        )
    )
    add_receive_arguments(
        commands.add_parser(
            "receive",
            parents=[common],
            help="consume ADDRESS on every router, accepting, counting duplicates",
            description=(
                "A consumer link on every router (re-read every 2 s) that accepts every"
                " message and counts distinct message-ids and duplicates; a JSON summary on"
                " stdout."
            ),
        )
    )
    add_request_arguments(
        commands.add_parser(
            "request",
            parents=[common],
            help="send one request to ADDRESS and print the reply",
            description=(
                "One connection: a reply link with a dynamic address, then the request with"
                " reply-to set to it. Prints the reply as a JSON line (body, properties,"
                " application_properties); exit 1 when none comes."
            ),
        )
    )


def add_send_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument(
        "--rate",
        type=float,
        metavar="R",
        help="new messages per second, steady (default 0: as fast as credit allows)",
    )
    pace.add_argument(
        "--ramp",
        metavar="SPEC",
        help="msgs/s piecewise-linear over seconds since start: T0:R0,T1:R1,... (e.g."
        " 0:100,20:3000,60:3000,80:0; ending at rate 0 ends sending there)",
    )
    body = parser.add_mutually_exclusive_group()
    body.add_argument(
        "--body-size",
        type=_natural,
        default=DEFAULT_BODY_SIZE,
        metavar="BYTES",
        help="bytes of body per message (default: %(default)s)",
    )
    body.add_argument("--body", metavar="TEXT", help="this string as every message's body")
    _message_arguments(parser)
    parser.add_argument(
        "--durable",
        action="store_true",
        help="durable messages: a queue's host accepts each once its store has it",
    )
    parser.add_argument(
        "--connections",
        type=_positive_int,
        metavar="K",
        help="connections spread round-robin over the routers (default: one per router)",
    )


def add_receive_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument(
        "--idle",
        type=_seconds,
        default=0.0,
        metavar="S",
        help="stop after S seconds without a message (default 0: never)",
    )
    parser.add_argument(
        "--print",
        action="store_true",
        help="each message as a JSON line on stdout (body, properties, application_properties)",
    )


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    _where(parser)
    parser.add_argument("--body", metavar="TEXT", help="the request's body (a string)")
    _message_arguments(parser)
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="give up after S seconds without a reply (default: %(default)s)",
    )


@dataclass(frozen=True)
class Target:
    """Where a command's links go, the same for every command whichever form ADDRESS has."""

    address: str
    """The routing address the links attach to."""
    source: Callable[[], list[str]]
    security: Security


def _target(args: argparse.Namespace) -> Target:
    """What ADDRESS and the options name, checked now (AddressError, EndpointError: the
    command's one-line error)."""
    address = parse_uri(args.address, require_node=True)
    if address.host is None:
        if args.ca or args.cert or args.key:
            raise EndpointError("--ca, --cert and --key are for amqps:// URIs")
        return Target(address.routing_address(), _source(args), Security())
    if args.url or args.router is not None:
        # Not the address itself in the message: it may hold a key.
        raise EndpointError(f"ADDRESS names its host ({address.host}): not with --url or --router")
    security = uri_security(address, os.environ, args.ca, args.cert, args.key)
    endpoint = uri_endpoint(address)
    return Target(address.routing_address(), lambda: [endpoint], security)


def _properties(args: argparse.Namespace) -> dict[str, str]:
    return dict(args.property or [])


def _source(args: argparse.Namespace) -> Callable[[], list[str]]:
    """The state dir's routers or --url (EndpointError: the command's one-line error)."""
    if args.url:
        if args.router is not None:
            raise EndpointError("--router picks pods of the state dir's network: not with --url")
        urls = sorted({parse_url(url) for url in args.url})
        return lambda: list(urls)
    state_dir: Path = args.state_dir
    router: str | None = args.router
    if not state_endpoints(state_dir, router):
        whose = f" of Router {router!r}" if router else ""
        raise EndpointError(
            f"no router endpoints found: no router{whose} is running in {state_dir}"
            " (`routernet status`)"
        )
    return lambda: state_endpoints(state_dir, router)


def send(args: argparse.Namespace, prog: str) -> int:
    name = f"{prog} send"
    properties = _properties(args)
    if "seq" in properties:
        return _error(name, "--property seq: send sets seq itself (each message's number)")
    try:
        schedule = schedule_for(args.rate, args.ramp)
        target = _target(args)
    except RampError as err:
        what = f"--ramp {args.ramp!r}" if args.ramp is not None else f"--rate {args.rate:g}"
        return _error(name, f"bad {what}: {err}")
    except (AddressError, EndpointError) as err:
        return _error(name, str(err))
    from router_operator.traffic.sender import SendOptions, TrafficSender

    # ()/node is resolved per message by the gateway rules, which look at the message: it goes
    # on the anonymous relay, not on a link, whose attach would be resolved once.
    anonymous = target.address.startswith("()/")
    options = SendOptions(
        address=None if anonymous else target.address,
        to=target.address if anonymous else None,
        source=target.source,
        connections=args.connections,
        count=args.count,
        duration=args.duration,
        schedule=schedule,
        body_size=args.body_size,
        body=args.body,
        subject=args.subject,
        properties=properties,
        durable=args.durable,
        security=target.security,
        wait=args.wait,
    )
    sender = TrafficSender(options, _reporter(name))
    with _stop_on_signals(sender.request_stop):
        summary = sender.run()
    if summary.unresolved:
        _reporter(name)(f"{summary.unresolved} messages neither accepted nor rejected")
    failed = summary.unresolved or sender.failure is not None
    return _emit(name, summary.record(), args.summary) or (1 if failed else 0)


def receive(args: argparse.Namespace, prog: str) -> int:
    name = f"{prog} receive"
    try:
        target = _target(args)
    except (AddressError, EndpointError) as err:
        return _error(name, str(err))
    from router_operator.traffic.receiver import ReceiveOptions, TrafficReceiver
    from router_operator.traffic.records import message_line

    options = ReceiveOptions(
        address=target.address,
        source=target.source,
        count=args.count,
        duration=args.duration,
        idle=args.idle,
        security=target.security,
        wait=args.wait,
        show=(lambda message: print(message_line(message), flush=True)) if args.print else None,
    )
    receiver = TrafficReceiver(options, _reporter(name))
    with _stop_on_signals(receiver.request_stop):
        summary = receiver.run()
    short = args.count is not None and summary.distinct < args.count
    failed = short or receiver.failure is not None
    return _emit(name, summary.record(), args.summary) or (1 if failed else 0)


def request(args: argparse.Namespace, prog: str) -> int:
    name = f"{prog} request"
    try:
        target = _target(args)
        endpoints = target.source()
    except (AddressError, EndpointError) as err:
        return _error(name, str(err))
    from router_operator.traffic.records import message_line
    from router_operator.traffic.request import Requester, RequestOptions

    options = RequestOptions(
        address=target.address,
        endpoint=endpoints[0],
        body=args.body,
        subject=args.subject,
        properties=_properties(args),
        security=target.security,
        timeout=args.timeout,
    )
    requester = Requester(options)
    with _stop_on_signals(requester.request_stop):
        result = requester.run()
    if result.reply is None:
        _reporter(name)(result.problem or "no reply")
        return 1
    print(message_line(result.reply), flush=True)
    return 0


def _error(name: str, message: str) -> int:
    print(f"{name}: {message}", file=sys.stderr)
    return 2


def _reporter(name: str) -> Callable[[str], None]:
    def report(line: str) -> None:
        print(f"{name}: {line}", file=sys.stderr, flush=True)

    return report


def _emit(name: str, record: dict[str, Any], path: Path | None) -> int:
    """The summary on stdout and in ``path``; 0, or 1 when the file cannot be written."""
    line = json.dumps(record)
    print(line, flush=True)
    if path is not None:
        try:
            path.write_text(line + "\n")
        except OSError as err:
            print(f"{name}: --summary {path}: {err.strerror or err}", file=sys.stderr)
            return 1
    return 0


@contextlib.contextmanager
def _stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGINT/SIGTERM ask the loop to stop (send: finish, then a second one stops at once)
    instead of raising in the middle of proton's event handling."""

    def handler(signum: int, frame: object) -> None:
        stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
