"""Link routes: which links go, attach and all, to a container such as a broker. table.py matches
addresses to routes (pure), relay.py relays a client's link to the container and back,
scoped.py keeps the routes a connection creates for itself over management.

May import: router.core's attach, router.datapath, router.addressing, router.transport, the
configuration's definitions. Not the engine.
"""
