"""A real AMQP 1.0 broker for tests: a private RabbitMQ node on loopback, always stopped.

Link routes hand a client's links to a broker, so they are tested against a broker that is
not ours. Debian's ActiveMQ (5.17.2) cannot be that broker: Debian builds it without the
activemq-amqp module (its README.Debian lists it as disabled) and packages no proton-j, so an
`amqp://` transport connector fails with "Transport scheme NOT recognized: [amqp]". Debian's
rabbitmq-server (3.10.8) ships the rabbitmq_amqp1_0 plugin, which answers AMQP 1.0 on the
ordinary listener; scripts/system-deps.sh installs it.

Each `Broker` is a node of its own: config, database, Erlang cookie and logs in its work
directory, one listener on `host:port`, nothing else (no system service; the management plugin
and its HTTP API on `host:management_port` only when asked, as the benchmark does to declare a
quorum queue, which AMQP 1.0 cannot in 3.10.8).
Erlang distribution cannot be turned off, so the node gets a private epmd and a distribution
port on 127.0.0.1, both free ports, and never touches port 4369 (tests run in parallel under
pytest-xdist). `stop` ends both processes and anything they started, however the test ended.

What RabbitMQ 3.10.8 does on AMQP 1.0, which tests through a link route will meet:
- Its Open carries container-id = the node's cluster name (`container_id` here).
- Addresses: a plain `NAME` (or `/queue/NAME`) is a queue, declared when first attached by
  sender or receiver; `/amq/queue/NAME` only an existing queue; `/exchange/X/KEY` and
  `/topic/KEY` publish or subscribe through an exchange. Any other form (`queue://q1`) or a
  missing `/amq/queue/` queue ends the whole session (End with amqp:invalid-field or
  amqp:not-found) instead of refusing the attach.
- It answers a closing detach with a detach whose `closed` is false (rabbitmq-server #2594,
  fixed in 4.0): a client that waits for its link to be closed waits forever.
- Drain is broken (rabbitmq-server #7119, fixed after 3.10.8): on a classic queue, a drain with
  more credit than messages ends the session with amqp:internal-error.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from harness import free_port
from proton.utils import BlockingConnection

RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
# A fresh node takes about 5 s on the 2-core machine (Erlang boot, database, plugin); the bound
# is for two brokers starting at once beside other tests.
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
LOG_TAIL = 8000  # characters of the log quoted in a start failure


def _password_hash(password: str, salt: bytes = b"rnet") -> str:
    """RabbitMQ's rabbit_password_hashing_sha256: base64(salt + sha256(salt + password))."""
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


# A node that loads definitions at boot creates no default user or vhost (clients then fail
# with default_user_missing), so definitions start from what a fresh node would have.
GUEST_DEFINITIONS: dict[str, Any] = {
    "users": [
        {
            "name": "guest",
            "password_hash": _password_hash("guest"),
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": ["administrator"],
        }
    ],
    "vhosts": [{"name": "/"}],
    "permissions": [
        {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    ],
}


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _session_pids(sid: int) -> list[int]:
    """Pids of the live processes in session `sid` (each broker process leads its own)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces, so split after ')'.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


class BrokerError(RuntimeError):
    """The broker did not start; the message holds the end of its log."""


class Broker:
    """A private RabbitMQ node speaking AMQP 1.0 on `url` (SASL ANONYMOUS or guest/guest).

    Used as a context manager (`with Broker(tmp_path / "broker") as broker:`), or `start()`
    then `stop()` in a `finally`. `start` returns once the broker has answered an AMQP Open,
    not merely once its port accepts: RabbitMQ opens the listener a moment before its AMQP 1.0
    plugin is running, and a connection in between is refused as AMQP 0-9-1.
    """

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        container_id: str | None = None,
        definitions: dict[str, Any] | None = None,
        management: bool = False,
    ) -> None:
        """`workdir` None: a temporary directory, removed by `stop`. `port` None: a free one.
        `container_id` None: "broker-<port>". `definitions`: RabbitMQ definitions (exchanges,
        queues with their arguments, bindings, policies) the node loads as it boots, for what
        AMQP 1.0 on 3.10 cannot declare (a queue's x-dead-letter-exchange, x-max-priority).
        `management`: also the management plugin, its HTTP API on `management_url`
        (guest/guest from loopback)."""
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="broker-")) if workdir is None else workdir
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.container_id = container_id or f"broker-{self.port}"
        self.definitions = definitions
        self.management_port = free_port(host) if management else None
        self.log_path = self.workdir / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    @property
    def management_url(self) -> str:
        assert self.management_port is not None, "started without management"
        return f"http://{self.host}:{self.management_port}/api"

    # ----- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = STARTUP_TIMEOUT) -> Broker:
        """Starts epmd and the node and waits for an AMQP 1.0 Open from `container_id`.

        On failure everything started is stopped and BrokerError carries the log's end.
        """
        if not RABBITMQ_SERVER.exists():
            raise BrokerError(
                f"{RABBITMQ_SERVER} is missing: install Debian's rabbitmq-server "
                "(scripts/system-deps.sh)"
            )
        try:
            self._launch()
            self._wait_ready(timeout)
        except BaseException as e:
            self.stop(remove=False)
            log = self.log()[-LOG_TAIL:]
            self.stop()  # removes a work directory of its own making, the log now read
            if isinstance(e, BrokerError | TimeoutError):
                raise BrokerError(f"{e}\n----- {self.log_path}\n{log}") from e
            raise
        return self

    def _launch(self) -> None:
        home = self.workdir / "home"  # the Erlang cookie goes to $HOME
        for d in (home, self.workdir / "db", self.workdir / "log"):
            d.mkdir(parents=True, exist_ok=True)
        epmd_port = free_port()
        dist_port = free_port()
        config = self.workdir / "rabbitmq.conf"
        config.write_text(
            f"listeners.tcp.default = {self.host}:{self.port}\n"
            f"cluster_name = {self.container_id}\n"
            # The default (50 MB free) would block publishers on a nearly full CI disk.
            "disk_free_limit.absolute = 10MB\n"
        )
        if self.definitions is not None:
            path = self.workdir / "definitions.json"
            path.write_text(json.dumps({**GUEST_DEFINITIONS, **self.definitions}))
            with config.open("a") as f:
                f.write(f"load_definitions = {path}\n")
        plugins = "rabbitmq_amqp1_0"
        if self.management_port is not None:
            plugins += ",rabbitmq_management"
            with config.open("a") as f:
                f.write(f"management.tcp.ip = {self.host}\n")
                f.write(f"management.tcp.port = {self.management_port}\n")
        (self.workdir / "enabled_plugins").write_text(f"[{plugins}].\n")
        (self.workdir / "rabbitmq-env.conf").write_text("")  # not /etc/rabbitmq's
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(
            HOME=str(home),
            RABBITMQ_CONF_ENV_FILE=str(self.workdir / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(config),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.workdir / "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=str(self.workdir / "db"),
            RABBITMQ_LOG_BASE=str(self.workdir / "log"),
            RABBITMQ_LOGS="-",  # to stdout, so to broker.log
            RABBITMQ_NODENAME=f"rabbit-{self.port}@localhost",
            RABBITMQ_DIST_PORT=str(dist_port),
            ERL_EPMD_PORT=str(epmd_port),
            # With input "allowed" the script execs erl instead of waiting on it in a shell,
            # so the Popen is the Erlang VM itself; -noinput keeps it from reading stdin.
            RABBITMQ_ALLOW_INPUT="1",
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=(
                "-noinput -start_epmd false -kernel inet_dist_use_interface {127,0,0,1}"
            ),
        )
        epmd = shutil.which("epmd") or "/usr/bin/epmd"
        with self.log_path.open("ab") as log:
            self.epmd = subprocess.Popen(
                [epmd, "-port", str(epmd_port), "-address", "127.0.0.1"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
            # The node must find our epmd: without one it would start a daemon of its own.
            deadline = time.monotonic() + 10
            while not _accepts("127.0.0.1", epmd_port):
                if self.epmd.poll() is not None or time.monotonic() > deadline:
                    raise BrokerError(f"epmd did not listen on 127.0.0.1:{epmd_port}")
                time.sleep(0.02)
            self.proc = subprocess.Popen(
                [str(RABBITMQ_SERVER)],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BrokerError(f"broker exited with {self.proc.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker did not answer AMQP on {self.url} within {timeout}s")
            if not _accepts(self.host, self.port):
                time.sleep(0.1)
                continue
            try:
                conn = BlockingConnection(self.url, timeout=5)
            except Exception:  # refused as AMQP 0-9-1 while the plugin starts, or timed out
                time.sleep(0.1)
                continue
            try:
                announced = conn.conn.remote_container
            finally:
                conn.close()
            if announced != self.container_id:
                raise BrokerError(f"broker announced container-id {announced!r}")
            return

    def stop(self, *, remove: bool = True) -> None:
        """SIGTERM (RabbitMQ stops cleanly in about a second), SIGKILL to whatever of either
        process session still runs after STOP_TIMEOUT. Removes a work directory it made."""
        for proc in (self.proc, self.epmd):
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(STOP_TIMEOUT)
            # erl_child_setup, inet_gethost and the disk monitor's shell leave with the VM;
            # a kill of the session catches any that did not, and a VM that ignored SIGTERM.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(STOP_TIMEOUT)
        if remove and self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def leftover_pids(self) -> list[int]:
        """Processes of the broker's or its epmd's session still running (none after stop)."""
        return [p for proc in (self.proc, self.epmd) if proc for p in _session_pids(proc.pid)]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
