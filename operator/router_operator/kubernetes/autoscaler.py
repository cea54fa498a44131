"""The operator's autoscaler as a loop of the operator (kopf starts it, kubernetes/handlers.py):
every period, each Router of every namespace with Routernet objects, scraped at its pods, decided
on by the pure step (autoscaling/scaler.py), its replicas set through the scale subresource and
its status handed to the reconciler. The API calls live here, so the decision stays usable
without a cluster client (the local backend's autoscaler, local/scaler.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from router_operator.autoscaling import predict
from router_operator.autoscaling.scaler import (
    SYNC_SECONDS,
    RouterScaling,
    readings,
    step,
    without_autoscaling,
)
from router_operator.autoscaling.scrape import fetch_metrics
from router_operator.kubernetes.api import Api, ApiError
from router_operator.kubernetes.environment import OperatorConfig
from router_operator.kubernetes.reconciler import Snapshot
from router_operator.planning import adapter
from router_operator.planning.planner import pod_host, pod_name
from router_operator.resources.autoscaling import ABLE_TO_SCALE
from router_operator.resources.models import API_VERSION, METRICS_PORT, Router, RouterStatus

log = logging.getLogger("router_operator.kubernetes.autoscaler")

Report = Callable[[str, str, RouterStatus], Awaitable[None]]
"""Hands the autoscaler's word on a Router (namespace, uid, its status with ``autoscaling`` and
the conditions) to the one writer of Router statuses (reconciler.Reconciler.autoscaler_said)."""
Fetch = Callable[[Mapping[str, str]], Awaitable[dict[str, str | None]]]
"""Scrapes URLs (by pod name) concurrently: each pod's text, or None when it did not answer."""


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
        """The network's recommendation ConfigMap (autoscaling/predict.py), if there is one."""
        name = predict.config_map_name(network)
        try:
            found = await asyncio.to_thread(self.api.get, "v1", "ConfigMap", namespace, name)
        except ApiError as err:
            log.warning("reading ConfigMap %s/%s: %s", namespace, name, err)
            return None
        return predict.parse(((found or {}).get("data") or {}).get(predict.CONFIG_MAP_KEY))

    async def _write_status(self, parsed: adapter.Parsed, status: RouterStatus) -> None:
        await self._report(parsed.namespace, parsed.uid, status)
