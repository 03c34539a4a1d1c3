"""Publishing one claimed batch: produce every row, wait for the broker's delivery reports.

The producer is idempotent with `acks=all`, so a retried send never duplicates or reorders
within a partition. A row counts as published only when its delivery report carries no error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from ..kafka_client import KEY_PARTITIONER, client_config
from .claim import OutboxRow


def producer_settings(bootstrap_servers: str, delivery_timeout_seconds: float, acks: str = "all") -> dict[str, Any]:
    """The relay's producer: idempotent with `acks=all`; `acks="1"` is the teaching mistake
    (leader-only confirmation, which idempotence does not allow)."""
    return {
        **client_config(bootstrap_servers),
        **KEY_PARTITIONER,
        "acks": acks,
        "enable.idempotence": acks == "all",
        "linger.ms": 2,
        "message.timeout.ms": int(delivery_timeout_seconds * 1000),
        "queue.buffering.max.messages": 500_000,
        "log_level": 3,
    }


@dataclass
class Deliveries:
    """What the broker said about one batch."""

    confirmed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    confirmed_at: dict[str, float] = field(default_factory=dict)
    """message id -> wall-clock time of its confirmation, for the latency metric."""


def publish(producer: Producer, rows: Sequence[OutboxRow], timeout: float) -> Deliveries:
    """Produce `rows` in order and wait (up to `timeout`) for every delivery report."""
    deliveries = Deliveries()

    def report(message_id: str) -> Any:
        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            if error is None:
                deliveries.confirmed.append(message_id)
                deliveries.confirmed_at[message_id] = time.time()
            else:
                deliveries.failed[message_id] = str(error)

        return on_delivery

    for row in rows:
        headers: list[tuple[str, str | bytes | None]] = [("eo-message-id", row.message_id.encode())]
        if row.trace_id:
            headers.append(("eo-trace-id", row.trace_id.encode()))
        while True:
            try:
                producer.produce(
                    row.topic,
                    key=row.key.encode(),
                    value=row.envelope.encode(),
                    headers=headers,
                    on_delivery=report(row.message_id),
                )
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
    remaining = producer.flush(timeout)
    if remaining:
        for row in rows:
            if row.message_id not in deliveries.failed and row.message_id not in deliveries.confirmed_at:
                deliveries.failed[row.message_id] = f"no delivery report within {timeout:.0f} s"
    return deliveries
