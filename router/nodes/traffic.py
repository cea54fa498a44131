"""A hosted node's traffic as flow rows (router/telemetry/flows.py's `node_row`), at its host.

A message put into a node ends a trip at the host, and one a consumer takes starts another
there, so the host counts both: `put` the first, from the router where the producer's link (or
message) entered the network, with the node's answer; `sent` and `settled` the second, to the
router of the consumer's link, with the consumer's outcome. The routed data path never sees
these messages (links to a node are link-routed to its host), so without this a queue's
traffic would be in no flow record. Nothing is counted with telemetry off (no flow table).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from router.datapath.forwarder import ACCEPTED, REJECTED, RELEASED

if TYPE_CHECKING:
    from router.nodes.attachment import Attachment
    from router.nodes.hosting import Nodes

IN = "in"
OUT = "out"


def put(
    nodes: Nodes, node: str, ingress: str, size: int, outcome: int | None, sample: int = 0
) -> None:
    """A message into `node` from `ingress`: ACCEPTED or REJECTED by the node, None when it
    came pre-settled; `sample` is the ingress router's stamp on a sampled routed message."""
    flows = nodes.router.fwd.flows
    if flows is None:
        return
    row = flows.node_row(node, ingress, nodes.router.id, IN)
    row.deliveries += 1
    row.bytes += size
    if outcome is None:
        row.presettled += 1
    elif outcome == ACCEPTED:
        row.accepted += 1
    else:
        row.rejected += 1
    if sample:
        row.observe((time.time_ns() - sample) / 1000.0)


def sent(nodes: Nodes, att: Attachment, size: int, presettled: bool) -> None:
    """A message out of the node to the consumer of `att` (a router's own link moving the node
    elsewhere is not a consumer: not counted)."""
    flows = nodes.router.fwd.flows
    if flows is None or att.router is None:
        return
    row = flows.node_row(att.node.name, nodes.router.id, att.router, OUT)
    row.deliveries += 1
    row.bytes += size
    if presettled:
        row.presettled += 1


def settled(nodes: Nodes, att: Attachment, state: int) -> None:
    """The consumer's outcome of a message `sent` to it; MODIFIED too for one its link took
    away with it (maybe processed: a failed attempt)."""
    flows = nodes.router.fwd.flows
    if flows is None or att.router is None:
        return
    row = flows.node_row(att.node.name, nodes.router.id, att.router, OUT)
    if state == ACCEPTED:
        row.accepted += 1
    elif state == RELEASED:
        row.released += 1
    elif state == REJECTED:
        row.rejected += 1
    else:
        row.modified += 1
