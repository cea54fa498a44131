"""The custom resource models as the operator, the planner and the local backend use them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml
from pydantic import ValidationError
from router_operator.resources.models import (
    API_VERSION,
    KINDS,
    PAUSE_ANNOTATION,
    READY,
    RECONCILIATION_PAUSED,
    Address,
    AddressSpec,
    Condition,
    LinkRoute,
    LinkRouteSpec,
    Router,
    RouterStatus,
    UndeliverablePolicy,
    is_paused,
)

FILE = """
apiVersion: routernet.io/v1alpha1
kind: Router
metadata:
  name: hub
  namespace: messaging
  annotations: {routernet.io/paused: "true"}
spec:
  replicas: 3
  listeners:
    - port: 5672
    - {port: 5671, tlsSecret: hub-tls}
---
apiVersion: routernet.io/v1alpha1
kind: Address
metadata: {name: orders}
spec:
  prefix: orders
  distribution: closest
  undeliverable: {action: hold, holdTimeoutSeconds: 10}
---
apiVersion: routernet.io/v1alpha1
kind: LinkRoute
metadata: {name: queues}
spec:
  prefix: queue
  connection: {host: broker.messaging.svc, saslSecret: broker-login}
"""


def test_objects_as_written_for_kubectl_parse() -> None:
    docs = list(yaml.safe_load_all(FILE))
    by_kind = {kind.kind_name: kind for kind in KINDS}
    router, addr, link = (by_kind[doc["kind"]].model_validate(doc) for doc in docs)
    assert isinstance(router, Router) and isinstance(addr, Address)
    assert isinstance(link, LinkRoute)
    assert router.apiVersion == API_VERSION
    assert router.metadata.namespace == "messaging" and router.paused
    assert router.spec.replicas == 3 and router.spec.role == "interior"
    assert [(lst.port, lst.tlsSecret) for lst in router.spec.listeners] == [
        (5672, None),
        (5671, "hub-tls"),
    ]
    assert addr.spec.undeliverable.action == "hold"
    assert addr.spec.undeliverable.holdTimeoutSeconds == 10
    assert addr.spec.network == "default" and not addr.paused
    assert link.spec.connection is not None and link.spec.connection.port == 5672
    assert link.spec.direction == "both" and link.spec.containerId is None


def test_kind_must_match() -> None:
    doc = yaml.safe_load(FILE.split("---")[1])
    with pytest.raises(ValidationError, match="kind"):
        Router.model_validate(doc)


def test_errors_name_the_field_and_the_rule() -> None:
    with pytest.raises(ValidationError) as caught:
        AddressSpec.model_validate({"prefix": "a", "pattern": "b.*"})
    assert "exactly one of prefix or pattern is required" in str(caught.value)

    with pytest.raises(ValidationError) as caught:
        AddressSpec.model_validate({"prefix": "a", "undeliverable": {"action": "redirect"}})
    (error,) = caught.value.errors()
    assert error["loc"] == ("undeliverable",)
    assert "fallbackAddress is required when action is redirect" in error["msg"]

    with pytest.raises(ValidationError) as caught:
        LinkRouteSpec.model_validate({"pattern": "q.#"})
    assert "exactly one of containerId or connection is required" in str(caught.value)

    with pytest.raises(ValidationError) as caught:
        AddressSpec.model_validate({"prefix": "orders.*"})
    assert "use pattern" in str(caught.value)


def test_every_broken_rule_is_reported() -> None:
    with pytest.raises(ValidationError) as caught:
        UndeliverablePolicy.model_validate(
            {"action": "drop", "fallbackAddress": "x", "holdTimeoutSeconds": 4}
        )
    text = str(caught.value)
    assert "fallbackAddress is only allowed" in text
    assert "holdTimeoutSeconds is only allowed" in text


def test_address_maps_onto_the_routers_own_config() -> None:
    """The planner folds an AddressSpec into router/config/models.py's Address: same names, and
    anything the CRD accepts, the router accepts."""
    from router.config.models import Address as RouterAddress

    for spec in (
        AddressSpec(prefix="orders", distribution="closest", priority=4),
        AddressSpec.model_validate({"pattern": "a.*.#", "undeliverable": {"action": "hold"}}),
        AddressSpec.model_validate(
            {"prefix": "a/b", "undeliverable": {"action": "redirect", "fallbackAddress": "c.d"}}
        ),
    ):
        policy = spec.undeliverable
        entry = RouterAddress.model_validate(
            {
                "prefix": spec.prefix,
                "pattern": spec.pattern,
                "distribution": spec.distribution,
                "undeliverable": policy.action,
                "fallbackAddress": policy.fallbackAddress,
                "priority": spec.priority,
                **(
                    {"holdTimeoutSeconds": policy.holdTimeoutSeconds}
                    if policy.holdTimeoutSeconds is not None
                    else {}
                ),
            }
        )
        assert entry.distribution == spec.distribution


def test_pause_annotation() -> None:
    assert PAUSE_ANNOTATION == "routernet.io/paused"
    assert is_paused({PAUSE_ANNOTATION: "true"}) and is_paused({PAUSE_ANNOTATION: " True "})
    assert not is_paused({PAUSE_ANNOTATION: "false"}) and not is_paused(None)
    assert not is_paused({"other": "true"})


def test_set_condition_moves_transition_time_only_on_change() -> None:
    status = RouterStatus()
    t0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    t1 = datetime(2026, 1, 1, 12, 5, 0, tzinfo=UTC)
    status.set_condition(READY, "False", "Reconciling", "2/3 ready", observed_generation=1, now=t0)
    status.set_condition(READY, "False", "Reconciling", "1/3 ready", observed_generation=2, now=t1)
    ready = status.condition(READY)
    assert ready is not None and ready.lastTransitionTime == t0 and ready.message == "1/3 ready"
    assert ready.observedGeneration == 2
    status.set_condition(READY, "True", "Ready", now=t1)
    status.set_condition(RECONCILIATION_PAUSED, "True", "Paused", now=t1)
    assert [c.type for c in status.conditions] == [READY, RECONCILIATION_PAUSED]
    ready = status.condition(READY)
    assert ready is not None and ready.lastTransitionTime == t1 and ready.status == "True"


def test_status_serializes_as_kubernetes_expects() -> None:
    status = RouterStatus(replicas=3, readyReplicas=2, selector="app=x", endpoints=["r:5672"])
    status.set_condition(READY, "True", "Ready", now=datetime(2026, 1, 1, 12, 0, 0, 123456, UTC))
    dumped = status.model_dump(mode="json", exclude_none=True)
    assert dumped["conditions"] == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Ready",
            "message": "",
            "lastTransitionTime": "2026-01-01T12:00:00Z",
        }
    ]
    assert RouterStatus.model_validate(dumped).conditions[0].lastTransitionTime.tzinfo is not None
    # Whatever else an operator wrote to status is ignored, not an error.
    assert RouterStatus.model_validate({"kopf": {"progress": {}}, "replicas": 1}).replicas == 1


def test_condition_times_without_zone_are_utc() -> None:
    condition = Condition(
        type=READY, status="Unknown", reason="Starting", lastTransitionTime=datetime(2026, 1, 1)
    )
    assert condition.lastTransitionTime.tzinfo == UTC


@pytest.mark.parametrize(
    ("field", "value"),
    [("prefix", "_routernet"), ("prefix", "_routernet/telemetry"), ("pattern", "_routernet.#")],
)
def test_addresses_under_the_reserved_prefix_are_refused(field: str, value: str) -> None:
    from router_operator.resources.models import AddressSpec

    with pytest.raises(ValueError, match="reserved for the routers' own addresses"):
        AddressSpec.model_validate({field: value})
    AddressSpec.model_validate({field: value.replace("_routernet", "_routernets")})
