"""The relay's settings, from the environment (the launcher and docker-compose set them)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.idempotent_consumer.telemetry import TELEMETRY_TOPIC


class RelaySettings(BaseSettings):
    """Every knob of the relay, with the default the platform runs with."""

    model_config = SettingsConfigDict(extra="ignore")

    OUTBOX_DATABASE_URLS: dict[str, str] = Field(default_factory=dict)
    """Name -> URL of every service database whose outbox this relay publishes (JSON)."""
    KAFKA_BOOTSTRAP_SERVERS: str
    RELAY_BATCH_SIZE: int = 1000
    """Rows claimed, published and marked per transaction."""
    RELAY_KEYS_PER_BATCH: int = 500
    """Order keys locked per transaction (each key's rows go out in order, by one relay)."""
    RELAY_POLL_INTERVAL_SECONDS: float = 1.0
    """The fallback when no notification comes: idle costs one cheap query a second."""
    RELAY_DELIVERY_TIMEOUT_SECONDS: float = 10.0
    """How long the broker has to confirm a batch before its rows are retried."""
    RELAY_RETRY_BASE_SECONDS: float = 0.5
    RELAY_RETRY_CAP_SECONDS: float = 30.0
    OUTBOX_RETENTION_HOURS: float = 24.0
    """Published rows are purged after this long."""
    RELAY_PURGE_INTERVAL_SECONDS: float = 60.0
    CONTROL_PORT: int | None = None
    CONTROL_HOST: str = "127.0.0.1"
    EO_FAULTS: str = ""
    EO_PROCESS_NAME: str = "outbox-relay"
    TELEMETRY_TOPIC: str = TELEMETRY_TOPIC
    """Where each confirmed publish, fault and start is told (empty: nowhere)."""
    LOG_LEVEL: str = "INFO"
