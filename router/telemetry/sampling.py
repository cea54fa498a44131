"""Which messages carry a transit-latency stamp: one in every `every` entering the network here.

A countdown rather than a random draw: exact (the tests count it), and one decrement per message
on the ingress path. Messages from one sender are not in lockstep with the countdown, which runs
over everything this router receives from clients.
"""

from __future__ import annotations


class Sampler:
    __slots__ = ("countdown", "every")

    def __init__(self, every: int) -> None:
        self.every = every  # 0: sample nothing
        self.countdown = every

    def due(self) -> bool:
        """Whether the message now entering is sampled."""
        if self.every <= 0:
            return False
        self.countdown -= 1
        if self.countdown > 0:
            return False
        self.countdown = self.every
        return True
