"""`python -m bench`: runs the one-router benchmark, writes its JSON, prints its Markdown table.

Exits 1 if any scenario failed, after still writing what the others measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.clients import BUILD_DIR, BenchError, build
from bench.one_router import RESULTS_DIR, markdown, run, scenarios

DEFAULT_COUNT = 1_000_000
QUICK_COUNT = 100_000
DEFAULT_LATENCY_SECONDS = 20.0
QUICK_LATENCY_SECONDS = 5.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--count", type=int, help=f"messages per throughput run ({DEFAULT_COUNT:,})")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_COUNT:,} messages, {QUICK_LATENCY_SECONDS:.0f} s latency runs",
    )
    p.add_argument(
        "--latency-seconds",
        type=float,
        help=f"longest latency run, in seconds of offered load ({DEFAULT_LATENCY_SECONDS:.0f})",
    )
    p.add_argument(
        "--via",
        choices=("router", "broker"),
        default="router",
        help="intermediary: the router, or Proton's C broker example as a stand-in to check "
        "the harness (its results go to bench/build/, never to be reported as the router's)",
    )
    p.add_argument(
        "--scenarios",
        help="comma-separated subset, e.g. p2p-unsettled,router-unsettled (default: all four)",
    )
    p.add_argument("--output", type=Path, help="results JSON (bench/results/one-router.json)")
    p.add_argument(
        "--markdown",
        action="store_true",
        help="only print the table from an existing results JSON, running nothing",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    default_output = (
        RESULTS_DIR / "one-router.json" if args.via == "router" else BUILD_DIR / "one-broker.json"
    )
    output: Path = args.output or default_output
    if args.markdown:
        sys.stdout.write(markdown(json.loads(output.read_text())))
        return 0
    count = args.count or (QUICK_COUNT if args.quick else DEFAULT_COUNT)
    latency_seconds = args.latency_seconds or (
        QUICK_LATENCY_SECONDS if args.quick else DEFAULT_LATENCY_SECONDS
    )
    available = {s.name: s for s in scenarios(args.via)}
    names = args.scenarios.split(",") if args.scenarios else list(available)
    unknown = [n for n in names if n not in available]
    if unknown:
        _parser().error(f"unknown scenarios {unknown}; choose from {list(available)}")
    try:
        clients = build(broker=args.via == "broker")
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1
    output.parent.mkdir(parents=True, exist_ok=True)
    results = run(
        clients,
        [available[n] for n in names],
        via=args.via,
        count=count,
        latency_seconds=latency_seconds,
        log_dir=output.parent,
    )
    output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"bench: wrote {output}", file=sys.stderr)
    sys.stdout.write(markdown(results))
    return 1 if any("error" in s for s in results["scenarios"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
