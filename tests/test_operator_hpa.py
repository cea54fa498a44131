"""The autoscaler's arithmetic against the HorizontalPodAutoscaler's documented behaviour
(kubernetes.io "Horizontal Pod Autoscaling", autoscaling/v2 behavior): tolerance, the largest
of several targets, stabilization windows, scaling policies and selectPolicy, min and max."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from router_operator.autoscaling.hpa import Autoscaler, Measurement
from router_operator.resources.autoscaling import AutoscalingSpec


def spec(**fields: Any) -> AutoscalingSpec:
    fields.setdefault("maxReplicas", 10)
    fields.setdefault("targets", {"messagesPerSecond": 1000})
    return AutoscalingSpec.model_validate(fields)


def mps(per_router: float, routers: int) -> dict[str, Measurement]:
    return {"messagesPerSecond": Measurement(per_router * routers, routers)}


def test_within_the_tolerance_nothing_changes() -> None:
    a = Autoscaler()
    assert a.decide(0, spec(), 2, mps(1090, 2)).replicas == 2
    assert a.decide(1, spec(), 2, mps(910, 2)).replicas == 2
    up = a.decide(2, spec(), 2, mps(1200, 2))
    assert (up.replicas, up.reason, up.limited) == (3, "DesiredWithinRange", False)
    assert up.averages == {"messagesPerSecond": 1200}


def test_replicas_are_the_ceiling_of_the_load_over_the_target() -> None:
    # 3 routers at 1,500 msgs/s each against 1,000: ceil(4,500 / 1,000) = 5.
    assert Autoscaler().decide(0, spec(), 3, mps(1500, 3)).replicas == 5


def test_the_largest_proposal_of_all_targets_wins() -> None:
    s = spec(targets={"messagesPerSecond": 1000, "connections": 100})
    load = {**mps(500, 2), "connections": Measurement(500, 2)}
    decision = Autoscaler().decide(0, s, 2, load)
    assert decision.proposals == {"messagesPerSecond": 1, "connections": 5}
    assert decision.replicas == 5


def test_a_target_nobody_reported_proposes_nothing() -> None:
    s = spec(targets={"messagesPerSecond": 1000, "connections": 100})
    decision = Autoscaler().decide(0, s, 2, mps(3000, 2))
    assert decision.proposals == {"messagesPerSecond": 6}
    nothing = Autoscaler().decide(0, s, 2, {})
    assert (nothing.replicas, nothing.reason, nothing.active) == (
        None,
        "FailedGetPodsMetric",
        False,
    )


def test_default_scale_up_is_the_larger_of_100_percent_and_4_pods_per_15_s() -> None:
    a = Autoscaler()
    first = a.decide(0, spec(maxReplicas=50), 1, mps(30_000, 1))
    assert (first.recommendation, first.replicas, first.reason) == (30, 5, "ScaleUpLimit")
    assert first.limited
    a.scaled(0, 1, 5)
    # Within the same 15 s the period started at 1 replica: nothing more may be added.
    assert a.decide(10, spec(maxReplicas=50), 5, mps(6000, 5)).replicas == 5
    # Then 100% of 5 (10) beats 5 + 4.
    assert a.decide(16, spec(maxReplicas=50), 5, mps(6000, 5)).replicas == 10


def test_scale_up_stops_at_max_replicas() -> None:
    decision = Autoscaler().decide(0, spec(maxReplicas=3), 2, mps(5000, 2))
    assert (decision.replicas, decision.reason) == (3, "TooManyReplicas")


def test_scale_down_waits_for_the_300_s_stabilization_window() -> None:
    a = Autoscaler()
    assert a.decide(0, spec(), 4, mps(1000, 4)).replicas == 4
    # The load drops: the highest recommendation of the last 300 s (4) holds.
    for t in (15, 100, 299):
        assert a.decide(t, spec(), 4, mps(100, 4)).replicas == 4
    down = a.decide(301, spec(), 4, mps(100, 4))
    assert (down.replicas, down.reason) == (1, "DesiredWithinRange")


def test_a_short_peak_inside_the_window_keeps_the_routers() -> None:
    a = Autoscaler()
    s = spec(behavior={"scaleDown": {"stabilizationWindowSeconds": 60}})
    a.decide(0, s, 3, mps(1000, 3))
    a.decide(30, s, 3, mps(100, 3))
    assert a.decide(50, s, 3, mps(100, 3)).replicas == 3
    assert a.decide(61, s, 3, mps(100, 3)).replicas == 1


def test_scale_up_stabilization_takes_the_lowest_recent_recommendation() -> None:
    a = Autoscaler()
    s = spec(behavior={"scaleUp": {"stabilizationWindowSeconds": 30}})
    assert a.decide(0, s, 2, mps(1000, 2)).replicas == 2
    assert a.decide(10, s, 2, mps(3000, 2)).replicas == 2  # 2 seen within 30 s
    assert a.decide(31, s, 2, mps(3000, 2)).replicas == 6


def test_pods_policy_removes_one_router_a_minute() -> None:
    s = spec(
        behavior={
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
            }
        }
    )
    a = Autoscaler()
    first = a.decide(0, s, 5, mps(10, 5))
    assert (first.replicas, first.reason) == (4, "ScaleDownLimit")
    a.scaled(0, 5, 4)
    assert a.decide(30, s, 4, mps(10, 4)).replicas == 4
    assert a.decide(61, s, 4, mps(10, 4)).replicas == 3


def test_select_policy_min_takes_the_smallest_change_and_disabled_none() -> None:
    policies = [
        {"type": "Percent", "value": 100, "periodSeconds": 15},
        {"type": "Pods", "value": 1, "periodSeconds": 15},
    ]
    least = spec(behavior={"scaleUp": {"selectPolicy": "Min", "policies": policies}})
    assert Autoscaler().decide(0, least, 4, mps(5000, 4)).replicas == 5
    most = spec(behavior={"scaleUp": {"policies": policies}})
    assert Autoscaler().decide(0, most, 4, mps(5000, 4)).replicas == 8
    never = spec(behavior={"scaleDown": {"selectPolicy": "Disabled"}})
    a = Autoscaler()
    a.decide(0, never, 4, mps(10, 4))
    assert a.decide(400, never, 4, mps(10, 4)).replicas == 4


def test_percent_policy_rounds_up_when_adding_and_down_when_removing() -> None:
    s = spec(
        maxReplicas=100,
        behavior={
            "scaleUp": {"policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]},
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}],
            },
        },
    )
    assert Autoscaler().decide(0, s, 3, mps(10_000, 3)).replicas == 4  # ceil(3.3)
    assert Autoscaler().decide(0, s, 15, mps(10, 15)).replicas == 13  # int(13.5)


def test_outside_min_and_max_the_replicas_come_back_first() -> None:
    over = Autoscaler().decide(0, spec(maxReplicas=3), 5, {})
    assert (over.replicas, over.reason) == (3, "TooManyReplicas")
    under = Autoscaler().decide(0, spec(minReplicas=2), 1, {})
    assert (under.replicas, under.reason) == (2, "TooFewReplicas")
    never_below = Autoscaler().decide(0, spec(minReplicas=2), 2, mps(1, 2))
    assert never_below.replicas == 2


def test_zero_replicas_set_by_hand_disables_scaling() -> None:
    decision = Autoscaler().decide(0, spec(), 0, mps(5000, 1))
    assert (decision.replicas, decision.reason, decision.active) == (0, "ScalingDisabled", False)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"minReplicas": 4, "maxReplicas": 3}, "must not exceed"),
        ({"targets": {}}, "at least one of messagesPerSecond"),
        ({"targets": {"messagesPerSecond": 0}}, "greater than 0"),
        ({"minReplicas": 0}, "greater than or equal to 1"),
        ({"behavior": {"scaleUp": {"policies": []}}}, "at least 1 item"),
        ({"behavior": {"scaleUp": {"selectPolicy": "Most"}}}, "'Max', 'Min' or 'Disabled'"),
        ({"mode": "vpa"}, "'operator', 'hpa' or 'keda'"),
    ],
)
def test_bad_autoscaling_is_refused_with_a_clear_message(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(**fields)


def test_a_floor_raises_min_replicas_for_a_predicted_peak_but_not_past_max() -> None:
    assert Autoscaler().decide(0, spec(maxReplicas=4), 1, mps(10, 1), floor=3).replicas == 3
    assert Autoscaler().decide(0, spec(maxReplicas=4), 1, mps(10, 1), floor=9).replicas == 4
    # Above the floor the load still decides.
    assert Autoscaler().decide(0, spec(), 2, mps(2000, 2), floor=2).replicas == 4
