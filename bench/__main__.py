"""`python -m bench`: runs the benchmarks, writes their JSON, prints their Markdown tables.

Eight suites: `one-router` (1 sender → 1 receiver through one router, against peer-to-peer),
`network` (a chain of three routers, rerouting after a router loss, a new consumer on a far
router, what telemetry costs), `nodes` (a queue the routers host, durable and not, through the
network and on its host, against RabbitMQ's classic and quorum queues; recovery of a million
messages after `kill -9`), `collector` (telemetry records per second into Parquet, through a
router), `autoscaling` (time to scale out under load, messages lost scaling in) and `console`
(what a 50-router network costs the network console and a browser loading its pages), and
`chaos` (faults on a seeded schedule against the example network under traffic of every kind,
its invariants checked: bench/chaos/) and `scale` (networks of 16 to 64 routers beside
qdrouterd's: convergence, a far consumer's first message, what they cost at rest). Exits 1
if any scenario failed, after still writing what the others measured.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from bench import autoscaling, collector, console, network, nodes, one_router, scale
from bench.chaos import run as chaos
from bench.clients import BUILD_DIR, BenchError, build
from bench.one_router import RESULTS_DIR

DEFAULT_COUNT = 1_000_000
QUICK_COUNT = 100_000
DEFAULT_LATENCY_SECONDS = 20.0
QUICK_LATENCY_SECONDS = 5.0
SUITES = (
    "one-router",
    "network",
    "nodes",
    "collector",
    "autoscaling",
    "console",
    "chaos",
    "scale",
)


def _positive(kind: type[int] | type[float]) -> Any:
    """An argparse type: a number above zero, else a one-line usage error."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0: {text}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument(
        "--suite",
        choices=(*SUITES, "pipeline", "all"),
        help="which benchmark to run (default: all; one-router with --via broker); pipeline"
        " (Spark analyze over 10M records against DuckDB, bench/pipeline.py) runs only when named",
    )
    p.add_argument(
        "--count",
        type=_positive(int),
        help=f"messages per throughput run ({DEFAULT_COUNT:,}; nodes: {nodes.DEFAULT_COUNT:,}, "
        f"and in the queue it recovers, {nodes.RECOVERY_COUNT:,})",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_COUNT:,} messages, {QUICK_LATENCY_SECONDS:.0f} s latency runs",
    )
    p.add_argument(
        "--latency-seconds",
        type=_positive(float),
        help=f"longest latency run, in seconds of offered load ({DEFAULT_LATENCY_SECONDS:.0f})",
    )
    p.add_argument(
        "--latency-rounds",
        type=_positive(int),
        help="rounds of the one-router latency comparison with qdrouterd, each side's median "
        f"compared ({one_router.LATENCY_ROUNDS}; --quick 1)",
    )
    p.add_argument(
        "--chaos-seconds",
        type=_positive(float),
        help=f"how long the chaos soak faults the network ({chaos.DEFAULT_SECONDS:.0f};"
        f" --quick {chaos.QUICK_SECONDS:.0f})",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=chaos.DEFAULT_SEED,
        help="the chaos soak's schedule: a failed run is replayed with its seed"
        " (default: %(default)s)",
    )
    p.add_argument(
        "--via",
        choices=("router", "broker"),
        default="router",
        help="one-router suite's intermediary: the router, or Proton's C broker example as a "
        "stand-in to check the harness (its results go to bench/build/, never to be reported "
        "as the router's)",
    )
    p.add_argument(
        "--scenarios",
        help="comma-separated scenarios of the chosen suites, e.g. "
        "p2p-unsettled,chain3-unsettled (default: all but reroute-silent); a suite none of "
        "whose scenarios is named does not run",
    )
    p.add_argument(
        "--output",
        type=Path,
        help="results JSON, when only one suite runs (bench/results/one-router.json, "
        "bench/results/network.json)",
    )
    p.add_argument(
        "--markdown",
        action="store_true",
        help="only print the tables from existing results JSON (--output's, else the chosen "
        "suites'), running nothing",
    )
    return p


def _default_output(suite: str, via: str) -> Path:
    if suite == "network":
        return RESULTS_DIR / "network.json"
    if suite in ("nodes", "collector", "autoscaling", "console", "chaos", "scale"):
        return RESULTS_DIR / f"{suite}.json"
    return RESULTS_DIR / "one-router.json" if via == "router" else BUILD_DIR / "one-broker.json"


def _markdown(results: dict[str, Any]) -> str:
    modules = {
        "network": network,
        "nodes": nodes,
        "collector": collector,
        "autoscaling": autoscaling,
        "console": console,
        "chaos": chaos,
        "scale": scale,
    }
    return modules.get(results.get("benchmark", ""), one_router).markdown(results)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.markdown and args.output:
        # The file says which benchmark it holds.
        sys.stdout.write(_markdown(json.loads(args.output.read_text())))
        return 0
    if args.suite == "pipeline":
        from bench import pipeline

        return pipeline.main()
    suite = args.suite or ("one-router" if args.via == "broker" else "all")
    if args.via == "broker" and suite != "one-router":
        parser.error("--via broker applies to the one-router suite only")
    available = {
        "one-router": [s.name for s in one_router.scenarios(args.via)],
        "network": [*network.SCENARIOS, *network.EXTRA_SCENARIOS],
        "nodes": list(nodes.SCENARIOS),
        "collector": list(collector.SCENARIOS),
        "autoscaling": list(autoscaling.SCENARIOS),
        "console": list(console.SCENARIOS),
        "chaos": list(chaos.SCENARIOS),
        "scale": [*scale.SCENARIOS, *scale.EXTRA_SCENARIOS],
    }
    by_default = {
        "autoscaling": list(autoscaling.SCENARIOS),
        "one-router": available["one-router"],
        "network": list(network.SCENARIOS),
        "nodes": list(nodes.SCENARIOS),
        "collector": list(collector.SCENARIOS),
        "console": list(console.SCENARIOS),
        "chaos": list(chaos.SCENARIOS),
        "scale": list(scale.SCENARIOS),
    }
    suites = list(SUITES) if suite == "all" else [suite]
    names = args.scenarios.split(",") if args.scenarios else None
    if names is not None:
        known = [n for s in suites for n in available[s]]
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"unknown scenarios {unknown}; choose from {known}")
        suites = [s for s in suites if any(n in available[s] for n in names)]
    if args.output and len(suites) != 1:
        parser.error("--output needs exactly one suite: add --suite or --scenarios")
    outputs = {s: args.output or _default_output(s, args.via) for s in suites}
    if args.markdown:
        sys.stdout.write("\n".join(_markdown(json.loads(outputs[s].read_text())) for s in suites))
        return 0
    count = args.count or (QUICK_COUNT if args.quick else DEFAULT_COUNT)
    latency_seconds = args.latency_seconds or (
        QUICK_LATENCY_SECONDS if args.quick else DEFAULT_LATENCY_SECONDS
    )
    clients = None
    if set(suites) - {"collector", "console", "chaos"}:  # these send with no C clients
        try:
            clients = build(broker=args.via == "broker")
        except BenchError as e:
            print(f"bench: {e}", file=sys.stderr)
            return 1
    failed = False
    rendered = []
    for s in suites:
        chosen = by_default[s] if names is None else [n for n in available[s] if n in names]
        output = outputs[s]
        output.parent.mkdir(parents=True, exist_ok=True)
        if s == "collector":
            records = args.count or (
                collector.QUICK_RECORDS if args.quick else collector.DEFAULT_RECORDS
            )
            results = collector.run(chosen, records, log_dir=output.parent)
        elif s == "nodes":
            assert clients is not None
            results = nodes.run(
                clients,
                chosen,
                count=args.count or (nodes.QUICK_COUNT if args.quick else nodes.DEFAULT_COUNT),
                recovery_count=args.count
                or (nodes.QUICK_RECOVERY_COUNT if args.quick else nodes.RECOVERY_COUNT),
                log_dir=output.parent,
            )
        elif s == "autoscaling":
            assert clients is not None
            results = autoscaling.run(clients, chosen)
        elif s == "console":
            results = console.run(chosen, quick=args.quick)
        elif s == "chaos":
            seconds = args.chaos_seconds or (
                chaos.QUICK_SECONDS if args.quick else chaos.DEFAULT_SECONDS
            )
            # Its network's state and logs: beside an --output given, else under bench/build/.
            logs = (BUILD_DIR if args.output is None else output.parent) / "chaos"
            results = chaos.run(chosen, seconds, args.seed, log_dir=logs)
        elif s == "scale":
            assert clients is not None
            results = scale.run(clients, chosen, log_dir=output.parent, quick=args.quick)
        elif s == "one-router":
            assert clients is not None
            by_name = {sc.name: sc for sc in one_router.scenarios(args.via)}
            results = one_router.run(
                clients,
                [by_name[n] for n in chosen],
                via=args.via,
                count=count,
                latency_seconds=latency_seconds,
                log_dir=output.parent,
                latency_rounds=args.latency_rounds
                or (1 if args.quick else one_router.LATENCY_ROUNDS),
            )
        else:
            assert clients is not None
            results = network.run(
                clients,
                chosen,
                count=count,
                latency_seconds=latency_seconds,
                log_dir=output.parent,
            )
        output.write_text(json.dumps(results, indent=2) + "\n")
        print(f"bench: wrote {output}", file=sys.stderr)
        rendered.append(_markdown(results))
        failed |= any("error" in sc for sc in results["scenarios"].values())
    sys.stdout.write("\n".join(rendered))
    return 1 if failed else 0


def _unwind_on_sigterm() -> None:
    """SIGTERM (a cancelled CI job, `timeout`, a test stopping a run) unwinds the bench as
    Ctrl-C does, so that every process it started is stopped on the way out; by default Python
    dies at once and leaves the routers running."""

    def unwind(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)


if __name__ == "__main__":
    _unwind_on_sigterm()
    sys.exit(main())
