"""Wires one consumer process together from its settings: the one place that builds the runtime.

A service calls `run(consumer_name, topics, handlers)` from its entry point; everything else
(connection pool, producer for dead letters, marker purger, control endpoint, fault points,
SIGTERM) is set up here, with process.py's start-up shared by every runtime process. A workshop
process plugs the lab in (`run(paths=lab.PATHS, attach=lab.attach)`); this package imports
nothing of it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Protocol

import psycopg
from confluent_kafka import Consumer, Message, Producer
from prometheus_client import REGISTRY
from psycopg_pool import ConnectionPool
from pydantic import Field, model_validator

from ..connection_pools import RECONNECT_TIMEOUT
from ..dead_letters import DeadLetterPublisher
from ..faults import FaultPoints
from ..kafka_client import client_config
from ..marker_stats import MarkerTableCollector
from ..outcomes import Strategy
from ..process import ProcessSettings, load, serve, start, stop_on_signals
from ..redelivery_windows import read_windows
from ..retention import MarkerPurger
from ..safe_horizon import Verdict, Window, verdict
from ..telemetry import Telemetry
from .loop import ConsumerLoop, LoopConfig
from .processor import PATHS, BulkHandler, Handler, MessageProcessor, Path, ProcessorConfig, path_for
from .share_loop import ShareGroupLoop, ShareLoopConfig, share_group_id

log = logging.getLogger(__name__)


class ConsumerSettings(ProcessSettings):
    """What a consumer process reads from its environment, with the default it runs with."""

    DATABASE_URL: str = Field(min_length=1)
    """The service's database (its own role), holding the runtime's tables and its own."""
    KAFKA_BOOTSTRAP_SERVERS: str = Field(min_length=1)
    CONSUMER_STRATEGY: Strategy = Strategy.CORRECT
    """Only `correct` unless the process was given the teaching paths (run(paths=...))."""
    CONSUMER_BATCH_SIZE: int = Field(default=1, ge=1, le=10_000)
    """Messages per database transaction (batched mode above 1)."""
    CONSUMER_ISOLATION_LEVEL: Literal["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"] = "READ COMMITTED"
    DEDUP_HORIZON_DAYS: float = Field(default=30, gt=0, le=3650)
    """Markers are kept this long; older messages are dead-lettered instead of applied."""
    MARKER_PURGE_INTERVAL_SECONDS: float = Field(default=300, ge=0)
    """How often expired markers are purged (0: never, e.g. when `effectively-once-purge` runs as a job)."""
    EO_INSTANCE_ID: str | None = None
    """Static group membership id; `{hostname}` in it is replaced (compose: one per container)."""
    CONSUMER_NAME: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
    """Overrides the consumer name the code gives (its markers, metrics and dead-letter topic)."""
    CONSUMER_TOPICS: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*$")
    """Overrides the topics the code gives, comma-separated."""
    CONSUMER_GROUP: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
    """The Kafka consumer group; unset: the consumer name."""
    DEAD_LETTER_TOPIC: str | None = Field(default=None, min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$")
    """Where dead letters go; unset: `dlq.{consumer name}`."""
    CONSUMER_WORKERS: int = Field(default=1, ge=1, le=64)
    """Workers inside each member, each on its own database connection: one key's messages in
    order on one worker, different keys in parallel; a partition's offset never passes a message
    not done (effectively_once/consumer/lanes.py)."""
    CONSUMER_ASSIGNMENT: Literal["cooperative-sticky", "range,roundrobin"] = "cooperative-sticky"
    """How a group's partitions are shared: cooperative-sticky moves only the partitions that change
    owner; "range,roundrobin" (eager) lets the group take members of a client without the
    cooperative protocol (the TypeScript inventory consumer on the classic protocol)."""
    CONSUMER_GROUP_PROTOCOL: Literal["classic", "consumer"] = "consumer"
    """Kafka's group protocol: consumer (KIP-848, brokers 4.0 and later: the broker assigns
    partitions and a rebalance stops no member), or classic (the clients assign). Both may share a
    group during a swap."""
    CONSUMER_STALL_SECONDS: float = Field(default=60, gt=0, le=3600)
    """A partition with messages waiting and none consumed for this long is stalled: reported
    (eo_consumer_partition_stalled), sought to its committed offset, then rejoined."""
    CONSUMER_MEMBERS: int = Field(default=1, ge=1, le=16)
    """Members of the consumer group this process runs, each on its own thread, connection and
    partitions. Above 1, a duplicate that reaches two partitions really races."""
    CONSUMER_SHARE_GROUP: bool = False
    """Consume as a share group (KIP-932, brokers 4.2 and later; consumer/share_loop.py): records,
    not partitions, are handed out, any number of members share the partitions, and each record is
    acknowledged on its own. No per-key order; one worker per member; no rewind."""
    CONSUMER_SHARE_DELIVERY_LIMIT: int = Field(default=10, ge=2, le=10)
    """With CONSUMER_SHARE_GROUP, the brokers' group.share.delivery.count.limit (10 on the
    launcher's and compose's): a record the database could not take on its last delivery is
    dead-lettered and rejected, not released for the broker to archive."""
    CONSUMER_SHARE_MEMBERS: int = Field(default=4, ge=1, le=16)
    """With CONSUMER_SHARE_GROUP, the share-group members this process runs (in place of
    CONSUMER_MEMBERS): more than a topic's partitions is what a share group is for."""

    @model_validator(mode="after")
    def _one_worker_per_share_member(self) -> ConsumerSettings:
        if self.CONSUMER_SHARE_GROUP and self.CONSUMER_WORKERS > 1:
            raise ValueError(
                "CONSUMER_SHARE_GROUP takes one worker per member (a share group keeps no order for"
                " lanes to keep): run more members (CONSUMER_MEMBERS) instead of CONSUMER_WORKERS"
            )
        return self


Member = ConsumerLoop | ShareGroupLoop
"""A member of a consumer group or of a share group (CONSUMER_SHARE_GROUP)."""


class MemberHooks(Protocol):
    """What a plug-in gives one member's loop (ConsumerLoop's hooks of the same names)."""

    def between_polls(self, consumer: Consumer) -> None:
        """Serve what was asked of the member since its last poll; called before each poll."""
        ...

    def before_transaction(self, consumer: Consumer, messages: Sequence[Message]) -> None:
        """Called with a transaction's messages before it begins."""
        ...

    def held_on_purpose(self) -> Collection[str]:
        """The topics the member holds back on purpose, which the stall watch must leave alone."""
        ...


class Attachment(Protocol):
    """What a workshop process plugs into a consumer process (effectively_once.lab.attach)."""

    def starting_strategy(self, configured: Strategy) -> Strategy:
        """The strategy the process starts with: one stored by an earlier switch, else `configured`."""
        ...

    def member(self) -> MemberHooks:
        """The hooks of one more member, before its loop is built."""
        ...

    def runtime(self, members: Sequence[tuple[Member, MemberHooks]]) -> object:
        """What the control endpoint serves for the process's members (its `runtime`)."""
        ...


Attach = Callable[[str, "ConsumerSettings", Telemetry, Mapping[Strategy, Callable[[], Path]]], Attachment]
"""Makes a process's attachment from its consumer name, settings, telemetry and the paths it was given."""


@dataclass(frozen=True)
class _MemberParts:
    """What either kind of member is made of."""

    processor: MessageProcessor
    workers: list[MessageProcessor]
    dead_letters: DeadLetterPublisher
    close: Callable[[], None]


def _member_parts(
    consumer_name: str,
    topics: tuple[str, ...],
    handlers: Mapping[str, Handler],
    settings: ConsumerSettings,
    dead_letter_topic: str | None,
    faults: FaultPoints | None,
    bulk_handlers: Mapping[str, BulkHandler] | None,
    ignored_types: Iterable[str],
    telemetry: Telemetry | None,
    paths: Mapping[Strategy, Callable[[], Path]],
    windows: Sequence[Window],
    purge: bool,
) -> _MemberParts:
    faults = faults or FaultPoints()
    if settings.EO_FAULTS:
        faults.arm_from_spec(settings.EO_FAULTS)
    pools: list[ConnectionPool] = []

    def new_processor() -> MessageProcessor:
        # One pooled connection per worker: the pool replaces a broken one, with backoff.
        pool = ConnectionPool(
            settings.DATABASE_URL,
            reconnect_timeout=RECONNECT_TIMEOUT,
            min_size=1,
            max_size=1,
            timeout=5,
            open=False,
            kwargs={"connect_timeout": 5, "application_name": (settings.EO_PROCESS_NAME or consumer_name)[:63]},
            name=consumer_name,
        )
        pool.open(wait=False)
        pools.append(pool)
        return MessageProcessor(
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
            path=path_for(settings.CONSUMER_STRATEGY, paths),
        )

    processor = new_processor()
    workers = [new_processor() for _ in range(settings.CONSUMER_WORKERS - 1)]
    producer = Producer(
        {
            **client_config(settings.KAFKA_BOOTSTRAP_SERVERS),
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    dead_letters = DeadLetterPublisher(producer, consumer_name, dead_letter_topic or f"dlq.{consumer_name}")
    closers: list[Callable[[], None]] = [pool.close for pool in pools]
    purger = marker_purger(settings, consumer_name, topics, dead_letters.topic, windows) if purge else None
    if purger is not None:
        purger.start()
        closers.insert(0, purger.stop)

    def close_all() -> None:
        for close in closers:
            close()

    return _MemberParts(processor, workers, dead_letters, close_all)


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
    paths: Mapping[Strategy, Callable[[], Path]] = PATHS,
    between_polls: Callable[[Consumer], None] | None = None,
    windows: Sequence[Window] = (),
    purge: bool = True,
    held_on_purpose: Callable[[], Collection[str]] = frozenset,
    before_transaction: Callable[[Consumer, Sequence[Message]], None] | None = None,
) -> ConsumerLoop:
    """A ready consumer-group member. Its connection pools start connecting in the background; the
    Kafka client joins the group once the loop runs.

    `windows`: how long a message may come back through ways Kafka cannot show (a remote side's
    idempotency-key lifetime); the marker purge weighs them with what Kafka shows. `purge=False`
    leaves the marker purge to the caller (`run` starts one per process, not one per member).
    `held_on_purpose`: the topics `between_polls` holds back (the lab controls' hold), which the
    stall watch must not take for stalled; `before_transaction`: the loop hook of that name."""
    parts = _member_parts(
        consumer_name,
        topics,
        handlers,
        settings,
        dead_letter_topic,
        faults,
        bulk_handlers,
        ignored_types,
        telemetry,
        paths,
        windows,
        purge,
    )
    loop_config = LoopConfig(
        bootstrap_servers=settings.KAFKA_BOOTSTRAP_SERVERS,
        topics=topics,
        batch_size=settings.CONSUMER_BATCH_SIZE,
        instance_id=settings.EO_INSTANCE_ID,
        group_id=settings.CONSUMER_GROUP,
        stall_after_seconds=settings.CONSUMER_STALL_SECONDS,
        assignment=settings.CONSUMER_ASSIGNMENT,
        group_protocol=settings.CONSUMER_GROUP_PROTOCOL,
        kafka=dict(kafka or {}),
    )
    return ConsumerLoop(
        loop_config,
        parts.processor,
        parts.dead_letters,
        on_close=parts.close,
        between_polls=between_polls,
        workers=parts.workers,
        held_on_purpose=held_on_purpose,
        before_transaction=before_transaction,
    )


def build_share_member(
    consumer_name: str,
    topics: tuple[str, ...],
    handlers: Mapping[str, Handler],
    settings: ConsumerSettings,
    dead_letter_topic: str | None = None,
    faults: FaultPoints | None = None,
    kafka: Mapping[str, object] | None = None,
    ignored_types: Iterable[str] = (),
    telemetry: Telemetry | None = None,
    paths: Mapping[Strategy, Callable[[], Path]] = PATHS,
    windows: Sequence[Window] = (),
    purge: bool = True,
) -> ShareGroupLoop:
    """A ready share-group member (CONSUMER_SHARE_GROUP; consumer/share_loop.py), built as `build`
    builds a consumer-group member, with none of its hooks: a share group has no partitions of
    its own to hold back or rewind."""
    parts = _member_parts(
        consumer_name,
        topics,
        handlers,
        settings,
        dead_letter_topic,
        faults,
        None,
        ignored_types,
        telemetry,
        paths,
        windows,
        purge,
    )
    share_config = ShareLoopConfig(
        bootstrap_servers=settings.KAFKA_BOOTSTRAP_SERVERS,
        topics=topics,
        group_id=settings.CONSUMER_GROUP or share_group_id(consumer_name),
        batch_size=settings.CONSUMER_BATCH_SIZE,
        delivery_limit=settings.CONSUMER_SHARE_DELIVERY_LIMIT,
        kafka=dict(kafka or {}),
    )
    return ShareGroupLoop(share_config, parts.processor, parts.dead_letters, on_close=parts.close)


def marker_purger(
    settings: ConsumerSettings,
    consumer_name: str,
    topics: tuple[str, ...],
    dead_letter_topic: str,
    windows: Sequence[Window] = (),
) -> MarkerPurger | None:
    """The consumer's marker purger, not started (None when MARKER_PURGE_INTERVAL_SECONDS is 0).
    Each round first weighs the horizon against what Kafka shows could come back, and `windows`."""
    if settings.MARKER_PURGE_INTERVAL_SECONDS <= 0:
        return None

    def weigh(horizon: timedelta) -> Verdict:
        group = settings.CONSUMER_GROUP or consumer_name
        seen = read_windows(settings.KAFKA_BOOTSTRAP_SERVERS, group, topics, dead_letter_topic)
        return verdict(horizon, [*seen, *windows])

    return MarkerPurger(
        lambda: psycopg.connect(settings.DATABASE_URL, connect_timeout=5),
        consumer_name,
        horizon=timedelta(days=settings.DEDUP_HORIZON_DAYS),
        interval=timedelta(seconds=settings.MARKER_PURGE_INTERVAL_SECONDS),
        check=weigh,
    )


def run(
    consumer_name: str,
    topics: tuple[str, ...],
    handlers: Mapping[str, Handler],
    settings: ConsumerSettings | None = None,
    dead_letter_topic: str | None = None,
    ignored_types: Iterable[str] = (),
    paths: Mapping[Strategy, Callable[[], Path]] = PATHS,
    attach: Attach | None = None,
    windows: Sequence[Window] = (),
) -> None:
    """Run a consumer process (CONSUMER_MEMBERS group members) until SIGTERM or SIGINT.

    CONSUMER_NAME, CONSUMER_TOPICS and DEAD_LETTER_TOPIC override the arguments of the same
    meaning (docs/consumer-process-contract.md: how any consumer process is started).

    `paths` adds strategies beyond the correct one (effectively_once.lab.PATHS); `attach` plugs
    a workshop's controls into each member and the control endpoint (effectively_once.lab.attach:
    rewind, hold, horizon, strategy). Neither is for production. `windows` are redelivery windows
    Kafka cannot show (build() says more)."""
    settings = settings or load(ConsumerSettings)
    consumer_name = settings.CONSUMER_NAME or consumer_name
    topics = tuple(settings.CONSUMER_TOPICS.split(",")) if settings.CONSUMER_TOPICS else topics
    dead_letter_topic = settings.DEAD_LETTER_TOPIC or dead_letter_topic
    started = start(settings, consumer_name, settings.EO_INSTANCE_ID)
    telemetry, faults = started.telemetry, started.faults
    attachment = attach(consumer_name, settings, telemetry, paths) if attach is not None else None
    if attachment is not None:
        strategy = attachment.starting_strategy(settings.CONSUMER_STRATEGY)
        settings = settings.model_copy(update={"CONSUMER_STRATEGY": strategy})
    if settings.CONSUMER_STRATEGY not in paths:
        raise SystemExit(
            f"CONSUMER_STRATEGY={settings.CONSUMER_STRATEGY.value} is a teaching strategy this process was not given"
        )
    loops: list[Member] = []
    members: list[tuple[Member, MemberHooks]] = []  # the attachment's view of them
    count = settings.CONSUMER_SHARE_MEMBERS if settings.CONSUMER_SHARE_GROUP else settings.CONSUMER_MEMBERS
    for member in range(count):
        instance_id = (
            settings.EO_INSTANCE_ID.replace("{hostname}", socket.gethostname()) if settings.EO_INSTANCE_ID else None
        )
        if instance_id and count > 1:
            instance_id = f"{instance_id}-m{member}"
        member_settings = settings.model_copy(update={"EO_INSTANCE_ID": instance_id})
        hooks = attachment.member() if attachment is not None else None
        loop: Member
        if settings.CONSUMER_SHARE_GROUP:
            loop = build_share_member(
                consumer_name,
                topics,
                handlers,
                member_settings,
                dead_letter_topic,
                faults=faults,
                ignored_types=ignored_types,
                telemetry=telemetry,
                paths=paths,
                purge=False,
            )
        else:
            loop = build(
                consumer_name,
                topics,
                handlers,
                member_settings,
                dead_letter_topic,
                faults=faults,
                ignored_types=ignored_types,
                telemetry=telemetry,
                paths=paths,
                between_polls=hooks.between_polls if hooks is not None else None,
                purge=False,
                held_on_purpose=hooks.held_on_purpose if hooks is not None else frozenset,
                before_transaction=hooks.before_transaction if hooks is not None else None,
            )
        loops.append(loop)
        if hooks is not None:
            members.append((loop, hooks))
    purger = marker_purger(settings, consumer_name, topics, loops[0].dead_letters.topic, windows)
    if purger is not None:
        purger.start()  # one per process: its members share the group, the topics and the table
    REGISTRY.register(MarkerTableCollector(settings.DATABASE_URL, consumer_name))
    runtime = attachment.runtime(members) if attachment is not None else None
    serve(started, settings, runtime=runtime)

    def stop_all() -> None:
        for loop in loops:
            loop.stop()

    stop_on_signals(stop_all)
    telemetry.emit("started", consumer=consumer_name, strategy=settings.CONSUMER_STRATEGY.value, members=len(loops))
    threads = [
        threading.Thread(target=_run_member, args=(loop,), name=f"member-{n}") for n, loop in enumerate(loops[1:], 1)
    ]
    for thread in threads:
        thread.start()
    _run_member(loops[0])
    for thread in threads:
        thread.join()
    if purger is not None:
        purger.stop()
    telemetry.flush(5)
    log.info(
        "stopped after acknowledging %d deliveries",
        sum(loop.handled for loop in loops),
        extra={"consumer": consumer_name},
    )


def _run_member(loop: Member) -> None:
    """One member; if it dies, the whole process goes, so its supervisor restarts it whole."""
    try:
        loop.run()
    except BaseException:
        log.exception("a group member failed; stopping the process", extra={"consumer": loop.name})
        logging.shutdown()
        os._exit(70)
