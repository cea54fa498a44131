"""How many messages ``send`` may have sent by a given moment: ``--rate`` and ``--ramp`` (pure).

A schedule is a piecewise-linear rate in msgs/s over seconds since the start; ``--rate R`` is the
flat one. The pacer compares the schedule's integral (messages due so far) with what was sent,
rather than spacing messages by 1/rate, so ticks of any length and rounding never make the rate
drift, and a ramp's shape is followed exactly however coarse the event loop's timer is.

When the network cannot keep up (no credit) the messages due pile up; the pacer forgets what
would be more than ``MAX_BACKLOG_SECONDS`` of them, so a sender that stalled does not burst far
above the schedule once credit comes back: a load generator offers the schedule, it does not
repay debts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

MAX_BACKLOG_SECONDS = 1.0
UNLIMITED = 1 << 62
"""The allowance without a schedule (``--rate 0``): only credit limits the sender."""


class RampError(ValueError):
    """A ``--ramp`` or ``--rate`` that cannot be followed; the message is one line."""


@dataclass(frozen=True)
class Schedule:
    """``points`` are (seconds since start, msgs/s), times non-decreasing (two equal times make
    a step). Before the first point the first rate holds, after the last the last one; a
    schedule that ends at rate 0 ends there (``ends_at``)."""

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise RampError("a ramp needs at least one T:R point")
        last = -math.inf
        for t, r in self.points:
            if not (math.isfinite(t) and math.isfinite(r)) or t < 0 or r < 0:
                raise RampError(f"{t:g}:{r:g}: times and rates must be finite and >= 0")
            if t < last:
                raise RampError(f"{t:g}:{r:g}: times must not decrease (after {last:g})")
            last = t

    @classmethod
    def steady(cls, rate: float) -> Schedule:
        return cls(((0.0, float(rate)),))

    @property
    def ends_at(self) -> float | None:
        """When no more messages are due: the last point, if its rate is 0."""
        t, r = self.points[-1]
        return t if r == 0 else None

    def rate_at(self, t: float) -> float:
        """msgs/s at ``t`` seconds (at a step, the rate after it)."""
        points = self.points
        if t < points[0][0]:
            return points[0][1]
        for (t0, r0), (t1, r1) in pairwise(points):
            if t0 <= t < t1:
                return r0 + (r1 - r0) * (t - t0) / (t1 - t0)
        return points[-1][1]

    def due(self, t: float) -> float:
        """Messages due in [0, t]: the integral of the rate (trapezoids between points)."""
        if t <= 0:
            return 0.0
        points = self.points
        t_first, r_first = points[0]
        total = r_first * min(t, t_first)
        for (t0, r0), (t1, r1) in pairwise(points):
            if t <= t0:
                return total
            if t1 == t0:
                continue
            end = min(t, t1)
            r_end = r0 + (r1 - r0) * (end - t0) / (t1 - t0)
            total += (r0 + r_end) / 2 * (end - t0)
        t_last, r_last = points[-1]
        return total + r_last * max(0.0, t - t_last)


def parse_ramp(spec: str) -> Schedule:
    """``"T0:R0,T1:R1,..."`` (seconds:msgs/s), e.g. ``0:100,20:3000,60:3000,80:0``."""
    points = []
    for part in spec.split(","):
        fields = part.strip().split(":")
        if len(fields) != 2:
            raise RampError(f"{part.strip()!r} is not T:R (seconds:msgs/s)")
        try:
            points.append((float(fields[0]), float(fields[1])))
        except ValueError:
            raise RampError(f"{part.strip()!r}: T and R must be numbers") from None
    return Schedule(tuple(points))


def schedule_for(rate: float | None, ramp: str | None) -> Schedule | None:
    """The schedule of ``--rate``/``--ramp``; None: as fast as credit allows (``--rate 0``)."""
    if ramp is not None:
        return parse_ramp(ramp)
    if rate is None or rate == 0:
        return None
    if not math.isfinite(rate) or rate < 0:
        raise RampError("must be a finite number >= 0 (0: as fast as credit allows)")
    return Schedule.steady(rate)


class Pacer:
    """How many new messages may go now: the schedule's messages due by ``elapsed``, less those
    sent, less the backlog forgotten (at most ``MAX_BACKLOG_SECONDS`` of the current rate, and
    at least one message, are kept)."""

    def __init__(
        self, schedule: Schedule | None, max_backlog_seconds: float = MAX_BACKLOG_SECONDS
    ) -> None:
        self.schedule = schedule
        self.max_backlog_seconds = max_backlog_seconds
        self.forgotten = 0.0

    def allowance(self, elapsed: float, issued: int) -> int:
        if self.schedule is None:
            return UNLIMITED
        backlog = self.schedule.due(elapsed) - self.forgotten - issued
        cap = max(1.0, self.schedule.rate_at(elapsed) * self.max_backlog_seconds)
        if backlog > cap:
            self.forgotten += backlog - cap
            backlog = cap
        return max(0, math.floor(backlog + 1e-9))

    def target(self, elapsed: float) -> float | None:
        """The scheduled rate now (None: unlimited)."""
        return None if self.schedule is None else self.schedule.rate_at(elapsed)
