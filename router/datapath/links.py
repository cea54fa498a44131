"""What the router remembers about links and in-flight deliveries.

A `Link` wraps one pn_link_t. Incoming links (router receives: a client's sender) carry credit
bookkeeping; outgoing links (router sends: a client's receiver) carry the queue of deliveries
waiting for credit and the unsettled deliveries awaiting an outcome. A `Forward` ties one
unsettled incoming delivery to the outgoing deliveries made from it, so that outcomes and
settlement travel back to the sender and nothing is ever dropped silently.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from router.addressing.rewrite import Rewrite
    from router.datapath.forwarder import AddressEntry, Message
    from router.datapath.streaming import Stream
    from router.policy.admission import Connection as PolicedConnection
    from router.telemetry.flows import FlowCounters
    from router.transport.connection import Connection


class Forward:
    """One unsettled incoming delivery and the outgoing copies made of it.

    `pending` counts outgoing copies without an outcome yet; `outcome` is the strongest outcome
    seen so far. For multicast, the sender's outcome is decided when all copies are done:
    rejected if any consumer rejected, else accepted if any accepted (Dispatch's documented rule),
    else modified if any modified, else released. `in_d` is None once the sender's delivery is
    settled or gone.
    """

    __slots__ = ("arrived", "flow", "in_d", "in_link", "outcome", "pending")

    def __init__(self, in_d: Any, in_link: Link, arrived: float) -> None:
        self.in_d = in_d
        self.in_link = in_link
        self.arrived = arrived
        self.pending = 0
        self.outcome = 0
        # The flow counters (router/telemetry/flows.py) of the copy this router handed to a
        # client, where that client's outcome is counted; None otherwise.
        self.flow: FlowCounters | None = None


class Queued:
    """A delivery waiting for credit on an outgoing link (or held for a consumer to appear)."""

    __slots__ = ("counted", "deadline", "fwd", "msg", "origin")

    def __init__(
        self, msg: Message, fwd: Forward | None, origin: Link | None, deadline: float = 0.0
    ) -> None:
        self.msg = msg
        self.fwd = fwd
        self.origin = origin
        self.deadline = deadline
        # whether it holds back `origin`'s credit while it waits (see Forwarder.block)
        self.counted = False


class Link:
    __slots__ = (
        "accepted",
        "address",
        "anonymous",
        "backlog",
        "capacity",
        "conn",
        "delayed1",
        "delayed10",
        "delivered",
        "entry",
        "identity",
        "incoming",
        "kind",
        "modified",
        "name",
        "pairs",
        "partial",
        "peer",
        "pn",
        "policy",
        "presettle",
        "presettled",
        "priority",
        "queue",
        "rejected",
        "released",
        "rewrite",
        "stream",
        "tag",
        "unsettled",
        "waiting",
    )

    def __init__(self, pn: Any, conn: Connection, incoming: bool, identity: int) -> None:
        self.pn = pn
        self.conn = conn
        self.incoming = incoming
        self.identity = identity
        self.name = ""
        self.address: str | None = None
        self.anonymous = False
        # "endpoint" (a client's), an inter-router link ("control" or "data"), "edge", or
        # "routed": one of a link-routed pair (router/linkroutes/relay.py)
        self.kind = "endpoint"
        self.priority = 4
        self.entry: AddressEntry | None = None
        self.capacity = conn.link_capacity
        # incoming: deliveries of this link still in the router (queued or held) — credit is
        # only issued for what is left of `capacity`, which bounds router memory per sender.
        self.backlog = 0
        self.partial: bytearray | None = None
        # the large delivery this link is streaming in or out (router/datapath/streaming.py)
        self.stream: Stream | None = None
        # outgoing: the consumer asked for snd-settle-mode settled (at most once)
        self.presettle = False
        # outgoing: deliveries waiting for credit, and tag counter
        self.queue: deque[Queued] = deque()
        self.tag = 0
        # pn_delivery_t -> Forward for deliveries without a final outcome yet (both directions)
        self.unsettled: dict[Any, Forward] = {}
        self.delivered = 0
        self.presettled = 0
        self.accepted = 0
        self.rejected = 0
        self.released = 0
        self.modified = 0
        # incoming deliveries settled more than 1 s / 10 s after they arrived (qdstat -l)
        self.delayed1 = 0
        self.delayed10 = 0
        # routed links: the partner link, delivery -> partner delivery, and transfers that
        # wait for the partner's credit
        self.peer: Link | None = None
        self.pairs: dict[Any, Any] = {}
        self.waiting: deque[tuple[bytes | bytearray, Any]] = deque()
        # a routed link's far half attached under another address than its partner's peer
        # asked for: how to put the far end's answer back (router/addressing/rewrite.py)
        self.rewrite: Rewrite | None = None
        # a client's link on a connection a vhost policy admitted (router/policy/): what it
        # may send; None elsewhere, and then the data path checks nothing more
        self.policy: PolicedConnection | None = None

    @property
    def outstanding(self) -> int:
        """Deliveries given to this consumer that it has not finished (queued + unsettled)."""
        return len(self.queue) + len(self.unsettled)
