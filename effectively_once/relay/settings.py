"""The relay's settings, from the environment (the launcher and docker-compose set them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..process import ProcessSettings


class RelaySettings(ProcessSettings):
    """Every knob of the relay, with the default the platform runs with."""

    OUTBOX_DATABASE_URLS: dict[str, str] = Field(default_factory=dict)
    """Name -> URL of every service database whose outbox this relay publishes (JSON), each as
    a role granted what `effectively-once-migrate --relay-role` grants. The relay process
    refuses to start with none."""
    RELAY_CDC_SLOTS: dict[str, str] = Field(default_factory=dict)
    """Name -> replication slot, for each outbox database that Debezium publishes (RELAY=debezium;
    JSON): the relay publishes none of its rows, and marks them published once the slot has
    confirmed them (relay/cdc.py), keeping its days and purging as for any other."""
    KAFKA_BOOTSTRAP_SERVERS: str = Field(min_length=1)
    RELAY_BATCH_SIZE: int = Field(default=1000, ge=1, le=100_000)
    """Rows claimed, published and marked per transaction."""
    RELAY_KEYS_PER_BATCH: int = Field(default=500, ge=1)
    """Order keys locked per transaction (each key's rows go out in order, by one relay)."""
    RELAY_POLL_INTERVAL_SECONDS: float = Field(default=1.0, gt=0)
    """The fallback when no notification comes: idle costs one cheap query a second."""
    RELAY_DELIVERY_TIMEOUT_SECONDS: float = Field(default=10.0, gt=0)
    """How long the broker has to confirm a batch before its rows are retried."""
    RELAY_ACKS: Literal["all", "1"] = "all"
    """`all` (the default, with idempotence): a row is marked published once every in-sync replica
    holds it. `1` is a teaching mistake: the leader alone confirms, so a leader that dies before
    its followers copied the row takes a row the relay already marked published with it
    (docs/replicated-kafka.md)."""
    RELAY_RETRY_BASE_SECONDS: float = Field(default=0.5, gt=0)
    RELAY_RETRY_CAP_SECONDS: float = Field(default=30.0, gt=0)
    OUTBOX_RETENTION_HOURS: float = Field(default=24.0, gt=0)
    """Published rows are purged after this long."""
    RELAY_PURGE_INTERVAL_SECONDS: float = Field(default=60.0, gt=0)
    EO_PROCESS_NAME: str | None = "outbox-relay"
