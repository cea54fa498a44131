"""The operator as the autoscaler of Routers whose `spec.autoscaling.mode` is `operator`.

Every `SYNC_SECONDS` (the HPA's default sync period), for each such Router: scrape the
`/metrics` of its pods, turn them into per-target load (load.py), decide with the HPA's
arithmetic (hpa.py), set the replicas through the Router's scale subresource as an HPA would
(so the rest of the operator sees an ordinary change of spec.replicas and the StatefulSet
follows; a scale-in then drains the leaving routers on SIGTERM), and say what it saw and did
in the Router's status, through the reconciler, the one writer of Router statuses.

`step` is the pure part: one Router, one look, the status it leads to. `Scaler` is the thin
loop around it: the clock, the scrapes and the API calls. The same `step` drives the local
backend's autoscaler (local_scaler.py) over router processes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from router_operator import adapter, predict
from router_operator.api import Api, ApiError
from router_operator.autoscaling import (
    ABLE_TO_SCALE,
    CONDITIONS,
    SCALING_ACTIVE,
    SCALING_LIMITED,
    AutoscalingStatus,
)
from router_operator.environment import OperatorConfig
from router_operator.hpa import Autoscaler, Decision
from router_operator.load import BadMetrics, LoadTracker, Reading, parse
from router_operator.models import API_VERSION, METRICS_PORT, Router, RouterStatus
from router_operator.planner import pod_host, pod_name
from router_operator.reconciler import Snapshot

log = logging.getLogger("router_operator.scaler")

SYNC_SECONDS = 15.0
SCRAPE_TIMEOUT_SECONDS = 5.0


Report = Callable[[str, str, RouterStatus], Awaitable[None]]
"""Hands the autoscaler's word on a Router (namespace, uid, its status with ``autoscaling`` and
the conditions) to the one writer of Router statuses (reconciler.Reconciler.autoscaler_said)."""
Fetch = Callable[[Mapping[str, str]], Awaitable[dict[str, str | None]]]
"""Scrapes URLs (by pod name) concurrently: each pod's text, or None when it did not answer."""


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
    of the day `recommendation`'s profile is read at, predict.py)."""
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


async def fetch_metrics(urls: Mapping[str, str]) -> dict[str, str | None]:
    """GET each URL (aiohttp, concurrently, bounded by SCRAPE_TIMEOUT_SECONDS)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_SECONDS)

    async def one(session: aiohttp.ClientSession, url: str) -> str | None:
        try:
            async with session.get(url) as response:
                return await response.text() if response.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    async with aiohttp.ClientSession(timeout=timeout) as session:
        texts = await asyncio.gather(*(one(session, url) for url in urls.values()))
    return dict(zip(urls, texts, strict=True))


class Scaler:
    """The loop: every SYNC_SECONDS, every Router of every namespace with Routernet objects."""

    def __init__(
        self,
        api: Api,
        config: OperatorConfig,
        source: Callable[[str], Snapshot],
        namespaces: Callable[[], Iterable[str]],
        report: Report,
        fetch: Fetch = fetch_metrics,
        period: float = SYNC_SECONDS,
    ) -> None:
        self.api = api
        self.config = config
        self._report = report
        self._source = source
        self._namespaces = namespaces
        self._fetch = fetch
        self.period = period
        self.state: dict[str, RouterScaling] = {}  # by Router uid

    async def run_forever(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # one bad pass must not end autoscaling
                log.exception("autoscaling pass failed")
            await asyncio.sleep(self.period)

    async def tick(self) -> None:
        seen: set[str] = set()
        for namespace in sorted(set(self._namespaces())):
            for body in self._source(namespace).routers:
                uid = (body.get("metadata") or {}).get("uid")
                if uid:
                    seen.add(uid)
                await self._one(namespace, body)
        for gone in set(self.state) - seen:
            del self.state[gone]

    async def _one(self, namespace: str, body: Mapping[str, Any]) -> None:
        parsed = adapter.parse("Router", body)
        if parsed.model is None or parsed.deleting or parsed.paused:
            return
        router = parsed.model
        assert isinstance(router, Router)
        spec = router.spec.autoscaling
        stored = parsed.status
        assert isinstance(stored, RouterStatus)
        if spec is None or spec.mode != "operator":
            self.state.pop(parsed.uid, None)
            if stored.autoscaling is not None:
                await self._write_status(parsed, without_autoscaling(stored))
            return
        scaling = self.state.setdefault(parsed.uid, RouterScaling())
        current = router.spec.replicas
        urls = {
            pod_name(router.metadata.name, i): (
                f"http://{pod_host(router.metadata.name, i, namespace, self.config.cluster_domain)}"
                f":{METRICS_PORT}/metrics"
            )
            for i in range(current)
        }
        texts = await self._fetch(urls)
        now, wall = time.monotonic(), datetime.now(UTC)  # when the counters were read
        recommendation = await self._recommendation(namespace, router.spec.network)
        result = step(now, wall, router, stored, scaling, readings(texts), recommendation)
        if result.replicas is not None:
            try:
                await asyncio.to_thread(
                    self.api.patch_scale,
                    API_VERSION,
                    "Router",
                    namespace,
                    parsed.name,
                    result.replicas,
                )
            except ApiError as err:
                log.warning("scaling Router %s/%s failed: %s", namespace, parsed.name, err)
                failed = stored.model_copy(deep=True)
                message = f"the autoscaler failed to update the replicas: {err}"
                failed.set_condition(ABLE_TO_SCALE, "False", "FailedUpdateScale", message)
                await self._write_status(parsed, failed)
                return
            scaling.autoscaler.scaled(now, router.spec.replicas, result.replicas)
            log.info(
                "Router %s/%s scaled: %s",
                namespace,
                parsed.name,
                result.status.autoscaling and result.status.autoscaling.lastScaleReason,
            )
        await self._write_status(parsed, result.status)

    async def _recommendation(self, namespace: str, network: str) -> dict[str, Any] | None:
        """The network's recommendation ConfigMap (predict.py), if there is one."""
        name = predict.config_map_name(network)
        try:
            found = await asyncio.to_thread(self.api.get, "v1", "ConfigMap", namespace, name)
        except ApiError as err:
            log.warning("reading ConfigMap %s/%s: %s", namespace, name, err)
            return None
        return predict.parse(((found or {}).get("data") or {}).get(predict.CONFIG_MAP_KEY))

    async def _write_status(self, parsed: adapter.Parsed, status: RouterStatus) -> None:
        await self._report(parsed.namespace, parsed.uid, status)
