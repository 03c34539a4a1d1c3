"""The event envelope: what every message on every topic carries, validated on the way in.

A producer gives each event a message id once, at birth, and keeps it forever: through relay
retries, replays and dead-letter re-drives. Consumers deduplicate on it, with the time it
occurred (`occurred_at`), which is written once with it and partitions the markers by day.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

MAX_MESSAGE_ID_LENGTH = 255
MAX_BODY_BYTES = 512 * 1024
"""Larger bodies are refused before parsing (and dead-lettered whole, under Kafka's 1 MiB limit)."""


class PoisonMessage(Exception):
    """A message no retry can ever process: it goes to the dead-letter topic at once."""

    def __init__(self, reason: str, detail: str, message_id: str | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.message_id = message_id


@dataclass(frozen=True)
class Envelope:
    """One event. `key` is the order id: the Kafka key, so one order's events keep their order."""

    message_id: str
    type: str
    key: str
    payload: Mapping[str, Any]
    occurred_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    version: int = 1
    trace_id: str | None = None

    @classmethod
    def new(cls, type: str, key: str, payload: Mapping[str, Any], trace_id: str | None = None) -> Envelope:
        """A new event with a new, permanent message id."""
        return cls(
            message_id=str(uuid.uuid4()),
            type=type,
            key=key,
            payload=payload,
            trace_id=trace_id or uuid.uuid4().hex,
        )

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "message_id": self.message_id,
                "type": self.type,
                "version": self.version,
                "key": self.key,
                "occurred_at": self.occurred_at.isoformat(),
                "trace_id": self.trace_id,
                "payload": dict(self.payload),
            },
            separators=(",", ":"),
        ).encode()


def _text(body: Mapping[str, Any], name: str, message_id: str | None, limit: int = 255) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise PoisonMessage(f"invalid_{name}", f"{name} must be a non-empty string", message_id)
    if len(value) > limit:
        raise PoisonMessage(f"invalid_{name}", f"{name} is longer than {limit} characters", message_id)
    if not value.isprintable():
        raise PoisonMessage(f"invalid_{name}", f"{name} contains unprintable characters", message_id)
    return value


def decode(raw: bytes | None) -> Envelope:
    """Parse and validate one message body, or raise PoisonMessage with the reason."""
    if raw is None or not raw:
        raise PoisonMessage("empty_body", "the message has no body")
    if len(raw) > MAX_BODY_BYTES:
        raise PoisonMessage("oversized", f"{len(raw)} bytes is more than {MAX_BODY_BYTES}")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise PoisonMessage("undecodable", f"not UTF-8 JSON ({error.__class__.__name__})") from error
    if not isinstance(body, dict):
        raise PoisonMessage("undecodable", "the JSON body is not an object")
    if not body.get("message_id"):
        raise PoisonMessage("missing_message_id", "message_id is missing or empty")
    message_id = _text(body, "message_id", None, MAX_MESSAGE_ID_LENGTH)
    event_type = _text(body, "type", message_id, 100)
    key = _text(body, "key", message_id)
    version = body.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise PoisonMessage("invalid_version", "version must be a positive integer", message_id)
    try:
        occurred_at = datetime.fromisoformat(str(body.get("occurred_at")))
    except ValueError as error:
        raise PoisonMessage("invalid_occurred_at", "occurred_at must be an ISO-8601 time", message_id) from error
    if occurred_at.tzinfo is None:
        raise PoisonMessage("invalid_occurred_at", "occurred_at must carry a time zone", message_id)
    trace_id = body.get("trace_id")
    if trace_id is not None and not isinstance(trace_id, str):
        raise PoisonMessage("invalid_trace_id", "trace_id must be a string", message_id)
    payload = body.get("payload", {})
    if not isinstance(payload, dict):
        raise PoisonMessage("invalid_payload", "payload must be a JSON object", message_id)
    return Envelope(
        message_id=message_id,
        type=event_type,
        key=key,
        payload=payload,
        occurred_at=occurred_at,
        version=version,
        trace_id=trace_id,
    )
