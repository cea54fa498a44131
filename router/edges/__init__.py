"""Edge routers: edge mode itself (uplink.py: a router that hangs off the interior instead of
joining it), an edge's link routes registered on its interior (linkroutes.py), senders on an
edge given credit once their address has a destination beyond it (tracking.py), and what
qdrouterd edges expect of our interiors (dispatch.py).

May import: router.core's attach and interrouter, router.datapath, router.linkroutes,
router.addressing, router.transport. Not the engine: it hands each its Router.
"""
