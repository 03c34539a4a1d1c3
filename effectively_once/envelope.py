"""The event envelope: what every message on every topic carries, validated on the way in.

A producer gives each event a message id once, at birth, and keeps it forever: through relay
retries, replays and dead-letter re-drives. Consumers deduplicate on it and on nothing else: a
copy with the same id is the same message, whatever else it carries. The runtime mints UUIDv7 ids
(message_ids.py), whose time places each marker in its day partition.

A message received from Kafka keeps its body and its record's key and headers (`Received`): the
marker stores a digest of them, so that a copy with the same id and other content, a producer's
bug, is counted apart. The `eo-message-id` header, when present, must name the envelope's id: a
message whose two ids disagree is poison.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .message_ids import new_message_id

MAX_MESSAGE_ID_LENGTH = 255
MAX_BODY_BYTES = 512 * 1024
"""Larger bodies are refused before parsing (and dead-lettered whole, under Kafka's 1 MiB limit)."""
MESSAGE_ID_HEADER = "eo-message-id"
"""The header the relays set to the envelope's message id."""


class PoisonMessage(Exception):
    """A message no retry can ever process: it goes to the dead-letter topic at once."""

    def __init__(self, reason: str, detail: str, message_id: str | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.message_id = message_id


@dataclass(frozen=True)
class Received:
    """A message as it came from Kafka: what its content digest is computed from (migration 0008)."""

    body: str
    """The record's value, as text."""
    delivery: str
    """The record's key and headers as JSON, `{"key": hex, "headers": {name: [hex, ...], ...}}` (null
    for a missing key or value; a name's values in the order they came), as every stack writes it
    for the database's message_content_digest()."""

    @classmethod
    def of(cls, body: str, record_key: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> Received:
        values: dict[str, list[str | None]] = {}
        for name, value in headers:
            values.setdefault(name, []).append(value.hex() if value is not None else None)
        delivery = {"key": record_key.hex() if record_key is not None else None, "headers": values}
        return cls(body, json.dumps(delivery, separators=(",", ":")))


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
    received: Received | None = field(default=None, compare=False, repr=False)
    """How it arrived, when it came from Kafka; None for an event made in process."""

    @classmethod
    def new(
        cls,
        type: str,
        key: str,
        payload: Mapping[str, Any],
        trace_id: str | None = None,
        at: datetime | None = None,
    ) -> Envelope:
        """A new event with a new, permanent message id (a UUIDv7), born now or `at` (an event
        imported from the past): its id carries that time, and so does its occurred_at."""
        born = at or datetime.now(UTC)
        return cls(
            message_id=new_message_id(int(born.timestamp() * 1_000_000) * 1000),
            type=type,
            key=key,
            payload=payload,
            occurred_at=born,
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

    def content(self) -> tuple[str, str | None]:
        """What the marker's content digest is computed from: the body as received and the
        record's key and headers, or this envelope's JSON and no record (made in process)."""
        if self.received is not None:
            return self.received.body, self.received.delivery
        return self.to_json().decode(), None


def _text(body: Mapping[str, Any], name: str, message_id: str | None, limit: int = 255) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise PoisonMessage(f"invalid_{name}", f"{name} must be a non-empty string", message_id)
    if len(value) > limit:
        raise PoisonMessage(f"invalid_{name}", f"{name} is longer than {limit} characters", message_id)
    if not value.isprintable():
        raise PoisonMessage(f"invalid_{name}", f"{name} contains unprintable characters", message_id)
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _storable(value: Any) -> bool:
    """Whether PostgreSQL's jsonb can hold every string in `value`: no NUL character and no lone
    surrogate (JSON escapes can spell both; Python's decoder takes them, the database does not)."""
    if isinstance(value, str):
        return _encodable(value)
    if isinstance(value, dict):
        return all(_storable(key) and _storable(item) for key, item in value.items())
    if isinstance(value, list):
        return all(_storable(item) for item in value)
    return True


def _encodable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode(
    raw: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None = None,
    record_key: bytes | None = None,
) -> Envelope:
    """Parse and validate one message body, or raise PoisonMessage with the reason. With the
    record's `headers` (a message from Kafka), its `eo-message-id` header must name the envelope's
    id, and the envelope remembers how it was received (its content digest's input)."""
    if raw is None or not raw:
        raise PoisonMessage("empty_body", "the message has no body")
    if len(raw) > MAX_BODY_BYTES:
        raise PoisonMessage("oversized", f"{len(raw)} bytes is more than {MAX_BODY_BYTES}")
    try:
        text = raw.decode("utf-8")
        body = json.loads(text, parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise PoisonMessage("undecodable", f"not UTF-8 JSON ({error.__class__.__name__})") from error
    if b"\\u" in raw and not _storable(body):
        raise PoisonMessage("undecodable", "a string holds a NUL character or a lone surrogate")
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
    received = None
    if headers is not None:
        _check_id_header(message_id, headers)
        received = Received.of(text, record_key, headers)
    return Envelope(
        message_id=message_id,
        type=event_type,
        key=key,
        payload=payload,
        occurred_at=occurred_at,
        version=version,
        trace_id=trace_id,
        received=received,
    )


def _check_id_header(message_id: str, headers: Sequence[tuple[str, bytes | None]]) -> None:
    """Every `eo-message-id` header must name the envelope's id: a message with two ids has none."""
    for name, value in headers:
        if name == MESSAGE_ID_HEADER and value != message_id.encode():
            raise PoisonMessage(
                "message_id_mismatch",
                f"its {MESSAGE_ID_HEADER} header does not name the envelope's message_id",
                message_id,
            )
