"""`Router.spec.autoscaling`: what users write to have the operator scale a Router on its load.

The shape, meaning and defaults are the HorizontalPodAutoscaler's (autoscaling/v2): users who
know an HPA's `behavior` know this one, and `mode: hpa` renders exactly these values into one.
Targets are average values per router, like an HPA's Pods metrics with an `AverageValue`
target: `messagesPerSecond` (deliveries a router forwards per second), `connections`,
`unsettledDeliveries`. The arithmetic is `autoscaling/hpa.py`; this module is the schema (one source
of truth for the CRD, through resources/models.py) and its rules.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from router_operator.resources.spec import Rule, StrictSpec

TOLERANCE = 0.1
"""The HPA's default tolerance: a ratio of load to target within 10% of 1 changes nothing."""


class ScalingPolicy(StrictSpec):
    """At most `value` pods (`Pods`) or `value` percent of the replicas at the start of the
    period (`Percent`) added or removed within any `periodSeconds`."""

    type: Literal["Pods", "Percent"] = Field(description="Pods: a count; Percent: of replicas.")
    value: int = Field(gt=0, description="Pods, or percent, per period.")
    periodSeconds: int = Field(gt=0, le=1800, description="The period, up to 30 minutes.")


class ScalingRules(StrictSpec):
    """One direction's rules, as an HPA's `behavior.scaleUp` / `behavior.scaleDown`."""

    stabilizationWindowSeconds: int | None = Field(
        default=None,
        ge=0,
        le=3600,
        description=(
            "Recommendations over this past window are considered: scaling up takes the lowest"
            " of them, scaling down the highest. Default: 0 up, 300 down."
        ),
    )
    selectPolicy: Literal["Max", "Min", "Disabled"] | None = Field(
        default=None,
        description="Max: the policy allowing the largest change; Min: the smallest;"
        " Disabled: never in this direction. Default: Max.",
    )
    policies: list[ScalingPolicy] | None = Field(
        default=None,
        min_length=1,
        max_length=10,
        description=(
            "Default up: 100 percent or 4 pods per 15 s (the larger); down: 100 percent per 15 s."
        ),
    )


class ScalingBehavior(StrictSpec):
    scaleUp: ScalingRules | None = Field(default=None, description="Rules for adding routers.")
    scaleDown: ScalingRules | None = Field(default=None, description="Rules for removing routers.")


class AutoscalingTargets(StrictSpec):
    """Average per-router values to keep: the Router is scaled so that its load divided by its
    replicas comes near each set target (the largest replicas any target asks for wins)."""

    messagesPerSecond: float | None = Field(
        default=None, gt=0, description="Deliveries each router forwards per second."
    )
    connections: int | None = Field(
        default=None,
        gt=0,
        description="Connections of clients and edge routers open on each router (the mesh's"
        " own, which grow with the replicas, do not count).",
    )
    unsettledDeliveries: int | None = Field(
        default=None, gt=0, description="Deliveries awaiting their outcome on each router."
    )


class AutoscalingSpec(StrictSpec):
    """The Router's replicas follow its load between minReplicas and maxReplicas."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule="!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
            message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
            holds=lambda s: s.minReplicas <= s.maxReplicas,
        ),
        Rule(
            rule="!has(self.predictive) || !self.predictive || !has(self.mode)"
            " || self.mode == 'operator'",
            message="autoscaling.predictive needs mode operator (the operator's own autoscaler)",
            holds=lambda s: not s.predictive or s.mode == "operator",
        ),
        Rule(
            rule=(
                "has(self.targets.messagesPerSecond) || has(self.targets.connections)"
                " || has(self.targets.unsettledDeliveries)"
            ),
            message=(
                "autoscaling.targets needs at least one of messagesPerSecond, connections,"
                " unsettledDeliveries"
            ),
            holds=lambda s: any(
                v is not None
                for v in (
                    s.targets.messagesPerSecond,
                    s.targets.connections,
                    s.targets.unsettledDeliveries,
                )
            ),
        ),
    )

    mode: Literal["operator", "hpa", "keda"] = Field(
        default="operator",
        description=(
            "operator: the operator scales the Router itself; hpa: it renders an autoscaling/v2"
            " HorizontalPodAutoscaler (Pods metrics through prometheus-adapter); keda: a KEDA"
            " ScaledObject with Prometheus triggers. Either of the last two then owns replicas."
        ),
    )
    minReplicas: int = Field(default=1, ge=1, description="Never fewer routers than this.")
    maxReplicas: int = Field(ge=1, le=1000, description="Never more routers than this.")
    targets: AutoscalingTargets = Field(description="Average per-router load to keep.")
    behavior: ScalingBehavior | None = Field(
        default=None, description="How fast to scale each way, as an HPA's behavior."
    )
    predictive: bool = Field(
        default=False,
        description=(
            "Keep the replicas the pipeline's recommendation (ConfigMap"
            " routernet-recommendation-<network>) gives for each hour of the day from 10"
            " minutes before that hour: routers are up before a known daily peak. Mode operator."
        ),
    )


# The HPA's defaults (k8s.io/kubernetes pkg/apis/autoscaling/v2/defaults.go).
DEFAULT_SCALE_UP = ScalingRules(
    stabilizationWindowSeconds=0,
    selectPolicy="Max",
    policies=[
        ScalingPolicy(type="Percent", value=100, periodSeconds=15),
        ScalingPolicy(type="Pods", value=4, periodSeconds=15),
    ],
)
DEFAULT_SCALE_DOWN = ScalingRules(
    stabilizationWindowSeconds=300,
    selectPolicy="Max",
    policies=[ScalingPolicy(type="Percent", value=100, periodSeconds=15)],
)


def effective_rules(given: ScalingRules | None, default: ScalingRules) -> ScalingRules:
    """Each field left out takes the HPA's default for its direction."""
    if given is None:
        return default
    return ScalingRules(
        stabilizationWindowSeconds=(
            default.stabilizationWindowSeconds
            if given.stabilizationWindowSeconds is None
            else given.stabilizationWindowSeconds
        ),
        selectPolicy=given.selectPolicy or default.selectPolicy,
        policies=given.policies or default.policies,
    )


SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"
ABLE_TO_SCALE = "AbleToScale"
CONDITIONS = (ABLE_TO_SCALE, SCALING_ACTIVE, SCALING_LIMITED)
"""The HPA's conditions, which the operator's autoscaler (autoscaling/scaler.py) sets on a
Router."""


class AutoscalingStatus(BaseModel):
    """What the autoscaler sees and did, beside the conditions ScalingActive, ScalingLimited
    and AbleToScale (the HPA's). Lenient, like all status."""

    model_config = ConfigDict(extra="ignore")

    mode: str = Field(description="Who scales this Router: operator, hpa or keda.")
    currentLoad: dict[str, float] = Field(
        default_factory=dict,
        description="Per target, the average per router at the last look (operator mode).",
    )
    routersMeasured: int | None = Field(
        default=None, ge=0, description="Routers whose /metrics answered at the last look."
    )
    desiredReplicas: int | None = Field(
        default=None, ge=0, description="What the autoscaler wants now, limits applied."
    )
    recommendedReplicas: int | None = Field(
        default=None,
        ge=0,
        description="What the load alone asks for, before stabilization and rate limits.",
    )
    predictedMinReplicas: int | None = Field(
        default=None,
        ge=1,
        description="What the recommendation's hourly profile asks for now"
        " (autoscaling/predict.py); a floor only with predictive.",
    )
    lastScaleTime: datetime | None = Field(default=None, description="When replicas changed.")
    lastScaleReason: str | None = Field(default=None, description="Why, for people.")

    @field_serializer("lastScaleTime")
    def _rfc3339(self, value: datetime | None) -> str | None:
        return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")
