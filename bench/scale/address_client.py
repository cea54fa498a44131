"""Many addresses on one connection, for the scale suite's address scenarios (addresses.py):
`python -m bench.scale.address_client MODE URL PREFIX COUNT`.

- consume: one receiver on each of PREFIX0 .. PREFIX{COUNT-1}; says when all are attached;
  on a line "detach" on stdin, detaches them all and says when the router has answered every
  detach; exits at the end of stdin.
- probe: one sender on each of those addresses; says when all are attached, then when every
  one has credit (a router gives a sender credit once its address has a consumer somewhere),
  and exits.

Each thing said is one JSON line on stdout with its CLOCK_MONOTONIC time in ns (the bench's
`time.monotonic_ns`): {"event": ..., "ns": ...}. A client in Python: the C clients of
bench/c hold one link each, and thousands of processes would measure the machine instead.
"""

from __future__ import annotations

import json
import select
import sys
import time
from typing import Any

from proton.handlers import MessagingHandler
from proton.reactor import Container

STDIN_POLL_S = 0.05


def say(event: str, **more: Any) -> None:
    print(json.dumps({"event": event, "ns": time.monotonic_ns(), **more}), flush=True)


class Consumer(MessagingHandler):  # type: ignore[misc]
    def __init__(self, url: str, prefix: str, count: int) -> None:
        super().__init__(prefetch=1)
        self.url, self.prefix, self.count = url, prefix, count
        self.opened = self.closed = 0
        self.links: list[Any] = []

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        say("attaching")
        self.links = [
            event.container.create_receiver(conn, f"{self.prefix}{i}") for i in range(self.count)
        ]
        event.container.schedule(STDIN_POLL_S, self)

    def on_link_opened(self, event: Any) -> None:
        self.opened += 1
        if self.opened == self.count:
            say("attached")

    def on_link_closed(self, event: Any) -> None:
        self.closed += 1
        if self.closed == self.count:
            say("detached")

    def on_timer_task(self, event: Any) -> None:
        if select.select([sys.stdin], [], [], 0)[0]:
            line = sys.stdin.readline()
            if not line:  # the bench is done with us
                event.container.stop()
                return
            if line.strip() == "detach":
                say("detaching")
                for link in self.links:
                    link.close()
        event.container.schedule(STDIN_POLL_S, self)


class Probe(MessagingHandler):  # type: ignore[misc]
    def __init__(self, url: str, prefix: str, count: int) -> None:
        super().__init__()
        self.url, self.prefix, self.count = url, prefix, count
        self.opened = 0
        self.credited: set[str] = set()

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        for i in range(self.count):
            event.container.create_sender(conn, f"{self.prefix}{i}")

    def on_link_opened(self, event: Any) -> None:
        self.opened += 1
        if self.opened == self.count:
            say("attached")

    def on_sendable(self, event: Any) -> None:
        self.credited.add(event.link.target.address)
        if len(self.credited) == self.count:
            say("credited")
            event.connection.close()


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] not in ("consume", "probe"):
        print("usage: address_client consume|probe URL PREFIX COUNT", file=sys.stderr)
        return 2
    mode, url, prefix, count = argv[0], argv[1], argv[2], int(argv[3])
    Container((Consumer if mode == "consume" else Probe)(url, prefix, count)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
