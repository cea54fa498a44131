"""Rendering `Router.spec.autoscaling` with `mode: hpa` or `mode: keda` into the object that
then owns the Router's replicas: an autoscaling/v2 HorizontalPodAutoscaler or a KEDA
ScaledObject. Pure, like rendering/router.py: the reconciler applies what this returns.

Both scale the Router itself through its scale subresource (`scaleTargetRef` names the Router,
not its StatefulSet): the operator keeps rendering the StatefulSet from `spec.replicas`, so
replicas written by the HPA go through the same path as a user's `kubectl scale`, and a mode
change hands the Router over without a StatefulSet fighting anyone. Both objects are named
after the Router and owned by it (controller), so they go with it.

Targets are per-router averages (resources/autoscaling.py), the meaning of an HPA's `AverageValue`
target: load summed over the Router's pods, divided by its replicas. The series are the ones
every router serves on `/metrics` (METRICS_PORT, 9090), as a Prometheus scraping the pods
(the chart's PodMonitor) labels them with `namespace` and `pod`:

- messagesPerSecond: the rate of `routernet_deliveries_total{direction="in"}`;
- connections: `routernet_connections` without `role="inter-router"` (the mesh's own
  connections grow with the replicas; counting them would make scaling out raise the load);
- unsettledDeliveries: `routernet_unsettled_deliveries`.

`mode: hpa`: one `Pods` metric per target, served by prometheus-adapter's custom metrics API.
The names are those its default rules give (prometheus-adapter cmd/config-gen DefaultConfig,
docs/config.md): a series ending in `_total` is a counter, exposed without the suffix as its
rate (`name: {matches: "^(.*)_total$", as: "${1}"}`, metricsQuery
`sum(rate(<<.Series>>{<<.LabelMatchers>>}[...])) by (<<.GroupBy>>)`), so the deliveries are
`routernet_deliveries`; gauges keep their name and are summed per pod. The label conditions
travel as the metric's `selector`, which the adapter turns into PromQL label matchers
(`direction="in"`, and `role!~"inter-router"` for a NotIn), so the default rules serve all
three. Users without them need these rules (docs/operator.md, "Autoscaling with an HPA or KEDA"):

    - seriesQuery: 'routernet_deliveries_total{namespace!="",pod!=""}'
      resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
      name: {matches: "^(.*)_total$", as: "${1}"}
      metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)'
    - seriesQuery: 'routernet_connections{namespace!="",pod!=""}'
      resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
      metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>,role!="inter-router"}) by (<<.GroupBy>>)'
    - seriesQuery: 'routernet_unsettled_deliveries{namespace!="",pod!=""}'
      resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
      metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'

`behavior` is copied with only the fields the user gave: the HPA fills in the rest with its
defaults, which are those resources/autoscaling.py documents, so nothing is said twice.

`mode: keda`: one `prometheus` trigger per target, `metricType: AverageValue`, whose PromQL
query gives the Router's *total* (KEDA's HPA divides it by the replicas), selecting the pods
`<router>-<ordinal>` of the Router's namespace; `serverAddress` is the operator's
configuration (ROUTERNET_PROMETHEUS_URL). `behavior` goes to
`advanced.horizontalPodAutoscalerConfig.behavior`, which KEDA copies into the HPA it makes
(`keda-hpa-<router>`). KEDA's admission webhook refuses a ScaledObject for a target another HPA
already scales, so a previous `mode: hpa` HPA must be gone first (the reconciler removes it
before applying). The other way round, KEDA removes its HPA when its ScaledObject goes (KEDA's
finalizer), so for a few seconds two HPAs may target the Router before ours is alone.

Quantities: an HPA target is a Kubernetes quantity; a plain decimal ("2500.5", "0.25") or
integer is one, and KEDA parses the same text as a float. The HPA compares in thousandths
(MilliValue), so a target finer than 0.001 counts as 0.001.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from router_operator.planning.planner import RouterPlan
from router_operator.rendering.router import API_VERSION, ROUTER_KIND, labels, owner_reference
from router_operator.resources.autoscaling import AutoscalingSpec, ScalingBehavior

HPA_API_VERSION = "autoscaling/v2"
HPA_KIND = "HorizontalPodAutoscaler"
KEDA_API_VERSION = "keda.sh/v1alpha1"
KEDA_KIND = "ScaledObject"
AUTOSCALER_KINDS: tuple[tuple[str, str], ...] = (
    (HPA_API_VERSION, HPA_KIND),
    (KEDA_API_VERSION, KEDA_KIND),
)
"""Every kind an autoscaling mode may render: each one a mode does not want is removed, so a
Router never has two controllers of its replicas."""

DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
"""The Service the Prometheus Operator creates for its Prometheus servers, in the namespace
kube-prometheus installs them in."""

RATE_WINDOW = "2m"
"""The window of the deliveries rate: four scrapes at the chart's PodMonitor interval (30 s),
so one missed scrape does not leave a single sample and no rate."""

DELIVERIES_COUNTER = "routernet_deliveries_total"
CONNECTIONS_GAUGE = "routernet_connections"
UNSETTLED_GAUGE = "routernet_unsettled_deliveries"
INTER_ROUTER_ROLE = "inter-router"

ADAPTER_METRICS = {
    "messagesPerSecond": (
        DELIVERIES_COUNTER.removesuffix("_total"),
        {"matchLabels": {"direction": "in"}},
    ),
    "connections": (
        CONNECTIONS_GAUGE,
        {"matchExpressions": [{"key": "role", "operator": "NotIn", "values": [INTER_ROUTER_ROLE]}]},
    ),
    "unsettledDeliveries": (UNSETTLED_GAUGE, None),
}
"""Per target: the metric's name in the custom metrics API (prometheus-adapter's default rules)
and the selector that narrows its series."""

_TARGETS = ("messagesPerSecond", "connections", "unsettledDeliveries")


def autoscaler_name(router: str) -> str:
    """Both kinds are named after the Router: one of each at most, and `kubectl get hpa` or
    `kubectl get so` shows which Router is meant."""
    return router


def wanted_kind(spec: AutoscalingSpec | None) -> tuple[str, str] | None:
    """(apiVersion, kind) of the object `spec` renders; None for the operator's own mode or no
    autoscaling."""
    if spec is None or spec.mode == "operator":
        return None
    return (HPA_API_VERSION, HPA_KIND) if spec.mode == "hpa" else (KEDA_API_VERSION, KEDA_KIND)


def render_autoscaler(
    plan: RouterPlan,
    spec: AutoscalingSpec | None,
    prometheus_url: str = DEFAULT_PROMETHEUS_URL,
) -> dict[str, Any] | None:
    """The HPA (`mode: hpa`) or ScaledObject (`mode: keda`) for the Router of `plan`; None
    when the operator scales it itself or nothing does."""
    kind = wanted_kind(spec)
    if spec is None or kind is None:
        return None
    if kind[1] == HPA_KIND:
        return render_hpa(plan, spec)
    return render_scaled_object(plan, spec, prometheus_url)


def render_hpa(plan: RouterPlan, spec: AutoscalingSpec) -> dict[str, Any]:
    metrics = []
    for target, value in _targets(spec):
        name, selector = ADAPTER_METRICS[target]
        metric: dict[str, Any] = {"name": name}
        if selector is not None:
            metric["selector"] = selector
        metrics.append(
            {
                "type": "Pods",
                "pods": {
                    "metric": metric,
                    "target": {"type": "AverageValue", "averageValue": quantity(value)},
                },
            }
        )
    body: dict[str, Any] = {
        "scaleTargetRef": _target_ref(plan),
        "minReplicas": spec.minReplicas,
        "maxReplicas": spec.maxReplicas,
        "metrics": metrics,
    }
    behavior = _behavior(spec.behavior)
    if behavior:
        body["behavior"] = behavior
    return {
        "apiVersion": HPA_API_VERSION,
        "kind": HPA_KIND,
        "metadata": _metadata(plan),
        "spec": body,
    }


def render_scaled_object(
    plan: RouterPlan, spec: AutoscalingSpec, prometheus_url: str
) -> dict[str, Any]:
    triggers = [
        {
            "type": "prometheus",
            "name": target,
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": prometheus_url,
                "query": total_query(target, plan.namespace, plan.name),
                "threshold": quantity(value),
            },
        }
        for target, value in _targets(spec)
    ]
    body: dict[str, Any] = {
        "scaleTargetRef": _target_ref(plan),
        "minReplicaCount": spec.minReplicas,
        "maxReplicaCount": spec.maxReplicas,
        "triggers": triggers,
    }
    behavior = _behavior(spec.behavior)
    if behavior:
        body["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": behavior}}
    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": KEDA_KIND,
        "metadata": _metadata(plan),
        "spec": body,
    }


def total_query(target: str, namespace: str, router: str) -> str:
    """PromQL for the load of one Router's pods summed (KEDA divides by the replicas).
    Pods are `<router>-<ordinal>`: the pattern is anchored (PromQL regexes are), so Router
    `a` never counts the pods of Router `a-1` (`a-1-0`)."""
    pods = f"{_regex_literal(router)}-[0-9]+"
    where = f"namespace={_string(namespace)},pod=~{_string(pods)}"
    if target == "messagesPerSecond":
        return f'sum(rate({DELIVERIES_COUNTER}{{{where},direction="in"}}[{RATE_WINDOW}]))'
    if target == "connections":
        return f"sum({CONNECTIONS_GAUGE}{{{where},role!={_string(INTER_ROUTER_ROLE)}}})"
    if target == "unsettledDeliveries":
        return f"sum({UNSETTLED_GAUGE}{{{where}}})"
    raise ValueError(f"unknown autoscaling target {target!r}")


def quantity(value: float) -> str:
    """A number as a Kubernetes quantity that KEDA also reads as a float: an integer as is, a
    fraction as a plain decimal (never an exponent, which KEDA's threshold need not accept)."""
    number = Decimal(repr(float(value)))
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


def controlled_by(obj: dict[str, Any], uid: str) -> bool:
    """Whether `obj` is controlled by the object with `uid` (a Router): only those are the
    operator's to remove; an HPA a user made under the same name is left alone."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return bool(uid) and any(r.get("uid") == uid and r.get("controller") is True for r in refs)


def _targets(spec: AutoscalingSpec) -> list[tuple[str, float]]:
    return [
        (name, value) for name in _TARGETS if (value := getattr(spec.targets, name)) is not None
    ]


def _behavior(behavior: ScalingBehavior | None) -> dict[str, Any]:
    if behavior is None:
        return {}
    return behavior.model_dump(mode="json", exclude_none=True)


def _target_ref(plan: RouterPlan) -> dict[str, str]:
    return {"apiVersion": API_VERSION, "kind": ROUTER_KIND, "name": plan.name}


def _metadata(plan: RouterPlan) -> dict[str, Any]:
    return {
        "name": autoscaler_name(plan.name),
        "namespace": plan.namespace,
        "labels": labels(plan),
        "ownerReferences": [owner_reference(plan)],
    }


def _regex_literal(text: str) -> str:
    """`text` matched literally by an RE2 regex. Router names are DNS labels, which have none
    of these characters; Python's re.escape would also escape `-`, for nothing."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)


def _string(value: str) -> str:
    """A PromQL string literal (Go's escapes: backslash and double quote)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
