"""The ``routernet-router`` command (also ``python -m router``): flags over a config file.

The router process never validates its configuration itself: pydantic and the models would be
a third of its memory for good (router/configviews.py). It parses its flags only as far as it
needs them, has a child process (router/configcheck.py, the same flags) validate them and the
file, and runs on the records built from what the child printed; so do live changes later.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from router.configviews import ConfigError, config_text
from router.log import FORMATS, LEVELS, configure, get_logger

PROG = "routernet-router"
USAGE_ERROR = 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so bad flags and bad config files are reported alike."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parser(checked: bool = False) -> argparse.ArgumentParser:
    """The command's flags. ``checked``: --listen, --connect and the like validated as they
    are parsed (router/configcheck.py, with pydantic); unchecked, as the router process parses
    them only for what it needs itself (logging, the file to follow, --check, --help), and
    leaves the rest to the child that validates."""
    listen: Callable[[str], Any] = str
    listen_inter: Callable[[str], Any] = str
    listen_edge: Callable[[str], Any] = str
    connect: Callable[[str], Any] = str
    if checked:
        from router.configcheck import connect_flag, listen_flag

        listen, listen_inter, listen_edge = (
            listen_flag(role) for role in ("normal", "inter-router", "edge")
        )
        connect = connect_flag
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
        type=listen,
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
    # ConfigMap validated (router/configchild.py).
    parser.add_argument("--config-stdin", metavar="NAME", help=argparse.SUPPRESS)
    # Validate configs one after another, as sent on standard input, until SECONDS pass without
    # one: the warm validator a running router keeps while its configuration changes.
    parser.add_argument("--serve", type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser().parse_args(argv)
    except UsageError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return USAGE_ERROR
    if args.check or args.config_stdin is not None or args.serve is not None:
        from router.configcheck import main as check

        return check(argv)
    from router.configchild import ChildValidator

    validate = ChildValidator(argv)
    try:
        # Read here and handed to the child, so that the file's follower knows what runs.
        text = config_text(args.config) if args.config is not None else None
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return USAGE_ERROR
    pending = validate.start(text, args.config)
    # While the child validates (~0.3 s, another core): what running takes.
    from router.engine import serve
    from router.podstatus import pod_status_sources
    from router.reconfigure import config_sources

    try:
        config = pending.result()
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return USAGE_ERROR

    configure(args.log_level, args.log_format)
    get_logger("router").info(
        "config.loaded",
        file=args.config,
        id=config.router.id,
        mode=config.router.mode,
        listeners=len(config.listeners),
        connectors=len(config.connectors),
        addresses=len(config.addresses),
    )
    sources = config_sources(args.config, validate, os.environ, known=text)
    return serve(config, [*sources, *pod_status_sources(os.environ)])  # router/podstatus.py
