"""``routernet``: run a router network on this machine from the files ``kubectl apply`` takes.

    routernet up [--watch] [--no-collector] FILE|DIR...   start it, or apply the files' changes
    routernet status [--json]            routers, connections, addresses, nodes, collectors
    routernet down                       stop the autoscaler, every router, then the collectors
    routernet analyze [--output DIR]     Spark analysis of the network's telemetry (pipeline/)
    routernet send ADDRESS [--rate R|--ramp SPEC] [--count N] ...   reliable traffic (traffic/)
    routernet receive ADDRESS [--count N] [--idle S] ...            a consumer on every router
    routernet request ADDRESS [--body TEXT] [--timeout S]           one request, its reply
    routernet console [--listen HOST:PORT] [--detach]   a live web view of the network (console/)

Exit codes: 0 fine; 1 a router failed to start or stop, (up) a leaving router of a Router
with a store still held nodes when up stopped waiting (left running), (status) is not running,
(send) a message ended neither accepted nor rejected, (receive) --count was not reached,
(request) no reply, (console) it could not listen; 2 invalid files or usage (nothing
changed); 130 interrupted. The backend is local/backend.py (processes, state, status) with
local/files.py (reading, validating and planning the files); send, receive and request are
traffic/; console is cli/console.py (the command) and console/ (the console).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from router_operator.cli import console
from router_operator.local import backend as local
from router_operator.local import handoff as local_handoff
from router_operator.local.files import InvalidInput, file_signature
from router_operator.traffic import cli as traffic

PROG = "routernet"
WATCH_INTERVAL = 0.5


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: {message}\n")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        type=Path,
        default=Path(local.DEFAULT_STATE_DIR),
        metavar="DIR",
        help="config files, logs, pids and state of this network (default: %(default)s)",
    )
    parser = _Parser(
        prog=PROG,
        description=(
            "Run the router network that Router, Address and LinkRoute files declare as router"
            " processes on 127.0.0.x: the same files `kubectl apply` takes with the operator."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    up = commands.add_parser(
        "up",
        parents=[common],
        help="start the network, or apply changed files to the running one",
        description=(
            "Validate and plan the files, then start, reconfigure (live: routers read their"
            " config files again) and stop routers to match. Invalid files change nothing."
        ),
    )
    up.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="YAML or JSON files, or directories of them (default: those of the last up)",
    )
    up.add_argument(
        "--watch",
        action="store_true",
        help="stay in the foreground and apply the files again whenever they change; Ctrl-C"
        " stops watching and leaves the routers running",
    )
    up.add_argument(
        "--no-collector",
        dest="collector",
        action="store_false",
        help="run no telemetry collector (default: one per network, writing <state-dir>/telemetry)",
    )
    status = commands.add_parser(
        "status",
        parents=[common],
        help="show routers, client endpoints, connections, addresses and hosted nodes",
    )
    status.add_argument("--json", action="store_true", help="print it as JSON")
    down = commands.add_parser("down", parents=[common], help="stop every router")
    down.add_argument(
        "--timeout",
        type=float,
        default=local.STOP_TIMEOUT,
        metavar="SECONDS",
        help="wait this long after SIGTERM before SIGKILL (default: %(default)s)",
    )
    analyze = commands.add_parser(
        "analyze",
        parents=[common],
        help="analyze the telemetry the collector wrote under <state-dir>/telemetry/ (Spark)",
    )
    analyze.add_argument("--output", type=Path, metavar="DIR", help="default <state-dir>/analysis")
    analyze.add_argument("--from", dest="start", metavar="ISO")
    analyze.add_argument("--to", dest="end", metavar="ISO")
    analyze.add_argument("--master", default=None, help="Spark master (default local[*])")
    traffic.add_commands(commands, common)
    console.add_command(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "up":
            if args.watch:
                return watch(args.state_dir, args.files, args.collector)
            return up(args)
        if args.command == "analyze":
            # Imported here: the pipeline (and pyspark) cost `up`/`status`/`down` nothing.
            from pipeline.cli import analyze_state_dir

            return analyze_state_dir(args, PROG)
        if args.command == "status":
            return show_status(args.state_dir, args.json)
        if args.command == "send":
            return traffic.send(args, PROG)
        if args.command == "receive":
            return traffic.receive(args, PROG)
        if args.command == "request":
            return traffic.request(args, PROG)
        if args.command == "console":
            return console.run(args, PROG)
        return down(args.state_dir, args.timeout)
    except InvalidInput as err:
        for line in err.lines:
            print(f"{PROG}: {line}", file=sys.stderr)
        return 2
    except local.LocalError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted; `{PROG} status` shows what runs", file=sys.stderr)
        return 130


def up(args: argparse.Namespace) -> int:
    applied = local.up(args.state_dir, args.files, collector=args.collector, progress=_progress)
    print_applied(applied)
    return 1 if applied.handing_off else 0


def _progress(line: str) -> None:
    print(f"{PROG}: {line}", flush=True)


def print_applied(applied: local.Applied) -> None:
    for warning in applied.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    rows = [
        [
            pod.name,
            pod.mode,
            " ".join(f"amqp://{e}" for e in pod.endpoints("normal")) or "-",
            applied.actions.get(pod.name, "unchanged"),
        ]
        for pod in applied.pods
    ]
    current = {pod.name for pod in applied.pods}
    rows += [[name, "", "", what] for name, what in applied.actions.items() if name not in current]
    print(_table(["ROUTER", "MODE", "CLIENTS CONNECT TO", ""], rows))
    if applied.addresses:
        print("addresses: " + "; ".join(_declared(a) for a in applied.addresses))
    if applied.link_routes:
        print("link routes: " + "; ".join(_link_route(lr) for lr in applied.link_routes))
    gateways = [f"{pod.name} {e}" for pod in applied.pods for e in pod.endpoints("gateway")]
    if gateways:
        # What another network's Gateway connector dials (host and port) to join this one.
        print("gateway listeners: " + "; ".join(gateways))
    for c in applied.collectors:
        what = applied.collector_actions.get(c.network, "unchanged")
        print(
            f"telemetry collector of network {c.network}: {c.url} ({c.router}) ->"
            f" {_shown(c.dataset)}  {what}"
        )
    for network, what in applied.collector_actions.items():
        if what == "stopped":
            print(f"telemetry collector of network {network}: stopped")
    if applied.autoscaler is not None:
        print(f"autoscaler: {applied.autoscaler}")
    print(f"state, configs and logs: {_shown(applied.state_dir)}")
    if applied.handing_off:
        print(f"{PROG}: {local_handoff.left_running_line(applied.handing_off)}", file=sys.stderr)


def watch(state_dir: Path, files: Sequence[str], collector: bool = True) -> int:
    """``up``, then again whenever a file changes, until Ctrl-C (or SIGTERM), which leaves the
    routers running. Invalid files are reported and leave the network as it was."""
    if not files:
        state = local.State.load(state_dir.resolve())
        files = [local.shown_path(f) for f in state.files] if state else []
    if not files:
        raise InvalidInput(["--watch needs files (or an earlier `routernet up` here)"])
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    seen = None
    try:
        while True:
            signature = file_signature(files)
            if signature != seen:
                seen = signature
                _apply_once(state_dir, files, collector)
                print(f"{PROG}: watching {' '.join(files)} (Ctrl-C stops watching)", flush=True)
            time.sleep(WATCH_INTERVAL)
    except KeyboardInterrupt:
        print(f"\n{PROG}: stopped watching; the routers keep running (`{PROG} down` stops them)")
        return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _apply_once(state_dir: Path, files: Sequence[str], collector: bool) -> None:
    print(f"{PROG}: applying {' '.join(files)} at {time.strftime('%H:%M:%S')}", flush=True)
    try:
        print_applied(local.up(state_dir, files, collector=collector, progress=_progress))
    except InvalidInput as err:
        for line in err.lines:
            print(f"{PROG}: {line}", file=sys.stderr)
        print(f"{PROG}: not applied; the network is unchanged", file=sys.stderr)
    except local.LocalError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
    sys.stdout.flush()


def show_status(state_dir: Path, as_json: bool) -> int:
    report = local.status(state_dir)
    if report is None:
        print(f"{PROG}: no network in {_shown(state_dir)}; start one with `{PROG} up FILE...`")
        return 1
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(format_status(report))
    running = [*report["routers"], *report["collectors"]]
    return 0 if all(r["running"] for r in running) else 1


def format_status(report: dict[str, Any]) -> str:
    """The status as tables: routers with their connections, then addresses per router, then
    the queues and topics each router hosts."""
    lines = [f"namespace {report['namespace']}, state in {_shown(Path(report['stateDir']))}"]
    if report.get("console"):
        lines.append(f"console: {report['console']}")
    rows = []
    for r in report["routers"]:
        # A connection still opening has no peer yet: "?".
        inter = [c["peer"] or "?" for c in r["connections"] if c["role"] == "inter-router"]
        edge = [
            "?" if c["peer"] is None else _uplink(c["peer"], r.get("uplink"))
            for c in r["connections"]
            if c["role"] == "edge"
        ]
        reaches = [f"{n['id']}({n['cost']})" for n in r["knownRouters"] if n["cost"]]
        rows.append(
            [
                r["id"],
                r["mode"],
                str(r["pid"] or "-"),
                " ".join(r["clientEndpoints"]) or "-",
                r.get("httpEndpoint") or "-",
                r["error"] if r["error"] else " ".join(sorted(inter)) or "-",
                "" if r["error"] else " ".join(sorted(edge)) or "-",
                "" if r["error"] else " ".join(reaches) or "-",
            ]
        )
    headers = ["ROUTER", "MODE", "PID", "CLIENT", "HTTP", "INTER-ROUTER", "EDGE", "ROUTES(COST)"]
    lines.append(_table(headers, rows))
    if report["addresses"]:
        lines.append("declared: " + "; ".join(_declared(a) for a in report["addresses"]))
    for lr in report["linkRoutes"]:
        lines.append(f"link route {_link_route(lr)}")
    rows = [
        [
            c["name"],
            str(c["pid"] or "-"),
            c["url"],
            c["router"],
            _shown(Path(c["dataset"])),
            f"{c['files']} files, {c['bytes']} bytes" if c["running"] else "not running",
        ]
        for c in report["collectors"]
    ]
    if rows:
        headers = ["COLLECTOR", "PID", "RECEIVES FROM", "ROUTER", "DATASET", ""]
        lines += ["", _table(headers, rows)]
    scaler = report["autoscaler"]
    rows = [
        [
            name,
            str((status.get("autoscaling") or {}).get("desiredReplicas", "-")),
            _load((status.get("autoscaling") or {}).get("currentLoad") or {}),
            _last_scale(status),
        ]
        for name, status in sorted(scaler["routers"].items())
    ]
    if rows:
        headers = ["AUTOSCALED", "REPLICAS", "LOAD PER ROUTER", "LAST DECISION"]
        lines += ["", _table(headers, rows)]
        if not scaler["running"]:
            lines.append(f"the autoscaler is not running (log: {_shown(Path(scaler['log']))})")
    rows = [
        [
            a["address"],
            r["id"],
            a["distribution"],
            str(a["localConsumers"]),
            str(a["remoteRouters"]),
        ]
        for r in report["routers"]
        for a in r["addresses"]
    ]
    if rows:
        rows.sort(key=lambda row: (row[0], row[1]))
        headers = ["ADDRESS", "ROUTER", "DISTRIBUTION", "CONSUMERS", "REMOTE ROUTERS"]
        lines += ["", _table(headers, rows)]
    rows = [
        [n["name"], n["type"], n["router"], str(n["depth"]), str(n["consumers"])]
        for n in report.get("nodes", [])
    ]
    if rows:
        headers = ["NODE", "TYPE", "ROUTER", "DEPTH", "CONSUMERS"]
        lines += ["", _table(headers, rows)]
    return "\n".join(lines)


def _uplink(peer: str, uplink: str | None) -> str:
    return f"{peer}(uplink)" if peer == uplink else peer


def _load(load: dict[str, float]) -> str:
    return " ".join(f"{name} {value:.4g}" for name, value in sorted(load.items())) or "-"


def _last_scale(status: dict[str, Any]) -> str:
    """When and why the replicas last changed, or why the autoscaler does nothing."""
    auto = status.get("autoscaling") or {}
    for condition in status.get("conditions", []):
        if condition["type"] == "ScalingActive" and condition["status"] == "False":
            return f"inactive: {condition['message']}"
    if auto.get("lastScaleTime"):
        return f"{auto['lastScaleTime']} {auto.get('lastScaleReason', '')}"
    return "-"


def _link_route(route: dict[str, Any]) -> str:
    """``prefix:db in -> broker:5672``: where the links of a LinkRoute go, in a few words."""
    directions = route.get("directions") or []
    direction = "both" if len(directions) == 2 else "".join(directions)
    target = route.get("containerId") or route.get("connection")
    return f"{route['key']} {direction} -> {target}"


def _declared(address: dict[str, Any]) -> str:
    extra = ""
    if address.get("undeliverable", "drop") != "drop":
        extra = f", undeliverable {address['undeliverable']}"
    node = address.get("node")
    if node:
        extra += f", {node.get('type', 'queue')}s on {' '.join(node['hosts'])}"
    return f"{address['key']} {address['distribution']}{extra}"


def down(state_dir: Path, timeout: float) -> int:
    stopped = local.down(state_dir, timeout)
    if stopped.console:
        print(f"{PROG}: stopped the console first")
    if not stopped.routers:
        print(f"{PROG}: no router running in {_shown(state_dir)}")
    else:
        killed = stopped.killed
        note = f" ({', '.join(killed)} killed after {timeout:g} s)" if killed else ""
        print(f"{PROG}: stopped {len(stopped.routers)} routers: {' '.join(stopped.routers)}{note}")
    if stopped.collectors:
        names = " ".join(f"collector-{n}" for n in stopped.collectors)
        print(f"{PROG}: then stopped the telemetry collectors: {names}")
    if stopped.autoscaler:
        print(f"{PROG}: the autoscaler was stopped first")
    return 0


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    )


def _shown(path: Path) -> str:
    return local.shown_path(str(path.absolute()))


if __name__ == "__main__":
    raise SystemExit(main())
