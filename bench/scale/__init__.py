"""The scale suite: what grows with a network's size, ours beside qdrouterd 1.19's (QDROUTERD)
in the same run. Many routers (networks.py: rings and lines of 16 to 64 routers) and many
addresses (addresses.py: 10,000 on a ring of 16); each scenario with our routers, then with
qdrouterd's when QDROUTERD is set.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bench.clients import BenchError, Clients
from bench.routers import QDROUTERD_BINARY
from bench.scale import addresses, networks

SCENARIOS = (*networks.SCENARIOS, *addresses.SCENARIOS)
EXTRA_SCENARIOS = (*networks.EXTRA_SCENARIOS, *addresses.EXTRA_SCENARIOS)
"""Not run by default: the suite's whole path in seconds (tests/test_bench_smoke.py)."""


def _measure(
    clients: Clients, name: str, log_dir: Path, qdrouterd: bool, quick: bool
) -> dict[str, Any]:
    if name.startswith("addresses-"):
        return addresses.measure(name, log_dir, qdrouterd=qdrouterd, quick=quick)
    return networks.measure(clients, name, log_dir, qdrouterd=qdrouterd, quick=quick)


def run(clients: Clients, chosen: list[str], log_dir: Path, quick: bool = False) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "scale",
        "config": {"networks": networks.config(quick), "addresses": addresses.config(quick)},
        "comparison": {"qdrouterd": QDROUTERD_BINARY},
        "scenarios": {},
    }
    for name in chosen:
        outcome: dict[str, Any] = {}
        for impl, qd in (("routernet", False), ("qdrouterd", True)):
            if qd and QDROUTERD_BINARY is None:
                outcome[impl] = {"skipped": "QDROUTERD is not set"}
                continue
            print(f"bench: scale {name} ({impl}) ...", file=sys.stderr, flush=True)
            try:
                outcome[impl] = _measure(clients, name, log_dir, qd, quick)
            except BenchError as e:
                outcome[impl] = {"error": str(e)}
            print(f"bench: scale {name} ({impl}): {outcome[impl]}", file=sys.stderr, flush=True)
        errors = [f"{impl}: {o['error']}" for impl, o in outcome.items() if "error" in o]
        if errors:
            outcome["error"] = "; ".join(errors)
        results["scenarios"][name] = outcome
    return results


def markdown(results: dict[str, Any]) -> str:
    """One table per scenario: ours and qdrouterd's column."""
    out = []
    for name, outcome in results["scenarios"].items():
        ours, theirs = outcome.get("routernet", {}), outcome.get("qdrouterd", {})
        rows = addresses.ROWS if name.startswith("addresses-") else networks.ROWS
        size = ours.get("routers") or theirs.get("routers") or "?"
        out.append(f"**{name}** ({size} routers)\n")
        out.append("| | routernet | qdrouterd |\n|---|---:|---:|")
        for key, label, digits in rows:
            cells = []
            for side in (ours, theirs):
                value = side.get(key)
                if value is None:
                    cells.append(str(side.get("error", side.get("skipped", "-")))[:60])
                else:
                    cells.append(f"{value:,.{digits}f}")
            out.append(f"| {label} | {cells[0]} | {cells[1]} |")
        out.append("")
    return "\n".join(out)
