"""Builds the C clients and runs one sender → receiver transfer with them.

Every process started here is stopped on the way out, whatever happens, so a failed or
interrupted run never leaves a client or a router behind holding a port.
"""

from __future__ import annotations

import json
import os
import random
import selectors
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

BENCH_DIR = Path(__file__).resolve().parent
BUILD_DIR = BENCH_DIR / "build"
C_DIR = BENCH_DIR / "c"
# Where Debian's libqpid-proton11-dev-examples puts Proton's C examples; broker.c is the
# stand-in intermediary used to exercise the through-an-intermediary path.
EXAMPLES_DIR = Path("/usr/share/proton/examples/c")
HOST = "127.0.0.1"
ADDRESS = "bench"
# Upstream Proton installs one .pc per library; Debian ships a single libqpid-proton.pc.
PKG_CONFIG_CHOICES = (("libqpid-proton-core", "libqpid-proton-proactor"), ("libqpid-proton",))
# Slowest message rate a run may have before it is taken as hung; generous, so that only a
# stuck run hits it.
SLOWEST_MSGS_PER_S = 10_000
SENDER_GRACE_S = 10.0


class BenchError(RuntimeError):
    """A measurement could not be taken; the message says why and where to look."""


@dataclass(frozen=True, slots=True)
class Clients:
    """Paths of the compiled programs and the Proton C version they were built against."""

    sender: Path
    receiver: Path
    whole_sender: Path
    """One large message put on the link whole (bench/whole.py)."""
    broker: Path | None
    proton_c_version: str


def _proton_flags() -> tuple[str, list[str]]:
    for packages in PKG_CONFIG_CHOICES:
        flags = subprocess.run(
            ["pkg-config", "--cflags", "--libs", *packages], capture_output=True, text=True
        )
        if flags.returncode == 0:
            version = subprocess.run(
                ["pkg-config", "--modversion", packages[0]],
                capture_output=True,
                text=True,
                check=True,
            )
            return version.stdout.strip(), shlex.split(flags.stdout)
    raise BenchError("pkg-config finds no Proton C library: run scripts/system-deps.sh")


def _libcrypto_flags() -> list[str]:
    """OpenSSL's SHA-256, with which the whole sender makes and hashes its body."""
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "libcrypto"], capture_output=True, text=True
    )
    if flags.returncode != 0:
        raise BenchError("pkg-config finds no libcrypto: run scripts/system-deps.sh")
    return shlex.split(flags.stdout)


def _compile(source: Path, output: Path, flags: Sequence[str]) -> None:
    # Compile beside the target and rename, so a concurrent run never executes half a binary.
    partial = output.with_name(f"{output.name}.{os.getpid()}.tmp")
    command = ["gcc", "-O2", "-g", "-Wall", "-Wextra", "-I", str(source.parent)]
    result = subprocess.run(
        [*command, "-o", str(partial), str(source), *flags, "-lpthread"],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BenchError(f"gcc failed on {source}:\n{result.stderr}")
    partial.replace(output)


def build(*, broker: bool = False) -> Clients:
    """Compiles the clients (and Proton's broker example if asked) into bench/build/.

    Always recompiles: it takes about a second and no stale binary can survive a change.
    """
    version, flags = _proton_flags()
    BUILD_DIR.mkdir(exist_ok=True)
    for name in ("sender", "receiver"):
        _compile(C_DIR / f"{name}.c", BUILD_DIR / name, flags)
    _compile(C_DIR / "whole_sender.c", BUILD_DIR / "whole_sender", [*flags, *_libcrypto_flags()])
    if broker:
        _compile(EXAMPLES_DIR / "broker.c", BUILD_DIR / "broker", flags)
    return Clients(
        sender=BUILD_DIR / "sender",
        receiver=BUILD_DIR / "receiver",
        whole_sender=BUILD_DIR / "whole_sender",
        broker=BUILD_DIR / "broker" if broker else None,
        proton_c_version=version,
    )


def stop(proc: subprocess.Popen[Any]) -> None:
    """Terminates a process the bench started, killing it if it does not go in 5 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def running(args: Sequence[str | Path], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """Starts a process and guarantees it is stopped when the block is left."""
    proc = subprocess.Popen([str(a) for a in args], **popen)
    try:
        yield proc
    finally:
        stop(proc)


def free_port() -> int:
    """A port free on loopback now, for a server that cannot be told to pick its own."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on loopback now, below the kernel's range for outgoing
    connections: a port that range gave out (`free_port`) can be taken again by a router's
    connector before the router meant to listen on it starts, which with a hundred of them
    starting one by one happens. From a random point of that stretch, so that two runs side
    by side (tests on two workers) do not pick the same ones."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    stretch = list(range(max(1024, ephemeral_low - 12_000), ephemeral_low))
    start = random.randrange(len(stretch))
    found: list[int] = []
    for port in stretch[start:] + stretch[:start]:
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise BenchError(f"not {count} free ports below {ephemeral_low} on {HOST}")


def wait_for_port(proc: subprocess.Popen[Any], port: int, what: str, timeout: float) -> None:
    """Returns once `proc` accepts TCP connections on `port`; fails if it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with code {proc.returncode} before listening")
        try:
            socket.create_connection((HOST, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"{what} did not listen on {HOST}:{port} within {timeout:.0f} s")


def _read_line(stream: IO[str], timeout: float, what: str) -> str:
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise BenchError(f"{what} said nothing within {timeout:.0f} s")
    return stream.readline()


PIPES: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}


def receiver_args(
    clients: Clients,
    port: int | None,
    count: int,
    trace: Path | None = None,
    *,
    address: str = ADDRESS,
) -> list[str | Path]:
    """The receiver's command line: attached to `port`'s router, or listening if None.

    With `trace`, it also writes every message's sequence number, send and arrival times there.
    """
    mode = ["listen", HOST, "0"] if port is None else ["connect", HOST, str(port)]
    return [clients.receiver, *mode, address, str(count), *([trace] if trace else [])]


def sender_args(
    clients: Clients,
    port: int,
    count: int,
    rate: float,
    presettled: bool,
    *,
    durable: bool = False,
    address: str = ADDRESS,
) -> list[str | Path]:
    """The sender's command line; `durable` sets the durable header on every message."""
    settle = "presettled" if presettled else "unsettled"
    return [
        clients.sender,
        HOST,
        str(port),
        address,
        str(count),
        f"{rate:.1f}",
        settle,
        *(["durable"] if durable else []),
    ]


def read_trace(path: Path) -> list[tuple[int, int, int]]:
    """A receiver's trace (`receiver_args`): (seq, sent_ns, received_ns) per message, in
    arrival order."""
    records = []
    for line in path.read_text().splitlines():
        seq, sent, got = line.split()
        records.append((int(seq), int(sent), int(got)))
    return records


def wait_ready(receiver: subprocess.Popen[str], timeout: float = 30) -> str:
    """Waits for the receiver's "ready" line; returns what follows it (its port, or "-")."""
    assert receiver.stdout is not None and receiver.stderr is not None
    ready = _read_line(receiver.stdout, timeout, "receiver").split()
    if ready[:1] != ["ready"]:
        raise BenchError(f"receiver did not get ready: {receiver.stderr.read().strip()}")
    return ready[1]


def report(proc: subprocess.Popen[str], timeout: float, what: str) -> dict[str, Any]:
    """Waits for a client to exit and returns its JSON report."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{what} still running after {timeout:.0f} s") from e
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise BenchError(f"{what} failed with code {proc.returncode}: {err.strip() or out.strip()}")
    report: dict[str, Any] = json.loads(lines[-1])
    return report


@dataclass(frozen=True, slots=True)
class Transfer:
    """One transfer's outcome: the receiver's and the sender's JSON reports."""

    receiver: dict[str, Any]
    sender: dict[str, Any]


def transfer(
    clients: Clients,
    *,
    port: int | None,
    count: int,
    rate: float,
    presettled: bool,
    receive_port: int | None = None,
    durable: bool = False,
    address: str = ADDRESS,
) -> Transfer:
    """Sends `count` messages from a fresh sender to a fresh receiver and waits for both.

    `port` is the intermediary's; None makes the receiver listen and the sender connect to it
    directly, the peer-to-peer baseline. `receive_port`, if given, is where the receiver
    attaches instead (another router of a network). `rate` is messages/s, 0 for as fast as
    possible. `durable` marks the messages durable; `address` is both ends' (default "bench").
    """
    timeout = 30 + 2 * count / (rate or SLOWEST_MSGS_PER_S)
    attach = port if receive_port is None else receive_port
    receiving = receiver_args(clients, attach, count, address=address)
    with running(receiving, **PIPES) as receiver:
        ready = wait_ready(receiver)
        target = int(ready) if port is None else port
        sending = sender_args(
            clients, target, count, rate, presettled, durable=durable, address=address
        )
        with running(sending, **PIPES) as sender:
            if presettled:
                # The receiver stops by itself, with every message or after a quiet spell (a
                # pre-settled message may be dropped); the sender is done by then.
                received = report(receiver, timeout, "receiver")
                sent = report(sender, SENDER_GRACE_S, "sender")
            else:
                # The sender is done once every message has its outcome: whatever was accepted
                # has reached the receiver by then, and what was released never will.
                sent = report(sender, timeout, "sender")
                if sent["accepted"] < count:
                    receiver.send_signal(signal.SIGTERM)
                received = report(receiver, SENDER_GRACE_S, "receiver")
    # Pre-settled messages may be dropped and unsettled ones released (a router network sheds
    # load that way), so a shortfall the sender was told of is recorded, not fatal; a message
    # accepted but not received, or never settled, means the path is broken.
    got = received["received"]
    if got < 2:
        raise BenchError(f"receiver got {got} of {count} messages")
    if not presettled and (
        got != sent["accepted"] or sent["accepted"] + sent["not_accepted"] != count
    ):
        raise BenchError(
            f"receiver got {got} of {count} messages; the sender saw {sent['accepted']} "
            f"accepted and {sent['not_accepted']} not"
        )
    return Transfer(receiver=received, sender=sent)
