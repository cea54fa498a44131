"""The telemetry collector: receives the records routers send to `_routernet/telemetry` and
appends them to a Parquet dataset (``routernet-collector``; docs/telemetry.md).

| module | concern |
|---|---|
| `arrow.py` | Arrow schemas from the telemetry FIELDS; rows to record batches (pure) |
| `partitions.py` | which file a row goes to: `<kind>/date=YYYY-MM-DD/hour=HH/` (pure) |
| `buffer.py` | rows waiting for the next flush, when to flush, recent record ids (pure) |
| `store.py` | writing a partition's rows as one Parquet file, atomically and fsynced |
| `receiver.py` | the AMQP side: connect, receive, settle after fsync, reconnect with backoff |
| `cli.py` | the ``routernet-collector`` command |
"""
