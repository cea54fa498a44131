"""``routernet send`` and ``routernet receive``: reliable traffic through a router network;
``routernet request``: one request and its reply.

The load generator of the autoscaling example and its end-to-end test, and a quick check that a
network delivers: every message is unsettled (at-least-once), carries a unique message-id, and
is sent again until the network accepts (or rejects) it, whichever routers come and go.

| module | concern |
|---|---|
| ``endpoints.py`` | URLs, a URI's host and credentials, a state directory's routers, spreading |
| ``rate.py`` | ``--rate``/``--ramp``: the schedule and the pacer that follows it (pure) |
| ``ledger.py`` | what is in flight where, what to send again; the receiver's tally (pure) |
| ``pool.py`` | proton connections to the endpoints, one link each: reconnect, refresh, retire |
| ``sender.py``, ``receiver.py`` | the two event loops (proton Container, one thread) |
| ``request.py`` | ``request``'s loop: one connection, a dynamic reply link, one message |
| ``records.py`` | a received message as a JSON line (``receive --print``, the reply) |
| ``cli.py`` | the arguments, errors, progress lines and the JSON summary |
"""
