"""The custom resources Router, Address, LinkRoute and Gateway: their pydantic models (models.py,
with spec.py, gateway.py, nodes.py, autoscaling.py and mounts.py for their parts), the one
definition the CRDs are generated from (crds.py, ``make crds``).

May import: the router's configuration definitions. No other package of the operator.
"""
