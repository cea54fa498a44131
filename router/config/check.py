"""The validating half of ``routernet-router``: its flags and config file checked by the pydantic
models, the flags applied over the file, the result printed as JSON (``--check``).

A router process runs this as a child (router/config/child.py) at start and for every live
change, and builds its records from the output (router/config/views.py says why); `--check`
is the same code in the foreground. In-process validation (`in_process`) serves tests and
tools that have pydantic loaded anyway.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import sys
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from router.config.child import Ready, Validate
from router.config.flags import PROG, USAGE_ERROR, UsageError, parser
from router.config.models import (
    ConfigError,
    Connector,
    Listener,
    RouterConfig,
    parse_config_text,
    read_config_file,
    validate_config,
)

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


def listen_flag(role: str) -> Any:
    def parse(text: str) -> Listener:
        host, port = _host_port(text)
        try:
            return Listener.model_validate({"host": host or "0.0.0.0", "port": port, "role": role})
        except ValidationError as err:
            raise _type_error(err, text) from None

    return parse


def connect_flag(text: str) -> dict[str, Any]:
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
    if config.sslProfiles:
        from router.transport import tls  # Proton: only for profiles to load

        try:
            tls.check(config)  # certificates, keys and passwords Proton cannot load
        except tls.TlsError as e:
            raise ConfigError(str(e)) from None
    return config


def _effective_config(args: argparse.Namespace) -> RouterConfig:
    data: dict[str, Any]
    if args.config_stdin is not None:
        data = parse_config_text(sys.stdin.read(), args.config_stdin)
    else:
        data = read_config_file(args.config) if args.config is not None else {}
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


def in_process(overrides: Overrides) -> Validate:
    """Validation in this process, for FileSource and ConfigMapSource (router/config/sources.py):
    what a config's text gives with ``overrides`` applied."""

    def validate(text: str, source: str) -> Ready:
        try:
            return Ready(effective_config(parse_config_text(text, source), overrides))
        except ConfigError as err:
            return Ready(error=err)

    return validate


def serve(idle_seconds: float) -> int:
    """`--serve`: the router's flags (a JSON list), then requests, one JSON line each on
    standard input (router/config/child.py WarmChild), until `idle_seconds` pass without one
    or the router goes."""
    # Unbuffered: a buffered reader would read the next line ahead, out of select's sight.
    stdin = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
    flags = stdin.readline()
    if not flags:
        return 0
    overrides = Overrides.from_args(parser(listen_flag, connect_flag).parse_args(json.loads(flags)))
    while select.select([stdin], [], [], idle_seconds)[0]:
        line = stdin.readline()
        if not line:
            break
        request = json.loads(line)
        try:
            config = effective_config(
                parse_config_text(request["text"], request["source"]), overrides
            )
            answer: dict[str, Any] = {"config": config.model_dump(mode="json")}
        except ConfigError as err:
            answer = {"error": str(err)}
        print(json.dumps(answer), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Prints the effective configuration as JSON, or one line saying what is wrong (exit 2)."""
    try:
        args = parser(listen_flag, connect_flag).parse_args(argv)
        if args.serve is not None:
            return serve(args.serve)
        config = _effective_config(args)
    except (UsageError, ConfigError) as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return USAGE_ERROR
    print(config.model_dump_json(indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
