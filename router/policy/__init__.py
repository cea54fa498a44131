"""Qpid Dispatch's policy (seed: Dispatch's ``policy`` and ``vhost`` entities): the router-wide
connection limit, and per vhost who may connect from where, how many connections, sessions and
links they may have, which addresses they may send to and receive from, and how large a message
may be.

matching.py matches the vhosts' address and host lists; admission.py decides and counts, with
no Proton and no clock; gate.py carries its answers out on Proton's objects for the engine.

May import: router.addressing, router.config, router.log, router.transport, and the data
path's types. Not the engine: it is handed the few actions it needs.
"""
