"""The ``gateway`` section of a router's configuration, imported by router/config/models.py.

```yaml
gateway:
  rules:                       # for ()/node: the first rule whose conditions all hold decides
    - container: london-branch-34
      subject: {prefix: atm.}
      applicationProperties: {branch: {exact: "34"}}
  defaultContainer: head-office   # when no rule matches; absent: the message is released
  export: [{prefix: branch-}]     # containers shown to networks joined through gateways
  containers:                     # the seed's hand-made table: container -> gateway connector
    - {container: london-branch-34, connector: megabank}
```

Prefixes here are plain string prefixes (``branch-`` covers ``branch-34``), unlike those of
address rules, which cover whole tokens: container ids, subjects and property values are names
rather than token paths. Patterns are address-rule patterns (``*`` one token, ``#`` zero or
more, tokens split by ``.`` or ``/``) matched as address rules are (router/addressing/rules.py).
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, field_validator, model_validator

from router.config.base import Strict, check_pattern
from router.config.views import MatchView

MAX_VALUE_LENGTH = 1000
"""The longest container id, connector name or value to match: far beyond any real one. Bounded
so that the Gateway resource's CEL rules, which read these, fit the Kubernetes API server's
cost estimate (its budget assumes the longest strings a schema allows)."""
MAX_PROPERTY_CONDITIONS = 16
"""Conditions on application properties in one rule: more than a routing rule needs, and a bound
the API server's cost estimate needs as well (a rule reads every one)."""


def _check_container(value: str) -> str:
    """A container must be addressable as ``(container)/node``: a parenthesis would end the
    name early, and whitespace cannot be written in an address."""
    if not value or any(ch.isspace() or ch in "()" for ch in value):
        raise ValueError(
            f"{value!r} is not a valid container id (non-empty, no whitespace, no '(' or ')')"
        )
    return value


class Match(Strict, MatchView):
    """A condition on one string: exactly one of exact, prefix or pattern."""

    exact: str | None = Field(
        default=None, max_length=MAX_VALUE_LENGTH, description="The whole value, as is."
    )
    prefix: str | None = Field(
        default=None,
        max_length=MAX_VALUE_LENGTH,
        description="The value starts with this text (a plain string prefix, not whole tokens).",
    )
    pattern: str | None = Field(
        default=None,
        max_length=MAX_VALUE_LENGTH,
        description="Tokens split by '.' or '/'; '*' matches one token, '#' zero or more.",
    )

    _pattern = field_validator("pattern")(check_pattern)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("an empty prefix matches everything: use pattern '#' to say so")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        given = [v for v in (self.exact, self.prefix, self.pattern) if v is not None]
        if len(given) != 1:
            raise ValueError("exactly one of exact, prefix or pattern is required")
        return self


class GatewayRule(Strict):
    """Messages (and links) for ``()/node`` whose facts meet every condition given go to
    ``container``."""

    container: str = Field(
        max_length=MAX_VALUE_LENGTH, description="The container the message or link goes to."
    )
    node: Match | None = Field(default=None, description="The node path after '()/'.")
    subject: Match | None = Field(default=None, description="The message's subject.")
    groupId: Match | None = Field(default=None, description="The message's group-id.")
    userId: Match | None = Field(
        default=None,
        description="The message's user-id (UTF-8); for links, the authenticated user.",
    )
    applicationProperties: dict[str, Match] = Field(
        default_factory=dict,
        max_length=MAX_PROPERTY_CONDITIONS,
        description=(
            "Application properties by key (for links, the attach's link properties): strings"
            " as they are, integers in decimal, booleans as true/false; other types never match."
        ),
    )

    _container = field_validator("container")(_check_container)

    @model_validator(mode="after")
    def _has_a_condition(self) -> Self:
        conditions = (self.node, self.subject, self.groupId, self.userId)
        if all(c is None for c in conditions) and not self.applicationProperties:
            raise ValueError(
                f"the rule for container {self.container!r} has no condition: give node,"
                " subject, groupId, userId or applicationProperties (defaultContainer is the"
                " rule for everything else)"
            )
        return self


class ContainerRoute(Strict):
    """The seed's simple case: a container reached through a gateway connector by hand."""

    container: str = Field(max_length=MAX_VALUE_LENGTH, description="The container id.")
    connector: str = Field(
        max_length=MAX_VALUE_LENGTH,
        description="The name of a connectors[] entry with role gateway.",
    )

    _container = field_validator("container")(_check_container)

    @field_validator("connector")
    @classmethod
    def _connector(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(f"{value!r} is not a connector name (non-empty)")
        return value


class Gateway(Strict):
    """Global addressing: which container ``()/node`` means, which containers this network
    shows through gateway connections, and containers reached through them by hand. Applied
    live: the router reads it when it uses it."""

    rules: list[GatewayRule] = Field(
        default_factory=list, description="For ()/node: in order, the first match wins."
    )
    defaultContainer: str | None = Field(
        default=None,
        max_length=MAX_VALUE_LENGTH,
        description="For ()/node when no rule matches; absent: the message is released.",
    )
    export: list[Match] = Field(
        default_factory=list,
        description=(
            "Container ids this network advertises to networks joined through gateway"
            " connections; none by default: nothing crosses unless exported."
        ),
    )
    containers: list[ContainerRoute] = Field(
        default_factory=list,
        description="Containers reached through a gateway connector, configured by hand.",
    )

    @field_validator("defaultContainer")
    @classmethod
    def _default(cls, value: str | None) -> str | None:
        return None if value is None else _check_container(value)

    @model_validator(mode="after")
    def _unique_containers(self) -> Self:
        first: dict[str, int] = {}
        for index, route in enumerate(self.containers):
            if route.container in first:
                raise ValueError(
                    f"containers[{index}]: container {route.container!r} is already routed"
                    f" (containers[{first[route.container]}])"
                )
            first[route.container] = index
        return self
