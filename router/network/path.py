"""Shortest paths over the routers' link states, computed the way every router computes them.

Multicast and balanced forwarding only avoid duplicates if all routers agree on one tree per
origin (see `valid_origins`), so everything here is deterministic: Dijkstra settles routers in
(cost, router id) order and a route is replaced only by a strictly cheaper one, which is how
Dispatch's `path.py` breaks ties, so a mixed network of our routers and qdrouterd agrees too.
Pure functions over plain dicts; no clocks, no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

Graph = Mapping[str, Mapping[str, int]]


def symmetric_graph(link_states: Graph, local: str | None = None) -> dict[str, dict[str, int]]:
    """The undirected graph routing runs on, from each router's reported `{peer: cost}`.

    An edge counts only when both ends report it: a half-reported link is either being torn
    down (one side already lost the other) or not up yet, and routing over it would black-hole
    traffic. Two exceptions keep the protocol able to bootstrap:

    * a router absent from `link_states` (its link state never arrived, or was forgotten) gets
      the benefit of the doubt for edges others report toward it, otherwise nobody could route
      the LSR that fetches its link state (Dispatch uses placeholder link states for the same
      reason);
    * every edge `local` reports is kept: we put a neighbor in our link state only after its
      HELLO listed us, which is first-hand proof the link works both ways, even if its copy of
      its link state that we hold is older than that.

    When both ends report a cost the larger wins, so the result does not depend on whose
    report is read first.
    """
    graph: dict[str, dict[str, int]] = {rid: {} for rid in link_states}
    for u, peers in link_states.items():
        for v, cost in peers.items():
            if v == u:
                continue
            back = link_states.get(v)
            if back is not None and u in back:
                cost = max(cost, back[u])
            elif back is not None and u != local:
                continue
            graph.setdefault(u, {})[v] = cost
            graph.setdefault(v, {})[u] = cost
    return graph


@dataclass(frozen=True)
class Tree:
    """A shortest-path tree: `parent` of every reached router except the root, its `cost` and
    `hops` from the root, and `order`, the routers in the order Dijkstra settled them (parents
    always before their children)."""

    root: str
    parent: dict[str, str]
    cost: dict[str, int]
    hops: dict[str, int]
    order: list[str]


def shortest_path_tree(graph: Graph, root: str) -> Tree:
    cost = {root: 0}
    hops = {root: 0}
    parent: dict[str, str] = {}
    order: list[str] = []
    settled: set[str] = set()
    heap = [(0, root)]
    while heap:
        c, u = heapq.heappop(heap)
        if u in settled:
            continue
        settled.add(u)
        order.append(u)
        for v, w in graph.get(u, {}).items():
            if v in settled:
                continue
            alt = c + w
            if v not in cost or alt < cost[v]:
                cost[v] = alt
                hops[v] = hops[u] + 1
                parent[v] = u
                heapq.heappush(heap, (alt, v))
    return Tree(root, parent, cost, hops, order)


@dataclass(frozen=True)
class Paths:
    """Routes from one router (`root`) to every router it can reach.

    * `next_hop[d]`: the neighbor of root on the way to d (d itself for a direct route);
    * `cost[d]`, `hops[d]`: along that path;
    * `valid_origins[d]`: the origins o (not root, not d) whose own shortest-path tree reaches
      d through root. Root forwards a multicast copy that came from o toward d only for those,
      so each copy travels one tree and arrives once;
    * `radius`: the hop count to the router farthest from root on these paths (0 alone); the
      data plane's loop guard releases deliveries whose trace is longer than that.
    """

    root: str
    next_hop: dict[str, str] = field(default_factory=dict)
    cost: dict[str, int] = field(default_factory=dict)
    hops: dict[str, int] = field(default_factory=dict)
    valid_origins: dict[str, frozenset[str]] = field(default_factory=dict)
    radius: int = 0


def compute_paths(graph: Graph, root: str) -> Paths:
    tree = shortest_path_tree(graph, root)
    next_hop: dict[str, str] = {}
    for v in tree.order[1:]:
        p = tree.parent[v]
        next_hop[v] = v if p == root else next_hop[p]
    reachable = tree.order[1:]
    origins: dict[str, set[str]] = {d: set() for d in reachable}
    for o in reachable:
        other = shortest_path_tree(graph, o)
        below_root: set[str] = set()
        for v in other.order[1:]:
            p = other.parent[v]
            if p == root or p in below_root:
                below_root.add(v)
        for d in below_root:
            if d != o and d in origins:
                origins[d].add(o)
    return Paths(
        root=root,
        next_hop=next_hop,
        cost={d: tree.cost[d] for d in reachable},
        hops={d: tree.hops[d] for d in reachable},
        valid_origins={d: frozenset(s) for d, s in origins.items()},
        radius=max((tree.hops[d] for d in reachable), default=0),
    )
