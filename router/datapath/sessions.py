"""The session this router begins on a peer's connection for the links it attaches there
itself (a routed link's far half, an edge's proxy links): one per connection, begun on first
use and kept for the next link.

The peer may end that session at any time (RabbitMQ ends a session on an address it does not
take; an interior ends an edge's), and the engine then frees Proton's object. So a session
kept here is used again only while its connection still lists it, open on our side and not
ended by the peer; otherwise another is begun. A freed session is never touched: attaching a
link on one crashed the router.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from router.datapath.streaming import open_session
from router.transport.pn import NULL, lib

if TYPE_CHECKING:
    from router.transport.connection import Connection


class OwnSessions:
    def __init__(self) -> None:
        self._kept: dict[Connection, Any] = {}

    def get(self, conn: Connection) -> Any:
        """Our session on ``conn``: the one begun before while it lasts, else a new one."""
        kept = self._kept.get(conn)
        if kept is not None:
            s = lib.pn_session_head(conn.pn, lib.PN_LOCAL_ACTIVE)
            while s != NULL:
                if s == kept and not lib.pn_session_state(s) & lib.PN_REMOTE_CLOSED:
                    return s
                s = lib.pn_session_next(s, lib.PN_LOCAL_ACTIVE)
        s = self._kept[conn] = lib.pn_session(conn.pn)
        open_session(s, conn)
        return s

    def forget(self, conn: Connection) -> None:
        """The connection is gone (Proton frees its sessions with it)."""
        self._kept.pop(conn, None)
