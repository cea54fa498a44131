"""Router memory while large messages cross it: RSS from /proc before, during and after.

    PYTHONPATH=.:operator python scripts/large_rss.py [--count 3] [--mib 50] [--chain]

One router (or, with --chain, a line of three: sender on A, receiver on C), python-qpid-proton
clients in this process, `count` messages of `mib` MiB sent back to back. Prints each router's
RSS when idle, its peak while the messages cross (sampled every 20 ms), and 1 s and 3 s after
the last one was accepted.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from clients import World
from harness import RouterNetwork, RouterProcess
from proton import Message

MiB = 1024 * 1024


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--mib", type=int, default=50)
    ap.add_argument("--chain", action="store_true")
    ap.add_argument(
        "--gdb-trim",
        action="store_true",
        help="at the end, call malloc_trim(0) in each router through gdb: what glibc gives back"
        " is freed memory it kept, what stays is still allocated",
    )
    args = ap.parse_args()
    body = hashlib.sha256(b"x").digest() * (args.mib * MiB // 32)
    with tempfile.TemporaryDirectory() as tmp, World() as world:
        if args.chain:
            net = RouterNetwork(Path(tmp), world, [("A", "B", 1), ("B", "C", 1)])
            net.__enter__()
            routers = {n: net[n] for n in ("A", "B", "C")}
            rx_url, tx_url = net.url("C"), net.url("A")
        else:
            net = None
            one = RouterProcess(Path(tmp)).start()
            routers = {"R1": one}
            rx_url = tx_url = one.url
        try:
            receiver = world.connect(rx_url).receiver("big", credit=10)
            if net is not None:
                net.wait_address("big", {"C"})
            sender = world.connect(tx_url).sender("big")
            world.run_until(lambda: sender.credit > 0, what="credit")
            world.run_for(0.5)
            idle = {n: r.rss_bytes() for n, r in routers.items()}
            peak = dict(idle)
            start = time.monotonic()
            for _ in range(args.count):
                sender.send(Message(body=body))
            next_sample = 0.0
            deadline = start + 120
            while len(receiver.messages) < args.count or not sender.all_settled():
                assert time.monotonic() < deadline, "timed out"
                world.step()
                now = time.monotonic()
                if now >= next_sample:
                    for n, r in routers.items():
                        peak[n] = max(peak[n], r.rss_bytes())
                    next_sample = now + 0.02
            took = time.monotonic() - start
            cpu = {n: round(cpu_seconds(r.proc.pid), 2) for n, r in routers.items() if r.proc}
            assert all(m.body == body for m in receiver.messages)
            world.run_for(1.0)
            after1 = {n: r.rss_bytes() for n, r in routers.items()}
            world.run_for(2.0)
            after3 = {n: r.rss_bytes() for n, r in routers.items()}
            trimmed = dict(after3)
            if args.gdb_trim:
                for n, r in routers.items():
                    assert r.proc is not None
                    subprocess.run(
                        ["gdb", "-p", str(r.proc.pid), "-batch", "-ex", "call (int)malloc_trim(0)"],
                        capture_output=True,
                        check=False,
                    )
                    trimmed[n] = r.rss_bytes()
        finally:
            if net is not None:
                net.stop()
            else:
                routers["R1"].stop()
    print(f"{args.count} x {args.mib} MiB in {took:.2f} s; router CPU s: {cpu}")
    print("router  idle MiB  peak MiB  +1 s MiB  +3 s MiB  trimmed MiB")
    for n in routers:
        print(
            f"{n:6}  {idle[n] / MiB:8.1f}  {peak[n] / MiB:8.1f}"
            f"  {after1[n] / MiB:8.1f}  {after3[n] / MiB:8.1f}  {trimmed[n] / MiB:11.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
