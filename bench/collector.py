"""The collector benchmark: sustained telemetry records per second into Parquet.

One router (``python -m router``), the collector (``python -m collector``) attached to it, and
an in-process sender that sends pre-encoded telemetry messages of ``ROWS_PER_MESSAGE`` flow
records each (encode_batch bodies, as a router would send a window), *unsettled*: a message
is accepted only once its rows are written and fsynced, so the rate measured is records on
disk, not records received. Timed from the first send to the last acceptance. Also read from
/proc: the collector's CPU per record and its peak RSS; and the dataset's bytes per record.

``parquet-only`` measures the same work without AMQP, in this process: decode_batch, the Arrow
conversion, partitioning and the writes, to show where the time goes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.clients import HOST, BenchError, free_port, wait_for_port
from bench.one_router import REPO_DIR, START_TIMEOUT_S, proc_cpu_seconds, proc_status_mib

ROWS_PER_MESSAGE = 200
DEFAULT_RECORDS = 400_000
QUICK_RECORDS = 100_000
SCENARIOS = ("collector-unsettled", "parquet-only")
BASE_MS = 1_795_330_800_000


def _rows(count: int, start: int) -> list[tuple[Any, ...]]:
    from router.telemetry.schema import FIELDS, LATENCY_BUCKETS, SCHEMA_VERSION

    by_type = {
        "string": lambda name, i: f"{name}-{i % 50}",
        "int64": lambda name, i: i,
        "float64": lambda name, i: i * 0.5,
        "timestamp_ms": lambda name, i: BASE_MS,
        "int64_list": lambda name, i: [i % 7] * LATENCY_BUCKETS,
    }
    special = {
        "record_id": lambda i: str(uuid.uuid4()),
        "schema_version": lambda i: SCHEMA_VERSION,
        "window_end": lambda i: BASE_MS + 10_000,
    }
    return [
        tuple(
            special[f.name](i) if f.name in special else by_type[f.type](f.name, i)
            for f in FIELDS["flow"]
        )
        for i in range(start, start + count)
    ]


def _messages(records: int) -> list[bytes]:
    from proton import Message

    from router.telemetry.schema import TELEMETRY_SUBJECT, encode_batch

    return [
        Message(
            subject=TELEMETRY_SUBJECT,
            body=encode_batch("flow", _rows(ROWS_PER_MESSAGE, n * ROWS_PER_MESSAGE)),
        ).encode()
        for n in range(records // ROWS_PER_MESSAGE)
    ]


def _send_all(url: str, messages: list[bytes], timeout: float) -> tuple[float, float]:
    """Sends every message unsettled; returns (first send, last acceptance) in monotonic s."""
    from proton import Delivery
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    from router.telemetry.schema import TELEMETRY_ADDRESS

    class Sender(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.next = 0
            self.accepted = 0
            self.first = 0.0
            self.last = 0.0
            self.failed: str | None = None

        def on_start(self, event: Any) -> None:
            conn = event.container.connect(url)
            self.sender = event.container.create_sender(conn, TELEMETRY_ADDRESS)
            event.container.schedule(timeout, self)

        def on_timer_task(self, event: Any) -> None:
            self.failed = f"timed out with {self.accepted} of {len(messages)} accepted"
            event.container.stop()

        def on_sendable(self, event: Any) -> None:
            link = event.sender
            while link.credit and self.next < len(messages):
                if not self.first:
                    self.first = time.monotonic()
                link.delivery(str(self.next))
                link.stream(messages[self.next])
                link.advance()
                self.next += 1

        def on_settled(self, event: Any) -> None:
            if event.delivery.remote_state != Delivery.ACCEPTED:
                self.failed = f"a message was {event.delivery.remote_state}"
                event.container.stop()
                return
            self.accepted += 1
            if self.accepted == len(messages):
                self.last = time.monotonic()
                event.connection.close()
                event.container.stop()

    handler = Sender()
    Container(handler).run()
    if handler.failed:
        raise BenchError(handler.failed)
    return handler.first, handler.last


def run_collector(records: int, log_dir: Path) -> dict[str, Any]:
    messages = _messages(records)
    work = Path(tempfile.mkdtemp(prefix="routernet-bench-collector-"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_DIR), str(REPO_DIR / "operator"), env.get("PYTHONPATH")) if p
    )
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with (log_dir / "collector-router.log").open("ab") as log:
            router = subprocess.Popen(
                [sys.executable, "-m", "router", "--id", "bench", "--listen", f"{HOST}:{port}"],
                stdout=log,
                stderr=log,
                env=env,
            )
        procs.append(router)
        wait_for_port(router, port, "router", START_TIMEOUT_S)
        dataset = work / "dataset"
        with (log_dir / "collector.log").open("ab") as log:
            collector = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "collector",
                    "--url",
                    f"amqp://{HOST}:{port}",
                    "--dataset",
                    str(dataset),
                    "--flush-seconds",
                    "1",
                ],
                stdout=log,
                stderr=log,
                env=env,
            )
        procs.append(collector)
        time.sleep(1.0)  # attached (the sender gets credit only once it is)
        cpu_before = proc_cpu_seconds(collector.pid)
        first, last = _send_all(f"amqp://{HOST}:{port}", messages, timeout=300)
        cpu = proc_cpu_seconds(collector.pid) - cpu_before
        peak = proc_status_mib(collector.pid, "VmHWM")
        files = list(dataset.rglob("part-*.parquet"))
        seconds = last - first
        return {
            "records": records,
            "rows_per_message": ROWS_PER_MESSAGE,
            "seconds": round(seconds, 3),
            "records_per_s": round(records / seconds),
            "collector_cpu_us_per_record": round(cpu / records * 1e6, 2),
            "collector_cpu_percent": round(100 * cpu / seconds),
            "collector_peak_rss_mib": round(peak, 1),
            "files": len(files),
            "dataset_bytes_per_record": round(sum(f.stat().st_size for f in files) / records, 1),
        }
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


def run_parquet_only(records: int) -> dict[str, Any]:
    from collector.arrow import record_batch
    from collector.buffer import Buffer
    from collector.partitions import split
    from collector.store import write_flush
    from router.telemetry.schema import decode_batch, encode_batch

    bodies = [
        encode_batch("flow", _rows(ROWS_PER_MESSAGE, n * ROWS_PER_MESSAGE))
        for n in range(records // ROWS_PER_MESSAGE)
    ]
    work = Path(tempfile.mkdtemp(prefix="routernet-bench-parquet-"))
    try:
        buffer: Buffer[None] = Buffer(max_rows=100_000, max_seconds=3600)
        started = time.perf_counter()
        for body in bodies:
            kind, rows = decode_batch(body)
            buffer.add(split(kind, record_batch(kind, rows)), None, 0.0)
            if buffer.due(0.0):
                write_flush(work, buffer.take())
        write_flush(work, buffer.take())
        seconds = time.perf_counter() - started
        return {
            "records": records,
            "seconds": round(seconds, 3),
            "records_per_s": round(records / seconds),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(chosen: list[str], records: int, log_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "collector",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "scenarios": {},
    }
    for name in chosen:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        try:
            if name == "collector-unsettled":
                outcome = run_collector(records, log_dir)
            else:
                outcome = run_parquet_only(records)
        except (BenchError, OSError) as err:
            outcome = {"error": str(err)}
        results["scenarios"][name] = outcome
        print(f"bench: {name}: {outcome}", file=sys.stderr, flush=True)
    return results


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| scenario | records | records/s | collector CPU µs/record | CPU % | peak RSS MiB"
        " | bytes/record on disk |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name, s in results["scenarios"].items():
        if "error" in s:
            lines.append(f"| {name} | failed: {s['error']} |||||")
            continue
        cells = [
            name,
            f"{s['records']:,}",
            f"{s['records_per_s']:,}",
            *(
                str(s.get(key, "-"))
                for key in (
                    "collector_cpu_us_per_record",
                    "collector_cpu_percent",
                    "collector_peak_rss_mib",
                    "dataset_bytes_per_record",
                )
            ),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
