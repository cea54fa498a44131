"""The Gateway resource's spec, but for its network (models.py adds that, with the kind): one
network's global addressing, folded into every router of it, and its gateway connections to
other networks.

The routing part (rules, defaultContainer, export, containers) is the router configuration's
own models (router/gateway/config.py), so that what the operator accepts is what the routers
run, checked once. The API server checks what those models check with the CEL rules below,
which sit on the lists (a rule on the router's models would put Kubernetes into them).
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from router.gateway.config import ContainerRoute, GatewayRule, Match
from router_operator.spec import Rule, StrictSpec

GATEWAY_PORT = 5673
"""Where a gateway listener listens unless told otherwise: beside the clients' 5672."""

_ROUTER_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_CONNECTOR_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_HOST = r"^[A-Za-z0-9_.:\[\]-]+$"


def _one_kind(var: str) -> str:
    """CEL: the Match ``var`` has exactly one of exact, prefix and pattern."""
    return " + ".join(f"(has({var}.{k}) ? 1 : 0)" for k in ("exact", "prefix", "pattern")) + " == 1"


def _one_kind_holds(match: Match | None) -> bool:
    return match is None or [match.exact, match.prefix, match.pattern].count(None) == 2


_MATCH_ONE_KIND = "exactly one of exact, prefix or pattern is required"

_EXPORT_RULE = Rule(
    rule=f"self.all(m, {_one_kind('m')})",
    message=_MATCH_ONE_KIND,
    holds=lambda export: all(_one_kind_holds(m) for m in export),
)

_CONDITIONS = ("node", "subject", "groupId", "userId")
_RULE_RULES = (
    Rule(
        rule=(
            "self.all(r, "
            + " || ".join(f"has(r.{c})" for c in _CONDITIONS)
            + " || (has(r.applicationProperties) && size(r.applicationProperties) > 0))"
        ),
        message=(
            "a rule has no condition: give node, subject, groupId, userId or"
            " applicationProperties (defaultContainer is the rule for everything else)"
        ),
        holds=lambda rules: all(
            any(getattr(r, c) is not None for c in _CONDITIONS) or r.applicationProperties
            for r in rules
        ),
    ),
    Rule(
        rule=(
            "self.all(r, "
            + " && ".join(f"(!has(r.{c}) || {_one_kind(f'r.{c}')})" for c in _CONDITIONS)
            + " && (!has(r.applicationProperties) || r.applicationProperties.all(k,"
            + f" {_one_kind('r.applicationProperties[k]')})))"
        ),
        message=_MATCH_ONE_KIND,
        holds=lambda rules: all(
            all(_one_kind_holds(getattr(r, c)) for c in _CONDITIONS)
            and all(_one_kind_holds(m) for m in r.applicationProperties.values())
            for r in rules
        ),
    ),
)


def _checked(rules: tuple[Rule, ...]) -> AfterValidator:
    def check(value: object) -> object:
        for rule in rules:
            rule.check(value)
        return value

    return AfterValidator(check)


class GatewayListener(StrictSpec):
    """Where this network accepts other networks' gateway connectors."""

    router: str = Field(
        pattern=_ROUTER_NAME,
        max_length=45,
        description="An interior Router of this network: its pods get the listener.",
    )
    port: int = Field(default=GATEWAY_PORT, ge=1, le=65535, description="TCP port.")


class GatewayConnector(StrictSpec):
    """A connection to another network's gateway listener."""

    name: str = Field(
        pattern=_CONNECTOR_NAME,
        max_length=63,
        description="What containers[].connector names.",
    )
    router: str = Field(
        pattern=_ROUTER_NAME,
        max_length=45,
        description="An interior Router of this network: its pods dial.",
    )
    host: str = Field(
        pattern=_HOST, max_length=253, description="The other network's gateway host."
    )
    port: int = Field(default=GATEWAY_PORT, ge=1, le=65535, description="TCP port.")


_CONNECTORS_NAMED = Rule(
    rule=(
        "!has(self.containers) || self.containers.all(c,"
        " has(self.connectors) && self.connectors.exists(k, k.name == c.connector))"
    ),
    message="every containers[].connector must name one of connectors",
    holds=lambda s: {c.connector for c in s.containers} <= {k.name for k in s.connectors},
)


class GatewayRouting(BaseModel):
    """Everything of a Gateway's spec but its network. Strict as StrictSpec is, but not one:
    its field ``rules`` (the router config's name) would shadow StrictSpec's CEL rules, so the
    one rule on the object is stated here by hand."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        json_schema_extra={"x-kubernetes-validations": [_CONNECTORS_NAMED.cel()]},
    )

    rules: Annotated[list[GatewayRule], _checked(_RULE_RULES)] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "For ()/node: in order, the first rule whose conditions all hold names the"
            " container; as the router config's gateway.rules."
        ),
        json_schema_extra={"x-kubernetes-validations": [r.cel() for r in _RULE_RULES]},
    )
    defaultContainer: str | None = Field(
        default=None,
        pattern=r"^[^\s()]+$",
        max_length=1000,
        description="For ()/node when no rule matches; absent: the message is released.",
    )
    export: Annotated[list[Match], _checked((_EXPORT_RULE,))] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Container ids this network shows to networks joined through gateway connections;"
            " none by default: nothing crosses unless exported."
        ),
        json_schema_extra={"x-kubernetes-validations": [_EXPORT_RULE.cel()]},
    )
    containers: list[ContainerRoute] = Field(
        default_factory=list,
        max_length=1000,
        description="Containers reached through one of connectors, configured by hand.",
    )
    listener: GatewayListener | None = Field(
        default=None,
        description="Accept other networks' gateway connectors on the pods of one Router.",
    )
    connectors: list[GatewayConnector] = Field(
        default_factory=list,
        max_length=16,
        description="Dial other networks' gateway listeners from the pods of one Router.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
        },
    )

    @model_validator(mode="after")
    def _connectors_named(self) -> Self:
        _CONNECTORS_NAMED.check(self)
        return self
