"""The relay as this platform runs it: the library's relay engine on every service's outbox.

Which databases it publishes and, under RELAY=debezium, which replication slot stands for each
come from the topology (services/topology.py); the launcher passes them to the process as the
engine's settings, and a relay started by hand with none in its environment works them out the
same way. docker-compose names them itself (its hosts differ).
"""

from __future__ import annotations

import json

from effectively_once.process import load
from effectively_once.relay.run import main as run_engine
from effectively_once.relay.settings import RelaySettings
from services.settings import Settings
from services.topology import DATABASES, ServiceDatabase, cdc_slot


def outbox_databases() -> list[ServiceDatabase]:
    """The databases with an outbox: what the relay publishes, and Debezium's one connector, slot
    and replication role each."""
    return [database for database in DATABASES if database.runs_consumer_runtime]


def relay_environment(settings: Settings) -> dict[str, str]:
    """The engine's settings for this platform: OUTBOX_DATABASE_URLS (each database through the
    relay's own role) and, under RELAY=debezium, RELAY_CDC_SLOTS (Debezium publishes; the relay
    marks what the slots confirmed, and purges)."""
    environment = {
        "OUTBOX_DATABASE_URLS": json.dumps({db.name: settings.relay_database_url(db) for db in outbox_databases()})
    }
    if settings.RELAY == "debezium":
        environment["RELAY_CDC_SLOTS"] = json.dumps({db.name: cdc_slot(db.name) for db in outbox_databases()})
    return environment


def relay_settings() -> RelaySettings:
    """The engine's settings from the environment; the topology's databases where it names none."""
    settings = load(RelaySettings)
    if settings.OUTBOX_DATABASE_URLS:
        return settings
    platform = Settings()
    derived = {name: json.loads(value) for name, value in relay_environment(platform).items()}
    return settings.model_copy(update=derived)


def run() -> None:
    """Run the relay until SIGTERM or SIGINT."""
    run_engine(relay_settings())
