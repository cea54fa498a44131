"""The operator's settings, from the environment the chart sets (helm/routernet/templates/
deployment.yaml): images, the cluster's domain, metrics, the collectors and recommendations.
Each bad value is a ValueError naming its variable: routernet-operator says it in one line at
start rather than rendering objects the API server refuses later.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from router_operator.planning.planner import DEFAULT_CLUSTER_DOMAIN
from router_operator.rendering.autoscaler import DEFAULT_PROMETHEUS_URL
from router_operator.rendering.collector import DEFAULT_STORAGE_SIZE, CollectorSettings
from router_operator.rendering.recommend import DEFAULT_SCHEDULE, RecommendSettings
from router_operator.resources.models import (
    DEFAULT_COLLECTOR_IMAGE,
    DEFAULT_PIPELINE_IMAGE,
    DEFAULT_ROUTER_IMAGE,
)

PULL_POLICIES = ("Always", "IfNotPresent", "Never")


@dataclass(frozen=True)
class OperatorConfig:
    """How this operator instance renders routers; from the environment the chart sets."""

    router_image: str = DEFAULT_ROUTER_IMAGE
    image_pull_policy: str | None = None
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    resync_seconds: float = 300.0
    """A full reconcile of every namespace at least this often: puts back children that were
    deleted or edited behind the operator's back (their events are not watched)."""
    retry_seconds: float = 5.0
    """The first retry after a failed reconcile; doubles up to ``resync_seconds``."""
    metrics_port: int | None = None
    collector: CollectorSettings | None = None
    """How to run a telemetry collector per network; None runs none. from_env() turns it on
    unless ROUTERNET_COLLECTOR_ENABLED=false; a config made in code (tests) leaves it off."""
    prometheus_url: str = DEFAULT_PROMETHEUS_URL
    """The Prometheus that KEDA's triggers query (Routers with ``autoscaling.mode: keda``): the
    one scraping the router pods, as KEDA's pods reach it."""
    recommend: RecommendSettings | None = None
    """How to schedule recommendations per network (a network with a collector); None: not at
    all, the default (ROUTERNET_RECOMMEND_ENABLED)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OperatorConfig:
        """ROUTERNET_ROUTER_IMAGE, ROUTERNET_ROUTER_IMAGE_PULL_POLICY, ROUTERNET_CLUSTER_DOMAIN,
        ROUTERNET_METRICS_PORT, ROUTERNET_PROMETHEUS_URL, ROUTERNET_COLLECTOR_*
        (collector_from_env); ValueError names the variable at fault."""
        policy = _pull_policy(env, "ROUTERNET_ROUTER_IMAGE_PULL_POLICY")
        port_text = env.get("ROUTERNET_METRICS_PORT") or None
        port = None
        if port_text is not None:
            if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
                raise ValueError(f"ROUTERNET_METRICS_PORT={port_text!r}: expected a TCP port")
            port = int(port_text)
        image = (env.get("ROUTERNET_ROUTER_IMAGE") or "").strip() or DEFAULT_ROUTER_IMAGE
        if any(c.isspace() for c in image):
            raise ValueError(f"ROUTERNET_ROUTER_IMAGE={image!r}: an image has no whitespace")
        domain = (env.get("ROUTERNET_CLUSTER_DOMAIN") or "").strip() or DEFAULT_CLUSTER_DOMAIN
        prometheus = (env.get("ROUTERNET_PROMETHEUS_URL") or "").strip() or DEFAULT_PROMETHEUS_URL
        if not _is_http_url(prometheus):
            raise ValueError(
                f"ROUTERNET_PROMETHEUS_URL={prometheus!r}: expected an http:// or https:// URL"
                " with a host"
            )
        return cls(
            router_image=image,
            image_pull_policy=policy,
            cluster_domain=domain,
            metrics_port=port,
            collector=collector_from_env(env),
            prometheus_url=prometheus,
            recommend=recommend_from_env(env),
        )


def _pull_policy(env: Mapping[str, str], name: str) -> str | None:
    policy = env.get(name) or None
    if policy is not None and policy not in PULL_POLICIES:
        raise ValueError(f"{name}={policy!r}: expected one of {', '.join(PULL_POLICIES)}")
    return policy


def _is_http_url(text: str) -> bool:
    """Checked at start rather than found out by KEDA at every poll of every ScaledObject."""
    if any(c.isspace() for c in text):
        return False
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 (raises ValueError for a port that is not one)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def collector_from_env(env: Mapping[str, str]) -> CollectorSettings | None:
    """ROUTERNET_COLLECTOR_ENABLED (true unless "false"), ROUTERNET_COLLECTOR_IMAGE (default:
    DEFAULT_COLLECTOR_IMAGE), ROUTERNET_COLLECTOR_IMAGE_PULL_POLICY (default: the cluster's),
    ROUTERNET_COLLECTOR_STORAGE_CLASS (default: the cluster's), ROUTERNET_COLLECTOR_STORAGE_SIZE
    (default 10Gi); ValueError names the variable at fault."""
    enabled = (env.get("ROUTERNET_COLLECTOR_ENABLED") or "true").strip().lower()
    if enabled not in ("true", "false"):
        raise ValueError(f"ROUTERNET_COLLECTOR_ENABLED={enabled!r}: expected true or false")
    if enabled == "false":
        return None
    image = (env.get("ROUTERNET_COLLECTOR_IMAGE") or "").strip() or DEFAULT_COLLECTOR_IMAGE
    if any(c.isspace() for c in image):
        raise ValueError(f"ROUTERNET_COLLECTOR_IMAGE={image!r}: an image has no whitespace")
    policy = _pull_policy(env, "ROUTERNET_COLLECTOR_IMAGE_PULL_POLICY")
    size = (env.get("ROUTERNET_COLLECTOR_STORAGE_SIZE") or "").strip() or DEFAULT_STORAGE_SIZE
    if not _QUANTITY.match(size):
        raise ValueError(f"ROUTERNET_COLLECTOR_STORAGE_SIZE={size!r}: expected a size like 10Gi")
    storage_class = (env.get("ROUTERNET_COLLECTOR_STORAGE_CLASS") or "").strip() or None
    if storage_class is not None and not _DNS_SUBDOMAIN.match(storage_class):
        raise ValueError(
            f"ROUTERNET_COLLECTOR_STORAGE_CLASS={storage_class!r}: not a StorageClass name"
        )
    return CollectorSettings(
        image=image,
        image_pull_policy=policy,
        storage_class=storage_class,
        storage_size=size,
    )


def recommend_from_env(env: Mapping[str, str]) -> RecommendSettings | None:
    """ROUTERNET_RECOMMEND_ENABLED (false unless "true"), ROUTERNET_RECOMMEND_IMAGE (default:
    DEFAULT_PIPELINE_IMAGE), ROUTERNET_RECOMMEND_IMAGE_PULL_POLICY, ROUTERNET_RECOMMEND_SCHEDULE
    (a cron schedule, default hourly at 17 past), ROUTERNET_RECOMMEND_TARGET (msgs/s per router
    at peak; default the pipeline's); ValueError names the variable at fault."""
    enabled = (env.get("ROUTERNET_RECOMMEND_ENABLED") or "false").strip().lower()
    if enabled not in ("true", "false"):
        raise ValueError(f"ROUTERNET_RECOMMEND_ENABLED={enabled!r}: expected true or false")
    if enabled == "false":
        return None
    image = (env.get("ROUTERNET_RECOMMEND_IMAGE") or "").strip() or DEFAULT_PIPELINE_IMAGE
    if any(c.isspace() for c in image):
        raise ValueError(f"ROUTERNET_RECOMMEND_IMAGE={image!r}: an image has no whitespace")
    schedule = " ".join((env.get("ROUTERNET_RECOMMEND_SCHEDULE") or DEFAULT_SCHEDULE).split())
    if not (schedule.startswith("@") or len(schedule.split()) == 5):
        raise ValueError(
            f"ROUTERNET_RECOMMEND_SCHEDULE={schedule!r}: expected five cron fields"
            " (minute hour day month weekday) or @hourly, @daily..."
        )
    target_text = (env.get("ROUTERNET_RECOMMEND_TARGET") or "").strip()
    target = None
    if target_text:
        try:
            target = float(target_text)
        except ValueError:
            target = -1.0
        if not 0 < target < float("inf"):
            raise ValueError(
                f"ROUTERNET_RECOMMEND_TARGET={target_text!r}: expected messages per second > 0"
            )
    return RecommendSettings(
        image=image,
        image_pull_policy=_pull_policy(env, "ROUTERNET_RECOMMEND_IMAGE_PULL_POLICY"),
        schedule=schedule,
        target=target,
    )
