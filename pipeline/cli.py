"""`python -m pipeline`: the pipeline's commands.

    analyze DATASET [--from ISO] [--to ISO] [--output DIR] [--master URL]
    compact DATASET                   roll closed hours and days up (rollup.py)
    recommend DATASET [--target MSGS_PER_S] [--output DIR] [--compact]
              [--configmap NAME --namespace NS]
    stream DATASET --output DIR [--once]
    generate DATASET [--rows N] [--hours H] [--seed S]

Exit codes: 0 fine, 2 bad input (dataset, range, usage, no Java) with one line on stderr.
pyspark is imported only inside the commands that start Spark, so importing this module (as
`routernet analyze` does) costs nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pipeline import PipelineError
from pipeline.dynamic_addresses import fold_dynamic

if TYPE_CHECKING:
    import pyarrow as pa

PROG = "pipeline"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: {message}\n")


def add_spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--master",
        default=None,
        help="Spark master: local[*] (default), local[N], spark://HOST:PORT; under"
        " spark-submit, the one it was given",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines or progress bar")


def add_range_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="start", metavar="ISO", help="first window start (UTC default)")
    p.add_argument("--to", dest="end", metavar="ISO", help="end of the range, exclusive")


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="Analyze Routernet telemetry with Spark.")
    commands = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    analyze = commands.add_parser(
        "analyze", help="tables, summary.json, plots and an HTML report for a time range"
    )
    analyze.add_argument("dataset", type=Path, help="the collector's dataset directory")
    add_range_options(analyze)
    analyze.add_argument("--output", type=Path, default=Path("analysis"), metavar="DIR")
    analyze.add_argument(
        "--raw", action="store_true", help="ignore rollups: read every raw record (slower)"
    )
    analyze.add_argument("--no-plots", action="store_true", help="tables and summary only")
    add_spark_options(analyze)
    compact = commands.add_parser("compact", help="roll closed hours and days up, once each")
    compact.add_argument("dataset", type=Path)
    add_spark_options(compact)
    recommend = commands.add_parser(
        "recommend", help="replicas per Router and connection costs, as JSON and a YAML patch"
    )
    recommend.add_argument("dataset", type=Path)
    add_range_options(recommend)
    recommend.add_argument(
        "--target",
        type=float,
        default=None,
        metavar="MSGS_PER_S",
        help="messages/s in that one router should carry at peak (default 5000)",
    )
    recommend.add_argument("--namespace", default=None, help="metadata.namespace of the patch")
    recommend.add_argument("--output", type=Path, default=Path("recommendation"), metavar="DIR")
    recommend.add_argument(
        "--compact",
        action="store_true",
        help="roll closed hours and days up first (as compact does), in the same Spark session",
    )
    recommend.add_argument(
        "--configmap",
        metavar="NAME",
        help="also write the recommendation to this ConfigMap of --namespace (predictive"
        " autoscaling reads routernet-recommendation-<network>), through the Kubernetes API",
    )
    add_spark_options(recommend)
    stream = commands.add_parser(
        "stream", help="keep per-router load and recommendations current (Structured Streaming)"
    )
    stream.add_argument("dataset", type=Path)
    stream.add_argument("--output", type=Path, required=True, metavar="DIR")
    stream.add_argument("--once", action="store_true", help="process what is there now, then stop")
    stream.add_argument("--interval", type=float, default=5.0, metavar="SECONDS")
    stream.add_argument("--target", type=float, default=None, metavar="MSGS_PER_S")
    add_spark_options(stream)
    generate = commands.add_parser("generate", help="write synthetic telemetry")
    generate.add_argument("dataset", type=Path)
    generate.add_argument("--rows", type=int, default=100_000, help="flow records")
    generate.add_argument("--hours", type=int, default=24)
    generate.add_argument("--start", metavar="ISO", help="first hour (UTC)")
    generate.add_argument("--seed", type=int, default=1)
    return p


def _range(args: argparse.Namespace) -> object:
    from pipeline.dataset import TimeRange, parse_time

    start = parse_time(args.start, "--from") if args.start else None
    end = parse_time(args.end, "--to") if args.end else None
    return TimeRange(start, end)


def _session(args: argparse.Namespace, app: str):  # type: ignore[no-untyped-def]
    from pipeline.session import spark_session

    # No --master: local[*], or under spark-submit the master it was given.
    return spark_session(args.master, app, progress=not args.quiet)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    started = time.monotonic()
    args = parser(prog).parse_args(argv)
    say = (lambda _: None) if getattr(args, "quiet", False) else _progress(prog)
    try:
        if args.command != "generate":
            from pipeline.session import prerequisites

            prerequisites()  # before any progress line: no Java (or PySpark) is one line
        return _run(args, say, started)
    except PipelineError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _progress(prog: str):  # type: ignore[no-untyped-def]
    started = time.monotonic()

    def say(step: str) -> None:
        print(f"{prog}: [{time.monotonic() - started:6.1f}s] {step}", file=sys.stderr, flush=True)

    return say


def _run(args: argparse.Namespace, say, started: float) -> int:  # type: ignore[no-untyped-def]
    if args.command == "generate":
        from pipeline.dataset import parse_time
        from pipeline.synthetic import DEFAULT_START, Spec, generate

        start = parse_time(args.start, "--start") if args.start else DEFAULT_START
        start = start.replace(minute=0, second=0, microsecond=0)
        spec = Spec(flow_rows=args.rows, hours=args.hours, start=start, seed=args.seed)
        written = generate(args.dataset, spec)
        print(f"wrote {written['flow']:,} flow and {written['router']:,} router records")
        return 0
    if args.command == "analyze":
        return run_analyze(
            args.dataset,
            _range(args),  # type: ignore[arg-type]
            args.output,
            args,
            say,
            started,
        )
    if args.command == "compact":
        from pipeline.dataset import TimeRange, check_dataset
        from pipeline.rollup import compact

        check_dataset(args.dataset, TimeRange())
        spark = _session(args, "routernet-compact")
        say("compacting closed hours and days")
        done = compact(spark, args.dataset)
        print(f"rolled up {done['hours']} hours and {done['days']} days")
        return 0
    if args.command == "recommend":
        if args.configmap and not args.namespace:
            raise PipelineError("--configmap needs --namespace: the ConfigMap's namespace")
        return run_recommend(args, _range(args), say)
    if args.command == "stream":
        return run_stream(args, say)
    raise AssertionError(args.command)


def run_analyze(
    dataset: Path,
    time_range,  # type: ignore[no-untyped-def]
    output: Path,
    args: argparse.Namespace,
    say,  # type: ignore[no-untyped-def]
    started: float,
) -> int:
    """analyze's body, shared with `routernet analyze`; `started`: when the command started
    (time.monotonic), so the time printed is the whole run's, Spark's start included."""
    from pipeline.analyze import analyze, write
    from pipeline.dataset import check_dataset

    check_dataset(dataset, time_range)  # before a JVM starts
    say("starting Spark")
    spark_at = time.monotonic()
    spark = _session(args, "routernet-analyze")
    spark_seconds = time.monotonic() - spark_at
    result = analyze(spark, dataset, time_range, use_rollups=not args.raw, progress=say)
    write(result, output)
    shown: list[Path] = []
    if not getattr(args, "no_plots", False):
        from pipeline.report import write_report

        say("plots and report")
        shown = write_report(result, output)
    s = result.summary
    print(
        f"analyzed {s['flow_records']:,} flow records ({s['deliveries']:,} deliveries,"
        f" {s['addresses']:,} addresses, {len(s['routers'])} routers)"
        f" in {time.monotonic() - started:.1f} s ({spark_seconds:.1f} s of it starting Spark);"
        f" wrote {output}"
    )
    matrix = result.tables["traffic_matrix"]
    print(f"\ntraffic matrix{' (busiest first)' if matrix.num_rows > MATRIX_SHOWN else ''}:")
    print(matrix_table(matrix))
    for path in shown:
        print(f"{'report' if path.suffix == '.html' else 'plot'}: {path}")
    return 0


def run_recommend(args: argparse.Namespace, time_range: Any, say: Callable[[str], None]) -> int:
    """recommend's body: the recommendation computed (recommend.py), written, printed and, with
    --configmap, published (publish.py)."""
    from pipeline.dataset import check_dataset
    from pipeline.recommend import DEFAULT_TARGET, compute, write

    check_dataset(args.dataset, time_range)
    target = args.target or DEFAULT_TARGET
    say("starting Spark")
    spark = _session(args, "routernet-recommend")
    if args.compact:
        from pipeline.rollup import compact

        say("compacting closed hours and days")
        done = compact(spark, args.dataset)
        print(f"rolled up {done['hours']} hours and {done['days']} days")
    say("load history and path latencies")
    rec = compute(spark, args.dataset, time_range, target)
    write(rec, args.output, args.namespace)
    for r in rec["routers"]:
        print(
            f"{r['name']}: {r['observedReplicas']} -> {r['replicas']} replicas"
            f" (peak {r['peakMsgsPerSecond']:,.0f} msgs/s, hottest pod"
            f" {r['peakPodMsgsPerSecond']:,.0f})"
        )
    print(f"{len(rec['connections'])} connection costs; wrote {args.output}")
    if args.configmap:
        from pipeline.publish import publish

        publish(rec, args.configmap, args.namespace)
        print(f"wrote ConfigMap {args.namespace}/{args.configmap}")
    return 0


def run_stream(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    """stream's body: the streaming query (stream.py) started and waited on."""
    from pipeline.recommend import DEFAULT_TARGET
    from pipeline.stream import start

    if not (args.dataset / "router").is_dir():
        raise PipelineError(f"dataset {args.dataset} has no router/ records to stream")
    say("starting Spark")
    spark = _session(args, "routernet-stream")
    query = start(
        spark,
        args.dataset,
        args.output,
        once=args.once,
        interval=args.interval,
        target=args.target or DEFAULT_TARGET,
    )
    say(f"streaming {args.dataset / 'router'} to {args.output}")
    query.awaitTermination()
    say("done")
    return 0


MATRIX_SHOWN = 20
MATRIX_COLUMNS = (
    "ingress_router",
    "egress_router",
    "address",
    "deliveries",
    "bytes",
    "accepted",
    "released",
    "rejected",
    "modified",
)


def with_leg(row: dict[str, Any]) -> dict[str, Any]:
    """A hosted node's rows say which way they went after the address, `jobs (in)`, `jobs (out)`
    (schema.py's node_leg): a producer and a consumer on its host would read as one path."""
    leg = row.pop("node_leg")
    return row if leg is None else {**row, "address": f"{row['address']} ({leg})"}


def matrix_table(table: pa.Table) -> str:
    """The traffic matrix as an aligned text table, busiest paths first, dynamic reply
    addresses folded per path; egress '-' is what reached no consumer."""
    rows = sorted(
        map(
            with_leg,
            fold_dynamic(
                table.select([*MATRIX_COLUMNS, "node_leg"]).to_pylist(),
                per=("ingress_router", "egress_router", "node_leg"),
                sums=MATRIX_COLUMNS[3:],
            ),
        ),
        key=lambda r: (-r["deliveries"], r["address"]),
    )[:MATRIX_SHOWN]
    cells = [[c.upper().replace("_ROUTER", "") for c in MATRIX_COLUMNS]] + [
        [
            "-" if r[c] is None else f"{r[c]:,}" if isinstance(r[c], int) else str(r[c])
            for c in MATRIX_COLUMNS
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(MATRIX_COLUMNS))]
    numeric = [i >= 3 for i in range(len(MATRIX_COLUMNS))]
    return "\n".join(
        "  ".join(
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(row, widths, numeric, strict=True)
        ).rstrip()
        for row in cells
    )


def analyze_state_dir(args: argparse.Namespace, prog: str) -> int:
    """`routernet analyze`: analyze `<state-dir>/telemetry/`, the collector's dataset of the
    local network, into `<state-dir>/analysis/` unless --output says otherwise."""
    started = time.monotonic()
    args.raw = False
    args.no_plots = False
    args.quiet = False
    say = _progress(prog)
    try:
        from pipeline.session import prerequisites

        prerequisites()
        return run_analyze(
            args.state_dir / "telemetry",
            _range(args),
            args.output or args.state_dir / "analysis",
            args,
            say,
            started,
        )
    except PipelineError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
