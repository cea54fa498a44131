"""The container table on its own (router/containers/table.py): keys, what is advertised and
exported, duplicates, and the one deterministic place each container is reached at."""

from __future__ import annotations

import pytest

from router.containers.table import (
    Across,
    Below,
    ContainerTable,
    Here,
    There,
    advertisable,
    container_of,
    keys,
)


def test_keys_are_dispatch_link_route_keys_and_read_back() -> None:
    assert keys("plant-1") == ("C(plant-1)", "D(plant-1)")
    assert [container_of(k) for k in keys("a.b")] == ["a.b", "a.b"]
    # Real link routes and other classes are not containers.
    for key in ("Cqueue", "Dqueue", "E(x).#", "M0(x)", "C()", "C(", "R(x)"):
        assert container_of(key) is None, key


@pytest.mark.parametrize(
    ("container", "ok"),
    [("plant-1", True), ("3b56e628-55a0", True), ("a.b", True), ("", False), ("a/b", False),
     ("a(b", False), ("a)b", False), ("#", False), ("a*", False)],
)  # fmt: skip
def test_only_addressable_ids_without_wildcards_are_advertised(container: str, ok: bool) -> None:
    assert advertisable(container) is ok
    table = ContainerTable()
    table.connected(container, "conn")
    assert table.served() == ({container} if ok else set())


def test_the_nearest_place_wins_here_then_edge_then_gateway_then_cheapest_router() -> None:
    table = ContainerTable()
    cost = {"R2": 1, "R3": 1, "R4": 3}
    table.set_remote("R3", {"c"})
    table.set_remote("R2", {"c"})
    table.set_remote("R4", {"c"})
    assert table.locate("c", cost) == There("R2")  # equal costs: the lowest id
    assert table.locate("c", {"R4": 3}) == There("R4")  # the others unreachable
    table.set_imported("gw", {"c"})
    assert table.locate("c", cost) == Across("gw")
    table.set_below("edge", {"c"})
    assert table.locate("c", cost) == Below("edge")
    table.connected("c", "first")
    table.connected("c", "second")
    assert table.locate("c", cost) == Here("first")  # the oldest connection
    table.disconnected("c", "first")
    assert table.locate("c", cost) == Here("second")
    assert table.locate("nobody", cost) is None


def test_duplicates_are_every_sighting() -> None:
    table = ContainerTable()
    assert table.connected("twin", "conn") is False
    assert table.set_remote("R2", {"twin", "solo"}) == ["twin"]
    assert table.duplicated("twin") and not table.duplicated("solo")
    assert table.places("twin") == ["connection conn", "router R2"]
    # A router that goes advertises nothing; its sightings go with it.
    assert table.set_remote("R2", set()) == []
    assert not table.duplicated("twin") and table.locate("solo", {"R2": 1}) is None


def test_imported_containers_are_served_but_never_exported_again() -> None:
    table = ContainerTable()
    table.connected("here", "conn")
    table.set_below("edge", {"on-edge"})
    table.set_remote("R2", {"there"})
    table.set_imported("gw", {"far", "here"})
    assert table.served() == {"here", "on-edge", "far"}
    assert table.native() == {"here", "on-edge", "there"}  # "here" is ours too
    table.set_imported("gw", set())
    assert table.served() == {"here", "on-edge"}
