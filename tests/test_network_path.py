"""Path computation on hand-made topologies: next hops, costs, valid origins, radius."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from router.network.path import compute_paths, shortest_path_tree, symmetric_graph


def links(*edges: tuple[str, str, int]) -> dict[str, dict[str, int]]:
    """Link states in which both ends report every edge (a converged network)."""
    states: dict[str, dict[str, int]] = {}
    for a, b, cost in edges:
        states.setdefault(a, {})[b] = cost
        states.setdefault(b, {})[a] = cost
    return states


LINE = links(("A", "B", 1), ("B", "C", 1))
TRIANGLE = links(("A", "B", 1), ("B", "C", 1), ("A", "C", 5))
MESH = links(*[(a, b, 1) for a, b in ["AB", "AC", "AD", "BC", "BD", "CD"]])
SPURS = links(("I1", "I2", 1), ("I1", "S1", 1), ("I1", "S2", 1), ("I2", "S3", 1))
SQUARE = links(("A", "B", 1), ("A", "C", 1), ("B", "D", 1), ("C", "D", 1))


def test_line_of_three() -> None:
    a = compute_paths(symmetric_graph(LINE), "A")
    assert a.next_hop == {"B": "B", "C": "B"}
    assert a.cost == {"B": 1, "C": 2}
    assert a.hops == {"B": 1, "C": 2}
    assert a.radius == 2
    assert a.valid_origins == {"B": frozenset(), "C": frozenset()}
    b = compute_paths(symmetric_graph(LINE), "B")
    assert b.next_hop == {"A": "A", "C": "C"}
    assert b.radius == 1
    # B relays A's copies to C and C's copies to A.
    assert b.valid_origins == {"A": {"C"}, "C": {"A"}}


def test_triangle_with_unequal_costs_takes_the_cheap_detour() -> None:
    a = compute_paths(symmetric_graph(TRIANGLE), "A")
    assert a.next_hop == {"B": "B", "C": "B"}
    assert a.cost == {"B": 1, "C": 2}
    assert a.radius == 2  # hops along the chosen path, not along the direct link
    b = compute_paths(symmetric_graph(TRIANGLE), "B")
    assert b.valid_origins == {"A": {"C"}, "C": {"A"}}
    c = compute_paths(symmetric_graph(TRIANGLE), "C")
    assert c.next_hop == {"A": "B", "B": "B"}
    assert c.valid_origins == {"A": frozenset(), "B": frozenset()}


def test_full_mesh_of_four_is_all_direct() -> None:
    for me in "ABCD":
        paths = compute_paths(symmetric_graph(MESH), me)
        others = set("ABCD") - {me}
        assert paths.next_hop == {o: o for o in others}
        assert paths.cost == dict.fromkeys(others, 1)
        assert paths.radius == 1
        assert paths.valid_origins == {o: frozenset() for o in others}


def test_two_interior_routers_with_spurs() -> None:
    i1 = compute_paths(symmetric_graph(SPURS), "I1")
    assert i1.next_hop == {"I2": "I2", "S1": "S1", "S2": "S2", "S3": "I2"}
    assert i1.cost == {"I2": 1, "S1": 1, "S2": 1, "S3": 2}
    assert i1.radius == 2
    assert i1.valid_origins == {
        "I2": {"S1", "S2"},
        "S3": {"S1", "S2"},
        "S1": {"S2", "I2", "S3"},
        "S2": {"S1", "I2", "S3"},
    }
    s1 = compute_paths(symmetric_graph(SPURS), "S1")
    assert s1.next_hop == dict.fromkeys(["I1", "I2", "S2", "S3"], "I1")
    assert s1.radius == 3
    assert all(not vo for vo in s1.valid_origins.values())
    s3 = compute_paths(symmetric_graph(SPURS), "S3")
    assert s3.cost == {"I2": 1, "I1": 2, "S1": 3, "S2": 3}


def test_partitioned_network_reaches_only_its_side() -> None:
    states = links(("A", "B", 1), ("C", "D", 1))
    a = compute_paths(symmetric_graph(states), "A")
    assert a.next_hop == {"B": "B"}
    assert a.radius == 1
    lonely = compute_paths(symmetric_graph({"A": {}}), "A")
    assert (lonely.next_hop, lonely.cost, lonely.radius) == ({}, {}, 0)


def test_ties_are_broken_by_router_id_the_same_way_everywhere() -> None:
    # Two equal paths between A and D: both ends pick the one through B (lower id than C).
    assert compute_paths(symmetric_graph(SQUARE), "A").next_hop["D"] == "B"
    assert compute_paths(symmetric_graph(SQUARE), "D").next_hop["A"] == "B"
    b = compute_paths(symmetric_graph(SQUARE), "B")
    c = compute_paths(symmetric_graph(SQUARE), "C")
    assert b.valid_origins["D"] == {"A"} and b.valid_origins["A"] == {"D"}
    assert c.valid_origins["D"] == frozenset() and c.valid_origins["A"] == frozenset()
    # Insertion order of the link states does not matter.
    shuffled = {k: dict(reversed(v.items())) for k, v in reversed(SQUARE.items())}
    assert compute_paths(symmetric_graph(shuffled), "A") == compute_paths(
        symmetric_graph(SQUARE), "A"
    )


def test_dispatch_tie_rule_first_settled_predecessor_wins() -> None:
    # X costs 3 via Z (settled at cost 1) and via Y (settled at cost 2). Dispatch keeps the
    # first predecessor to offer the best cost, Z, not the one with the lower id, Y; so must we.
    states = links(("R", "Z", 1), ("R", "Y", 2), ("Z", "X", 2), ("Y", "X", 1))
    tree = shortest_path_tree(symmetric_graph(states), "R")
    assert tree.cost["X"] == 3
    assert tree.parent["X"] == "Z"


def test_half_reported_edges_are_not_used() -> None:
    # B already dropped A; A's report alone does not make the link usable for C.
    states = {"A": {"B": 1}, "B": {"C": 1}, "C": {"B": 1}}
    assert compute_paths(symmetric_graph(states), "C").next_hop == {"B": "B"}


def test_unknown_link_state_gets_the_benefit_of_the_doubt() -> None:
    # C's link state has not arrived: B's report is enough to route C's LSR to it.
    states = {"A": {"B": 1}, "B": {"A": 1, "C": 1}}
    assert compute_paths(symmetric_graph(states), "A").next_hop == {"B": "B", "C": "B"}


def test_local_edges_are_trusted_over_a_stale_copy() -> None:
    # We hold an old copy of B's link state from before B saw us, but B's HELLO listed us.
    states = {"A": {"B": 1}, "B": {"C": 1}, "C": {"B": 1}}
    assert compute_paths(symmetric_graph(states), "A").next_hop == {}
    trusted = compute_paths(symmetric_graph(states, local="A"), "A")
    assert trusted.next_hop == {"B": "B", "C": "B"}


def test_disagreeing_costs_take_the_larger() -> None:
    states = {"A": {"B": 1}, "B": {"A": 7}}
    assert symmetric_graph(states) == {"A": {"B": 7}, "B": {"A": 7}}


def random_network(rng: random.Random, n: int) -> dict[str, dict[str, int]]:
    names = [f"R{i:02d}" for i in range(n)]
    edges = [(names[i], names[rng.randrange(i)], rng.choice([1, 1, 2])) for i in range(1, n)]
    for _ in range(n):
        a, b = rng.sample(names, 2)
        edges.append((a, b, rng.choice([1, 2, 3])))
    return links(*edges)


@pytest.mark.parametrize("seed", range(20))
def test_multicast_following_valid_origins_reaches_each_router_exactly_once(seed: int) -> None:
    """What valid origins are for: forwarding a multicast copy from origin o toward each
    destination only where o is a valid origin delivers one copy per router, no duplicates."""
    rng = random.Random(seed)
    states = random_network(rng, rng.randrange(4, 14))
    graph = symmetric_graph(states)
    paths = {r: compute_paths(graph, r) for r in states}
    for origin in states:
        arrivals: Counter[str] = Counter()
        inbox = [origin]
        while inbox:
            here = inbox.pop()
            arrivals[here] += 1
            p = paths[here]
            hops = {
                p.next_hop[d] for d in p.next_hop if here == origin or origin in p.valid_origins[d]
            }
            inbox.extend(hops)
        assert arrivals == Counter(dict.fromkeys(states, 1)), (seed, origin)
