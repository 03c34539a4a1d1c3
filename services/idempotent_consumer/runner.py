"""Wires one consumer process together from its settings: the one place that builds the runtime.

A service calls `run(consumer_name, topics, handlers)` from its entry point; everything else
(connection, producer for dead letters, metrics endpoint, fault points, SIGTERM) is set up here.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

import psycopg
from confluent_kafka import Producer
from prometheus_client import REGISTRY
from psycopg_pool import ConnectionPool
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.idempotent_consumer import logs, strategy_store
from services.idempotent_consumer.consumer_loop import ConsumerLoop, LoopConfig
from services.idempotent_consumer.control import serve_control
from services.idempotent_consumer.dead_letters import DeadLetterPublisher
from services.idempotent_consumer.faults import FaultPoints
from services.idempotent_consumer.marker_stats import MarkerTableCollector
from services.idempotent_consumer.outcomes import Strategy
from services.idempotent_consumer.processor import BulkHandler, Handler, MessageProcessor, ProcessorConfig
from services.idempotent_consumer.retention import MarkerPurger, purge_markers
from services.idempotent_consumer.telemetry import TELEMETRY_TOPIC, Telemetry, report_faults
from services.idempotent_consumer.telemetry import connect as connect_telemetry

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
    """Static group membership id; `{hostname}` in it is replaced (compose: one per container)."""
    EO_PROCESS_NAME: str | None = None
    """The process's name as its supervisor knows it (`inventory`); telemetry and restarts use it."""
    CONSUMER_MEMBERS: int = Field(default=1, ge=1, le=16)
    """Members of the consumer group this process runs, each on its own thread, connection and
    partitions. Above 1, a duplicate that reaches two partitions really races."""
    TELEMETRY_TOPIC: str = TELEMETRY_TOPIC
    """Where deliveries, faults and starts are told (empty: nowhere)."""
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
    telemetry: Telemetry | None = None,
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
        telemetry=telemetry,
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


class ConsumerProcess:
    """The members of one consumer process, as its control endpoint sees them."""

    def __init__(
        self,
        consumer_name: str,
        loops: list[ConsumerLoop],
        database_url: str,
        telemetry: Telemetry,
        configured_horizon: timedelta | None = None,
    ):
        self.consumer_name = consumer_name
        self.loops = loops
        self._database_url = database_url
        self._telemetry = telemetry
        self._configured_horizon = configured_horizon

    def strategy(self) -> str:
        return self.loops[0].processor.config.strategy.value

    def set_strategy(self, strategy: str) -> None:
        chosen = Strategy(strategy)
        with psycopg.connect(self._database_url, connect_timeout=5, autocommit=True) as connection:
            strategy_store.save(connection, self.consumer_name, chosen)
        for loop in self.loops:
            loop.processor.switch_strategy(chosen)
        self._telemetry.emit("strategy", consumer=self.consumer_name, strategy=chosen.value)

    def rewind(self, to_timestamp_ms: int | None) -> list[dict[str, Any]]:
        futures = [loop.request_rewind(to_timestamp_ms) for loop in self.loops]
        return [partition for future in futures for partition in future.result(timeout=30)]

    def hold(self, topic: str, seconds: float) -> list[dict[str, Any]]:
        if topic not in self.loops[0].config.topics:
            topics = ", ".join(self.loops[0].config.topics)
            raise ValueError(f"{self.consumer_name} does not consume {topic!r}; it consumes {topics}")
        futures = [loop.request_hold(topic, seconds) for loop in self.loops]
        held = [partition for future in futures for partition in future.result(timeout=30)]
        self._telemetry.emit("hold", consumer=self.consumer_name, topic=topic, seconds=seconds)
        return held

    def holds(self) -> dict[str, Any]:
        first = self.loops[0]
        return {"consumer": self.consumer_name, "topics": list(first.config.topics), "held": first.holds()}

    def horizon(self) -> dict[str, Any]:
        current = self.loops[0].processor.config.dedup_horizon
        configured = self._configured_horizon
        return {
            "consumer": self.consumer_name,
            "seconds": current.total_seconds() if current else None,
            "configured_seconds": configured.total_seconds() if configured else None,
        }

    def set_horizon(self, seconds: float | None, purge: bool) -> dict[str, Any]:
        """Shorten (or restore, with None) the dedup horizon; with `purge`, delete the markers
        older than it at once rather than at the purger's next round. Not stored: a restart
        brings back the configured horizon."""
        horizon = timedelta(seconds=seconds) if seconds is not None else self._configured_horizon
        for loop in self.loops:
            loop.processor.set_dedup_horizon(horizon)
        purged = 0
        if purge and horizon is not None:
            with psycopg.connect(self._database_url, connect_timeout=5, autocommit=True) as connection:
                purged = purge_markers(connection, horizon, consumer_name=self.consumer_name)
        self._telemetry.emit("horizon", consumer=self.consumer_name, seconds=seconds, purged=purged)
        return self.horizon() | {"purged": purged}


def stored_strategy(settings: ConsumerSettings, consumer_name: str) -> Strategy:
    """The strategy stored by a run-time switch, else the environment's."""
    try:
        with psycopg.connect(settings.DATABASE_URL, connect_timeout=5, autocommit=True) as connection:
            return strategy_store.load(connection, consumer_name) or settings.CONSUMER_STRATEGY
    except psycopg.Error as error:
        log.warning(
            "could not read the stored strategy (%s); starting with %s", error, settings.CONSUMER_STRATEGY.value
        )
        return settings.CONSUMER_STRATEGY


def run(
    consumer_name: str,
    topics: tuple[str, ...],
    handlers: Mapping[str, Handler],
    settings: ConsumerSettings | None = None,
    dead_letter_topic: str | None = None,
    ignored_types: Iterable[str] = (),
) -> None:
    """Run a consumer process (CONSUMER_MEMBERS group members) until SIGTERM or SIGINT."""
    settings = settings or ConsumerSettings()  # type: ignore[call-arg]
    logs.configure(getattr(logging, settings.LOG_LEVEL.upper(), logging.INFO))
    process_name = settings.EO_PROCESS_NAME or consumer_name
    telemetry = connect_telemetry(
        settings.KAFKA_BOOTSTRAP_SERVERS, process_name, settings.EO_INSTANCE_ID, settings.TELEMETRY_TOPIC
    )
    faults = FaultPoints()
    faults.on_fire = report_faults(telemetry)
    settings = settings.model_copy(update={"CONSUMER_STRATEGY": stored_strategy(settings, consumer_name)})
    loops = []
    for member in range(settings.CONSUMER_MEMBERS):
        instance_id = (
            settings.EO_INSTANCE_ID.replace("{hostname}", socket.gethostname()) if settings.EO_INSTANCE_ID else None
        )
        if instance_id and settings.CONSUMER_MEMBERS > 1:
            instance_id = f"{instance_id}-m{member}"
        member_settings = settings.model_copy(update={"EO_INSTANCE_ID": instance_id})
        loops.append(
            build(
                consumer_name,
                topics,
                handlers,
                member_settings,
                dead_letter_topic,
                faults=faults,
                ignored_types=ignored_types,
                telemetry=telemetry,
            )
        )
    process = ConsumerProcess(
        consumer_name, loops, settings.DATABASE_URL, telemetry, timedelta(days=settings.DEDUP_HORIZON_DAYS)
    )
    REGISTRY.register(MarkerTableCollector(settings.DATABASE_URL, consumer_name))
    if settings.CONTROL_PORT:
        serve_control(faults, settings.CONTROL_HOST, settings.CONTROL_PORT, runtime=process)

    def stop_all(*_: object) -> None:
        for loop in loops:
            loop.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop_all)
    telemetry.emit("started", consumer=consumer_name, strategy=settings.CONSUMER_STRATEGY.value, members=len(loops))
    threads = [
        threading.Thread(target=_run_member, args=(loop,), name=f"member-{n}") for n, loop in enumerate(loops[1:], 1)
    ]
    for thread in threads:
        thread.start()
    _run_member(loops[0])
    for thread in threads:
        thread.join()
    telemetry.flush(5)
    log.info(
        "stopped after acknowledging %d deliveries",
        sum(loop.handled for loop in loops),
        extra={"consumer": consumer_name},
    )


def _run_member(loop: ConsumerLoop) -> None:
    """One member; if it dies, the whole process goes, so its supervisor restarts it whole."""
    try:
        loop.run()
    except BaseException:
        log.exception("a group member failed; stopping the process", extra={"consumer": loop.name})
        logging.shutdown()
        os._exit(70)
