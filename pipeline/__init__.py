"""The telemetry pipeline: Spark jobs over the collector's Parquet dataset.

The collector writes `<dataset>/<kind>/date=YYYY-MM-DD/hour=HH/part-*.parquet` (kind `flow` or
`router`, columns from router/telemetry/schema.py). `analyze` turns a time range of it into
tables, plots and a report; `recommend` into replica counts and connection costs; `stream`
keeps per-router load current. Each analysis is a pure DataFrame -> DataFrame function in its
own module; I/O (dataset.py, report.py) and the CLI (cli.py) stay thin.

Nothing here imports pyspark at module level outside the modules that need it, so importing
`pipeline.cli` costs nothing until a command runs.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Bad input the user can fix (dataset, time range, Java): the CLI prints it as one line
    and exits 2, without a traceback."""
