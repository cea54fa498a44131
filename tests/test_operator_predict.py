"""Predictive autoscaling: the recommendation's hourly profile read as a floor, ahead of the
hour, and shown in status whether or not `predictive` applies it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from router_operator.autoscaling.load import Reading
from router_operator.autoscaling.predict import parse, predicted_min
from router_operator.autoscaling.scaler import RouterScaling, step
from router_operator.resources.models import Router, RouterStatus

RECOMMENDATION = {
    "apiVersion": "routernet.io/v1alpha1",
    "kind": "Recommendation",
    "routers": [
        {
            "name": "hub",
            "replicas": 4,
            "hourly": [
                {"hour": 8, "peakMsgsPerSecond": 900.0, "replicas": 1},
                {"hour": 9, "peakMsgsPerSecond": 3500.0, "replicas": 4},
            ],
        },
        {"name": "old", "replicas": 2},  # from before the profile existed
    ],
}


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 11, 25, hour, minute, tzinfo=UTC)


def test_the_hours_replicas_from_ten_minutes_before_the_hour() -> None:
    assert predicted_min(RECOMMENDATION, "hub", at(8, 30)) == 1
    assert predicted_min(RECOMMENDATION, "hub", at(8, 51)) == 4  # 9:01 is ahead
    assert predicted_min(RECOMMENDATION, "hub", at(9, 59)) == 4
    assert predicted_min(RECOMMENDATION, "hub", at(10, 30)) is None  # no profile then
    assert predicted_min(RECOMMENDATION, "old", at(9, 0)) is None
    assert predicted_min(RECOMMENDATION, "other", at(9, 0)) is None
    assert predicted_min(None, "hub", at(9, 0)) is None


def test_what_is_not_a_recommendation_is_none() -> None:
    assert parse(json.dumps(RECOMMENDATION)) == RECOMMENDATION
    for text in (None, "", "{not json", "[]", '{"kind": "Router"}'):
        assert parse(text) is None


def router(predictive: bool) -> Router:
    body: dict[str, Any] = {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": "Router",
        "metadata": {"name": "hub", "namespace": "msg"},
        "spec": {
            "replicas": 1,
            "autoscaling": {
                "maxReplicas": 5,
                "targets": {"connections": 100},
                "predictive": predictive,
            },
        },
    }
    return Router.model_validate(body)


def test_predictive_routers_keep_the_predicted_replicas_others_only_show_them() -> None:
    quiet = {"hub-0": Reading(deliveries_in=0, connections=10, unsettled=0)}  # 1 router is plenty
    for predictive, replicas in ((True, 4), (False, None)):
        result = step(
            0.0,
            at(8, 55),
            router(predictive),
            RouterStatus(),
            RouterScaling(),
            quiet,
            RECOMMENDATION,
        )
        assert result.replicas == replicas
        assert result.status.autoscaling is not None
        assert result.status.autoscaling.predictedMinReplicas == 4
    without = step(0.0, at(8, 55), router(False), RouterStatus(), RouterScaling(), quiet, None)
    assert without.status.autoscaling is not None
    assert without.status.autoscaling.predictedMinReplicas is None
