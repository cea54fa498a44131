"""Structured logs: one line per event, logfmt for people and grep, JSON lines for collectors.

Built on the stdlib ``logging`` module so that records from libraries (and Python warnings)
come out in the same one-line shape as ours, instead of as free text interleaved with it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time

LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
FORMATS = ("text", "json")

# LogRecord attribute carrying an event's fields from EventLogger to the formatter.
_FIELDS = "routernet_fields"
# Anything that would break `key=value` splitting or the one-line guarantee.
_NEEDS_QUOTES = re.compile(r'[\s"=\\\x00-\x1f\x7f]')


class EventLogger:
    """Logs named events with key=value fields rather than prose, so lines can be queried.

    The fields ``ts``, ``level`` and ``logger`` are written by the formatter; passing fields
    with those names overwrites them.
    """

    __slots__ = ("_logger",)

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def enabled(self, level: str) -> bool:
        """Lets hot paths skip computing fields that would be thrown away."""
        return self._logger.isEnabledFor(LEVELS[level])

    def debug(self, event: str, /, **fields: object) -> None:
        if self._logger.isEnabledFor(logging.DEBUG):
            self._logger.log(logging.DEBUG, event, extra={_FIELDS: fields})

    def info(self, event: str, /, **fields: object) -> None:
        if self._logger.isEnabledFor(logging.INFO):
            self._logger.log(logging.INFO, event, extra={_FIELDS: fields})

    def warning(self, event: str, /, **fields: object) -> None:
        if self._logger.isEnabledFor(logging.WARNING):
            self._logger.log(logging.WARNING, event, extra={_FIELDS: fields})

    def error(self, event: str, /, **fields: object) -> None:
        if self._logger.isEnabledFor(logging.ERROR):
            self._logger.log(logging.ERROR, event, extra={_FIELDS: fields})

    def exception(self, event: str, /, **fields: object) -> None:
        """Like error(), plus the traceback being handled, escaped into an ``exc`` field."""
        if self._logger.isEnabledFor(logging.ERROR):
            self._logger.log(logging.ERROR, event, exc_info=True, extra={_FIELDS: fields})


def get_logger(name: str) -> EventLogger:
    return EventLogger(logging.getLogger(name))


def configure(level: str = "info", fmt: str = "text") -> None:
    """Sends every logger's records to stderr, one line each; calling again replaces the setup."""
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (one of {', '.join(LEVELS)})")
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r} (one of {', '.join(FORMATS)})")
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    handler = _StderrHandler()
    handler.setFormatter(_EventFormatter(json_lines=fmt == "json"))
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    logging.captureWarnings(True)


class _StderrHandler(logging.Handler):
    """Looks up sys.stderr per record, so redirecting it after configure() still works."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


class _EventFormatter(logging.Formatter):
    def __init__(self, json_lines: bool) -> None:
        super().__init__()
        self._json_lines = json_lines

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        own = getattr(record, _FIELDS, None)
        if own is None:
            # A library's record: keep its prose, but as one field of one line.
            fields["msg"] = record.getMessage().rstrip()
        else:
            fields["event"] = record.msg
            fields.update(own)
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        if self._json_lines:
            return json.dumps(fields, ensure_ascii=False, default=str)
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def _logfmt_value(value: object) -> str:
    if value is None:
        return "null"
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if not text or _NEEDS_QUOTES.search(text):
        return json.dumps(text, ensure_ascii=False)
    return text
