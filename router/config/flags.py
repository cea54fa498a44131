"""The ``routernet-router`` command's flags, for both of its halves: the router process
(router/cli.py) parses them only as far as it needs them, and the child that validates them
and the config file (router/config/check.py) parses the same flags, checked. Here, below
both, so that neither imports the other for them, and without pydantic, which the router
process does not load.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Callable
from typing import Any, NoReturn

from router.log import FORMATS, LEVELS

# How one flag's text is parsed (an argparse ``type``).
FlagType = Callable[[str], Any]

PROG = "routernet-router"
USAGE_ERROR = 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so bad flags and bad config files are reported alike."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _as_text(role: str) -> FlagType:
    """A listener flag of any role as the router process parses it: the text as given."""
    return str


def parser(
    listen: Callable[[str], FlagType] = _as_text, connect: FlagType = str
) -> argparse.ArgumentParser:
    """The command's flags. ``listen`` (given a listener role: normal, inter-router, edge) and
    ``connect`` parse --listen, --inter-router-listen, --edge-listen and --connect: the child
    that validates passes its checked ones (router/config/check.py, with pydantic, which this
    module does not import); by default they stay text, as the router process parses its flags
    only for what it needs itself (logging, the file to follow, --check, --help), and leaves
    the rest to that child."""
    listen_normal, listen_inter, listen_edge = (
        listen(role) for role in ("normal", "inter-router", "edge")
    )
    parser = _Parser(
        prog=PROG,
        description="Run an AMQP 1.0 router. Flags override the config file.",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config file: JSON if it ends in .json, YAML otherwise",
    )
    parser.add_argument(
        "--id",
        metavar="NAME",
        help="router id, replacing router.id from the file; if neither gives one,"
        f" the host name is used (here: {socket.gethostname()})",
    )
    parser.add_argument(
        "--mode",
        choices=["standalone", "interior", "edge"],
        help="router mode, replacing router.mode from the file (default: standalone)",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        action="append",
        type=listen_normal,
        default=[],
        help="accept clients on HOST:PORT with default listener settings; [::1]:5672 for IPv6,"
        " :5672 for every IPv4 interface; repeatable; replaces the file's normal-role listeners",
    )
    parser.add_argument(
        "--inter-router-listen",
        metavar="HOST:PORT",
        action="append",
        type=listen_inter,
        default=[],
        help="accept interior routers on HOST:PORT (mode interior); repeatable; replaces the"
        " file's inter-router listeners",
    )
    parser.add_argument(
        "--edge-listen",
        metavar="HOST:PORT",
        action="append",
        type=listen_edge,
        default=[],
        help="accept edge routers on HOST:PORT (mode interior); repeatable; replaces the file's"
        " edge listeners",
    )
    parser.add_argument(
        "--connect",
        metavar="HOST:PORT[,cost=N]",
        action="append",
        type=connect,
        default=[],
        help="keep a connection to the router at HOST:PORT: an inter-router connector in mode"
        " interior (cost=N: its cost, default 1), an edge connector in mode edge; the host may"
        " not resolve yet; repeatable; replaces the file's connectors of that role",
    )
    parser.add_argument(
        "--drain-seconds",
        metavar="SECONDS",
        type=float,
        help="on SIGTERM/SIGINT, wait this long at most for the deliveries the router holds to"
        " be settled before it closes (a second signal ends the wait); replaces"
        " router.drainTimeoutSeconds from the file (default: 10)",
    )
    parser.add_argument("--log-level", choices=list(LEVELS), default="info")
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text: logfmt lines; json: one JSON object per line (default: %(default)s)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate, print the effective config as JSON and exit",
    )
    # The config's text on standard input instead of --config's file, NAME saying what it is
    # (a .json name: JSON; else YAML) in errors: how a running router has a changed file or
    # ConfigMap validated (router/config/child.py).
    parser.add_argument("--config-stdin", metavar="NAME", help=argparse.SUPPRESS)
    # Validate configs one after another, as sent on standard input, until SECONDS pass without
    # one: the warm validator a running router keeps while its configuration changes.
    parser.add_argument("--serve", type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    return parser
