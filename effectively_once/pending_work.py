"""The loop behind the platform's executors: take one pending row, do its remote call, record
the result, again; sleep on LISTEN (or a short poll) when there is none.

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
from typing import Any, ClassVar

import psycopg
from pydantic import Field

from .faults import FaultPoints
from .process import ProcessSettings, load, serve, start, stop_on_signals
from .remote_call import RetryPolicy
from .telemetry import Telemetry

log = logging.getLogger(__name__)

Connection = psycopg.Connection[Any]
TakeOne = Callable[[Connection, FaultPoints, Telemetry, RetryPolicy], bool]
"""Handle one pending row in its own transaction (telling each remote call); False when there was
none due."""


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


def run_worker(name: str, take_one: TakeOne, channel: str, points: tuple[str, ...], parked: ParkedWork) -> None:
    """Run an executor process until SIGTERM."""
    settings = load(WorkerSettings)
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
