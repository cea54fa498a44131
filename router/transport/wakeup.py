"""A way for another thread to wake the router's loop: a socket pair the loop watches.

Threads that finish work for the loop (name lookups, the ConfigMap watch) write a byte to it;
the loop's select returns and calls the handler's ``on_wakeup`` (router/core/engine.py: the selector
data ``("wakeup-handler", handler)``), which drains the socket and takes the work.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
from typing import Any


class Wakeup:
    def __init__(self, sel: selectors.BaseSelector, handler: Any) -> None:
        self.sel = sel
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        sel.register(self._r, selectors.EVENT_READ, ("wakeup-handler", handler))
        self.closed = False

    def poke(self) -> None:
        """Any thread: make the loop's select return."""
        with contextlib.suppress(OSError):
            self._w.send(b"\0")

    def drain(self) -> None:
        """The loop: read what the pokes wrote, so the socket stops being readable."""
        with contextlib.suppress(OSError):
            while self._r.recv(512):
                pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(self._r)
        self._r.close()
        self._w.close()
