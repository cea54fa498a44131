"""The network planner: topologies, scale, address folding, problems. Pure, no cluster."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from router_operator.planning.planner import (
    DEFAULT_EDGE_FAILOVERS,
    EDGE_PORT,
    INTER_ROUTER_PORT,
    SASL_CONFIG_DIR,
    AddressDecl,
    LinkRouteConnectionDecl,
    LinkRouteDecl,
    ListenerDecl,
    NamespacePlan,
    PodPlan,
    RouterDecl,
    diff_plans,
    plan_namespace,
)
from router_operator.resources.gateway import (
    ConnectorTlsDecl,
    GatewayConnectorDecl,
    GatewayDecl,
    GatewayListenerDecl,
    ListenerTlsDecl,
)

from router.config.models import FILES_CONTEXT_KEY, ConfigError, RouterConfig, validate_config

NS = "msg"


def interior(name: str, replicas: int, network: str = "default", **kw: object) -> RouterDecl:
    return RouterDecl(name, uid=f"uid-{name}", replicas=replicas, network=network, **kw)  # type: ignore[arg-type]


def edge(name: str, replicas: int, network: str = "default", **kw: object) -> RouterDecl:
    return RouterDecl(
        name,
        uid=f"uid-{name}",
        replicas=replicas,
        role="edge",
        network=network,
        **kw,  # type: ignore[arg-type]
    )


def configs(plan: NamespacePlan) -> dict[str, RouterConfig]:
    out = {}
    for name, pod in plan.pods().items():
        assert pod.config is not None, name
        out[name] = pod.config
    return out


def revalidated(pod: PodPlan) -> RouterConfig:
    """Round trip through the router's own model, as the router will load it."""
    assert pod.config is not None
    return RouterConfig.model_validate(pod.config.model_dump())


def peers(config: RouterConfig, role: str) -> list[str]:
    """Pod names this router dials with connectors of ``role`` (from the DNS host)."""
    return [c.host.split(".")[0] for c in config.connectors if c.role == role]


def host(pod: str, router: str | None = None) -> str:
    router = router or pod.rsplit("-", 1)[0]
    return f"{pod}.{router}-peers.{NS}.svc.cluster.local"


# --- interior mesh -------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 21))
def test_mesh_connects_every_pair_exactly_once(n: int) -> None:
    plan = plan_namespace(NS, [interior("core", n)])
    assert plan.problems == ()
    cfgs = configs(plan)
    assert sorted(cfgs) == sorted(f"core-{i}" for i in range(n))
    pairs = [
        frozenset((name, peer)) for name, cfg in cfgs.items() for peer in peers(cfg, "inter-router")
    ]
    assert len(pairs) == n * (n - 1) // 2
    assert set(pairs) == {frozenset(p) for p in itertools.combinations(cfgs, 2)}
    for name, pod in plan.pods().items():
        cfg = revalidated(pod)
        assert cfg.router.id == name and cfg.router.mode == "interior"
        assert name not in peers(cfg, "inter-router")
        # The later pod dials the earlier one: pod i dials exactly 0..i-1.
        assert peers(cfg, "inter-router") == [f"core-{j}" for j in range(pod.ordinal)]
        assert all(c.port == INTER_ROUTER_PORT for c in cfg.connectors)
        assert {(lsn.port, lsn.role) for lsn in cfg.listeners} == {
            (5672, "normal"),
            (INTER_ROUTER_PORT, "inter-router"),
            (EDGE_PORT, "edge"),
        }


@pytest.mark.parametrize("n", range(1, 21))
def test_mesh_across_router_resources_in_one_network(n: int) -> None:
    # Split n interiors over up to three Router resources of the same network.
    sizes = [n // 3 + (1 if i < n % 3 else 0) for i in range(3)]
    decls = [interior(name, size) for name, size in zip("abc", sizes, strict=True)]
    plan = plan_namespace(NS, decls)
    cfgs = configs(plan)
    assert len(cfgs) == n
    ids = [cfg.router.id for cfg in cfgs.values()]
    assert len(set(ids)) == n  # router ids unique across Router resources
    pairs = [frozenset((a, p)) for a, cfg in cfgs.items() for p in peers(cfg, "inter-router")]
    assert len(pairs) == len(set(pairs)) == n * (n - 1) // 2
    assert set(pairs) == {frozenset(p) for p in itertools.combinations(cfgs, 2)}
    # Connectors point at the peer's own Router's headless Service.
    for cfg in cfgs.values():
        for c in cfg.connectors:
            assert c.host == host(c.name.split("/")[1])


def test_two_router_resources_mesh_together() -> None:
    plan = plan_namespace(NS, [interior("west", 2), interior("east", 2)])
    cfgs = configs(plan)
    # Sorted by (name, ordinal): east-0, east-1, west-0, west-1; later dials earlier.
    assert peers(cfgs["east-0"], "inter-router") == []
    assert peers(cfgs["east-1"], "inter-router") == ["east-0"]
    assert peers(cfgs["west-0"], "inter-router") == ["east-0", "east-1"]
    assert peers(cfgs["west-1"], "inter-router") == ["east-0", "east-1", "west-0"]
    assert cfgs["west-0"].connectors[0].host == "east-0.east-peers.msg.svc.cluster.local"
    assert cfgs["west-0"].connectors[0].name == "inter-router/east-0"


def test_ordinals_sort_numerically_not_as_text() -> None:
    cfgs = configs(plan_namespace(NS, [interior("r", 12)]))
    assert peers(cfgs["r-10"], "inter-router") == [f"r-{i}" for i in range(10)]
    assert "r-10" in peers(cfgs["r-11"], "inter-router")


def test_networks_are_separate() -> None:
    plan = plan_namespace(NS, [interior("a", 3, network="blue"), interior("b", 3, network="red")])
    assert sorted(plan.networks) == ["blue", "red"]
    for name, cfg in configs(plan).items():
        network_pods = {p.name for p in plan.network_of(name.rsplit("-", 1)[0]).pods}
        assert set(peers(cfg, "inter-router")) <= network_pods
    assert len(plan.networks["blue"].connections) == 3


def test_the_plan_does_not_depend_on_input_order() -> None:
    decls = [interior("b", 3), edge("e", 4), interior("a", 2)]
    addrs = [AddressDecl("x", prefix="x"), AddressDecl("y", pattern="y.*")]
    one = plan_namespace(NS, decls, addrs)
    two = plan_namespace(NS, list(reversed(decls)), list(reversed(addrs)))
    assert configs(one) == configs(two)


def test_link_capacity_applies_to_listeners_and_connectors() -> None:
    plan = plan_namespace(
        NS,
        [
            interior("a", 2, link_capacity=40, listeners=(ListenerDecl(link_capacity=7),)),
            edge("e", 1, link_capacity=30),
        ],
    )
    cfgs = configs(plan)
    assert [lsn.linkCapacity for lsn in cfgs["a-1"].listeners] == [7, 40, 40]
    assert [c.linkCapacity for c in cfgs["a-1"].connectors] == [40]
    assert {c.linkCapacity for c in cfgs["e-0"].connectors} == {30}


def test_listeners_from_the_spec() -> None:
    decl = interior(
        "a",
        1,
        listeners=(
            ListenerDecl(port=5672),
            ListenerDecl(
                port=5673,
                name="auth",
                sasl_mechanisms=("PLAIN",),
                sasl_users_secret="users",
                authenticate_peer=True,
                strip_annotations="no",
                idle_timeout_seconds=0,
                max_frame_size=65536,
            ),
        ),
    )
    cfg = configs(plan_namespace(NS, [decl]))["a-0"]
    normal = [lsn for lsn in cfg.listeners if lsn.role == "normal"]
    assert [lsn.port for lsn in normal] == [5672, 5673]
    auth = normal[1]
    assert auth.name == "auth" and auth.saslMechanisms == ["PLAIN"] and auth.authenticatePeer
    assert auth.stripAnnotations == "no"
    assert auth.idleTimeoutSeconds == 0
    assert auth.maxFrameSize == 65536
    # No listeners given means the default client listener, not an unreachable router.
    cfg = configs(plan_namespace(NS, [interior("b", 1, listeners=())]))["b-0"]
    assert (cfg.listeners[0].port, cfg.listeners[0].role) == (5672, "normal")


def test_plain_listeners_get_the_users_secret_as_sasl_config() -> None:
    plan = plan_namespace(
        NS,
        [
            interior(
                "a",
                1,
                listeners=(
                    ListenerDecl(port=5672),
                    ListenerDecl(
                        port=5671,
                        sasl_mechanisms=("PLAIN",),
                        authenticate_peer=True,
                        sasl_users_secret="users",
                    ),
                ),
            ),
            interior("b", 1),
        ],
    )
    assert plan.problems == ()
    assert plan.router("a").sasl_users_secret == "users"
    assert plan.router("b").sasl_users_secret is None
    cfg = configs(plan)["a-0"]
    assert (cfg.router.saslConfigDir, cfg.router.saslConfigName) == (SASL_CONFIG_DIR, "routernet")
    assert configs(plan)["b-0"].router.saslConfigDir is None


def test_plain_needs_one_users_secret() -> None:
    plain = {"sasl_mechanisms": ("PLAIN",)}
    plan = plan_namespace(NS, [interior("a", 1, listeners=(ListenerDecl(**plain),))])  # type: ignore[arg-type]
    assert [p.reason for p in plan.problems] == ["InvalidListener"]
    assert "PLAIN needs saslUsersSecret" in plan.problems[0].message
    two = (
        ListenerDecl(port=1, sasl_users_secret="x", **plain),  # type: ignore[arg-type]
        ListenerDecl(port=2, sasl_users_secret="y", **plain),  # type: ignore[arg-type]
    )
    plan = plan_namespace(NS, [interior("a", 1, listeners=two)])
    assert [p.reason for p in plan.problems] == ["InvalidListener"]
    assert "one user database" in plan.problems[0].message
    assert not plan.router("a").ok


def test_route_container_listeners() -> None:
    listeners = (ListenerDecl(), ListenerDecl(port=5673, role="route-container"))
    cfg = configs(plan_namespace(NS, [edge("e", 1, listeners=listeners)]))["e-0"]
    assert [(lsn.port, lsn.role) for lsn in cfg.listeners] == [
        (5672, "normal"),
        (5673, "route-container"),
    ]


def test_pod_identities_and_endpoints() -> None:
    plan = plan_namespace(NS, [interior("core", 2)], cluster_domain="example.org")
    pod = plan.pods()["core-1"]
    assert (pod.router, pod.ordinal, pod.router_id) == ("core", 1, "core-1")
    assert pod.host == "core-1.core-peers.msg.svc.example.org"
    assert plan.router("core").endpoints == ("amqp://core.msg.svc.example.org:5672",)
    assert plan.router("core").peers_service == "core-peers"


# --- edges ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "e"), [(m, e) for m in range(1, 6) for e in (1, 2, 3, 7, 20)])
def test_edges_get_one_uplink_plus_failovers_spread_over_interiors(m: int, e: int) -> None:
    plan = plan_namespace(NS, [interior("core", m), edge("leaf", e)])
    assert plan.problems == ()
    cfgs = configs(plan)
    interiors = {f"core-{i}" for i in range(m)}
    expected = min(1 + DEFAULT_EDGE_FAILOVERS, m)
    uplinks: Counter[str] = Counter()
    for i in range(e):
        cfg = revalidated(plan.pods()[f"leaf-{i}"])
        assert cfg.router.mode == "edge"
        assert [lsn.role for lsn in cfg.listeners] == ["normal"]
        targets = peers(cfg, "edge")
        assert len(targets) == len(set(targets)) == expected
        assert set(targets) <= interiors
        assert all(c.role == "edge" and c.port == EDGE_PORT for c in cfg.connectors)
        uplinks[targets[0]] += 1
    # Uplinks (the first connector) are spread evenly over the interiors.
    counts = [uplinks.get(name, 0) for name in interiors]
    assert max(counts) - min(counts) <= 1
    # Interior configs are untouched by edges: edges dial, interiors listen.
    for i in range(m):
        assert peers(cfgs[f"core-{i}"], "edge") == []
    # The connection list marks exactly one uplink per edge.
    up = [c for c in plan.networks["default"].connections if c.role == "edge" and c.uplink]
    assert sorted(c.dialer for c in up) == sorted(f"leaf-{i}" for i in range(e))


def test_failovers_spread_too_and_are_configurable() -> None:
    plan = plan_namespace(NS, [interior("core", 4), edge("leaf", 8)], edge_failovers=1)
    cfgs = configs(plan)
    reserve: Counter[str] = Counter()
    for i in range(8):
        targets = peers(cfgs[f"leaf-{i}"], "edge")
        assert len(targets) == 2
        reserve[targets[1]] += 1
    assert sorted(reserve.values()) == [2, 2, 2, 2]
    plan = plan_namespace(NS, [interior("core", 4), edge("leaf", 2)], edge_failovers=0)
    assert all(len(peers(cfg, "edge")) == 1 for n, cfg in configs(plan).items() if "leaf" in n)


def test_edges_of_another_network_do_not_attach() -> None:
    plan = plan_namespace(NS, [interior("core", 2, network="a"), edge("leaf", 2, network="b")])
    problems = plan.problems_of("Router", "leaf")
    assert [p.reason for p in problems] == ["NoInteriorRouters"]
    assert "network 'b' has no interior router" in problems[0].message
    assert plan.problems_of("Router", "core") == ()


def test_edge_network_without_interiors_is_a_problem_not_a_crash() -> None:
    plan = plan_namespace(NS, [edge("leaf", 2), interior("core", 0)])
    (problem,) = plan.problems
    assert (problem.kind, problem.name, problem.reason) == ("Router", "leaf", "NoInteriorRouters")
    # The edges still get a config (they run, unconnected); the Router is not blocked.
    router = plan.router("leaf")
    assert router.ok
    assert all(pod.config is not None and pod.config.connectors == [] for pod in router.pods)


def test_scaling_one_edge_router_does_not_move_another_ones_uplinks() -> None:
    before = plan_namespace(NS, [interior("core", 3), edge("a", 2), edge("b", 3)])
    after = plan_namespace(NS, [interior("core", 3), edge("a", 5), edge("b", 3)])
    for i in range(3):
        assert before.pods()[f"b-{i}"].config == after.pods()[f"b-{i}"].config
    changes = diff_plans(before, after)
    assert [(c.pod, c.change) for c in changes] == [
        ("a-2", "added"),
        ("a-3", "added"),
        ("a-4", "added"),
    ]


# --- scale up and down ---------------------------------------------------------------------


def test_scale_up_adds_pods_and_only_they_dial() -> None:
    before = plan_namespace(NS, [interior("core", 3)])
    after = plan_namespace(NS, [interior("core", 5)])
    changes = diff_plans(before, after)
    assert [(c.pod, c.change) for c in changes] == [("core-3", "added"), ("core-4", "added")]
    cfgs = configs(after)
    assert peers(cfgs["core-4"], "inter-router") == ["core-0", "core-1", "core-2", "core-3"]
    # Existing routers keep their exact config: nothing to apply, nothing restarted.
    for i in range(3):
        assert before.pods()[f"core-{i}"].config == after.pods()[f"core-{i}"].config


@pytest.mark.parametrize(("start", "end"), [(5, 2), (20, 1), (3, 0), (8, 7)])
def test_scale_down_removes_departed_pods_from_every_connector(start: int, end: int) -> None:
    decls = [interior("core", start), interior("zeta", 2), edge("leaf", 6)]
    before = plan_namespace(NS, decls)
    decls[0] = interior("core", end)
    after = plan_namespace(NS, decls)
    gone = {f"core-{i}" for i in range(end, start)}
    remaining = set(after.pods())
    assert not gone & remaining
    for cfg in configs(after).values():
        dialled = set(peers(cfg, "inter-router") + peers(cfg, "edge"))
        assert dialled <= remaining
        assert not dialled & gone
    changes = {c.pod: c for c in diff_plans(before, after)}
    for pod in gone:
        assert changes[pod].change == "removed"
    # zeta dialled every core pod: it loses the departed ones, by connector name.
    zeta = changes["zeta-0"]
    assert zeta.change == "changed" and not zeta.restart
    assert set(zeta.connectors_removed) == {f"inter-router/{p}" for p in gone}
    assert zeta.connectors_added == ()
    # The whole mesh is still every pair exactly once.
    interiors = [n for n in remaining if not n.startswith("leaf")]
    pairs = [frozenset((n, p)) for n in interiors for p in peers(configs(after)[n], "inter-router")]
    assert len(pairs) == len(set(pairs)) == len(interiors) * (len(interiors) - 1) // 2


def test_scale_to_zero_and_back() -> None:
    zero = plan_namespace(NS, [interior("core", 0)])
    assert zero.router("core").pods == () and zero.router("core").ok
    back = plan_namespace(NS, [interior("core", 2)])
    assert [(c.pod, c.change) for c in diff_plans(zero, back)] == [
        ("core-0", "added"),
        ("core-1", "added"),
    ]
    assert [c.change for c in diff_plans(None, back)] == ["added", "added"]


def test_role_change_is_the_only_restart() -> None:
    before = plan_namespace(NS, [interior("core", 2), interior("x", 1)])
    after = plan_namespace(NS, [interior("core", 2), edge("x", 1)])
    changes = {c.pod: c for c in diff_plans(before, after)}
    assert changes["x-0"].restart
    assert not any(c.restart for name, c in changes.items() if name != "x-0")


# --- addresses -----------------------------------------------------------------------------


def test_addresses_fold_into_every_router_of_their_network_only() -> None:
    plan = plan_namespace(
        NS,
        [interior("a", 2, network="blue"), edge("e", 2, network="blue"), interior("b", 1)],
        [
            AddressDecl("orders", prefix="orders", network="blue", distribution="closest"),
            AddressDecl(
                "temps", pattern="sensors.*.temp", network="blue", distribution="multicast"
            ),
            AddressDecl(
                "jobs", prefix="jobs", network="blue", undeliverable="hold", hold_timeout_seconds=5
            ),
            AddressDecl(
                "audit",
                prefix="audit",
                network="blue",
                undeliverable="redirect",
                fallback_address="audit.fallback",
                priority=7,
            ),
            AddressDecl("other", prefix="other"),  # network default
        ],
    )
    assert plan.problems == ()
    cfgs = configs(plan)
    blue = ["a-0", "a-1", "e-0", "e-1"]
    expected = ["pattern:sensors.*.temp", "prefix:audit", "prefix:jobs", "prefix:orders"]
    for name in blue:
        assert [a.key for a in cfgs[name].addresses] == expected
    assert [a.key for a in cfgs["b-0"].addresses] == ["prefix:other"]
    entries = {a.key: a for a in cfgs["e-1"].addresses}
    assert entries["prefix:orders"].distribution == "closest"
    assert entries["pattern:sensors.*.temp"].distribution == "multicast"
    assert (entries["prefix:jobs"].undeliverable, entries["prefix:jobs"].holdTimeoutSeconds) == (
        "hold",
        5,
    )
    audit = entries["prefix:audit"]
    assert (audit.undeliverable, audit.fallbackAddress, audit.priority) == (
        "redirect",
        "audit.fallback",
        7,
    )
    # Unset fields keep the router's defaults.
    assert entries["prefix:orders"].undeliverable == "drop"
    assert entries["prefix:orders"].priority == -1
    folded = plan.networks["blue"].addresses
    assert {f.name for f in folded} == {"orders", "temps", "jobs", "audit"}


def test_an_address_network_without_routers_is_planned_but_empty() -> None:
    plan = plan_namespace(NS, [interior("a", 1)], [AddressDecl("x", prefix="x", network="void")])
    assert plan.networks["void"].pods == ()
    assert [f.name for f in plan.networks["void"].addresses] == ["x"]
    assert configs(plan)["a-0"].addresses == []


def test_address_changes_touch_addresses_only() -> None:
    decls = [interior("core", 3), edge("leaf", 2)]
    before = plan_namespace(NS, decls, [AddressDecl("a", prefix="a"), AddressDecl("b", prefix="b")])
    after = plan_namespace(
        NS,
        decls,
        [AddressDecl("a", prefix="a", distribution="multicast"), AddressDecl("c", prefix="c")],
    )
    changes = diff_plans(before, after)
    assert len(changes) == 5
    for change in changes:
        assert change.change == "changed" and not change.restart
        assert change.addresses_added == ("prefix:c",)
        assert change.addresses_removed == ("prefix:b",)
        assert change.addresses_changed == ("prefix:a",)
        assert change.connectors_added == change.connectors_removed == ()
        assert not change.listeners_changed


def test_conflicting_addresses_the_older_wins() -> None:
    plan = plan_namespace(
        NS,
        [interior("a", 1)],
        [
            AddressDecl("new", prefix="orders", creation_timestamp="2026-11-22T10:00:00Z"),
            AddressDecl(
                "old",
                prefix="orders",
                distribution="closest",
                creation_timestamp="2026-11-21T10:00:00Z",
            ),
            AddressDecl("unsaved", prefix="orders"),
        ],
    )
    (entry,) = configs(plan)["a-0"].addresses
    assert entry.distribution == "closest"
    assert [(p.name, p.reason) for p in plan.problems] == [
        ("new", "Conflict"),
        ("unsaved", "Conflict"),
    ]
    assert "Address 'old'" in plan.problems[0].message
    # Same prefix in another network is no conflict.
    plan = plan_namespace(
        NS, [], [AddressDecl("x", prefix="orders"), AddressDecl("y", prefix="orders", network="b")]
    )
    assert plan.problems == ()


def test_an_invalid_address_is_its_own_problem_only() -> None:
    plan = plan_namespace(
        NS,
        [interior("a", 2)],
        [
            AddressDecl("wild", prefix="a.*"),
            AddressDecl("both", prefix="x", pattern="y"),
            AddressDecl("redirect", prefix="r", undeliverable="redirect"),
            AddressDecl("fine", prefix="fine"),
        ],
    )
    reasons = {p.name: p.reason for p in plan.problems}
    assert reasons == {
        "wild": "InvalidAddress",
        "both": "InvalidAddress",
        "redirect": "InvalidAddress",
    }
    assert "fallbackAddress is required" in plan.problems_of("Address", "redirect")[0].message
    assert plan.router("a").ok
    assert [a.key for a in configs(plan)["a-1"].addresses] == ["prefix:fine"]


# --- problems on Routers -------------------------------------------------------------------


def test_a_listener_on_a_reserved_port_blocks_that_router_only() -> None:
    plan = plan_namespace(
        NS, [interior("bad", 2, listeners=(ListenerDecl(port=55672),)), interior("good", 2)]
    )
    bad = plan.router("bad")
    assert not bad.ok
    assert [p.reason for p in bad.problems] == ["PortConflict"]
    assert all(pod.config is None for pod in bad.pods)
    # Its pods stay in the topology: peers keep their connections to the running ones.
    assert "inter-router/bad-0" in [c.name for c in configs_of(plan, "good-0").connectors]
    assert plan.router("good").ok
    # An edge may use those ports for clients.
    assert plan_namespace(NS, [edge("e", 1, listeners=(ListenerDecl(port=55672),))]).router("e").ok


def configs_of(plan: NamespacePlan, pod: str) -> RouterConfig:
    config = plan.pods()[pod].config
    assert config is not None
    return config


def test_tls_listeners_get_an_ssl_profile_from_their_mounted_secret() -> None:
    listeners = (ListenerDecl(port=5671, tls_secret="cert"), ListenerDecl(port=5672))
    plan = plan_namespace(NS, [interior("a", 2, listeners=listeners)], cluster_domain="c.org")
    assert plan.problems == ()
    router = plan.router("a")
    assert router.ok
    assert router.tls_secrets == ((5671, "cert"),)
    assert router.endpoints == ("amqps://a.msg.svc.c.org:5671", "amqp://a.msg.svc.c.org:5672")
    for pod in ("a-0", "a-1"):
        cfg = configs_of(plan, pod)
        (profile,) = cfg.sslProfiles
        assert profile.model_dump(exclude_none=True) == {
            "name": "listener-5671",
            "certFile": "/etc/routernet-tls/5671/tls.crt",
            "privateKeyFile": "/etc/routernet-tls/5671/tls.key",
        }
        tls, plain = cfg.listeners[:2]
        assert (tls.port, tls.sslProfile, tls.requireSsl, tls.ssl) == (
            5671,
            "listener-5671",
            True,
            profile,
        )
        assert (plain.port, plain.sslProfile, plain.requireSsl) == (5672, None, False)
        # The operator's inter-router and edge listeners stay plain.
        assert all(lsn.sslProfile is None for lsn in cfg.listeners[2:])


def test_tls_configs_validate_without_the_files_which_only_the_pod_has() -> None:
    """The planner skips the router's file checks (the files are mounted in the pod); the
    router's own loader, given the same config where the files are missing, refuses it."""
    plan = plan_namespace(NS, [edge("e", 1, listeners=(ListenerDecl(tls_secret="cert"),))])
    cfg = configs_of(plan, "e-0")
    assert cfg.listeners[0].ssl is not None
    with pytest.raises(ConfigError) as caught:
        validate_config(cfg.model_dump(mode="json", exclude_defaults=True))
    assert "sslProfiles[0].certFile: '/etc/routernet-tls/5672/tls.crt' does not exist" in str(
        caught.value
    )


def test_tls_secret_changes_are_listener_changes() -> None:
    before = plan_namespace(NS, [interior("a", 1)])
    after = plan_namespace(NS, [interior("a", 1, listeners=(ListenerDecl(tls_secret="cert"),))])
    (change,) = diff_plans(before, after)
    assert (change.pod, change.change, change.listeners_changed) == ("a-0", "changed", True)


def test_an_invalid_router_config_is_reported_with_the_routers_words() -> None:
    plan = plan_namespace(
        NS, [interior("a", 2, listeners=(ListenerDecl(port=5672), ListenerDecl(port=5672)))]
    )
    (problem,) = plan.problems
    assert problem.reason == "InvalidConfig"
    assert "router a-0: listeners[1]: duplicate 0.0.0.0:5672" in problem.message
    assert not plan.router("a").ok
    plan = plan_namespace(
        NS, [interior("a", 1, listeners=(ListenerDecl(sasl_mechanisms=("KERBEROS",)),))]
    )
    assert plan.problems[0].reason == "InvalidConfig"


@pytest.mark.parametrize("name", ["Upper", "1abc", "a_b", "x" * 46, "dots.in.name"])
def test_router_names_that_cannot_name_a_statefulset(name: str) -> None:
    plan = plan_namespace(NS, [RouterDecl(name, replicas=2), interior("ok", 2)])
    assert [p.reason for p in plan.problems_of("Router", name)] == ["InvalidName"]
    assert plan.router(name).pods == ()
    assert len(plan.pods()) == 2


def test_network_names_must_be_label_values() -> None:
    plan = plan_namespace(NS, [interior("a", 1, network="not a label")])
    assert [p.reason for p in plan.problems] == ["InvalidNetwork"]
    assert not plan.router("a").ok


def test_duplicate_declarations_are_an_adapter_bug() -> None:
    with pytest.raises(ValueError, match="two Router declarations named 'a'"):
        plan_namespace(NS, [interior("a", 1), interior("a", 2)])
    with pytest.raises(ValueError, match="edge_failovers"):
        plan_namespace(NS, [], edge_failovers=-1)


# --- link routes ---------------------------------------------------------------------------


def test_link_routes_are_checked_and_the_older_wins() -> None:
    plan = plan_namespace(
        NS,
        [interior("a", 1)],
        link_routes=[
            LinkRouteDecl(
                "broker", prefix="queue", container_id="broker-1", creation_timestamp="1"
            ),
            LinkRouteDecl(
                "db",
                pattern="db.*",
                direction="out",
                connection=LinkRouteConnectionDecl(host="db.svc", port=5673),
            ),
            LinkRouteDecl("clash", prefix="queue", direction="in", container_id="other"),
            LinkRouteDecl("none", prefix="x"),
            LinkRouteDecl("two", prefix="x", pattern="y", container_id="c"),
            LinkRouteDecl("wild", prefix="a.#", container_id="c"),
            LinkRouteDecl("other-way", pattern="db.*", direction="in", container_id="c"),
            LinkRouteDecl(
                "bad-host", prefix="h", connection=LinkRouteConnectionDecl(host="no such host")
            ),
        ],
    )
    routes = {lr.name: lr for lr in plan.networks["default"].link_routes}
    assert sorted(routes) == ["broker", "db", "other-way"]
    assert routes["broker"].directions == ("in", "out")
    assert routes["broker"].key == "prefix:queue"
    assert routes["db"].connection == LinkRouteConnectionDecl("db.svc", 5673)
    assert routes["db"].directions == ("out",)
    reasons = {p.name: p.reason for p in plan.problems}
    assert reasons == {
        "clash": "Conflict",
        "none": "Invalid",
        "two": "Invalid",
        "wild": "Invalid",
        "bad-host": "Invalid",
    }
    clash = plan.problems_of("LinkRoute", "clash")[0].message
    assert "already declared by LinkRoute 'broker' (older)" in clash
    # Only the LinkRoutes: no Router is blocked by a bad one.
    assert all(p.kind == "LinkRoute" for p in plan.problems)


def link_route_plan(routes: list[LinkRouteDecl], **kw: object) -> NamespacePlan:
    """Two interiors and an edge in the default network, plus ``routes``."""
    plan = plan_namespace(
        NS, [interior("core", 2, link_capacity=100), edge("leaf", 1)], link_routes=routes, **kw
    )
    for pod in plan.pods().values():
        revalidated(pod)
    return plan


def test_a_container_link_route_is_folded_into_every_router_in_both_directions() -> None:
    plan = link_route_plan([LinkRouteDecl("broker", prefix="queue", container_id="broker-0")])
    assert plan.problems == ()
    for name, cfg in configs(plan).items():
        entries = [r.model_dump(exclude_defaults=True) for r in cfg.linkRoutes]
        assert entries == [
            {"prefix": "queue", "direction": "in", "containerId": "broker-0"},
            {"prefix": "queue", "direction": "out", "containerId": "broker-0"},
        ], name
        # The broker connects to the routers: no connector for it.
        assert not [c for c in cfg.connectors if c.role == "route-container"], name


def test_a_connection_link_route_gives_interiors_a_connector_and_edges_the_entries() -> None:
    plan = link_route_plan(
        [
            LinkRouteDecl(
                "db",
                pattern="db.*",
                direction="in",
                connection=LinkRouteConnectionDecl(host="broker.msg.svc", port=5673),
            )
        ]
    )
    assert plan.problems == ()
    cfgs = configs(plan)
    entry = {"pattern": "db.*", "direction": "in", "connection": "linkroute/db"}
    for name, cfg in cfgs.items():
        assert [r.model_dump(exclude_defaults=True) for r in cfg.linkRoutes] == [entry], name
    for name in ("core-0", "core-1"):
        route_containers = [c for c in cfgs[name].connectors if c.role == "route-container"]
        assert [c.model_dump(exclude_defaults=True) for c in route_containers] == [
            {
                "name": "linkroute/db",
                "host": "broker.msg.svc",
                "port": 5673,
                "role": "route-container",
                "linkCapacity": 100,
            }
        ]
    # The edge passes attaches up to its interior: the entries name a connector it has not.
    assert [c.role for c in cfgs["leaf-0"].connectors] == ["edge", "edge"]


def test_link_routes_are_per_network_and_sorted() -> None:
    plan = plan_namespace(
        NS,
        [interior("a", 1), interior("b", 1, network="other")],
        link_routes=[
            LinkRouteDecl("z", prefix="zz", direction="out", container_id="c"),
            LinkRouteDecl("y", prefix="aa", container_id="c"),
            LinkRouteDecl("x", prefix="q", container_id="c", network="other"),
        ],
    )
    cfgs = configs(plan)
    assert [r.key for r in cfgs["a-0"].linkRoutes] == [
        "prefix:aa direction:in",
        "prefix:aa direction:out",
        "prefix:zz direction:out",
    ]
    assert [r.key for r in cfgs["b-0"].linkRoutes] == [
        "prefix:q direction:in",
        "prefix:q direction:out",
    ]
    # Order of the declarations does not matter.
    again = plan_namespace(
        NS,
        [interior("b", 1, network="other"), interior("a", 1)],
        link_routes=[
            LinkRouteDecl("x", prefix="q", container_id="c", network="other"),
            LinkRouteDecl("y", prefix="aa", container_id="c"),
            LinkRouteDecl("z", prefix="zz", direction="out", container_id="c"),
        ],
    )
    assert configs(again) == cfgs


def test_one_direction_each_is_no_conflict_but_both_against_one_is() -> None:
    plan = link_route_plan(
        [
            LinkRouteDecl(
                "in", prefix="q", direction="in", container_id="a", creation_timestamp="1"
            ),
            LinkRouteDecl(
                "out", prefix="q", direction="out", container_id="b", creation_timestamp="2"
            ),
            LinkRouteDecl("both", prefix="q", container_id="c", creation_timestamp="3"),
        ]
    )
    assert [(p.name, p.reason) for p in plan.problems] == [("both", "Conflict")]
    entries = configs(plan)["core-0"].linkRoutes
    assert [(r.direction, r.containerId) for r in entries] == [("in", "a"), ("out", "b")]


def secure_plan(connection: LinkRouteConnectionDecl, name: str = "vault") -> NamespacePlan:
    """Two interiors and an edge, with one LinkRoute dialling ``connection``; validated with
    the router's model minus its file checks, as the planner does (the files are mounted in
    the pods, not here)."""
    plan = plan_namespace(
        NS,
        [interior("core", 2, link_capacity=100), edge("leaf", 1)],
        link_routes=[LinkRouteDecl(name, prefix="vault", connection=connection)],
    )
    assert plan.problems == ()
    for pod in plan.pods().values():
        assert pod.config is not None
        dumped = pod.config.model_dump(mode="json", exclude_defaults=True)
        assert RouterConfig.model_validate(dumped, context={FILES_CONTEXT_KEY: False}) == (
            pod.config
        )
    return plan


def test_a_connection_with_a_ca_and_credentials_dials_with_tls_and_plain() -> None:
    connection = LinkRouteConnectionDecl(
        "vault.msg.svc", 5671, tls_secret="vault-ca", sasl_secret="vault-login"
    )
    plan = secure_plan(connection)
    for name in ("core-0", "core-1"):
        cfg = configs(plan)[name]
        assert [p.model_dump(exclude_defaults=True) for p in cfg.sslProfiles] == [
            {"name": "linkroute-vault", "caCertFile": "/etc/routernet-linkroute/vault/tls/ca.crt"}
        ]
        [connector] = [c for c in cfg.connectors if c.role == "route-container"]
        assert connector.model_dump(exclude_defaults=True) == {
            "name": "linkroute/vault",
            "host": "vault.msg.svc",
            "port": 5671,
            "role": "route-container",
            "linkCapacity": 100,
            "sslProfile": "linkroute-vault",
            "saslMechanisms": ["PLAIN"],
            "saslUsername": "file:/etc/routernet-linkroute/vault/sasl/username",
            "saslPassword": "file:/etc/routernet-linkroute/vault/sasl/password",
        }
        assert connector.verifyHostname is True  # the host is the Service's DNS name
        assert [r.connection for r in cfg.linkRoutes] == ["linkroute/vault"] * 2
        # The router itself refuses it where the CA file is not (here): it is the pod's.
        dumped = cfg.model_dump(mode="json", exclude_defaults=True)
        with pytest.raises(ConfigError, match=r"ca\.crt' does not exist"):
            validate_config(dumped)
    # Edges: the entries alone (their interior dials the broker), no profile, nothing to mount.
    leaf = configs(plan)["leaf-0"]
    assert leaf.sslProfiles == [] and all(c.role == "edge" for c in leaf.connectors)
    assert [r.connection for r in leaf.linkRoutes] == ["linkroute/vault"] * 2
    assert plan.router("leaf").link_route_secrets == ()
    mounts = plan.router("core").link_route_secrets
    assert [(m.kind, m.secret, m.path, m.keys) for m in mounts] == [
        ("tls", "vault-ca", "/etc/routernet-linkroute/vault/tls", ("ca.crt",)),
        ("sasl", "vault-login", "/etc/routernet-linkroute/vault/sasl", ("username", "password")),
    ]


def test_a_connection_with_credentials_alone_logs_in_without_tls() -> None:
    plan = secure_plan(LinkRouteConnectionDecl("vault", sasl_secret="vault-login"))
    cfg = configs(plan)["core-0"]
    assert cfg.sslProfiles == []
    [connector] = [c for c in cfg.connectors if c.role == "route-container"]
    assert (connector.sslProfile, connector.saslMechanisms) == (None, ["PLAIN"])
    assert connector.saslPassword == "file:/etc/routernet-linkroute/vault/sasl/password"
    # The credentials are read on every connection attempt, not when the config is loaded.
    validate_config(cfg.model_dump(mode="json", exclude_defaults=True))
    assert [m.kind for m in plan.router("core").link_route_secrets] == ["sasl"]


def test_a_connection_with_a_ca_alone_dials_tls_anonymously() -> None:
    plan = secure_plan(LinkRouteConnectionDecl("vault", tls_secret="vault-ca"))
    [connector] = [c for c in configs(plan)["core-0"].connectors if c.role == "route-container"]
    assert (connector.sslProfile, connector.saslMechanisms) == ("linkroute-vault", ["ANONYMOUS"])
    assert connector.saslUsername is None
    assert [m.kind for m in plan.router("core").link_route_secrets] == ["tls"]


def test_listener_and_link_route_profiles_live_side_by_side() -> None:
    plan = plan_namespace(
        NS,
        [interior("core", 1, listeners=(ListenerDecl(port=5671, tls_secret="core-tls"),))],
        link_routes=[
            LinkRouteDecl("z", prefix="z", connection=LinkRouteConnectionDecl("z", tls_secret="c")),
            LinkRouteDecl("a", prefix="a", connection=LinkRouteConnectionDecl("a", tls_secret="c")),
        ],
    )
    assert plan.problems == ()
    assert [p.name for p in configs(plan)["core-0"].sslProfiles] == [
        "listener-5671",
        "linkroute-a",
        "linkroute-z",
    ]


def test_a_refused_connection_mounts_nothing() -> None:
    """A LinkRoute that loses a conflict is in no config, and no pod mounts its Secrets."""
    plan = plan_namespace(
        NS,
        [interior("core", 1)],
        link_routes=[
            LinkRouteDecl("first", prefix="q", container_id="c", creation_timestamp="1"),
            LinkRouteDecl(
                "second",
                prefix="q",
                connection=LinkRouteConnectionDecl("b", tls_secret="b-ca", sasl_secret="b-login"),
                creation_timestamp="2",
            ),
        ],
    )
    assert [(p.name, p.reason) for p in plan.problems] == [("second", "Conflict")]
    assert plan.router("core").link_route_secrets == ()
    cfg = configs(plan)["core-0"]
    assert cfg.sslProfiles == [] and "linkroute/second" not in cfg.model_dump_json()


def test_link_route_changes_are_live_config_changes() -> None:
    before = link_route_plan([])
    after = link_route_plan(
        [LinkRouteDecl("db", prefix="db", connection=LinkRouteConnectionDecl("broker"))]
    )
    changes = {c.pod: c for c in diff_plans(before, after)}
    assert sorted(changes) == ["core-0", "core-1", "leaf-0"]
    assert not any(c.restart for c in changes.values())
    assert changes["core-0"].link_routes_added == (
        "prefix:db direction:in",
        "prefix:db direction:out",
    )
    assert changes["core-0"].connectors_added == ("linkroute/db",)
    assert changes["leaf-0"].connectors_added == ()
    removed = {c.pod: c for c in diff_plans(after, before)}
    assert removed["core-1"].connectors_removed == ("linkroute/db",)
    assert removed["leaf-0"].link_routes_removed == (
        "prefix:db direction:in",
        "prefix:db direction:out",
    )


def test_link_route_record_is_its_spec_as_applied() -> None:
    plan = link_route_plan(
        [
            LinkRouteDecl("a", prefix="q", container_id="c"),
            LinkRouteDecl(
                "b", pattern="p.*", direction="out", connection=LinkRouteConnectionDecl("h", 1)
            ),
        ]
    )
    records = {lr.name: lr.record() for lr in plan.router("leaf").link_routes}
    assert records == {
        "a": {"prefix": "q", "direction": "both", "containerId": "c"},
        "b": {"pattern": "p.*", "direction": "out", "connection": {"host": "h", "port": 1}},
    }
    secure = secure_plan(LinkRouteConnectionDecl("h", 1, tls_secret="ca", sasl_secret="login"))
    assert [lr.record() for lr in secure.router("core").link_routes] == [
        {
            "prefix": "vault",
            "direction": "both",
            "connection": {"host": "h", "port": 1, "tlsSecret": "ca", "saslSecret": "login"},
        }
    ]


def test_a_gateway_listener_must_not_take_a_routers_own_port() -> None:
    gateway = GatewayDecl("gw", listener=GatewayListenerDecl("hub", 5672))
    plan = plan_namespace("ns", [RouterDecl("hub")], gateways=[gateway])
    assert [(p.reason, p.message) for p in plan.problems_of("Gateway", "gw")] == [
        (
            "InvalidRouter",
            "listener: port 5672 is already taken on the pods of Router 'hub' (by a listener"
            " of its own, or as its inter-router, edge or metrics port); choose another port",
        )
    ]
    # Not applied: the routers run without it.
    config = plan.router("hub").pods[0].config
    assert config is not None and config.gateway.export == []
    assert all(lsn.role != "gateway" for lsn in config.listeners)


MUTUAL = GatewayDecl(
    "gw",
    listener=GatewayListenerDecl("hub", tls=ListenerTlsDecl("hub-tls", ca_secret="peers-ca")),
    connectors=(
        GatewayConnectorDecl(
            "bank", "spoke", "gw.bank.example", tls=ConnectorTlsDecl("spoke-tls", "bank-ca")
        ),
    ),
)


def test_a_mutual_tls_gateway_mounts_its_secrets_on_its_routers_pods_only() -> None:
    plan = plan_namespace(
        NS, [interior("hub", 2), interior("spoke", 1), edge("leaf", 1)], gateways=[MUTUAL]
    )
    assert plan.problems == ()
    for pod in ("hub-0", "hub-1"):
        hub = configs(plan)[pod]
        [listener] = [lsn for lsn in hub.listeners if lsn.role == "gateway"]
        assert (listener.sslProfile, listener.requireSsl) == ("gateway-listener", True)
        # EXTERNAL alone: a connector gets in by a certificate the CA signed, or not at all.
        assert listener.saslMechanisms == ["EXTERNAL"] and listener.verifies_clients
        assert [p.model_dump(exclude_none=True) for p in hub.sslProfiles] == [
            {
                "name": "gateway-listener",
                "certFile": "/etc/routernet-gateway/listener/tls/tls.crt",
                "privateKeyFile": "/etc/routernet-gateway/listener/tls/tls.key",
                "caCertFile": "/etc/routernet-gateway/listener/ca/ca.crt",
            }
        ]
        with pytest.raises(ConfigError, match="does not exist"):
            validate_config(hub.model_dump(mode="json", exclude_defaults=True))
    spoke = configs(plan)["spoke-0"]
    [connector] = [c for c in spoke.connectors if c.role == "gateway"]
    assert (connector.name, connector.sslProfile) == ("gateway/bank", "gateway-connector-bank")
    assert connector.saslMechanisms == ["EXTERNAL"] and connector.verifyHostname is True
    assert [p.model_dump(exclude_none=True) for p in spoke.sslProfiles] == [
        {
            "name": "gateway-connector-bank",
            "certFile": "/etc/routernet-gateway/connectors/bank/tls/tls.crt",
            "privateKeyFile": "/etc/routernet-gateway/connectors/bank/tls/tls.key",
            "caCertFile": "/etc/routernet-gateway/connectors/bank/ca/ca.crt",
        }
    ]
    mounts = {
        name: [(m.volume, m.secret, m.path, m.keys) for m in plan.router(name).gateway_secrets]
        for name in ("hub", "spoke", "leaf")
    }
    assert mounts == {
        "hub": [
            (
                "gw-tls-listener",
                "hub-tls",
                "/etc/routernet-gateway/listener/tls",
                ("tls.crt", "tls.key"),
            ),
            ("gw-ca-listener", "peers-ca", "/etc/routernet-gateway/listener/ca", ("ca.crt",)),
        ],
        "spoke": [
            (
                "gwc-tls-bank",
                "spoke-tls",
                "/etc/routernet-gateway/connectors/bank/tls",
                ("tls.crt", "tls.key"),
            ),
            ("gwc-ca-bank", "bank-ca", "/etc/routernet-gateway/connectors/bank/ca", ("ca.crt",)),
        ],
        "leaf": [],
    }
    assert configs(plan)["leaf-0"].sslProfiles == []


def test_gateway_tls_without_client_certificates() -> None:
    """A listener without a CA serves TLS to anonymous connectors; a connector without a CA
    trusts the system's, one without a certificate connects anonymously, and hostname
    verification is switched off only when asked."""
    gateway = GatewayDecl(
        "gw",
        listener=GatewayListenerDecl("hub", tls=ListenerTlsDecl("hub-tls")),
        connectors=(
            GatewayConnectorDecl("public", "hub", "gw.example.com", tls=ConnectorTlsDecl()),
            GatewayConnectorDecl(
                "by-ip", "hub", "10.0.0.7", tls=ConnectorTlsDecl(None, "ca", verify_hostname=False)
            ),
            GatewayConnectorDecl("plain", "hub", "gw.example.org"),
        ),
    )
    plan = plan_namespace(NS, [interior("hub", 1)], gateways=[gateway])
    hub = configs(plan)["hub-0"]
    [listener] = [lsn for lsn in hub.listeners if lsn.role == "gateway"]
    assert listener.requireSsl and listener.saslMechanisms == ["ANONYMOUS"]
    assert not listener.verifies_clients
    connectors = {c.name: c for c in hub.connectors}
    assert [
        (c.sslProfile, c.verifyHostname, c.saslMechanisms)
        for c in (connectors["gateway/public"], connectors["gateway/by-ip"])
    ] == [
        ("gateway-connector-public", True, ["ANONYMOUS"]),
        ("gateway-connector-by-ip", False, ["ANONYMOUS"]),
    ]
    assert connectors["gateway/plain"].sslProfile is None
    assert [p.model_dump(exclude_none=True) for p in hub.sslProfiles] == [
        {
            "name": "gateway-listener",
            "certFile": "/etc/routernet-gateway/listener/tls/tls.crt",
            "privateKeyFile": "/etc/routernet-gateway/listener/tls/tls.key",
        },
        {"name": "gateway-connector-public"},
        {
            "name": "gateway-connector-by-ip",
            "caCertFile": "/etc/routernet-gateway/connectors/by-ip/ca/ca.crt",
        },
    ]
    assert [m.volume for m in plan.router("hub").gateway_secrets] == [
        "gw-tls-listener",
        "gwc-ca-by-ip",
    ]


def test_a_gateway_that_is_not_applied_mounts_nothing() -> None:
    plan = plan_namespace(NS, [interior("spoke", 1)], gateways=[MUTUAL])
    assert [p.reason for p in plan.problems_of("Gateway", "gw")] == ["InvalidRouter"]
    assert plan.router("spoke").gateway_secrets == ()
    assert configs(plan)["spoke-0"].sslProfiles == []


@pytest.mark.parametrize("port", [INTER_ROUTER_PORT, EDGE_PORT, 9090])
def test_a_gateway_listener_must_not_take_a_reserved_port(port: int) -> None:
    gateway = GatewayDecl("gw", listener=GatewayListenerDecl("hub", port))
    plan = plan_namespace("ns", [RouterDecl("hub")], gateways=[gateway])
    [problem] = plan.problems_of("Gateway", "gw")
    assert f"port {port} is already taken on the pods of Router 'hub'" in problem.message
    assert plan.router("hub").gateway_port is None
