"""Percentiles read off summed latency histograms, as Spark expressions.

schema.histogram_quantile in SQL, so it runs where the (small) summed histograms are, with
no Python UDF: the first bucket whose running total reaches q of the whole and that holds a
count, read as its upper bound (the open last bucket as its lower bound); null when empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.telemetry.schema import LATENCY_BOUNDS_US

if TYPE_CHECKING:
    from pyspark.sql import Column

_BOUNDS = "array(" + ", ".join(f"{b!r}D" for b in LATENCY_BOUNDS_US) + ")"
_LAST = len(LATENCY_BOUNDS_US) - 1


def quantile(hist: str, q: float) -> Column:
    """The `q` quantile (0..1) of the histogram column `hist` (bucket counts)."""
    from pyspark.sql import functions as F

    total = f"aggregate({hist}, 0L, (a, x) -> a + x)"
    running = (
        f"transform({hist}, (x, i) -> aggregate(slice({hist}, 1, i + 1), 0L, (a, b) -> a + b))"
    )
    reached = f"transform({running}, (c, i) -> c >= {q!r}D * {total} AND {hist}[i] > 0)"
    hit = f"array_position({reached}, true)"
    return F.expr(
        f"CASE WHEN {total} = 0 THEN NULL"
        f" ELSE element_at({_BOUNDS}, CAST(least(greatest({hit}, 1), {_LAST + 1}) AS INT)) END"
    )
