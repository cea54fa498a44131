"""The HorizontalPodAutoscaler's arithmetic, for Routers: load in, replicas out, time passed in.

Users who know an HPA should find no surprise, so this follows the HPA controller
(k8s.io/kubernetes pkg/controller/podautoscaler, autoscaling/v2) step for step:

1. Outside [minReplicas, maxReplicas] the replicas are brought inside first, nothing measured;
   zero replicas means someone scaled the Router to zero by hand, and autoscaling waits.
2. Per target, an average value per router: the ratio of the measured average to the target,
   within the tolerance (10%) of 1, keeps the current replicas; else ceil(ratio * routers
   measured). The largest proposal of all targets wins. A target with no measurement (no
   router answered) proposes nothing; none measured at all means no decision.
3. Stabilization: of the recommendations of the last `scaleUp.stabilizationWindowSeconds`
   the lowest bounds a scale-up, of the last `scaleDown.stabilizationWindowSeconds` the
   highest bounds a scale-down, so a short dip does not remove routers a peak will need again.
4. Rate limits: each policy allows so many pods or percent per period, counted from the
   replicas at the period's start (scale events are remembered); `selectPolicy` picks the
   most (Max) or least (Min) permissive one, or forbids the direction (Disabled). Then
   min/max. The reason that limited the result is the HPA's (`ScaleUpLimit`,
   `TooManyReplicas`, ...), for the `ScalingLimited` condition.

Pure: no clock, no I/O. One `Autoscaler` per Router keeps the two histories the HPA keeps in
memory (recommendations and scale events); an operator restart forgets them as the HPA's does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from router_operator.resources.autoscaling import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    TOLERANCE,
    AutoscalingSpec,
    ScalingRules,
    effective_rules,
)

TARGETS = ("messagesPerSecond", "connections", "unsettledDeliveries")


@dataclass(frozen=True)
class Measurement:
    """One target's load over the routers that answered: their sum and how many they were."""

    total: float
    routers: int


@dataclass(frozen=True)
class Decision:
    """What the autoscaler concluded at one instant.

    `replicas`: what the Router should have (None: no decision, keep what it has);
    `proposals`: each measured target's unstabilized proposal; `averages`: per-router load per
    target; `reason`/`message`: why `replicas` is what it is, in the HPA's words;
    `limited`: whether a limit (rate, min, max) cut the recommendation.
    """

    replicas: int | None
    recommendation: int | None
    proposals: dict[str, int]
    averages: dict[str, float]
    reason: str
    message: str
    limited: bool = False
    active: bool = True


@dataclass
class _Event:
    at: float
    change: int


@dataclass
class Autoscaler:
    """One Router's autoscaler state: recommendations and scale events, with their times."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    scale_ups: list[_Event] = field(default_factory=list)
    scale_downs: list[_Event] = field(default_factory=list)

    def decide(
        self,
        now: float,
        spec: AutoscalingSpec,
        current: int,
        load: Mapping[str, Measurement],
        floor: int | None = None,
    ) -> Decision:
        """The replicas for a Router that has `current` now and whose routers report `load`
        (per target name). `floor`: a higher minReplicas for now (a predicted peak,
        autoscaling/predict.py), never above maxReplicas."""
        low = max(spec.minReplicas, min(floor or 0, spec.maxReplicas))
        high = spec.maxReplicas
        averages = {name: m.total / m.routers for name, m in load.items() if m.routers > 0}
        if current == 0:
            return Decision(
                0,
                None,
                {},
                averages,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the Router is zero",
                active=False,
            )
        if current > high:
            return Decision(
                high,
                high,
                {},
                averages,
                "TooManyReplicas",
                f"current replicas above maxReplicas ({high})",
                limited=True,
            )
        if current < low:
            return Decision(
                low,
                low,
                {},
                averages,
                "TooFewReplicas",
                f"current replicas below minReplicas ({low})",
                limited=True,
            )
        proposals = {
            name: proposal(load[name], target, current)
            for name in TARGETS
            if (target := getattr(spec.targets, name)) is not None
            and name in load
            and load[name].routers > 0
        }
        if not proposals:
            return Decision(
                None,
                None,
                {},
                averages,
                "FailedGetPodsMetric",
                "no router reported its load",
                active=False,
            )
        recommendation = max(proposals.values())
        behavior = spec.behavior
        up = effective_rules(behavior.scaleUp if behavior else None, DEFAULT_SCALE_UP)
        down = effective_rules(behavior.scaleDown if behavior else None, DEFAULT_SCALE_DOWN)
        stable = self._stabilize(now, current, recommendation, up, down)
        replicas, reason, message = self._limit(now, current, stable, low, high, up, down)
        return Decision(
            replicas,
            recommendation,
            proposals,
            averages,
            reason,
            message,
            limited=reason != "DesiredWithinRange",
        )

    def scaled(self, now: float, before: int, after: int) -> None:
        """The Router went from `before` to `after` replicas: counted against the policies."""
        if after > before:
            self.scale_ups.append(_Event(now, after - before))
        elif after < before:
            self.scale_downs.append(_Event(now, before - after))

    # --- the HPA's steps ---------------------------------------------------------------------

    def _stabilize(
        self, now: float, current: int, recommendation: int, up: ScalingRules, down: ScalingRules
    ) -> int:
        up_window = up.stabilizationWindowSeconds or 0
        down_window = down.stabilizationWindowSeconds or 0
        up_bound = down_bound = recommendation
        for at, past in self.recommendations:
            if at > now - up_window:
                up_bound = min(up_bound, past)
            if at > now - down_window:
                down_bound = max(down_bound, past)
        keep = max(up_window, down_window)
        self.recommendations = [r for r in self.recommendations if r[0] > now - keep]
        self.recommendations.append((now, recommendation))
        return min(max(current, up_bound), down_bound)

    def _limit(
        self,
        now: float,
        current: int,
        desired: int,
        low: int,
        high: int,
        up: ScalingRules,
        down: ScalingRules,
    ) -> tuple[int, str, str]:
        self._forget(now, up, down)
        if desired > current:
            limit = max(self._up_limit(now, current, up), current)
            if high > limit:
                if desired > limit:
                    return (
                        limit,
                        "ScaleUpLimit",
                        "the desired replica count is increasing faster than the maximum "
                        "scale rate",
                    )
            elif desired > high:
                return (
                    high,
                    "TooManyReplicas",
                    "the desired replica count is more than the maximum replica count",
                )
        elif desired < current:
            limit = min(self._down_limit(now, current, down), current)
            if low < limit:
                if desired < limit:
                    return (
                        limit,
                        "ScaleDownLimit",
                        "the desired replica count is decreasing faster than the maximum "
                        "scale rate",
                    )
            elif desired < low:
                return (
                    low,
                    "TooFewReplicas",
                    "the desired replica count is less than the minimum replica count",
                )
        return desired, "DesiredWithinRange", "the desired count is within the acceptable range"

    def _period_start(self, now: float, current: int, period: int) -> int:
        added = sum(e.change for e in self.scale_ups if e.at > now - period)
        removed = sum(e.change for e in self.scale_downs if e.at > now - period)
        return current - added + removed

    def _up_limit(self, now: float, current: int, rules: ScalingRules) -> int:
        if rules.selectPolicy == "Disabled":
            return current
        limits = []
        for policy in rules.policies or ():
            start = self._period_start(now, current, policy.periodSeconds)
            if policy.type == "Pods":
                limits.append(start + policy.value)
            else:
                limits.append(math.ceil(start * (1 + policy.value / 100)))
        return (min if rules.selectPolicy == "Min" else max)(limits)

    def _down_limit(self, now: float, current: int, rules: ScalingRules) -> int:
        if rules.selectPolicy == "Disabled":
            return current
        limits = []
        for policy in rules.policies or ():
            start = self._period_start(now, current, policy.periodSeconds)
            if policy.type == "Pods":
                limits.append(start - policy.value)
            else:
                limits.append(int(start * (1 - policy.value / 100)))
        return (max if rules.selectPolicy == "Min" else min)(limits)

    def _forget(self, now: float, up: ScalingRules, down: ScalingRules) -> None:
        """Scale events older than the longest policy period count for nothing any more."""
        for rules, events in ((up, self.scale_ups), (down, self.scale_downs)):
            longest = max((p.periodSeconds for p in rules.policies or ()), default=0)
            events[:] = [e for e in events if e.at > now - longest]


def proposal(measured: Measurement, target: float, current: int) -> int:
    """One target's replicas: the HPA's AverageValue rule (tolerance, then ceil(ratio * n))."""
    ratio = (measured.total / measured.routers) / target
    if abs(ratio - 1.0) <= TOLERANCE:
        return current
    return math.ceil(ratio * measured.routers)
