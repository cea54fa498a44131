"""`Address.spec.node` and `Router.spec.store`: queues and topics the network stores on disk.

An Address with ``node`` has each exact address under its prefix (or matching its pattern)
taken into a queue or topic that one pod of one Router stores; the routers pick that pod by a
stable hash over the Router's pods (router/nodes/), so the operator only folds the list of
those pods (``hosts``) into every router config of the network. The settings are the router
config's own ``node`` (router/nodes/config.py): same names, same defaults, the router's Literal
types, so that what the API server accepts is what the routers run; only ``router`` (a Router
name instead of ``hosts``) is the operator's.

Storage: the pods of a Router with ``spec.store`` get a PersistentVolumeClaim each (the
StatefulSet's volumeClaimTemplate ``store``) mounted at :data:`STORE_PATH`, which their configs
name as ``store.path``; ``routernet up`` gives each pod a directory of the state directory
instead. A StatefulSet's volumeClaimTemplates cannot change once it exists (the API server
refuses the update), so ``store`` is immutable, stated once as a CEL transition rule the API
server enforces and the local backend checks too (:data:`STORE_UNCHANGED`): a Router that is
to host nodes is created with it.

Changes of an Address's ``node``: its ``type`` is immutable (a queue's stored messages are not
a topic's), ``router`` may change (the nodes then live on the other Router's pods; what the old
pods stored is the routers' business, router/nodes/), and ``node`` may be added or removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from router.nodes.config import AtLimit, BindingMode, NodeSettings, NodeType, Visibility
from router_operator.resources.spec import Rule, StorageClassName, StrictSpec, constrained

STORE_PATH = "/var/lib/routernet/store"
"""Where a pod of a Router with ``spec.store`` has its PersistentVolumeClaim: its ``store.path``."""
STORE_VOLUME = "store"
"""The StatefulSet's volumeClaimTemplate; its PVCs are ``store-<pod>``."""
DEFAULT_STORE_SIZE = "1Gi"

_ROUTER_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# The router's rule for node addresses (router/nodes/config.py): non-empty, no whitespace.
_NODE_ADDRESS = r"^\S+$"

StorageSize = constrained(
    "storage size",
    r"^[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?$",
    64,
    "a positive quantity of bytes, e.g. 1Gi, 500Mi, 10G",
)


class NodeBinding(StrictSpec):
    """The router config's node binding (router.nodes.config.Binding): what matches is passed
    on to another node."""

    address: str = Field(
        pattern=_NODE_ADDRESS, max_length=1000, description="The node messages are passed to."
    )
    selector: str | None = Field(
        default=None,
        max_length=4096,
        description="A JMS selector on properties and application properties.",
    )
    subject: str | None = Field(
        default=None,
        max_length=1000,
        description="A topic pattern on the subject ('*' one word, '#' zero or more).",
    )
    mode: BindingMode = Field(
        default="copy",
        description="From a queue: move takes its share as a consumer, copy sees every message."
        " From a topic every binding gets a copy.",
    )


class AddressNode(StrictSpec):
    """Messages to these addresses are taken into a queue or topic that the pods of one Router
    store, each node (exact address) on one of them."""

    rules: ClassVar[tuple[Rule, ...]] = (
        # The router's NodeSettings._consistency; type and mode have defaults (queue, copy).
        Rule(
            rule=(
                "!has(self.type) || self.type != 'topic' || !has(self.bindings)"
                " || self.bindings.all(b, !has(b.mode) || b.mode != 'move')"
            ),
            message="a topic routes a copy to every binding: mode move is for queues",
            holds=lambda s: s.type != "topic" or all(b.mode != "move" for b in s.bindings),
        ),
    )

    type: NodeType = Field(default="queue", description="queue or topic; immutable.")
    router: str = Field(
        pattern=_ROUTER_NAME,
        max_length=45,
        description=(
            "An interior Router of the network with spec.store: its pods store the nodes, each"
            " node on one of them (a stable hash of its address); may change."
        ),
    )
    deadLetterAddress: str | None = Field(
        default=None,
        pattern=_NODE_ADDRESS,
        max_length=1000,
        description="Where rejected, expired and too-often-delivered messages go.",
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
    bindings: list[NodeBinding] = Field(default_factory=list, max_length=64)


class RouterStore(StrictSpec):
    """A PersistentVolumeClaim per pod where the nodes the Router hosts keep their messages."""

    size: StorageSize = Field(
        default=DEFAULT_STORE_SIZE, description="The storage each pod's claim requests."
    )
    storageClassName: StorageClassName | None = Field(
        default=None, description="The claims' StorageClass; absent: the cluster's default."
    )


NODE_TYPE_UNCHANGED = Rule(
    rule=(
        "!has(self.node) || !has(oldSelf.node) || (has(self.node.type) ? self.node.type : 'queue')"
        " == (has(oldSelf.node.type) ? oldSelf.node.type : 'queue')"
    ),
    message="node.type is immutable: remove node, or delete the Address and create a new one",
    holds_on_update=lambda new, old: (
        new.node is None or old.node is None or new.node.type == old.node.type
    ),
)
"""On the Address spec: a rule on ``node`` itself would not see it added or removed, which is
allowed, and its Python twin (``check_update``) only runs the spec's rules."""

STORE_UNCHANGED = Rule(
    rule=(
        "has(self.store) == has(oldSelf.store) && (!has(self.store) || self.store == oldSelf.store)"
    ),
    message=(
        "store is immutable (a StatefulSet's volumeClaimTemplates cannot change): give it when"
        " the Router is created, or delete the Router and create it again"
    ),
    holds_on_update=lambda new, old: new.store == old.store,
)
"""On the Router spec, comparing presence too: adding or removing it would change the
StatefulSet's volumeClaimTemplates as surely as resizing it."""


# --- planning ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreDecl:
    """A Router's ``spec.store``, as the planner and the renderer take it."""

    size: str = DEFAULT_STORE_SIZE
    storage_class: str | None = None


@dataclass(frozen=True)
class NodeDecl:
    """An Address's ``node``: the Router whose pods host it, and the router config's settings
    (``hosts`` left empty: the planner fills it with that Router's pods)."""

    router: str
    settings: NodeSettings


def node_decl(node: AddressNode) -> NodeDecl:
    """The CRD's node as the router config's settings: the same fields but ``router``."""
    settings = NodeSettings.model_validate(node.model_dump(exclude={"router"}, exclude_none=True))
    return NodeDecl(node.router, settings)
