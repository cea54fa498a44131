"""Qpid Dispatch's connection and resource policy: the ``policy`` entity and its ``vhost``
entities, with Dispatch's attribute names, defaults and value forms.

A configuration written for qdrouterd 1.19 means the same here: lists may be given as a list
or as one comma-separated string, ``0`` for maxSessions, maxSenders and maxReceivers means no
limit (what Dispatch's code does, whatever its schema text says), an omitted remoteHosts,
sources or targets allows nothing, and a group's maxConnectionsPerUser, maxConnectionsPerHost
and maxMessageSize, when set, override the vhost's. Where Dispatch accepts a setting that then
misbehaves, it is refused here with the reason (a boolean spelt ``"True"``, which Dispatch reads
as false; two groups without users). How the rules are applied: router/policy/.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Self

from pydantic import BeforeValidator, Field, field_validator, model_validator

from router.config.base import Strict

MAX_COUNT = 65535
"""Dispatch's bound on connection limits."""
UNLIMITED_LINKS = 2**31 - 1
"""Dispatch's default for maxSenders and maxReceivers."""
USER_TOKEN = "${user}"
DEFAULT_GROUP = "$default"


def _comma_list(value: Any) -> Any:
    """Dispatch's list forms: a list, or one string split on commas (spaces around an item
    dropped)."""
    if isinstance(value, str):
        return [item.strip(" ") for item in value.split(",")] if value.strip(" ") else []
    return value


def _strict_bool(value: Any) -> Any:
    """A boolean, or the strings true and false (Dispatch reads any other string, ``"True"``
    among them, as false: refused here rather than read another way)."""
    if isinstance(value, str):
        if value in ("true", "false"):
            return value == "true"
        raise ValueError(f"{value!r} is not a boolean: write true or false")
    return value


CommaList = Annotated[list[str], BeforeValidator(_comma_list)]
Flag = Annotated[bool, BeforeValidator(_strict_bool)]


def _check_addresses(values: list[str], field: str, pattern: bool) -> list[str]:
    for item in values:
        if not item:
            raise ValueError(f"{field}: an empty item (a trailing or doubled comma?)")
        if item.count(USER_TOKEN) > 1:
            raise ValueError(f"{field}: {item!r} holds {USER_TOKEN} more than once")
        if pattern and USER_TOKEN in item:
            tokens = item.replace("/", ".").split(".")
            if USER_TOKEN not in (tokens[0], tokens[-1]):
                raise ValueError(
                    f"{field}: {item!r}: in a pattern {USER_TOKEN} must be the whole first or"
                    " last token"
                )
    return values


def _check_host(item: str) -> str:
    if item == "*":
        return item
    ends = item.split("-")
    if len(ends) > 2:
        raise ValueError(f"remoteHosts: {item!r} is not an address, a range LOW-HIGH or '*'")
    try:
        parsed = [ipaddress.ip_address(end.strip()) for end in ends]
    except ValueError:
        raise ValueError(
            f"remoteHosts: {item!r} is not an IP address, a range LOW-HIGH of them or '*'"
        ) from None
    if len(parsed) == 2:
        low, high = parsed
        if low.version != high.version or int(low) > int(high):
            raise ValueError(f"remoteHosts: {item!r}: the range's ends must be LOW-HIGH")
    return item


class VhostGroup(Strict):
    """Dispatch's vhostUserGroupSettings: what the users of one group of a vhost may do."""

    users: CommaList = Field(
        default_factory=list,
        description="Users of this group (exact names); '*' takes every user no group names.",
    )
    remoteHosts: CommaList = Field(
        default_factory=list,
        description=(
            "Where they may connect from: '*', an IP address, or a range LOW-HIGH; none given:"
            " nowhere (the group's users are refused)."
        ),
    )
    maxConnectionsPerUser: int | None = Field(
        default=None, ge=0, le=MAX_COUNT, description="Overrides the vhost's, when set."
    )
    maxConnectionsPerHost: int | None = Field(
        default=None, ge=0, le=MAX_COUNT, description="Overrides the vhost's, when set."
    )
    maxMessageSize: int | None = Field(
        default=None,
        ge=0,
        description="Bytes; overrides the vhost's and the policy's when set, 0 for no limit.",
    )
    maxFrameSize: int = Field(
        default=0, ge=0, description="The router's max-frame-size in its Open; 0: the listener's."
    )
    maxSessionWindow: int = Field(
        default=0, ge=0, description="Incoming bytes a session may have in flight; 0: no limit."
    )
    maxSessions: int = Field(
        default=0,
        ge=0,
        le=MAX_COUNT + 1,
        description="Sessions per connection (channel-max is one less); 0: no limit.",
    )
    maxSenders: int = Field(
        default=UNLIMITED_LINKS, ge=0, description="Links the client sends on; 0: no limit."
    )
    maxReceivers: int = Field(
        default=UNLIMITED_LINKS, ge=0, description="Links the client receives on; 0: no limit."
    )
    allowDynamicSource: Flag = Field(default=False, description="Receivers with dynamic sources.")
    allowAnonymousSender: Flag = Field(
        default=False, description="Senders with no target address (anonymous relay)."
    )
    allowUserIdProxy: Flag = Field(
        default=False,
        description="Messages whose user-id is not the connection's user (else rejected).",
    )
    allowWaypointLinks: Flag = Field(
        default=True, description="Links with a qd.waypoint capability."
    )
    allowFallbackLinks: Flag = Field(
        default=True, description="Links with a qd.fallback capability."
    )
    allowDynamicLinkRoutes: Flag = Field(
        default=True, description="Connection-scoped link routes created through management."
    )
    allowAdminStatusUpdate: Flag = Field(
        default=True, description="Closing other connections through management."
    )
    sources: CommaList | None = Field(
        default=None,
        description=(
            "Addresses the users may receive from: names, '*' for any, NAME* for a prefix,"
            f" {USER_TOKEN} for the user's name. Neither this nor sourcePattern: none."
        ),
    )
    targets: CommaList | None = Field(
        default=None, description="Addresses the users may send to, as sources."
    )
    sourcePattern: CommaList | None = Field(
        default=None,
        description=(
            "As sources, but patterns: tokens separated by '.' or '/', '*' one token, '#' any"
            f" number, {USER_TOKEN} as the whole first or last token."
        ),
    )
    targetPattern: CommaList | None = Field(default=None, description="As sourcePattern, to send.")

    @model_validator(mode="after")
    def _addresses(self) -> Self:
        for plain, pattern in (("sources", "sourcePattern"), ("targets", "targetPattern")):
            if getattr(self, plain) is not None and getattr(self, pattern) is not None:
                raise ValueError(f"{plain} and {pattern} exclude each other: give one")
            for field, is_pattern in ((plain, False), (pattern, True)):
                values = getattr(self, field)
                if values is not None:
                    _check_addresses(values, field, is_pattern)
        for item in self.remoteHosts:
            _check_host(item)
        if any(not user for user in self.users):
            raise ValueError("users: an empty name (a trailing or doubled comma?)")
        return self


class Vhost(Strict):
    """Dispatch's vhost entity: the limits and user groups of the connections whose Open names
    its hostname (or an alias), or that fall back to the policy's defaultVhost."""

    hostname: str = Field(description="The Open's hostname it applies to; '' for none given.")
    aliases: CommaList = Field(default_factory=list, description="Other hostnames it applies to.")
    maxConnections: int = Field(default=MAX_COUNT, ge=0, le=MAX_COUNT)
    maxConnectionsPerUser: int = Field(default=MAX_COUNT, ge=0, le=MAX_COUNT)
    maxConnectionsPerHost: int = Field(default=MAX_COUNT, ge=0, le=MAX_COUNT)
    maxMessageSize: int | None = Field(
        default=None, ge=0, description="Bytes; overrides the policy's when set, 0 for no limit."
    )
    allowUnknownUser: Flag = Field(
        default=False,
        description=f"Users no group names get the {DEFAULT_GROUP!r} group (else refused).",
    )
    groups: dict[str, VhostGroup] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _groups(self) -> Self:
        seen: dict[str, str] = {}
        for name, group in self.groups.items():
            if not group.users and name != DEFAULT_GROUP:
                raise ValueError(
                    f"groups.{name}: no users (Dispatch refuses two such groups; name them,"
                    f" or use {DEFAULT_GROUP!r} for unknown users)"
                )
            for user in group.users:
                if user in seen:
                    raise ValueError(f"user {user!r} is in two groups, {seen[user]!r} and {name!r}")
                seen[user] = name
        if self.allowUnknownUser and DEFAULT_GROUP not in self.groups:
            raise ValueError(f"allowUnknownUser needs a {DEFAULT_GROUP!r} group")
        if self.hostname in self.aliases or len(set(self.aliases)) != len(self.aliases):
            raise ValueError("aliases must differ from the hostname and from each other")
        return self


class PolicySettings(Strict):
    """Dispatch's policy entity: the router's connection limit, and whether vhosts govern what
    clients may do."""

    maxConnections: int = Field(
        default=MAX_COUNT,
        ge=0,
        description=(
            "Connections accepted on listeners at once, whatever their role; one more is"
            " closed as soon as it is accepted (no AMQP)."
        ),
    )
    maxMessageSize: int = Field(
        default=0, ge=0, description="Bytes, where no vhost or group says; 0: no limit."
    )
    enableVhostPolicy: Flag = Field(
        default=False,
        description=(
            "Clients' connections (every role but inter-router) are admitted and limited by"
            " the vhost their Open names; off: only maxConnections applies."
        ),
    )
    enableVhostNamePatterns: Flag = Field(
        default=False,
        description=(
            "Vhost hostnames and aliases are patterns ('*' one token, '#' any number,"
            " separated by '.' or '/')."
        ),
    )
    defaultVhost: str = Field(
        default="$default",
        description="The vhost of an Open whose hostname no vhost has, if one has this name.",
    )

    @field_validator("defaultVhost")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()


def check_vhosts(vhosts: list[Vhost]) -> None:
    """Hostnames and aliases name one vhost each."""
    owner: dict[str, str] = {}
    for vhost in vhosts:
        for name in (vhost.hostname, *vhost.aliases):
            if name in owner:
                raise ValueError(
                    f"vhosts: {name!r} names both {owner[name]!r} and {vhost.hostname!r}"
                )
            owner[name] = vhost.hostname


class RouterPolicy(PolicySettings):
    """A Router resource's policy (Router.spec.policy on Kubernetes and with ``routernet
    up``): the policy entity's settings with the vhosts, folded into the configuration of each
    of its routers as their ``policy`` and ``vhosts``."""

    vhosts: list[Vhost] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _names(self) -> Self:
        check_vhosts(self.vhosts)
        return self

    def config_sections(self) -> dict[str, Any]:
        """The router configuration's ``policy`` and ``vhosts``."""
        settings = self.model_dump(mode="json", exclude={"vhosts"}, exclude_defaults=True)
        vhosts = [v.model_dump(mode="json", exclude_defaults=True) for v in self.vhosts]
        return {"policy": settings, "vhosts": vhosts}
