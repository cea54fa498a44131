"""The durable message store of the nodes a router hosts (seed 002).

format.py defines the files, byte by byte; log.py appends, syncs and reads them; store.py is
what the node logic uses: `Store.open(path)`, then append, body, settle, count and sync.
"""

from router.store.store import Entry, Store, StoreError

__all__ = ["Entry", "Store", "StoreError"]
