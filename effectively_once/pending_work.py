"""The one worker behind the platform's executors: take one pending row, do its remote call,
record the result, again; sleep on LISTEN (or a short poll) when there is none. A service
configures it with a `PendingCall` (which rows, which call, how each ending is recorded).

A remote call cannot share a transaction with the database. So the work is a row committed by
the consumer (with its marker), the call carries an idempotency key derived from that row, and
the result is recorded, with its event, in the transaction that holds the row's lock. A crash
anywhere leaves the row pending, and the next take makes the same call with the same key.

Every take ends in one of three ways (effectively_once/remote_call.py tells them apart): done; retried
later with backoff (a transient failure younger than the policy's maximum age); or parked as
failed with its reason and a failure event (a refusal, or transient failures past that age). No
row waits for ever. Parked work is listed, and re-driven where the service allows it, through the
process's control endpoint (`GET /parked`, `POST /redrive`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

import psycopg
from pydantic import Field

from .faults import FaultPoints
from .process import ProcessSettings, load, serve, start, stop_on_signals
from .remote_call import CallResult, Kind, RetryPolicy
from .telemetry import NoTelemetry, Telemetry

log = logging.getLogger(__name__)

Connection = psycopg.Connection[Any]
Row = dict[str, Any]
"""A pending row as `PendingCall.due` read it (psycopg's dict_row), with at least `order_id`,
`idempotency_key`, `retrying_since` and `now` (the database's clock)."""
TakeOne = Callable[[Connection, FaultPoints, Telemetry, RetryPolicy], bool]
"""Handle one pending row in its own transaction (telling each remote call); False when there was
none due."""


class PendingCall(Protocol):
    """One kind of pending work: its due rows, its remote call, and how each ending is recorded.
    Every method but `call` runs in the transaction that holds the row's lock."""

    service: str
    """Who is called, as telemetry names it ("payment provider")."""
    described: str
    """Who is called, as a parked row's reason names it ("the payment provider")."""
    before_call: str
    """The fault point just before the call."""
    after_call: str
    """The fault point after the call, before its result is recorded."""

    def due(self, connection: Connection) -> Row | None:
        """Lock the next due row (`FOR UPDATE SKIP LOCKED`, so no two workers call for it at
        once) and return it; None when none is due."""
        ...

    def call(self, row: Row, telemetry: Telemetry) -> tuple[CallResult, dict[str, Any]]:
        """Make the remote call under the row's idempotency key, telling each try: the result
        and the answer's body ({} when none came)."""
        ...

    def done(self, connection: Connection, row: Row, answer: dict[str, Any]) -> None:
        """Record the call's success and its event."""
        ...

    def refused(self, connection: Connection, row: Row, result: CallResult, answer: dict[str, Any]) -> bool:
        """Record a refusal that is a business answer (a card declined) and its event, and return
        True; False for any other result, which is retried or parked."""
        ...

    def retry(self, connection: Connection, row: Row, result: CallResult, policy: RetryPolicy) -> None:
        """Record a transient failure and when to try again (backoff from the policy)."""
        ...

    def park(self, connection: Connection, row: Row, result: CallResult, reason: str) -> None:
        """Record the row as failed with `reason`, and its failure event."""
        ...


def take_one(
    connection: Connection,
    work: PendingCall,
    faults: FaultPoints,
    telemetry: Telemetry | None = None,
    policy: RetryPolicy | None = None,
) -> bool:
    """Handle one due row of `work` in its own transaction: done, refused, retried later or
    parked, so no row waits for ever; False when none was due. A crash anywhere leaves the row
    pending, and the next take calls again under the same key."""
    policy = policy or RetryPolicy()
    told = telemetry or NoTelemetry()
    with connection.transaction():
        row = work.due(connection)
        if row is None:
            return False
        faults.context = {"keys": [row["order_id"]]}
        faults.hit(work.before_call)
        result, answer = work.call(row, told)
        faults.hit(work.after_call)
        if result.kind is Kind.DONE:
            work.done(connection, row, answer)
        elif work.refused(connection, row, result, answer):
            pass
        elif result.kind is Kind.TRANSIENT and not policy.gives_up(row["retrying_since"], row["now"]):
            work.retry(connection, row, result, policy)
        else:
            reason = policy.why_parked(result, work.described)
            work.park(connection, row, result, reason)
            key = row["idempotency_key"]
            told.emit("parked", key=row["order_id"], service=work.service, idempotency_key=key, reason=reason)
    return True


class RedriveRefused(ValueError):
    """The parked work cannot be re-driven, and the message says why."""


class ParkedWork:
    """What an executor lets an operator see and do about its parked rows."""

    service: ClassVar[str]

    def list(self, connection: Connection) -> list[dict[str, Any]]:
        """The parked rows, newest first: order_id, work, idempotency_key, reason, parked_at,
        redrivable, why_not."""
        raise NotImplementedError

    def redrive(self, connection: Connection, order_id: str) -> dict[str, Any]:
        """Put the order's parked rows back to pending under their own keys, or raise RedriveRefused."""
        raise NotImplementedError


def parked_listing(rows: list[tuple[Any, ...]], work: str, redrivable: bool, why_not: str = "") -> list[dict[str, Any]]:
    """Parked rows (order_id, what, idempotency_key, failure_reason, parked_at) as ParkedWork.list answers."""
    return [
        {
            "order_id": order_id,
            "work": f"{work} {what}",
            "idempotency_key": key,
            "reason": reason,
            "parked_at": (parked_at or datetime.now(UTC)).isoformat(),
            "redrivable": redrivable,
            "why_not": why_not,
        }
        for order_id, what, key, reason, parked_at in rows
    ]


class ParkedControl:
    """The control endpoint's view of parked work: each request on a connection of its own."""

    def __init__(self, database_url: str, parked: ParkedWork) -> None:
        self.database_url, self.parked = database_url, parked

    def list(self) -> dict[str, Any]:
        with psycopg.connect(self.database_url, autocommit=True, connect_timeout=5) as connection:
            return {"service": self.parked.service, "parked": self.parked.list(connection)}

    def redrive(self, order_id: str) -> dict[str, Any]:
        with psycopg.connect(self.database_url, autocommit=True, connect_timeout=5) as connection:
            return {"service": self.parked.service, **self.parked.redrive(connection, order_id)}


class WorkerSettings(ProcessSettings):
    """What an executor process reads from its environment, with the default it runs with."""

    DATABASE_URL: str = Field(min_length=1)
    """The service's database, holding its pending work."""
    POLL_INTERVAL_SECONDS: float = Field(default=0.5, gt=0)
    """The fallback when no notification comes."""
    PENDING_WORK_MAX_AGE_SECONDS: float = Field(default=300.0, gt=0)
    """How long transient failures are retried (from the first try, or the last re-drive) before
    the work is parked."""
    PENDING_WORK_MAX_DELAY_SECONDS: float = Field(default=30.0, gt=0)
    """The longest wait between two tries."""

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_delay_seconds=self.PENDING_WORK_MAX_DELAY_SECONDS, max_age_seconds=self.PENDING_WORK_MAX_AGE_SECONDS
        )


def run_worker(
    name: str,
    take_one: TakeOne,
    channel: str,
    points: tuple[str, ...],
    parked: ParkedWork,
    settings: WorkerSettings | None = None,
) -> None:
    """Run an executor process until SIGTERM, with `settings` (by default: from the environment)."""
    settings = settings or load(WorkerSettings)
    policy = settings.retry_policy
    started = start(settings, name)
    telemetry, faults = started.telemetry, started.faults
    serve(started, settings, points=points, parked=ParkedControl(settings.DATABASE_URL, parked))
    stopping = threading.Event()
    stop_on_signals(stopping.set)
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
                    while take_one(work, faults, telemetry, policy) and not stopping.is_set():
                        pass
                    for _ in listen.notifies(timeout=settings.POLL_INTERVAL_SECONDS, stop_after=1):
                        pass
        except psycopg.OperationalError as error:
            failures += 1
            pause = min(30.0, 0.2 * 2**failures)
            log.warning("%s: database unavailable (%s); retrying in %.1f s", name, str(error).strip()[:200], pause)
            stopping.wait(pause)
    log.info("%s: stopped", name)
