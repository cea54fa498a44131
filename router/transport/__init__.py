"""Connections: one socket wired to one Proton transport (connection.py), dialling out and
back off (connector.py), SASL and TLS as Qpid Dispatch sets them up (sasl.py, tls.py), the cffi
binding to Proton's C engine (pn.py) and waking the loop from another thread (wakeup.py).

May import: the configuration's definitions, router.log. Nothing above it.
"""
