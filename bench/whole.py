"""Large messages of growing size, sent whole and streamed, through one router and a chain.

`sizes-1router` and `sizes-chain3` (network suite): for each size from 1 MiB to 1 GiB, one
message from a sender to a receiver with a window of one, through one router and through
A-B-C. Three times per size: with a sender that puts the message on the link whole (as
Proton, JMS and rhea applications do) written with python-qpid-proton's blocking API
(`whole`) and one written in C on Proton's proactor (`whole-c`, bench/c/whole_sender.c:
pn_message_send, no Python on that side), and with bench/large.py's streaming clients, which
never hold it (`streamed`). The receiver is python-qpid-proton's, with a window of one. With
QDROUTERD set, `qdrouterd1-sizes-1router` and `qdrouterd1-sizes-chain3` first do the same
through qdrouterd (one worker thread).

What it shows: the seconds per MiB at each size (flat when time is linear in size; a router
that made the whole-message sender re-read what it had not sent yet grew them with the size),
and each router's peak RSS over its idle RSS while the message crossed (the routers stream:
bounded whatever the size). The clients run as their own processes; the whole-message ones
hold the message two or three times over, so 1 GiB needs a few GiB of free memory.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import large
from bench.clients import HOST, BenchError
from bench.one_router import IDLE_SETTLE_S, proc_status_mib
from bench.routers import LINE, Spec, network

MIB = 1024 * 1024
SIZES_MIB = (1, 16, 64, 256, 1024)
SCENARIOS = ("sizes-1router", "sizes-chain3")
QDROUTERD_SCENARIOS = tuple(f"qdrouterd1-{name}" for name in SCENARIOS)
ADDRESS = "bench.whole"
TIMEOUT_S = 600.0
TARGET_RSS_OVER_IDLE_MIB = 64.0


def _body(size: int) -> bytes:
    """`size` bytes, each MiB unlike its neighbours (large.py's chunks)."""
    whole, rest = divmod(size, large.CHUNK)
    return b"".join(large._chunk(i) for i in range(whole)) + large._chunk(whole)[:rest]


def send(url: str, size: int) -> None:
    """A sender process: one message of `size` body bytes, put on the link whole."""
    from proton import Message
    from proton.utils import BlockingConnection

    body = _body(size)
    digest = hashlib.sha256(body).hexdigest()
    # Encoded before connecting: at 1 GiB that takes long enough for a peer's idle timeout.
    encoded = Message(body=body).encode()
    del body
    conn = BlockingConnection(url, timeout=TIMEOUT_S)
    sender = conn.create_sender(ADDRESS)
    conn.wait(lambda: sender.link.credit > 0, timeout=TIMEOUT_S, msg="credit")
    started = time.monotonic()
    delivery = sender.link.delivery(b"1")
    sender.link.send(encoded)  # whole, as BlockingSender.send puts it
    sender.link.advance()
    conn.wait(lambda: delivery.settled or bool(delivery.remote_state), timeout=TIMEOUT_S)
    settled = time.monotonic()
    conn.close()
    print(json.dumps({"started": started, "settled": settled, "sha256": digest}), flush=True)


def receive(url: str) -> None:
    """A receiver process with a window of one: says when it is attached, then when the
    message arrived and what it was."""
    from proton.utils import BlockingConnection

    conn = BlockingConnection(url, timeout=TIMEOUT_S)
    receiver = conn.create_receiver(ADDRESS, credit=1)
    print("ready", flush=True)
    message = receiver.receive(timeout=TIMEOUT_S)
    arrived = time.monotonic()
    receiver.accept()
    conn.close()
    body = message.body
    print(
        json.dumps(
            {"arrived": arrived, "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        ),
        flush=True,
    )


def _client(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )


def _python_sender(url: str, size: int) -> list[str]:
    return [sys.executable, "-m", "bench.whole", "send", url, str(size)]


def _c_sender(program: Path) -> Callable[[str, int], list[str]]:
    def command(url: str, size: int) -> list[str]:
        host, port = url.removeprefix("amqp://").rsplit(":", 1)
        return [str(program), host, port, ADDRESS, str(size)]

    return command


def _whole(sender_command: Callable[[str, int], list[str]]) -> Callable[..., dict[str, Any]]:
    """A transfer by a sender that puts the message on its link whole."""

    def transfer(send_url: str, receive_url: str, size: int) -> dict[str, Any]:
        return _transfer_whole(sender_command(send_url, size), receive_url, size)

    return transfer


def _transfer_whole(sender_command: list[str], receive_url: str, size: int) -> dict[str, Any]:
    receiver = _client([sys.executable, "-m", "bench.whole", "receive", receive_url])
    sender = None
    try:
        assert receiver.stdout is not None
        if receiver.stdout.readline().strip() != "ready":
            raise BenchError(f"the receiver did not attach: {receiver.communicate()[1][-300:]}")
        sender = _client(sender_command)
        sent_out, sent_err = sender.communicate(timeout=TIMEOUT_S)
        if sender.returncode:
            raise BenchError(f"the sender of {size:,} bytes failed: {sent_err[-300:]}")
        got_out, got_err = receiver.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{size:,} bytes sent whole did not arrive in {TIMEOUT_S:.0f} s") from None
    finally:
        for proc in (sender, receiver):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    if receiver.returncode:
        raise BenchError(f"the receiver of {size:,} bytes failed: {got_err[-300:]}")
    sent, got = json.loads(sent_out), json.loads(got_out)
    seconds = got["arrived"] - sent["started"]
    return {
        "seconds": round(seconds, 2),
        "identical": got["bytes"] == size and got["sha256"] == sent["sha256"],
    }


def _streamed(send_url: str, receive_url: str, size: int) -> dict[str, Any]:
    moved = large._transfer(send_url, receive_url, size)
    return {"seconds": moved["seconds"], "identical": moved["identical"]}


def _measure(routers: dict[str, Any], how: Any, size: int) -> dict[str, Any]:
    """One transfer from the first router to the last, the routers' RSS sampled throughout."""
    ids = sorted(routers)
    pids = {rid: routers[rid].proc.pid for rid in ids}
    time.sleep(IDLE_SETTLE_S)  # the previous transfer's memory given back
    idle = {rid: proc_status_mib(pid, "VmRSS") for rid, pid in pids.items()}
    with large.peak_rss(pids) as peak:
        moved = how(
            f"amqp://{HOST}:{routers[ids[0]].port}", f"amqp://{HOST}:{routers[ids[-1]].port}", size
        )
    if not moved["identical"]:
        raise BenchError(f"{size:,} bytes arrived altered")
    return {
        "seconds": moved["seconds"],
        "s_per_mib": round(moved["seconds"] / (size / MIB), 4),
        "rss_over_idle_mib": round(max(peak[rid] - idle[rid] for rid in ids), 1),
    }


HOWS = {
    "whole": "whole (python)",
    "whole-c": "whole (C)",
    "streamed": "streamed",
}
"""The senders, as the results name them and as the tables head them."""


def run(
    name: str,
    log_dir: Path,
    whole_sender: Path,
    sizes_mib: tuple[int, ...] = SIZES_MIB,
) -> dict[str, Any]:
    """The scenario; `whole_sender` is the compiled bench/c/whole_sender.c."""
    qdrouterd = name.startswith("qdrouterd1-")
    specs = LINE if name.endswith("chain3") else (Spec("A"),)
    senders = {
        "whole": _whole(_python_sender),
        "whole-c": _whole(_c_sender(whole_sender)),
        "streamed": _streamed,
    }
    rows: dict[str, dict[str, Any]] = {}
    with network(specs, log_dir, name, qdrouterd=qdrouterd) as (routers, _):
        for mib in sizes_mib:
            rows[str(mib)] = {how: _measure(routers, f, mib * MIB) for how, f in senders.items()}
            print(f"bench: {name}: {mib} MiB: {rows[str(mib)]}", file=sys.stderr, flush=True)
    peak = max(r[how]["rss_over_idle_mib"] for r in rows.values() for how in r)
    # Linear: the largest size's seconds per MiB no worse than twice the 16 MiB one's.
    linear = (
        all(
            rows[str(sizes_mib[-1])][how]["s_per_mib"] <= 2 * rows["16"][how]["s_per_mib"]
            for how in senders
        )
        if "16" in rows
        else None
    )
    return {
        "kind": "sizes",
        "path": "-".join(s.id for s in specs),
        "router": "qdrouterd" if qdrouterd else "routernet",
        "sizes": rows,
        "target_rss_over_idle_mib": TARGET_RSS_OVER_IDLE_MIB,
        "met": peak <= TARGET_RSS_OVER_IDLE_MIB and linear is not False,
        "linear": linear,
    }


def _hows(s: dict[str, Any]) -> list[str]:
    """The senders a result has (results from before the C sender have two)."""
    first = next(iter(s["sizes"].values()), {})
    return [how for how in HOWS if how in first]


def markdown(name: str, s: dict[str, Any]) -> list[str]:
    """The scenario's table: seconds (and seconds per MiB) and the routers' RSS growth."""
    hows = _hows(s)
    head = "".join(f" {HOWS[h]} s | s/MiB | RSS + |" for h in hows)
    lines = [
        "",
        f"{name}: one message per size through {s['path']} ({s['router']}), receiver window "
        "1; for each sender, seconds from send to arrival, seconds per MiB and the highest "
        "router RSS over its idle, MiB.",
        "",
        f"| MiB |{head}",
        "|--:|" + "--:|--:|--:|" * len(hows),
    ]
    for mib, row in s["sizes"].items():
        cells = [mib]
        for how in hows:
            r = row[how]
            cells += [
                f"{r['seconds']:.2f}",
                f"{r['s_per_mib']:.3f}",
                f"{r['rss_over_idle_mib']:.1f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def comparison(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """Ours beside qdrouterd's from the same run, size by size: seconds and RSS growth."""
    hows = [h for h in _hows(ours) if h in _hows(theirs)]
    head = "".join(f" {HOWS[h]} s | ratio |" for h in hows)
    lines = [
        "",
        f"{ours['path']}, routernet / qdrouterd in the same run: seconds from send to arrival "
        "(ratio; below 1 is ours faster) and the highest router RSS over its idle, MiB.",
        "",
        f"| MiB |{head} RSS + |",
        "|--:|" + "--:|--:|" * len(hows) + "--:|",
    ]
    for mib, row in ours["sizes"].items():
        if mib not in theirs["sizes"]:
            continue
        cells = [mib]
        for how in hows:
            a, b = row[how]["seconds"], theirs["sizes"][mib][how]["seconds"]
            cells += [f"{a:.2f} / {b:.2f}", f"{a / b:.2f}" if b else "-"]
        peaks = [max(r[h]["rss_over_idle_mib"] for h in hows) for r in (row, theirs["sizes"][mib])]
        cells.append(f"{peaks[0]:.1f} / {peaks[1]:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]))
    else:
        receive(sys.argv[2])
