"""The operator's autoscaler for Routers whose `spec.autoscaling.mode` is `operator`: what it
decides, apart from where it runs.

Every `SYNC_SECONDS` (the HPA's default sync period), for each such Router: scrape the
`/metrics` of its pods, turn them into per-target load (autoscaling/load.py), decide with the HPA's
arithmetic (autoscaling/hpa.py), set the replicas through the Router's scale subresource as an HPA
would (so the rest of the operator sees an ordinary change of spec.replicas and the StatefulSet
follows; a scale-in then drains the leaving routers on SIGTERM), and say what it saw and did
in the Router's status, through the reconciler, the one writer of Router statuses.

`step` is the pure part: one Router, one look, the status it leads to. The loops around it (the
clock, the scrapes, setting the replicas) are the operator's (kubernetes/autoscaler.py: the API
calls) and the local backend's (local/scaler.py: router processes); both scrape with
autoscaling/scrape.py.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from router_operator.autoscaling import predict
from router_operator.autoscaling.hpa import Autoscaler, Decision
from router_operator.autoscaling.load import BadMetrics, LoadTracker, Reading, parse
from router_operator.resources.autoscaling import (
    ABLE_TO_SCALE,
    CONDITIONS,
    SCALING_ACTIVE,
    SCALING_LIMITED,
    AutoscalingStatus,
)
from router_operator.resources.models import Router, RouterStatus

log = logging.getLogger("router_operator.autoscaling.scaler")

SYNC_SECONDS = 15.0


@dataclass
class RouterScaling:
    """What the autoscaler remembers of one Router between looks."""

    autoscaler: Autoscaler = field(default_factory=Autoscaler)
    tracker: LoadTracker = field(default_factory=LoadTracker)


@dataclass(frozen=True)
class Step:
    """One look at one Router: the replicas to set (None: leave them) and its new status.
    Whoever sets them tells the autoscaler (`Autoscaler.scaled`) once they are set."""

    replicas: int | None
    status: RouterStatus
    decision: Decision


def readings(texts: Mapping[str, str | None]) -> dict[str, Reading | None]:
    """Each pod's scrape parsed; an answer that is not a router's counts as no answer."""
    parsed: dict[str, Reading | None] = {}
    for pod, text in texts.items():
        try:
            parsed[pod] = None if text is None else parse(text)
        except BadMetrics as e:
            log.warning("pod %s: %s", pod, e)
            parsed[pod] = None
    return parsed


def step(
    now: float,
    wall: datetime,
    router: Router,
    stored: RouterStatus,
    scaling: RouterScaling,
    scraped: Mapping[str, Reading | None],
    recommendation: Mapping[str, Any] | None = None,
) -> Step:
    """Decides for `router` (with the status `stored`) from its pods' readings, and the status
    that says so: `status.autoscaling` and the HPA's three conditions. `now` is monotonic
    seconds (the HPA's windows), `wall` the time conditions and lastScaleTime show (and the hour
    of the day `recommendation`'s profile is read at, autoscaling/predict.py)."""
    spec = router.spec.autoscaling
    assert spec is not None and spec.mode == "operator"
    current = router.spec.replicas
    load = scaling.tracker.measure(now, scraped)
    predicted = predict.predicted_min(recommendation, router.metadata.name, wall)
    floor = predicted if spec.predictive else None
    decision = scaling.autoscaler.decide(now, spec, current, load, floor)
    status = stored.model_copy(deep=True)
    previous = status.autoscaling
    auto = AutoscalingStatus(
        mode=spec.mode,
        currentLoad={name: round(value, 3) for name, value in decision.averages.items()},
        routersMeasured=sum(1 for r in scraped.values() if r is not None),
        desiredReplicas=decision.replicas if decision.replicas is not None else current,
        recommendedReplicas=decision.recommendation,
        predictedMinReplicas=predicted,
        lastScaleTime=previous.lastScaleTime if previous else None,
        lastScaleReason=previous.lastScaleReason if previous else None,
    )
    replicas = decision.replicas if decision.replicas not in (None, current) else None
    if replicas is not None:
        auto.lastScaleTime = wall.replace(microsecond=0)
        auto.lastScaleReason = f"{current} -> {replicas}: {_why(decision)}"
    status.autoscaling = auto
    gen = router.metadata.generation

    def cond(type_: str, value: Literal["True", "False"], reason: str, message: str) -> None:
        status.set_condition(type_, value, reason, message, observed_generation=gen, now=wall)

    if replicas is not None:
        cond(ABLE_TO_SCALE, "True", "SucceededRescale", f"the new size is {replicas}")
    else:
        cond(ABLE_TO_SCALE, "True", "ReadyForNewScale", "recommended size matches current size")
    if decision.active:
        cond(SCALING_ACTIVE, "True", "ValidMetricFound", _why(decision))
    else:
        cond(SCALING_ACTIVE, "False", decision.reason, decision.message)
    if decision.limited:
        cond(SCALING_LIMITED, "True", decision.reason, decision.message)
    else:
        cond(SCALING_LIMITED, "False", "DesiredWithinRange", decision.message)
    return Step(replicas, status, decision)


def _why(decision: Decision) -> str:
    """The load against each target, e.g. `messagesPerSecond 1830/router -> 4`."""
    if not decision.proposals:
        return decision.message
    parts = [
        f"{name} {decision.averages[name]:.4g}/router -> {replicas}"
        for name, replicas in decision.proposals.items()
    ]
    return "the HPA algorithm computed the replicas from " + ", ".join(parts)


def without_autoscaling(status: RouterStatus) -> RouterStatus:
    """The status of a Router whose autoscaling was removed (or handed to hpa/keda): nothing of
    the operator's autoscaler left in it."""
    cleared = status.model_copy(deep=True)
    cleared.autoscaling = None
    cleared.conditions = [c for c in cleared.conditions if c.type not in CONDITIONS]
    return cleared
