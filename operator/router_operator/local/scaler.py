"""The local backend's autoscaler: the operator's autoscaling (scaler.step) over router
processes, as a process of its own that `routernet up` starts and `routernet down` stops.

`up` returns at once, so the autoscaler cannot live in it; it runs beside the routers and the
collectors (`python -m router_operator.local.scaler --state-dir DIR`), while some Router of
the state directory has `spec.autoscaling.mode: operator`. Every period (the HPA's 15 s, or
ROUTERNET_AUTOSCALE_SECONDS) it scrapes each such Router's routers at their HTTP endpoints,
decides with the same code as the operator, and when the replicas change writes them to
`<state>/autoscaling.json` and runs `up` again: the planner then has more or fewer pods, new
ones get new 127.0.0.x addresses and join the mesh, leaving ones get SIGTERM and drain (their
clients' unsettled deliveries settle or come back released, and the clients move to routers
that stay). `autoscaling.json` holds, per Router, the replicas in force (they replace the
file's, as /scale does on Kubernetes, across later `up`s too) and the status the operator
would write: `routernet status` shows it. That file and the process's pid are kept by
local/scaler_control.py, all that `up`, `down` and `status` need of the autoscaler, so this
module alone imports the backend.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from router_operator.autoscaling import predict
from router_operator.autoscaling.scaler import (
    SYNC_SECONDS,
    RouterScaling,
    readings,
    step,
)
from router_operator.autoscaling.scrape import fetch_metrics
from router_operator.local import backend as local
from router_operator.local import handoff as local_handoff
from router_operator.local.files import InvalidInput
from router_operator.local.scaler_control import autoscaled, load, save
from router_operator.resources.autoscaling import ABLE_TO_SCALE
from router_operator.resources.models import RouterStatus

log = logging.getLogger("router_operator.local.scaler")

RECOMMENDATION = Path("analysis") / predict.CONFIG_MAP_KEY
"""Where `python -m pipeline recommend <state>/telemetry --output <state>/analysis` writes."""
PERIOD_ENV = "ROUTERNET_AUTOSCALE_SECONDS"


class LocalScaler:
    """One pass every `period` over the state directory's autoscaled Routers."""

    def __init__(self, state_dir: Path, period: float) -> None:
        self.state_dir = state_dir
        self.period = period
        self.scaling: dict[str, RouterScaling] = {}
        self.unfinished = False
        """The last `up` left leaving routers of a Router with a store running, still holding
        nodes (local/handoff.py): the next pass runs it again to stop them once they are empty."""

    def run_forever(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.tick()
            except Exception:  # a bad pass (a file being rewritten, say) must not end it
                log.exception("autoscaling pass failed")
            time.sleep(max(0.0, self.period - (time.monotonic() - started)))

    def tick(self) -> None:
        state = local.State.load(self.state_dir)
        if state is None:
            return
        if self.unfinished:
            try:
                self.up(collector=bool(state.collectors))
            except (local.LocalError, InvalidInput) as err:
                log.error("finishing a scale-in failed: %s", err)
        routers = autoscaled(state.resources)
        entries = load(self.state_dir)
        kept: dict[str, dict[str, Any]] = {}
        for router in routers:
            name = router.metadata.name
            entry = entries.get(name, {})
            current = entry.get("replicas", router.spec.replicas)
            live = router.model_copy(
                update={"spec": router.spec.model_copy(update={"replicas": current})}
            )
            stored = RouterStatus.model_validate(entry.get("status") or {})
            urls = {
                pod: record["httpEndpoint"] + "/metrics"
                for pod, record in state.pods.items()
                if record["router"] == name and record.get("httpEndpoint")
            }
            texts = asyncio.run(fetch_metrics(urls))
            scaling = self.scaling.setdefault(name, RouterScaling())
            now = time.monotonic()
            recommendation = predict.parse(_read(self.state_dir / RECOMMENDATION))
            result = step(
                now, datetime.now(UTC), live, stored, scaling, readings(texts), recommendation
            )
            status, in_force = result.status, current
            if result.replicas is not None:
                wanted = {"replicas": result.replicas, "status": _dump(status)}
                save(self.state_dir, {**entries, **kept, name: wanted})  # what `up` plans with
                try:
                    self.up(collector=bool(state.collectors))
                except (local.LocalError, InvalidInput) as err:
                    log.error("scaling %s to %d failed: %s", name, result.replicas, err)
                    message = f"the autoscaler failed to update the replicas: {err}"
                    status.set_condition(ABLE_TO_SCALE, "False", "FailedUpdateScale", message)
                else:
                    in_force = result.replicas
                    scaling.autoscaler.scaled(now, current, in_force)
                    auto = status.autoscaling
                    log.info("Router %s scaled: %s", name, auto and auto.lastScaleReason)
            kept[name] = {"replicas": in_force, "status": _dump(status)}
        for gone in set(self.scaling) - set(kept):
            del self.scaling[gone]
        save(self.state_dir, kept)

    def up(self, *, collector: bool) -> None:
        """`routernet up` again, with the replicas just saved."""
        applied = local.up(self.state_dir, collector=collector, progress=log.info)
        self.unfinished = bool(applied.handing_off)
        if self.unfinished:
            log.warning("%s", local_handoff.left_running_line(applied.handing_off))


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _dump(status: RouterStatus) -> dict[str, Any]:
    return status.model_dump(mode="json", exclude_none=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="router_operator.local.scaler")
    parser.add_argument("--state-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    period = float(os.environ.get(PERIOD_ENV) or SYNC_SECONDS)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    log.info("autoscaling the Routers of %s every %g s", args.state_dir, period)
    LocalScaler(args.state_dir.resolve(), period).run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
