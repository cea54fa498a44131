"""A peer's attach: who takes the link, and how a link served here is set up.

The attach is offered in turn to what may claim it: a draining router refuses it, and so does
a vhost policy that does not allow it (router/policy/); what a qdrouterd edge attaches for
itself goes to router/edges/dispatch.py, a gateway connection's own links to router/gateway/;
the inter-router protocol takes its control and data links; links to hosted queues and topics
go to router/nodes/, links to `(container)/node` to router/containers/ and configured link
routes to router/linkroutes/relay.py. Any other link is
served here: a sender on its target address (or the anonymous relay), a receiver on its
source, a dynamic receiver on an address of this router's own space. A refusal is answered as
AMQP words it: a null source and target, then a detach with the error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from router import tokens
from router.core import drain
from router.datapath.links import Link
from router.log import get_logger
from router.transport.pn import lib, text

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.transport.connection import Connection

log = get_logger("router")


def attached(router: Router, conn: Connection, p: Any) -> None:
    """The peer attached link `p` (we have not): claim it, refuse it or serve it."""
    link = router.register_link(p, conn, bool(lib.pn_link_is_receiver(p)))
    if conn.role == "edge":
        link.kind = "edge"  # an edge's uplink or proxy: carry the routing address along
    if drain.refuses(router, conn.role):
        refuse(router, link, drain.DRAINING_ERROR, drain.refusal(router))
        return
    if conn.policy is not None and not router.policy.attach(link):
        return  # its vhost's policy refused it (router/policy/)
    network = router.network
    linkrouter = router.linkrouter
    dispatch_edges = router.dispatch_edges
    if (
        (conn.role == "edge" and dispatch_edges is not None and dispatch_edges.attach(link))
        or (conn.role == "gateway" and router.gateways.link_attached(link))
        or (network is not None and conn.role == "inter-router" and network.link_attached(link))
        or router.nodes.attach(link)
        or router.containers.attach(link)
        or (linkrouter.table and linkrouter.attach(link))
    ):
        router.fwd.touched.add(conn)
        return
    serve(router, link)


def serve(router: Router, link: Link) -> None:
    p, conn, fwd = link.pn, link.conn, router.fwd
    remote_source = lib.pn_link_remote_source(p)
    remote_target = lib.pn_link_remote_target(p)
    lib.pn_terminus_copy(lib.pn_link_source(p), remote_source)
    lib.pn_terminus_copy(lib.pn_link_target(p), remote_target)
    if link.incoming:
        # `(this router)/node` as Containers.attach resolved it, if it did.
        address = link.address or text(lib.pn_terminus_get_address(remote_target))
        lib.pn_link_set_rcv_settle_mode(p, lib.PN_RCV_FIRST)
        lib.pn_link_open(p)
        link.address = address
        if address is None:
            link.anonymous = True
            fwd.credit_dirty.add(link)
        else:
            fwd.add_sender(link, fwd.entry(address))
    else:
        if lib.pn_terminus_is_dynamic(remote_source):
            space = f"_edge/{router.id}" if router.edge is not None else f"_topo/0/{router.id}"
            address = f"{space}/temp.{tokens.token_urlsafe(16)}"
            local_source = lib.pn_link_source(p)
            lib.pn_terminus_set_address(local_source, address.encode())
            lib.pn_terminus_set_dynamic(local_source, True)
        else:
            # `(this router)/node` was read as `node` by Containers.attach.
            address = link.address or text(lib.pn_terminus_get_address(remote_source))
        mode = lib.pn_link_remote_snd_settle_mode(p)
        lib.pn_link_set_snd_settle_mode(p, mode)
        link.presettle = mode == lib.PN_SND_SETTLED
        lib.pn_link_open(p)
        link.address = address
        if address is None:
            router.refuse(
                link, "amqp:invalid-field", "a receiver needs a source address or dynamic=true"
            )
            return
        fwd.add_consumer(link, fwd.entry(address))
    log.debug(
        "link.attached",
        conn=conn.conn_id,
        link=link.identity,
        name=link.name,
        dir="in" if link.incoming else "out",
        address=link.address,
    )
    fwd.touched.add(conn)


def refuse(router: Router, link: Link, error: str, description: str) -> None:
    """Answer the peer's attach with a null source and target (not Proton's default empty
    terminus, which a client takes for an attached anonymous link), then detach with the
    error."""
    p = link.pn
    lib.pn_terminus_set_type(lib.pn_link_source(p), lib.PN_UNSPECIFIED)
    lib.pn_terminus_set_type(lib.pn_link_target(p), lib.PN_UNSPECIFIED)
    lib.pn_link_open(p)
    router.refuse(link, error, description)
