"""tests/broker.py: a private RabbitMQ node starts, carries AMQP 1.0 messages, and stops whole."""

from __future__ import annotations

from pathlib import Path

from broker import Broker
from harness import free_port
from proton import Message
from proton.utils import BlockingConnection

TIMEOUT = 10.0


def test_broker_carries_messages_and_stops(tmp_path: Path) -> None:
    host = "127.0.0.5"
    port = free_port(host)
    broker = Broker(tmp_path / "broker", host=host, port=port, container_id="test-broker")
    with broker:
        assert broker.url == f"amqp://{host}:{port}"
        conn = BlockingConnection(broker.url, timeout=TIMEOUT)
        try:
            assert conn.conn.remote_container == "test-broker"
            sender = conn.create_sender("q1")
            for i in range(10):
                sender.send(Message(body=f"m{i}"))  # waits for the broker's outcome
            receiver = conn.create_receiver("q1", credit=10)
            bodies = []
            for _ in range(10):
                bodies.append(receiver.receive(timeout=TIMEOUT).body)
                receiver.accept()
            assert bodies == [f"m{i}" for i in range(10)]
        finally:
            # Not sender/receiver.close(): RabbitMQ 3.10 never sends a closing detach back.
            conn.close()
        assert broker.alive()
        pids = broker.leftover_pids()
        assert broker.proc is not None and broker.proc.pid in pids
    assert not broker.alive()
    assert broker.proc.returncode is not None
    assert broker.epmd is not None and broker.epmd.returncode is not None
    assert broker.leftover_pids() == []
    assert "Server startup complete" in broker.log()
