"""Management: the AMQP management agent at ``$management`` (agent.py), answering as Qpid
Dispatch's does so qdstat and qdmanage work unchanged, and the router's state as Dispatch's
entities and attributes (inventory.py; our own entity types in entitytypes.py).

May import: router.datapath, router.linkroutes, router.transport. Not the engine: the agent is
given the rows to answer from.
"""
