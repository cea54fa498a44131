"""Who may connect, open sessions and attach links, as Qpid Dispatch's policy decides it.

Two stages, as in Dispatch. When a listener accepts a socket, the router-wide maxConnections
is checked for every role; a socket over it is closed before any AMQP. When a client's Open
arrives (every role but inter-router, and only with enableVhostPolicy), its vhost is the
listener's policyVhost, else the Open's hostname, else the policy's defaultVhost if such a vhost
exists; its group is the one naming its user, else one naming ``*``, else ``$default`` when the
vhost allows unknown users; its remote host must be one of the group's; and the vhost's
connection limits (in all, per user, per host: a group's own per-user and per-host limits
first) must have room. Every refusal at Open is the same to the client, as in Dispatch
(``amqp:resource-limit-exceeded``, "connection disallowed by local policy"); the log says
which rule it was.

An admitted connection gets a `Connection` here, which judges its sessions and links and
counts them; its vhost's `VhostStats` are what management and /metrics show. Nothing here
touches Proton or a clock: the engine asks and carries out the answer (router/policy/apply.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from router.addressing import TokenTree, rule_tokens
from router.policy.matching import Addresses, Hosts, addresses

RESOURCE_LIMIT = "amqp:resource-limit-exceeded"
UNAUTHORIZED = "amqp:unauthorized-access"
CONNECTION_DENIED = "connection disallowed by local policy"
SESSION_DENIED = "session disallowed by local policy"
LINK_DENIED = "link disallowed by local policy"
MESSAGE_SIZE = "amqp:link:message-size-exceeded"
MESSAGE_SIZE_DESCRIPTION = "Message size exceeded"
FORCED = "amqp:connection:forced"
TARGET_DENIED = "policy violation on target"
USER_ID_DENIED = "user_id proxy violation"
DEFAULT_GROUP = "$default"  # as router/config/policy.py, which pulls in pydantic: not here
WAYPOINT = "qd.waypoint"
FALLBACK = "qd.fallback"


@dataclass(frozen=True, slots=True)
class Denial:
    """A refusal: the AMQP condition the peer gets, and the reason the log gives."""

    condition: str
    description: str
    reason: str


@dataclass(slots=True)
class VhostStats:
    """Dispatch's ``vhostStats``: counted since the vhost was first configured."""

    hostname: str
    connectionsApproved: int = 0
    connectionsDenied: int = 0
    sessionDenied: int = 0
    senderDenied: int = 0
    receiverDenied: int = 0
    maxMessageSizeDenied: int = 0
    perUserState: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    perHostState: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    @property
    def connectionsCurrent(self) -> int:
        return sum(len(names) for names in self.perUserState.values())

    def row(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "connectionsApproved": self.connectionsApproved,
            "connectionsDenied": self.connectionsDenied,
            "connectionsCurrent": self.connectionsCurrent,
            "sessionDenied": self.sessionDenied,
            "senderDenied": self.senderDenied,
            "receiverDenied": self.receiverDenied,
            "maxMessageSizeDenied": self.maxMessageSizeDenied,
            "perUserState": {u: list(n) for u, n in self.perUserState.items() if n},
            "perHostState": {h: list(n) for h, n in self.perHostState.items() if n},
        }


@dataclass(slots=True)
class Counters:
    """Dispatch's ``policy`` entity's counters, router-wide."""

    connectionsProcessed: int = 0
    connectionsDenied: int = 0
    connectionsCurrent: int = 0
    linksDenied: int = 0
    maxMessageSizeDenied: int = 0
    totalDenials: int = 0


class Group:
    """One group of a vhost, compiled: its settings and its address and host matchers."""

    __slots__ = ("hosts", "name", "settings", "sources", "targets")

    def __init__(self, name: str, settings: Any) -> None:
        self.name = name
        self.settings = settings
        self.hosts = Hosts(settings.remoteHosts)
        self.sources: Addresses = addresses(settings.sources, settings.sourcePattern)
        self.targets: Addresses = addresses(settings.targets, settings.targetPattern)


class Ruleset:
    """One vhost, compiled."""

    __slots__ = ("groups", "settings", "users")

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.groups = {name: Group(name, g) for name, g in settings.groups.items()}
        self.users = {user: name for name, g in settings.groups.items() for user in g.users}

    def group_of(self, user: str) -> Group | None:
        name = self.users.get(user) or self.users.get("*")
        if name is None and self.settings.allowUnknownUser:
            name = DEFAULT_GROUP
        return self.groups.get(name) if name is not None else None


class Policy:
    """The router's policy: its settings, its vhosts, and what they have admitted."""

    def __init__(self, settings: Any, vhosts: Sequence[Any]) -> None:
        self.counters = Counters()
        self.stats: dict[str, VhostStats] = {}
        self.settings = settings
        self.rulesets: dict[str, Ruleset] = {}
        self.names: dict[str, str] = {}
        self.patterns: TokenTree[str] = TokenTree()
        self.configure(settings, vhosts)

    def configure(self, settings: Any, vhosts: Iterable[Any]) -> None:
        """New settings and vhosts, live: admitted connections keep what they were given,
        new ones get the new rules; each vhost's counts carry on."""
        self.settings = settings
        self.rulesets = {v.hostname: Ruleset(v) for v in vhosts}
        self.names = {
            name: hostname
            for hostname, ruleset in self.rulesets.items()
            for name in _names(ruleset.settings)
        }
        self.patterns = TokenTree()
        if settings.enableVhostNamePatterns:
            for name, hostname in self.names.items():
                if name:
                    self.patterns.add(rule_tokens(None, name), hostname)
        for hostname in self.rulesets:
            self.stats.setdefault(hostname, VhostStats(hostname))

    @property
    def governs(self) -> bool:
        return bool(self.settings.enableVhostPolicy)

    # ----- stage one: the socket -----------------------------------------------------------

    def accept(self) -> bool:
        """A listener accepted a socket: whether it may stay (the router-wide limit)."""
        c = self.counters
        c.connectionsProcessed += 1
        if c.connectionsCurrent >= self.settings.maxConnections:
            c.connectionsDenied += 1
            c.totalDenials += 1
            return False
        c.connectionsCurrent += 1
        return True

    def released(self) -> None:
        """A socket `accept` let stay has closed."""
        self.counters.connectionsCurrent -= 1

    # ----- stage two: the Open -------------------------------------------------------------

    def vhost(self, name: str) -> Ruleset | None:
        hostname = self.names.get(name)
        if hostname is None and self.settings.enableVhostNamePatterns and name:
            hostname = self.patterns.find(name)
        if hostname is None:
            hostname = (
                self.names.get(self.settings.defaultVhost) if self.settings.defaultVhost else None
            )
        return self.rulesets.get(hostname) if hostname is not None else None

    def admit(self, user: str, vhost_name: str, host: str, conn_name: str) -> Connection | Denial:
        """A client's Open: its Connection, or why it is refused."""
        ruleset = self.vhost(vhost_name)
        if ruleset is None:
            return _refused("No policy defined for vhost")
        stats = self.stats[ruleset.settings.hostname]
        group = ruleset.group_of(user)
        if group is None:
            stats.connectionsDenied += 1
            return _refused("User is not in a user group and unknown users are denied")
        if not group.hosts.allows(host):
            stats.connectionsDenied += 1
            return _refused("User is not allowed to connect from this network host")
        v, g = ruleset.settings, group.settings
        per_user = (
            v.maxConnectionsPerUser if g.maxConnectionsPerUser is None else g.maxConnectionsPerUser
        )
        per_host = (
            v.maxConnectionsPerHost if g.maxConnectionsPerHost is None else g.maxConnectionsPerHost
        )
        over = [
            why
            for why, full in (
                ("application connection limit", stats.connectionsCurrent >= v.maxConnections),
                ("per user limit", len(stats.perUserState.get(user, ())) >= per_user),
                ("per host limit", len(stats.perHostState.get(host, ())) >= per_host),
            )
            if full
        ]
        if over:
            stats.connectionsDenied += 1
            return _refused("Connection denied by " + ", ".join(over))
        stats.connectionsApproved += 1
        stats.perUserState[user].append(conn_name)
        stats.perHostState[host].append(conn_name)
        size = self.settings.maxMessageSize
        if v.maxMessageSize is not None:
            size = v.maxMessageSize
        if g.maxMessageSize is not None:
            size = g.maxMessageSize
        return Connection(self, stats, group, user, host, conn_name, size)


def _names(vhost: Any) -> list[str]:
    return [vhost.hostname, *vhost.aliases]


def _refused(reason: str) -> Denial:
    return Denial(RESOURCE_LIMIT, CONNECTION_DENIED, reason)


class Connection:
    """What one admitted connection may do, and what it has open."""

    __slots__ = (
        "closed",
        "group",
        "host",
        "max_message_size",
        "name",
        "policy",
        "receivers",
        "senders",
        "sessions",
        "stats",
        "user",
    )

    def __init__(
        self,
        policy: Policy,
        stats: VhostStats,
        group: Group,
        user: str,
        host: str,
        name: str,
        max_message_size: int,
    ) -> None:
        self.policy = policy
        self.stats = stats
        self.group = group
        self.user = user
        self.host = host
        self.name = name
        self.max_message_size = max_message_size
        self.sessions = self.senders = self.receivers = 0
        self.closed = False

    @property
    def settings(self) -> Any:
        return self.group.settings

    def begin(self) -> Denial | None:
        """A session the client began: None when it may have it (then counted)."""
        limit = self.settings.maxSessions
        if limit and self.sessions >= limit:
            self.stats.sessionDenied += 1
            self.policy.counters.totalDenials += 1
            return Denial(RESOURCE_LIMIT, SESSION_DENIED, "session limit")
        self.sessions += 1
        return None

    def ended(self) -> None:
        self.sessions -= 1

    def attach(
        self, sending: bool, address: str | None, dynamic: bool, capability: str | None
    ) -> Denial | None:
        """A link the client attached (``sending``: it sends on it): None when it may have it
        (then counted). ``capability`` is the first capability of its terminus."""
        denial = self._judge(sending, address or "", dynamic, capability)
        if denial is not None:
            c = self.policy.counters
            c.linksDenied += 1
            c.totalDenials += 1
            if sending or denial.reason.endswith("capability not permitted"):
                self.stats.senderDenied += 1  # as Dispatch counts a receiver's capability
            else:
                self.stats.receiverDenied += 1
            return denial
        if sending:
            self.senders += 1
        else:
            self.receivers += 1
        return None

    def _judge(
        self, sending: bool, address: str, dynamic: bool, capability: str | None
    ) -> Denial | None:
        s = self.settings
        limit = s.maxSenders if sending else s.maxReceivers
        if limit and (self.senders if sending else self.receivers) >= limit:
            return Denial(
                RESOURCE_LIMIT, LINK_DENIED, f"{'maxSenders' if sending else 'maxReceivers'} limit"
            )
        if not sending and dynamic:
            if s.allowDynamicSource:
                return None
            return Denial(UNAUTHORIZED, LINK_DENIED, "dynamic source not permitted")
        if address:
            if (
                not s.allowWaypointLinks
                and capability is not None
                and capability.startswith(WAYPOINT)
            ):
                return Denial(UNAUTHORIZED, LINK_DENIED, "Waypoint capability not permitted")
            if not s.allowFallbackLinks and capability == FALLBACK:
                return Denial(UNAUTHORIZED, LINK_DENIED, "Fallback capability not permitted")
            allowed = self.group.targets if sending else self.group.sources
            if allowed.allows(address, self.user):
                return None
            return Denial(
                UNAUTHORIZED, LINK_DENIED, f"link {'target' if sending else 'source'} name"
            )
        if sending and s.allowAnonymousSender:
            return None
        return Denial(
            UNAUTHORIZED, LINK_DENIED, "anonymous sender" if sending else "no source address"
        )

    def detached(self, sending: bool) -> None:
        if sending:
            self.senders -= 1
        else:
            self.receivers -= 1

    def target_allowed(self, to: str) -> bool:
        """A message on an anonymous sender: whether its ``to`` is one the client may send to."""
        return self.group.targets.allows(to, self.user)

    def user_id_allowed(self, user_id: str | None) -> bool:
        """A message's user-id must be the connection's user unless the group allows proxies."""
        return not user_id or user_id == self.user or bool(self.settings.allowUserIdProxy)

    def oversize(self) -> None:
        """A message over max_message_size was refused."""
        self.stats.maxMessageSizeDenied += 1
        c = self.policy.counters
        c.maxMessageSizeDenied += 1
        c.totalDenials += 1

    def close(self) -> None:
        """The connection is gone: its vhost counts it no more."""
        if self.closed:
            return
        self.closed = True
        for state, key in (
            (self.stats.perUserState, self.user),
            (self.stats.perHostState, self.host),
        ):
            names = state.get(key)
            if names and self.name in names:
                names.remove(self.name)
