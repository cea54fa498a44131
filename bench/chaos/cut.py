"""Cutting a connection between two routers while both stay up, as a network failure does.

``ss -K`` destroys one TCP socket by its four addresses (the kernel's SOCK_DESTROY: the socket
is aborted and the peer gets a reset), so the routers' own connection is cut, not one through a
stand-in: the routers connect to each other at the addresses ``routernet up`` gave them, and
nothing in between could be inserted without changing what they run. It needs root and a
kernel built with CONFIG_INET_DIAG_DESTROY; ``can_cut`` says whether this machine has both.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from dataclasses import dataclass

_SOCKET = re.compile(r"(\S+):(\d+)\s+(\S+):(\d+)\s+users:\(.*?pid=(\d+)")


@dataclass(frozen=True, order=True)
class Connection:
    local: tuple[str, int]
    remote: tuple[str, int]

    def describe(self) -> str:
        return f"{self.local[0]}:{self.local[1]} -> {self.remote[0]}:{self.remote[1]}"


def endpoint(text: str) -> tuple[str, int]:
    """``host:port`` as ss and ``routernet up``'s state write it."""
    host, _, port = text.rpartition(":")
    return host, int(port)


def parse(ss_output: str) -> list[tuple[Connection, int]]:
    """``ss -tnpH state established``'s lines: each socket and the pid that holds it."""
    found = []
    for line in ss_output.splitlines():
        match = _SOCKET.search(line)
        if match:
            lhost, lport, rhost, rport, pid = match.groups()
            found.append((Connection((lhost, int(lport)), (rhost, int(rport))), int(pid)))
    return found


def sockets() -> dict[Connection, int]:
    """Every established TCP connection of this machine's, from each end, and the process
    group that holds it (a router: its pid, as ``routernet up`` starts each in a group)."""
    listed = subprocess.run(
        ["ss", "-tnpH", "state", "established"], capture_output=True, text=True, timeout=10
    ).stdout
    found = {}
    for conn, pid in parse(listed):
        try:
            found[conn] = os.getpgid(pid)
        except OSError:
            continue  # gone since
    return found


@dataclass(frozen=True)
class Cut:
    """A connection to cut (``conn``, held by the router) and how to see it made again: the
    router that dialled it (``dialer``) connected again to the same ``listener``."""

    conn: Connection
    listener: tuple[str, int]
    dialer: int
    dialled: Connection
    """The dialler's end of the connection cut."""

    def redialled(self, now: dict[Connection, int]) -> bool:
        return any(
            c.remote == self.listener and group == self.dialer and c != self.dialled
            for c, group in now.items()
        )


def pick(
    now: dict[Connection, int], router: int, endpoints: set[tuple[str, int]], index: int
) -> Cut | None:
    """The ``index``-th (modulo) of the router's connections to or from one of ``endpoints``
    (the routers' inter-router and edge listeners), in a stable order; None without one."""
    ours = sorted(
        c
        for c, group in now.items()
        if group == router and (c.local in endpoints or c.remote in endpoints)
    )
    if not ours:
        return None
    conn = ours[index % len(ours)]
    listener = conn.remote if conn.remote in endpoints else conn.local
    dialled = conn if conn.remote == listener else Connection(conn.remote, conn.local)
    dialer = now.get(dialled)
    if dialer is None:
        return None  # the other end's process is not to be seen
    return Cut(conn, listener, dialer, dialled)


def cut(conn: Connection) -> bool:
    """Destroys the socket with exactly these addresses; whether ``ss`` found it."""
    (lhost, lport), (rhost, rport) = conn.local, conn.remote
    done = subprocess.run(
        [
            "ss",
            "-K",
            "src",
            lhost,
            "sport",
            "=",
            f":{lport}",
            "dst",
            rhost,
            "dport",
            "=",
            f":{rport}",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return done.returncode == 0 and f":{lport}" in done.stdout


def can_cut() -> bool:
    """Whether ``ss -K`` aborts a connection here: tried on a pair of loopback sockets."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            accepted, _ = server.accept()
            with accepted:
                local = client.getsockname()
                try:
                    cut(Connection((local[0], local[1]), ("127.0.0.1", port)))
                except (OSError, subprocess.SubprocessError):
                    return False
                try:
                    client.send(b"x")
                except OSError:
                    return True
                return False
