"""Saga events written by the executors, in the transaction that records a remote call's result."""

from __future__ import annotations

from typing import Any

from effectively_once.consumer.processor import Connection
from effectively_once.envelope import Envelope
from effectively_once.outbox import add_to_outbox
from services import saga_contract as contract


def record_event(connection: Connection, event_type: str, order_id: str, payload: dict[str, Any]) -> None:
    """Write a saga event to the outbox, to the topic the saga contract gives its type."""
    add_to_outbox(connection, Envelope.new(event_type, order_id, payload), contract.TOPIC_OF[event_type])
