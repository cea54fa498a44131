"""SASL PLAIN on listeners, with users in a Cyrus sasldb, configured the way Qpid Dispatch is.

The router entity's ``saslConfigDir`` holds ``routernet.conf`` (Cyrus's config: sasldb,
mech_list); users are made with ``saslpasswd2 -u REALM USER`` and stored as ``USER@REALM``, which
is also the name a PLAIN client must send.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import Client, Management, World
from harness import RouterProcess
from proton import Array, Data, Message, symbol

from router.config.models import RouterSettings
from router.transport import sasl
from router.transport.pn import lib

REALM = "routernet.test"
USER = "alice"
PASSWORD = "s3cret-pw"
FULL_USER = f"{USER}@{REALM}"


def saslpasswd2() -> str:
    # Debian installs it in /usr/sbin, which is not on every user's PATH.
    found = shutil.which("saslpasswd2") or shutil.which("saslpasswd2", path="/usr/sbin:/sbin")
    assert found, "saslpasswd2 is missing: install Debian's sasl2-bin (scripts/system-deps.sh)"
    return found


def make_sasl_dir(directory: Path, users: dict[str, str], mechs: str = "PLAIN ANONYMOUS") -> Path:
    """A saslConfigDir: routernet.conf plus a sasldb holding `users` in REALM."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "users.sasldb"
    for user, password in users.items():
        subprocess.run(
            [saslpasswd2(), "-c", "-p", "-f", str(db), "-u", REALM, user],
            input=password.encode(),
            check=True,
            capture_output=True,
        )
    conf = {
        "pwcheck_method": "auxprop",
        "auxprop_plugin": "sasldb",
        "sasldb_path": str(db),  # absolute: Cyrus resolves a relative one against the cwd
        "mech_list": mechs,
    }
    (directory / "routernet.conf").write_text("".join(f"{k}: {v}\n" for k, v in conf.items()))
    return directory


# ----- the installed proton -----------------------------------------------------------------


def test_installed_proton_is_built_with_cyrus_sasl() -> None:
    """Without Cyrus, Proton cannot verify PLAIN: the install path must build it from source
    with libsasl2-dev and pkg-config present (Makefile, scripts/system-deps.sh)."""
    assert sasl.cyrus_available(), (
        "python-qpid-proton was built without Cyrus SASL; reinstall it with"
        " `pip install --no-cache-dir --no-binary python-qpid-proton` after"
        " scripts/system-deps.sh (make clean && make)"
    )


def test_without_cyrus_a_plain_listener_is_a_startup_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sasl, "cyrus_available", lambda: False)
    settings = RouterSettings(id="R1")
    assert sasl.configure(settings, {"ANONYMOUS"}) is None
    problem = sasl.configure(settings, {"ANONYMOUS", "PLAIN"})
    assert problem is not None
    assert "PLAIN" in problem
    assert "without Cyrus SASL" in problem


# ----- a router with a PLAIN listener and an ANONYMOUS one ----------------------------------


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    workdir = tmp_path_factory.mktemp("sasl")
    sasl_dir = make_sasl_dir(workdir / "sasl", {USER: PASSWORD, "bob": "bobs-pw"})
    proc = RouterProcess(
        workdir,
        "RS",
        router={"saslConfigDir": str(sasl_dir)},
        listeners=[
            {"saslMechanisms": "PLAIN", "authenticatePeer": True},
            {"saslMechanisms": "ANONYMOUS"},
        ],
    )
    with proc:
        yield proc


def plain(user: str = FULL_USER, password: str = PASSWORD) -> dict[str, Any]:
    return {"user": user, "password": password, "allowed_mechs": "PLAIN"}


def refused(world: World, url: str, **kwargs: Any) -> list[str]:
    """Connects expecting the router to refuse; returns the client's errors."""
    client = Client(world, url, **kwargs)
    world.clients.append(client)
    world.run_until(lambda: client.opened or client.failed, what=f"refusal by {url}")
    assert not client.opened, f"{url} admitted a client it should have refused ({kwargs})"
    return client.errors


def round_trip(world: World, sender_client: Client, receiver_client: Client, address: str) -> None:
    receiver = receiver_client.receiver(address)
    sender = sender_client.sender(address)
    world.run_until(lambda: sender.credit > 0, what="credit")
    tracked = sender.send(Message(body="hello"))
    world.run_until(lambda: receiver.messages and tracked.settled, what="delivery")
    assert receiver.bodies == ["hello"]
    assert tracked.outcome == "accepted"


@pytest.mark.network
def test_right_credentials_connect_and_can_send_and_receive(
    router: RouterProcess, world: World
) -> None:
    client = world.connect(router.url, **plain())
    round_trip(world, client, client, "sasl.plain")


@pytest.mark.network
def test_wrong_password_is_refused(router: RouterProcess, world: World) -> None:
    errors = refused(world, router.url, **plain(password="not-the-password"))
    assert any(e.startswith("amqp:unauthorized-access") for e in errors), errors
    # The router logs the refusal as it frees the connection, just after sending the outcome.
    deadline = time.monotonic() + 5
    while "event=connection.unauthenticated" not in router.log():
        assert time.monotonic() < deadline, "the router did not log the refusal"
        time.sleep(0.05)
    assert "mech=PLAIN" in router.log()


@pytest.mark.network
def test_unknown_user_is_refused(router: RouterProcess, world: World) -> None:
    errors = refused(world, router.url, **plain(user=f"mallory@{REALM}"))
    assert any(e.startswith("amqp:unauthorized-access") for e in errors), errors


@pytest.mark.network
def test_user_name_without_the_realm_is_refused(router: RouterProcess, world: World) -> None:
    """Cyrus looks a bare name up as USER@<server host name>, not in the realm it was made in."""
    assert socket.gethostname() != REALM
    errors = refused(world, router.url, **plain(user=USER))
    assert any(e.startswith("amqp:unauthorized-access") for e in errors), errors


@pytest.mark.network
def test_client_without_credentials_is_refused(router: RouterProcess, world: World) -> None:
    errors = refused(world, router.url)
    assert any(e.startswith("amqp:unauthorized-access") for e in errors), errors


# A client that ignores the offered mechanisms and insists on ANONYMOUS: the refusal must come
# from the router, not from a polite client giving up.

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
SASL_MECHANISMS, SASL_INIT, SASL_OUTCOME = 0x40, 0x41, 0x44


def read_sasl_frame(sock: socket.socket) -> tuple[int, list[Any]]:
    head = recv_exactly(sock, 8)
    size, doff = struct.unpack(">IB", head[:5])
    body = recv_exactly(sock, size - 8)[doff * 4 - 8 :]
    data = Data()
    data.decode(body)
    data.rewind()
    data.next()
    described = data.get_object()
    return described.descriptor, list(described.value)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, f"router closed the socket after {out!r}"
        out += chunk
    return out


def sasl_init_frame(mechanism: str) -> bytes:
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(SASL_INIT)
    data.put_list()
    data.enter()
    data.put_symbol(symbol(mechanism))
    data.put_binary(b"")
    data.exit()
    data.exit()
    body = data.encode()
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


@pytest.mark.network
def test_router_refuses_anonymous_forced_onto_a_plain_listener(router: RouterProcess) -> None:
    with socket.create_connection((router.host, router.port), timeout=5) as sock:
        sock.sendall(SASL_HEADER)
        assert recv_exactly(sock, 8) == SASL_HEADER
        code, fields = read_sasl_frame(sock)
        assert code == SASL_MECHANISMS
        mechanisms = fields[0]  # a symbol, or an array of them
        offered = mechanisms.elements if isinstance(mechanisms, Array) else [mechanisms]
        assert [str(m) for m in offered] == ["PLAIN"]
        sock.sendall(sasl_init_frame("ANONYMOUS"))
        code, fields = read_sasl_frame(sock)
        assert code == SASL_OUTCOME
        assert fields[0] == 1, f"outcome {fields[0]} for ANONYMOUS on an authenticatePeer listener"


@pytest.mark.network
def test_anonymous_listener_in_the_same_router_still_works(
    router: RouterProcess, world: World
) -> None:
    anonymous = world.connect(router.listener_url(1))
    round_trip(world, anonymous, anonymous, "sasl.anonymous")
    # And messages cross between the two listeners.
    authenticated = world.connect(router.url, **plain())
    round_trip(world, authenticated, anonymous, "sasl.across")


@pytest.mark.network
def test_management_shows_the_plain_user(router: RouterProcess, world: World) -> None:
    client = world.connect(router.url, **plain())
    world.connect(router.listener_url(1))
    rows = Management(client).query("connection")
    mine = [r for r in rows if r["user"] == FULL_USER]
    assert len(mine) == 1, rows
    assert mine[0]["sasl"] == "PLAIN"
    assert mine[0]["isAuthenticated"] is True
    anonymous = [r for r in rows if r["sasl"] == "ANONYMOUS"]
    assert anonymous, rows
    assert all(r["user"] == "anonymous" for r in anonymous), anonymous


class RecordingLib:
    """Proton's lib, except that the process-wide Cyrus settings are recorded, not made."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("pn_sasl_config_"):
            return lambda _sasl, value: self.calls.append((name, value))
        return getattr(lib, name)


def test_configure_passes_the_name_and_the_absolute_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "routernet.conf").write_text("mech_list: PLAIN\n")
    monkeypatch.chdir(tmp_path)
    recording = RecordingLib()
    monkeypatch.setattr(sasl, "lib", recording)
    monkeypatch.setattr(sasl, "cyrus_available", lambda: True)
    assert sasl.configure(RouterSettings(id="R1", saslConfigDir="."), {"PLAIN"}) is None
    assert recording.calls == [
        ("pn_sasl_config_path", str(tmp_path).encode()),
        ("pn_sasl_config_name", b"routernet"),
    ]


def test_configure_without_a_dir_leaves_cyrus_its_search_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recording = RecordingLib()
    monkeypatch.setattr(sasl, "lib", recording)
    monkeypatch.setattr(sasl, "cyrus_available", lambda: True)
    settings = RouterSettings(id="R1", saslConfigName="other")
    assert sasl.configure(settings, {"PLAIN"}) is None
    assert recording.calls == [("pn_sasl_config_name", b"other")]
