"""What a collector is told: where to receive from, where to write, how much to buffer.

Apart from the receiver (receiver.py), which needs pyarrow: the command's defaults and its
one-line error when pyarrow is missing come before it is imported (cli.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from router.telemetry.schema import TELEMETRY_ADDRESS


@dataclass(frozen=True)
class Settings:
    url: str = "amqp://127.0.0.1:5672"
    dataset: Path = Path("telemetry")
    address: str = TELEMETRY_ADDRESS
    container_id: str = "routernet-collector"
    max_rows: int = 100_000
    max_seconds: float = 10.0
    credit: int = 100
    dedup_ids: int = 1_000_000
