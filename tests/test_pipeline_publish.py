"""`recommend --configmap`: the recommendation written where predictive autoscaling reads it
(pipeline/publish.py), checked against the operator's reader (autoscaling/predict.py) and sent to an
API stand-in as server-side apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import write_kubeconfig
from router_operator.autoscaling import predict
from test_kubeapi import FakeApiServer

from pipeline import PipelineError
from pipeline.cli import main
from pipeline.publish import CONFIG_MAP_KEY, FIELD_MANAGER, FOUND, MADE_AT, config_map, publish

RECOMMENDATION: dict[str, Any] = {
    "apiVersion": "routernet.io/v1alpha1",
    "kind": "Recommendation",
    "generated": "2026-11-27T16:00:00+00:00",
    "range": {"from": None, "to": None},
    "targetMsgsPerSecond": 1000.0,
    "routers": [
        {
            "name": "core",
            "role": "interior",
            "observedReplicas": 3,
            "peakMsgsPerSecond": 2400.0,
            "peakPodMsgsPerSecond": 900.0,
            "replicas": 3,
            "hourly": [{"hour": 9, "peakMsgsPerSecond": 2400.0, "replicas": 3}],
        },
        {
            "name": "edge",
            "role": "edge",
            "observedReplicas": 2,
            "peakMsgsPerSecond": 300.0,
            "peakPodMsgsPerSecond": 200.0,
            "replicas": 1,
            "hourly": [],
        },
    ],
    "connections": [],
}


def test_the_configmap_is_what_predictive_autoscaling_reads() -> None:
    made = config_map(RECOMMENDATION, predict.config_map_name("default"), "demo")
    assert made["metadata"]["name"] == "routernet-recommendation-default"
    assert CONFIG_MAP_KEY == predict.CONFIG_MAP_KEY
    assert predict.parse(made["data"][CONFIG_MAP_KEY]) == RECOMMENDATION
    assert made["metadata"]["annotations"] == {
        MADE_AT: "2026-11-27T16:00:00+00:00",
        FOUND: "core 3 -> 3 (peak 2,400 msgs/s); edge 2 -> 1 (peak 300 msgs/s)",
    }


def test_it_is_applied_through_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = "/api/v1/namespaces/demo/configmaps/routernet-recommendation-default"
    with FakeApiServer(None) as api:
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config", api.url)))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        api.answers[path] = (200, {"kind": "ConfigMap"})
        publish(RECOMMENDATION, "routernet-recommendation-default", "demo")
        api.answers[path] = (403, None)
        with pytest.raises(PipelineError, match=r"^writing ConfigMap demo/routernet-rec.*403"):
            publish(RECOMMENDATION, "routernet-recommendation-default", "demo")
    applied = api.requests[0]
    assert applied["method"] == "PATCH"
    assert applied["path"] == f"{path}?fieldManager={FIELD_MANAGER}&force=true"
    assert applied["headers"]["Content-Type"] == "application/apply-patch+yaml"
    assert applied["body"] == config_map(RECOMMENDATION, "routernet-recommendation-default", "demo")


def test_configmap_without_a_namespace_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["recommend", str(tmp_path), "--configmap", "routernet-recommendation-x"]) == 2
    assert capsys.readouterr().err == (
        "pipeline: --configmap needs --namespace: the ConfigMap's namespace\n"
    )
