"""Flows on Kubernetes: every network's collector asked for its totals, the answers added up.

A collector's dataset is on its ReadWriteOnce claim, which only its own pod mounts; the operator
gives each collector a Service (rendering/collector.py) where it answers ``GET /flows``. The
console finds those Services by their labels, asks each at its cluster IP, all at once and each
within ``timeout`` seconds, and adds the totals up (two networks' paths never share a router, so
adding loses nothing). A collector that does not answer is named, one line, beside what the
others gave; none to ask at all is no flows, with why.

Pure but for ``fetch``, which tests replace, and which by default is one HTTP GET.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from collector.window import Totals
from router_operator.console.flows import FlowAnswer
from router_operator.rendering.collector import FLOWS_PORT_NAME, selector_labels

COMPONENT_SELECTOR = ",".join(
    f"{k}={v}" for k, v in sorted(selector_labels("").items()) if not k.endswith("/network")
)
"""Every network's collector Service."""
NETWORK_LABEL = next(k for k in selector_labels("") if k.endswith("/network"))
TIMEOUT = 3.0
NO_COLLECTOR = (
    "no collector Service found: the operator runs one per network when the chart's"
    " collector is enabled"
)


@dataclass(frozen=True)
class Collector:
    namespace: str
    network: str
    url: str
    """Where its ``/flows`` answers: http://<cluster IP>:<port>."""

    @property
    def name(self) -> str:
        return f"the collector of network {self.namespace}/{self.network}"


def collectors(services: Iterable[Mapping[str, Any]]) -> list[Collector]:
    """The collector Services that have a cluster IP and a flows port."""
    found = []
    for svc in services:
        meta = svc.get("metadata") or {}
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        port = next(
            (p.get("port") for p in spec.get("ports") or () if p.get("name") == FLOWS_PORT_NAME),
            None,
        )
        if not ip or ip == "None" or not isinstance(port, int):
            continue
        host = f"[{ip}]" if ":" in ip else ip
        found.append(
            Collector(
                namespace=str(meta.get("namespace") or ""),
                network=str((meta.get("labels") or {}).get(NETWORK_LABEL) or "?"),
                url=f"http://{host}:{port}",
            )
        )
    return sorted(found, key=lambda c: (c.namespace, c.network))


Fetch = Callable[[str, float], Any]
"""GET a URL, within the seconds given; the decoded JSON body."""


def http_get(url: str, timeout: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.load(answer)


def gather(
    found: list[Collector],
    start_ms: int,
    end_ms: int,
    fetch: Fetch = http_get,
    timeout: float = TIMEOUT,
) -> FlowAnswer:
    if not found:
        return FlowAnswer(None, NO_COLLECTOR)
    query = urllib.parse.urlencode({"from": start_ms, "to": end_ms})

    def ask(c: Collector) -> Totals | str:
        try:
            return Totals.from_json(fetch(f"{c.url}/flows?{query}", timeout))
        except (OSError, ValueError) as err:  # refused, timed out, an HTTP error, bad JSON
            return f"{c.name} did not answer ({c.url}): {_why(err)}"

    with ThreadPoolExecutor(max_workers=min(16, len(found))) as pool:
        answers = list(pool.map(ask, found))
    totals = Totals()
    unanswered = []
    for answer in answers:
        if isinstance(answer, Totals):
            totals.merge(answer)
        else:
            unanswered.append(answer)
    if len(unanswered) == len(found):
        return FlowAnswer(None, "; ".join(unanswered))
    return FlowAnswer(totals, unanswered=tuple(unanswered))


def _why(err: Exception) -> str:
    reason = getattr(err, "reason", None)  # URLError wraps the socket's error
    text = str(reason if reason is not None else err) or type(err).__name__
    return text.splitlines()[0][:200]
