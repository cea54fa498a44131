"""The ``telemetry`` section of a router's configuration, imported by router/config/models.py.

```yaml
telemetry:
  http: {host: 0.0.0.0, port: 9090}   # /metrics, /healthz, /readyz; absent: no HTTP listener
  enabled: true                        # flow counting and records (false: metrics only)
  windowSeconds: 10                    # one flow record per (address, ingress, egress) per window
  sampleEvery: 100                     # 1 in N messages entering here carries a latency stamp
```

HTTP has a section of its own rather than Dispatch's ``listener`` entity with ``http: true``:
every attribute of our listener entity (role, SASL, TLS, strip, link capacity) is about AMQP,
and listeners are opened and changed live by the AMQP loop, whereas this one is served by a
thread of its own and must never share the data path's loop.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from router.config.base import Strict

# Where pods serve /metrics and probes (the operator's default, and the chart's PodMonitor's).
METRICS_PORT = 9090
# Addresses under this prefix are the routers' own (telemetry); configs refuse user rules there.
RESERVED_PREFIX = "_routernet"


class HttpListener(Strict):
    """Where the router serves Prometheus metrics and its health, over plain HTTP."""

    host: str = Field(default="0.0.0.0", description="Address to bind; '::' for IPv6.")
    port: int = Field(default=METRICS_PORT, ge=0, le=65535, description="0: any free port.")

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not value or any(ch.isspace() for ch in value):
            raise ValueError(f"{value!r} is not a valid host (non-empty, no whitespace)")
        return value


class Telemetry(Strict):
    """Metrics over HTTP, and flow records sent to the collector as AMQP messages."""

    http: HttpListener | None = Field(
        default=None, description="Serve /metrics, /healthz and /readyz here."
    )
    enabled: bool = Field(
        default=True,
        description="Count flows and send records to _routernet/telemetry every window.",
    )
    windowSeconds: float = Field(
        default=10.0, ge=0.1, le=3600, description="Length of a record window, in seconds."
    )
    sampleEvery: int = Field(
        default=100,
        ge=0,
        description="1 in N messages entering the network here is timed end to end; 0: none.",
    )


def reserved(value: str | None) -> bool:
    """Whether a prefix or pattern names an address under the reserved `_routernet`."""
    if value is None:
        return False
    first = value.replace("/", ".").split(".", 1)[0]
    return first == RESERVED_PREFIX


def check_not_reserved(value: str | None, field: str) -> str | None:
    if reserved(value):
        raise ValueError(
            f"{field} {value!r} is under {RESERVED_PREFIX!r}, reserved for the routers' own"
            " addresses (telemetry)"
        )
    return value
