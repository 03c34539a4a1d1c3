"""The loop behind the platform's executors: take one pending row, do its remote call, record
the result, again; sleep on LISTEN (or a short poll) when there is none.

A remote call cannot share a transaction with the database. So the work is a row committed by
the consumer (with its marker), the call carries an idempotency key derived from that row, and
the result is recorded, with its event, in the transaction that holds the row's lock. A crash
anywhere leaves the row pending, and the next take makes the same call with the same key.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.idempotent_consumer import logs
from services.idempotent_consumer.control import serve_control
from services.idempotent_consumer.faults import FaultPoints
from services.idempotent_consumer.telemetry import TELEMETRY_TOPIC, Telemetry, report_faults
from services.idempotent_consumer.telemetry import connect as connect_telemetry

log = logging.getLogger(__name__)

Connection = psycopg.Connection[Any]
TakeOne = Callable[[Connection, FaultPoints, Telemetry], bool]
"""Handle one pending row in its own transaction (telling each remote call); False when there was
none due."""


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    DATABASE_URL: str
    CONTROL_PORT: int | None = None
    CONTROL_HOST: str = "127.0.0.1"
    EO_FAULTS: str = ""
    EO_PROCESS_NAME: str | None = None
    KAFKA_BOOTSTRAP_SERVERS: str = ""
    TELEMETRY_TOPIC: str = TELEMETRY_TOPIC
    """Where this executor's faults and starts are told (empty, or no Kafka: nowhere)."""
    LOG_LEVEL: str = "INFO"
    POLL_INTERVAL_SECONDS: float = 0.5


def run_worker(name: str, take_one: TakeOne, channel: str, points: tuple[str, ...]) -> None:
    """Run an executor process until SIGTERM."""
    settings = WorkerSettings()  # type: ignore[call-arg]
    logs.configure(getattr(logging, settings.LOG_LEVEL.upper(), logging.INFO))
    telemetry = connect_telemetry(
        settings.KAFKA_BOOTSTRAP_SERVERS,
        settings.EO_PROCESS_NAME or name,
        None,
        settings.TELEMETRY_TOPIC if settings.KAFKA_BOOTSTRAP_SERVERS else "",
    )
    faults = FaultPoints()
    faults.on_fire = report_faults(telemetry)
    if settings.EO_FAULTS:
        faults.arm_from_spec(settings.EO_FAULTS)
    if settings.CONTROL_PORT:
        serve_control(faults, settings.CONTROL_HOST, settings.CONTROL_PORT, points=points)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    log.info("%s: working", name)
    telemetry.emit("started")
    failures = 0
    while not stopping.is_set():
        try:
            with (
                psycopg.connect(settings.DATABASE_URL, autocommit=True, connect_timeout=5) as work,
                psycopg.connect(settings.DATABASE_URL, autocommit=True, connect_timeout=5) as listen,
            ):
                listen.execute(f"LISTEN {channel}")
                failures = 0
                while not stopping.is_set():
                    while take_one(work, faults, telemetry) and not stopping.is_set():
                        pass
                    for _ in listen.notifies(timeout=settings.POLL_INTERVAL_SECONDS, stop_after=1):
                        pass
        except psycopg.OperationalError as error:
            failures += 1
            pause = min(30.0, 0.2 * 2**failures)
            log.warning("%s: database unavailable (%s); retrying in %.1f s", name, str(error).strip()[:200], pause)
            stopping.wait(pause)
    log.info("%s: stopped", name)
