"""The data path: what every message passes through, compiled with mypyc (setup.py lists the
modules; pnfast.c and scanfast.c are C beside their Python twins). sections.py scans and
rewrites encoded messages, forwarder.py picks consumers and carries credit and outcomes,
links.py keeps link and delivery records, streaming.py forwards large messages as they arrive,
interest.py says what the loop waits for, stats.py counts what qdstat reads.

May import: router.addressing, router.transport, router.telemetry's counters and the
configuration's definitions. No feature (edges, link routes, nodes, management, the engine):
what it needs of them comes through the objects the engine gave it.
"""
