"""Predictive autoscaling: a Router's minReplicas raised ahead of the peaks its history shows.

The pipeline's `recommend` (pipeline/recommend.py) sizes each Router for the peak each hour of
the day (UTC) saw over the analysed range, its `hourly` profile. The autoscaler reads it, and
with `autoscaling.predictive: true` keeps at least that many routers from `LEAD` before such an
hour until it ends: the routers are up and in the mesh when the load comes, rather than one
autoscaler period and a router start after it. The reactive arithmetic (autoscaling/hpa.py) still
scales above that floor, and maxReplicas still bounds it. Without `predictive` the status shows the
prediction all the same, so it can be watched before it is trusted.

Where the recommendation is: on Kubernetes, the ConfigMap `routernet-recommendation-<network>`
(key `recommendation.json`) in the Router's namespace, made from `recommend`'s output
(`kubectl create configmap ... --from-file=recommendation.json`, by hand or a CronJob); on this
machine, `<state-dir>/analysis/recommendation.json` (`python -m pipeline recommend
<state-dir>/telemetry --output <state-dir>/analysis`). Pure: the text and the time come in.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

log = logging.getLogger("router_operator.autoscaling.predict")

LEAD = timedelta(minutes=10)
"""How long before a predicted peak's hour its replicas are kept: a router start, the mesh
forming and clients moving take well under that."""
CONFIG_MAP_KEY = "recommendation.json"


def config_map_name(network: str) -> str:
    return f"routernet-recommendation-{network}"


def parse(text: str | None) -> dict[str, Any] | None:
    """A recommendation document, or None (absent, or not one: logged, never fatal)."""
    if not text:
        return None
    try:
        document = json.loads(text)
    except ValueError as e:
        log.warning("recommendation is not JSON: %s", e)
        return None
    if not isinstance(document, dict) or document.get("kind") != "Recommendation":
        log.warning("recommendation has no kind Recommendation: ignored")
        return None
    return document


def predicted_min(
    recommendation: Mapping[str, Any] | None, router: str, now: datetime
) -> int | None:
    """The replicas the Router's hourly profile asks for at `now` (UTC) and `LEAD` ahead, the
    larger; None when the recommendation has no profile for it."""
    if not recommendation:
        return None
    for entry in recommendation.get("routers") or ():
        if not isinstance(entry, Mapping) or entry.get("name") != router:
            continue
        hours = {
            h["hour"]: h["replicas"]
            for h in entry.get("hourly") or ()
            if isinstance(h, Mapping)
            and isinstance(h.get("hour"), int)
            and isinstance(h.get("replicas"), int)
            and h["replicas"] > 0
        }
        wanted = [hours[t.hour] for t in (now, now + LEAD) if t.hour in hours]
        return max(wanted) if wanted else None
    return None
