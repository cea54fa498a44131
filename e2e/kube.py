"""kubectl and helm as the end-to-end suite drives them: what a user types, with deadlines.

Every command has a timeout, every wait a deadline, and what failed comes back with what it
printed; `diagnose` says, for a failure, where each pod of a namespace stands (phase, why it is
not ready, restarts, the last lines of its log) and the namespace's recent warnings.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class Failed(AssertionError):
    """A command or a wait that did not come out as it should; says what it saw."""


def tool(name: str) -> str:
    """kubectl or helm from PATH; helm also from the test suite's copy (make test fetches it)."""
    found = shutil.which(name)
    if found is None and name == "helm" and (ROOT / "tests/helm/bin/helm").exists():
        found = str(ROOT / "tests/helm/bin/helm")
    if found is None:
        raise Failed(f'{name} is not on PATH (with the kit: eval "$(kube-aid env)")')
    return found


def run(
    args: Sequence[str],
    *,
    input: str | None = None,
    timeout: float = 60.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    command = [tool(args[0]), *args[1:]]
    try:
        done = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise Failed(f"{' '.join(args)}: no answer within {timeout:.0f} s") from err
    if check and done.returncode != 0:
        raise Failed(f"{' '.join(args)} exited {done.returncode}: {done.stderr or done.stdout}")
    return done


def kubectl(*args: str, **options: Any) -> str:
    return run(["kubectl", *args], **options).stdout


def apply(namespace: str, manifest: str | dict[str, Any] | list[dict[str, Any]]) -> None:
    """Server-side apply, as the README's commands do; objects may be given as dicts."""
    if not isinstance(manifest, str):
        docs = manifest if isinstance(manifest, list) else [manifest]
        manifest = "\n---\n".join(json.dumps(doc) for doc in docs)
    kubectl("-n", namespace, "apply", "--server-side", "-f", "-", input=manifest)


def get(namespace: str, kind: str, name: str | None = None) -> Any:
    """An object (or the list of a kind) as JSON; namespace "" for cluster-wide kinds."""
    where = ["-n", namespace] if namespace else []
    return json.loads(kubectl(*where, "get", kind, *([name] if name else []), "-o", "json"))


def exists(namespace: str, kind: str, name: str) -> bool:
    done = run(["kubectl", "-n", namespace, "get", kind, name], check=False)
    return done.returncode == 0


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 2.0) -> Any:
    """Polls ``check`` until it returns something true; that value, or Failed saying what was
    awaited and what ``check`` last said (its last exception, if it raised)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = value
        except Failed as err:
            last = err
        if time.monotonic() > deadline:
            raise Failed(f"{what}: not within {timeout:.0f} s (last: {last})")
        time.sleep(every)


def ready_routers(namespace: str, names: Sequence[str]) -> bool:
    routers = {r["metadata"]["name"]: r for r in get(namespace, "routers")["items"]}
    return all(
        name in routers and condition(routers[name], "Ready").get("status") == "True"
        for name in names
    )


# --- client pods ------------------------------------------------------------------------------


def client_pod(
    namespace: str,
    name: str,
    image: str,
    command: Sequence[str],
    volumes: Sequence[tuple[str, dict[str, Any], str]] = (),
) -> dict[str, Any]:
    """A pod that runs one command of the router image to its end (``volumes``: name, source,
    mount path)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"e2e": "client"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "client",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": list(command),
                    "volumeMounts": [
                        {"name": v, "mountPath": path, "readOnly": True} for v, _, path in volumes
                    ],
                }
            ],
            "volumes": [{"name": v, **source} for v, source, _ in volumes],
        },
    }


CLIENTS_MOUNT = "/e2e"
# How long a client pod may take to attach: scheduling, the container's start and Python's
# imports, which on a 2-core node under other load took over a minute once.
CLIENT_ATTACH_SECONDS = 180


def routernet(namespace: str, name: str, image: str, *args: str) -> str:
    """A pod running ``routernet ARGS`` (the router image's CLI), started."""
    return start(namespace, client_pod(namespace, name, image, ["routernet", *args]))


def peer(namespace: str, name: str, image: str, clients: str, *args: str) -> str:
    """A pod running e2e/clients/peer.py ARGS from the ConfigMap ``clients``, started."""
    volume = ("clients", {"configMap": {"name": clients}}, CLIENTS_MOUNT)
    command = ["python", f"{CLIENTS_MOUNT}/peer.py", *args]
    return start(namespace, client_pod(namespace, name, image, command, [volume]))


def start(namespace: str, pod: dict[str, Any]) -> str:
    name = pod["metadata"]["name"]
    if exists(namespace, "pod", name):
        kubectl("-n", namespace, "delete", "pod", name, "--wait=true", timeout=60)
    apply(namespace, pod)
    return str(name)


def phase(namespace: str, name: str) -> str:
    return str((get(namespace, "pod", name).get("status") or {}).get("phase", ""))


def finish(namespace: str, name: str, timeout: float) -> str:
    """Waits for a client pod to end; its log, or Failed with it when it did not succeed."""
    ended = wait_for(
        f"pod {namespace}/{name} to finish",
        lambda: phase(namespace, name) in ("Succeeded", "Failed") and phase(namespace, name),
        timeout,
    )
    log = kubectl("-n", namespace, "logs", name)
    if ended != "Succeeded":
        raise Failed(f"pod {namespace}/{name} {ended}:\n{log}")
    return log


def summary(log: str) -> dict[str, Any]:
    """The JSON summary line a routernet command prints last (progress goes before it)."""
    for line in reversed(log.splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    raise Failed(f"no JSON summary in:\n{log}")


def log_has(namespace: str, pod: str, text: str) -> bool:
    done = run(["kubectl", "-n", namespace, "logs", pod], check=False)
    return text in done.stdout


# --- when something failed --------------------------------------------------------------------


def diagnose(namespace: str, tail: int = 15) -> str:
    """Each pod of the namespace: phase, why it is not ready, restarts, its last log lines
    (the previous container's too when it restarted); and the namespace's warning events."""
    done = run(["kubectl", "-n", namespace, "get", "pods", "-o", "json"], check=False)
    if done.returncode != 0:
        return f"namespace {namespace}: {done.stderr.strip()}"
    lines = [f"--- namespace {namespace}"]
    for pod in json.loads(done.stdout)["items"]:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        lines.append(f"pod {name}: phase {status.get('phase')}")
        for cond in status.get("conditions") or []:
            if cond.get("status") != "True":
                lines.append(
                    f"  {cond['type']} {cond['status']}: {cond.get('reason', '')}"
                    f" {cond.get('message', '')}".rstrip()
                )
        for container in status.get("containerStatuses") or []:
            state = container.get("state") or {}
            for how, detail in state.items():
                reason = detail.get("reason") or ""
                lines.append(
                    f"  container {container['name']}: {how} {reason},"
                    f" restarts {container.get('restartCount', 0)}"
                )
            if not container.get("ready"):
                for previous in [] if not container.get("restartCount") else ["--previous"]:
                    log = run(
                        ["kubectl", "-n", namespace, "logs", name, previous, f"--tail={tail}"],
                        check=False,
                    )
                    lines.append(f"  last log lines (previous run):\n{_indent(log.stdout)}")
                log = run(["kubectl", "-n", namespace, "logs", name, f"--tail={tail}"], check=False)
                lines.append(f"  last log lines:\n{_indent(log.stdout or log.stderr)}")
    claims = run(["kubectl", "-n", namespace, "get", "pvc", "-o", "json"], check=False)
    for claim in json.loads(claims.stdout or '{"items": []}')["items"]:
        claim_phase = (claim.get("status") or {}).get("phase")
        if claim_phase != "Bound":
            lines.append(f"claim {claim['metadata']['name']}: {claim_phase}")
    events = run(
        ["kubectl", "-n", namespace, "get", "events", "--field-selector", "type=Warning"],
        check=False,
    )
    lines.append(f"warning events:\n{_indent(events.stdout or events.stderr)}")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.strip().splitlines()) or "    (none)"
