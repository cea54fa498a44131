"""The ``node`` of an address and the ``store`` section: queues and topics the network hosts.

```yaml
addresses:
  - prefix: jobs
    node:
      type: queue                  # queue | topic
      hosts: [hub-0, hub-1]        # the routers that store these nodes (absent: this router)
      deadLetterAddress: jobs.dlq  # rejected, expired, too often delivered: sent here
      maxDeliveryCount: 5
      maxDepth: 100000             # and/or maxBytes
      atLimit: block               # block: senders get no credit; reject: resource-limit-exceeded
      visibility: both             # inbound (senders only) | outbound (receivers only) | both
store:
  path: /var/lib/routernet/store   # where hosted nodes keep their messages
```

Each node (an exact address under the prefix or pattern) lives on one of `hosts`, picked by a
stable hash of its name (router/nodes/placement.py), so every router of the network agrees on
where it is without asking, and a change of hosts moves as few nodes as possible. The operator
fills `hosts` with the pods of the Router an Address names; a standalone router leaves it out.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from router.config.base import Strict

NodeType = Literal["queue", "topic"]
AtLimit = Literal["block", "reject"]
Visibility = Literal["both", "inbound", "outbound"]
BindingMode = Literal["move", "copy"]


def _address(value: str | None) -> str | None:
    if value is not None and (not value or any(ch.isspace() for ch in value)):
        raise ValueError(f"{value!r} is not a valid address (non-empty, no whitespace)")
    return value


class Binding(Strict):
    """A relation from this address's nodes to another node: what matches is passed on, its
    transfer accepted implicitly (the seed's bindings)."""

    address: str = Field(description="The node messages are passed to.")
    selector: str | None = Field(
        default=None, description="A JMS selector on properties and application properties."
    )
    subject: str | None = Field(
        default=None,
        description="A topic pattern on the subject ('*' one word, '#' zero or more).",
    )
    mode: BindingMode = Field(
        default="copy",
        description="From a queue: move takes its share as a consumer, copy sees every message."
        " From a topic every binding gets a copy.",
    )

    _address = field_validator("address")(_address)

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: str | None) -> str | None:
        """A selector outside the grammar fails the configuration, not every message later."""
        if value is not None:
            # Imported when there is one: a validating child starts faster without it.
            from router.nodes.selector import compile_selector

            compile_selector(value)
        return value


class NodeSettings(Strict):
    """Messages to these addresses are taken into a queue or topic the network stores."""

    type: NodeType = Field(default="queue")
    hosts: list[str] = Field(
        default_factory=list,
        description="Router ids that store these nodes, each node on one; empty: this router.",
    )
    deadLetterAddress: str | None = Field(
        default=None, description="Where rejected, expired and too-often-delivered messages go."
    )
    maxDeliveryCount: int | None = Field(
        default=None, ge=1, description="Delivery attempts before dead-lettering."
    )
    maxDepth: int | None = Field(default=None, ge=1, description="Messages a node may hold.")
    maxBytes: int | None = Field(default=None, ge=1, description="Bytes a node may hold.")
    atLimit: AtLimit = Field(
        default="block",
        description="At maxDepth/maxBytes: block (senders get no credit) or reject"
        " (amqp:resource-limit-exceeded).",
    )
    visibility: Visibility = Field(
        default="both", description="Which links may address the nodes: senders, receivers, both."
    )
    bindings: list[Binding] = Field(default_factory=list)

    _dead_letter = field_validator("deadLetterAddress")(_address)

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        for host in value:
            if not host or any(ch.isspace() or ch == "/" for ch in host):
                raise ValueError(f"{host!r} is not a router id (non-empty, no whitespace or '/')")
        if len(set(value)) != len(value):
            raise ValueError("hosts must not repeat a router id")
        return value

    @model_validator(mode="after")
    def _consistency(self) -> Self:
        if self.type == "topic" and any(b.mode == "move" for b in self.bindings):
            raise ValueError("a topic routes a copy to every binding: mode move is for queues")
        return self


class StoreSettings(Strict):
    """Where this router keeps the messages of the nodes it hosts."""

    path: str | None = Field(
        default=None,
        description="A directory of its own; absent, this router can host no node.",
    )
    memoryBytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024 * 1024,
        description="Message bodies kept in memory; beyond this they are read back from disk.",
    )
    indexedMessages: int = Field(
        default=250_000,
        ge=1000,
        description=(
            "Messages indexed in memory (some 350 bytes each); beyond this deep queues page:"
            " what they take in stays on disk until the part in memory runs low."
        ),
    )
