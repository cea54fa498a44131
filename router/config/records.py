"""The router's configuration as plain records: what a router process runs on,
built from the validated configuration a child process printed (router/config/check.py).
GENERATED from the pydantic models (router/config/models.py and its sections) by
`make config-records`; do not edit. Why: router/config/views.py."""

from __future__ import annotations

from typing import Literal

from router.config.views import (
    AddressView,
    ConnectorView,
    LinkRouteView,
    ListenerView,
    MatchView,
    RecordBase,
    RouterConfigView,
)


class RouterSettings(RecordBase):
    """As router.config.models.RouterSettings."""

    __slots__ = (
        "drainTimeoutSeconds",
        "helloIntervalSeconds",
        "helloMaxAgeSeconds",
        "id",
        "managementWriters",
        "mode",
        "raIntervalFluxSeconds",
        "raIntervalSeconds",
        "remoteLsMaxAgeSeconds",
        "saslConfigDir",
        "saslConfigName",
    )
    _FIELDS = (
        "id",
        "mode",
        "helloIntervalSeconds",
        "helloMaxAgeSeconds",
        "raIntervalSeconds",
        "raIntervalFluxSeconds",
        "remoteLsMaxAgeSeconds",
        "drainTimeoutSeconds",
        "managementWriters",
        "saslConfigDir",
        "saslConfigName",
    )

    def __init__(
        self,
        *,
        id: str,
        mode: Literal["standalone", "interior", "edge"] = "standalone",
        helloIntervalSeconds: int = 1,
        helloMaxAgeSeconds: int = 3,
        raIntervalSeconds: int = 30,
        raIntervalFluxSeconds: int = 4,
        remoteLsMaxAgeSeconds: int = 60,
        drainTimeoutSeconds: float = 10.0,
        managementWriters: list[str] | None = None,
        saslConfigDir: str | None = None,
        saslConfigName: str = "routernet",
    ) -> None:
        self.id = id
        self.mode = mode
        self.helloIntervalSeconds = helloIntervalSeconds
        self.helloMaxAgeSeconds = helloMaxAgeSeconds
        self.raIntervalSeconds = raIntervalSeconds
        self.raIntervalFluxSeconds = raIntervalFluxSeconds
        self.remoteLsMaxAgeSeconds = remoteLsMaxAgeSeconds
        self.drainTimeoutSeconds = drainTimeoutSeconds
        self.managementWriters: list[str] = [] if managementWriters is None else managementWriters
        self.saslConfigDir = saslConfigDir
        self.saslConfigName = saslConfigName


class SslProfile(RecordBase):
    """As router.config.models.SslProfile."""

    __slots__ = (
        "caCertFile",
        "certFile",
        "ciphers",
        "name",
        "password",
        "privateKeyFile",
        "protocols",
    )
    _FIELDS = (
        "name",
        "certFile",
        "privateKeyFile",
        "password",
        "caCertFile",
        "ciphers",
        "protocols",
    )

    def __init__(
        self,
        *,
        name: str,
        certFile: str | None = None,
        privateKeyFile: str | None = None,
        password: str | None = None,
        caCertFile: str | None = None,
        ciphers: str | None = None,
        protocols: str | None = None,
    ) -> None:
        self.name = name
        self.certFile = certFile
        self.privateKeyFile = privateKeyFile
        self.password = password
        self.caCertFile = caCertFile
        self.ciphers = ciphers
        self.protocols = protocols


class Listener(ListenerView, RecordBase):
    """As router.config.models.Listener."""

    __slots__ = (
        "_ssl",
        "authenticatePeer",
        "cost",
        "host",
        "idleTimeoutSeconds",
        "linkCapacity",
        "maxFrameSize",
        "name",
        "policyVhost",
        "port",
        "requireSsl",
        "role",
        "saslMechanisms",
        "sslProfile",
        "stripAnnotations",
    )
    _FIELDS = (
        "name",
        "host",
        "port",
        "role",
        "cost",
        "linkCapacity",
        "saslMechanisms",
        "authenticatePeer",
        "idleTimeoutSeconds",
        "maxFrameSize",
        "stripAnnotations",
        "sslProfile",
        "requireSsl",
        "policyVhost",
    )
    _PRIVATE = ("_ssl",)

    def __init__(
        self,
        *,
        name: str = "",
        host: str = "0.0.0.0",
        port: int = 5672,
        role: Literal["normal", "inter-router", "edge", "route-container", "gateway"] = "normal",
        cost: int = 1,
        linkCapacity: int = 250,
        saslMechanisms: list[Literal["ANONYMOUS", "PLAIN", "EXTERNAL"]] | None = None,
        authenticatePeer: bool = False,
        idleTimeoutSeconds: int = 16,
        maxFrameSize: int = 16384,
        stripAnnotations: Literal["in", "out", "both", "no"] = "both",
        sslProfile: str | None = None,
        requireSsl: bool = False,
        policyVhost: str | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.role = role
        self.cost = cost
        self.linkCapacity = linkCapacity
        self.saslMechanisms: list[Literal["ANONYMOUS", "PLAIN", "EXTERNAL"]] = (
            ["ANONYMOUS"] if saslMechanisms is None else saslMechanisms
        )
        self.authenticatePeer = authenticatePeer
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.maxFrameSize = maxFrameSize
        self.stripAnnotations = stripAnnotations
        self.sslProfile = sslProfile
        self.requireSsl = requireSsl
        self.policyVhost = policyVhost
        self._ssl: SslProfile | None = None


class Connector(ConnectorView, RecordBase):
    """As router.config.models.Connector."""

    __slots__ = (
        "_ssl",
        "cost",
        "host",
        "idleTimeoutSeconds",
        "linkCapacity",
        "maxFrameSize",
        "name",
        "port",
        "role",
        "saslMechanisms",
        "saslPassword",
        "saslUsername",
        "sslProfile",
        "stripAnnotations",
        "verifyHostname",
    )
    _FIELDS = (
        "name",
        "host",
        "port",
        "role",
        "cost",
        "saslMechanisms",
        "saslUsername",
        "saslPassword",
        "idleTimeoutSeconds",
        "maxFrameSize",
        "stripAnnotations",
        "linkCapacity",
        "sslProfile",
        "verifyHostname",
    )
    _PRIVATE = ("_ssl",)

    def __init__(
        self,
        *,
        name: str = "",
        host: str = "127.0.0.1",
        port: int = 5672,
        role: Literal["normal", "inter-router", "edge", "route-container", "gateway"] = "normal",
        cost: int = 1,
        saslMechanisms: list[Literal["ANONYMOUS", "PLAIN", "EXTERNAL"]] | None = None,
        saslUsername: str | None = None,
        saslPassword: str | None = None,
        idleTimeoutSeconds: int = 16,
        maxFrameSize: int = 16384,
        stripAnnotations: Literal["in", "out", "both", "no"] = "both",
        linkCapacity: int = 250,
        sslProfile: str | None = None,
        verifyHostname: bool = True,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.role = role
        self.cost = cost
        self.saslMechanisms: list[Literal["ANONYMOUS", "PLAIN", "EXTERNAL"]] = (
            ["ANONYMOUS"] if saslMechanisms is None else saslMechanisms
        )
        self.saslUsername = saslUsername
        self.saslPassword = saslPassword
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.maxFrameSize = maxFrameSize
        self.stripAnnotations = stripAnnotations
        self.linkCapacity = linkCapacity
        self.sslProfile = sslProfile
        self.verifyHostname = verifyHostname
        self._ssl: SslProfile | None = None


class Binding(RecordBase):
    """As router.nodes.config.Binding."""

    __slots__ = ("address", "mode", "selector", "subject")
    _FIELDS = ("address", "selector", "subject", "mode")

    def __init__(
        self,
        *,
        address: str,
        selector: str | None = None,
        subject: str | None = None,
        mode: Literal["move", "copy"] = "copy",
    ) -> None:
        self.address = address
        self.selector = selector
        self.subject = subject
        self.mode = mode


class NodeSettings(RecordBase):
    """As router.nodes.config.NodeSettings."""

    __slots__ = (
        "atLimit",
        "bindings",
        "deadLetterAddress",
        "hosts",
        "maxBytes",
        "maxDeliveryCount",
        "maxDepth",
        "type",
        "visibility",
    )
    _FIELDS = (
        "type",
        "hosts",
        "deadLetterAddress",
        "maxDeliveryCount",
        "maxDepth",
        "maxBytes",
        "atLimit",
        "visibility",
        "bindings",
    )
    _NESTED = (("bindings", "list", Binding),)

    def __init__(
        self,
        *,
        type: Literal["queue", "topic"] = "queue",
        hosts: list[str] | None = None,
        deadLetterAddress: str | None = None,
        maxDeliveryCount: int | None = None,
        maxDepth: int | None = None,
        maxBytes: int | None = None,
        atLimit: Literal["block", "reject"] = "block",
        visibility: Literal["both", "inbound", "outbound"] = "both",
        bindings: list[Binding] | None = None,
    ) -> None:
        self.type = type
        self.hosts: list[str] = [] if hosts is None else hosts
        self.deadLetterAddress = deadLetterAddress
        self.maxDeliveryCount = maxDeliveryCount
        self.maxDepth = maxDepth
        self.maxBytes = maxBytes
        self.atLimit = atLimit
        self.visibility = visibility
        self.bindings: list[Binding] = [] if bindings is None else bindings


class Address(AddressView, RecordBase):
    """As router.config.models.Address."""

    __slots__ = (
        "distribution",
        "fallbackAddress",
        "holdTimeoutSeconds",
        "node",
        "pattern",
        "prefix",
        "priority",
        "undeliverable",
    )
    _FIELDS = (
        "prefix",
        "pattern",
        "distribution",
        "undeliverable",
        "holdTimeoutSeconds",
        "fallbackAddress",
        "priority",
        "node",
    )
    _NESTED = (("node", "one", NodeSettings),)

    def __init__(
        self,
        *,
        prefix: str | None = None,
        pattern: str | None = None,
        distribution: Literal["closest", "balanced", "multicast"] = "balanced",
        undeliverable: Literal["drop", "hold", "redirect"] = "drop",
        holdTimeoutSeconds: float = 30.0,
        fallbackAddress: str | None = None,
        priority: int = -1,
        node: NodeSettings | None = None,
    ) -> None:
        self.prefix = prefix
        self.pattern = pattern
        self.distribution = distribution
        self.undeliverable = undeliverable
        self.holdTimeoutSeconds = holdTimeoutSeconds
        self.fallbackAddress = fallbackAddress
        self.priority = priority
        self.node = node


class LinkRoute(LinkRouteView, RecordBase):
    """As router.config.models.LinkRoute."""

    __slots__ = (
        "addExternalPrefix",
        "connection",
        "containerId",
        "delExternalPrefix",
        "direction",
        "pattern",
        "prefix",
    )
    _FIELDS = (
        "prefix",
        "pattern",
        "direction",
        "containerId",
        "connection",
        "addExternalPrefix",
        "delExternalPrefix",
    )

    def __init__(
        self,
        *,
        prefix: str | None = None,
        pattern: str | None = None,
        direction: Literal["in", "out"],
        containerId: str | None = None,
        connection: str | None = None,
        addExternalPrefix: str | None = None,
        delExternalPrefix: str | None = None,
    ) -> None:
        self.prefix = prefix
        self.pattern = pattern
        self.direction = direction
        self.containerId = containerId
        self.connection = connection
        self.addExternalPrefix = addExternalPrefix
        self.delExternalPrefix = delExternalPrefix


class HttpListener(RecordBase):
    """As router.telemetry.config.HttpListener."""

    __slots__ = ("host", "port")
    _FIELDS = ("host", "port")

    def __init__(self, *, host: str = "0.0.0.0", port: int = 9090) -> None:
        self.host = host
        self.port = port


class Telemetry(RecordBase):
    """As router.telemetry.config.Telemetry."""

    __slots__ = ("enabled", "http", "sampleEvery", "windowSeconds")
    _FIELDS = ("http", "enabled", "windowSeconds", "sampleEvery")
    _NESTED = (("http", "one", HttpListener),)

    def __init__(
        self,
        *,
        http: HttpListener | None = None,
        enabled: bool = True,
        windowSeconds: float = 10.0,
        sampleEvery: int = 100,
    ) -> None:
        self.http = http
        self.enabled = enabled
        self.windowSeconds = windowSeconds
        self.sampleEvery = sampleEvery


class Match(MatchView, RecordBase):
    """As router.gateway.config.Match."""

    __slots__ = ("exact", "pattern", "prefix")
    _FIELDS = ("exact", "prefix", "pattern")

    def __init__(
        self, *, exact: str | None = None, prefix: str | None = None, pattern: str | None = None
    ) -> None:
        self.exact = exact
        self.prefix = prefix
        self.pattern = pattern


class GatewayRule(RecordBase):
    """As router.gateway.config.GatewayRule."""

    __slots__ = ("applicationProperties", "container", "groupId", "node", "subject", "userId")
    _FIELDS = ("container", "node", "subject", "groupId", "userId", "applicationProperties")
    _NESTED = (
        ("node", "one", Match),
        ("subject", "one", Match),
        ("groupId", "one", Match),
        ("userId", "one", Match),
        ("applicationProperties", "dict", Match),
    )

    def __init__(
        self,
        *,
        container: str,
        node: Match | None = None,
        subject: Match | None = None,
        groupId: Match | None = None,
        userId: Match | None = None,
        applicationProperties: dict[str, Match] | None = None,
    ) -> None:
        self.container = container
        self.node = node
        self.subject = subject
        self.groupId = groupId
        self.userId = userId
        self.applicationProperties: dict[str, Match] = (
            {} if applicationProperties is None else applicationProperties
        )


class ContainerRoute(RecordBase):
    """As router.gateway.config.ContainerRoute."""

    __slots__ = ("connector", "container")
    _FIELDS = ("container", "connector")

    def __init__(self, *, container: str, connector: str) -> None:
        self.container = container
        self.connector = connector


class Gateway(RecordBase):
    """As router.gateway.config.Gateway."""

    __slots__ = ("containers", "defaultContainer", "export", "rules")
    _FIELDS = ("rules", "defaultContainer", "export", "containers")
    _NESTED = (
        ("rules", "list", GatewayRule),
        ("export", "list", Match),
        ("containers", "list", ContainerRoute),
    )

    def __init__(
        self,
        *,
        rules: list[GatewayRule] | None = None,
        defaultContainer: str | None = None,
        export: list[Match] | None = None,
        containers: list[ContainerRoute] | None = None,
    ) -> None:
        self.rules: list[GatewayRule] = [] if rules is None else rules
        self.defaultContainer = defaultContainer
        self.export: list[Match] = [] if export is None else export
        self.containers: list[ContainerRoute] = [] if containers is None else containers


class StoreSettings(RecordBase):
    """As router.nodes.config.StoreSettings."""

    __slots__ = ("indexedMessages", "memoryBytes", "path")
    _FIELDS = ("path", "memoryBytes", "indexedMessages")

    def __init__(
        self, *, path: str | None = None, memoryBytes: int = 67108864, indexedMessages: int = 250000
    ) -> None:
        self.path = path
        self.memoryBytes = memoryBytes
        self.indexedMessages = indexedMessages


class PolicySettings(RecordBase):
    """As router.config.policy.PolicySettings."""

    __slots__ = (
        "defaultVhost",
        "enableVhostNamePatterns",
        "enableVhostPolicy",
        "maxConnections",
        "maxMessageSize",
    )
    _FIELDS = (
        "maxConnections",
        "maxMessageSize",
        "enableVhostPolicy",
        "enableVhostNamePatterns",
        "defaultVhost",
    )

    def __init__(
        self,
        *,
        maxConnections: int = 65535,
        maxMessageSize: int = 0,
        enableVhostPolicy: bool = False,
        enableVhostNamePatterns: bool = False,
        defaultVhost: str = "$default",
    ) -> None:
        self.maxConnections = maxConnections
        self.maxMessageSize = maxMessageSize
        self.enableVhostPolicy = enableVhostPolicy
        self.enableVhostNamePatterns = enableVhostNamePatterns
        self.defaultVhost = defaultVhost


class VhostGroup(RecordBase):
    """As router.config.policy.VhostGroup."""

    __slots__ = (
        "allowAdminStatusUpdate",
        "allowAnonymousSender",
        "allowDynamicLinkRoutes",
        "allowDynamicSource",
        "allowFallbackLinks",
        "allowUserIdProxy",
        "allowWaypointLinks",
        "maxConnectionsPerHost",
        "maxConnectionsPerUser",
        "maxFrameSize",
        "maxMessageSize",
        "maxReceivers",
        "maxSenders",
        "maxSessionWindow",
        "maxSessions",
        "remoteHosts",
        "sourcePattern",
        "sources",
        "targetPattern",
        "targets",
        "users",
    )
    _FIELDS = (
        "users",
        "remoteHosts",
        "maxConnectionsPerUser",
        "maxConnectionsPerHost",
        "maxMessageSize",
        "maxFrameSize",
        "maxSessionWindow",
        "maxSessions",
        "maxSenders",
        "maxReceivers",
        "allowDynamicSource",
        "allowAnonymousSender",
        "allowUserIdProxy",
        "allowWaypointLinks",
        "allowFallbackLinks",
        "allowDynamicLinkRoutes",
        "allowAdminStatusUpdate",
        "sources",
        "targets",
        "sourcePattern",
        "targetPattern",
    )

    def __init__(
        self,
        *,
        users: list[str] | None = None,
        remoteHosts: list[str] | None = None,
        maxConnectionsPerUser: int | None = None,
        maxConnectionsPerHost: int | None = None,
        maxMessageSize: int | None = None,
        maxFrameSize: int = 0,
        maxSessionWindow: int = 0,
        maxSessions: int = 0,
        maxSenders: int = 2147483647,
        maxReceivers: int = 2147483647,
        allowDynamicSource: bool = False,
        allowAnonymousSender: bool = False,
        allowUserIdProxy: bool = False,
        allowWaypointLinks: bool = True,
        allowFallbackLinks: bool = True,
        allowDynamicLinkRoutes: bool = True,
        allowAdminStatusUpdate: bool = True,
        sources: list[str] | None = None,
        targets: list[str] | None = None,
        sourcePattern: list[str] | None = None,
        targetPattern: list[str] | None = None,
    ) -> None:
        self.users: list[str] = [] if users is None else users
        self.remoteHosts: list[str] = [] if remoteHosts is None else remoteHosts
        self.maxConnectionsPerUser = maxConnectionsPerUser
        self.maxConnectionsPerHost = maxConnectionsPerHost
        self.maxMessageSize = maxMessageSize
        self.maxFrameSize = maxFrameSize
        self.maxSessionWindow = maxSessionWindow
        self.maxSessions = maxSessions
        self.maxSenders = maxSenders
        self.maxReceivers = maxReceivers
        self.allowDynamicSource = allowDynamicSource
        self.allowAnonymousSender = allowAnonymousSender
        self.allowUserIdProxy = allowUserIdProxy
        self.allowWaypointLinks = allowWaypointLinks
        self.allowFallbackLinks = allowFallbackLinks
        self.allowDynamicLinkRoutes = allowDynamicLinkRoutes
        self.allowAdminStatusUpdate = allowAdminStatusUpdate
        self.sources = sources
        self.targets = targets
        self.sourcePattern = sourcePattern
        self.targetPattern = targetPattern


class Vhost(RecordBase):
    """As router.config.policy.Vhost."""

    __slots__ = (
        "aliases",
        "allowUnknownUser",
        "groups",
        "hostname",
        "maxConnections",
        "maxConnectionsPerHost",
        "maxConnectionsPerUser",
        "maxMessageSize",
    )
    _FIELDS = (
        "hostname",
        "aliases",
        "maxConnections",
        "maxConnectionsPerUser",
        "maxConnectionsPerHost",
        "maxMessageSize",
        "allowUnknownUser",
        "groups",
    )
    _NESTED = (("groups", "dict", VhostGroup),)

    def __init__(
        self,
        *,
        hostname: str,
        aliases: list[str] | None = None,
        maxConnections: int = 65535,
        maxConnectionsPerUser: int = 65535,
        maxConnectionsPerHost: int = 65535,
        maxMessageSize: int | None = None,
        allowUnknownUser: bool = False,
        groups: dict[str, VhostGroup] | None = None,
    ) -> None:
        self.hostname = hostname
        self.aliases: list[str] = [] if aliases is None else aliases
        self.maxConnections = maxConnections
        self.maxConnectionsPerUser = maxConnectionsPerUser
        self.maxConnectionsPerHost = maxConnectionsPerHost
        self.maxMessageSize = maxMessageSize
        self.allowUnknownUser = allowUnknownUser
        self.groups: dict[str, VhostGroup] = {} if groups is None else groups


class RouterConfig(RouterConfigView, RecordBase):
    """As router.config.models.RouterConfig."""

    __slots__ = (
        "addresses",
        "connectors",
        "gateway",
        "linkRoutes",
        "listeners",
        "policy",
        "router",
        "sslProfiles",
        "store",
        "telemetry",
        "vhosts",
    )
    _FIELDS = (
        "router",
        "sslProfiles",
        "listeners",
        "connectors",
        "addresses",
        "linkRoutes",
        "telemetry",
        "gateway",
        "store",
        "policy",
        "vhosts",
    )
    _NESTED = (
        ("router", "one", RouterSettings),
        ("sslProfiles", "list", SslProfile),
        ("listeners", "list", Listener),
        ("connectors", "list", Connector),
        ("addresses", "list", Address),
        ("linkRoutes", "list", LinkRoute),
        ("telemetry", "one", Telemetry),
        ("gateway", "one", Gateway),
        ("store", "one", StoreSettings),
        ("policy", "one", PolicySettings),
        ("vhosts", "list", Vhost),
    )

    def __init__(
        self,
        *,
        router: RouterSettings,
        sslProfiles: list[SslProfile] | None = None,
        listeners: list[Listener] | None = None,
        connectors: list[Connector] | None = None,
        addresses: list[Address] | None = None,
        linkRoutes: list[LinkRoute] | None = None,
        telemetry: Telemetry | None = None,
        gateway: Gateway | None = None,
        store: StoreSettings | None = None,
        policy: PolicySettings | None = None,
        vhosts: list[Vhost] | None = None,
    ) -> None:
        self.router = router
        self.sslProfiles: list[SslProfile] = [] if sslProfiles is None else sslProfiles
        self.listeners: list[Listener] = [] if listeners is None else listeners
        self.connectors: list[Connector] = [] if connectors is None else connectors
        self.addresses: list[Address] = [] if addresses is None else addresses
        self.linkRoutes: list[LinkRoute] = [] if linkRoutes is None else linkRoutes
        self.telemetry: Telemetry = Telemetry() if telemetry is None else telemetry
        self.gateway: Gateway = Gateway() if gateway is None else gateway
        self.store: StoreSettings = StoreSettings() if store is None else store
        self.policy: PolicySettings = PolicySettings() if policy is None else policy
        self.vhosts: list[Vhost] = [] if vhosts is None else vhosts
