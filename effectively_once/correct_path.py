"""The correct path, alone: claim → handler → commit, and what the loop may then acknowledge.

One transaction holds the marker and the business change, claimed with `INSERT … ON CONFLICT DO
NOTHING`: a concurrent copy waits on the unique index until the first commits (then it is a
duplicate) or rolls back (then it claims). A duplicate found a committed marker, so it sends
COMMIT for its empty transaction without waiting (processor.settle reads the answer later). The
handler runs inside the transaction on a guarded connection that refuses to end it. Only after
COMMIT returned may the Kafka loop store an applied message's offset.

The processor (processor.py) adds retries, the dedup horizon and bookkeeping around this; the
Kafka loop (consumer_loop.py) polls, decodes and acknowledges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import psycopg
from psycopg.pq import DiagnosticField, Escaping, ExecStatus, TransactionStatus

from .envelope import Envelope
from .outcomes import Outcome, Strategy

Connection = psycopg.Connection[Any]
Handler = Callable[[Envelope, Connection], None]
"""A service's business logic: it receives the event and the open transaction, and must not end it."""
BulkHandler = Callable[[Sequence[Envelope], Connection], None]
"""Optional, for batched mode: the same logic for a run of claimed events of one type, in order."""

_INSERT = "INSERT INTO processed_message (consumer_name, message_id, occurred_at) "
_LEGACY = "NOT EXISTS (SELECT FROM processed_message_legacy l WHERE l.consumer_name = {} AND l.message_id = {})"
CLAIM = _INSERT + "VALUES (%s, %s, %s::timestamptz) ON CONFLICT DO NOTHING RETURNING message_id"  # markers by day
CLAIM_BESIDE_LEGACY = CLAIM.replace(  # while markers from before 0005 remain: about 60 µs more a claim
    "VALUES (%s, %s, %s::timestamptz)",
    f"SELECT * FROM (VALUES (%s, %s, %s::timestamptz)) AS m (c, id, at) WHERE {_LEGACY.format('m.c', 'm.id')}",
)
CLAIM_MANY = (  # consumer, ids, their occurred_at; consulting the markers from before 0005 too
    f"{_INSERT}SELECT k.c, m.id, m.at FROM (VALUES (%s)) AS k (c), unnest(%s::text[], %s::timestamptz[]) AS m (id, at) "
    f"WHERE {_LEGACY.format('k.c', 'm.id')} ON CONFLICT DO NOTHING RETURNING message_id"
)


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


def claim(connection: Connection, consumer_name: str, event: Envelope, begin: bytes, statement: str = CLAIM) -> bool:
    """Claim the marker: True when this transaction owns the message, False for a duplicate. First
    in a transaction, BEGIN and `statement` go as one simple query (values escaped by libpq)."""
    pgconn = connection.pgconn
    row = (consumer_name, event.message_id, event.occurred_at.isoformat())
    if pgconn.transaction_status != TransactionStatus.IDLE:
        return connection.execute(statement, row).fetchone() is not None
    escape, encoding = Escaping(pgconn), connection.info.encoding
    values = tuple(escape.escape_literal(text.encode(encoding)) for text in row)
    result = pgconn.exec_(begin + b"; " + statement.encode() % values)
    if result.status != ExecStatus.TUPLES_OK:
        message = (result.error_message or b"").decode(errors="replace").strip()
        sqlstate = result.error_field(DiagnosticField.SQLSTATE)
        if not sqlstate:
            raise psycopg.OperationalError(message or "the connection failed")
        raise psycopg.errors.lookup(sqlstate.decode())(message)
    return result.ntuples == 1


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
    acknowledges_first = False
    batches = True

    def attempt(self, run: Attempt, event: Envelope, handler: Handler) -> Outcome:
        """One attempt at one message: APPLIED once COMMIT returned, DUPLICATE once the claim found the
        marker committed; raises otherwise."""
        with transaction(run.connection):
            run.hit("before_claim")
            if not run.claim(event):  # the marker is another's, committed: nothing here to wait for
                run.connection.pgconn.send_query(b"COMMIT")  # its answer is read before the next use
                return Outcome.DUPLICATE
            run.hit("after_claim")
            call_handler(handler, event, run.connection)
            run.hit("before_commit")
        return Outcome.APPLIED

    def attempt_batch(self, run: Attempt, events: Sequence[Envelope], handlers: Sequence[Handler]) -> list[Outcome]:
        """Many messages, each with its own marker, in one transaction and one commit."""
        outcomes: list[Outcome] = []
        with transaction(run.connection):
            run.hit("before_claim")
            ids, times = [event.message_id for event in events], [event.occurred_at for event in events]
            unclaimed = {row[0] for row in run.connection.execute(CLAIM_MANY, (run.consumer_name, ids, times))}
            claimed: list[tuple[Envelope, Handler]] = []
            for event, handler in zip(events, handlers, strict=True):
                if event.message_id in unclaimed:
                    unclaimed.discard(event.message_id)  # a second copy in the batch is a duplicate
                    run.hit("after_claim")
                    claimed.append((event, handler))
                    outcomes.append(Outcome.APPLIED)
                else:
                    outcomes.append(Outcome.DUPLICATE)
            _apply_in_order(claimed, run)
            run.hit("before_commit")
        return outcomes


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
    return result in (Outcome.APPLIED, Outcome.DUPLICATE, Outcome.IGNORED)
