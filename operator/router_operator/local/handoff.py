"""`routernet up` scaling in a Router with a store: its leaving routers hand their nodes off
before they stop, as its pods do on Kubernetes (planning/handoff.py).

``up`` first rewrites every config with the hosts that stay, leaving the others running (the
plan's ``interim``, local/files.py); each leaving router, a host no more, sends what it holds
to the new hosts (router/nodes/moving.py). Here ``up`` waits, a bounded time, until each holds
no node, as its ``$management`` lists them (``io.routernet.node``: the nodes a router holds,
the ones its clients made aside, as `Nodes.held` counts them), and only then stops them. A
router that does not get there in time is left running, and the next ``up`` (the same plan:
the state still lists it) waits for it again. The pods a Router has are those the state lists
(its StatefulSet's replicas, as it were), running or not: one that was stopped is started
again first, since its store may hold messages that nothing else can move.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from router.config.sources import FILE_CHECK_SECONDS
from router.management.agent import HOSTED_NODE

HANDOFF_TIMEOUT = 60.0
"""How long ``up`` waits for the leaving routers; they keep running after it."""
POLL_SECONDS = 0.5
SETTLE_SECONDS = 10 * FILE_CHECK_SECONDS + 1.0
"""A router looks at its config file every FILE_CHECK_SECONDS and has a changed one validated by
a child process (~0.3 s, more on a busy machine): after this, one that holds nothing has read
that it hosts nothing either, and will not make a node again."""
NODE_ENTITY = HOSTED_NODE

_ORDINAL = re.compile(r"^(?P<router>.+)-(?P<ordinal>0|[1-9][0-9]*)$")

Held = Callable[[str], int | None]
"""The nodes a pod's router holds now; None when it does not answer."""


def running_replicas(pods: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Per Router, the pods a state lists (pod name -> record with its ``router``): one more
    than the highest ordinal, as a StatefulSet's replicas."""
    replicas: dict[str, int] = {}
    for name, record in pods.items():
        match = _ORDINAL.match(name)
        router = record.get("router")
        if match is None or match["router"] != router:
            continue
        replicas[router] = max(replicas.get(router, 0), int(match["ordinal"]) + 1)
    return replicas


def held(pod: str, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> int:
    """The nodes a router holds from its ``io.routernet.node`` rows (none: it knows no such
    type), but those its clients made (``_topo/0/<router>/...``), which go with their links."""
    made = f"_topo/0/{pod}/"
    return sum(1 for row in rows.get(NODE_ENTITY, ()) if not str(row["name"]).startswith(made))


def wait_handed_off(
    pods: Sequence[str],
    held_by: Held,
    timeout: float = HANDOFF_TIMEOUT,
    *,
    settle: float = SETTLE_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, int | None]:
    """Asks each pod's router until it holds no node, from ``settle`` seconds after their
    configs changed (now) until ``timeout``. Returns those still holding, with what they hold
    (None: no answer); empty once every one is done."""
    started = clock()
    pending: dict[str, int | None] = dict.fromkeys(pods)
    while pending:
        if clock() - started >= settle:
            for pod in list(pending):
                count = held_by(pod)
                if count == 0:
                    del pending[pod]
                else:
                    pending[pod] = count
            if not pending:
                break
        if clock() - started >= timeout:
            break
        sleep(POLL_SECONDS)
    return pending


def progress_line(pods: Sequence[str], timeout: float) -> str:
    """What ``up`` says before it waits."""
    who = f"{pods[0]} moves its" if len(pods) == 1 else f"{', '.join(pods)} move their"
    return (
        f"{who} queues and topics to the routers that stay before stopping"
        f" (waiting up to {timeout:g} s)"
    )


def left_running_line(pending: Mapping[str, int | None]) -> str:
    """What ``up`` says of leaving routers it waited for in vain."""
    parts = [
        f"{pod} {'did not answer' if n is None else f'still holds {n} node' + 's' * (n != 1)}"
        for pod, n in sorted(pending.items())
    ]
    return (
        f"{'; '.join(parts)}: left running, a host no more, so that nothing is lost; run `up`"
        " again to stop what has moved everything by then"
    )
