"""JSON logs, one object a line: message id, consumer, event type and trace id; never a payload."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

FIELDS = (
    "consumer",
    "message_id",
    "event_type",
    "trace_id",
    "outcome",
    "strategy",
    "attempt",
    "reason",
    "error_class",
    "topic",
    "partition",
    "offset",
    "fault_point",
    "differing_fields",
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


PER_REQUEST_LOGGERS = ("httpx", "httpcore")
"""HTTP clients' loggers that write a line for every request at INFO: at DEBUG only, like the
consumers' line per delivery (an executor records what each call brought back in its own database)."""


def configure(level: int = logging.INFO) -> None:
    """Send every log record to stdout as JSON (the supervisor or compose keeps the file)."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in PER_REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else max(level, logging.WARNING))


def entries(text: str) -> list[dict[str, Any]]:
    """The JSON records in a process's output, as `configure` writes them (other lines skipped)."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found
