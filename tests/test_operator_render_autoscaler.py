"""`autoscaling.mode: hpa` and `keda`: the HorizontalPodAutoscaler and the KEDA ScaledObject
rendered for a Router, checked against the schemas the API server would hold them to (the
autoscaling/v2 schemas of kubernetes-validate; KEDA's own CRD, tests/data/keda-2.20.2), and the
reconciler that applies one and removes the other, on a fake API and on the kmock emulator."""

from __future__ import annotations

import copy
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kmock
import kubernetes_validate
import pytest
import yaml
from crd_semantics import api_server_failures, prune
from harness import write_kubeconfig
from router_operator.kubernetes.api import ApiError
from router_operator.kubernetes.environment import OperatorConfig
from router_operator.kubernetes.reconciler import ABSENT, Memory, Snapshot, reconcile_namespace
from router_operator.planning import adapter
from router_operator.planning.planner import RouterDecl, RouterPlan, plan_namespace
from router_operator.rendering import autoscaler as render_autoscaler_module
from router_operator.rendering.autoscaler import (
    DEFAULT_PROMETHEUS_URL,
    controlled_by,
    quantity,
    render_autoscaler,
    total_query,
)
from router_operator.rendering.router import labels, owner_reference
from router_operator.resources.autoscaling import AutoscalingSpec
from router_operator.resources.models import API_VERSION, READY, Router
from test_operator_handlers import (
    ROUTERS,
    Cluster,
    call,
    condition,
    create,
    declare,
    eventually,
    get,
    operator,
    path,
    reconciled,
    requests_to,
)

NS = "msg"
VERSIONS = ["1.30", kubernetes_validate.latest_version()]
KEDA_CRD = Path(__file__).parent / "data" / "keda-2.20.2" / "keda.sh_scaledobjects.yaml"
PROMETHEUS = "http://prometheus.monitoring.svc:9090"
HPA_RESOURCE = "autoscaling/v2/horizontalpodautoscalers"
KEDA_RESOURCE = "keda.sh/v1alpha1/scaledobjects"

# k8s.io/apimachinery/pkg/api/resource/quantity.go: <signedNumber><suffix>
QUANTITY = re.compile(
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)))?$"
)

pytestmark = pytest.mark.kmock(cls=Cluster)


def autoscaling(**fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "mode": "hpa",
        "minReplicas": 2,
        "maxReplicas": 10,
        "targets": {"messagesPerSecond": 2500.5, "connections": 400, "unsettledDeliveries": 1000},
    }
    spec.update(fields)
    return spec


def router_body(name: str = "hub", generation: int = 1, **spec: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": generation}
    return {"apiVersion": API_VERSION, "kind": "Router", "metadata": meta, "spec": spec}


def parsed_spec(spec: Mapping[str, Any]) -> AutoscalingSpec:
    """Through the Router model, as the reconciler gets it (the CRD's shape and rules)."""
    parsed = adapter.parse("Router", router_body(autoscaling=dict(spec)))
    assert isinstance(parsed.model, Router), parsed.error
    result = parsed.model.spec.autoscaling
    assert isinstance(result, AutoscalingSpec)
    return result


def router_plan(name: str = "hub") -> RouterPlan:
    return plan_namespace(NS, [RouterDecl(name, uid=f"uid-{name}", replicas=2)]).router(name)


def keda_schema() -> dict[str, Any]:
    crd = yaml.safe_load(KEDA_CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return dict(version["schema"]["openAPIV3Schema"])


def keda_failures(obj: dict[str, Any]) -> list[str]:
    """What the API server would refuse, and what it would silently drop (a field KEDA's
    schema does not declare: server-side apply with strict field validation refuses it)."""
    schema = keda_schema()
    failures = [f"{f.path}: {f.message}" for f in api_server_failures(schema, obj)]
    # metadata is the API server's (the CRD declares it as a bare object).
    if prune(schema["properties"]["spec"], obj["spec"]) != obj["spec"]:
        failures.append("fields KEDA's schema does not declare")
    return failures


# --- rendering -----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, autoscaling(mode="operator")])
def test_nothing_is_rendered_when_the_operator_scales_or_nobody_does(
    spec: dict[str, Any] | None,
) -> None:
    assert render_autoscaler(router_plan(), parsed_spec(spec) if spec else None) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_hpa_mode_renders_a_horizontal_pod_autoscaler_of_the_router(version: str) -> None:
    spec = autoscaling(
        behavior={
            "scaleDown": {
                "stabilizationWindowSeconds": 600,
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
            }
        }
    )
    plan = router_plan()
    hpa = render_autoscaler(plan, parsed_spec(spec), PROMETHEUS)
    assert hpa is not None
    kubernetes_validate.validate(hpa, version, strict=True)
    assert (hpa["apiVersion"], hpa["kind"]) == ("autoscaling/v2", "HorizontalPodAutoscaler")
    assert hpa["metadata"] == {
        "name": "hub",
        "namespace": NS,
        "labels": labels(plan),
        "ownerReferences": [owner_reference(plan)],
    }
    assert hpa["metadata"]["ownerReferences"][0]["controller"] is True
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "routernet.io/v1alpha1", "kind": "Router", "name": "hub"},
        "minReplicas": 2,
        "maxReplicas": 10,
        "metrics": [
            {
                "type": "Pods",
                "pods": {
                    # prometheus-adapter's default rules: a counter's rate, _total stripped.
                    "metric": {
                        "name": "routernet_deliveries",
                        "selector": {"matchLabels": {"direction": "in"}},
                    },
                    "target": {"type": "AverageValue", "averageValue": "2500.5"},
                },
            },
            {
                "type": "Pods",
                "pods": {
                    "metric": {
                        "name": "routernet_connections",
                        "selector": {
                            "matchExpressions": [
                                {"key": "role", "operator": "NotIn", "values": ["inter-router"]}
                            ]
                        },
                    },
                    "target": {"type": "AverageValue", "averageValue": "400"},
                },
            },
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "routernet_unsettled_deliveries"},
                    "target": {"type": "AverageValue", "averageValue": "1000"},
                },
            },
        ],
        # Only what the user gave: the HPA's own defaults fill in the rest (scaleUp, selectPolicy).
        "behavior": {
            "scaleDown": {
                "stabilizationWindowSeconds": 600,
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
            }
        },
    }


def test_hpa_without_behavior_has_none_and_one_metric_per_target() -> None:
    spec = autoscaling(targets={"connections": 50})
    hpa = render_autoscaler(router_plan(), parsed_spec(spec))
    assert hpa is not None
    kubernetes_validate.validate(hpa, VERSIONS[-1], strict=True)
    assert "behavior" not in hpa["spec"]
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == [
        "routernet_connections"
    ]


def test_the_hpa_validator_is_strict_enough_to_catch_mistakes() -> None:
    hpa = render_autoscaler(router_plan(), parsed_spec(autoscaling()))
    assert hpa is not None
    hpa["spec"]["metrics"][0]["pods"]["target"]["averagValue"] = "1"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(hpa, VERSIONS[-1], strict=True)


def test_keda_mode_renders_a_scaled_object_with_prometheus_triggers() -> None:
    behavior = {"scaleUp": {"selectPolicy": "Min"}, "scaleDown": {"selectPolicy": "Disabled"}}
    plan = router_plan()
    spec = parsed_spec(autoscaling(mode="keda", behavior=behavior))
    so = render_autoscaler(plan, spec, PROMETHEUS)
    assert so is not None
    assert keda_failures(so) == []
    assert (so["apiVersion"], so["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert so["metadata"]["name"] == "hub" and so["metadata"]["namespace"] == NS
    assert so["metadata"]["ownerReferences"] == [owner_reference(plan)]
    pods = 'namespace="msg",pod=~"hub-[0-9]+"'
    assert so["spec"] == {
        "scaleTargetRef": {"apiVersion": "routernet.io/v1alpha1", "kind": "Router", "name": "hub"},
        "minReplicaCount": 2,
        "maxReplicaCount": 10,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
        "triggers": [
            {
                "type": "prometheus",
                "name": "messagesPerSecond",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": PROMETHEUS,
                    # The Router's total: KEDA's AverageValue divides it by the replicas.
                    "query": (
                        f'sum(rate(routernet_deliveries_total{{{pods},direction="in"}}[2m]))'
                    ),
                    "threshold": "2500.5",
                },
            },
            {
                "type": "prometheus",
                "name": "connections",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": PROMETHEUS,
                    "query": f'sum(routernet_connections{{{pods},role!="inter-router"}})',
                    "threshold": "400",
                },
            },
            {
                "type": "prometheus",
                "name": "unsettledDeliveries",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": PROMETHEUS,
                    "query": f"sum(routernet_unsettled_deliveries{{{pods}}})",
                    "threshold": "1000",
                },
            },
        ],
    }


def test_the_keda_schema_catches_mistakes() -> None:
    so = render_autoscaler(router_plan(), parsed_spec(autoscaling(mode="keda")))
    assert so is not None and "advanced" not in so["spec"]
    assert keda_failures(so) == []
    wrong = copy.deepcopy(so)
    wrong["spec"]["triggers"][0]["metadata"]["threshold"] = 2500.5  # metadata is all strings
    assert keda_failures(wrong)
    typo = copy.deepcopy(so)
    typo["spec"]["minReplicas"] = 2  # an HPA's name, not KEDA's
    assert keda_failures(typo)
    backwards = copy.deepcopy(so)
    backwards["spec"]["minReplicaCount"] = 11  # KEDA's CEL rule: min <= max
    assert keda_failures(backwards)


def test_the_default_prometheus_is_the_operators_configuration() -> None:
    so = render_autoscaler(router_plan(), parsed_spec(autoscaling(mode="keda")))
    assert so is not None
    urls = {t["metadata"]["serverAddress"] for t in so["spec"]["triggers"]}
    assert urls == {DEFAULT_PROMETHEUS_URL} == {OperatorConfig().prometheus_url}


def test_the_pod_pattern_is_this_routers_alone() -> None:
    query = total_query("unsettledDeliveries", NS, "a")
    [pattern] = re.findall(r'pod=~"([^"]+)"', query)
    # PromQL anchors its regexes: fullmatch.
    assert [p for p in ("a-0", "a-12", "a-1-0", "ab-0", "a-") if re.fullmatch(pattern, p)] == [
        "a-0",
        "a-12",
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2500.5, "2500.5"),
        (100.0, "100"),
        (400, "400"),
        (0.25, "0.25"),
        (1e-05, "0.00001"),
        (1e16, "10000000000000000"),
        (0.1 + 0.2, "0.30000000000000004"),
    ],
)
def test_targets_are_quantities_and_floats(value: float, text: str) -> None:
    assert quantity(value) == text
    assert QUANTITY.match(text)
    assert float(text) == value  # KEDA parses the threshold with strconv.ParseFloat


def test_only_an_object_the_router_controls_is_its_own() -> None:
    plan = router_plan()
    hpa = render_autoscaler(plan, parsed_spec(autoscaling()))
    assert hpa is not None and controlled_by(hpa, "uid-hub")
    assert not controlled_by(hpa, "uid-other") and not controlled_by(hpa, "")
    hpa["metadata"]["ownerReferences"][0]["controller"] = False
    assert not controlled_by(hpa, "uid-hub")
    assert not controlled_by({"metadata": {"name": "hub"}}, "uid-hub")


# --- the reconciler, on a fake API ---------------------------------------------------------------


class AutoscalerApi:
    """Keeps what is applied (with a uid, as the API server gives one); records every call in
    order; raises the staged errors of ``fail`` (by ``<verb> <kind>``)."""

    def __init__(self, fail: Mapping[str, ApiError] | None = None) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []
        self.statuses: dict[str, dict[str, Any]] = {}
        self.fail = dict(fail or {})
        self.deleted_uids: list[str | None] = []

    def _call(self, verb: str, kind: str, name: str) -> None:
        self.calls.append(f"{verb} {kind}/{name}")
        if f"{verb} {kind}" in self.fail:
            raise self.fail[f"{verb} {kind}"]

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        kind, name = obj["kind"], obj["metadata"]["name"]
        self._call("apply", kind, name)
        stored = copy.deepcopy(dict(obj))
        stored["metadata"]["uid"] = f"uid-{kind}-{name}"
        self.objects[kind, name] = stored
        return stored

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self._call("get", kind, name)
        return copy.deepcopy(self.objects.get((kind, name)))

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.statuses[f"{kind}/{name}"] = dict(status)
        return {}

    def patch_scale(
        self, api_version: str, kind: str, namespace: str, name: str, replicas: int
    ) -> dict[str, Any]:
        self._call("scale", kind, name)
        return {}

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None
    ) -> bool:
        self._call("delete", kind, name)
        self.deleted_uids.append(uid)
        return self.objects.pop((kind, name), None) is not None

    def autoscaler_calls(self) -> list[str]:
        return [c for c in self.calls if "HorizontalPodAutoscaler/" in c or "ScaledObject/" in c]

    def ready(self, name: str = "hub") -> dict[str, Any]:
        return condition({"status": self.statuses[f"Router/{name}"]}, READY)


def reconcile(
    api: AutoscalerApi, memory: Memory, generation: int = 1, **spec: Any
) -> tuple[Any, list[str]]:
    """One pass over a namespace with Router hub and an Address; the autoscaler calls it made."""
    before = len(api.calls)
    snapshot = Snapshot(
        NS,
        routers=(router_body("hub", generation, **spec),),
        addresses=(
            {
                "apiVersion": API_VERSION,
                "kind": "Address",
                "metadata": {"name": "orders", "namespace": NS, "uid": "uid-a", "generation": 1},
                "spec": {"prefix": "orders"},
            },
        ),
    )
    result = reconcile_namespace(snapshot, api, OperatorConfig(prometheus_url=PROMETHEUS), memory)
    calls = [c for c in api.calls[before:] if "HorizontalPodAutoscaler/" in c or "Scaled" in c]
    return result, calls


def test_the_autoscaler_is_applied_after_the_statefulset_and_then_left_alone() -> None:
    api, memory = AutoscalerApi(), Memory()
    result, calls = reconcile(api, memory, autoscaling=autoscaling())
    # The ScaledObject no mode wants is looked for once; the HPA applied after the routers.
    assert calls == ["get ScaledObject/hub", "apply HorizontalPodAutoscaler/hub"]
    assert api.calls.index("apply HorizontalPodAutoscaler/hub") > api.calls.index(
        "apply StatefulSet/hub"
    )
    assert result.failures == [] and memory.applied["uid-hub/ScaledObject/hub"] == ABSENT
    result, calls = reconcile(api, memory, autoscaling=autoscaling())
    assert calls == [] and result.applied_objects == 0  # unchanged: nothing sent, nothing read
    # A changed target is applied again.
    changed = autoscaling(targets={"connections": 10})
    _, calls = reconcile(api, memory, generation=2, autoscaling=changed)
    assert calls == ["apply HorizontalPodAutoscaler/hub"]


def test_switching_modes_removes_the_previous_autoscaler_first() -> None:
    api, memory = AutoscalerApi(), Memory()
    reconcile(api, memory, autoscaling=autoscaling())
    assert ("HorizontalPodAutoscaler", "hub") in api.objects

    result, calls = reconcile(api, memory, generation=2, autoscaling=autoscaling(mode="keda"))
    assert calls == [
        "get HorizontalPodAutoscaler/hub",
        "delete HorizontalPodAutoscaler/hub",
        "apply ScaledObject/hub",
    ]
    assert api.deleted_uids == ["uid-HorizontalPodAutoscaler-hub"]  # a precondition
    assert result.deleted_objects == 1 and result.failures == []
    assert set(api.objects) >= {("ScaledObject", "hub")}
    assert ("HorizontalPodAutoscaler", "hub") not in api.objects

    result, calls = reconcile(api, memory, generation=3, autoscaling=autoscaling(mode="operator"))
    assert calls == ["get ScaledObject/hub", "delete ScaledObject/hub"]
    assert not [k for k in api.objects if k[0] in ("HorizontalPodAutoscaler", "ScaledObject")]

    # Autoscaling removed altogether: both are known gone, nothing to ask.
    _, calls = reconcile(api, memory, generation=4)
    assert calls == []
    # After a restart (memory lost), both are looked for once again.
    _, calls = reconcile(api, Memory(), generation=4)
    assert calls == ["get HorizontalPodAutoscaler/hub", "get ScaledObject/hub"]


def test_an_autoscaler_the_router_does_not_control_is_left_alone() -> None:
    api = AutoscalerApi()
    api.objects["HorizontalPodAutoscaler", "hub"] = {
        "metadata": {"name": "hub", "uid": "theirs", "ownerReferences": []}
    }
    result, calls = reconcile(api, Memory())
    assert calls == ["get HorizontalPodAutoscaler/hub", "get ScaledObject/hub"]
    assert ("HorizontalPodAutoscaler", "hub") in api.objects and result.deleted_objects == 0


def test_keda_not_installed_is_said_on_the_router_and_its_routers_still_run() -> None:
    missing = ApiError(404, "Not Found", "the server could not find the requested resource")
    api = AutoscalerApi({"apply ScaledObject": missing})
    result, calls = reconcile(api, Memory(), autoscaling=autoscaling(mode="keda"))
    assert calls == ["get HorizontalPodAutoscaler/hub", "apply ScaledObject/hub"]
    assert "apply StatefulSet/hub" in api.calls
    ready = api.ready()
    assert (ready["status"], ready["reason"]) == ("False", "KEDANotInstalled")
    assert ready["message"].startswith("KEDA is not installed: ")
    applied = condition({"status": api.statuses["Router/hub"]}, adapter.CONFIG_APPLIED)
    assert applied["status"] == "True"
    # Not retried in a loop (the resync tries again); the Address is applied on hub regardless.
    assert result.transient is False and len(result.failures) == 1
    address = api.statuses["Address/orders"]["conditions"][0]
    assert address["reason"] == "Applied", address


def test_a_failed_removal_keeps_the_new_autoscaler_out() -> None:
    api = AutoscalerApi()
    reconcile(api, Memory(), autoscaling=autoscaling())
    api.fail["get HorizontalPodAutoscaler"] = ApiError(503, "ServiceUnavailable", "later")
    result, calls = reconcile(api, Memory(), generation=2, autoscaling=autoscaling(mode="keda"))
    assert calls == ["get HorizontalPodAutoscaler/hub"], "never two controllers"
    assert api.ready()["reason"] == "AutoscalerNotRemoved"
    assert result.transient is True


def test_a_forbidden_look_is_no_autoscaler() -> None:
    """The chart grants get with create: an operator that may not read ScaledObjects cannot
    have made one, and a Router that does not use them must not fail for it."""
    forbidden = ApiError(403, "Forbidden", "scaledobjects.keda.sh is forbidden")
    api = AutoscalerApi({"get ScaledObject": forbidden})
    result, _ = reconcile(api, Memory(), autoscaling=autoscaling())
    assert result.failures == [] and ("HorizontalPodAutoscaler", "hub") in api.objects


def test_the_prometheus_url_from_the_environment() -> None:
    assert OperatorConfig.from_env({}).prometheus_url == DEFAULT_PROMETHEUS_URL
    url = "https://thanos-query.observability:10902"
    assert OperatorConfig.from_env({"ROUTERNET_PROMETHEUS_URL": url}).prometheus_url == url
    for wrong in ("prometheus:9090", "ftp://p", "http://", "http://p:port", "http://a b"):
        with pytest.raises(ValueError, match="ROUTERNET_PROMETHEUS_URL"):
            OperatorConfig.from_env({"ROUTERNET_PROMETHEUS_URL": wrong})


# --- the operator, on the kmock emulator ---------------------------------------------------------


@pytest.fixture
def cluster(kmock: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """As tests/test_operator_handlers.py's: the emulator, the operator's kubeconfig at it."""
    declare(kmock)
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url))))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return kmock


def declare_keda(cluster: Cluster) -> None:
    """KEDA installed: its ScaledObjects served (without KEDA's controller or webhook)."""
    cluster.resources[KEDA_RESOURCE] = kmock.ResourceInfo(
        kind="ScaledObject",
        singular="scaledobject",
        namespaced=True,
        verbs={"list", "watch", "get", "create", "patch", "update", "delete"},
        shortnames={"so"},
        subresources={"status"},
    )


def absent(cluster: Cluster, resource: str, name: str) -> bool:
    """Not there; an AssertionError (which `eventually` waits out) while it is."""
    try:
        get(cluster, resource, name)
    except KeyError:
        return True
    raise AssertionError(f"{resource} {name} is still there")


async def set_autoscaling(cluster: Cluster, spec: dict[str, Any] | None) -> None:
    await call(cluster, "PATCH", path("routers", "hub"), {"spec": {"autoscaling": spec}})


@pytest.mark.asyncio
async def test_switching_hpa_to_operator_deletes_the_hpa(cluster: Cluster) -> None:
    """hpa -> operator removes the HPA; keda then gets a ScaledObject, which goes when
    autoscaling is removed altogether. The Router is configured throughout."""
    declare_keda(cluster)
    uid = await create(cluster, "routers", "hub", {"replicas": 2, "autoscaling": autoscaling()})
    async with operator():
        hpa = await eventually(lambda: get(cluster, HPA_RESOURCE, "hub"))
        assert hpa["metadata"]["ownerReferences"][0]["uid"] == uid
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": API_VERSION,
            "kind": "Router",
            "name": "hub",
        }

        await set_autoscaling(cluster, autoscaling(mode="operator"))
        await eventually(lambda: absent(cluster, HPA_RESOURCE, "hub"))
        [delete] = requests_to(cluster, HPA_RESOURCE, "DELETE")
        assert delete.data["preconditions"] == {"uid": hpa["metadata"]["uid"]}
        router = await eventually(lambda: reconciled(cluster, "routers", "hub", generation=2))
        assert condition(router, adapter.CONFIG_APPLIED)["status"] == "True"

        await set_autoscaling(cluster, autoscaling(mode="keda"))
        so = await eventually(lambda: get(cluster, KEDA_RESOURCE, "hub"))
        assert so["spec"]["triggers"][0]["metadata"]["serverAddress"] == DEFAULT_PROMETHEUS_URL
        assert absent(cluster, HPA_RESOURCE, "hub")

        await set_autoscaling(cluster, None)
        await eventually(lambda: absent(cluster, KEDA_RESOURCE, "hub"))
        await eventually(lambda: reconciled(cluster, "routers", "hub", generation=4))
        assert len(requests_to(cluster, HPA_RESOURCE, "DELETE")) == 1
        assert len(requests_to(cluster, KEDA_RESOURCE, "DELETE")) == 1
    assert "autoscaling" not in get(cluster, ROUTERS, "hub")["spec"]


@pytest.mark.asyncio
async def test_keda_mode_without_keda_says_so(cluster: Cluster) -> None:
    # No KEDA: the API server has no such resource. (kmock alone would store anything posted.)
    cluster[kmock.resource(KEDA_RESOURCE)] << 404
    await create(cluster, "routers", "hub", {"replicas": 1, "autoscaling": autoscaling()})
    async with operator():
        await eventually(lambda: get(cluster, HPA_RESOURCE, "hub"))
        await set_autoscaling(cluster, autoscaling(mode="keda"))

        def said() -> dict[str, Any]:
            router = reconciled(cluster, "routers", "hub", generation=2)
            ready = condition(router, READY)
            assert ready["reason"] == "KEDANotInstalled", ready
            return ready

        ready = await eventually(said)
        assert "KEDA is not installed" in ready["message"]
        assert absent(cluster, HPA_RESOURCE, "hub")  # the HPA went first all the same
        get(cluster, "apps/v1/statefulsets", "hub")


def test_the_documented_adapter_rules_serve_the_hpas_metrics() -> None:
    """The prometheus-adapter rules of docs/operator.md (also in render_autoscaler's docstring)
    expose exactly the metric names the HPA asks for, from the series the routers serve."""
    documented = (Path(__file__).parent.parent / "docs/operator.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", documented, re.S) if "seriesQuery" in b]
    rules = yaml.safe_load(block)["rules"]["custom"]
    in_docstring = re.search(
        r"\n\n(    - seriesQuery.*?)\n\n", render_autoscaler_module.__doc__ or "", re.S
    )
    assert in_docstring is not None
    assert yaml.safe_load(textwrap.dedent(in_docstring[1])) == rules
    exposed: set[str] = set()
    for rule in rules:
        series = rule["seriesQuery"].split("{")[0]
        name = rule.get("name")
        exposed.add(
            re.sub(name["matches"], name["as"].replace("${1}", r"\1"), series) if name else series
        )
        assert rule["resources"]["overrides"] == {
            "namespace": {"resource": "namespace"},
            "pod": {"resource": "pod"},
        }
    hpa = render_autoscaler(router_plan(), parsed_spec(autoscaling()))
    assert hpa is not None
    assert exposed == {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]}
