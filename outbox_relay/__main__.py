"""Run the relay: `python -m outbox_relay`. One thread per service database, one producer."""

from __future__ import annotations

import logging
import signal
import threading
from functools import partial

import psycopg
from confluent_kafka import Producer

from outbox_relay.publish import producer_settings
from outbox_relay.settings import RelaySettings
from outbox_relay.worker import RELAY_POINTS, DatabaseRelay
from services.idempotent_consumer import logs
from services.idempotent_consumer.control import serve_control
from services.idempotent_consumer.faults import FaultPoints
from services.idempotent_consumer.telemetry import Telemetry, report_faults
from services.idempotent_consumer.telemetry import connect as connect_telemetry

log = logging.getLogger("outbox_relay")


def build(settings: RelaySettings, faults: FaultPoints, telemetry: Telemetry | None = None) -> list[DatabaseRelay]:
    """A relay per configured database, sharing one idempotent producer."""
    producer = Producer(producer_settings(settings.KAFKA_BOOTSTRAP_SERVERS, settings.RELAY_DELIVERY_TIMEOUT_SECONDS))
    return [
        DatabaseRelay(name, partial(psycopg.connect, url, connect_timeout=5), producer, settings, faults, telemetry)
        for name, url in sorted(settings.OUTBOX_DATABASE_URLS.items())
    ]


def main() -> None:
    settings = RelaySettings()  # type: ignore[call-arg]
    logs.configure(getattr(logging, settings.LOG_LEVEL.upper(), logging.INFO))
    if not settings.OUTBOX_DATABASE_URLS:
        raise SystemExit("OUTBOX_DATABASE_URLS is empty: name at least one service database (JSON)")
    telemetry = connect_telemetry(
        settings.KAFKA_BOOTSTRAP_SERVERS, settings.EO_PROCESS_NAME, None, settings.TELEMETRY_TOPIC
    )
    faults = FaultPoints()
    faults.on_fire = report_faults(telemetry)
    if settings.EO_FAULTS:
        faults.arm_from_spec(settings.EO_FAULTS)
    if settings.CONTROL_PORT:
        serve_control(faults, settings.CONTROL_HOST, settings.CONTROL_PORT, points=RELAY_POINTS)
    relays = build(settings, faults, telemetry)
    threads = [threading.Thread(target=relay.run, name=f"relay-{relay.name}") for relay in relays]

    def stop_all(*_: object) -> None:
        for relay in relays:
            relay.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop_all)
    for thread in threads:
        thread.start()
    log.info("relaying the outbox of %s", ", ".join(relay.name for relay in relays))
    telemetry.emit("started")
    for thread in threads:
        thread.join()
    telemetry.flush(5)
    log.info("stopped after publishing %d rows", sum(relay.published for relay in relays))


if __name__ == "__main__":
    main()
