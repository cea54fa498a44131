"""Whether two analyses (`python -m pipeline analyze --output DIR`) found the same: each
table's rows in a stable order, floats rounded (sums may add up in another order on another
executor), and summary.json but for how long it took. Run in a pod of the pipeline image:

    same_tables.py DIR DIR

Prints one JSON line (rows per table, what differs, and how many plots the second has beside
its report) and exits 0 when nothing differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

TABLES = (
    "traffic_matrix",
    "paths",
    "address_stats",
    "load_per_minute",
    "router_load",
    "node_stats",
)


def rows(output: Path, table: str) -> list[dict[str, Any]]:
    data = pq.read_table(output / table).to_pylist()
    rounded = [{k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()} for r in data]
    return sorted(rounded, key=repr)


def summary(output: Path) -> dict[str, Any]:
    found = json.loads((output / "summary.json").read_text())
    return {k: v for k, v in found.items() if k != "seconds"}


def main(first: str, second: str) -> int:
    a, b = Path(first), Path(second)
    counts = {table: len(rows(a, table)) for table in TABLES}
    different = [table for table in TABLES if rows(a, table) != rows(b, table)]
    if summary(a) != summary(b):
        different.append("summary.json")
    report = (b / "report.html").exists() and len(list((b / "plots").glob("*.png")))
    print(json.dumps({"rows": counts, "different": different, "plots_with_report": report}))
    return 1 if different else 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
