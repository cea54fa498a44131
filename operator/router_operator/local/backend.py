"""The local backend: the Router, Address and LinkRoute files ``kubectl apply`` takes, run as
router processes on this machine (``routernet up``, ``status``, ``down``; CLI in cli/main.py).

The same models validate the files (resources/models.py) and the same planner computes the network
(planning/planner.py) as on Kubernetes; only where the routers run differs:

- Every pod gets a loopback address of its own, 127.0.0.2, .3, ... (the first free one, in the
  planner's pod order), kept in the state file for as long as the pod exists, so a pod keeps its
  address across ``up``/``down``. It listens there on the planner's ports (5672 for clients,
  55672 inter-router, 45672 edge): on distinct addresses they do not clash. An address whose
  ports something else holds is skipped; a machine-wide lock serialises concurrent ``up``s.
- The planner's connectors dial stable DNS names; here each name is rewritten to its pod's
  address, and each listener's 0.0.0.0 to the pod's own address. A LinkRoute's connector dials
  its host as declared (a broker on this machine, say ``localhost``).
- A pod is ``python -m router --config <state>/config/<pod>.json``, in a session of its own,
  logging to ``<state>/logs/<pod>.log``, its pid in ``<state>/pids/<pod>.pid``. A pid counts only
  while /proc shows that process running with that config file, so a reused pid is never
  signalled.
- ``up`` on a running network plans again and rewrites the config files that change, which the
  routers apply in place (router/config/live.py: addresses, link routes, connectors,
  listeners); pods that appear are started, pods that disappear stopped, and only a pod whose
  mode changes (interior <-> edge, which no router applies live) is restarted.
- A pod of a Router with ``store`` keeps the messages of the nodes it hosts in
  ``<state>/store/<pod>/`` (its PersistentVolumeClaim on Kubernetes). Nothing removes it, not
  ``down`` and not a pod going away (a StatefulSet keeps its PVCs too): a later ``up`` finds the
  messages there; deleting the directory by hand discards them.
- Invalid files change nothing: every file is read, validated and planned (local/files.py)
  before the first config is written; problems come back as one line each, naming the file,
  the object and the field (`InvalidInput`).

A telemetry collector per network runs beside the routers (local/collector.py): started after
them, stopped after them, writing ``<state>/telemetry/``; ``up --no-collector`` runs none. While
a Router is autoscaled, the autoscaler runs beside them too (local/scaler.py): it sets the
replicas ``up`` plans with and runs ``up`` again when they change; ``down`` stops it first
(local/scaler_control.py: its file, its process).

What Kubernetes alone provides is left out: Secrets (a PLAIN listener's users, TLS) are refused
here, and image, resources and podTemplate are ignored. LinkRoutes are applied as on Kubernetes
(refused, as there, when they ask for TLS or a credentials Secret).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from router.config.models import RouterConfig
from router_operator.local import collector as local_collector
from router_operator.local import console as local_console
from router_operator.local import handoff as local_handoff
from router_operator.local import scaler_control
from router_operator.local.collector import LocalCollector
from router_operator.local.files import DEFAULT_NAMESPACE, InvalidInput, Planned, plan_files
from router_operator.local.terminate import exited, terminate
from router_operator.planning.planner import PodPlan

DEFAULT_STATE_DIR = ".routernet"
STATE_VERSION = 1
LOOPBACK_PREFIX = "127.0.0."
FIRST_HOST, LAST_HOST = 2, 254
"""127.0.0.1 is left to everything else on the machine."""
# A bound on a router's start, not its duration (about a second): on a loaded machine importing
# Proton and the router's modules alone takes many times that.
START_TIMEOUT = 60.0
# A router drains for up to drainTimeoutSeconds (10 s) and closes in up to 3 s after SIGTERM.
STOP_TIMEOUT = 15.0
MACHINE_LOCK = Path(tempfile.gettempdir()) / "routernet-loopback.lock"
MANAGEMENT_TIMEOUT = 3.0


class LocalError(Exception):
    """Something went wrong while running the network (a router did not start, say)."""


# ---------------------------------------------------------------------------------------------
# Pods on loopback addresses.


@dataclass(frozen=True)
class LocalPod:
    """One router process: its pod's name, loopback address and exact configuration."""

    name: str
    router: str
    network: str
    mode: str
    host: str
    config: dict[str, Any]

    @property
    def listeners(self) -> list[dict[str, Any]]:
        return list(self.config.get("listeners", []))

    @property
    def ports(self) -> list[int]:
        return [lsn["port"] for lsn in self.listeners] + ([self.http[1]] if self.http else [])

    @property
    def http(self) -> tuple[str, int] | None:
        """Where the router serves /metrics, /healthz and /readyz, if it does."""
        http = self.config.get("telemetry", {}).get("http")
        return (http["host"], http["port"]) if http else None

    def endpoints(self, role: str) -> list[str]:
        return [f"{self.host}:{lsn['port']}" for lsn in self.listeners if lsn["role"] == role]

    def record(self) -> dict[str, Any]:
        """What the state file keeps about the pod."""
        return {
            "router": self.router,
            "network": self.network,
            "mode": self.mode,
            "host": self.host,
            "ports": self.ports,
            "clientEndpoints": self.endpoints("normal"),
            "routeContainerEndpoints": self.endpoints("route-container"),
            "interRouterEndpoints": self.endpoints("inter-router"),
            "edgeEndpoints": self.endpoints("edge"),
            "gatewayEndpoints": self.endpoints("gateway"),
            "httpEndpoint": f"http://{self.http[0]}:{self.http[1]}" if self.http else None,
        }


def local_config(
    pod: PodPlan, host: str, hosts: Mapping[str, str], *, state_dir: Path
) -> dict[str, Any]:
    """The pod's config with its listeners on ``host`` and its connectors dialling the peers'
    loopback addresses (``hosts``: the planner's DNS name -> address), its store (if its Router
    has one) in ``state_dir``, validated as the router will load it. Attributes left at their
    defaults are left out, for a readable file."""
    config = _config(pod)
    listeners = []
    for lsn in config.listeners:
        entry = lsn.model_dump(mode="json", exclude_defaults=True)
        if lsn.name == f"listener/{lsn.address}":
            entry.pop("name", None)  # named after the address: renamed with it
        listeners.append({**entry, "host": host, "port": lsn.port, "role": lsn.role})
    connectors = []
    for ctr in config.connectors:
        entry = ctr.model_dump(mode="json", exclude_defaults=True)
        if ctr.name == f"connector/{ctr.address}":
            entry.pop("name", None)
        # Peers' DNS names become their addresses; a broker's host (a LinkRoute's) and another
        # network's gateway (a Gateway connector's) are kept.
        host_here = hosts.get(ctr.host, ctr.host)
        connectors.append({**entry, "host": host_here, "port": ctr.port, "role": ctr.role})
    data = {
        "router": config.router.model_dump(mode="json", exclude_defaults=True),
        "listeners": listeners,
        "connectors": connectors,
        "addresses": [a.model_dump(mode="json", exclude_defaults=True) for a in config.addresses],
        "linkRoutes": [r.model_dump(mode="json", exclude_defaults=True) for r in config.linkRoutes],
    }
    if not data["linkRoutes"]:
        del data["linkRoutes"]  # the file as before LinkRoutes, for a router that has none
    if config.sslProfiles:  # only profiles without files (Secrets are refused locally)
        data["sslProfiles"] = [
            p.model_dump(mode="json", exclude_defaults=True) for p in config.sslProfiles
        ]
    gateway = config.gateway.model_dump(mode="json", exclude_defaults=True)
    if gateway:
        data["gateway"] = gateway
    telemetry = config.telemetry.model_dump(mode="json", exclude_defaults=True)
    if config.telemetry.http is not None:
        # On the pod's own address, as its listeners: each router has the planner's port.
        telemetry["http"] = {"host": host, "port": config.telemetry.http.port}
    if telemetry:
        data["telemetry"] = telemetry
    if config.store.path is not None:
        store = config.store.model_dump(mode="json", exclude_defaults=True)
        data["store"] = {**store, "path": str(store_path(state_dir, pod.name))}
    RouterConfig.model_validate(data)
    return data


def _bindable(host: str, ports: Sequence[int]) -> bool:
    """Whether a router could listen on every port at ``host`` now (as it binds: reuse on)."""
    for port in ports:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def assign_hosts(
    pods: Sequence[PodPlan],
    ports: Mapping[str, Sequence[int]],
    kept: Mapping[str, str],
    bindable: Any = _bindable,
) -> dict[str, str]:
    """A loopback address per pod: ``kept`` ones stay, the others get the lowest free address
    (in ``pods`` order) where all their ``ports`` can be bound. LocalError when none is left."""
    hosts = dict(kept)
    taken = set(kept.values())
    candidates = (f"{LOOPBACK_PREFIX}{n}" for n in range(FIRST_HOST, LAST_HOST + 1))
    for pod in pods:
        if pod.name in hosts:
            continue
        for candidate in candidates:
            if candidate not in taken and bindable(candidate, ports[pod.name]):
                hosts[pod.name] = candidate
                taken.add(candidate)
                break
        else:
            raise LocalError(
                f"no free loopback address for {pod.name}: ports {list(ports[pod.name])} are in"
                f" use on every one of {LOOPBACK_PREFIX}{FIRST_HOST}..{LAST_HOST} (is a server"
                " listening on 0.0.0.0 at one of them?)"
            )
    return hosts


# ---------------------------------------------------------------------------------------------
# The state directory.


@dataclass
class State:
    """``<state>/state.json``: what the last ``up`` applied. Pids live in ``pids/``."""

    namespace: str = DEFAULT_NAMESPACE
    files: list[str] = field(default_factory=list)
    """The arguments of the last ``up``, absolute: ``up`` without files applies them again."""
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    """kind -> name -> {file, created, object}: the objects as applied, for the update rules
    and conflicts (the older object wins)."""
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    """pod name -> LocalPod.record()."""
    networks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """network -> connections, addresses and link routes as planned (for status)."""
    collectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """network -> LocalCollector.record() of the collector ``up`` started (none: --no-collector)."""

    @classmethod
    def load(cls, state_dir: Path) -> State | None:
        path = state_dir / "state.json"
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise LocalError(f"{path}: unreadable state ({err}); remove the directory") from None
        if data.get("version") != STATE_VERSION:
            raise LocalError(f"{path}: state version {data.get('version')!r} is not supported")
        return cls(
            namespace=data["namespace"],
            files=data["files"],
            resources=data["resources"],
            pods=data["pods"],
            networks=data["networks"],
            collectors=data.get("collectors", {}),  # absent in states from before collectors
        )

    def save(self, state_dir: Path) -> None:
        data = {
            "version": STATE_VERSION,
            "namespace": self.namespace,
            "files": self.files,
            "resources": self.resources,
            "pods": self.pods,
            "networks": self.networks,
            "collectors": self.collectors,
        }
        _write_atomically(state_dir / "state.json", json.dumps(data, indent=2) + "\n")


def config_path(state_dir: Path, pod: str) -> Path:
    return state_dir / "config" / f"{pod}.json"


def store_path(state_dir: Path, pod: str) -> Path:
    """Where a pod keeps the messages of the nodes it hosts; kept by ``down``."""
    return state_dir / "store" / pod


def log_path(state_dir: Path, pod: str) -> Path:
    return state_dir / "logs" / f"{pod}.log"


def pid_path(state_dir: Path, pod: str) -> Path:
    return state_dir / "pids" / f"{pod}.pid"


def _write_atomically(path: Path, text: str) -> None:
    """A new file renamed over the old: a router polling it never reads half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` (read-only is enough, so any user can take it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Processes.


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")


def _is_router(pid: int, config: Path) -> bool:
    """True while ``pid`` is a router running ``config`` (a zombie has no command line)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it was ours and has exited
    args = _cmdline(pid)
    return "--config" in args and str(config) in args


def running_pid(state_dir: Path, pod: str) -> int | None:
    """The pid of the pod's router if it is running."""
    try:
        pid = int(pid_path(state_dir, pod).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _is_router(pid, config_path(state_dir, pod)) else None


def _spawn(state_dir: Path, pod: str) -> int:
    log = log_path(state_dir, pod)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("ROUTERNET_CONFIGMAP", "POD_NAME", "POD_NAMESPACE"):
        env.pop(name, None)  # the config file is the only source here
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "router", "--config", str(config_path(state_dir, pod))],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=state_dir,
            env=env,
            start_new_session=True,  # Ctrl-C in the terminal that ran `up` does not reach it
        )
    _write_atomically(pid_path(state_dir, pod), f"{proc.pid}\n")
    return proc.pid


def _log_tail(state_dir: Path, pod: str, lines: int = 3) -> str:
    try:
        text = log_path(state_dir, pod).read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line for line in text.strip().splitlines()[-lines:])


def _wait_listening(
    state_dir: Path, pods: Sequence[LocalPod], spawned: Mapping[str, int], timeout: float
) -> None:
    """Until every pod listens on every port. A router just `spawned` (pod -> pid) is asked
    whether it exited rather than recognised by its command line, which is still ours until
    its exec."""
    pending = [(pod, port) for pod in pods for port in pod.ports]
    deadline = time.monotonic() + timeout
    while pending:
        pod, port = pending[0]
        pid = spawned.get(pod.name)
        if exited(pid) if pid is not None else running_pid(state_dir, pod.name) is None:
            raise LocalError(
                f"router {pod.name} exited during start-up; its log"
                f" ({log_path(state_dir, pod.name)}) ends: {_log_tail(state_dir, pod.name)}"
            )
        try:
            with socket.create_connection((pod.host, port), timeout=0.5):
                pending.pop(0)
                continue
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise LocalError(
                f"router {pod.name} did not listen on {pod.host}:{port} within {timeout:g} s;"
                f" see {log_path(state_dir, pod.name)}"
            )
        time.sleep(0.05)


def stop_pods(state_dir: Path, pods: Sequence[str], timeout: float = STOP_TIMEOUT) -> list[str]:
    """SIGTERM to each pod's router, SIGKILL to those still running after ``timeout``; the pid
    files go. Returns the pods that had to be killed."""
    pids = {pod: pid for pod in pods if (pid := running_pid(state_dir, pod)) is not None}
    killed, left = terminate(
        pids, lambda pod, pid: _is_router(pid, config_path(state_dir, pod)), timeout
    )
    if left:
        raise LocalError(f"routers still running after SIGKILL: {left}")
    for pod in pods:
        pid_path(state_dir, pod).unlink(missing_ok=True)
    return killed


# ---------------------------------------------------------------------------------------------
# up, down, status.


@dataclass(frozen=True)
class Applied:
    """What ``up`` did: the pods, what happened to each, and the planner's warnings."""

    namespace: str
    state_dir: Path
    pods: tuple[LocalPod, ...]
    actions: Mapping[str, str]
    """pod -> started | restarted (...) | updated (...) | unchanged | stopped (removed)"""
    warnings: tuple[str, ...]
    addresses: tuple[dict[str, Any], ...]
    link_routes: tuple[dict[str, Any], ...] = ()
    collectors: tuple[LocalCollector, ...] = ()
    collector_actions: Mapping[str, str] = field(default_factory=dict)
    """network -> started | restarted (...) | unchanged | stopped (...)"""
    autoscaler: str | None = None
    """started | unchanged | stopped, or None: none runs (no Router is autoscaled)"""
    handing_off: Mapping[str, int | None] = field(default_factory=dict)
    """Leaving routers of a Router with a store, left running because they still held nodes
    when ``up`` stopped waiting (pod -> nodes held; None: it did not answer)."""


def up(
    state_dir: Path,
    args: Sequence[str] = (),
    *,
    timeout: float = START_TIMEOUT,
    collector: bool = True,
    handoff_timeout: float = local_handoff.HANDOFF_TIMEOUT,
    progress: Callable[[str], None] | None = None,
) -> Applied:
    """Runs what the files declare: validates and plans them (InvalidInput, nothing changed),
    then starts, updates (config files, applied live) and stops router processes to match,
    and a telemetry collector per network once they listen (``collector``: else none runs).
    No ``args``: the files of the last ``up`` in this state directory. A Router with a store
    that scales in keeps its leaving routers until they have moved their nodes, for up to
    ``handoff_timeout`` (local/handoff.py), saying so to ``progress`` first."""
    state_dir = state_dir.resolve()
    if not args and not (state_dir / "state.json").exists():
        raise InvalidInput([f"no files given, and no earlier `up` in {state_dir} to repeat"])
    if not state_dir.exists():
        plan_files(args)  # invalid files leave nothing behind, not even the directory
        state_dir.mkdir(parents=True)
    with _locked(state_dir / "lock"):
        state = State.load(state_dir) or State()
        if args:
            files = [str(Path(arg).absolute()) for arg in args]
        else:
            files, args = state.files, [shown_path(f) for f in state.files]
        running = local_handoff.running_replicas(state.pods)
        planned = plan_files(args, state.resources, scaler_control.replicas(state_dir), running)
        if sorted(files) != sorted(state.files):
            _check_not_left_out(state_dir, state, planned)
        first = applied = None
        if planned.interim is not None:
            with _locked(MACHINE_LOCK):
                interim = dataclasses.replace(planned, plan=planned.interim)
                first = _run(state_dir, state, files, interim, timeout)
            # Outside the machine-wide lock: another state directory's `up` need not wait.
            pending = _hand_off(first, planned, handoff_timeout, progress)
            if pending:
                applied = dataclasses.replace(first, handing_off=pending)
        with _locked(MACHINE_LOCK):
            if applied is None:
                applied = _run(state_dir, state, files, planned, timeout)
                if first is not None:
                    applied = dataclasses.replace(applied, actions=_merged(first, applied))
            applied = _run_collectors(state_dir, state, applied, collector, timeout)
            return _run_autoscaler(state_dir, state, applied)


def _hand_off(
    first: Applied,
    planned: Planned,
    timeout: float,
    progress: Callable[[str], None] | None,
) -> dict[str, int | None]:
    """Waits for the leaving routers to hold nothing; what those still holding hold."""
    target = planned.plan.pods()
    leaving = {pod.name: pod for pod in first.pods if pod.name not in target}
    if progress is not None:
        progress(local_handoff.progress_line(sorted(leaving), timeout))

    def held_by(name: str) -> int | None:
        pod = leaving[name]
        endpoint = next(iter(pod.endpoints("normal") + pod.endpoints("route-container")), None)
        if endpoint is None:
            return None
        try:
            rows = management_query(
                endpoint, {NODE_ENTITY: ["name"]}, MANAGEMENT_TIMEOUT, optional={NODE_ENTITY}
            )
        except Exception:  # not answering yet (busy moving, restarting): asked again
            return None
        return local_handoff.held(name, rows)

    return local_handoff.wait_handed_off(sorted(leaving), held_by, timeout)


def _merged(first: Applied, second: Applied) -> dict[str, str]:
    """What the two steps of a hand-off did to each pod, as one word each."""
    actions = dict(first.actions)
    for pod, action in second.actions.items():
        before = actions.get(pod)
        if action == "unchanged" and before is not None:
            continue
        if before and before.startswith("updated (") and action.startswith("updated ("):
            action = f"{before[:-1]}, {action.removeprefix('updated (')}"
        actions[pod] = action
    return actions


def _check_not_left_out(state_dir: Path, state: State, planned: Planned) -> None:
    """Files other than last time's that would stop running routers are most likely a mistake
    (``up address.yaml`` meant to add an Address): refused, nothing changed."""
    wanted = planned.plan.pods()
    gone = sorted(
        {
            record["router"]
            for name, record in state.pods.items()
            if name not in wanted and running_pid(state_dir, name) is not None
        }
    )
    if gone:
        routers = state.resources.get("Router", {})
        where = ", ".join(f"{name} ({routers.get(name, {}).get('file', '?')})" for name in gone)
        before = " ".join(shown_path(f) for f in state.files)
        raise InvalidInput(
            [
                f"these files leave out running Routers {where}: name every file of the network"
                f" (last time: {before}), or stop it first with `routernet down`"
            ]
        )


def shown_path(path: str) -> str:
    """``path`` relative to the current directory when it is below it, else absolute."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _run(
    state_dir: Path, state: State, files: list[str], planned: Planned, timeout: float
) -> Applied:
    plan = planned.plan
    wanted = [pod for pod in plan.pods().values() if pod.config is not None]
    ports = {pod.name: _ports(_config(pod)) for pod in wanted}
    running = {name: pid for name in state.pods if (pid := running_pid(state_dir, name))}
    kept = {}
    for pod in wanted:
        record = state.pods.get(pod.name)
        if record is None:
            continue
        # A running router keeps its address; a stopped one too, unless something else took it.
        if pod.name in running or _bindable(record["host"], ports[pod.name]):
            kept[pod.name] = record["host"]
    # Pods going away still hold their addresses until they are stopped, below.
    in_use = {r["host"] for name, r in state.pods.items() if name in running and name not in kept}
    hosts = assign_hosts(wanted, ports, kept, lambda h, p: h not in in_use and _bindable(h, p))
    dns = {pod.host: hosts[pod.name] for pod in wanted}
    pods = [
        LocalPod(
            pod.name,
            pod.router,
            plan.router(pod.router).network,
            pod.role,
            hosts[pod.name],
            local_config(pod, hosts[pod.name], dns, state_dir=state_dir),
        )
        for pod in wanted
    ]

    actions: dict[str, str] = {}
    removed = sorted(set(state.pods) - {pod.name for pod in pods})
    restart: list[str] = []
    for pod in pods:
        old = state.pods.get(pod.name)
        if old is not None and pod.name in running and old["mode"] != pod.mode:
            restart.append(pod.name)
            actions[pod.name] = f"restarted (mode {old['mode']} -> {pod.mode})"
    stop_pods(state_dir, removed + restart)
    for name in removed:
        config_path(state_dir, name).unlink(missing_ok=True)
        actions[name] = "stopped (removed)"

    state.namespace = planned.namespace
    state.files = files
    state.resources = {}
    for item in planned.declared:
        state.resources.setdefault(item.kind, {})[item.name] = item.stored()
    state.pods = {pod.name: pod.record() for pod in pods}
    state.networks = {name: network_summary(net) for name, net in plan.networks.items()}
    state.save(state_dir)

    for pod in pods:
        path = config_path(state_dir, pod.name)
        old_config = _read_json(path)
        if "store" in pod.config:
            Path(pod.config["store"]["path"]).mkdir(parents=True, exist_ok=True)
        if old_config != pod.config:
            _write_atomically(path, json.dumps(pod.config, indent=2) + "\n")
        if pod.name in running and pod.name not in restart:
            change = describe_change(old_config or {}, pod.config)
            actions[pod.name] = f"updated ({change})" if change else "unchanged"
    spawned = {}
    for pod in pods:
        if running_pid(state_dir, pod.name) is None:
            spawned[pod.name] = _spawn(state_dir, pod.name)
            actions.setdefault(pod.name, "started")
    _wait_listening(state_dir, pods, spawned, timeout)
    addresses = tuple(a for net in state.networks.values() for a in net["addresses"])
    routes = tuple(lr for net in state.networks.values() for lr in net["linkRoutes"])
    return Applied(
        planned.namespace, state_dir, tuple(pods), actions, planned.warnings, addresses, routes
    )


def _run_collectors(
    state_dir: Path, state: State, applied: Applied, wanted_any: bool, timeout: float
) -> Applied:
    """A collector per network, started once the routers listen; one whose router changed is
    restarted, one no longer wanted stopped."""
    wanted = local_collector.plan_collectors(state_dir, applied.pods) if wanted_any else {}
    actions: dict[str, str] = {}
    stale = []
    for network in local_collector.known_networks(state_dir, state.collectors):
        if local_collector.running_pid(state_dir, network) is None:
            continue
        want = wanted.get(network)
        if want is None:
            stale.append(network)
            actions[network] = "stopped"
        elif state.collectors.get(network) != want.record():
            stale.append(network)
            actions[network] = f"restarted (now on {want.router})"
        else:
            actions[network] = "unchanged"
    local_collector.stop(state_dir, stale)
    started = {}
    for network, c in wanted.items():
        if local_collector.running_pid(state_dir, network) is None:
            started[c] = local_collector.start(state_dir, c)
            actions.setdefault(network, "started")
    state.collectors = {network: c.record() for network, c in wanted.items()}
    state.save(state_dir)
    try:
        local_collector.wait_attached(state_dir, started, timeout)
    except RuntimeError as err:
        raise LocalError(str(err)) from None
    return dataclasses.replace(
        applied, collectors=tuple(wanted.values()), collector_actions=actions
    )


def _run_autoscaler(state_dir: Path, state: State, applied: Applied) -> Applied:
    """The autoscaler runs while some Router is autoscaled by the operator (local/scaler.py)."""
    wanted = bool(scaler_control.autoscaled(state.resources))
    running = scaler_control.running_pid(state_dir) is not None
    action = None
    if wanted and not running:
        scaler_control.start(state_dir)
        action = "started"
    elif not wanted and running:
        scaler_control.stop(state_dir)
        action = "stopped"
    elif running:
        action = "unchanged"
    return dataclasses.replace(applied, autoscaler=action)


def _config(pod: PodPlan) -> RouterConfig:
    assert pod.config is not None
    return pod.config


def _ports(config: RouterConfig) -> list[int]:
    """Every port the router binds on its address: listeners and the HTTP endpoint."""
    http = config.telemetry.http
    return [lsn.port for lsn in config.listeners] + ([http.port] if http is not None else [])


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def network_summary(network: Any) -> dict[str, Any]:
    """A planned network's connections, addresses and link routes as the state file keeps them
    (``status`` shows them); the console's sources declare them in this shape, here and on
    Kubernetes (console/kubesource.py), so its pages read one shape."""
    return {
        "connections": [
            {"from": c.dialer, "to": c.listener, "role": c.role, "uplink": c.uplink}
            for c in network.connections
        ],
        "addresses": [
            {
                "name": f.name,
                "network": network.name,
                "key": f.entry.key,
                **f.entry.model_dump(mode="json", exclude_defaults=True),
                "distribution": f.entry.distribution,
            }
            for f in network.addresses
        ],
        "linkRoutes": [
            {
                "name": lr.name,
                "key": lr.key,
                "directions": list(lr.directions),
                "containerId": lr.container_id,
                "connection": None
                if lr.connection is None
                else f"{lr.connection.host}:{lr.connection.port}",
                "connector": None if lr.connector is None else lr.connector.name,
            }
            for lr in network.link_routes
        ],
    }


def describe_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """A config file's change in a few words: addresses and link routes by key, connectors by
    name, listeners by address."""
    parts: list[str] = []
    for section, what, key in (
        ("addresses", "address", _address_key),
        ("linkRoutes", "link route", lambda r: f"{_address_key(r)} {r.get('direction')}"),
        ("connectors", "connector", lambda c: c.get("name") or f"{c['host']}:{c.get('port')}"),
        ("listeners", "listener", lambda lsn: f"{lsn['host']}:{lsn['port']}"),
    ):
        before = {key(entry): entry for entry in old.get(section) or []}
        after = {key(entry): entry for entry in new.get(section) or []}
        parts += [f"{what} +{k}" for k in sorted(after.keys() - before.keys())]
        parts += [f"{what} -{k}" for k in sorted(before.keys() - after.keys())]
        changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
        parts += [f"{what} ~{k}" for k in changed]
    if old.get("router") != new.get("router"):
        parts.append("router settings")
    return ", ".join(parts)


def _address_key(entry: Mapping[str, Any]) -> str:
    return f"prefix:{entry['prefix']}" if "prefix" in entry else f"pattern:{entry.get('pattern')}"


@dataclass(frozen=True)
class Stopped:
    """What ``down`` stopped: router pods, those of them killed, collectors (by network), and
    whether an autoscaler ran."""

    routers: list[str]
    killed: list[str]
    collectors: list[str]
    autoscaler: bool = False
    console: bool = False


def down(state_dir: Path, timeout: float = STOP_TIMEOUT) -> Stopped:
    """Stops every router of the state directory, then its collectors: a router sends its
    last telemetry as it drains, and the collector must still be there to write it."""
    state_dir = state_dir.resolve()
    if not state_dir.is_dir():
        return Stopped([], [], [])
    # The console first: it would only show the routers going. Then the autoscaler, so that it
    # starts no router while they stop (and outside the lock: it may be waiting for it to scale).
    console = local_console.stop(state_dir)
    autoscaler = scaler_control.stop(state_dir)
    with _locked(state_dir / "lock"):
        state = State.load(state_dir) or State()
        # Pid files of pods the state no longer lists (an interrupted `up`) are stopped too.
        pods = set(state.pods)
        if (state_dir / "pids").is_dir():
            pods |= {p.stem for p in (state_dir / "pids").glob("*.pid")}
        stopped = sorted(pod for pod in pods if running_pid(state_dir, pod) is not None)
        # The routers collectors receive from go last: every router sends its window so far
        # as it starts to drain, and a collector's own router, draining too, would withdraw
        # the collector's address from the network before the others' records got there.
        # Edges first, for the same reason: an edge's last window goes up through its uplink
        # interior, which must still be there to pass it on.
        last = {record.get("router") for record in state.collectors.values()} & pods
        edges = {name for name in pods if state.pods.get(name, {}).get("mode") == "edge"} - last
        killed = sorted(
            stop_pods(state_dir, sorted(edges), timeout)
            + stop_pods(state_dir, sorted(pods - edges - last), timeout)
            + stop_pods(state_dir, sorted(last), timeout)
        )
        networks = local_collector.known_networks(state_dir, state.collectors)
        collectors = [n for n in networks if local_collector.running_pid(state_dir, n)]
        local_collector.stop(state_dir, networks)
        return Stopped(stopped, killed, collectors, autoscaler, console)


CONNECTION_ATTRIBUTES = ["identity", "container", "role", "dir", "host"]
LINK_ATTRIBUTES = ["name", "linkDir", "connectionId"]
NODE_ATTRIBUTES = ["id", "nextHop", "cost"]
NODE_ENTITY = "io.routernet.node"
"""The queues and topics a router hosts (router/nodes/): only their host lists them."""
HOSTED_NODE_ATTRIBUTES = [
    "name",
    "nodeType",
    "router",
    "depth",
    "bytes",
    "consumers",
    "producers",
    "enqueued",
    "dequeued",
    "deadLettered",
    "expired",
    "durable",
]
ADDRESS_ATTRIBUTES = [
    "key",
    "distribution",
    "subscriberCount",
    "remoteCount",
    "remoteHostRouters",
    "deliveriesIngress",
    "deliveriesEgress",
]


def status(state_dir: Path, timeout: float = MANAGEMENT_TIMEOUT) -> dict[str, Any] | None:
    """The network as the routers see it (their ``$management``), or None when this state
    directory has none. JSON-ready; ``routernet status --json`` prints it as is."""
    state_dir = state_dir.resolve()
    state = State.load(state_dir) if state_dir.is_dir() else None
    if state is None:
        return None
    routers = []
    nodes: list[dict[str, Any]] = []
    for name, record in sorted(state.pods.items()):
        pid = running_pid(state_dir, name)
        entry: dict[str, Any] = {
            "id": name,
            **record,
            "pid": pid,
            "running": pid is not None,
            "log": str(log_path(state_dir, name)),
            "connections": [],
            "knownRouters": [],
            "addresses": [],
            "error": None,
        }
        endpoint = next(iter(record["clientEndpoints"] + record["routeContainerEndpoints"]), None)
        if pid is None:
            entry["error"] = "not running"
        elif endpoint is None:
            entry["error"] = "no client listener to ask $management"
        else:
            entities = {
                "connection": CONNECTION_ATTRIBUTES,
                "router.node": NODE_ATTRIBUTES,
                "router.address": ADDRESS_ATTRIBUTES,
                NODE_ENTITY: HOSTED_NODE_ATTRIBUTES,
            }
            if record["mode"] == "edge":
                entities["router.link"] = LINK_ATTRIBUTES  # where its uplink is
            try:
                # Asked of every router (which hosts what is the routers' hash): one that does
                # not know the type (an older router) answers 400 and simply hosts nothing.
                rows = management_query(endpoint, entities, timeout, optional={NODE_ENTITY})
            except Exception as err:  # any failure is the router's status, not ours
                entry["error"] = f"$management at {endpoint}: {err or type(err).__name__}"
            else:
                entry.update(_management_view(rows))
                nodes += hosted_nodes(name, rows)
                if record["mode"] == "edge":
                    entry["uplink"] = edge_uplink(rows)
        if record["mode"] == "edge":
            entry.setdefault("uplink", None)  # unknown: the edge did not answer
        routers.append(entry)
    networks = state.networks
    return {
        "stateDir": str(state_dir),
        "namespace": state.namespace,
        "files": state.files,
        "routers": routers,
        "collectors": local_collector.status(state_dir, state.collectors),
        "autoscaler": scaler_control.status(state_dir),
        "console": local_console.running_url(state_dir),
        "addresses": [a for net in networks.values() for a in net["addresses"]],
        "linkRoutes": [lr for net in networks.values() for lr in net["linkRoutes"]],
        "nodes": sorted(nodes, key=lambda n: (n["name"], n["router"])),
        "connections": [
            {**c, "network": name} for name, net in networks.items() for c in net["connections"]
        ],
    }


def _management_view(rows: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    connections = [
        {"peer": r["container"], "role": r["role"], "dir": r["dir"], "host": r["host"]}
        for r in rows["connection"]
        if r["role"] in ("inter-router", "edge")
    ]
    connections.sort(key=lambda c: (c["role"], c["peer"] or ""))
    nodes = [
        {"id": r["id"], "nextHop": r["nextHop"], "cost": r["cost"]}
        for r in rows["router.node"]
        if r["cost"] is not None
    ]
    addresses = [
        {
            "address": r["key"][2:],
            "key": r["key"],
            "distribution": r["distribution"],
            "localConsumers": r["subscriberCount"],
            "remoteRouters": r["remoteCount"],
            "remoteHostRouters": r["remoteHostRouters"],
            "ingress": r["deliveriesIngress"],
            "egress": r["deliveriesEgress"],
        }
        for r in rows["router.address"]
        # Mobile addresses: the applications' (_edge/<edge> is the network's own).
        if r["key"].startswith("M0") and not r["key"].startswith("M0_")
    ]
    addresses.sort(key=lambda a: a["address"])
    return {"connections": connections, "knownRouters": nodes, "addresses": addresses}


def hosted_nodes(router: str, rows: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The queues and topics ``router`` hosts, from its ``io.routernet.node`` rows (none when
    it does not know the type). ``type`` for the row's ``nodeType``, as the Address spells it;
    the host is the router's own word, or the router asked."""
    return [
        {
            "name": r["name"],
            "type": r["nodeType"],
            "router": r["router"] or router,
            **{a: r[a] for a in HOSTED_NODE_ATTRIBUTES[3:]},
        }
        for r in rows.get(NODE_ENTITY, [])
    ]


def edge_uplink(rows: Mapping[str, list[dict[str, Any]]]) -> str | None:
    """The interior an edge routes through, as the edge itself has it (its ``connection`` and
    ``router.link`` rows): the peer of the edge connection that carries its anonymous sender
    ``edge.uplink.<edge-id>`` (router/edges/uplink.py). None while it has none.

    Not inferred from the interiors (which one has a consumer for ``_edge/<edge-id>``): that
    consumer is the edge's, but an interior can hold one the edge no longer uses for as long as
    the edge's detach takes to arrive, and a view put together from several routers' answers is
    never quite of one moment."""
    edge_connections = {
        r["identity"]: r["container"]
        for r in rows["connection"]
        if r["role"] == "edge" and r["dir"] == "out"
    }
    for link in rows["router.link"]:
        if link["linkDir"] == "out" and (link["name"] or "").startswith("edge.uplink."):
            peer = edge_connections.get(link["connectionId"])
            if peer is not None:
                return str(peer)
    return None


def management_query(
    endpoint: str,
    entities: Mapping[str, list[str]],
    timeout: float = MANAGEMENT_TIMEOUT,
    optional: Collection[str] = (),
) -> dict[str, list[dict[str, Any]]]:
    """QUERY each entity type (Dispatch's short names, e.g. ``router.address``, or a full one
    of routernet's own, ``io.routernet.*``) of the router at ``endpoint`` (host:port), as
    qdstat does: entity -> rows as dicts. An ``optional`` type the router does not know (it
    answers 400, as Dispatch does) is left out of the result rather than failing the query."""
    from proton import Message
    from proton.utils import BlockingConnection

    conn = BlockingConnection(f"amqp://{endpoint}", timeout=timeout)
    try:
        replies = conn.create_receiver(None, dynamic=True)
        reply_to = replies.link.remote_source.address
        requests = conn.create_sender("$management")
        result: dict[str, list[dict[str, Any]]] = {}
        for number, (entity, attributes) in enumerate(entities.items()):
            requests.send(
                Message(
                    reply_to=reply_to,
                    correlation_id=number,
                    body={"attributeNames": attributes},
                    properties={
                        "operation": "QUERY",
                        "type": "org.amqp.management",
                        "name": "self",
                        "entityType": _entity_type(entity),
                    },
                )
            )
            response = replies.receive(timeout)  # pre-settled: nothing to accept
            code = (response.properties or {}).get("statusCode")
            if code == 400 and entity in optional:
                continue
            if code != 200:
                why = (response.properties or {}).get("statusDescription")
                raise LocalError(f"QUERY {entity}: {code} {why}")
            names = response.body["attributeNames"]
            result[entity] = [
                dict(zip(names, row, strict=True)) for row in response.body["results"]
            ]
        return result
    finally:
        conn.close()


def _entity_type(entity: str) -> str:
    return entity if entity.startswith("io.routernet.") else f"org.apache.qpid.dispatch.{entity}"
