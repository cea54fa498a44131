"""Recommendations on a schedule (operator/router_operator/rendering/recommend.py): the CronJob the
operator renders per network beside its collector, running the pipeline image's
`recommend --compact --configmap` on the collector's claim, with an account that may write that
one ConfigMap; validated against Kubernetes' schemas; read from the chart's environment.
make e2e runs it on a cluster."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from router_operator.kubernetes.environment import OperatorConfig, recommend_from_env
from router_operator.kubernetes.reconciler import Memory, Snapshot, reconcile_namespace
from router_operator.planning.planner import RouterDecl, plan_namespace
from router_operator.rendering.collector import CollectorSettings
from router_operator.rendering.collector import selector_labels as collector_labels
from router_operator.rendering.recommend import RecommendSettings, render_recommend
from test_operator_handlers import FakeApi, body

from pipeline.cli import parser as pipeline_parser

NS = "msg"
VERSIONS = ["1.30", kubernetes_validate.latest_version()]
SETTINGS = RecommendSettings(image="registry.example/routernet/pipeline:1.0", target=1500.0)


def rendered(settings: RecommendSettings = SETTINGS) -> dict[str, dict[str, Any]]:
    plan = plan_namespace(NS, [RouterDecl("hub", uid="uid-hub"), RouterDecl("b", uid="uid-b")])
    return {o["kind"]: o for o in render_recommend(plan.networks["default"], NS, settings)}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_objects_validate(version: str) -> None:
    objects = rendered()
    assert list(objects) == ["ServiceAccount", "Role", "RoleBinding", "CronJob"]  # apply order
    for obj in objects.values():
        kubernetes_validate.validate(obj, version, strict=True)
        owners = [ref["name"] for ref in obj["metadata"]["ownerReferences"]]
        assert owners == ["b", "hub"]  # gone with the network's last Router


def test_the_job_recommends_on_the_collectors_claim_beside_the_collector() -> None:
    cron = rendered()["CronJob"]
    assert cron["metadata"]["name"] == "routernet-recommend-default"
    assert cron["spec"]["schedule"] == "17 * * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "routernet-recommend-default"
    [container] = pod["containers"]
    assert container["image"] == SETTINGS.image
    # The pipeline image's entry point takes these as the pipeline's command line.
    args = pipeline_parser().parse_args(container["args"])
    assert (args.command, str(args.dataset), args.compact) == (
        "recommend",
        "/var/lib/routernet/telemetry",
        True,
    )
    assert (args.namespace, args.configmap, args.target) == (
        NS,
        "routernet-recommendation-default",
        1500.0,
    )
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == "routernet-telemetry-default"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    # The claim is ReadWriteOnce and the collector's pod has it: on the same node.
    [term] = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"] == collector_labels("default")
    assert term["topologyKey"] == "kubernetes.io/hostname"


def test_its_account_may_write_that_configmap_alone() -> None:
    objects = rendered()
    rules = objects["Role"]["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["routernet-recommendation-default"],
            "verbs": ["get", "patch", "update"],
        },
    ]
    assert objects["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "routernet-recommend-default", "namespace": NS}
    ]


def test_settings_from_the_charts_environment() -> None:
    assert recommend_from_env({}) is None  # off unless asked: the pipeline image is large
    on = recommend_from_env({"ROUTERNET_RECOMMEND_ENABLED": "true"})
    assert on == RecommendSettings(image="routernet/pipeline:0.1.0")
    chosen = recommend_from_env(
        {
            "ROUTERNET_RECOMMEND_ENABLED": "true",
            "ROUTERNET_RECOMMEND_IMAGE": "p:2",
            "ROUTERNET_RECOMMEND_IMAGE_PULL_POLICY": "Never",
            "ROUTERNET_RECOMMEND_SCHEDULE": "*/5  * * * *",
            "ROUTERNET_RECOMMEND_TARGET": "2500",
        }
    )
    assert chosen == RecommendSettings(
        image="p:2", image_pull_policy="Never", schedule="*/5 * * * *", target=2500.0
    )
    assert OperatorConfig.from_env({"ROUTERNET_RECOMMEND_ENABLED": "true"}).recommend == on
    for name, value in (
        ("ROUTERNET_RECOMMEND_ENABLED", "yes"),
        ("ROUTERNET_RECOMMEND_IMAGE", "a b"),
        ("ROUTERNET_RECOMMEND_SCHEDULE", "hourly"),
        ("ROUTERNET_RECOMMEND_TARGET", "-3"),
        ("ROUTERNET_RECOMMEND_TARGET", "lots"),
        ("ROUTERNET_RECOMMEND_IMAGE_PULL_POLICY", "Sometimes"),
    ):
        with pytest.raises(ValueError, match=f"^{name}="):
            recommend_from_env({"ROUTERNET_RECOMMEND_ENABLED": "true", name: value})


def test_the_reconciler_applies_it_with_the_collector_only_when_asked() -> None:
    snapshot = Snapshot(NS, routers=(body("Router", "hub", {}),))
    collector = CollectorSettings(image="c:1")
    api = FakeApi()
    reconcile_namespace(snapshot, api, OperatorConfig(collector=collector, recommend=SETTINGS))
    assert [a for a in api.applied if "recommend" in a] == [
        "ServiceAccount/routernet-recommend-default",
        "Role/routernet-recommend-default",
        "RoleBinding/routernet-recommend-default",
        "CronJob/routernet-recommend-default",
    ]
    off = FakeApi()
    reconcile_namespace(snapshot, off, OperatorConfig(collector=collector), Memory())
    assert not [a for a in off.applied if "recommend" in a]
    # No collector, no dataset: no recommendations either.
    bare = FakeApi()
    reconcile_namespace(snapshot, bare, OperatorConfig(recommend=SETTINGS), Memory())
    assert not [a for a in bare.applied if "recommend" in a]


class StoredApi(FakeApi):
    """Holds objects for get and delete: ``stored`` by (kind, name)."""

    def __init__(self, stored: dict[tuple[str, str], dict[str, Any]]) -> None:
        super().__init__()
        self.stored = stored
        self.deleted: list[str] = []
        self.gets = 0

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.stored.get((kind, name))

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None
    ) -> bool:
        found = self.stored.pop((kind, name), None)
        assert found is None or found["metadata"]["uid"] == uid
        if found is not None:
            self.deleted.append(f"{kind}/{name}")
        return found is not None


def test_turned_off_the_operators_recommend_objects_go_and_a_users_stay() -> None:
    """With recommend.enabled off again (a helm upgrade restarts the operator without it), the
    CronJob went on running the pipeline every schedule: it and its account are removed, if
    the operator made them; an object of the same name a user made stays. Looked for once."""
    snapshot = Snapshot(NS, routers=(body("Router", "hub", {}),))
    collector = CollectorSettings(image="c:1")
    made = {
        (o["kind"], o["metadata"]["name"]): o | {"metadata": o["metadata"] | {"uid": f"u-{i}"}}
        for i, o in enumerate(rendered().values())
    }
    users = {"metadata": {"name": "routernet-recommend-default", "uid": "mine", "labels": {}}}
    made[("ServiceAccount", "routernet-recommend-default")] = users
    api = StoredApi(made)
    memory = Memory()
    reconcile_namespace(snapshot, api, OperatorConfig(collector=collector), memory)
    assert api.deleted == [
        "CronJob/routernet-recommend-default",
        "RoleBinding/routernet-recommend-default",
        "Role/routernet-recommend-default",
    ]
    assert list(api.stored) == [("ServiceAccount", "routernet-recommend-default")]
    gets = api.gets
    reconcile_namespace(snapshot, api, OperatorConfig(collector=collector), memory)
    assert api.gets == gets  # known gone: not looked for again
    # Turned on again, then off: looked for again.
    reconcile_namespace(
        snapshot, api, OperatorConfig(collector=collector, recommend=SETTINGS), memory
    )
    reconcile_namespace(snapshot, api, OperatorConfig(collector=collector), memory)
    assert api.gets > gets
