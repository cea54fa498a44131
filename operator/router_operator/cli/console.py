"""``routernet console``: the network console (router_operator/console/) for a network on this
machine, or, with ``--kubernetes``, for the networks the operator manages (the chart's console
Deployment runs it so).

    routernet console [--state-dir S] [--listen HOST:PORT] [--detach]
    routernet console --kubernetes [--namespace NS]... --basic-auth FILE | --token-review
        | --anonymous

A console on a loopback address is open to this machine's users; anywhere else it needs
``--basic-auth`` or ``--token-review``, or ``--anonymous`` said out loud.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from router_operator.local import console as local_console

DEFAULT_LISTEN = "127.0.0.1:8080"


def add_command(commands: Any, common: argparse.ArgumentParser) -> None:
    console = commands.add_parser(
        "console",
        parents=[common],
        help="serve a live web view of the network: topology, traffic, addresses, queues",
        description=(
            "Serve the network console: the routers asked every few seconds over their"
            " $management, the collector's flow records, the last analysis. Stops on Ctrl-C or"
            " `routernet down`."
        ),
    )
    console.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help="where to serve (default %(default)s; port 0: any free one)",
    )
    console.add_argument(
        "--detach",
        action="store_true",
        help="run in the background, print its URL and return (`routernet down` stops it)",
    )
    console.add_argument(
        "--interval", type=float, default=2.0, metavar="SECONDS", help="between scrapes"
    )
    auth = console.add_mutually_exclusive_group()
    auth.add_argument("--basic-auth", type=Path, metavar="FILE", help="user:password lines")
    auth.add_argument(
        "--token-review",
        action="store_true",
        help="bearer tokens checked with the API server (TokenReview, then may the user list"
        " Routers)",
    )
    auth.add_argument(
        "--anonymous", action="store_true", help="no authentication on a non-loopback address"
    )
    console.add_argument(
        "--kubernetes",
        action="store_true",
        help="the Routers of the cluster (in a pod: its service account; else KUBECONFIG)",
    )
    console.add_argument(
        "--namespace",
        metavar="NS",
        action="append",
        help="with --kubernetes: only this namespace's Routers (again for more; default: all)",
    )


class UsageError(Exception):
    pass


def parse_listen(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host, int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace, prog: str) -> int:
    try:
        return _run(args, prog)
    except UsageError as err:
        print(f"{prog} console: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, prog: str) -> int:
    # Imported here: the console's modules (and proton's blocking client) cost `up` nothing.
    from router_operator.console.auth import (
        Anonymous,
        Authenticator,
        AuthError,
        BasicAuth,
        TokenReviewAuth,
    )
    from router_operator.console.scraper import Scraper
    from router_operator.console.server import Console, ConsoleServer
    from router_operator.console.sources import LocalSource, Source

    host, port = parse_listen(args.listen)
    if args.interval <= 0:
        raise UsageError(f"--interval must be above 0, not {args.interval:g}")
    state_dir = args.state_dir.resolve()
    if args.detach:
        if args.kubernetes:
            raise UsageError("--detach is for a network on this machine")
        if local_console.running_pid(state_dir) is not None:
            raise UsageError(f"a console already serves this network: {_url(state_dir)}")
        forwarded = ["--listen", args.listen, "--interval", str(args.interval)]
        if args.basic_auth is not None:
            forwarded += ["--basic-auth", str(args.basic_auth.resolve())]
        if args.anonymous:
            forwarded.append("--anonymous")
        if args.token_review:
            forwarded.append("--token-review")
        try:
            url = local_console.start(state_dir, forwarded)
        except local_console.ConsoleStartError as err:
            print(f"{prog} console: {err}", file=sys.stderr)
            return 1
        print(f"console: {url}  (`{prog} down` stops it with the network)")
        return 0
    authenticator: Authenticator
    try:
        if args.basic_auth is not None:
            authenticator = BasicAuth.from_file(args.basic_auth)
        elif args.token_review:
            authenticator = TokenReviewAuth(_cluster(), args.namespace)
        elif args.anonymous or _loopback(host):
            authenticator = Anonymous()
        else:
            raise UsageError(
                f"{host} is not a loopback address: give --basic-auth FILE or --token-review,"
                " or --anonymous to serve it to anyone who reaches it"
            )
    except AuthError as err:
        raise UsageError(str(err)) from None
    source: Source
    if args.kubernetes:
        from router_operator.console.kubesource import KubernetesSource

        source = KubernetesSource(_cluster(), args.namespace)
    else:
        if local_console.running_pid(state_dir) is not None:
            raise UsageError(f"a console already serves this network: {_url(state_dir)}")
        source = LocalSource(state_dir)
    scraper = Scraper(source, interval=args.interval)
    try:
        server = ConsoleServer((host, port), Console(scraper, authenticator))
    except OSError as err:
        print(f"{prog} console: cannot listen on {host}:{port}: {err.strerror}", file=sys.stderr)
        return 1
    scraper.scrape_once()  # the first page shows the network, not an empty one
    scraper.start()
    if not args.kubernetes:
        local_console.serving(state_dir, server.url)
    print(f"console: {server.url}  (Ctrl-C stops it)", flush=True)
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        scraper.stop()
        if not args.kubernetes:
            local_console.served(state_dir)
    print(f"{prog} console: stopped", flush=True)
    return 0


def _url(state_dir: Path) -> str:
    return local_console.running_url(state_dir) or "(starting)"


def _cluster() -> Any:
    from router.pod.kubeapi import KubeConfigError, connect

    try:
        return connect()
    except KubeConfigError as err:
        raise UsageError(f"no Kubernetes API: {err}") from None
