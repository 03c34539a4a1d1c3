"""A Kafka record carrying one event, as the relays send it: the unit the suite publishes."""

from __future__ import annotations

from dataclasses import dataclass

from ..envelope import MESSAGE_ID_HEADER, Envelope, decode


@dataclass(frozen=True)
class Record:
    """A Kafka record carrying one event, as the relays send it."""

    value: bytes
    key: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    @classmethod
    def of(cls, event: Envelope) -> Record:
        headers: list[tuple[str, bytes | None]] = [(MESSAGE_ID_HEADER, event.message_id.encode())]
        if event.trace_id:
            headers.append(("eo-trace-id", event.trace_id.encode()))
        return cls(event.to_json(), event.key.encode(), tuple(headers))

    def decoded(self) -> Envelope:
        """The envelope a consumer decodes from this record (PoisonMessage if it cannot)."""
        return decode(self.value, list(self.headers), self.key)
