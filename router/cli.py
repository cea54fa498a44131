"""The ``routernet-router`` command (also ``python -m router``): flags over a config file."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn

from pydantic import ValidationError

from router import tls
from router.config import (
    ConfigError,
    Connector,
    Listener,
    RouterConfig,
    read_config_file,
    validate_config,
)
from router.log import FORMATS, LEVELS, configure, get_logger

PROG = "routernet-router"
USAGE_ERROR = 2


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so bad flags and bad config files are reported alike."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


# The connector role --connect gives, per router mode.
CONNECT_ROLES = {"interior": "inter-router", "edge": "edge"}


def _host_port(text: str) -> tuple[str, str]:
    host, sep, port = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise argparse.ArgumentTypeError(f"{text!r}: write an IPv6 host in brackets, [::1]:5672")
    return host, port


def _type_error(err: ValidationError, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(str(ConfigError.from_validation(err, context=f"{text!r}: ")))


def _listen_flag(role: str) -> Any:
    def parse(text: str) -> Listener:
        host, port = _host_port(text)
        try:
            return Listener.model_validate({"host": host or "0.0.0.0", "port": port, "role": role})
        except ValidationError as err:
            raise _type_error(err, text) from None

    return parse


def _connect_flag(text: str) -> dict[str, Any]:
    """HOST:PORT[,cost=N]: the connector's role comes later, from the router's mode."""
    address, _, options = text.partition(",")
    host, port = _host_port(address)
    entry: dict[str, Any] = {"host": host, "port": port}
    for option in options.split(",") if options else []:
        key, sep, value = option.partition("=")
        if key.strip() != "cost" or not sep:
            raise argparse.ArgumentTypeError(f"{text!r}: unknown option {option!r} (only cost=N)")
        entry["cost"] = value.strip()
    if not host:
        raise argparse.ArgumentTypeError(f"{text!r}: a connector needs a host")
    try:
        checked = Connector.model_validate({**entry, "role": "inter-router"})
    except ValidationError as err:
        raise _type_error(err, text) from None
    return {key: getattr(checked, key) for key in entry}


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
        "--mode",
        choices=["standalone", "interior", "edge"],
        help="router mode, replacing router.mode from the file (default: standalone)",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        action="append",
        type=_listen_flag("normal"),
        default=[],
        help="accept clients on HOST:PORT with default listener settings; [::1]:5672 for IPv6,"
        " :5672 for every IPv4 interface; repeatable; replaces the file's normal-role listeners",
    )
    parser.add_argument(
        "--inter-router-listen",
        metavar="HOST:PORT",
        action="append",
        type=_listen_flag("inter-router"),
        default=[],
        help="accept interior routers on HOST:PORT (mode interior); repeatable; replaces the"
        " file's inter-router listeners",
    )
    parser.add_argument(
        "--edge-listen",
        metavar="HOST:PORT",
        action="append",
        type=_listen_flag("edge"),
        default=[],
        help="accept edge routers on HOST:PORT (mode interior); repeatable; replaces the file's"
        " edge listeners",
    )
    parser.add_argument(
        "--connect",
        metavar="HOST:PORT[,cost=N]",
        action="append",
        type=_connect_flag,
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
    return parser


@dataclass(frozen=True)
class Overrides:
    """What the command line says over the config file. Kept for the router's lifetime: a
    config file or ConfigMap read again later gets the same flags applied (`effective_config`)."""

    id: str | None = None
    mode: str | None = None
    listen: tuple[Listener, ...] = ()
    inter_router_listen: tuple[Listener, ...] = ()
    edge_listen: tuple[Listener, ...] = ()
    connect: tuple[dict[str, Any], ...] = ()
    drain_seconds: float | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Overrides:
        return cls(
            id=args.id,
            mode=args.mode,
            listen=tuple(args.listen),
            inter_router_listen=tuple(args.inter_router_listen),
            edge_listen=tuple(args.edge_listen),
            connect=tuple(args.connect),
            drain_seconds=args.drain_seconds,
        )


def effective_config(data: dict[str, Any], overrides: Overrides) -> RouterConfig:
    """Applies flags to raw (parsed, unvalidated) config data, so what is validated is exactly
    what will run. ``data`` is modified. Raises ConfigError."""
    if data.get("router") is None:
        data["router"] = {}
    router = data["router"]
    mode = "standalone"
    if isinstance(router, dict):
        if overrides.id is not None:
            router["id"] = overrides.id
        else:
            router.setdefault("id", socket.gethostname())
        if overrides.mode is not None:
            router["mode"] = overrides.mode
        if overrides.drain_seconds is not None:
            router["drainTimeoutSeconds"] = overrides.drain_seconds
        mode = router.get("mode", mode)
    for role, flags in (
        ("normal", overrides.listen),
        ("inter-router", overrides.inter_router_listen),
        ("edge", overrides.edge_listen),
    ):
        if flags:
            _replace(data, "listeners", role, [listener.model_dump() for listener in flags])
    if overrides.connect:
        connect_role = CONNECT_ROLES.get(mode) if isinstance(mode, str) else None
        if connect_role is None:
            raise ConfigError(f"--connect needs router mode interior or edge (--mode), not {mode}")
        entries = [{**entry, "role": connect_role} for entry in overrides.connect]
        _replace(data, "connectors", connect_role, entries)
    config = validate_config(data)
    try:
        tls.check(config)  # certificates, keys and passwords Proton cannot load
    except tls.TlsError as e:
        raise ConfigError(str(e)) from None
    return config


def _effective_config(args: argparse.Namespace) -> RouterConfig:
    data: dict[str, Any] = read_config_file(args.config) if args.config is not None else {}
    return effective_config(data, Overrides.from_args(args))


def _replace(data: dict[str, Any], field: str, role: str, entries: list[dict[str, Any]]) -> None:
    """Flags replace the file's entries of their role and leave the others alone."""
    current = data.get(field) or []
    if isinstance(current, list):
        kept = [
            entry
            for entry in current
            if not (isinstance(entry, dict) and entry.get("role", "normal") == role)
        ]
        data[field] = kept + entries


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
        connectors=len(config.connectors),
        addresses=len(config.addresses),
    )
    # deferred: --check and usage errors need no engine
    from router.engine import serve
    from router.podstatus import pod_status_sources
    from router.reconfigure import config_sources

    build = partial(effective_config, overrides=Overrides.from_args(args))
    sources = config_sources(args.config, build, os.environ)
    return serve(config, [*sources, *pod_status_sources(os.environ)])  # router/podstatus.py
