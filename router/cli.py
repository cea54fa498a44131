"""The ``routernet-router`` command (also ``python -m router``): flags over a config file."""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any, NoReturn

from pydantic import ValidationError

from router.config import ConfigError, Listener, RouterConfig, read_config_file, validate_config
from router.log import FORMATS, LEVELS, configure, get_logger

PROG = "routernet-router"
USAGE_ERROR = 2


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so bad flags and bad config files are reported alike."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _listen_flag(text: str) -> Listener:
    host, sep, port = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise argparse.ArgumentTypeError(f"{text!r}: write an IPv6 host in brackets, [::1]:5672")
    try:
        return Listener.model_validate({"host": host or "0.0.0.0", "port": port})
    except ValidationError as err:
        raise argparse.ArgumentTypeError(
            str(ConfigError.from_validation(err, context=f"{text!r}: "))
        ) from None


def _parser() -> argparse.ArgumentParser:
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
        "--listen",
        metavar="HOST:PORT",
        action="append",
        type=_listen_flag,
        default=[],
        help="accept clients on HOST:PORT with default listener settings; [::1]:5672 for IPv6,"
        " :5672 for every IPv4 interface; repeatable; replaces the file's normal-role listeners",
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
    return parser


def _effective_config(args: argparse.Namespace) -> RouterConfig:
    """Applies flags to the raw file data, so what is validated is exactly what will run."""
    data: dict[str, Any] = read_config_file(args.config) if args.config is not None else {}
    if data.get("router") is None:
        data["router"] = {}
    router = data["router"]
    if isinstance(router, dict):
        if args.id is not None:
            router["id"] = args.id
        else:
            router.setdefault("id", socket.gethostname())
    if args.listen:
        listeners = data.get("listeners") or []
        if isinstance(listeners, list):
            kept = [
                entry
                for entry in listeners
                if not (isinstance(entry, dict) and entry.get("role", "normal") == "normal")
            ]
            data["listeners"] = kept + [listener.model_dump() for listener in args.listen]
    return validate_config(data)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        config = _effective_config(args)
    except (_UsageError, ConfigError) as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return USAGE_ERROR

    if args.check:
        print(config.model_dump_json(indent=2))
        return 0

    configure(args.log_level, args.log_format)
    get_logger("router").info(
        "config.loaded",
        file=args.config,
        id=config.router.id,
        mode=config.router.mode,
        listeners=len(config.listeners),
        addresses=len(config.addresses),
    )
    from router.engine import serve  # deferred: --check and usage errors need no engine

    return serve(config)
