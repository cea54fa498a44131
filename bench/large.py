"""One very large message through a chain of three: streamed, with bounded router memory.

`chain3-1gib` (network suite, about half a minute): a sender on A sends
one 1 GiB message to a receiver on C through A-B-C. A router that held a message whole would
grow by its size; these are to stay below 100 MiB of RSS each while it crosses, and to give
back what the burst took. Neither client holds the message either: the sender generates the
body chunk by chunk as session window allows, the receiver hashes it as it arrives, and the
hashes must match. Each router's RSS is sampled from /proc every 20 ms from idle to the
message's settlement, and read again 1.5 s after it (the routers trim freed memory once a
large message is done).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.clients import HOST, BenchError
from bench.one_router import IDLE_SETTLE_S, proc_cpu_seconds, proc_status_mib
from bench.routers import LINE, network

SCENARIOS = ("chain3-1gib",)
SIZE = 1024**3
CHUNK = 1024 * 1024
ADDRESS = "bench.large"
TIMEOUT_S = 300.0
TARGET_RSS_MIB = 100.0
SAMPLE_S = 0.02
SETTLE_AFTER_S = 1.5
# What the sender keeps queued in its session (more made the transfer slower, not faster).
SENDER_AHEAD = 4 * CHUNK


def _chunk(i: int) -> bytes:
    """The body's i-th MiB: reproducible, and unlike its neighbours."""
    seed = hashlib.sha256(i.to_bytes(8, "little")).digest()
    return (seed * (CHUNK // len(seed)))[:CHUNK]


def _prefix(size: int) -> bytes:
    """A message with one data section of `size` bytes: its descriptor and vbin32 length."""
    return b"\x00\x53\x75\xb0" + size.to_bytes(4, "big")


def _transfer(send_url: str, receive_url: str, size: int) -> dict[str, Any]:
    """Streams one message of `size` body bytes from send_url to receive_url; returns timings
    and whether the body arrived byte-identical (sha256 on both sides)."""
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Ends(MessagingHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(prefetch=0, auto_accept=False)
            self.sent_hash = hashlib.sha256()
            self.got_hash = hashlib.sha256()
            self.next = 0
            self.delivery: Any = None
            self.got = 0
            self.header = len(_prefix(size))
            self.started = 0.0
            self.arrived = 0.0
            self.settled = 0.0
            self.outcome: Any = None
            self.failed: str | None = None

        def on_start(self, event: Any) -> None:
            c = event.container
            self.receiver = c.create_receiver(c.connect(receive_url), ADDRESS)
            self.receiver.flow(1)
            self.sender_conn = c.connect(send_url)
            self.sender = c.create_sender(self.sender_conn, ADDRESS)
            self.timer = c.schedule(TIMEOUT_S, self)

        def on_timer_task(self, event: Any) -> None:
            self.failed = f"timed out with {self.got:,} of {size:,} bytes received"
            event.container.stop()

        def on_sendable(self, event: Any) -> None:
            self.pump()

        def on_link_flow(self, event: Any) -> None:
            self.pump()

        def on_transport(self, event: Any) -> None:
            self.pump()

        def pump(self) -> None:
            link = self.sender
            if self.delivery is None:
                if link.credit <= 0:
                    return
                self.started = time.monotonic()
                self.delivery = link.delivery(b"1")
                link.stream(_prefix(size))
            # Only what the session can take soon: Proton would otherwise buffer it all here.
            while self.next * CHUNK < size and link.session.outgoing_bytes < SENDER_AHEAD:
                piece = _chunk(self.next)[: size - self.next * CHUNK]
                self.sent_hash.update(piece)
                link.stream(piece)
                self.next += 1
                if self.next * CHUNK >= size:
                    link.advance()

        def on_delivery(self, event: Any) -> None:
            d = event.delivery
            if d.link.is_sender:
                if d.remote_state and not self.settled:
                    self.settled = time.monotonic()
                    self.outcome = d.remote_state
                    d.settle()
                    # Closed, not just left: a receiver left attached with no credit would be
                    # offered the next transfer's message until the router timed it out.
                    self.timer.cancel()
                    self.sender_conn.close()
                    self.receiver.connection.close()
                return
            while d.pending:
                data = d.link.recv(d.pending)
                if data is None:
                    break
                skip = min(self.header, len(data))
                self.header -= skip
                self.got_hash.update(data[skip:])
                self.got += len(data) - skip
            if not d.partial:
                self.arrived = time.monotonic()
                d.update(d.ACCEPTED)
                d.settle()

    ends = Ends()
    Container(ends).run()
    if ends.failed:
        raise BenchError(ends.failed)
    return {
        "bytes": size,
        "received_bytes": ends.got,
        "identical": ends.got == size and ends.got_hash.digest() == ends.sent_hash.digest(),
        "outcome": str(ends.outcome),
        "seconds": round(ends.arrived - ends.started, 2),
        "mib_per_s": round(size / 2**20 / max(ends.arrived - ends.started, 1e-6), 1),
    }


@contextmanager
def peak_rss(pids: dict[str, int]) -> Iterator[dict[str, float]]:
    """Each process's RSS (MiB) from idle, then its peak, sampled every SAMPLE_S while the
    block runs: the sampled dict holds the peaks once it is done."""
    peak = {rid: proc_status_mib(pid, "VmRSS") for rid, pid in pids.items()}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_S):
            for rid, pid in pids.items():
                peak[rid] = max(peak[rid], proc_status_mib(pid, "VmRSS"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


def run(log_dir: Path, size: int = SIZE) -> dict[str, Any]:
    with network(LINE, log_dir, "chain3-1gib") as (routers, _):
        time.sleep(IDLE_SETTLE_S)
        pids = {rid: r.proc.pid for rid, r in routers.items()}
        idle = {rid: proc_status_mib(pid, "VmRSS") for rid, pid in pids.items()}
        cpu = {rid: proc_cpu_seconds(pid) for rid, pid in pids.items()}
        with peak_rss(pids) as peak:
            moved = _transfer(
                f"amqp://{HOST}:{routers['A'].port}", f"amqp://{HOST}:{routers['C'].port}", size
            )
        cpu = {rid: proc_cpu_seconds(pid) - cpu[rid] for rid, pid in pids.items()}
        time.sleep(SETTLE_AFTER_S)
        after = {rid: proc_status_mib(pid, "VmRSS") for rid, pid in pids.items()}
    if not moved["identical"]:
        raise BenchError(f"the message arrived altered: {moved}")
    return {
        "kind": "large",
        "path": "A-B-C",
        **moved,
        "routers": {
            rid: {
                "idle_rss_mib": round(idle[rid], 1),
                "peak_rss_mib": round(peak[rid], 1),
                "after_rss_mib": round(after[rid], 1),
                # the Python clients set the pace; this is what the router could carry
                "cpu_s_per_gib": round(cpu[rid] / (size / 2**30), 2),
            }
            for rid in routers
        },
        "target_rss_mib": TARGET_RSS_MIB,
        "met": all(p < TARGET_RSS_MIB for p in peak.values()),
    }
