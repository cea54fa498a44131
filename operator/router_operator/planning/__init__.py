"""From declarations to a plan: the resources turned into declarations (adapter.py), each
network planned into router configs per pod (planner.py), whether its routers are connected
(mesh.py, from what they report on their Pods), a scale-in that hands nodes over (handoff.py),
and the names every object is given (names.py). Pure: no I/O.

May import: resources, the router's configuration definitions and its pod report format.
"""
