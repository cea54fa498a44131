"""Dynamic reply addresses folded into one row, wherever rows are shown to a reader.

A requester (a management tool included) gets one `_topo/<area>/<router>/temp.*` or
`_edge/<router>/temp.*` address per reply link, used once: a row each would bury the addresses
users named, in the printed matrix and in the report alike. The stored tables keep them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

DYNAMIC = re.compile(r"^_(topo/[^/]+/[^/]+|edge/[^/]+)/temp\.")
DYNAMIC_SHOWN = "(dynamic reply addresses)"


def fold_dynamic(
    rows: list[dict[str, Any]], per: Sequence[str], sums: Sequence[str]
) -> list[dict[str, Any]]:
    """Rows whose address is dynamic summed into one row per value of the `per` columns,
    address DYNAMIC_SHOWN, `sums` added (lists, i.e. histograms, bucket by bucket; other
    columns those of the first such row); the other rows as they are."""
    kept: list[dict[str, Any]] = []
    folded: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        if not DYNAMIC.match(row["address"]):
            kept.append(row)
            continue
        key = tuple(row[c] for c in per)
        into = folded.get(key)
        if into is None:
            folded[key] = {**row, "address": DYNAMIC_SHOWN}
        else:
            for column in sums:
                into[column] = _add(into[column], row[column])
    return kept + list(folded.values())


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, list):
        longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
        return [x + (shorter[i] if i < len(shorter) else 0) for i, x in enumerate(longer)]
    return a + b
