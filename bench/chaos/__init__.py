"""The chaos soak (``python -m bench --suite chaos``): faults on a seeded schedule against the
example network while traffic of every kind flows, and the promises checked (run.py)."""
