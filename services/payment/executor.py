"""The payment executor: charge pending attempts at the provider, record the result and its event.

The row stays locked (FOR UPDATE SKIP LOCKED) while the provider is called, so two executors
never call for the same attempt at once; and should they ever, the provider answers the second
with 409 or the stored response. What comes back decides (effectively_once/remote_call.py):

- 200: authorized, PaymentAuthorized.
- 402, a decline: the customer's card said no; declined, PaymentFailed (card_declined).
- any other refusal (a permanent 4xx), or transient failures (timeouts, 5xx, 408/409/425/429)
  for longer than the retry policy's maximum age: the attempt is parked as failed with its
  reason, and PaymentFailed says why, in the same transaction. The saga compensates (the order is
  cancelled, its stock released), so a parked payment is never re-driven: that would charge a
  cancelled order.
- a transient failure younger than that: retried later, with backoff, under the same key.
"""

from __future__ import annotations

import time
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
from effectively_once.remote_call import CallResult, Kind, RetryPolicy
from effectively_once.telemetry import NoTelemetry, Telemetry
from services import saga_contract as contract
from services.saga_events import record_event

AFTER_CALL = "payment.after_provider_call_before_record"
POINTS = ("payment.before_provider_call", AFTER_CALL)
CALL_TIMEOUT_SECONDS = 3.0
CALLS_PER_TAKE = 4
DECLINED = 402


def charge(
    client: httpx.Client, key: str, body: dict[str, Any], telemetry: Telemetry | None = None
) -> tuple[CallResult, dict[str, Any]]:
    """The provider's answer and its body ({} when none came): the first that is not transient,
    or the last transient one after a few quick tries. Each call is told (order, key, what came
    back), so an order's timeline shows a lost answer retried."""
    told = telemetry or NoTelemetry()
    result, answer = CallResult(Kind.TRANSIENT, None, "not called"), dict[str, Any]()
    for call in range(CALLS_PER_TAKE):
        try:
            response = client.post(
                "/v1/charges", json=body, headers={"Idempotency-Key": key}, timeout=CALL_TIMEOUT_SECONDS
            )
        except httpx.HTTPError as error:  # a timeout included: maybe charged, so ask again, same key
            result, answer = remote_call.of_error(error), {}
            shown = type(error).__name__
        else:
            result, answer = remote_call.of_response(response), _json(response)
            shown = f"HTTP {response.status_code}" + (
                ", replayed" if response.headers.get("Idempotent-Replayed") == "true" else ""
            )
        told.emit(
            "remote_call",
            key=body["order_id"],
            service="payment provider",
            idempotency_key=key,
            call=call + 1,
            result=shown if result.kind is not Kind.PERMANENT or result.status == DECLINED else result.told,
        )
        if result.kind is not Kind.TRANSIENT:
            return result, answer
        time.sleep(min(2.0, 0.1 * 2**call))
    return result, answer


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


class Charges:
    """Pending payment attempts, charged at the provider (pending_work.PendingCall)."""

    service = "payment provider"
    described = "the payment provider"
    before_call = "payment.before_provider_call"
    after_call = AFTER_CALL

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def due(self, connection: Connection) -> Row | None:
        return (
            connection.cursor(row_factory=dict_row)
            .execute(
                """SELECT order_id, attempt, idempotency_key, amount_cents, payment_method, customer_email,
                      provider_calls, retrying_since, now() AS now
                 FROM payment_attempt WHERE status = 'pending' AND next_attempt_at <= now()
                ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED"""
            )
            .fetchone()
        )

    def call(self, row: Row, telemetry: Telemetry) -> tuple[CallResult, dict[str, Any]]:
        body = {
            "order_id": row["order_id"],
            "amount_cents": row["amount_cents"],
            "payment_method": row["payment_method"],
        }
        return charge(self.client, row["idempotency_key"], body, telemetry)

    def done(self, connection: Connection, row: Row, answer: dict[str, Any]) -> None:
        connection.execute(
            """UPDATE payment_attempt SET status = 'authorized', provider_charge_id = %s,
                      provider_calls = provider_calls + 1, last_error = NULL, updated_at = now()
                WHERE order_id = %s AND attempt = %s""",
            (answer.get("id"), row["order_id"], row["attempt"]),
        )
        payload: dict[str, Any] = {
            "order_id": row["order_id"],
            "attempt": row["attempt"],
            "charge_id": answer["id"],
            "amount_cents": row["amount_cents"],
            "customer_email": row["customer_email"],
        }
        record_event(connection, contract.PAYMENT_AUTHORIZED, row["order_id"], payload)

    def refused(self, connection: Connection, row: Row, result: CallResult, answer: dict[str, Any]) -> bool:
        """A decline (402) is the customer's card saying no: declined, PaymentFailed."""
        if result.kind is not Kind.PERMANENT or result.status != DECLINED:
            return False
        reason = str((answer.get("error") or {}).get("code") or "card_declined")
        connection.execute(
            """UPDATE payment_attempt SET status = 'declined', provider_calls = provider_calls + 1,
                      last_error = %s, updated_at = now() WHERE order_id = %s AND attempt = %s""",
            (result.reason[:500], row["order_id"], row["attempt"]),
        )
        self._failed(connection, row, reason)
        return True

    def retry(self, connection: Connection, row: Row, result: CallResult, policy: RetryPolicy) -> None:
        connection.execute(
            """UPDATE payment_attempt SET provider_calls = provider_calls + %s, last_error = %s,
                      next_attempt_at = now() + make_interval(secs => %s), updated_at = now()
                WHERE order_id = %s AND attempt = %s""",
            (
                CALLS_PER_TAKE,
                result.reason[:500],
                policy.delay(row["provider_calls"] // CALLS_PER_TAKE + 1),
                row["order_id"],
                row["attempt"],
            ),
        )

    def park(self, connection: Connection, row: Row, result: CallResult, reason: str) -> None:
        connection.execute(
            """UPDATE payment_attempt SET status = 'failed', provider_calls = provider_calls + 1,
                      last_error = %s, failure_reason = %s, parked_at = now(), updated_at = now()
                WHERE order_id = %s AND attempt = %s""",
            (result.reason[:500], reason, row["order_id"], row["attempt"]),
        )
        self._failed(connection, row, reason)

    def _failed(self, connection: Connection, row: Row, reason: str) -> None:
        payload = {"order_id": row["order_id"], "attempt": row["attempt"], "reason": reason}
        record_event(connection, contract.PAYMENT_FAILED, row["order_id"], payload)


def take_one(
    connection: Connection,
    faults: FaultPoints,
    client: httpx.Client,
    telemetry: Telemetry | None = None,
    policy: RetryPolicy | None = None,
) -> bool:
    """Charge one due payment attempt and record what came back; False when none was due."""
    return pending_work.take_one(connection, Charges(client), faults, telemetry, policy)


WHY_NOT_REDRIVEN = (
    "the saga compensated: the order is cancelled and its stock released, so a re-drive "
    "would charge a cancelled order; the customer places the order again"
)


class ParkedPayments(ParkedWork):
    """Parked payments are listed with their reason; the saga compensated them already."""

    service = "payment"

    def list(self, connection: Connection) -> list[dict[str, Any]]:
        rows = connection.execute(
            """SELECT order_id, attempt, idempotency_key, failure_reason, parked_at FROM payment_attempt
                WHERE status = 'failed' ORDER BY parked_at DESC LIMIT 500"""
        ).fetchall()
        return parked_listing(rows, "payment attempt", redrivable=False, why_not=WHY_NOT_REDRIVEN)

    def redrive(self, connection: Connection, order_id: str) -> dict[str, Any]:
        raise RedriveRefused(
            f"the payment of order {order_id} is not re-driven: its order was cancelled and its stock released "
            "when the payment was parked, so a charge now would be for a cancelled order"
        )


class ExecutorSettings(WorkerSettings):
    """The payment executor's settings: the pending-work worker's, and where the provider is."""

    PAYMENT_PROVIDER_URL: str = Field(min_length=1)


def main() -> None:
    settings = load(ExecutorSettings)
    charges = Charges(httpx.Client(base_url=settings.PAYMENT_PROVIDER_URL))
    run_worker(
        "payment-executor",
        lambda connection, faults, telemetry, policy: pending_work.take_one(
            connection, charges, faults, telemetry, policy
        ),
        "payment_attempt",
        POINTS,
        ParkedPayments(),
        settings,
    )


if __name__ == "__main__":
    main()
