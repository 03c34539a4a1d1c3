"""Run the relay (`effectively-once-relay`, or `python -m effectively_once.relay`): one thread per
outbox database, one idempotent producer."""

from __future__ import annotations

import logging
import threading
from functools import partial

import psycopg
from confluent_kafka import Producer

from ..faults import FaultPoints
from ..process import load, serve, start, stop_on_signals
from ..telemetry import Telemetry
from .publish import producer_settings
from .settings import RelaySettings
from .worker import RELAY_POINTS, DatabaseRelay

log = logging.getLogger("effectively_once.relay")


def build(settings: RelaySettings, faults: FaultPoints, telemetry: Telemetry | None = None) -> list[DatabaseRelay]:
    """A relay per configured database, sharing one idempotent producer."""
    if settings.RELAY_ACKS != "all":
        log.warning(
            "TEACHING SETTING RELAY_ACKS=%s IS ACTIVE: the leader alone confirms a row, and a leader that "
            "dies before its followers copied it loses rows already marked published",
            settings.RELAY_ACKS,
        )
    producer = Producer(
        producer_settings(
            settings.KAFKA_BOOTSTRAP_SERVERS, settings.RELAY_DELIVERY_TIMEOUT_SECONDS, settings.RELAY_ACKS
        )
    )
    return [
        DatabaseRelay(
            name,
            partial(psycopg.connect, url, connect_timeout=5),
            producer,
            settings,
            faults,
            telemetry,
            cdc_slot=settings.RELAY_CDC_SLOTS.get(name),
        )
        for name, url in sorted(settings.OUTBOX_DATABASE_URLS.items())
    ]


def main(settings: RelaySettings | None = None) -> None:
    """Run the relay until SIGTERM or SIGINT, with `settings` (by default: from the environment)."""
    settings = settings or load(RelaySettings)
    if not settings.OUTBOX_DATABASE_URLS:
        raise SystemExit("OUTBOX_DATABASE_URLS is empty: name at least one outbox database (JSON: name -> URL)")
    started = start(settings, "outbox-relay")
    publishing = set(settings.OUTBOX_DATABASE_URLS) - set(settings.RELAY_CDC_SLOTS)
    serve(started, settings, points=RELAY_POINTS if publishing else ())  # under CDC it passes none
    relays = build(settings, started.faults, started.telemetry)
    threads = [threading.Thread(target=relay.run, name=f"relay-{relay.name}") for relay in relays]

    def stop_all() -> None:
        for relay in relays:
            relay.stop()

    stop_on_signals(stop_all)
    for thread in threads:
        thread.start()
    log.info("relaying the outbox of %s", ", ".join(relay.name for relay in relays))
    started.telemetry.emit("started")
    for thread in threads:
        thread.join()
    started.telemetry.flush(5)
    log.info("stopped after publishing %d rows", sum(relay.published for relay in relays))
