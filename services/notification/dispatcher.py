"""The notification dispatcher: send pending notifications to the mail sandbox, each with its
own idempotency key, then mark it sent and emit NotificationSent in one transaction."""

from __future__ import annotations

import os

import httpx

from services import saga_contract as contract
from services.idempotent_consumer.envelope import Envelope
from services.idempotent_consumer.faults import FaultPoints
from services.idempotent_consumer.outbox import add_to_outbox
from services.idempotent_consumer.telemetry import NoTelemetry, Telemetry
from services.pending_work import Connection, run_worker

AFTER_SEND = "notification.after_send_before_record"
POINTS = ("notification.before_send", AFTER_SEND)


def take_one(
    connection: Connection, faults: FaultPoints, client: httpx.Client, telemetry: Telemetry | None = None
) -> bool:
    with connection.transaction():
        row = connection.execute(
            """SELECT order_id, kind, idempotency_key, recipient, subject, body FROM notification
                WHERE status = 'pending' AND next_attempt_at <= now()
                ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED"""
        ).fetchone()
        if row is None:
            return False
        order_id, kind, key, recipient, subject, body = row
        faults.context = {"keys": [order_id]}
        faults.hit("notification.before_send")
        try:
            response = client.post(
                "/v1/messages",
                headers={"Idempotency-Key": key},
                timeout=3.0,
                json={"recipient": recipient, "subject": subject, "body": body, "order_id": order_id},
            )
            problem = None if response.status_code == 202 else f"HTTP {response.status_code}"
            result = f"HTTP {response.status_code}"
        except httpx.HTTPError as error:
            problem = f"{type(error).__name__}: {error}"
            result = type(error).__name__
        (telemetry or NoTelemetry()).emit(
            "remote_call", key=order_id, service="mail", idempotency_key=key, call=1, result=result
        )
        faults.hit(AFTER_SEND)
        if problem:
            connection.execute(
                """UPDATE notification SET send_attempts = send_attempts + 1, last_error = %s,
                          next_attempt_at = now() + make_interval(secs => least(30, 0.5 * 2 ^ send_attempts))
                    WHERE order_id = %s AND kind = %s""",
                (problem, order_id, kind),
            )
            return True
        connection.execute(
            """UPDATE notification SET status = 'sent', send_attempts = send_attempts + 1, sent_at = now(),
                      last_error = NULL WHERE order_id = %s AND kind = %s""",
            (order_id, kind),
        )
        add_to_outbox(
            connection,
            Envelope.new(contract.NOTIFICATION_SENT, order_id, {"order_id": order_id, "kind": kind}),
            contract.TOPIC_OF[contract.NOTIFICATION_SENT],
        )
    return True


def main() -> None:
    client = httpx.Client(base_url=os.environ["MAIL_URL"])
    run_worker(
        "notification-dispatcher",
        lambda connection, faults, telemetry: take_one(connection, faults, client, telemetry),
        "notification",
        POINTS,
    )


if __name__ == "__main__":
    main()
