"""Live configuration changes: the config file or the pod's ConfigMap changes, the router applies
the difference in place (addresses, listeners, connectors) without a restart.

In-process: `apply_config` on a Router that is not running, `FileSource` with a fake clock, and
the ConfigMap watcher against fake list/watch functions. Real processes (`network`): a router
started with --config follows edits of its file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, RELEASED, Management, World
from harness import NETWORK_TIMERS, RouterProcess, free_port, write_kubeconfig
from proton import Message

from router.config import records as configrecords
from router.config.check import Overrides, effective_config, in_process
from router.config.child import ChildValidator
from router.config.live import apply_config, offer, restart_reasons
from router.config.models import RouterConfig, validate_config
from router.config.sources import FILE_CHECK_SECONDS, FileSource
from router.config.sync import ConfigMapWatcher

# ----- apply_config on a router that is not running -------------------------------------------


def config(**extra: Any) -> RouterConfig:
    data: dict[str, Any] = {"router": {"id": "R1"}}
    data.update(extra)
    return validate_config(data)


@pytest.fixture(autouse=True)
def _debug_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="router")


@pytest.fixture
def make_router() -> Iterator[Callable[[RouterConfig], Any]]:
    from router.core.engine import Router

    made: list[Router] = []

    def make(cfg: RouterConfig) -> Router:
        router = Router(cfg)
        made.append(router)
        return router

    yield make
    for router in made:
        for sock, _cfg in list(router.listeners):
            router.close_listener(sock)
        router.sel.close()


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    return [getattr(r, "routernet_fields", {}) for r in caplog.records if r.getMessage() == name]


def test_address_rules_change_in_place(
    make_router: Callable[[RouterConfig], Any], caplog: pytest.LogCaptureFixture
) -> None:
    router = make_router(config(addresses=[{"prefix": "old", "distribution": "closest"}]))
    news = router.fwd.entry("news.today")
    old = router.fwd.entry("old.x")
    assert (news.rule.distribution, old.rule.distribution) == ("balanced", "closest")

    new = config(addresses=[{"prefix": "news", "distribution": "multicast"}])
    changes = apply_config(router, new, "test")

    assert changes == ["address -prefix:old", "address +prefix:news multicast"]
    assert router.config is new
    assert news.rule.distribution == "multicast"
    assert router.fwd.entry("old.x").rule.distribution == "balanced"
    [applied] = events(caplog, "config.applied")
    assert applied == {"source": "test", "changes": "; ".join(changes)}
    # The same again: nothing to do, nothing logged.
    assert apply_config(router, new, "test") == []
    assert len(events(caplog, "config.applied")) == 1


def test_moving_an_open_store_needs_a_restart() -> None:
    def at(path: str | None) -> RouterConfig:
        return validate_config({"router": {"id": "R1"}, "store": {"path": path}})

    assert restart_reasons(at(None), at("/var/lib/a")) == []  # opened when first needed
    [reason] = restart_reasons(at("/var/lib/a"), at("/var/lib/b"))
    assert reason.startswith("store: ") and "/var/lib/b" in reason


def test_router_entity_changes_need_a_restart(
    make_router: Callable[[RouterConfig], Any], caplog: pytest.LogCaptureFixture
) -> None:
    before = config()
    router = make_router(before)
    moved = validate_config(
        {"router": {"id": "R1", "mode": "interior"}, "addresses": [{"prefix": "a"}]}
    )
    assert restart_reasons(before, moved) == ["router.mode: 'standalone' -> 'interior'"]
    assert apply_config(router, moved, "test") == []
    assert router.config is before  # nothing of it applied, not even the address
    assert router.fwd.entry("a").rule.prefix is None
    [refused] = events(caplog, "config.restart_required")
    assert refused["changes"] == "router.mode: 'standalone' -> 'interior'"
    renamed = validate_config({"router": {"id": "R2"}})
    assert apply_config(router, renamed, "test") == []
    assert "router.id: 'R1' -> 'R2'" in events(caplog, "config.restart_required")[1]["changes"]


def test_the_drain_timeout_changes_without_a_restart(
    make_router: Callable[[RouterConfig], Any], caplog: pytest.LogCaptureFixture
) -> None:
    router = make_router(config())
    longer = validate_config({"router": {"id": "R1", "drainTimeoutSeconds": 25}})
    assert restart_reasons(router.config, longer) == []
    assert apply_config(router, longer, "test") == ["router.drainTimeoutSeconds: 10.0 -> 25.0"]
    assert router.config is longer
    assert not events(caplog, "config.restart_required")


def test_gateway_changes_apply_live(
    make_router: Callable[[RouterConfig], Any], caplog: pytest.LogCaptureFixture
) -> None:
    router = make_router(validate_config({"router": {"id": "R1", "mode": "interior"}}))
    port = free_port()
    gateway = {
        "rules": [{"container": "branch-1", "node": {"exact": "atm"}}],
        "export": [{"prefix": "branch-"}],
        "containers": [{"container": "paris", "connector": "megabank"}],
    }
    new = validate_config(
        {
            "router": {"id": "R1", "mode": "interior"},
            "listeners": [{"host": "127.0.0.1", "port": port, "role": "gateway"}],
            "connectors": [{"name": "megabank", "port": 1, "role": "gateway"}],
            "gateway": gateway,
        }
    )
    assert restart_reasons(router.config, new) == []
    changes = apply_config(router, new, "test")
    assert changes == [
        f"listener +listener/127.0.0.1:{port}",
        "connector +megabank",
        "gateway ~1 rules, default -, 1 exports, 1 containers",
    ]
    assert router.config.gateway is new.gateway
    assert [c.config.role for c in router.connectors.items] == ["gateway"]
    assert not events(caplog, "config.restart_required")


def test_invalid_config_is_logged_and_ignored(
    make_router: Callable[[RouterConfig], Any], caplog: pytest.LogCaptureFixture
) -> None:
    router = make_router(config())

    def load() -> RouterConfig:
        return validate_config({"router": {"id": "R1"}, "addresses": [{"prefix": "a b"}]})

    before = router.config
    assert offer(router, "test", load) == []
    assert router.config is before
    [invalid] = events(caplog, "config.invalid")
    assert invalid["error"].startswith("addresses[0].prefix: 'a b' is not a valid prefix")
    assert "\n" not in invalid["error"]


def test_listeners_open_close_and_update(
    make_router: Callable[[RouterConfig], Any], caplog: pytest.LogCaptureFixture
) -> None:
    keep, drop, add = free_port(), free_port(), free_port()
    router = make_router(
        config(listeners=[{"host": "127.0.0.1", "port": keep}, {"host": "127.0.0.1", "port": drop}])
    )
    router.open_listeners()
    new = config(
        listeners=[
            {"host": "127.0.0.1", "port": keep, "linkCapacity": 10},
            {"host": "127.0.0.1", "port": add},
        ]
    )
    changes = apply_config(router, new, "test")
    assert changes == [
        f"listener ~listener/127.0.0.1:{keep}",
        f"listener -listener/127.0.0.1:{drop}",
        f"listener +listener/127.0.0.1:{add}",
    ]
    ports = {sock.getsockname()[1]: cfg for sock, cfg in router.listeners}
    assert set(ports) == {keep, add}
    assert ports[keep].linkCapacity == 10
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", drop), timeout=1).close()


def test_a_listener_that_cannot_bind_is_reported_and_tried_again(
    make_router: Callable[[RouterConfig], Any], caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    router = make_router(config())
    blocker = socket.create_server(("127.0.0.1", port))
    new = config(listeners=[{"host": "127.0.0.1", "port": port}], addresses=[{"prefix": "a"}])
    try:
        changes = apply_config(router, new, "test")
    finally:
        blocker.close()
    assert changes[0] == "address +prefix:a balanced"
    assert changes[1].startswith(f"listener !listener/127.0.0.1:{port} (")
    assert router.config is new and router.listeners == []
    assert events(caplog, "listener.failed")
    # The same configuration again: the listener is still missing, so it is tried again.
    assert offer(router, "test", lambda: new) == [f"listener +listener/127.0.0.1:{port}"]
    assert [s.getsockname()[1] for s, _c in router.listeners] == [port]


def test_connectors_added_removed_and_replaced_by_name(
    make_router: Callable[[RouterConfig], Any],
) -> None:
    def connectors(*entries: dict[str, Any]) -> RouterConfig:
        return validate_config(
            {"router": {"id": "R1", "mode": "interior"}, "connectors": list(entries)}
        )

    a = {"name": "a", "host": "127.0.0.1", "port": 1, "role": "inter-router"}
    b = {"name": "b", "host": "127.0.0.1", "port": 2, "role": "inter-router"}
    router = make_router(connectors(a, b))
    first_a = router.connectors.items[0]
    changes = apply_config(router, connectors({**a, "cost": 5}, {**b, "name": "c"}), "test")
    assert changes == ["connector ~a", "connector -b", "connector +c"]
    assert [(c.name, c.config.cost) for c in router.connectors.items] == [("a", 5), ("c", 1)]
    assert router.connectors.items[0] is not first_a
    assert first_a.phase == "stopped"


# ----- the config file ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = time.time() + 10.0  # the file's writes are all "long ago"

    def __call__(self) -> float:
        return self.now


def test_file_source_reads_only_on_change(
    tmp_path: Path,
    make_router: Callable[[RouterConfig], Any],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "router.yaml"
    path.write_text("router: {id: FILE}\n")
    overrides = Overrides(id="R1")  # as --id R1 on the command line: it keeps winning
    router = make_router(effective_config({"router": {"id": "FILE"}}, overrides))
    source = FileSource(path, in_process(overrides), clock=Clock())
    source.start(router)
    reads: list[Path] = []
    real_read = Path.read_bytes

    def counting_read(self: Path) -> bytes:
        reads.append(self)
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", counting_read)
    t = 100.0
    source.poll(t)  # first look: read, same configuration as running
    assert len(reads) == 1 and router.config.addresses == []
    for _ in range(5):
        t += 0.6
        source.poll(t)  # unchanged: a stat each, no read
    assert len(reads) == 1

    path.write_text("router: {id: FILE}\naddresses: [{prefix: X, distribution: multicast}]\n")
    source.poll(t + FILE_CHECK_SECONDS / 2)  # too soon after the last look
    assert router.config.addresses == []
    t += 0.6
    source.poll(t)
    assert [(a.prefix, a.distribution) for a in router.config.addresses] == [("X", "multicast")]
    assert router.config.router.id == "R1"
    assert not events(caplog, "config.restart_required")

    # Touched, same content: read, not applied again.
    os.utime(path, ns=(1, 1))
    t += 0.6
    source.poll(t)
    assert len(reads) == 3
    assert len(events(caplog, "config.applied")) == 1

    # Empty (caught while being written) and broken: refused once each, the old one kept.
    for content in ("", "router: {id: R1\n"):
        path.write_text(content)
        t += 0.6
        source.poll(t)
        t += 0.6
        source.poll(t)
    assert [e["error"].split(":")[0] for e in events(caplog, "config.invalid")] == [
        f"config file {str(path)!r} is empty",
        f"{path}",
    ]
    path.unlink()
    t += 0.6
    source.poll(t)
    assert "cannot read config file" in events(caplog, "config.invalid")[-1]["error"]
    assert router.config.addresses[0].prefix == "X"


def test_file_source_waits_for_a_write_to_settle(
    tmp_path: Path, make_router: Callable[[RouterConfig], Any]
) -> None:
    path = tmp_path / "router.json"
    path.write_text(json.dumps({"router": {"id": "R1"}}))
    router = make_router(config())
    clock = Clock()
    source = FileSource(path, in_process(Overrides()), clock=clock)
    source.start(router)
    source.poll(1.0)
    path.write_text(json.dumps({"router": {"id": "R1"}, "addresses": [{"prefix": "a"}]}))
    clock.now = path.stat().st_mtime_ns / 1e9 + 0.01  # modified 10 ms ago
    source.poll(2.0)
    assert router.config.addresses == []
    clock.now += 1.0
    source.poll(2.1)  # looked at again at the next housekeeping, not 0.5 s later
    assert router.config.addresses[0].prefix == "a"


def test_file_source_has_a_child_validate_while_the_loop_goes_on(
    tmp_path: Path, make_router: Callable[[Any], Any], caplog: pytest.LogCaptureFixture
) -> None:
    """As a router process does it: the child validates with the command's flags (--id R1
    wins over the file's), the records built from what it printed are applied once it is done,
    and a bad file is refused with the child's one-line reason."""
    path = tmp_path / "router.yaml"
    path.write_text("router: {id: FILE}\n")
    running = validate_config({"router": {"id": "R1"}}).model_dump(mode="json")
    router = make_router(configrecords.RouterConfig.from_dict(running))
    source = FileSource(path, ChildValidator(["--id", "R1"]), clock=Clock())
    source.start(router)

    def settle(t: float) -> float:
        deadline = time.monotonic() + 30
        while source.pending is not None and time.monotonic() < deadline:
            time.sleep(0.02)
            t += 0.1
            source.poll(t)
        assert source.pending is None
        return t

    t = settle(100.0)
    path.write_text("router: {id: FILE}\naddresses: [{prefix: X, distribution: multicast}]\n")
    t += 0.6
    source.poll(t)
    assert source.pending is not None  # validating: poll returned, nothing applied yet
    assert router.config.addresses == []
    t = settle(t)
    assert isinstance(router.config, configrecords.RouterConfig)
    assert [(a.prefix, a.distribution) for a in router.config.addresses] == [("X", "multicast")]
    assert router.config.router.id == "R1"

    path.write_text("router: {id: FILE}\naddresses: [{prefix: X, distribution: sideways}]\n")
    t += 0.6
    source.poll(t)
    settle(t)
    [refused] = events(caplog, "config.invalid")
    assert refused["error"].startswith("addresses[0].distribution: 'sideways' is invalid")
    assert router.config.addresses[0].distribution == "multicast"


# ----- the ConfigMap watcher, against fake list and watch functions ----------------------------


def cm(text: str | None, version: str, name: str = "routers") -> dict[str, Any]:
    data = {} if text is None else {"R1.json": text}
    return {"metadata": {"name": name, "resourceVersion": version}, "data": data}


class FakeApi:
    """Lists and watches scripted per call; every call recorded."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[tuple[str, str | None]] = []
        self.done = threading.Event()

    def list_fn(self) -> tuple[str | None, dict[str, Any] | None]:
        self.calls.append(("list", None))
        result = self.lists.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    def watch_fn(self, version: str | None) -> Iterator[dict[str, Any]]:
        self.calls.append(("watch", version))
        if not self.watches:
            self.done.set()
            threading.Event().wait(5)  # as a quiet watch does, until the test stops the thread
            return
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


class ApiException(Exception):
    """Shaped as kubernetes.client.ApiException: a ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.reason = "test"


def run_watcher(api: FakeApi) -> list[str | None]:
    delivered: list[str | None] = []
    watcher = ConfigMapWatcher(
        "ns",
        "routers",
        "R1.json",
        delivered.append,
        list_fn=api.list_fn,
        watch_fn=api.watch_fn,
        initial_backoff=0.01,
        max_backoff=0.05,
    )
    watcher.start()
    assert api.done.wait(5), api.calls
    watcher.stop()
    return delivered


def test_watcher_follows_versions_and_hands_over_changes_only() -> None:
    api = FakeApi(
        lists=[("10", cm("v1", "9"))],
        watches=[
            [
                {"type": "ADDED", "object": cm("v1", "9")},  # what the list had: not again
                {"type": "MODIFIED", "object": cm("v2", "11")},
                {"type": "MODIFIED", "object": cm("v2", "12")},  # another key changed
                {"type": "MODIFIED", "object": cm("other", "13", name="elsewhere")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
            ],
            # the API ended that watch: resume where it was
            [{"type": "DELETED", "object": cm("v2", "21")}],
            [{"type": "ADDED", "object": cm("v3", "22")}],
        ],
    )
    assert run_watcher(api) == ["v1", "v2", None, "v3"]
    assert api.calls == [
        ("list", None),
        ("watch", "10"),
        ("watch", "20"),
        ("watch", "21"),
        ("watch", "22"),
    ]


def test_watcher_lists_again_on_410_and_backs_off_on_errors() -> None:
    api = FakeApi(
        lists=[
            OSError("connection refused"),  # pause, then list again
            ("5", cm("v1", "5")),
            ("30", cm("v2", "29")),
            ("40", cm("v3", "40")),
        ],
        watches=[
            [ApiException(500)],  # pause, then resume from the same version
            [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}],
            [{"type": "MODIFIED", "object": cm("v3", "31")}, ApiException(410)],
            [],  # ended at once without an event: a failure too, or it would spin
        ],
    )
    assert run_watcher(api) == ["v1", "v2", "v3"]
    assert api.calls == [
        ("list", None),
        ("list", None),
        ("watch", "5"),
        ("watch", "5"),
        ("list", None),  # the ERROR event's 410
        ("watch", "30"),
        ("list", None),  # the client's ApiException 410
        ("watch", "40"),
        ("watch", "40"),
    ]


# ----- real router processes following their config file --------------------------------------

APPLY_TIMEOUT = 3.0  # looked at every 0.1 s, validated by a child (~0.3 s): applied in ~0.5 s


def rewrite(router: RouterProcess, atomic: bool = True) -> float:
    """Write the router's config file as `router.config` now says; returns when (wall clock)."""
    if atomic:
        router.rewrite_config()
    else:
        router.config_path.write_text(json.dumps(router.config))
    return time.time()


def log_time(line: str) -> float:
    """Wall-clock time of a logfmt line's ts=...Z (millisecond resolution)."""
    ts = re.search(r"ts=(\S+)Z", line)
    assert ts is not None, line
    seconds, millis = ts.group(1).split(".")
    return (
        time.mktime(time.strptime(seconds, "%Y-%m-%dT%H:%M:%S"))
        - time.timezone
        + (int(millis) / 1000)
    )


def distribution(mgmt: Management, key: str) -> str | None:
    rows = mgmt.query("router.address", ["key", "distribution"])
    return next((r["distribution"] for r in rows if r["key"] == key), None)


@pytest.mark.network
@pytest.mark.parametrize("atomic", [True, False], ids=["renamed", "in-place"])
def test_address_change_applies_without_restart(tmp_path: Path, world: World, atomic: bool) -> None:
    # --id on the command line keeps overriding the file's router.id (R1) on every re-read.
    with RouterProcess(tmp_path, "R1", extra_args=["--id", "FLAG"]) as router, world:
        assert router.proc is not None
        pid = router.proc.pid
        client = world.connect(router.url)
        mgmt = Management(client)
        one = client.receiver("news", name="one")
        two = client.receiver("news", name="two")
        sender = client.sender("news")
        world.run_until(lambda: sender.credit > 0, what="credit")
        for i in range(4):
            sender.send(Message(body=f"before-{i}"))
        world.run_until(lambda: len(one.messages) + len(two.messages) == 4, what="4 messages")
        assert len(one.messages) < 4 and len(two.messages) < 4  # balanced: shared out
        assert distribution(mgmt, "M0news") == "balanced"

        router.config["addresses"] = [{"prefix": "news", "distribution": "multicast"}]
        written = rewrite(router, atomic)
        world.run_until(
            lambda: distribution(mgmt, "M0news") == "multicast",
            timeout=APPLY_TIMEOUT,
            what="multicast to apply",
        )
        seen = time.time()
        applied = router.wait_log(r".*event=config\.applied source=file .*", APPLY_TIMEOUT)
        assert 'changes="address +prefix:news multicast"' in applied
        latency = log_time(applied) - written
        print(
            f"\nfile edit -> applied: {latency * 1000:.0f} ms (management saw it after"
            f" {(seen - written) * 1000:.0f} ms)"
        )
        assert latency < 1.0

        before_one, before_two = len(one.messages), len(two.messages)
        tracked = [sender.send(Message(body=f"after-{i}")) for i in range(3)]
        world.run_until(
            lambda: len(one.messages) == before_one + 3 and len(two.messages) == before_two + 3,
            what="a copy of each message for both consumers",
        )
        world.run_until(lambda: all(t.settled for t in tracked), what="outcomes")
        assert {t.state for t in tracked} == {ACCEPTED}
        assert router.alive() and router.proc.pid == pid
        assert "config.restart_required" not in router.log()
        assert mgmt.router()["id"] == "FLAG"

        # A few more edits, to see the spread of edit -> applied.
        latencies = [latency]
        for n, dist in enumerate(["closest", "multicast", "balanced", "closest"], start=2):
            router.config["addresses"] = [{"prefix": "news", "distribution": dist}]
            written = rewrite(router, atomic)
            world.run_until(
                lambda d=dist: distribution(mgmt, "M0news") == d,  # type: ignore[misc]
                timeout=APPLY_TIMEOUT,
                what=f"{dist} to apply",
            )
            lines = re.findall(r".*event=config\.applied source=file .*", router.log())
            assert len(lines) == n
            latencies.append(log_time(lines[-1]) - written)
        print(
            "file edit -> applied (ms): " + " ".join(f"{x * 1000:.0f}" for x in sorted(latencies))
        )
        assert max(latencies) < 1.0
        assert router.proc.pid == pid


@pytest.mark.network
def test_held_deliveries_follow_the_new_rule(tmp_path: Path, world: World) -> None:
    with (
        RouterProcess(
            tmp_path, "R1", addresses=[{"prefix": "jobs", "undeliverable": "hold"}]
        ) as router,
        world,
    ):
        client = world.connect(router.url)
        anonymous = client.sender(None)
        world.run_until(lambda: anonymous.credit > 0, what="credit")
        held = anonymous.send(Message(address="jobs.1", body="waits"))
        world.run_for(0.3)
        assert not held.settled  # held: no consumer yet
        router.config["addresses"] = [{"prefix": "jobs"}]  # undeliverable: drop
        rewrite(router)
        world.run_until(lambda: held.settled, timeout=APPLY_TIMEOUT, what="the held delivery")
        assert held.state == RELEASED


@pytest.mark.network
def test_invalid_edit_keeps_the_running_config(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, "R1", addresses=[{"prefix": "news"}]) as router, world:
        client = world.connect(router.url)
        mgmt = Management(client)
        receiver = client.receiver("news")
        router.config["addresses"] = [{"prefix": "news", "distribution": "everywhere"}]
        rewrite(router)
        line = router.wait_log(r".*event=config\.invalid .*", APPLY_TIMEOUT)
        assert "source=file" in line
        assert "addresses[0].distribution: 'everywhere' is invalid" in line
        router.config_path.write_text("{not json")
        router.wait_log(r".*event=config\.invalid .*invalid JSON.*", APPLY_TIMEOUT)
        # Still serving, on the old configuration.
        sender = client.sender("news")
        world.run_until(lambda: sender.credit > 0, what="credit")
        sender.send(Message(body="still here"))
        world.run_until(lambda: receiver.bodies == ["still here"], what="the message")
        assert distribution(mgmt, "M0news") == "balanced"
        assert router.alive()
        assert "config.applied" not in router.log()


READ_ONLY_ROOT = [
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "sh",
    "-c",
    # As in a pod (rendering/router.py): the root file system read-only, nothing writable at /tmp or
    # /var/tmp (whatever file system holds them) nor in the working directory. The test still
    # writes the config from outside.
    "for d in /tmp /var/tmp; do mount --bind $d $d && mount -o remount,bind,ro $d || exit 1;"
    ' done && mount -o remount,bind,ro / && cd / && exec "$@"',
    "read-only-root",
]


UNWRITABLE = "for f in /x /tmp/x /var/tmp/x; do ! touch $f || exit 1; done"


def read_only_root() -> list[str]:
    """READ_ONLY_ROOT, or a skip that says why it cannot be had here."""
    probe = subprocess.run(
        [*READ_ONLY_ROOT, "sh", "-c", UNWRITABLE],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"no private read-only mount namespace here: {probe.stderr.strip()}")
    return READ_ONLY_ROOT


@pytest.mark.network
def test_a_router_on_a_read_only_root_starts_and_applies_changes(
    tmp_path: Path, world: World
) -> None:
    """A router pod's file system (read-only root, no writable /tmp): every router once
    crash-looped there, its config validator asking for a temporary file."""
    router = RouterProcess(tmp_path, "R1", addresses=[{"prefix": "news"}])
    router.command_prefix = read_only_root()
    with router, world:
        client = world.connect(router.url)
        mgmt = Management(client)
        one, two = client.receiver("news", name="one"), client.receiver("news", name="two")
        router.config["addresses"] = [{"prefix": "news", "distribution": "multicast"}]
        rewrite(router)
        router.wait_log(r".*event=config\.applied source=file .*", APPLY_TIMEOUT)
        assert distribution(mgmt, "M0news") == "multicast"
        sender = client.sender("news")
        world.run_until(lambda: sender.credit > 0, what="credit")
        sender.send(Message(body="to both"))
        world.run_until(
            lambda: one.bodies == ["to both"] and two.bodies == ["to both"], what="both copies"
        )
        router.config["addresses"] = [{"prefix": "news", "distribution": "sideways"}]
        rewrite(router)
        line = router.wait_log(r".*event=config\.invalid .*", APPLY_TIMEOUT)
        assert "addresses[0].distribution: 'sideways' is invalid" in line
        assert router.alive()


@pytest.mark.network
def test_mode_change_needs_a_restart(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, "R1") as router, world:
        router.config["router"]["mode"] = "interior"
        router.config["addresses"] = [{"prefix": "x", "distribution": "multicast"}]
        rewrite(router)
        line = router.wait_log(r".*event=config\.restart_required .*", APPLY_TIMEOUT)
        assert "level=error" in line and "router.mode: 'standalone' -> 'interior'" in line
        mgmt = Management(world.connect(router.url))
        assert mgmt.router()["mode"] == "standalone"
        assert router.alive() and "config.applied" not in router.log()


@pytest.mark.network
def test_listeners_come_and_go(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, "R1") as router, world:
        extra = {"host": "127.0.0.1", "port": free_port()}
        router.config["listeners"].append(extra)
        rewrite(router)
        router.wait_log(
            rf"event=listener\.started host=127\.0\.0\.1 port={extra['port']}", APPLY_TIMEOUT
        )
        url = f"amqp://127.0.0.1:{extra['port']}"
        client = world.connect(url)
        receiver = client.receiver("q")
        router.config["listeners"].pop()
        rewrite(router)
        router.wait_log(
            rf"event=listener\.stopped host=127\.0\.0\.1 port={extra['port']}", APPLY_TIMEOUT
        )
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", extra["port"]), timeout=1).close()
        # The connection it accepted stays.
        sender = world.connect(router.url).sender("q")
        world.run_until(lambda: sender.credit > 0, what="credit")
        sender.send(Message(body="through"))
        world.run_until(lambda: receiver.bodies == ["through"], what="the message")


@pytest.mark.network
def test_connector_added_then_removed(tmp_path: Path, world: World) -> None:
    interior = {"mode": "interior", **NETWORK_TIMERS}
    r1 = RouterProcess(
        tmp_path / "r1", "R1", listeners=[{}, {"role": "inter-router"}], router=interior
    )
    r2 = RouterProcess(
        tmp_path / "r2", "R2", listeners=[{}, {"role": "inter-router"}], router=interior
    )
    with r1, r2, world:
        m1 = Management(world.connect(r1.url))
        m2 = Management(world.connect(r2.url))
        assert m2.query("connector") == []
        consumer = world.connect(r1.url).receiver("work")

        r2.config["connectors"] = [
            {
                "name": "to-r1",
                "host": "127.0.0.1",
                "port": r1.listeners[1]["port"],
                "role": "inter-router",
            }
        ]
        written = rewrite(r2)
        world.run_until(
            lambda: any(c["container"] == "R2" for c in m1.query("connection")),
            timeout=APPLY_TIMEOUT,
            what="R2 to connect to R1",
        )
        print(f"\nconnector added -> connected: {(time.time() - written) * 1000:.0f} ms")
        sender = world.connect(r2.url).sender("work")
        world.run_until(lambda: sender.credit > 0, timeout=10, what="R1's consumer seen at R2")
        tracked = sender.send(Message(body="across"))
        world.run_until(lambda: tracked.settled, what="the outcome")
        assert consumer.bodies == ["across"] and tracked.state == ACCEPTED
        [row] = m2.query("connector")
        assert (row["name"], row["connectionStatus"]) == ("to-r1", "SUCCESS")

        r2.config["connectors"] = []
        rewrite(r2)
        world.run_until(
            lambda: not any(c["container"] == "R2" for c in m1.query("connection")),
            timeout=APPLY_TIMEOUT,
            what="R2's connection to close",
        )
        assert m2.query("connector") == []
        world.run_until(
            lambda: all(r["cost"] is None for r in m2.query("router.node", ["id", "cost"])[1:]),
            timeout=5,
            what="R1 to be unreachable from R2",
        )
        log = r2.log()
        assert 'changes="connector -to-r1"' in log
        assert "connector.stopped" in log
        assert "connector.disconnected" not in log  # stopped, not lost: no retry
        assert r1.alive() and r2.alive()


# ----- the ConfigMap, through a Kubernetes API (kmock's emulator) ------------------------------


@pytest.mark.network
@pytest.mark.asyncio
async def test_configmap_changes_apply_through_the_api(
    tmp_path: Path, kmock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A router process with ROUTERNET_CONFIGMAP, POD_NAME and POD_NAMESPACE set watches its
    ConfigMap through the API (here kmock's emulator, reached through a kubeconfig) and applies
    the key <POD_NAME>.json as it changes."""
    import asyncio

    import aiohttp

    server = str(kmock.url).rstrip("/")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server)
    for name, value in {
        "KUBECONFIG": str(kubeconfig),
        "ROUTERNET_CONFIGMAP": "routers",
        "POD_NAME": "router-0",
        "POD_NAMESPACE": "ns",
    }.items():
        monkeypatch.setenv(name, value)
    router = RouterProcess(tmp_path, "router-0")
    url = f"{server}/api/v1/namespaces/ns/configmaps"

    def configmap(config: dict[str, Any]) -> dict[str, Any]:
        return {"data": {"router-0.json": json.dumps(config)}}

    async def wait_log(pattern: str, timeout: float = 5.0) -> str:
        deadline = time.monotonic() + timeout
        while not (found := re.search(pattern, router.log())):
            assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n{router.log()}"
            await asyncio.sleep(0.02)
        return found.group(0)

    async with aiohttp.ClientSession() as http:
        created = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "routers", "namespace": "ns"},
            **configmap(router.config),
        }
        assert (await http.post(url, json=created)).status == 200
        await asyncio.to_thread(router.start)  # blocking waits off the loop kmock serves on
        try:
            assert router.proc is not None
            pid = router.proc.pid
            await wait_log(r"event=configsync\.started namespace=ns configmap=routers")
            await wait_log(r"event=config\.unchanged source=configmap")  # the initial list
            while not any("watch=true" in str(r.url) for r in list(kmock)):
                await asyncio.sleep(0.01)  # and the watch is under way

            def applied() -> list[str]:
                return re.findall(r".*event=config\.applied source=configmap .*", router.log())

            patch = {"Content-Type": "application/merge-patch+json"}
            latencies = []
            for n, dist in enumerate(["multicast", "closest", "balanced"], start=1):
                router.config["addresses"] = [{"prefix": "news", "distribution": dist}]
                sent = time.time()
                response = await http.patch(
                    f"{url}/routers", json=configmap(router.config), headers=patch
                )
                assert response.status == 200
                deadline = time.monotonic() + 5
                while len(lines := applied()) < n:
                    assert time.monotonic() < deadline, router.log()
                    await asyncio.sleep(0.005)
                line = lines[-1]
                assert (
                    f"address +prefix:news {dist}" in line or f"address ~prefix:news {dist}" in line
                )
                latencies.append(log_time(line) - sent)
            print(
                "\nConfigMap patch -> applied (ms): "
                + " ".join(f"{x * 1000:.0f}" for x in sorted(latencies))
            )
            assert max(latencies) < 1.0

            bad = {"router": {"id": "router-0"}, "addresses": [{"prefix": "news", "x": 1}]}
            await http.patch(f"{url}/routers", json=configmap(bad), headers=patch)
            line = await wait_log(r".*event=config\.invalid source=configmap .*")
            assert "addresses[0].x: unknown key" in line
            mode = {"router": {"id": "router-0", "mode": "edge"}}
            await http.patch(f"{url}/routers", json=configmap(mode), headers=patch)
            await wait_log(r".*event=config\.restart_required source=configmap .*mode.*")
            assert router.alive() and router.proc.pid == pid
        finally:
            await asyncio.to_thread(router.stop)
