"""The outbox writer: a service adds its events inside its own transaction.

Nothing is published here. If the transaction rolls back, the event never existed; if it
commits, the relay (relay/) publishes it with the same message id, however many times it
takes.
"""

from __future__ import annotations

import json

from psycopg.pq import TransactionStatus

from .consumer.processor import Connection
from .envelope import Envelope

INSERT = """
INSERT INTO outbox (message_id, aggregate_type, aggregate_key, event_type, event_version, topic,
                    payload, headers, created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


def add_to_outbox(transaction: Connection, event: Envelope, topic: str, aggregate_type: str = "order") -> None:
    """Add `event` to the outbox within the caller's open transaction."""
    if transaction.autocommit and transaction.info.transaction_status == TransactionStatus.IDLE:
        raise RuntimeError("add_to_outbox needs an open transaction: the event must commit with its change")
    transaction.execute(
        INSERT,
        (
            event.message_id,
            aggregate_type,
            event.key,
            event.type,
            event.version,
            topic,
            json.dumps(dict(event.payload)),
            json.dumps({"trace_id": event.trace_id} if event.trace_id else {}),
            event.occurred_at,
        ),
    )
