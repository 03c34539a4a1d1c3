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

import os
from typing import Any

import httpx

from effectively_once import remote_call
from effectively_once.faults import FaultPoints
from effectively_once.pending_work import Connection, ParkedWork, RedriveRefused, parked_listing, run_worker
from effectively_once.remote_call import Kind, RetryPolicy
from effectively_once.telemetry import NoTelemetry, Telemetry
from services import saga_contract as contract
from services.saga_events import record_event

AFTER_SEND = "notification.after_send_before_record"
POINTS = ("notification.before_send", AFTER_SEND)


def take_one(
    connection: Connection,
    faults: FaultPoints,
    client: httpx.Client,
    telemetry: Telemetry | None = None,
    policy: RetryPolicy | None = None,
) -> bool:
    policy = policy or RetryPolicy()
    told = telemetry or NoTelemetry()
    with connection.transaction():
        row = connection.execute(
            """SELECT order_id, kind, idempotency_key, recipient, subject, body, send_attempts, retrying_since, now()
                 FROM notification WHERE status = 'pending' AND next_attempt_at <= now()
                ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED"""
        ).fetchone()
        if row is None:
            return False
        order_id, kind, key, recipient, subject, body, attempts, retrying_since, now = row
        faults.context = {"keys": [order_id]}
        faults.hit("notification.before_send")
        try:
            response = client.post(
                "/v1/messages",
                headers={"Idempotency-Key": key},
                timeout=3.0,
                json={"recipient": recipient, "subject": subject, "body": body, "order_id": order_id},
            )
        except httpx.HTTPError as error:
            result = remote_call.of_error(error)
        else:
            result = remote_call.of_response(response)
        told.emit(
            "remote_call",
            key=order_id,
            service="mail",
            idempotency_key=key,
            call=attempts + 1,
            result=result.told,
        )
        faults.hit(AFTER_SEND)
        where = (order_id, kind)
        if result.kind is Kind.DONE:
            connection.execute(
                """UPDATE notification SET status = 'sent', send_attempts = send_attempts + 1, sent_at = now(),
                          last_error = NULL WHERE order_id = %s AND kind = %s""",
                where,
            )
            record_event(connection, contract.NOTIFICATION_SENT, order_id, {"order_id": order_id, "kind": kind})
            return True
        if result.kind is Kind.TRANSIENT and not policy.gives_up(retrying_since, now):
            connection.execute(
                """UPDATE notification SET send_attempts = send_attempts + 1, last_error = %s,
                          next_attempt_at = now() + make_interval(secs => %s)
                    WHERE order_id = %s AND kind = %s""",
                (result.reason[:500], policy.delay(attempts + 1), *where),
            )
            return True
        reason = policy.why_parked(result, "the mail service")
        connection.execute(
            """UPDATE notification SET status = 'failed', send_attempts = send_attempts + 1, last_error = %s,
                      failure_reason = %s, parked_at = now() WHERE order_id = %s AND kind = %s""",
            (result.reason[:500], reason, *where),
        )
        told.emit("parked", key=order_id, service="mail", idempotency_key=key, reason=reason)
        record_event(
            connection,
            contract.NOTIFICATION_FAILED,
            order_id,
            {"order_id": order_id, "kind": kind, "reason": reason},
        )
    return True


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


def main() -> None:
    client = httpx.Client(base_url=os.environ["MAIL_URL"])
    run_worker(
        "notification-dispatcher",
        lambda connection, faults, telemetry, policy: take_one(connection, faults, client, telemetry, policy),
        "notification",
        POINTS,
        ParkedNotifications(),
    )


if __name__ == "__main__":
    main()
