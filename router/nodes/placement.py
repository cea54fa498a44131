"""Which host router stores a node: rendezvous (highest random weight) hashing.

Every router of the network computes the same answer from the node's name and the hosts'
ids alone, so producers and consumers attaching anywhere reach the same node without asking
anyone. When a host is added or removed, only the nodes whose highest weight was that host
move (about 1/n of them), unlike `hash % n`, which moves nearly all.
"""

from __future__ import annotations

from collections.abc import Sequence


def weight(host: str, node: str) -> int:
    # Imported when first needed: hashlib sets up OpenSSL's digests (2 MiB), which a router
    # placing no node never uses.
    import hashlib

    digest = hashlib.blake2b(f"{host}\x00{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(node: str, hosts: Sequence[str]) -> str:
    """The host that stores `node`; ties (practically impossible) go to the lowest id."""
    if not hosts:
        raise ValueError("a node needs at least one host")
    return max(hosts, key=lambda host: (weight(host, node), [-ord(c) for c in host]))
