"""One order's story, in time order: events written to outboxes, published by the relay,
delivered to each consumer with what became of them, faults that fired with the order in hand,
and the process restarts between. Pure: it takes what was read, and returns entries to draw."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chaos_panel.reading.records import OutboxEvent

OUTCOME_WORDS = {
    "applied": "applied",
    "duplicate": "duplicate: marker already there, nothing done",
    "duplicate_with_different_content": "duplicate with different content: marker already there, nothing done; "
    "the copy's content differs from what was applied (a producer's bug)",
    "retryable_failure": "rolled back, will retry",
    "terminal_failure": "dead-lettered",
    "ignored": "ignored (not its business)",
}


@dataclass(frozen=True)
class Entry:
    at: float
    actor: str
    kind: str
    """written, published, applied, duplicate, duplicate_with_different_content, retryable_failure,
    terminal_failure, ignored, fault, started, remote_call, parked"""
    text: str
    detail: str = ""
    message_id: str = ""

    @property
    def clock(self) -> str:
        return datetime.fromtimestamp(self.at, UTC).strftime("%H:%M:%S.%f")[:-3]


def position(record: dict[str, Any]) -> str:
    """Where a delivery came from, `orders.events/2 @ 41`; empty when the record does not say."""
    if record.get("partition") is None or record.get("offset") is None:
        return ""
    return f"{record.get('topic')}/{record.get('partition')} @ {record.get('offset')}"


def build(
    events: list[OutboxEvent], records: Iterable[dict[str, Any]], starts: Iterable[dict[str, Any]]
) -> list[Entry]:
    type_of = {event.message_id: event.event_type for event in events}
    entries: list[Entry] = []
    published: set[str] = set()
    for record in records:
        kind, at = record.get("kind"), float(record.get("at", 0))
        message_id = str(record.get("message_id") or "")
        event_type = record.get("event_type") or type_of.get(message_id, "event")
        if kind == "published":
            published.add(message_id)
            entries.append(
                Entry(
                    at,
                    "outbox-relay",
                    "published",
                    f"{event_type} published, confirmed by the broker",
                    f"to {record.get('topic')}",
                    message_id,
                )
            )
        elif kind == "delivery":
            outcome = str(record.get("outcome"))
            why = record.get("reason") or record.get("error_class") or ""
            parts = [position(record)]
            if why:
                parts.append(str(why))
            if record.get("differing_fields"):
                parts.append("differs in " + ", ".join(map(str, record["differing_fields"])))
            if record.get("strategy") not in (None, "correct"):
                parts.append(f"strategy {record.get('strategy')}")
            detail = "; ".join(part for part in parts if part)
            entries.append(
                Entry(
                    at,
                    str(record.get("consumer")),
                    outcome,
                    f"{event_type}: {OUTCOME_WORDS.get(outcome, outcome)}",
                    detail,
                    message_id,
                )
            )
        elif kind == "fault":
            action = record.get("action")
            words = {
                "crash": "crashed",
                "raise": "raised an error",
                "stall": "stalled",
                "serialization_failure": "hit a serialization failure",
            }.get(str(action), str(action))
            entries.append(
                Entry(at, str(record.get("process")), "fault", f"{words} at {record.get('point')}", "injected fault")
            )
        elif kind == "parked":
            entries.append(
                Entry(
                    at,
                    str(record.get("process")),
                    "parked",
                    f"parked for an operator: {record.get('reason')}",
                    f"Idempotency-Key {record.get('idempotency_key')}",
                )
            )
        elif kind == "remote_call":
            result = str(record.get("result"))
            entries.append(
                Entry(
                    at,
                    str(record.get("process")),
                    "remote_call",
                    f"{record.get('service')} call {record.get('call')}: {result}",
                    f"Idempotency-Key {record.get('idempotency_key')}",
                )
            )
    for event in events:
        entries.append(
            Entry(
                event.created_at.timestamp(),
                event.database,
                "written",
                f"{event.event_type} written to the {event.database} outbox",
                f"reason: {event.reason}" if event.reason else "in the business transaction",
                event.message_id,
            )
        )
        if event.published_at is not None and event.message_id not in published:
            entries.append(
                Entry(
                    event.published_at.timestamp(),
                    "outbox-relay",
                    "published",
                    f"{event.event_type} published, confirmed by the broker",
                    f"to {event.topic}",
                    event.message_id,
                )
            )
    if entries:
        first, last = min(e.at for e in entries), max(e.at for e in entries)
        for start in starts:
            if first <= float(start["at"]) <= last:
                entries.append(
                    Entry(
                        float(start["at"]),
                        str(start.get("process")),
                        "started",
                        "process started again",
                        f"pid {start.get('pid')}",
                    )
                )
    return sorted(entries, key=lambda entry: entry.at)
