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
    # One pass carrying the running sum and the position (the goal, q of the total, computed
    # once in the start value): the 1-based bucket where the sum first reaches the goal in a
    # bucket that holds a count, 0 if none. O(buckets) per row.
    hit = (
        f"aggregate({hist}, named_struct('goal', {q!r}D * {total}, 'run', 0L, 'i', 0, 'hit', 0),"
        " (a, x) -> named_struct('goal', a.goal, 'run', a.run + x, 'i', a.i + 1, 'hit',"
        " CASE WHEN a.hit = 0 AND x > 0 AND a.run + x >= a.goal THEN a.i + 1 ELSE a.hit END),"
        " a -> a.hit)"
    )
    return F.expr(
        f"CASE WHEN {total} = 0 THEN NULL"
        f" ELSE element_at({_BOUNDS}, CAST(least(greatest({hit}, 1), {_LAST + 1}) AS INT)) END"
    )
