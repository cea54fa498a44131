"""Our own management entity types, named here so that the modules making their rows need not
import the agent (router/management/agent.py), which a router loads on its first management request:
an idle router need not hold it."""

CONTAINER = "io.routernet.container"
HOSTED_NODE = "io.routernet.node"
