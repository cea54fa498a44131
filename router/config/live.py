"""Live configuration changes: a new RouterConfig applied in place, and the file it comes from.

`apply_config` compares a validated new configuration with what runs and changes only the
difference, without dropping anything that need not go:

- addresses: a new AddressTable for the forwarder; every known address gets its new rule,
  senders' credit is recomputed, deliveries held under a rule that no longer holds them are
  routed again (delivered, redirected or released as the new rule says), and an interior
  router re-announces the distribution of addresses it has consumers for;
- link routes: a new table; links routed already stay as they are, new attaches follow the
  new routes, and an interior router re-advertises the routes whose container it has;
- listeners, by HOST:PORT: new ones bound, removed ones stop accepting (connections they
  accepted stay), changed settings apply to connections accepted from then on;
- connectors, by name: new ones start dialling, removed ones stop and close their connection
  (as when the peer goes: routes through it drop, its deliveries are resolved), changed ones
  are replaced;
- ``router.drainTimeoutSeconds``: read when a drain starts, so the next SIGTERM uses it;
- ``router.managementWriters``: read at every management write;
- ``gateway`` (rules, defaultContainer, export, containers): read when used, so the next
  ``()/node`` message or attach, and the next advertisement to a joined network, follow it;
- sslProfiles, by name: every profile is loaded first (a file Proton cannot load refuses the
  whole change, ``config.invalid``); listeners and connectors using a changed profile count
  as changed (connections accepted from then on get it, connectors reconnect with it), and
  connections already up keep the TLS session they have (router/transport/tls.py).

What only a restart can change (the rest under ``router``: id, mode, timers, SASL setup; and
``telemetry``) is
refused as a whole, the old configuration kept running: ``config.restart_required``. So is an
invalid one: ``config.invalid``, with the one-line reason. A listener that cannot be bound is
reported (``listener.failed``) and tried again at the next change; the rest applies.

Where new configurations come from (the ``--config`` file, the pod's ConfigMap):
router/config/sources.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from router.addressing import AddressTable
from router.config.records import RouterConfig
from router.config.views import ConfigError
from router.linkroutes.table import link_route_table
from router.log import get_logger
from router.transport import sasl, tls

if TYPE_CHECKING:
    from router.core.engine import Router

log = get_logger("router.config")


class RestartRequired(Exception):
    pass


# Settings of the ``router`` entity that are read when used, not once at start.
LIVE_ROUTER_SETTINGS = frozenset({"drainTimeoutSeconds", "managementWriters"})


def router_changes(old: RouterConfig, new: RouterConfig) -> list[str]:
    """Every difference in the ``router`` entity, as "router.NAME: OLD -> NEW"."""
    return [
        f"router.{name}: {getattr(old.router, name)!r} -> {getattr(new.router, name)!r}"
        for name in old.router.field_names()
        if getattr(old.router, name) != getattr(new.router, name)
    ]


def restart_reasons(old: RouterConfig, new: RouterConfig) -> list[str]:
    """What differs in the ``router`` entity: id, mode, timers and SASL setup are read once."""
    live = tuple(f"router.{name}:" for name in LIVE_ROUTER_SETTINGS)
    reasons = [change for change in router_changes(old, new) if not change.startswith(live)]
    if old.telemetry != new.telemetry:
        # The HTTP listener and the windows are set up once, at start.
        reasons.append(f"telemetry: {old.telemetry.as_dict()!r} -> {new.telemetry.as_dict()!r}")
    if old.store.path and old.store != new.store:
        # The store is opened once (router/nodes/hosting.py): its messages stay where it is.
        reasons.append(f"store: {old.store.as_dict()!r} -> {new.store.as_dict()!r}")
    return reasons


def apply_config(router: Router, new: RouterConfig, source: str = "api") -> list[str]:
    """Apply ``new`` to a running router; returns the changes (empty when nothing changed, or
    when it was refused, which is logged)."""
    reasons = restart_reasons(router.config, new)
    if reasons:
        log.error("config.restart_required", source=source, changes="; ".join(reasons))
        return []
    offered = {m for cfg in new.listeners for m in cfg.saslMechanisms}
    problem = sasl.configure(new.router, offered)
    if problem is not None:
        log.error("config.invalid", source=source, error=problem)
        return []
    try:
        tls.check(new)
    except tls.TlsError as e:
        log.error("config.invalid", source=source, error=str(e))
        return []
    try:
        table = AddressTable(new.address_rules())
    except ValueError as e:
        log.error("config.invalid", source=source, error=f"addresses: {e}")
        return []
    changes = _ssl_profiles(router, new)
    changes += _addresses(router, new, table)
    changes += _link_routes(router, new)
    changes += _listeners(router, new)
    changes += _connectors(router, new)
    changes += _gateway(router, new)
    changes += _policy(router, new)
    changes += router_changes(router.config, new)  # the live ones: the rest were refused
    gateway_changed = router.config.gateway != new.gateway
    router.config = new
    router.nodes.configure(new)
    if gateway_changed:
        router.gateways.config_changed()
    tls.DOMAINS.retain(new)  # frees the TLS domains nothing uses any more
    if changes:
        log.info("config.applied", source=source, changes="; ".join(changes))
    return changes


def _entity_changes(kind: str, old: Mapping[str, object], now: Mapping[str, object]) -> list[str]:
    """`<kind> -key` for each entry gone, `+key` for each new one, `~key` for each changed."""
    changes = [f"{kind} -{key}" for key in old if key not in now]
    changes += [
        f"{kind} {'~' if key in old else '+'}{key}"
        for key, entry in now.items()
        if old.get(key) != entry
    ]
    return changes


def _ssl_profiles(router: Router, new: RouterConfig) -> list[str]:
    """Only reported: the listeners and connectors that use a profile apply it."""
    return _entity_changes(
        "sslProfile",
        {p.name: p for p in router.config.sslProfiles},
        {p.name: p for p in new.sslProfiles},
    )


def _addresses(router: Router, new: RouterConfig, table: AddressTable) -> list[str]:
    old = {a.key: a for a in router.config.addresses}
    now = {a.key: a for a in new.addresses}
    changes = [f"address -{key}" for key in old if key not in now]
    for key, a in now.items():
        if key not in old:
            changes.append(f"address +{key} {a.distribution}")
        elif a != old[key]:
            changes.append(f"address ~{key} {a.distribution}")
    if not changes:
        return []
    rules_changed(router, table)
    return changes


def _gateway(router: Router, new: RouterConfig) -> list[str]:
    """Only reported: the engine reads ``router.config.gateway`` whenever it uses it."""
    old, now = router.config.gateway, new.gateway
    if old == now:
        return []
    return [
        f"gateway ~{len(now.rules)} rules, default {now.defaultContainer or '-'},"
        f" {len(now.export)} exports, {len(now.containers)} containers"
    ]


def _policy(router: Router, new: RouterConfig) -> list[str]:
    """The policy and vhosts: new connections get the new rules, admitted ones keep theirs."""
    old = router.config
    changes = []
    if old.policy != new.policy:
        changes.append(f"policy: {old.policy.as_dict()!r} -> {new.policy.as_dict()!r}")
    changes += _entity_changes(
        "vhost",
        {v.hostname: v.as_dict() for v in old.vhosts},
        {v.hostname: v.as_dict() for v in new.vhosts},
    )
    if changes:
        router.policy.configure(new.policy, new.vhosts)
    return changes


def _link_routes(router: Router, new: RouterConfig) -> list[str]:
    changes = _entity_changes(
        "linkRoute",
        {r.key: r for r in router.config.linkRoutes},
        {r.key: r for r in new.linkRoutes},
    )
    if changes:
        router.linkrouter.set_table(link_route_table(new))
    return changes


def rules_changed(router: Router, table: AddressTable) -> None:
    """Give every known address its rule from ``table`` and act on what that changes."""
    from router.datapath.forwarder import HINTS

    fwd = router.fwd
    before = {key: entry.rule for key, entry in fwd.entries.items()}
    fwd.set_table(table)  # every address's rule; senders' credit recomputed
    for entry in list(fwd.entries.values()):
        rule = entry.rule
        if before.get(entry.key) == rule:
            continue
        if entry.consumers and entry.key[0] == "M" and fwd.network is not None:
            fwd.network.control.add_local(entry.key, HINTS[rule.distribution])
        if entry.held and rule.undeliverable != "hold":
            # Held under the old rule: the new one delivers, redirects or releases them.
            held, entry.held = entry.held, deque()
            fwd.holding.discard(entry)
            for q in held:
                fwd.unblock(q)
                fwd.route(q.msg, entry, q.fwd, q.origin)
        elif fwd.reachable(entry):
            fwd.became_reachable(entry)
        fwd.forget_if_idle(entry)


def _listeners(router: Router, new: RouterConfig) -> list[str]:
    """Reconciles the open listening sockets (not the old config) with ``new``, so that one
    that failed to bind is tried again at the next change."""
    changes: list[str] = []
    wanted = {cfg.address.lower(): cfg for cfg in new.listeners}
    open_now = {cfg.address.lower(): (sock, cfg) for sock, cfg in router.listeners}
    for key, (sock, cfg) in open_now.items():
        if key not in wanted:
            router.close_listener(sock)
            changes.append(f"listener -{cfg.name}")
        elif wanted[key] != cfg:
            router.update_listener(sock, wanted[key])
            changes.append(f"listener ~{wanted[key].name}")
    for key, cfg in wanted.items():
        if key in open_now:
            continue
        try:
            router.open_listener(cfg)
        except OSError as e:
            log.error("listener.failed", host=cfg.host, port=cfg.port, error=str(e))
            changes.append(f"listener !{cfg.name} ({e.strerror or e})")
        else:
            changes.append(f"listener +{cfg.name}")
    return changes


def _connectors(router: Router, new: RouterConfig) -> list[str]:
    changes: list[str] = []
    manager = router.connectors
    wanted = {cfg.name: cfg for cfg in new.connectors}
    for connector in list(manager.items):
        cfg = wanted.get(connector.name)
        if cfg is None:
            manager.remove(connector)
            changes.append(f"connector -{connector.name}")
        elif cfg != connector.config:
            manager.remove(connector)
            changes.append(f"connector ~{connector.name}")
    running = {c.name for c in manager.items}
    for index, cfg in enumerate(new.connectors):
        if cfg.name not in running:
            manager.add(cfg, index)
            if f"connector ~{cfg.name}" not in changes:
                changes.append(f"connector +{cfg.name}")
    return changes


def offer(router: Router, source: str, load: Callable[[], RouterConfig]) -> list[str]:
    """Validate what ``load`` gives and apply it; an invalid one is logged and ignored."""
    try:
        new = load()
    except ConfigError as e:
        log.error("config.invalid", source=source, error=str(e))
        return []
    open_now = {cfg.address.lower() for _sock, cfg in router.listeners}
    if new == router.config and open_now == {cfg.address.lower() for cfg in new.listeners}:
        log.debug("config.unchanged", source=source)
        return []
    return apply_config(router, new, source)
