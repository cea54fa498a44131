"""Queues and topics the network hosts (seed 002): the network takes responsibility for messages.

config.py says what an address's `node` is; placement.py which router stores each node; the
store (router/store/) keeps their messages on disk; filters.py (with selector.py and facts.py)
which of them a receiver or a binding takes.
"""
