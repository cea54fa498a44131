"""The HELLO protocol: which neighbors can hear us, on which link, at what cost.

A link counts as two-way while the neighbor's HELLOs on it list our id; that is the only proof
that our messages reach it. Two deliberate departures from Dispatch, both about speed:

* a HELLO goes out on a link as soon as it comes up, and in reply to a HELLO from a router that
  does not list us yet (or that we had not heard from), so two routers usually see each other
  two-way within one round trip instead of within one or two helloIntervals. Replies are
  bounded by the peer's own HELLOs, so two routers cannot ping-pong;
* a HELLO that no longer lists us ends the link's two-way state at once instead of waiting
  helloMaxAge: the neighbor just told us it stopped hearing us.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from router.network.messages import Hello


@dataclass
class _LinkRecord:
    cost: int
    neighbor: str | None = None
    confirmed_at: float | None = None  # last HELLO on this link that listed us


class HelloProtocol:
    def __init__(
        self,
        my_id: str,
        instance: int,
        send_hello: Callable[[Hashable, dict[str, Any]], None],
        interval: float,
        max_age: float,
    ) -> None:
        self.my_id = my_id
        self.instance = instance
        self._send_hello = send_hello
        self.interval = interval
        self.max_age = max_age
        self._links: dict[Hashable, _LinkRecord] = {}
        self._heard: dict[str, float] = {}  # router id -> last HELLO from it, on any link
        self._due = -math.inf  # next periodic HELLO

    def has_link(self, link: Hashable) -> bool:
        return link in self._links

    def link_up(self, link: Hashable, cost: int, now: float) -> None:
        self._links[link] = _LinkRecord(cost=max(1, int(cost)))
        self._send(link)

    def link_down(self, link: Hashable) -> None:
        self._links.pop(link, None)

    def receive(self, link: Hashable, hello: Hello, now: float) -> None:
        record = self._links.get(link)
        if record is None:
            return
        if record.neighbor != hello.id:
            # Someone else now speaks on this link: nothing we knew about it still holds.
            record.neighbor = hello.id
            record.confirmed_at = None
        new = now - self._heard.get(hello.id, -math.inf) > self.max_age
        self._heard[hello.id] = now
        listed = self.my_id in hello.seen
        record.confirmed_at = now if listed else None
        if new or not listed:
            self._send(link)

    def tick(self, now: float) -> None:
        for rid, at in list(self._heard.items()):
            if now - at > self.max_age:
                del self._heard[rid]
        for record in self._links.values():
            if record.confirmed_at is not None and now - record.confirmed_at > self.max_age:
                record.confirmed_at = None
        if now >= self._due:
            # Keep the cadence anchored (not "interval after the tick that sent") so ticks
            # that land just after a due time do not stretch every interval by a tick.
            late = now - self._due < self.interval
            self._due = self._due + self.interval if late else now + self.interval
            for link in self._links:
                self._send(link)

    def neighbors(self) -> dict[str, tuple[Hashable, int]]:
        """Two-way neighbors -> (link, cost). With several links to one neighbor, the cheapest
        wins, the one up longest among equals, so the choice does not flap."""
        best: dict[str, tuple[Hashable, int]] = {}
        for link, record in self._links.items():
            rid = record.neighbor
            if rid is None or record.confirmed_at is None:
                continue
            if rid not in best or record.cost < best[rid][1]:
                best[rid] = (link, record.cost)
        return best

    def neighbor_on(self, link: Hashable) -> str | None:
        record = self._links.get(link)
        return record.neighbor if record is not None else None

    def _send(self, link: Hashable) -> None:
        hello = Hello(self.my_id, self.instance, tuple(sorted(self._heard)))
        self._send_hello(link, hello.to_body())
