"""Fuzzing the attaches a client can send: addresses, dynamic flags, capabilities, filters and
terminus properties of every kind, on a router with link routes (attaches go to a container),
address rules and management. Each is answered (attached, or refused with a detach and an
error); the router stays up, keeps the client's connection and goes on routing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from clients import World
from harness import RouterProcess
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import Endpoint, symbol
from proton.handlers import MessagingHandler
from test_dispatch_interop import assert_serving

pytestmark = pytest.mark.network

addresses = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "q.x",
            "q",
            "$management",
            "_topo/0/R/x",
            "_topo/0/Z/$management",
            "_local/x",
            "_edge/e",
            "_routernet/telemetry",
            "amqp:/_topo/0/all/x",
            "a.b.c",
            "",
            "/",
            "//",
            "(x)/y",
            "$x",
        ]
    ),
    st.text(max_size=40),
)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**31), 2**31 - 1), st.text(max_size=10)),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)


def terminus(t: Any, draw: Any) -> None:
    address = draw(addresses)
    if address is not None:
        t.address = address
    t.dynamic = draw(st.booleans())
    t.durability = draw(st.sampled_from([0, 1, 2]))
    if draw(st.booleans()):
        t.capabilities.put_object(
            symbol(
                draw(
                    st.sampled_from(
                        ["qd.router", "qd.router-data", "topic", "queue", "shared", "x"]
                    )
                )
            )
        )
    if draw(st.booleans()):
        key = draw(st.text(st.characters(max_codepoint=127), max_size=8))
        t.properties.put_object({symbol(key): draw(values)})
    if draw(st.booleans()):
        t.filter.put_object({symbol("f"): draw(values)})
    if draw(st.booleans()):
        t.distribution_mode = draw(st.sampled_from([0, 1, 2]))


class Refusals(MessagingHandler):
    """Keeps the connection open when a link is refused (proton's default closes it)."""

    def __init__(self) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.refused = 0
        self.errors: list[str] = []

    def on_link_error(self, event: Any) -> None:
        self.refused += 1
        event.link.close()  # answer the router's detach, as a client does

    def on_connection_error(self, event: Any) -> None:
        cond = event.connection.remote_condition
        self.errors.append(f"{cond.name}: {cond.description}" if cond else "closed")


@pytest.mark.network
def test_any_attach_is_answered_and_the_router_goes_on(tmp_path: Path, world: World) -> None:
    router = RouterProcess(
        tmp_path,
        "R",
        addresses=[{"prefix": "a", "distribution": "multicast"}],
    )
    router.config["linkRoutes"] = [
        {"prefix": "q", "direction": "in", "containerId": "broker"},
        {"prefix": "q", "direction": "out", "containerId": "broker"},
    ]
    with router:
        quiet = Refusals()
        conn = world.container.connect(router.url, handler=quiet, reconnect=False)
        session = conn.session()
        session.open()
        made: list[Any] = []

        @settings(
            max_examples=150,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def attach(data: Any) -> None:
            draw = data.draw
            name = f"fuzz-{len(made)}"
            link = session.sender(name) if draw(st.booleans()) else session.receiver(name)
            terminus(link.source, draw)
            terminus(link.target, draw)
            link.open()
            if link.is_receiver:
                link.flow(draw(st.integers(0, 5)))
            made.append(link)
            world.run_until(
                lambda: (
                    link.state & (Endpoint.REMOTE_ACTIVE | Endpoint.REMOTE_CLOSED)
                    or conn.state & Endpoint.REMOTE_CLOSED
                ),
                what=f"an answer to attach {name}",
            )
            assert not conn.state & Endpoint.REMOTE_CLOSED, f"closed after {name}: {quiet.errors}"
            assert router.alive(), router.log()[-3000:]

        attach()
        assert quiet.refused, "no attach was refused: the fuzzer reaches too little"
        assert "connection.failed" not in router.log()
        assert_serving(world, router, "a.still")
