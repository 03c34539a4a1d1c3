"""One message, one transaction: the marker and the business change commit together or not at all.

This is the part of the runtime a team copies. It knows nothing of Kafka: it takes decoded events
and an open PostgreSQL connection, and says what became of each. The Kafka loop acknowledges
only what this module reports as committed (applied or duplicate) or dead-lettered.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import IsolationLevel, errors
from psycopg.pq import DiagnosticField, Escaping, ExecStatus, TransactionStatus
from psycopg.pq.abc import PGresult

from services.idempotent_consumer import metrics
from services.idempotent_consumer.envelope import Envelope
from services.idempotent_consumer.faults import FaultPoints
from services.idempotent_consumer.outcomes import Outcome, Strategy
from services.idempotent_consumer.telemetry import NoTelemetry, Telemetry

log = logging.getLogger(__name__)

Connection = psycopg.Connection[Any]
Handler = Callable[[Envelope, Connection], None]
"""A service's business logic: it receives the event and the open transaction, and must not commit."""
BulkHandler = Callable[[Sequence[Envelope], Connection], None]
"""Optional, for batched mode: the same logic for a run of claimed events of one type, in order
(one multi-row statement instead of one round trip per event)."""

CLAIM = (
    "INSERT INTO processed_message (consumer_name, message_id) VALUES (%s, %s) "
    "ON CONFLICT DO NOTHING RETURNING message_id"
)
CLAIM_MANY = (
    "INSERT INTO processed_message (consumer_name, message_id) SELECT %s, unnest(%s::text[]) "
    "ON CONFLICT DO NOTHING RETURNING message_id"
)
CHECK = "SELECT 1 FROM processed_message WHERE consumer_name = %s AND message_id = %s"
MESSAGE_ID_ONLY_CONSUMER = "(message-id-only)"
"""The marker name the `message_id_only_key` mistake uses for every consumer alike."""

ISOLATION_LEVELS = {
    "READ COMMITTED": IsolationLevel.READ_COMMITTED,
    "REPEATABLE READ": IsolationLevel.REPEATABLE_READ,
    "SERIALIZABLE": IsolationLevel.SERIALIZABLE,
}


class NonRetryable(Exception):
    """Raised by a handler for a failure no retry can fix: dead-lettered at the first attempt."""


class TerminalFailure(Exception):
    """This message cannot be applied: send it to the dead-letter topic, then acknowledge it."""

    def __init__(self, reason: str, error: BaseException | str) -> None:
        self.reason = reason
        self.error_class = type(error).__name__ if isinstance(error, BaseException) else "Refused"
        self.error_text = str(error)[:2000]
        super().__init__(f"{reason}: {self.error_class}: {self.error_text}")


class RetryLater(Exception):
    """Not the message's fault (the database went away): acknowledge nothing, try it again."""


@dataclass(frozen=True)
class ProcessorConfig:
    """How one consumer processes its messages. Every default is the safe one."""

    consumer_name: str
    """Stable and versioned on purpose (`inventory-reservation-v1`), never a pod or host name."""
    strategy: Strategy = Strategy.CORRECT
    isolation_level: str = "READ COMMITTED"
    max_transaction_attempts: int = 8
    """Attempts of the whole transaction on SQLSTATE 40001/40P01 before dead-lettering."""
    max_handler_attempts: int = 3
    """Attempts on any other error before dead-lettering."""
    backoff_base_seconds: float = 0.005
    backoff_cap_seconds: float = 1.0
    dedup_horizon: timedelta | None = None
    """Markers are kept this long; an older message is dead-lettered, not applied blindly."""
    ignored_types: frozenset[str] = frozenset()
    """Types that share a topic with this consumer's but are none of its business. Any other
    type without a handler is unknown, and dead-lettered."""

    def __post_init__(self) -> None:
        if not self.consumer_name:
            raise ValueError("consumer_name must not be empty")
        if self.isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}")


@dataclass
class BatchResult:
    """Results for a prefix of the events given; the rest wait for `retry_later` to clear."""

    results: list[Outcome | TerminalFailure] = field(default_factory=list)
    retry_later: RetryLater | None = None


def _error_of(result: PGresult) -> psycopg.Error:
    """The psycopg exception (by SQLSTATE) for a failed raw query."""
    message = (result.error_message or b"").decode(errors="replace").strip()
    sqlstate = result.error_field(DiagnosticField.SQLSTATE)
    if not sqlstate:
        return psycopg.OperationalError(message or "the connection failed")
    error_class: type[psycopg.Error] = errors.lookup(sqlstate.decode())
    return error_class(message)


def _is_retryable_transaction_error(error: BaseException) -> bool:
    return isinstance(error, errors.SerializationFailure | errors.DeadlockDetected)


class MessageProcessor:
    """Runs events through their transactions on one connection, as the configured strategy says."""

    def __init__(
        self,
        config: ProcessorConfig,
        connect: Callable[[], Connection],
        handlers: Mapping[str, Handler],
        faults: FaultPoints | None = None,
        bulk_handlers: Mapping[str, BulkHandler] | None = None,
        release: Callable[[Connection], None] = lambda connection: connection.close(),
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        telemetry: Telemetry | None = None,
    ) -> None:
        self.config = config
        self._connect = connect
        self._release = release
        self._connection: Connection | None = None
        self.handlers = dict(handlers)
        self.bulk_handlers = dict(bulk_handlers or {})
        self.faults = faults or FaultPoints()
        self._sleep = sleep
        self._clock = clock
        self.telemetry: Telemetry = telemetry or NoTelemetry()
        self._told: list[dict[str, Any]] | None = None
        """Deliveries of the batch being recorded, told as one telemetry record."""
        self._seen_in_memory: set[str] = set()
        self._outcome_counters: dict[tuple[str, Outcome], Any] = {}
        self._begin = f"BEGIN ISOLATION LEVEL {config.isolation_level}".encode()
        self._transaction_seconds = metrics.TRANSACTION_SECONDS.labels(config.consumer_name)
        self._claim_wait_seconds = metrics.CLAIM_WAIT_SECONDS.labels(config.consumer_name)
        metrics.precreate(config.consumer_name, config.strategy.value, self.handlers)
        if config.strategy is not Strategy.CORRECT:
            log.warning(
                "TEACHING STRATEGY %s IS ACTIVE for %s: this consumer is deliberately unsafe",
                config.strategy.value.upper(),
                config.consumer_name,
                extra={"consumer": config.consumer_name, "strategy": config.strategy.value},
            )

    def switch_strategy(self, strategy: Strategy) -> None:
        """Run every following message under `strategy` (the teaching switch)."""
        previous = self.config.strategy
        self.config = replace(self.config, strategy=strategy)
        metrics.STRATEGY.labels(self.config.consumer_name, previous.value).set(0)
        metrics.precreate(self.config.consumer_name, strategy.value, self.handlers)
        self._outcome_counters.clear()
        self._seen_in_memory.clear()
        level = logging.INFO if strategy is Strategy.CORRECT else logging.WARNING
        log.log(
            level,
            "strategy switched from %s to %s",
            previous.value,
            strategy.value,
            extra={"consumer": self.config.consumer_name, "strategy": strategy.value},
        )

    def set_dedup_horizon(self, horizon: timedelta | None) -> None:
        """Refuse every following message older than `horizon` (the retention lab shortens it)."""
        self.config = replace(self.config, dedup_horizon=horizon)
        log.warning("dedup horizon set to %s", horizon, extra={"consumer": self.config.consumer_name})

    # Connection ---------------------------------------------------------------------------

    @property
    def connection(self) -> Connection:
        if self._connection is None or self._connection.closed or self._connection.broken:
            self.close()
            connection = self._connect()
            # Not autocommit: the first statement opens the transaction without a round trip
            # of its own, and _transaction() ends it with COMMIT or ROLLBACK.
            connection.autocommit = False
            connection.isolation_level = ISOLATION_LEVELS[self.config.isolation_level]
            self._connection = connection
        return self._connection

    @contextmanager
    def _transaction(self, connection: Connection) -> Iterator[None]:
        """COMMIT when the block ends normally (a `return` included); ROLLBACK on any error."""
        try:
            yield
        except BaseException:
            if not connection.closed and not connection.broken:
                try:
                    connection.rollback()
                except psycopg.Error:
                    log.warning("rollback failed; the connection will be replaced")
                    connection.close()
            raise
        connection.commit()

    def close(self) -> None:
        """Give the connection back (to its pool, which replaces it if it is broken)."""
        if self._connection is not None:
            connection, self._connection = self._connection, None
            self._release(connection)

    # One message ----------------------------------------------------------------------------

    def process(self, event: Envelope) -> Outcome:
        """Apply `event` once: APPLIED or DUPLICATE (or IGNORED), or raise TerminalFailure or RetryLater."""
        if event.type in self.config.ignored_types:
            self.record(event, Outcome.IGNORED)
            return Outcome.IGNORED
        handler = self._eligible(event)
        transaction_attempts = handler_attempts = 0
        while True:
            started = time.perf_counter()
            try:
                outcome = self._run(event, handler)
            except Exception as error:
                self._record_failed_attempt(event, error)
                if self._connection_lost(error):
                    raise RetryLater(str(error)) from error
                if _is_retryable_transaction_error(error):
                    transaction_attempts += 1
                    if transaction_attempts >= self.config.max_transaction_attempts:
                        raise TerminalFailure("transaction_retries_exhausted", error) from error
                    metrics.RETRIES.labels(self.config.consumer_name, type(error).__name__).inc()
                    self._backoff(transaction_attempts)
                    continue
                handler_attempts += 1
                if isinstance(error, NonRetryable) or handler_attempts >= self.config.max_handler_attempts:
                    raise TerminalFailure("handler_failed", error) from error
                metrics.RETRIES.labels(self.config.consumer_name, "handler_error").inc()
                self._backoff(handler_attempts)
                continue
            self._transaction_seconds.observe(time.perf_counter() - started)
            self.record(event, outcome)
            return outcome

    def _eligible(self, event: Envelope) -> Handler:
        handler = self.handlers.get(event.type)
        if handler is None:
            raise TerminalFailure("unknown_type", f"no handler for event type {event.type!r}")
        horizon = self.config.dedup_horizon
        if horizon is not None and event.occurred_at < self._clock() - horizon:
            raise TerminalFailure(
                "beyond_dedup_horizon",
                f"occurred at {event.occurred_at.isoformat()}, older than the {horizon} the markers "
                "are kept: applying it could repeat an effect whose marker was purged",
            )
        return handler

    def _claim(self, connection: Connection, consumer_name: str, message_id: str) -> bool:
        """Claim the marker: True when this transaction owns the message, False for a duplicate.

        When it is the transaction's first statement, BEGIN and the claim travel together as
        one simple-protocol query (the values escaped by libpq), saving a round trip on every
        message: on the duplicate path that is a third of its cost. The SQL is CLAIM's.
        """
        started = time.perf_counter()
        pgconn = connection.pgconn
        if pgconn.transaction_status != TransactionStatus.IDLE:
            claimed = connection.execute(CLAIM, (consumer_name, message_id)).fetchone() is not None
        else:
            escape, encoding = Escaping(pgconn), connection.info.encoding
            result = pgconn.exec_(
                b"%s; INSERT INTO processed_message (consumer_name, message_id) VALUES (%s, %s) "
                b"ON CONFLICT DO NOTHING RETURNING message_id"
                % (
                    self._begin,
                    escape.escape_literal(consumer_name.encode(encoding)),
                    escape.escape_literal(message_id.encode(encoding)),
                )
            )
            if result.status != ExecStatus.TUPLES_OK:
                raise _error_of(result)
            claimed = result.ntuples == 1
        self._claim_wait_seconds.observe(time.perf_counter() - started)
        return claimed

    def _run(self, event: Envelope, handler: Handler) -> Outcome:
        """One attempt: one transaction (two under the separate-transaction mistakes)."""
        strategy, name, hit = self.config.strategy, self.config.consumer_name, self.faults.hit
        connection = self.connection
        if strategy in (Strategy.CORRECT, Strategy.ACK_BEFORE_COMMIT, Strategy.MESSAGE_ID_ONLY_KEY):
            marker_name = MESSAGE_ID_ONLY_CONSUMER if strategy is Strategy.MESSAGE_ID_ONLY_KEY else name
            with self._transaction(connection):
                hit("before_claim")
                if not self._claim(connection, marker_name, event.message_id):
                    return Outcome.DUPLICATE  # the empty transaction commits
                hit("after_claim")
                handler(event, connection)
                hit("before_commit")
            return Outcome.APPLIED
        if strategy is Strategy.CHECK_THEN_ACT:
            with self._transaction(connection):
                if connection.execute(CHECK, (name, event.message_id)).fetchone():
                    return Outcome.DUPLICATE
                hit("after_check")
                handler(event, connection)
                connection.execute(CLAIM, (name, event.message_id))  # the conflict is ignored
                hit("before_commit")
            return Outcome.APPLIED
        if strategy is Strategy.MARKER_BEFORE_IN_SEPARATE_TXN:
            with self._transaction(connection):
                if not self._claim(connection, name, event.message_id):
                    return Outcome.DUPLICATE
            hit("between_transactions")
            with self._transaction(connection):
                handler(event, connection)
                hit("before_commit")
            return Outcome.APPLIED
        if strategy is Strategy.MARKER_AFTER_IN_SEPARATE_TXN:
            with self._transaction(connection):
                if connection.execute(CHECK, (name, event.message_id)).fetchone():
                    return Outcome.DUPLICATE
                handler(event, connection)
                hit("before_commit")
            hit("between_transactions")
            with self._transaction(connection):
                connection.execute(CLAIM, (name, event.message_id))
            return Outcome.APPLIED
        if strategy is Strategy.MEMORY_DEDUP_ONLY:
            if event.message_id in self._seen_in_memory:
                return Outcome.DUPLICATE
            with self._transaction(connection):
                handler(event, connection)
                hit("before_commit")
            self._seen_in_memory.add(event.message_id)
            return Outcome.APPLIED
        if strategy is Strategy.NO_DEDUP:
            with self._transaction(connection):
                handler(event, connection)
                hit("before_commit")
            return Outcome.APPLIED
        raise AssertionError(f"unhandled strategy {strategy}")

    # Many messages, one transaction ------------------------------------------------------------

    def process_batch(self, events: Sequence[Envelope]) -> BatchResult:
        """Apply many events in one transaction, each with its own marker; one commit.

        When any of them fails, the whole batch rolls back and each event is processed on its
        own, so one poison message neither blocks nor doubles the rest. Teaching strategies
        always go one at a time.
        """
        if len(events) == 1 or self.config.strategy not in (Strategy.CORRECT,):
            return self._one_at_a_time(events)
        if any(event.type in self.config.ignored_types for event in events):
            return self._around_ignored(events)
        outcomes: list[Outcome] = []
        started = time.perf_counter()
        try:
            handlers = [self._eligible(event) for event in events]
            connection = self.connection
            with self._transaction(connection):
                self.faults.hit("before_claim")
                unclaimed = {
                    row[0]
                    for row in connection.execute(
                        CLAIM_MANY, (self.config.consumer_name, [e.message_id for e in events])
                    )
                }
                claimed: list[tuple[Envelope, Handler]] = []
                for event, handler in zip(events, handlers, strict=True):
                    if event.message_id in unclaimed:
                        unclaimed.discard(event.message_id)  # a second copy in the batch is a duplicate
                        self.faults.hit("after_claim")
                        claimed.append((event, handler))
                        outcomes.append(Outcome.APPLIED)
                    else:
                        outcomes.append(Outcome.DUPLICATE)
                self._apply_in_order(claimed, connection)
                self.faults.hit("before_commit")
        except Exception as error:
            metrics.ROLLBACKS.labels(self.config.consumer_name).inc()
            if self._connection_lost(error):
                return BatchResult([], RetryLater(str(error)))
            metrics.RETRIES.labels(self.config.consumer_name, "batch_fallback").inc()
            log.info(
                "batch of %d rolled back (%s); processing one at a time",
                len(events),
                type(error).__name__,
                extra={"consumer": self.config.consumer_name},
            )
            return self._one_at_a_time(events)
        self._transaction_seconds.observe(time.perf_counter() - started)
        self._told = []  # one telemetry record for the whole batch
        try:
            for event, outcome in zip(events, outcomes, strict=True):
                self.record(event, outcome)
        finally:
            told, self._told = self._told, None
            self.telemetry.emit("deliveries", items=told)
        return BatchResult(list(outcomes))

    def _apply_in_order(self, claimed: Sequence[tuple[Envelope, Handler]], connection: Connection) -> None:
        """Run the handlers in message order; a run of one type goes to its bulk handler if any."""
        position = 0
        while position < len(claimed):
            event_type = claimed[position][0].type
            end = position
            while end < len(claimed) and claimed[end][0].type == event_type:
                end += 1
            bulk = self.bulk_handlers.get(event_type)
            if bulk is not None:
                bulk([event for event, _ in claimed[position:end]], connection)
            else:
                for event, handler in claimed[position:end]:
                    handler(event, connection)
            position = end

    def _around_ignored(self, events: Sequence[Envelope]) -> BatchResult:
        """The batch without its ignored events, their IGNORED results put back in place."""
        relevant = [event for event in events if event.type not in self.config.ignored_types]
        inner = iter(self.process_batch(relevant).results if relevant else [])
        merged = BatchResult()
        for event in events:
            if event.type in self.config.ignored_types:
                self.record(event, Outcome.IGNORED)
                merged.results.append(Outcome.IGNORED)
                continue
            result = next(inner, None)
            if result is None:  # the database went away before this one
                merged.retry_later = RetryLater("the database became unavailable")
                break
            merged.results.append(result)
        return merged

    def _one_at_a_time(self, events: Sequence[Envelope]) -> BatchResult:
        batch = BatchResult()
        for event in events:
            try:
                batch.results.append(self.process(event))
            except TerminalFailure as failure:
                batch.results.append(failure)
            except RetryLater as retry:
                batch.retry_later = retry
                break
        return batch

    # Bookkeeping ------------------------------------------------------------------------------

    def record(self, event: Envelope | None, outcome: Outcome, **fields: Any) -> None:
        """Count an outcome and log it (with ids, never the payload)."""
        event_type = event.type if event else "(undecodable)"
        counter = self._outcome_counters.get((event_type, outcome))
        if counter is None:
            counter = metrics.OUTCOMES.labels(
                self.config.consumer_name, event_type, outcome.value, self.config.strategy.value
            )
            self._outcome_counters[(event_type, outcome)] = counter
        counter.inc()
        kafka_key = fields.pop("kafka_key", None)
        told = {
            "consumer": self.config.consumer_name,
            "strategy": self.config.strategy.value,
            "message_id": event.message_id if event else fields.get("message_id"),
            "key": event.key if event else kafka_key,
            "event_type": event_type,
            "outcome": outcome.value,
            **fields,
        }
        if self._told is not None:
            self._told.append(told)
        else:
            self.telemetry.emit("delivery", **told)
        level = logging.INFO if outcome in (Outcome.APPLIED, Outcome.DUPLICATE) else logging.WARNING
        if log.isEnabledFor(level):
            log.log(
                level,
                "%s %s",
                outcome.value,
                event_type,
                extra={
                    "consumer": self.config.consumer_name,
                    "strategy": self.config.strategy.value,
                    "message_id": event.message_id if event else None,
                    "event_type": event_type,
                    "trace_id": event.trace_id if event else None,
                    "outcome": outcome.value,
                    **fields,
                },
            )

    def _record_failed_attempt(self, event: Envelope, error: BaseException) -> None:
        metrics.ROLLBACKS.labels(self.config.consumer_name).inc()
        self.record(event, Outcome.RETRYABLE_FAILURE, error_class=type(error).__name__)

    def _connection_lost(self, error: BaseException) -> bool:
        """The session is gone: the connection closed, broke, or the server said it is ending it
        (SQLSTATE class 57P, operator intervention, e.g. pg_terminate_backend; or class 08). The
        server's message can arrive before the socket closes, while the connection still looks
        usable: the SQLSTATE settles it."""
        if isinstance(error, psycopg.OperationalError) and not _is_retryable_transaction_error(error):
            connection = self._connection
            sqlstate = getattr(error, "sqlstate", None) or ""
            if connection is None or connection.closed or connection.broken or sqlstate.startswith(("57P", "08")):
                self.close()
                return True
        return False

    def _backoff(self, attempt: int) -> None:
        ceiling = min(self.config.backoff_cap_seconds, self.config.backoff_base_seconds * 2**attempt)
        self._sleep(random.uniform(0, ceiling))  # full jitter
