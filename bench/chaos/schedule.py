"""What the chaos soak does to the network, and when: a list of events drawn from a seeded
random generator, so that a failing run is replayed by giving its seed again.

Pure: no processes, no clock. The runner (run.py) carries the events out at their times.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

ROUTER_KINDS = ("kill", "term", "stop")
"""kill -9 then restart; SIGTERM (the router drains) then restart; SIGSTOP for a while, then
SIGCONT."""
KINDS = (*ROUTER_KINDS, "cut", "collector", "address")
"""Besides the routers': one of a router's connections to another router cut (cut.py); kill -9
of the telemetry collector, then restarted; an Address changed (``orders``' distribution,
balanced <-> closest), applied live."""
INSTANT_KINDS = ("cut", "address")
STOP_SECONDS = (5.0, 15.0)
DOWN_SECONDS = (1.0, 5.0)
"""How long a killed or stopped router stays down before it is started again."""


@dataclass(frozen=True)
class Event:
    at: float
    """Seconds from the start of the soak."""
    kind: str
    router: str
    seconds: float
    """How long the router (or collector) is down, or stopped; 0 for a change."""

    def describe(self) -> str:
        what = f"{self.at:7.1f}s {self.kind} {self.router}"
        return f"{what} for {self.seconds:.1f}s" if self.seconds else what


def plan(
    seed: int,
    duration: float,
    routers: list[str],
    settle: float = 10.0,
    gap: tuple[float, float] = (4.0, 10.0),
    kinds: tuple[str, ...] = KINDS,
) -> list[Event]:
    """Events of ``kinds`` from ``settle`` seconds on until ``duration`` less ``settle`` (the
    traffic gets that long to finish before the end), one at a time: the next starts once the
    last one's router is back, plus a gap drawn from ``gap``. ``router`` of an event that is
    not a router's is its kind."""
    rng = random.Random(seed)
    events: list[Event] = []
    at = settle
    round_: list[str] = []
    while True:
        if not round_:  # every kind once in each round, so that a short soak has the most
            round_ = rng.sample(kinds, len(kinds))
        kind = round_.pop()
        router = rng.choice(sorted(routers)) if kind in (*ROUTER_KINDS, "cut") else kind
        if kind in INSTANT_KINDS:
            seconds = 0.0
        else:
            seconds = rng.uniform(*(STOP_SECONDS if kind == "stop" else DOWN_SECONDS))
        if at + seconds > duration - settle:
            return events
        events.append(Event(round(at, 1), kind, router, round(seconds, 1)))
        at += seconds + rng.uniform(*gap)
