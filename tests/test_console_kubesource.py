"""The console's Kubernetes source (router_operator/console/kubesource.py) against a fake API
that answers lists from API objects in the API's own JSON (tests/data/console-kube/: a demo
namespace of the quick start with pods Ready, not Ready, crash-looping and missing, and another
namespace with an unschedulable pod and a Router without its StatefulSet yet; the networks'
collector Services), filtering them by namespace and label selector as the API server does. No
network, no cluster: the collectors' answers come from a fake ``fetch``."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from router_operator.console import kubesource
from router_operator.console.kubesource import KubernetesSource, Snapshot, pod_problem
from router_operator.console.sources import Source, Target
from router_operator.local.backend import network_summary
from router_operator.local.files import plan_files

from router.pod.kubeapi import KubeApiError

ROOT = Path(__file__).resolve().parent.parent
DATA = json.loads((ROOT / "tests/data/console-kube/cluster.json").read_text())
KINDS = {
    "/apis/routernet.io/v1alpha1": ("routers", "addresses", "linkroutes"),
    "/api/v1": ("pods", "services"),
    "/apis/apps/v1": ("statefulsets",),
}


class FakeCluster:
    """``Cluster.request`` and ``request_text`` as the console uses them: GETs of lists, all
    namespaces or one, with a label selector; a pod's log. Records every request."""

    server = "https://10.96.0.1:443"

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = copy.deepcopy(dict(data))
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.refused: set[str] = set()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float = 30.0,
    ) -> Any:
        assert method == "GET" and body is None
        query = dict(query or {})
        self.requests.append((path, query))
        prefix, plural = next(
            (p, path.rpartition("/")[2])
            for p, plurals in KINDS.items()
            if path.startswith(p + "/") and path.rpartition("/")[2] in plurals
        )
        middle = path.removeprefix(prefix).removesuffix(plural).strip("/").split("/")
        namespace = middle[1] if middle[0] == "namespaces" else None
        if plural in self.refused:
            raise KubeApiError(403, "Forbidden", f"cannot list resource {plural!r}")
        wanted = dict(term.split("=") for term in query.get("labelSelector", "").split(",") if term)
        items = [
            item
            for item in self.data[plural]
            if namespace in (None, item["metadata"]["namespace"])
            and wanted.items() <= (item["metadata"].get("labels") or {}).items()
        ]
        return {"kind": "List", "metadata": {"resourceVersion": "5000"}, "items": items}

    def request_text(
        self, path: str, *, query: Mapping[str, str] | None = None, timeout: float = 30.0
    ) -> str:
        query = dict(query or {})
        self.requests.append((path, query))
        key = path + ("?previous" if query.get("previous") == "true" else "")
        if key not in self.data["logs"]:
            raise KubeApiError(400, "Bad Request", f"no log at {key}")
        return str(self.data["logs"][key])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def source(
    namespace: str | list[str] | None, data: Mapping[str, Any] = DATA
) -> tuple[KubernetesSource, FakeCluster, Clock]:
    cluster, clock = FakeCluster(data), Clock()
    return KubernetesSource(cluster, namespace, clock=clock), cluster, clock  # type: ignore[arg-type]


def by_id(targets: list[Target]) -> dict[str, Target]:
    return {t.id: t for t in targets}


# --- targets ---------------------------------------------------------------------------------


def test_every_pod_a_router_should_have_is_a_target_up_or_why_not() -> None:
    ks, cluster, _ = source(None)
    found = ks.targets()
    assert [(t.namespace, t.network, t.id) for t in found] == [
        ("demo", "default", "core-0"),
        ("demo", "default", "core-1"),
        ("demo", "default", "core-2"),
        ("demo", "default", "edge-0"),
        ("demo", "default", "edge-1"),
        ("other", "east", "lonely-0"),
        ("other", "east", "lonely-1"),
        ("other", "west", "hub-0"),
    ]
    t = by_id(found)
    assert t["core-0"] == Target(
        id="core-0",
        network="default",
        namespace="demo",
        mode="interior",
        endpoint="10.244.0.21:5672",
        down=None,
        where="kubectl -n demo logs pod/core-0",
    )
    # Running, the container not Ready: the kubelet's probe fails (the router logs why).
    assert t["core-1"].down == "not Ready: readiness probe failing (its log says why)"
    # Waiting to be restarted: what the last run ended with, and how often.
    assert t["core-2"].down == "CrashLoopBackOff: exited 1 (Error), 5 restarts"
    # An IPv6 pod address is bracketed, as an AMQP URL needs it.
    assert (t["edge-0"].mode, t["edge-0"].endpoint, t["edge-0"].down) == (
        "edge",
        "[fd00:10:244::7]:5672",
        None,
    )
    # The StatefulSet should run 2, there is one pod.
    assert (t["edge-1"].endpoint, t["edge-1"].down) == (
        None,
        "no pod: its StatefulSet has not made it yet",
    )
    assert t["hub-0"].down is not None
    assert t["hub-0"].down.startswith("Pending: Unschedulable: 0/1 nodes are available")
    assert "\n" not in t["hub-0"].down and len(t["hub-0"].down) <= kubesource.REASON_CHARACTERS
    # A Router the operator has not rendered yet: its replicas, each missing, say where to look.
    assert t["lonely-1"].down == "no pod: no StatefulSet yet (kubectl -n other describe rtr lonely)"
    # One request per kind, every namespace at once; pods and StatefulSets by the operator's
    # labels (planning/names.py), not the whole cluster's.
    selector = "app.kubernetes.io/component=router,app.kubernetes.io/name=routernet"
    collectors = "app.kubernetes.io/component=collector,app.kubernetes.io/name=routernet"
    assert sorted(cluster.requests) == [
        ("/api/v1/pods", {"labelSelector": selector}),
        ("/api/v1/services", {"labelSelector": collectors}),
        ("/apis/apps/v1/statefulsets", {"labelSelector": selector}),
        ("/apis/routernet.io/v1alpha1/addresses", {}),
        ("/apis/routernet.io/v1alpha1/linkroutes", {}),
        ("/apis/routernet.io/v1alpha1/routers", {}),
    ]
    assert ks.name == "10.96.0.1:443 (every namespace)"


def test_one_namespace_is_asked_for_its_own_objects_only() -> None:
    ks, cluster, _ = source("other")
    assert [t.id for t in ks.targets()] == ["lonely-0", "lonely-1", "hub-0"]
    assert {path for path, _ in cluster.requests} == {
        "/api/v1/namespaces/other/pods",
        "/api/v1/namespaces/other/services",
        "/apis/apps/v1/namespaces/other/statefulsets",
        "/apis/routernet.io/v1alpha1/namespaces/other/addresses",
        "/apis/routernet.io/v1alpha1/namespaces/other/linkroutes",
        "/apis/routernet.io/v1alpha1/namespaces/other/routers",
    }
    assert ks.name == "10.96.0.1:443 (other)"
    assert {a["namespace"] for a in ks.declared().addresses} == {"other"}


def test_several_namespaces_are_asked_one_by_one() -> None:
    ks, cluster, _ = source(["demo", "other", "demo"])
    everywhere, _, _ = source(None)
    assert ks.targets() == everywhere.targets()
    routers = [path for path, _ in cluster.requests if path.endswith("/routers")]
    assert routers == [
        "/apis/routernet.io/v1alpha1/namespaces/demo/routers",
        "/apis/routernet.io/v1alpha1/namespaces/other/routers",
    ]


def test_a_pod_of_another_router_by_that_name_is_not_taken_for_the_routers() -> None:
    data = copy.deepcopy(DATA)
    core0 = next(p for p in data["pods"] if p["metadata"]["name"] == "core-0")
    core0["metadata"]["labels"]["app.kubernetes.io/instance"] = "someone-else"
    ks, _, _ = source("demo", data)
    assert by_id(ks.targets())["core-0"].down == "no pod: its StatefulSet has not made it yet"


def test_the_statefulsets_replicas_count_the_leaving_pods_of_a_hand_off() -> None:
    """A Router with a store scaled from 3 to 2 keeps core-2 until it has moved its nodes:
    its StatefulSet still has 3, and so do the targets."""
    data = copy.deepcopy(DATA)
    next(r for r in data["routers"] if r["metadata"]["name"] == "core")["spec"]["replicas"] = 2
    ks, _, _ = source("demo", data)
    assert [t.id for t in ks.targets() if t.id.startswith("core")] == [
        "core-0",
        "core-1",
        "core-2",
    ]
    next(s for s in data["statefulsets"] if s["metadata"]["name"] == "core")["spec"]["replicas"] = 2
    ks, _, _ = source("demo", data)
    assert [t.id for t in ks.targets() if t.id.startswith("core")] == ["core-0", "core-1"]


def test_the_lists_are_kept_for_a_scrape_interval() -> None:
    ks, cluster, clock = source(None)
    ks.targets()
    ks.declared()
    ks.targets()
    assert len(cluster.requests) == 6
    clock.now += kubesource.MAX_AGE
    ks.targets()
    assert len(cluster.requests) == 12


def test_a_refused_list_keeps_the_last_one_and_says_so_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ks, cluster, clock = source(None)
    before = ks.targets()
    cluster.refused.add("pods")
    for _ in range(3):
        clock.now += kubesource.MAX_AGE
        assert ks.targets() == before
    err = capsys.readouterr().err
    assert err.count("listing pods: 403 Forbidden") == 1, err
    assert ks.errors == {"pods": "listing pods: 403 Forbidden: cannot list resource 'pods'"}
    cluster.refused.clear()
    clock.now += kubesource.MAX_AGE
    ks.targets()
    assert "listing pods works again" in capsys.readouterr().err
    assert ks.errors == {}


def test_an_api_server_that_does_not_answer_is_asked_once_per_refresh(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each list would wait for its timeout: after the first, the others keep theirs."""
    ks, cluster, clock = source(None)
    before = ks.targets()

    def unanswered(*args: Any, **kwargs: Any) -> Any:
        cluster.requests.append((args[1], {}))
        raise KubeApiError(0, "TimeoutError", "timed out")

    cluster.request = unanswered  # type: ignore[method-assign]
    cluster.requests.clear()
    clock.now += kubesource.MAX_AGE
    assert ks.targets() == before
    assert len(cluster.requests) == 1
    assert "listing routers: TimeoutError: timed out" in capsys.readouterr().err


def test_nothing_listed_yet_and_refused_is_no_routers() -> None:
    ks, cluster, _ = source(None)
    cluster.refused.add("routers")
    assert ks.targets() == []


def test_flows_are_asked_of_every_networks_collector_service_and_added_up() -> None:
    from collector.window import Totals
    from router.telemetry.schema import FLOW_COUNTS, LATENCY_BUCKETS

    asked: list[tuple[str, float]] = []

    def fetch(url: str, timeout: float) -> Any:
        asked.append((url, timeout))
        if url.startswith("http://10.96.40.11:8080/"):
            raise OSError("Connection refused")
        counts = [0] * len(FLOW_COUNTS)
        counts[FLOW_COUNTS.index("deliveries")] = 42
        totals = Totals(records=3, paths={("orders", "core-0", "edge-1", None): (counts, [0] * 5)})
        return totals.to_json()

    cluster, clock = FakeCluster(DATA), Clock()
    ks = KubernetesSource(cluster, None, clock=clock, fetch=fetch)  # type: ignore[arg-type]
    typed: Source = ks  # what the scraper and the server take
    answer = typed.flows(1_000, 61_000)
    # The router's own Service has no flows port and is not asked.
    assert [url for url, _ in asked] == [
        "http://10.96.40.10:8080/flows?from=1000&to=61000",
        "http://10.96.40.11:8080/flows?from=1000&to=61000",
    ]
    assert answer.totals is not None and answer.totals.records == 3
    [(key, (counts, hist))] = answer.totals.paths.items()
    assert key == ("orders", "core-0", "edge-1", None)
    assert counts[0] == 42 and len(hist) == LATENCY_BUCKETS
    assert answer.unanswered == (
        "the collector of network other/east did not answer (http://10.96.40.11:8080):"
        " Connection refused",
    )
    assert ks.analysis() is None


def test_no_collector_service_is_no_flows_and_why() -> None:
    data = {**DATA, "services": []}
    ks, _, _ = source(None, data)
    answer = ks.flows(0, 60_000)
    assert answer.totals is None
    assert answer.reason.startswith("no collector Service found")


# --- why a pod is down -------------------------------------------------------------------------


def a_pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "r-0"}, "status": status}


def container(state: dict[str, Any], **more: Any) -> list[dict[str, Any]]:
    return [{"name": "router", "state": state, "ready": False, "restartCount": 0, **more}]


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (None, "no pod"),
        (
            {**a_pod(phase="Running"), "metadata": {"deletionTimestamp": "2026-11-27T15:00:00Z"}},
            "pod terminating",
        ),
        (
            a_pod(
                phase="Pending",
                containerStatuses=container(
                    {
                        "waiting": {
                            "reason": "ImagePullBackOff",
                            "message": 'Back-off pulling image "routernet/router:9.9"',
                        }
                    }
                ),
            ),
            'ImagePullBackOff: Back-off pulling image "routernet/router:9.9"',
        ),
        (
            a_pod(
                phase="Pending",
                containerStatuses=container({"waiting": {"reason": "ContainerCreating"}}),
            ),
            "Pending: ContainerCreating",
        ),
        (
            a_pod(
                phase="Running",
                containerStatuses=[
                    {"name": "sidecar", "state": {"running": {}}, "ready": True},
                    *container(
                        {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
                        restartCount=1,
                        lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                    ),
                ],
            ),
            "CrashLoopBackOff: exited 137 (OOMKilled), 1 restarts",
        ),
        (
            a_pod(
                phase="Running",
                containerStatuses=container({"terminated": {"exitCode": 0, "reason": "Completed"}}),
            ),
            "container terminated: Completed (exit 0)",
        ),
        (
            a_pod(phase="Failed", reason="Evicted", message="low on memory"),
            "pod Failed: Evicted: low on memory",
        ),
        (a_pod(phase="Pending"), "Pending"),
        (a_pod(phase="Unknown"), "pod Unknown"),
        (
            a_pod(
                phase="Running",
                conditions=[{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
            ),
            "not Ready: PodCompleted",
        ),
        (
            a_pod(
                phase="Running",
                conditions=[{"type": "Ready", "status": "True"}],
                containerStatuses=container({"running": {}}, ready=True),
            ),
            None,
        ),
    ],
    ids=[
        "missing",
        "terminating",
        "image",
        "creating",
        "crashloop-sidecar",
        "terminated",
        "failed",
        "pending",
        "unknown",
        "not-ready",
        "ready",
    ],
)
def test_why_a_pod_is_down_in_one_line(pod: dict[str, Any] | None, why: str | None) -> None:
    assert pod_problem(pod) == why


@pytest.mark.parametrize(
    ("listeners", "port"),
    [
        (None, 5672),
        ([], 5672),
        ([{"port": 5671, "tlsSecret": "t"}, {"port": 5674}], 5674),
        ([{"port": 5673, "role": "route-container"}], None),
        ([{"port": 5672, "saslMechanisms": ["PLAIN"], "saslUsersSecret": "u"}], None),
        ([{"port": 5672, "saslMechanisms": ["ANONYMOUS", "PLAIN"], "saslUsersSecret": "u"}], 5672),
        (
            [{"port": 5672, "saslMechanisms": ["ANONYMOUS", "PLAIN"], "authenticatePeer": True}],
            None,
        ),
    ],
    ids=["default", "empty", "tls-first", "route-container", "plain", "anonymous-too", "peer"],
)
def test_the_routers_are_asked_on_a_plain_anonymous_client_listener(
    listeners: list[dict[str, Any]] | None, port: int | None
) -> None:
    spec = {} if listeners is None else {"listeners": listeners}
    assert kubesource.management_port(spec) == port


def test_a_router_with_no_listener_to_ask_is_down_saying_so() -> None:
    data = copy.deepcopy(DATA)
    core = next(r for r in data["routers"] if r["metadata"]["name"] == "core")
    core["spec"]["listeners"] = [{"port": 5671, "tlsSecret": "core-tls"}]
    ks, _, _ = source("demo", data)
    core0 = by_id(ks.targets())["core-0"]
    assert core0.endpoint is None
    assert core0.down == "no listener the console can ask (every client listener needs TLS or SASL)"


# --- what was declared -------------------------------------------------------------------------


def test_declared_addresses_and_link_routes_as_the_operator_plans_them() -> None:
    ks, _, _ = source(None)
    declared = ks.declared()
    by_key = {(a["namespace"], a["key"]): a for a in declared.addresses}
    assert sorted(by_key) == [
        ("demo", "pattern:sensors.*.temperature"),
        ("demo", "prefix:jobs"),
        ("demo", "prefix:orders"),
        ("other", "prefix:telemetry"),
    ]
    # Two Addresses claim orders: the older wins, as on the routers.
    assert by_key["demo", "prefix:orders"]["name"] == "orders"
    assert by_key["demo", "prefix:orders"]["undeliverable"] == "hold"
    # A node's hosts are the pods of its Router; its dead letters go where it says.
    jobs = by_key["demo", "prefix:jobs"]
    assert jobs["node"]["hosts"] == ["core-0", "core-1", "core-2"]
    assert jobs["node"]["deadLetterAddress"] == "jobs.failed"
    assert declared.link_routes == [
        {
            "name": "broker",
            "key": "prefix:broker",
            "directions": ["in", "out"],
            "containerId": "artemis",
            "connection": None,
            "connector": None,
            "network": "west",
            "namespace": "other",
        }
    ]


def test_declared_in_the_shape_routernet_up_records() -> None:
    """The examples' Routers and Addresses, as the API returns them and as files for `routernet
    up`: the same records (what LocalSource declares), the namespace added."""
    files = [str(ROOT / "examples/routers.yaml"), str(ROOT / "examples/addresses.yaml")]
    local = network_summary(plan_files(files).plan.networks["default"])
    objects: dict[str, list[dict[str, Any]]] = {"routers": [], "addresses": []}
    for name in ("routers.yaml", "addresses.yaml"):
        for number, doc in enumerate(yaml.safe_load_all((ROOT / "examples" / name).read_text())):
            doc["metadata"].update(
                namespace="demo",
                uid=f"uid-{name}-{number}",
                creationTimestamp="2026-11-27T15:12:30Z",
            )
            objects[doc["kind"].lower() + ("es" if doc["kind"] == "Address" else "s")].append(doc)
    snapshot = Snapshot(routers=tuple(objects["routers"]), addresses=tuple(objects["addresses"]))
    declared = kubesource.declared(snapshot)
    assert [{**a, "namespace": "demo"} for a in local["addresses"]] == declared.addresses


def test_a_router_being_deleted_hosts_no_node_and_an_invalid_address_is_not_declared() -> None:
    data = copy.deepcopy(DATA)
    core = next(r for r in data["routers"] if r["metadata"]["name"] == "core")
    core["metadata"]["deletionTimestamp"] = "2026-11-27T16:00:00Z"
    orders = next(a for a in data["addresses"] if a["metadata"]["name"] == "orders")
    orders["spec"]["distribution"] = "sideways"
    ks, _, _ = source("demo", data)
    keys = {a["key"]: a for a in ks.declared().addresses}
    assert "prefix:jobs" not in keys  # its node's Router is going: not applied
    assert keys["prefix:orders"]["name"] == "orders-again"  # the valid claim is the one left


# --- logs -----------------------------------------------------------------------------------------


def test_a_routers_log_tail() -> None:
    ks, cluster, _ = source(None)
    core0 = by_id(ks.targets())["core-0"]
    assert ks.log_tail(core0, 2) == ["ts=2 router.ready", "ts=3 connection.opened peer=core-1"]
    path, query = cluster.requests[-1]
    assert path == "/api/v1/namespaces/demo/pods/core-0/log"
    assert query == {"container": "router", "tailLines": "2", "limitBytes": "65536"}


def test_a_crash_looping_routers_log_is_its_previous_containers() -> None:
    ks, cluster, _ = source(None)
    core2 = by_id(ks.targets())["core-2"]
    lines = ks.log_tail(core2, 40)
    assert lines[0] == (
        "(the previous container's last lines: kubectl -n demo logs pod/core-2 --previous)"
    )
    assert lines[-1] == "OSError: [Errno 98] Address in use"
    assert cluster.requests[-1][1]["previous"] == "true"


def test_a_log_the_api_will_not_give_says_why() -> None:
    ks, _, _ = source(None)
    edge1 = by_id(ks.targets())["edge-1"]
    assert ks.log_tail(edge1, 5) == [
        "kubectl -n demo logs pod/edge-1: 400 Bad Request:"
        " no log at /api/v1/namespaces/demo/pods/edge-1/log"
    ]
