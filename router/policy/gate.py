"""The policy carried out on Proton's objects, at each point the engine reaches.

The engine asks at the socket (accepted), at the peer's Open before answering it (opening),
at each session and link the peer begins (session, attach) and as they go, for each message on
a policed link (message, and oversize while a large one streams), and when the connection is
gone (closed). Refusals are worded as Dispatch words them on the wire: an Open answered and
closed at once with the condition, a session begun and ended, a link attached with a null
terminus and detached closed, a message rejected. The actions that belong to the engine
(detaching a link, rejecting a message, closing a connection) are handed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from router.log import get_logger
from router.policy import admission
from router.policy.admission import Denial, Policy
from router.transport.pn import NULL, data_get, lib, set_condition, text

if TYPE_CHECKING:
    from router.datapath.links import Link
    from router.transport.connection import Connection

log = get_logger("policy")

ANONYMOUS = "anonymous"


class Gate:
    def __init__(
        self,
        policy: Policy,
        *,
        refuse_link: Callable[[Link, str, str], None],
        detach: Callable[[Link], None],
        refuse_message: Callable[[Link, Any, bool, str, str], None],
        close_connection: Callable[[Connection], None],
    ) -> None:
        self.policy = policy
        self.refuse_link = refuse_link
        self.detach = detach
        self.refuse_message = refuse_message
        self.close_connection = close_connection
        self.sessions: dict[Any, Connection] = {}
        """The sessions counted against their connection's maxSessions."""

    def configure(self, settings: Any, vhosts: Any) -> None:
        self.policy.configure(settings, vhosts)

    # ----- connections ---------------------------------------------------------------------

    def accepted(self, conn: Connection) -> bool:
        """A socket a listener accepted: False when it is over maxConnections (the engine
        closes it before any AMQP)."""
        if not self.policy.accept():
            log.info("connection.denied", peer=conn.host, reason="global connection count")
            return False
        conn.policed = True
        return True

    def opening(self, conn: Connection) -> bool:
        """The peer's Open, before ours answers it: False when its vhost refuses it (then
        answered with the condition and closed)."""
        if not self.policy.governs or not conn.inbound or conn.role == "inter-router":
            return True
        t, c = conn.transport, conn.pn
        user = text(lib.pn_transport_get_user(t)) or ANONYMOUS
        vhost = conn.listener.policyVhost or text(lib.pn_connection_remote_hostname(c)) or ""
        host = conn.host.rsplit(":", 1)[0]
        found = self.policy.admit(user, vhost, host, conn.host)
        if isinstance(found, Denial):
            log.info(
                "connection.denied",
                conn=conn.conn_id,
                user=user,
                rhost=host,
                vhost=vhost,
                reason=found.reason,
            )
            set_condition(lib.pn_connection_condition(c), found.condition, found.description)
            lib.pn_connection_close(c)
            conn.closing = True
            return False
        conn.policy = found
        s = found.settings
        if s.maxFrameSize:
            lib.pn_transport_set_max_frame(t, s.maxFrameSize)
        if s.maxSessions:
            lib.pn_transport_set_channel_max(t, s.maxSessions - 1)
        log.debug(
            "connection.admitted", conn=conn.conn_id, user=user, vhost=vhost, group=found.group.name
        )
        return True

    def closed(self, conn: Connection) -> None:
        if conn.policy is not None:
            conn.policy.close()
        if conn.policed:
            conn.policed = False
            self.policy.released()
        for s in [s for s, owner in self.sessions.items() if owner is conn]:
            del self.sessions[s]

    # ----- sessions and links --------------------------------------------------------------

    def session(self, conn: Connection, s: Any) -> bool:
        """A session the peer began: False when refused (then begun and ended at once)."""
        policed = conn.policy
        if policed is None:
            return True
        denial = policed.begin()
        if denial is not None:
            log.info("session.denied", conn=conn.conn_id, user=policed.user, reason=denial.reason)
            set_condition(lib.pn_session_condition(s), denial.condition, denial.description)
            lib.pn_session_close(s)
            return False
        self.sessions[s] = conn
        window = policed.settings.maxSessionWindow
        if window:
            lib.pn_session_set_incoming_capacity(s, window)
        return True

    def session_ended(self, s: Any) -> None:
        conn = self.sessions.pop(s, None)
        if conn is not None and conn.policy is not None:
            conn.policy.ended()

    def attach(self, link: Link) -> bool:
        """A link the peer attached on a policed connection: False when refused (then
        detached with the condition)."""
        policed = link.conn.policy
        if policed is None:
            return True
        p = link.pn
        sending = link.incoming  # the peer sends on it
        terminus = lib.pn_link_remote_target(p) if sending else lib.pn_link_remote_source(p)
        address = text(lib.pn_terminus_get_address(terminus))
        dynamic = bool(lib.pn_terminus_is_dynamic(terminus))
        denial = policed.attach(sending, address, dynamic, _first_capability(terminus))
        if denial is not None:
            log.info(
                "link.denied",
                conn=link.conn.conn_id,
                name=link.name,
                user=policed.user,
                address=address,
                reason=denial.reason,
            )
            self.refuse_link(link, denial.condition, denial.description)
            return False
        link.policy = policed
        if sending and policed.max_message_size:
            lib.pn_link_set_max_message_size(p, policed.max_message_size)
        return True

    def detached(self, link: Link) -> None:
        policed = link.policy
        if policed is not None:
            link.policy = None
            policed.detached(link.incoming)

    # ----- messages ------------------------------------------------------------------------

    def message(
        self, link: Link, d: Any, size: int, to: str | None, user_id: str | None, presettled: bool
    ) -> bool:
        """A whole message on a policed link: False when refused (then rejected, or the
        connection closed for one over maxMessageSize)."""
        policed = link.policy
        assert policed is not None
        if policed.max_message_size and size > policed.max_message_size:
            self.oversize(link, d)
            return False
        if link.anonymous and to is not None and not policed.target_allowed(to):
            log.info("message.denied", conn=link.conn.conn_id, user=policed.user, to=to)
            self.refuse_message(
                link, d, presettled, admission.UNAUTHORIZED, admission.TARGET_DENIED
            )
            return False
        if not policed.user_id_allowed(user_id):
            self.refuse_message(
                link, d, presettled, admission.UNAUTHORIZED, admission.USER_ID_DENIED
            )
            return False
        return True

    def oversize(self, link: Link, d: Any) -> None:
        """A message over maxMessageSize: rejected, its link closed and its connection closed
        (amqp:connection:forced), as Dispatch does; what of it was already passed on is
        aborted by the caller."""
        policed = link.policy
        assert policed is not None
        policed.oversize()
        log.warning(
            "message.oversize",
            conn=link.conn.conn_id,
            link=link.identity,
            user=policed.user,
            limit=policed.max_message_size,
        )
        if not lib.pn_delivery_settled(d):
            local = lib.pn_delivery_local(d)
            set_condition(
                lib.pn_disposition_condition(local),
                admission.MESSAGE_SIZE,
                admission.MESSAGE_SIZE_DESCRIPTION,
            )
            lib.pn_delivery_update(d, lib.PN_REJECTED)
        lib.pn_delivery_settle(d)
        conn = link.conn
        self.detach(link)
        set_condition(
            lib.pn_connection_condition(conn.pn),
            admission.FORCED,
            admission.MESSAGE_SIZE_DESCRIPTION,
        )
        self.close_connection(conn)

    # ----- what management and /metrics show -----------------------------------------------

    def rows(self) -> dict[str, list[dict[str, Any]]]:
        """Dispatch's policy, vhost and vhostStats rows."""
        policy = self.policy
        settings = policy.settings
        counters = policy.counters
        policy_row = {
            "maxConnections": settings.maxConnections,
            "maxMessageSize": settings.maxMessageSize,
            "enableVhostPolicy": settings.enableVhostPolicy,
            "enableVhostNamePatterns": settings.enableVhostNamePatterns,
            "policyDir": "",
            "defaultVhost": settings.defaultVhost,
            "connectionsProcessed": counters.connectionsProcessed,
            "connectionsDenied": counters.connectionsDenied,
            "connectionsCurrent": counters.connectionsCurrent,
            "linksDenied": counters.linksDenied,
            "maxMessageSizeDenied": counters.maxMessageSizeDenied,
            "totalDenials": counters.totalDenials,
        }
        vhosts = [ruleset.settings.as_dict() for ruleset in policy.rulesets.values()]
        stats = [s.row() for s in policy.stats.values()]
        return {"policy": [policy_row], "vhost": vhosts, "vhostStats": stats}


def _first_capability(terminus: Any) -> str | None:
    found = data_get(lib.pn_terminus_capabilities(terminus)) if terminus != NULL else None
    if isinstance(found, (list, tuple)):
        found = found[0] if found else None
    return str(found) if found is not None else None
