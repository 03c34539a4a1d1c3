"""Around the correct path: which messages it may take, retries, batches, and bookkeeping.

It knows nothing of Kafka: it takes decoded events and a way to connect to PostgreSQL, runs each
through its path (transaction.py, or a teaching plug-in the process was given), and says what
became of each. The Kafka loop acknowledges only what this module reports as committed (applied,
duplicate, ignored) or, once its dead letter is confirmed, failed.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import psycopg
from psycopg import IsolationLevel

from .. import metrics
from ..envelope import Envelope
from ..faults import FaultPoints
from ..message_ids import message_id_time
from ..outcomes import Outcome, Strategy
from ..telemetry import NoTelemetry, Telemetry
from ..typed_payload import PayloadDoesNotFit, TypedHandler
from .duplicates_ahead import committed_markers
from .recording import Recorder
from .transaction import (
    Attempt,
    BulkHandler,
    Connection,
    CorrectPath,
    Handler,
    HandlerBrokeTransaction,
    Session,
    claim,
    retryable,
)

log = logging.getLogger(__name__)

__all__ = ["BulkHandler", "Connection", "Handler", "MessageProcessor", "ProcessorConfig"]


class Path(Protocol):
    """How a message's transaction runs: the correct path, or a teaching plug-in."""

    strategy: Strategy
    """The strategy this path is, as metrics, logs and the control endpoint name it."""
    batches: bool
    """Whether many messages may share one transaction (attempt_batch); a path that does not
    takes one message at a time, in order, on the member's own connection."""

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        """Run one message's transaction(s) on `run`: APPLIED or DUPLICATE once committed, else raise."""
        ...

    def attempt_batch(self, run: Attempt, events: Sequence[Envelope], handlers: Sequence[Handler]) -> list[Outcome]:
        """Run many messages in one transaction, each with its own marker: their outcomes, in order."""
        ...


PATHS: Mapping[Strategy, Callable[[], Path]] = {Strategy.CORRECT: CorrectPath}
"""The paths a process may run when it is given nothing else: the correct path only."""


def path_for(strategy: Strategy, paths: Mapping[Strategy, Callable[[], Path]] = PATHS) -> Path:
    """A new path of `strategy` from `paths` (each processor has its own: a teaching path may
    remember); ValueError when the process was not given it."""
    factory = paths.get(strategy)
    if factory is None:
        given = ", ".join(strategy.value for strategy in paths)
        raise ValueError(f"strategy {strategy.value!r} is not installed in this process (it runs: {given})")
    return factory()


ISOLATION_LEVELS = {
    "READ COMMITTED": IsolationLevel.READ_COMMITTED,
    "REPEATABLE READ": IsolationLevel.REPEATABLE_READ,
    "SERIALIZABLE": IsolationLevel.SERIALIZABLE,
}


class NonRetryable(Exception):
    """Raised by a handler for a failure no retry can fix: dead-lettered at the first attempt."""


class TerminalFailure(Exception):
    """This message cannot be applied: send it to the dead-letter topic, then acknowledge it."""

    def __init__(self, reason: str, error: BaseException | str, message_id: str | None = None) -> None:
        self.reason = reason
        self.message_id = message_id
        """The message's id where the message itself could not be decoded (poison that named one)."""
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


def _age_of(event: Envelope) -> tuple[datetime, str]:
    """When `event` was born, as its marker's retention counts it: the time its id carries (a
    UUIDv7's, which no copy can change), else, for an untimed id, its occurred_at."""
    minted = message_id_time(event.message_id)
    if minted is not None:
        return minted, "its id was minted at"
    return event.occurred_at, "occurred at"


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
        path: Path | None = None,
    ) -> None:
        """`path` is how each message's transaction runs: the correct path unless given another
        (`path_for`, from the paths the process was given); `config.strategy` must be its strategy."""
        self.path: Path = path or CorrectPath()
        if self.path.strategy is not config.strategy:
            path_for(config.strategy)  # a teaching strategy without its path: refused, named
            raise ValueError(f"the path runs {self.path.strategy.value}, the config says {config.strategy.value}")
        self.config = config
        self.session = Session(connect, release, ISOLATION_LEVELS[config.isolation_level])
        self._attempt_on: Attempt | None = None
        self.handlers = dict(handlers)
        self.bulk_handlers = dict(bulk_handlers or {})
        self.faults = faults or FaultPoints()
        self._sleep = sleep
        self._clock = clock
        self.recorder = Recorder(config.consumer_name, config.strategy, telemetry or NoTelemetry())
        """Counts, tells and logs each outcome; the loop gives it each poll's positions."""
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

    def run_on(self, path: Path) -> None:
        """Run every following message on `path` (the lab's strategy switch)."""
        previous, strategy = self.config.strategy, path.strategy
        self.path = path
        self.config = replace(self.config, strategy=strategy)
        metrics.STRATEGY.labels(self.config.consumer_name, previous.value).set(0)
        metrics.precreate(self.config.consumer_name, strategy.value, self.handlers)
        self.recorder.switched(strategy)
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

    def close(self) -> None:
        """Give the connection back (to its pool, which replaces it if it is broken)."""
        self.session.close()

    # One message ----------------------------------------------------------------------------

    def process(self, event: Envelope) -> Outcome:
        """Apply `event` once: APPLIED or DUPLICATE (or IGNORED), or raise TerminalFailure or RetryLater."""
        if event.type in self.config.ignored_types:
            self.record(event, Outcome.IGNORED)
            return Outcome.IGNORED
        try:
            handler = self._eligible(event)
        except TerminalFailure:
            found = self._found_ahead([event])  # a copy of a message applied before: its id decides
            if event.message_id in found:
                return found[event.message_id]
            raise
        transaction_attempts = handler_attempts = 0
        while True:
            started = time.perf_counter()
            try:
                outcome = self._run(event, handler)
            except HandlerBrokeTransaction as broke:
                self._record_failed_attempt(event, broke)
                raise TerminalFailure("handler_broke_transaction", broke) from broke
            except Exception as error:
                self._record_failed_attempt(event, error)
                if self.session.lost(error):
                    raise RetryLater(str(error)) from error
                if retryable(error):
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
        if isinstance(handler, TypedHandler):
            try:
                handler = handler.bound(handler.validate(event))
            except PayloadDoesNotFit as misfit:
                raise TerminalFailure("invalid_payload", misfit) from misfit
        horizon = self.config.dedup_horizon
        if horizon is not None:
            born, what = _age_of(event)
            if born < self._clock() - horizon:
                raise TerminalFailure(
                    "beyond_dedup_horizon",
                    f"{what} {born.isoformat()}, older than the {horizon} the markers are kept: "
                    "applying it could repeat an effect whose marker was purged",
                )
        return handler

    def _attempt(self) -> Attempt:
        """What the path runs on: made once per connection, not once per message."""
        connection = self.session.ready()
        if self._attempt_on is None or self._attempt_on.connection is not connection:
            self._attempt_on = self._attempt_for(connection)
        self._attempt_on.other_content.clear()  # what an attempt rolled back had found
        return self._attempt_on

    def _attempt_for(self, connection: Connection) -> Attempt:
        consumer_name = self.config.consumer_name

        def timed_claim(event: Envelope) -> bool:
            started = time.perf_counter()
            claimed = claim(connection, consumer_name, event, self._begin)
            self._claim_wait_seconds.observe(time.perf_counter() - started)
            return claimed

        return Attempt(connection, consumer_name, timed_claim, self.faults.hit, self.bulk_handlers)

    def _run(self, event: Envelope, handler: Handler) -> Outcome:
        """One attempt: one transaction (two under the separate-transaction mistakes)."""
        return self.path.attempt(self._attempt(), event, handler)

    # Many messages, one transaction ------------------------------------------------------------

    def process_batch(self, events: Sequence[Envelope]) -> BatchResult:
        """Apply many events in one transaction, each with its own marker; one commit.

        When any of them fails, the whole batch rolls back and each event is processed on its
        own, so one poison message neither blocks nor doubles the rest. Teaching strategies
        always go one at a time.
        """
        if len(events) == 1 or not self.path.batches:
            return self._one_at_a_time(events)
        if any(event.type in self.config.ignored_types for event in events):
            return self._around_ignored(events)
        started = time.perf_counter()
        try:
            handlers = [self._eligible(event) for event in events]
            outcomes = self.path.attempt_batch(self._attempt(), events, handlers)
        except Exception as error:
            metrics.ROLLBACKS.labels(self.config.consumer_name).inc()
            if self.session.lost(error):
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
        with self.recorder.together():
            for event, outcome in zip(events, outcomes, strict=True):
                self.record(event, outcome)
        return BatchResult(list(outcomes))

    def duplicates_ahead(self, events: Sequence[Envelope]) -> set[str]:
        """The ids among `events` whose markers are committed already, found in one read
        (duplicates_ahead.py) and counted here as duplicates, so they need no transaction. Empty
        under a teaching strategy, whose path must meet every copy, or when the read fails: each
        message then takes its path as usual."""
        return set(self._found_ahead(events))

    def _found_ahead(self, events: Sequence[Envelope]) -> dict[str, Outcome]:
        """`duplicates_ahead`, with each found message's outcome (recorded here): a duplicate, or,
        apart with its differing fields named, a duplicate with different content."""
        if self.config.strategy is not Strategy.CORRECT or not events:
            return {}
        try:
            found = committed_markers(self.session.ready(), self.config.consumer_name, events)
        except psycopg.Error as error:
            log.info("looking ahead for duplicates failed: %s", error, extra={"consumer": self.config.consumer_name})
            self.session.roll_back()
            return {}
        outcomes: dict[str, Outcome] = {}
        if found:
            with self.recorder.together():
                for event in events:
                    differing = found.get(event.message_id)
                    if differing is None:
                        continue
                    if differing:
                        outcome = Outcome.DUPLICATE_WITH_DIFFERENT_CONTENT
                        self.record(event, outcome, found="ahead", differing_fields=differing)
                    else:
                        outcome = Outcome.DUPLICATE
                        self.record(event, outcome, found="ahead")
                    outcomes[event.message_id] = outcome
        return outcomes

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
        """Record an outcome (recording.py); a copy with other content names its differing fields."""
        if outcome is Outcome.DUPLICATE_WITH_DIFFERENT_CONTENT and event is not None and self._attempt_on is not None:
            fields.setdefault("differing_fields", self._attempt_on.other_content.pop(event.message_id, []))
        self.recorder.record(event, outcome, **fields)

    def _record_failed_attempt(self, event: Envelope, error: BaseException) -> None:
        metrics.ROLLBACKS.labels(self.config.consumer_name).inc()
        self.record(event, Outcome.RETRYABLE_FAILURE, error_class=type(error).__name__)

    def _backoff(self, attempt: int) -> None:
        ceiling = min(self.config.backoff_cap_seconds, self.config.backoff_base_seconds * 2**attempt)
        self._sleep(random.uniform(0, ceiling))  # full jitter
