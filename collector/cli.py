"""``routernet-collector``: receive the routers' telemetry and append it to a Parquet dataset.

    routernet-collector --url amqp://127.0.0.2:5672 --dataset .routernet/telemetry
    routernet-collector ... --http 0.0.0.0:8080   # also serves flow totals (collector/http.py)

SIGTERM or SIGINT: drain, write what is buffered, settle, exit 0. Exit 1 when writing to the
dataset failed (what was unsettled goes back to its senders), 2 for bad flags or a dataset that
cannot be created. The parts are in receiver.py (AMQP), buffer.py, store.py.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from collector.settings import Settings
from router.log import FORMATS, LEVELS, configure

PROG = "routernet-collector"
DEFAULTS = Settings()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _url(text: str) -> str:
    parts = urlsplit(text if "://" in text else f"amqp://{text}")
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an AMQP URL (amqp[s]://[user:password@]host[:port])"
        )
    try:
        parts.port  # noqa: B018 - validates it
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the port is not a number") from None
    return parts.geturl()


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT, e.g. 0.0.0.0:8080")
    return host.strip("[]"), int(port)


def _positive(kind: type) -> object:
    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Receive router telemetry records and append them to a Parquet dataset"
        " (<dataset>/<kind>/date=YYYY-MM-DD/hour=HH/part-<uuid>.parquet).",
    )
    parser.add_argument(
        "--url",
        type=_url,
        default=DEFAULTS.url,
        help="the router to receive from, amqp[s]://[user:password@]host[:port]"
        " (default: %(default)s)",
    )
    parser.add_argument(
        "--dataset",
        type=Path,
        default=DEFAULTS.dataset,
        metavar="DIR",
        help="root directory of the Parquet dataset (default: %(default)s)",
    )
    parser.add_argument(
        "--address",
        default=DEFAULTS.address,
        help="the address routers send telemetry to (default: %(default)s)",
    )
    parser.add_argument(
        "--id",
        default=f"routernet-collector-{socket.gethostname()}",
        metavar="NAME",
        help="AMQP container id (default: %(default)s)",
    )
    parser.add_argument(
        "--flush-rows",
        type=_positive(int),
        default=DEFAULTS.max_rows,
        metavar="N",
        help="write files once this many rows are buffered (default: %(default)s)",
    )
    parser.add_argument(
        "--flush-seconds",
        type=_positive(float),
        default=DEFAULTS.max_seconds,
        metavar="S",
        help="write files once the oldest buffered row is this old (default: %(default)s)",
    )
    parser.add_argument(
        "--credit",
        type=_positive(int),
        default=DEFAULTS.credit,
        metavar="N",
        help="messages the router may send ahead (default: %(default)s)",
    )
    parser.add_argument(
        "--dedup-ids",
        type=_positive(int),
        default=DEFAULTS.dedup_ids,
        metavar="N",
        help="remember this many recent record ids to drop resent duplicates"
        " (default: %(default)s)",
    )
    parser.add_argument(
        "--http",
        type=_listen,
        metavar="HOST:PORT",
        help="also answer GET /flows?from=MS&to=MS with the flow totals of that window, for"
        " the network console where it cannot read the dataset (default: off)",
    )
    parser.add_argument("--log-level", choices=list(LEVELS), default="info")
    parser.add_argument("--log-format", choices=list(FORMATS), default="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from collector.receiver import Collector
    except ModuleNotFoundError as err:  # pip install routernet without [collector]
        print(
            f"{PROG}: {err.name} is not installed: the collector is routernet's optional group"
            " [collector] (pip install 'routernet[collector]')",
            file=sys.stderr,
        )
        return 2
    configure(args.log_level, args.log_format)
    # Proton's own debug lines are one per reactor event: noise, whatever our level.
    logging.getLogger("proton").setLevel(max(logging.WARNING, LEVELS[args.log_level]))
    try:
        args.dataset.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"{PROG}: cannot create the dataset directory {args.dataset}: {err}", file=sys.stderr)
        return 2
    collector = Collector(
        Settings(
            url=args.url,
            dataset=args.dataset,
            address=args.address,
            container_id=args.id,
            max_rows=args.flush_rows,
            max_seconds=args.flush_seconds,
            credit=args.credit,
            dedup_ids=args.dedup_ids,
        )
    )
    flows = None
    if args.http is not None:
        from collector.http import FlowsServer

        try:
            flows = FlowsServer(args.http, args.dataset)
        except OSError as err:
            host, port = args.http
            print(f"{PROG}: cannot listen on {host}:{port}: {err.strerror}", file=sys.stderr)
            return 2
        flows.start()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: collector.request_stop())
    try:
        return collector.run()
    finally:
        if flows is not None:
            flows.stop()


if __name__ == "__main__":
    raise SystemExit(main())
