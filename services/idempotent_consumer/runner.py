"""Wires one consumer process together from its settings: the one place that builds the runtime.

A service calls `run(consumer_name, topics, handlers)` from its entry point; everything else
(connection, producer for dead letters, metrics endpoint, fault points, SIGTERM) is set up here.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta

import psycopg
from confluent_kafka import Producer
from psycopg_pool import ConnectionPool
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.idempotent_consumer import logs
from services.idempotent_consumer.consumer_loop import ConsumerLoop, LoopConfig
from services.idempotent_consumer.control import serve_control
from services.idempotent_consumer.dead_letters import DeadLetterPublisher
from services.idempotent_consumer.faults import FaultPoints
from services.idempotent_consumer.outcomes import Strategy
from services.idempotent_consumer.processor import BulkHandler, Handler, MessageProcessor, ProcessorConfig
from services.idempotent_consumer.retention import MarkerPurger

log = logging.getLogger(__name__)


class ConsumerSettings(BaseSettings):
    """What a consumer process reads from its environment."""

    model_config = SettingsConfigDict(extra="ignore")

    DATABASE_URL: str
    KAFKA_BOOTSTRAP_SERVERS: str
    CONSUMER_STRATEGY: Strategy = Strategy.CORRECT
    CONSUMER_BATCH_SIZE: int = 1
    CONSUMER_ISOLATION_LEVEL: str = "READ COMMITTED"
    DEDUP_HORIZON_DAYS: float = 30
    """Markers are kept this long; older messages are dead-lettered instead of applied."""
    MARKER_PURGE_INTERVAL_SECONDS: float = 300
    """How often expired markers are purged (0: never, e.g. when an operator job does it)."""
    CONTROL_PORT: int | None = None
    """Serves /metrics and /faults (see control.py); none when unset."""
    CONTROL_HOST: str = "127.0.0.1"
    EO_FAULTS: str = ""
    """Fault points armed at start, e.g. `after_commit_before_ack=crash`."""
    EO_INSTANCE_ID: str | None = None
    LOG_LEVEL: str = "INFO"


def build(
    consumer_name: str,
    topics: tuple[str, ...],
    handlers: Mapping[str, Handler],
    settings: ConsumerSettings,
    dead_letter_topic: str | None = None,
    faults: FaultPoints | None = None,
    bulk_handlers: Mapping[str, BulkHandler] | None = None,
    kafka: Mapping[str, object] | None = None,
    ignored_types: Iterable[str] = (),
) -> ConsumerLoop:
    """A ready consumer loop; nothing connects until it runs."""
    faults = faults or FaultPoints()
    if settings.EO_FAULTS:
        faults.arm_from_spec(settings.EO_FAULTS)
    # One pooled connection per consumer: the pool replaces a broken one, with backoff.
    pool = ConnectionPool(
        settings.DATABASE_URL,
        min_size=1,
        max_size=1,
        timeout=5,
        open=False,
        kwargs={"connect_timeout": 5},
        name=consumer_name,
    )
    pool.open(wait=False)
    processor = MessageProcessor(
        ProcessorConfig(
            consumer_name=consumer_name,
            strategy=settings.CONSUMER_STRATEGY,
            isolation_level=settings.CONSUMER_ISOLATION_LEVEL,
            dedup_horizon=timedelta(days=settings.DEDUP_HORIZON_DAYS),
            ignored_types=frozenset(ignored_types),
        ),
        connect=pool.getconn,
        release=pool.putconn,
        handlers=handlers,
        faults=faults,
        bulk_handlers=bulk_handlers,
    )
    producer = Producer(
        {
            "bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS,
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    dead_letters = DeadLetterPublisher(producer, consumer_name, dead_letter_topic or f"dlq.{consumer_name}")
    loop_config = LoopConfig(
        bootstrap_servers=settings.KAFKA_BOOTSTRAP_SERVERS,
        topics=topics,
        batch_size=settings.CONSUMER_BATCH_SIZE,
        instance_id=settings.EO_INSTANCE_ID,
        kafka=dict(kafka or {}),
    )
    closers: list[Callable[[], None]] = [pool.close]
    if settings.MARKER_PURGE_INTERVAL_SECONDS > 0:
        purger = MarkerPurger(
            lambda: psycopg.connect(settings.DATABASE_URL, connect_timeout=5),
            consumer_name,
            horizon=timedelta(days=settings.DEDUP_HORIZON_DAYS),
            interval=timedelta(seconds=settings.MARKER_PURGE_INTERVAL_SECONDS),
        )
        purger.start()
        closers.insert(0, purger.stop)

    def close_all() -> None:
        for close in closers:
            close()

    return ConsumerLoop(loop_config, processor, dead_letters, on_close=close_all)


def run(
    consumer_name: str,
    topics: tuple[str, ...],
    handlers: Mapping[str, Handler],
    settings: ConsumerSettings | None = None,
    dead_letter_topic: str | None = None,
    ignored_types: Iterable[str] = (),
) -> None:
    """Run a consumer process until SIGTERM or SIGINT."""
    settings = settings or ConsumerSettings()  # type: ignore[call-arg]
    logs.configure(getattr(logging, settings.LOG_LEVEL.upper(), logging.INFO))
    faults = FaultPoints()
    if settings.CONTROL_PORT:
        serve_control(faults, settings.CONTROL_HOST, settings.CONTROL_PORT)
    loop = build(
        consumer_name, topics, handlers, settings, dead_letter_topic, faults=faults, ignored_types=ignored_types
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: loop.stop())
    loop.run()
    log.info("stopped after acknowledging %d deliveries", loop.handled, extra={"consumer": consumer_name})
