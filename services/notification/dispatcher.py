"""The notification dispatcher: send pending notifications to the mail sandbox, each with its own
idempotency key, then record what came back, with its event, in one transaction.

- 202: sent, NotificationSent.
- a refusal (a permanent 4xx), or transient failures (timeouts, 5xx, 408/409/425/429) for longer
  than the retry policy's maximum age: parked as failed with its reason, NotificationFailed; the
  order stays confirmed, its notification marked failed. An operator re-drives it (same key) once
  the cause is fixed.
- a transient failure younger than that: retried later, with backoff, under the same key.
"""

from __future__ import annotations

from typing import Any

import httpx
from psycopg.rows import dict_row
from pydantic import Field

from effectively_once import pending_work, remote_call
from effectively_once.faults import FaultPoints
from effectively_once.pending_work import (
    Connection,
    ParkedWork,
    RedriveRefused,
    Row,
    WorkerSettings,
    parked_listing,
    run_worker,
)
from effectively_once.process import load
from effectively_once.remote_call import CallResult, RetryPolicy
from effectively_once.telemetry import Telemetry
from services import saga_contract as contract
from services.saga_events import record_event

AFTER_SEND = "notification.after_send_before_record"
POINTS = ("notification.before_send", AFTER_SEND)


class Emails:
    """Pending notifications, sent to the mail sandbox (pending_work.PendingCall)."""

    service = "mail"
    described = "the mail service"
    before_call = "notification.before_send"
    after_call = AFTER_SEND

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def due(self, connection: Connection) -> Row | None:
        return (
            connection.cursor(row_factory=dict_row)
            .execute(
                """SELECT order_id, kind, idempotency_key, recipient, subject, body, send_attempts, retrying_since,
                      now() AS now
                 FROM notification WHERE status = 'pending' AND next_attempt_at <= now()
                ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED"""
            )
            .fetchone()
        )

    def call(self, row: Row, telemetry: Telemetry) -> tuple[CallResult, dict[str, Any]]:
        """One send under the row's key (the next take tries again)."""
        message = {k: row[k] for k in ("recipient", "subject", "body", "order_id")}
        try:
            response = self.client.post(
                "/v1/messages", headers={"Idempotency-Key": row["idempotency_key"]}, timeout=3.0, json=message
            )
        except httpx.HTTPError as error:
            result = remote_call.of_error(error)
        else:
            result = remote_call.of_response(response)
        telemetry.emit(
            "remote_call",
            key=row["order_id"],
            service=self.service,
            idempotency_key=row["idempotency_key"],
            call=row["send_attempts"] + 1,
            result=result.told,
        )
        return result, {}

    def done(self, connection: Connection, row: Row, answer: dict[str, Any]) -> None:
        connection.execute(
            """UPDATE notification SET status = 'sent', send_attempts = send_attempts + 1, sent_at = now(),
                      last_error = NULL WHERE order_id = %s AND kind = %s""",
            (row["order_id"], row["kind"]),
        )
        payload = {"order_id": row["order_id"], "kind": row["kind"]}
        record_event(connection, contract.NOTIFICATION_SENT, row["order_id"], payload)

    def refused(self, connection: Connection, row: Row, result: CallResult, answer: dict[str, Any]) -> bool:
        """The mail service's refusals are no business answer: each is parked."""
        return False

    def retry(self, connection: Connection, row: Row, result: CallResult, policy: RetryPolicy) -> None:
        connection.execute(
            """UPDATE notification SET send_attempts = send_attempts + 1, last_error = %s,
                      next_attempt_at = now() + make_interval(secs => %s)
                WHERE order_id = %s AND kind = %s""",
            (result.reason[:500], policy.delay(row["send_attempts"] + 1), row["order_id"], row["kind"]),
        )

    def park(self, connection: Connection, row: Row, result: CallResult, reason: str) -> None:
        connection.execute(
            """UPDATE notification SET status = 'failed', send_attempts = send_attempts + 1, last_error = %s,
                      failure_reason = %s, parked_at = now() WHERE order_id = %s AND kind = %s""",
            (result.reason[:500], reason, row["order_id"], row["kind"]),
        )
        payload = {"order_id": row["order_id"], "kind": row["kind"], "reason": reason}
        record_event(connection, contract.NOTIFICATION_FAILED, row["order_id"], payload)


def take_one(
    connection: Connection,
    faults: FaultPoints,
    client: httpx.Client,
    telemetry: Telemetry | None = None,
    policy: RetryPolicy | None = None,
) -> bool:
    """Send one due notification and record what came back; False when none was due."""
    return pending_work.take_one(connection, Emails(client), faults, telemetry, policy)


class ParkedNotifications(ParkedWork):
    """Parked emails: listed with their reason; a re-drive sends the same email, same key."""

    service = "notification"

    def list(self, connection: Connection) -> list[dict[str, Any]]:
        rows = connection.execute(
            """SELECT order_id, kind, idempotency_key, failure_reason, parked_at FROM notification
                WHERE status = 'failed' ORDER BY parked_at DESC LIMIT 500"""
        ).fetchall()
        return parked_listing(rows, "email", redrivable=True)

    def redrive(self, connection: Connection, order_id: str) -> dict[str, Any]:
        with connection.transaction():
            rows = connection.execute(
                """UPDATE notification SET status = 'pending', next_attempt_at = now(), retrying_since = now(),
                          parked_at = NULL, last_error = 'parked: ' || coalesce(failure_reason, '?')
                    WHERE order_id = %s AND status = 'failed' RETURNING kind, idempotency_key""",
                (order_id,),
            ).fetchall()
        if not rows:
            raise RedriveRefused(f"order {order_id} has no parked notification")
        return {"order_id": order_id, "redriven": [{"work": f"email {r[0]}", "idempotency_key": r[1]} for r in rows]}


class DispatcherSettings(WorkerSettings):
    """The dispatcher's settings: the pending-work worker's, and where the mail sandbox is."""

    MAIL_URL: str = Field(min_length=1)


def main() -> None:
    settings = load(DispatcherSettings)
    emails = Emails(httpx.Client(base_url=settings.MAIL_URL))
    run_worker(
        "notification-dispatcher",
        lambda connection, faults, telemetry, policy: pending_work.take_one(
            connection, emails, faults, telemetry, policy
        ),
        "notification",
        POINTS,
        ParkedNotifications(),
        settings,
    )


if __name__ == "__main__":
    main()
