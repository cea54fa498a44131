"""Telemetry: what routers measure about their traffic and send to the collector."""
