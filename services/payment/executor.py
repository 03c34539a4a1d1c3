"""The payment executor: charge pending attempts at the provider, record the result and its event.

The row stays locked (FOR UPDATE SKIP LOCKED) while the provider is called, so two executors
never call for the same attempt at once; and should they ever, the provider answers the second
with 409 or the stored response. Timeouts, 5xx and 409 are retried with the same key; after a
few, the attempt is left pending with a backoff, never abandoned.
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx

from services import saga_contract as contract
from services.idempotent_consumer.envelope import Envelope
from services.idempotent_consumer.faults import FaultPoints
from services.idempotent_consumer.outbox import add_to_outbox
from services.idempotent_consumer.telemetry import NoTelemetry, Telemetry
from services.pending_work import Connection, run_worker

AFTER_CALL = "payment.after_provider_call_before_record"
POINTS = ("payment.before_provider_call", AFTER_CALL)
CALL_TIMEOUT_SECONDS = 3.0
CALLS_PER_TAKE = 4


def charge(
    client: httpx.Client, key: str, body: dict[str, Any], telemetry: Telemetry | None = None
) -> tuple[int, dict[str, Any]] | str:
    """The provider's final answer (status, body), or why there was none after a few tries. Each
    call is told (order, key, what came back), so an order's timeline shows a lost answer retried."""
    told = telemetry or NoTelemetry()
    problem = "not called"
    for call in range(CALLS_PER_TAKE):
        try:
            response = client.post(
                "/v1/charges", json=body, headers={"Idempotency-Key": key}, timeout=CALL_TIMEOUT_SECONDS
            )
        except httpx.HTTPError as error:  # a timeout included: maybe charged, so ask again, same key
            problem = f"{type(error).__name__}: {error}"
            told.emit(
                "remote_call",
                key=body["order_id"],
                service="payment provider",
                idempotency_key=key,
                call=call + 1,
                result=type(error).__name__,
            )
        else:
            replayed = response.headers.get("Idempotent-Replayed") == "true"
            told.emit(
                "remote_call",
                key=body["order_id"],
                service="payment provider",
                idempotency_key=key,
                call=call + 1,
                result=f"HTTP {response.status_code}" + (", replayed" if replayed else ""),
            )
            if response.status_code < 500 and response.status_code != 409:
                return response.status_code, response.json()
            problem = f"HTTP {response.status_code}"
        time.sleep(min(2.0, 0.1 * 2**call))
    return problem


def take_one(
    connection: Connection, faults: FaultPoints, client: httpx.Client, telemetry: Telemetry | None = None
) -> bool:
    with connection.transaction():
        row = connection.execute(
            """SELECT order_id, attempt, idempotency_key, amount_cents, payment_method, customer_email
                 FROM payment_attempt WHERE status = 'pending' AND next_attempt_at <= now()
                ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED"""
        ).fetchone()
        if row is None:
            return False
        order_id, attempt, key, amount, method, email = row
        faults.context = {"keys": [order_id]}
        faults.hit("payment.before_provider_call")
        answer = charge(
            client, key, {"order_id": order_id, "amount_cents": amount, "payment_method": method}, telemetry
        )
        faults.hit(AFTER_CALL)
        if isinstance(answer, str):
            connection.execute(
                """UPDATE payment_attempt SET provider_calls = provider_calls + %s, last_error = %s,
                          next_attempt_at = now() + interval '2 seconds', updated_at = now()
                    WHERE order_id = %s AND attempt = %s""",
                (CALLS_PER_TAKE, answer, order_id, attempt),
            )
            return True
        status, body = answer
        authorized = status == 200
        connection.execute(
            """UPDATE payment_attempt SET status = %s, provider_charge_id = %s, provider_calls = provider_calls + 1,
                      last_error = %s, updated_at = now() WHERE order_id = %s AND attempt = %s""",
            (
                "authorized" if authorized else "declined",
                body.get("id"),
                None if authorized else str(body)[:500],
                order_id,
                attempt,
            ),
        )
        if authorized:
            event = Envelope.new(
                contract.PAYMENT_AUTHORIZED,
                order_id,
                {
                    "order_id": order_id,
                    "attempt": attempt,
                    "charge_id": body["id"],
                    "amount_cents": amount,
                    "customer_email": email,
                },
            )
        else:
            reason = body.get("error", {}).get("code") or f"HTTP {status}"
            event = Envelope.new(
                contract.PAYMENT_FAILED,
                order_id,
                {"order_id": order_id, "attempt": attempt, "reason": reason},
            )
        add_to_outbox(connection, event, contract.TOPIC_OF[event.type])
    return True


def main() -> None:
    client = httpx.Client(base_url=os.environ["PAYMENT_PROVIDER_URL"])
    run_worker(
        "payment-executor",
        lambda connection, faults, telemetry: take_one(connection, faults, client, telemetry),
        "payment_attempt",
        POINTS,
    )


if __name__ == "__main__":
    main()
