"""The ``routernet`` command (main.py: up, status, down, send, receive, request, analyze) and
``make run``'s example network with traffic through it (demo.py).

May import everything: nothing imports it.
"""
