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
- ``gateway`` (rules, defaultContainer, export, containers): read when used, so the next
  ``()/node`` message or attach, and the next advertisement to a joined network, follow it;
- sslProfiles, by name: every profile is loaded first (a file Proton cannot load refuses the
  whole change, ``config.invalid``); listeners and connectors using a changed profile count
  as changed (connections accepted from then on get it, connectors reconnect with it), and
  connections already up keep the TLS session they have (router/tls.py).

What only a restart can change (the rest under ``router``: id, mode, timers, SASL setup; and
``telemetry``) is
refused as a whole, the old configuration kept running: ``config.restart_required``. So is an
invalid one: ``config.invalid``, with the one-line reason. A listener that cannot be bound is
reported (``listener.failed``) and tried again at the next change; the rest applies.

Sources (`config_sources`): the ``--config`` file, polled from housekeeping (`FileSource`), and
on Kubernetes the pod's ConfigMap, watched through the API (router/configsync.py). Both have
what they read validated with the command line's flags over it (a child process,
router/configchild.py), so flags keep winning.
"""

from __future__ import annotations

import os
import selectors
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router import sasl, tls
from router.addressing import AddressTable
from router.configchild import Pending, Ready, Validate
from router.configrecords import RouterConfig
from router.configviews import ConfigError, config_text
from router.linkroutes import link_route_table
from router.log import get_logger

if TYPE_CHECKING:
    from router.engine import Router

log = get_logger("router.config")

# How often the config file's metadata is looked at (a stat; the content is read only when
# that changed), and how old its modification must be before it is read: a file being written
# in place is not read half-way (write a new file and rename it over the old one to be safe).
FILE_CHECK_SECONDS = 0.1
FILE_SETTLE_SECONDS = 0.05


class RestartRequired(Exception):
    pass


# Settings of the ``router`` entity that are read when used, not once at start.
LIVE_ROUTER_SETTINGS = frozenset({"drainTimeoutSeconds"})


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
    from router.engine import address_rules

    try:
        table = AddressTable(address_rules(new))
    except ValueError as e:
        log.error("config.invalid", source=source, error=f"addresses: {e}")
        return []
    changes = _ssl_profiles(router, new)
    changes += _addresses(router, new, table)
    changes += _link_routes(router, new)
    changes += _listeners(router, new)
    changes += _connectors(router, new)
    changes += _gateway(router, new)
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
    from router.forwarder import HINTS

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


class FileSource:
    """The ``--config`` file, looked at from housekeeping at most every FILE_CHECK_SECONDS.

    A look is one stat; the file is read only when its modification time, size or inode
    changed (a ConfigMap volume swaps a symlink; an editor or `routernet up` renames a new file
    over the old), and validated only when its content changed. Validation runs in a
    child process (router/configchild.py): the loop goes on meanwhile, and applies the result
    at the first housekeeping after it is done; the file is not looked at again until then."""

    def __init__(
        self,
        path: str | Path,
        validate: Validate,
        interval: float = FILE_CHECK_SECONDS,
        clock: Callable[[], float] = time.time,
        known: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.validate = validate
        self.interval = interval
        self.clock = clock  # wall clock, to compare with the file's mtime
        self.router: Router | None = None
        self.next_check = 0.0
        self.stat: tuple[int, ...] | None = None
        # What was last offered: the text, or why the file could not be read. At start, the
        # text the running configuration came from if the caller read it (router/cli.py);
        # else unset, and the first look reads the file and compares the configuration with
        # the running one, so a change made before the loop started is not missed.
        self.seen: tuple[str | None, str | None] | None = None if known is None else (known, None)
        self.pending: Pending | None = None
        self.wake_fd: int | None = None  # watched by the loop while `pending` runs

    def start(self, router: Router) -> None:
        self.router = router

    def stop(self) -> None:
        self._unwatch()
        self.router = None

    def poll(self, now: float) -> None:
        if self.router is None:
            return
        if self.pending is not None:
            self._take()
            return
        if now < self.next_check:
            return
        self.next_check = now + self.interval
        try:
            st = os.stat(self.path)
            stat: tuple[int, ...] = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)
        except OSError as e:
            stat = (-1, e.errno or 0)
        if stat == self.stat:
            return
        if stat[0] >= 0:
            age = self.clock() - stat[0] / 1e9
            if 0 <= age < FILE_SETTLE_SECONDS:
                self.next_check = now  # being written: look again at the next housekeeping
                return
        self.stat = stat
        self.check()

    def check(self) -> None:
        """Read the file; have it validated if its content changed."""
        router = self.router
        assert router is not None
        try:
            text, error = config_text(self.path), None
        except ConfigError as e:
            text, error = None, str(e)
        if (text, error) == self.seen:
            return
        self.seen = (text, error)
        if text is None:
            offer(router, "file", Ready(error=ConfigError(str(error))).result)
        elif not text.strip():
            # Most likely caught half-written; never a configuration to switch to.
            empty = ConfigError(f"config file {str(self.path)!r} is empty")
            offer(router, "file", Ready(error=empty).result)
        else:
            pending = self.pending = self.validate(text, str(self.path))
            self.wake_fd = pending.exit_fd()
            if self.wake_fd is not None:
                router.sel.register(self.wake_fd, selectors.EVENT_READ, ("wakeup-handler", self))
            self._take()

    def on_wakeup(self) -> None:
        """The validation may be done (engine.py: the selector's "wakeup-handler")."""
        self._take()
        if self.pending is not None and self.pending.exit_fd() is None:
            self._unwatch()  # it went over to a child of its own: housekeeping looks

    def _unwatch(self) -> None:
        if self.wake_fd is not None and self.router is not None:
            self.router.sel.unregister(self.wake_fd)
        self.wake_fd = None

    def _take(self) -> None:
        pending, router = self.pending, self.router
        if pending is not None and router is not None and pending.done():
            self.pending = None
            self._unwatch()
            offer(router, "file", pending.result)


def config_sources(
    config_path: str | None,
    validate: Validate,
    environ: Mapping[str, str] = os.environ,
    known: str | None = None,
) -> list[Any]:
    """The live sources for a router started from the command line: its ``--config`` file if
    any (``known``: the text the running configuration came from), and its ConfigMap when
    ROUTERNET_CONFIGMAP, POD_NAME and POD_NAMESPACE are set."""
    sources: list[Any] = []
    if config_path is not None:
        sources.append(FileSource(config_path, validate, known=known))
    name = environ.get("ROUTERNET_CONFIGMAP")
    pod = environ.get("POD_NAME")
    namespace = environ.get("POD_NAMESPACE")
    if name and pod and namespace:
        from router.configsync import ConfigMapSource

        sources.append(ConfigMapSource(namespace, name, f"{pod}.json", validate))
    elif name:
        log.warning(
            "configsync.disabled",
            configmap=name,
            error="POD_NAME and POD_NAMESPACE must be set as well",
        )
    return sources
