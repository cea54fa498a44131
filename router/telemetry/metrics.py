"""Prometheus metrics: a prometheus-client Collector that reads the router's counters at scrape.

Nothing here runs per message. The data path keeps its counters as plain integers (RouterStats,
address entries, links, flow rows) and this collector, called on the HTTP server's thread when
Prometheus scrapes, reads them (see readings.py for why that is safe) and reports them as metric
families. So a router nobody scrapes pays nothing for its metrics.

Every name starts with `routernet_`; every sample has the label `router` (the router id), so
that the series of routers in one pod network can be told apart after relabelling.
Per-address series come and go with the router's address table: an address it forgets (no
consumer, sender or held delivery left) disappears, and starts again from zero if it comes back.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import fields
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from router.datapath.stats import RouterStats
from router.telemetry import readings
from router.telemetry.schema import LATENCY_BOUNDS_US

if TYPE_CHECKING:
    from router.core.engine import Router

# Prometheus buckets: every fourth schema bound (one per doubling, 10 µs to ~42 s), in seconds.
# The schema's finer buckets nest in these, so each is a cumulative sum of whole fine buckets.
_STEP = 4
PROMETHEUS_BOUNDS_S = tuple(b / 1e6 for b in LATENCY_BOUNDS_US[::_STEP])

OUTCOMES = ("accepted", "released", "rejected", "modified", "presettled")


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


class RouterCollector(Collector):
    def __init__(self, router: Router) -> None:
        self.router = router

    def collect(self) -> Iterator[Metric]:
        router = self.router
        rid = router.id
        yield from self._router_counters(rid)
        yield from self._addresses(rid)
        yield from self._connections_and_links(rid)
        yield from self._network(rid)
        yield from self._nodes(rid)
        yield from self._policy(rid)
        yield from self._telemetry(rid)

    def _router_counters(self, rid: str) -> Iterator[Metric]:
        stats = self.router.stats
        for f in fields(RouterStats):
            metric = CounterMetricFamily(
                f"routernet_router_{_snake(f.name)}",
                f"Dispatch's router counter {f.name} (qdstat -g).",
                labels=["router"],
            )
            metric.add_metric([rid], getattr(stats, f.name))
            yield metric
        fwd = self.router.fwd
        deliveries = CounterMetricFamily(
            "routernet_deliveries",
            "Deliveries received (in) and sent (out), from and to clients and routers alike.",
            labels=["router", "direction"],
        )
        deliveries.add_metric([rid, "in"], fwd.received)
        deliveries.add_metric([rid, "out"], fwd.sent)
        yield deliveries

    def _addresses(self, rid: str) -> Iterator[Metric]:
        fwd = self.router.fwd
        entries = list(fwd.entries.values())
        labels = ["router", "address"]
        counters = {
            "in": CounterMetricFamily(
                "routernet_address_deliveries_in",
                "Deliveries received for the address, from clients and other routers.",
                labels=labels,
            ),
            "out": CounterMetricFamily(
                "routernet_address_deliveries_out",
                "Deliveries sent to the address's consumers on this router.",
                labels=labels,
            ),
            "transit": CounterMetricFamily(
                "routernet_address_deliveries_transit",
                "Deliveries received from a router and sent on to another.",
                labels=labels,
            ),
            "dropped": CounterMetricFamily(
                "routernet_address_dropped",
                "Deliveries that reached no consumer (pre-settled dropped, unsettled released).",
                labels=labels,
            ),
            "held": CounterMetricFamily(
                "routernet_address_held",
                "Deliveries held for a consumer to come (undeliverable: hold).",
                labels=labels,
            ),
            "redirected": CounterMetricFamily(
                "routernet_address_redirected",
                "Deliveries sent to the fallback address (undeliverable: redirect).",
                labels=labels,
            ),
        }
        consumers = GaugeMetricFamily(
            "routernet_address_consumers", "Local consumers of the address.", labels=labels
        )
        waiting = GaugeMetricFamily(
            "routernet_address_held_now", "Deliveries held for a consumer now.", labels=labels
        )
        for entry in entries:
            values = {
                "in": entry.ingress,
                "out": entry.egress,
                "transit": entry.transit,
                "dropped": entry.dropped,
                "held": entry.held_total,
                "redirected": entry.redirected,
            }
            for name, metric in counters.items():
                metric.add_metric([rid, entry.address], values[name])
            consumers.add_metric([rid, entry.address], len(entry.consumers))
            waiting.add_metric([rid, entry.address], len(entry.held))
        yield from counters.values()
        yield consumers
        yield waiting
        yield from self._flows(rid)

    def _flows(self, rid: str) -> Iterator[Metric]:
        """Outcomes, bytes and transit latency per address, from the flow rows of deliveries
        this router handed to consumers (telemetry enabled)."""
        flows = self.router.fwd.flows
        if flows is None:
            return
        outcomes: dict[str, list[int]] = defaultdict(lambda: [0] * len(OUTCOMES))
        size: dict[str, int] = defaultdict(int)
        hists: dict[str, list[int]] = {}
        sums: dict[str, float] = defaultdict(float)
        for row in list(flows.rows.values()):
            if not row.delivered:
                continue
            counts = outcomes[row.address]
            for i, name in enumerate(OUTCOMES):
                counts[i] += getattr(row, name)
            size[row.address] += row.bytes
            hist = hists.get(row.address)
            if hist is None:
                hist = hists[row.address] = [0] * len(row.hist)
            for i, n in enumerate(list(row.hist)):
                hist[i] += n
            sums[row.address] += row.latency_sum_us
        outcome = CounterMetricFamily(
            "routernet_address_outcomes",
            "Outcomes of deliveries handed to the address's consumers on this router"
            " (presettled: sent pre-settled, no outcome).",
            labels=["router", "address", "outcome"],
        )
        for address, counts in outcomes.items():
            for name, n in zip(OUTCOMES, counts, strict=True):
                outcome.add_metric([rid, address, name], n)
        yield outcome
        sent = CounterMetricFamily(
            "routernet_address_bytes_out",
            "Encoded message bytes handed to the address's consumers on this router.",
            labels=["router", "address"],
        )
        for address, n in size.items():
            sent.add_metric([rid, address], n)
        yield sent
        latency = HistogramMetricFamily(
            "routernet_address_transit_latency_seconds",
            "Network transit latency of sampled messages, from the ingress router's receipt to"
            " this router handing them to a consumer (wall clocks: skew between hosts counts).",
            labels=["router", "address"],
        )
        for address, hist in hists.items():
            buckets: list[tuple[str, float]] = []
            total = 0
            for i, bound in enumerate(PROMETHEUS_BOUNDS_S):
                total += sum(hist[i * _STEP - _STEP + 1 : i * _STEP + 1] if i else hist[:1])
                buckets.append((repr(bound), total))
            buckets.append(("+Inf", sum(hist)))
            latency.add_metric([rid, address], buckets, sums[address] / 1e6)
        yield latency

    def _connections_and_links(self, rid: str) -> Iterator[Metric]:
        router = self.router
        connections = GaugeMetricFamily(
            "routernet_connections", "Open connections by role.", labels=["router", "role"]
        )
        for role, n in sorted(readings.connections_by_role(router).items()):
            connections.add_metric([rid, role], n)
        yield connections
        all_links = readings.links(router)
        links = GaugeMetricFamily(
            "routernet_links",
            "Attached links by kind (endpoint: a client's; control, data: inter-router; edge;"
            " routed) and direction (in: the router receives).",
            labels=["router", "kind", "direction"],
        )
        for (kind, direction), n in sorted(readings.links_by_kind(all_links).items()):
            links.add_metric([rid, kind, direction], n)
        yield links
        unsettled = GaugeMetricFamily(
            "routernet_unsettled_deliveries",
            "Deliveries received from senders and not settled yet.",
            labels=["router"],
        )
        unsettled.add_metric([rid], readings.unsettled(all_links))
        yield unsettled
        blocked = GaugeMetricFamily(
            "routernet_credit_blocked_senders",
            "Clients' senders waiting for credit: no consumer, or half their capacity waiting.",
            labels=["router"],
        )
        blocked.add_metric([rid], readings.credit_blocked(all_links))
        yield blocked
        queued = GaugeMetricFamily(
            "routernet_queued_deliveries",
            "Deliveries waiting for a consumer's credit.",
            labels=["router"],
        )
        queued.add_metric([rid], sum(len(lk.queue) for lk in all_links if not lk.incoming))
        yield queued

    def _nodes(self, rid: str) -> Iterator[Metric]:
        """The queues and topics this router hosts (router/nodes/): one metric per reading, as
        the address metrics are, so that summing one over its labels means something."""
        labels = ["router", "node", "type"]
        gauges = {
            "depth": GaugeMetricFamily(
                "routernet_node_depth", "Messages a hosted queue or topic holds now.", labels=labels
            ),
            "bytes": GaugeMetricFamily(
                "routernet_node_bytes",
                "Bytes of the messages a hosted node holds now.",
                labels=labels,
            ),
            "paged": GaugeMetricFamily(
                "routernet_node_paged",
                "Of the messages a hosted node holds, those paged out to disk now.",
                labels=labels,
            ),
        }
        counters = {
            "enqueued": CounterMetricFamily(
                "routernet_node_enqueued",
                "Messages put into a hosted node (a topic: published to it).",
                labels=labels,
            ),
            "dequeued": CounterMetricFamily(
                "routernet_node_dequeued",
                "Messages consumers took from a hosted node (accepted, or sent pre-settled).",
                labels=labels,
            ),
            "deadLettered": CounterMetricFamily(
                "routernet_node_dead_lettered",
                "Messages a hosted node sent to its dead letter address (rejected, or delivered"
                " too often).",
                labels=labels,
            ),
            "expired": CounterMetricFamily(
                "routernet_node_expired",
                "Messages that expired in a hosted node.",
                labels=labels,
            ),
        }
        for name, node in list(self.router.nodes.nodes.items()):
            values = node.counters()
            key = [rid, name, node.kind]
            for field, gauge in gauges.items():
                gauge.add_metric(key, values[field])
            for field, counter in counters.items():
                counter.add_metric(key, values[field])
        yield from gauges.values()
        yield from counters.values()

    def _policy(self, rid: str) -> Iterator[Metric]:
        """Dispatch's policy counters (router/policy/): the router-wide ones, and per vhost
        its connections and denials by kind (vhostStats)."""
        rows = self.router.policy.rows()
        policy = rows["policy"][0]
        current = GaugeMetricFamily(
            "routernet_policy_connections",
            "Connections accepted on listeners and open now (what policy.maxConnections bounds).",
            labels=["router"],
        )
        current.add_metric([rid], policy["connectionsCurrent"])
        yield current
        denied = CounterMetricFamily(
            "routernet_policy_denials",
            "Refusals by the policy, by kind: sockets over maxConnections (connection), links,"
            " and messages over maxMessageSize.",
            labels=["router", "kind"],
        )
        for kind, key in (
            ("connection", "connectionsDenied"),
            ("link", "linksDenied"),
            ("message_size", "maxMessageSizeDenied"),
        ):
            denied.add_metric([rid, kind], policy[key])
        yield denied
        labels = ["router", "vhost"]
        vhost_current = GaugeMetricFamily(
            "routernet_vhost_connections", "Connections a vhost admitted, open now.", labels=labels
        )
        approved = CounterMetricFamily(
            "routernet_vhost_connections_approved", "Connections a vhost admitted.", labels=labels
        )
        vhost_denied = CounterMetricFamily(
            "routernet_vhost_denials",
            "What a vhost refused, by kind: connection, session, sender, receiver, message_size.",
            labels=[*labels, "kind"],
        )
        for row in rows["vhostStats"]:
            vhost = [rid, row["hostname"]]
            vhost_current.add_metric(vhost, row["connectionsCurrent"])
            approved.add_metric(vhost, row["connectionsApproved"])
            for kind, field in (
                ("connection", "connectionsDenied"),
                ("session", "sessionDenied"),
                ("sender", "senderDenied"),
                ("receiver", "receiverDenied"),
                ("message_size", "maxMessageSizeDenied"),
            ):
                vhost_denied.add_metric([*vhost, kind], row[field])
        yield from (vhost_current, approved, vhost_denied)

    def _network(self, rid: str) -> Iterator[Metric]:
        network = self.router.network
        reachable = GaugeMetricFamily(
            "routernet_routers_reachable", "Other routers with a route.", labels=["router"]
        )
        cost = GaugeMetricFamily(
            "routernet_route_cost",
            "Path cost to each reachable router.",
            labels=["router", "peer"],
        )
        traffic = CounterMetricFamily(
            "routernet_inter_router_deliveries",
            "Deliveries on inter-router data links, per neighbor and direction.",
            labels=["router", "peer", "direction"],
        )
        if network is not None:
            routes = network.routes  # replaced whole on every change: one consistent table
            reachable.add_metric([rid], len(routes.cost))
            for peer, c in sorted(routes.cost.items()):
                cost.add_metric([rid, peer], c)
            ids = dict(network.ids)
            per_peer: dict[tuple[str, str], int] = defaultdict(int)
            for link in readings.links(self.router):
                if link.kind == "data":
                    neighbor = ids.get(link.conn)
                    if neighbor is not None:
                        per_peer[(neighbor, "in" if link.incoming else "out")] += link.delivered
            for (peer, direction), n in sorted(per_peer.items()):
                traffic.add_metric([rid, peer, direction], n)
        else:
            reachable.add_metric([rid], 0)
        yield reachable
        yield cost
        yield traffic

    def _telemetry(self, rid: str) -> Iterator[Metric]:
        emitter = self.router.telemetry
        records = CounterMetricFamily(
            "routernet_telemetry_records",
            "Telemetry records sent toward the collector, and dropped for want of one.",
            labels=["router", "result"],
        )
        if emitter is not None:
            records.add_metric([rid, "sent"], emitter.records_sent)
            records.add_metric([rid, "dropped"], emitter.records_dropped)
        yield records
        age = GaugeMetricFamily(
            "routernet_loop_age_seconds",
            "Seconds since the event loop last turned (/healthz fails past a few).",
            labels=["router"],
        )
        age.add_metric([rid], max(0.0, readings.loop_age(self.router)))
        yield age
