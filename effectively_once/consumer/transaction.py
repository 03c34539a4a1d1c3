"""The correct path, alone: claim → handler → commit, and what the loop may then acknowledge.

One transaction holds the marker and the business change, claimed with `INSERT … ON CONFLICT DO
NOTHING`: a concurrent copy waits on the unique index until the first commits (then it is a
duplicate) or rolls back (then it claims). The marker's key is (consumer, message id) and nothing
else a copy carries. A duplicate found a committed marker: it asks how its content differs from
the copy applied under its id (a copy with other content is a producer's bug, counted apart),
then sends COMMIT for its empty transaction without waiting (`commit_without_waiting`; `settle`
reads the answer before the connection's next use). The handler runs inside the transaction on
a guarded connection that refuses to end it. Only after COMMIT returned may the Kafka loop store
an applied message's offset.

The processor (processor.py) adds retries, the dedup horizon and bookkeeping around this; the
Kafka loop (loop.py) polls, decodes and acknowledges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, NoReturn

import psycopg
from psycopg.pq import DiagnosticField, Escaping, ExecStatus, TransactionStatus

from ..envelope import Envelope
from ..outcomes import Outcome, Strategy

Connection = psycopg.Connection[Any]
Handler = Callable[[Envelope, Connection], None]
"""A service's business logic: it receives the event and the open transaction, and must not end it."""
BulkHandler = Callable[[Sequence[Envelope], Connection], None]
"""Optional, for batched mode: the same logic for a run of claimed events of one type, in order."""

CLAIM = """INSERT INTO processed_message (consumer_name, message_id, id_time, content_digest)
VALUES (%s, %s, message_id_time(%s), message_content_digest(%s::jsonb, %s::jsonb))
ON CONFLICT DO NOTHING RETURNING message_id"""
"""The claim. Its key is (consumer, message id): id_time is the time the id itself carries (a
CHECK ties the two, migration 0008), and the content digest only tells a copy apart."""
CLAIM_MANY = """INSERT INTO processed_message (consumer_name, message_id, id_time, content_digest)
SELECT %s, m.id, message_id_time(m.id), message_content_digest(m.body::jsonb, m.delivery::jsonb)
  FROM unnest(%s::text[], %s::text[], %s::text[]) AS m (id, body, delivery)
ON CONFLICT DO NOTHING RETURNING message_id"""
DIFFERENCES = """SELECT message_content_differences(content_digest, message_content_digest(%s::jsonb, %s::jsonb))
  FROM processed_message WHERE consumer_name = %s AND message_id = %s AND id_time = message_id_time(%s)"""
"""How a duplicate's content differs from what was applied under its id: the fields' names, none
(a plain redelivery), or NULL for a marker that kept no digest."""
DIFFERENCES_MANY = """SELECT m.message_id, message_content_differences(m.content_digest,
                                                   message_content_digest(c.body::jsonb, c.delivery::jsonb))
  FROM unnest(%s::text[], %s::text[], %s::text[]) AS c (id, body, delivery)
  JOIN processed_message m ON m.consumer_name = %s AND m.message_id = c.id AND m.id_time = message_id_time(c.id)"""


def claim_row(consumer_name: str, event: Envelope) -> tuple[str, str, str, str, str | None]:
    """CLAIM's parameters for one event."""
    body, delivery = event.content()
    return consumer_name, event.message_id, event.message_id, body, delivery


def contents(events: Sequence[Envelope]) -> tuple[list[str], list[str], list[str | None]]:
    """The ids, bodies and deliveries of `events`, as CLAIM_MANY and DIFFERENCES_MANY take them."""
    pairs = [event.content() for event in events]
    return [event.message_id for event in events], [body for body, _ in pairs], [delivery for _, delivery in pairs]


def differing_fields(connection: Connection, consumer_name: str, event: Envelope) -> list[str]:
    """The fields in which `event` differs from the copy `consumer_name` applied under its id
    (its marker must be committed); empty for a plain redelivery or a marker without a digest."""
    body, delivery = event.content()
    row = connection.execute(DIFFERENCES, (body, delivery, consumer_name, event.message_id, event.message_id))
    found = row.fetchone()
    return list(found[0] or []) if found else []


def differing_fields_of_many(
    connection: Connection, consumer_name: str, events: Sequence[Envelope]
) -> dict[str, list[str]]:
    """`differing_fields` for many events in one statement: message id -> fields, where any differ."""
    ids, bodies, deliveries = contents(events)
    rows = connection.execute(DIFFERENCES_MANY, (ids, bodies, deliveries, consumer_name))
    return {message_id: list(fields) for message_id, fields in rows if fields}


def retryable(error: BaseException) -> bool:
    """Whether `error` asks for the whole transaction again (SQLSTATE 40001, 40P01)."""
    return isinstance(error, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected)


class Session:
    """One worker's connection: made when first needed, replaced once it is lost, given back
    (to its pool) on close. It is never in autocommit: the first statement opens a transaction
    without a round trip of its own, and the path ends it with COMMIT or ROLLBACK."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        release: Callable[[Connection], None],
        isolation_level: psycopg.IsolationLevel,
    ) -> None:
        self._connect, self._release, self._isolation_level = connect, release, isolation_level
        self._connection: Connection | None = None

    @property
    def connection(self) -> Connection:
        """The open connection, a new one when there was none or it was lost."""
        if self._connection is None or self._connection.closed or self._connection.broken:
            self.close()
            connection = self._connect()
            connection.autocommit = False
            connection.isolation_level = self._isolation_level
            self._connection = connection
        return self._connection

    def ready(self) -> Connection:
        """The connection, its COMMIT sent without waiting (if any) read first."""
        connection = self.connection
        settle(connection)
        return connection

    def roll_back(self) -> None:
        """End whatever transaction is open, keeping the connection if it can be kept."""
        if self._connection is not None:
            with suppress(psycopg.Error):
                self._connection.rollback()

    def lost(self, error: BaseException) -> bool:
        """Whether `error` means the session is gone (the connection is then given back): the
        connection closed or broke, or the server said it ends the session (SQLSTATE class 57P,
        operator intervention such as pg_terminate_backend; or class 08). The server's message can
        arrive before the socket closes, while the connection still looks usable: the SQLSTATE
        settles it."""
        if isinstance(error, psycopg.OperationalError) and not retryable(error):
            connection = self._connection
            sqlstate = getattr(error, "sqlstate", None) or ""
            if connection is None or connection.closed or connection.broken or sqlstate.startswith(("57P", "08")):
                self.close()
                return True
        return False

    def close(self) -> None:
        """Give the connection back (to its pool, which replaces it if it is broken)."""
        if self._connection is not None:
            connection, self._connection = self._connection, None
            with suppress(psycopg.Error):
                settle(connection)
            self._release(connection)


class HandlerBrokeTransaction(Exception):
    """The handler ended the transaction or changed its mode: the message fails (dead-lettered)."""


@dataclass(frozen=True)
class Attempt:
    """What one attempt runs on: the connection, the marker's owner and the fault points."""

    connection: Connection
    consumer_name: str
    claim: Callable[[Envelope], bool]  # `claim` below, for this connection, consumer and isolation level
    hit: Callable[[str], None]
    bulk_handlers: Mapping[str, BulkHandler]
    other_content: dict[str, list[str]] = field(default_factory=dict)
    """Duplicates whose content differs from what was applied under their id: message id -> the
    differing fields. The path fills it; the processor takes each out as it records the outcome."""


@contextmanager
def transaction(connection: Connection) -> Iterator[None]:
    """COMMIT when the block ends normally (a `return` included; not twice); ROLLBACK on any error."""
    try:
        yield
    except BaseException:
        if not connection.closed and not connection.broken:
            try:
                connection.rollback()
            except psycopg.Error:
                connection.close()  # the processor's pool replaces it
        raise
    if connection.pgconn.transaction_status != TransactionStatus.ACTIVE:
        connection.commit()


def claim(connection: Connection, consumer_name: str, event: Envelope, begin: bytes) -> bool:
    """Claim the marker: True when this transaction owns the message, False for a duplicate.
    `begin` is the BEGIN statement (with its isolation level) to open the transaction with."""
    if connection.pgconn.transaction_status != TransactionStatus.IDLE:
        return connection.execute(CLAIM, claim_row(consumer_name, event)).fetchone() is not None
    return begin_and_claim_in_one_round_trip(connection, claim_row(consumer_name, event), begin)


def begin_and_claim_in_one_round_trip(
    connection: Connection, row: tuple[str, str, str, str, str | None], begin: bytes
) -> bool:
    """A speed trick: BEGIN and the claim sent as one simple query, so opening the transaction
    costs no round trip of its own (at about 100 µs a round trip over loopback, a tenth of a
    message's time). Safe because nothing else changes: the claim is the transaction's first
    statement either way, and the values are escaped by libpq's own literal escaping for the
    connection's encoding, never pasted in. An error comes back as psycopg's own exception for
    its SQLSTATE, as `execute` would raise it."""
    pgconn = connection.pgconn
    escape, encoding = Escaping(pgconn), connection.info.encoding
    values = tuple(b"NULL" if text is None else escape.escape_literal(text.encode(encoding)) for text in row)
    result = pgconn.exec_(begin + b"; " + CLAIM.encode() % values)
    if result.status != ExecStatus.TUPLES_OK:
        message = (result.error_message or b"").decode(errors="replace").strip()
        sqlstate = result.error_field(DiagnosticField.SQLSTATE)
        if not sqlstate:
            raise psycopg.OperationalError(message or "the connection failed")
        raise psycopg.errors.lookup(sqlstate.decode())(message)
    return result.ntuples == 1


def commit_without_waiting(connection: Connection) -> None:
    """A speed trick for a duplicate: its transaction wrote nothing (the claim found a committed
    marker), so its COMMIT is sent and its answer read later, by `settle`, before the
    connection's next use. Nothing waits on that answer: the message's outcome (a duplicate) is
    decided by the committed marker, not by this COMMIT, so acknowledging it at once is safe."""
    connection.pgconn.send_query(b"COMMIT")


def settle(connection: Connection) -> None:
    """Read the answer to a COMMIT sent by `commit_without_waiting`, if one is on its way; raise
    if it failed (the connection is then replaced). Called before every use of the connection."""
    pgconn = connection.pgconn
    if pgconn.transaction_status != TransactionStatus.ACTIVE:
        return
    while pgconn.flush():  # what the socket did not take at once
        pass
    while (result := pgconn.get_result()) is not None:
        if result.status != ExecStatus.COMMAND_OK:
            raise psycopg.OperationalError((result.error_message or b"").decode(errors="replace").strip())


def _refusing(what: str) -> Callable[..., NoReturn]:
    def refuse(self: object, *args: object) -> NoReturn:
        raise HandlerBrokeTransaction(f"the handler called {what}: the runtime ends the transaction, not the handler")

    return refuse


class GuardedConnection:
    """The connection a handler sees: psycopg's, but commit(), rollback(), close() and setting
    autocommit or the isolation level raise, and a COMMIT or ROLLBACK sent as SQL is caught after
    each statement and after the handler. `transaction()` is a savepoint, and allowed."""

    commit, rollback, close = _refusing("commit()"), _refusing("rollback()"), _refusing("close()")
    set_autocommit, set_isolation_level = _refusing("set_autocommit()"), _refusing("set_isolation_level()")

    def __init__(self, connection: Connection) -> None:
        object.__setattr__(self, "_connection", connection)

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        cursor = self._connection.execute(*args, **kwargs)
        check_still_open(self._connection)
        return cursor

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("autocommit", "isolation_level", "read_only", "deferrable"):
            _refusing(f"setting {name}")(self)
        setattr(self._connection, name, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


def check_still_open(connection: Connection) -> None:
    """Raise HandlerBrokeTransaction unless the runtime's transaction is still the open one."""
    if connection.autocommit or connection.pgconn.transaction_status == TransactionStatus.IDLE:
        raise HandlerBrokeTransaction("the handler ended the transaction (a COMMIT or ROLLBACK, or autocommit)")


def call_handler(handler: Callable[[Any, Connection], None], events: Any, connection: Connection) -> None:
    """Run a handler (or a bulk handler) on the guarded connection, then check it left the transaction open."""
    handler(events, GuardedConnection(connection))  # type: ignore[arg-type]
    check_still_open(connection)


class CorrectPath:
    """The one path a production consumer runs."""

    strategy = Strategy.CORRECT
    batches = True

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        """One attempt at one message: APPLIED once COMMIT returned, DUPLICATE once the claim found the
        marker committed; raises otherwise."""
        with transaction(run.connection):
            run.hit("before_claim")
            if not run.claim(event):  # the marker is another's, committed: nothing here to wait for
                outcome = _duplicate(run, event, differing_fields(run.connection, run.consumer_name, event))
                commit_without_waiting(run.connection)
                return outcome
            run.hit("after_claim")
            call_handler(handler, event, run.connection)
            run.hit("before_commit")
        return Outcome.APPLIED

    def attempt_batch(self, run: Attempt, events: Sequence[Envelope], handlers: Sequence[Handler]) -> list[Outcome]:
        """Many messages, each with its own marker, in one transaction and one commit."""
        outcomes: list[Outcome] = []
        with transaction(run.connection):
            run.hit("before_claim")
            ids, bodies, deliveries = contents(events)
            statement = (run.consumer_name, ids, bodies, deliveries)
            unclaimed = {row[0] for row in run.connection.execute(CLAIM_MANY, statement)}
            claimed: list[tuple[Envelope, Handler]] = []
            duplicates: list[Envelope] = []
            for event, handler in zip(events, handlers, strict=True):
                if event.message_id in unclaimed:
                    unclaimed.discard(event.message_id)  # a second copy in the batch is a duplicate
                    run.hit("after_claim")
                    claimed.append((event, handler))
                    outcomes.append(Outcome.APPLIED)
                else:
                    duplicates.append(event)
                    outcomes.append(Outcome.DUPLICATE)
            if duplicates:
                differing = differing_fields_of_many(run.connection, run.consumer_name, duplicates)
                outcomes = [
                    outcome
                    if outcome is Outcome.APPLIED
                    else _duplicate(run, event, differing.get(event.message_id, []))
                    for event, outcome in zip(events, outcomes, strict=True)
                ]
            _apply_in_order(claimed, run)
            run.hit("before_commit")
        return outcomes


def _duplicate(run: Attempt, event: Envelope, differing: list[str]) -> Outcome:
    """A duplicate's outcome: with other content than what was applied under its id, counted
    apart (a producer's bug), its differing fields kept for the processor's record."""
    if not differing:
        return Outcome.DUPLICATE
    run.other_content[event.message_id] = differing
    return Outcome.DUPLICATE_WITH_DIFFERENT_CONTENT


def _apply_in_order(claimed: Sequence[tuple[Envelope, Handler]], run: Attempt) -> None:
    """Run the handlers in message order; a run of one type goes to its bulk handler if any."""
    position = 0
    while position < len(claimed):
        end = position
        while end < len(claimed) and claimed[end][0].type == claimed[position][0].type:
            end += 1
        bulk = run.bulk_handlers.get(claimed[position][0].type)
        if bulk is not None:
            call_handler(bulk, [event for event, _ in claimed[position:end]], run.connection)
        else:
            for event, handler in claimed[position:end]:
                call_handler(handler, event, run.connection)
        position = end


def acknowledgeable(result: object) -> bool:
    """Whether the loop may store the offset on this result alone: a committed outcome. A failure
    waits for its dead letter's confirmation; nothing else is acknowledged (it is redelivered)."""
    return result in (Outcome.APPLIED, Outcome.DUPLICATE, Outcome.DUPLICATE_WITH_DIFFERENT_CONTENT, Outcome.IGNORED)
