"""Who may change a router through its management: the users its configuration names
(``router.managementWriters``), and the other routers of its network. Reads stay open to
whoever may connect, as in Qpid Dispatch.

A request is judged by the link it came on:

- from a client's own connection to this router: its user, the SASL identity (a PLAIN user as
  ``USER@REALM``, EXTERNAL the certificate's subject), else the subject of the TLS client
  certificate it presented, else ``anonymous``. Writes are allowed when that name is listed;
  listing ``anonymous`` allows every client that did not authenticate.
- from another router: only on a link that router attached to this router's ``$management``
  itself (as an edge does for its connection-scoped link routes, router/edges/linkroutes.py).
  A request that crossed the network (to ``_topo/0/<id>/$management`` from a client elsewhere)
  comes on the routers' shared links, which carry any client's messages: its author is not
  known here, so it may read but not write. Write to a router's management on a connection to
  that router.

Trusting a connection's role (inter-router, edge) is trusting the listener it came in on: give
those listeners TLS with client certificates where clients could reach them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from router.config.views import ROUTER_ROLES
from router.transport.pn import NULL, lib, text

if TYPE_CHECKING:
    from router.datapath.links import Link
    from router.transport.connection import Connection

MANAGEMENT = "$management"


def connection_user(conn: Connection) -> str:
    """The name a connection's writes are allowed by: its SASL user, else its TLS client
    certificate's subject, else ``anonymous``."""
    transport = conn.transport
    user = text(lib.pn_transport_get_user(transport))
    if user and user != "anonymous":
        return user
    ssl = lib.pn_ssl(transport)
    if ssl != NULL:
        subject = text(lib.pn_ssl_get_remote_subject(ssl))
        if subject:
            return subject
    return "anonymous"


class WriteAuthorization:
    """``refusal(origin)``: None when a request that came on ``origin`` may write, else why
    not, in one line. ``writers`` is read at every write, so a live change applies at once."""

    def __init__(self, writers: Callable[[], Sequence[str]]) -> None:
        self.writers = writers

    def refusal(self, origin: Link | None) -> str | None:
        if origin is None:
            return None  # the router's own request
        conn = origin.conn
        if conn.role in ROUTER_ROLES:
            if origin.address == MANAGEMENT and not origin.anonymous:
                return None
            return (
                "management writes are not accepted from across the network: send them on a"
                " connection to this router"
            )
        user = connection_user(conn)
        if user in self.writers():
            return None
        return f"user {user!r} may not change this router: not in router.managementWriters"
